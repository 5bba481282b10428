"""The broker's earliest and latest offsets, and a topic's partitions, for ``doctor`` and ``verify``.

Offsets use the one Kafka offsets model, :mod:`sparkonce.kafka.offsets`. Runs on the driver (or in the CLI process),
never on executors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sparkonce.errors import BrokerError
from sparkonce.extras import require
from sparkonce.kafka.offsets import TopicPartition

__all__ = ["WatermarkFetcher", "fetch_watermarks", "list_partitions"]

WatermarkFetcher = Callable[[Iterable[TopicPartition]], dict[TopicPartition, tuple[int, int]]]
"""Given topic-partitions, return ``{TopicPartition: (earliest, latest)}``; raises ``BrokerError``."""


def _consumer(bootstrap: str, timeout_s: float) -> Any:
    require("kafka", "reading Kafka watermarks")
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sparkonce-doctor",
            "enable.auto.commit": False,
            "socket.timeout.ms": int(timeout_s * 1000),
            "session.timeout.ms": max(6000, int(timeout_s * 1000)),
        }
    )


def fetch_watermarks(
    bootstrap: str, partitions: Iterable[TopicPartition], *, timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """Return ``{TopicPartition: (earliest, latest)}`` from the broker at ``bootstrap``.

    Raises:
        BrokerError: The broker is unreachable or does not know a partition.
    """
    from sparkonce.kafka.planner import broker_offsets

    wanted = sorted(set(partitions))
    # broker_offsets confirms each end offset with a fetch: ListOffsets alone is wrong on the embedded broker.
    found = broker_offsets(bootstrap, wanted, timeout_ms=int(timeout_s * 1000))
    missing = [str(tp) for tp in wanted if tp not in found]
    if missing:
        raise BrokerError(f"broker {bootstrap}: does not know partition(s) {', '.join(missing)}")
    return {tp: (int(found[tp][0]), int(found[tp][1])) for tp in wanted}


def list_partitions(bootstrap: str, topic: str, *, timeout_s: float = 10.0) -> list[int]:
    """Return the partition ids of ``topic``.

    Raises:
        BrokerError: The broker is unreachable or the topic does not exist.
    """
    from confluent_kafka import KafkaException

    consumer = _consumer(bootstrap, timeout_s)
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as err:
            raise BrokerError(f"broker {bootstrap}: cannot list topic {topic!r}: {err}") from err
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            reason = info.error if info is not None and info.error is not None else "no such topic"
            raise BrokerError(f"broker {bootstrap}: topic {topic!r}: {reason}")
        return sorted(info.partitions)
    finally:
        consumer.close()
