"""Kafka offsets as they appear in checkpoints, and the broker's earliest/latest offsets.

Spark's Kafka source stores ``{"topic": {"partition": next offset to read}}`` as each ``offsets/N`` line. The
broker look-up uses the Kafka source's fetch-confirmed offsets; it runs in the CLI process only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sparkonce.errors import BrokerError

__all__ = ["TopicPartition", "WatermarkFetcher", "fetch_watermarks", "kafka_offsets", "list_partitions"]

TopicPartition = tuple[str, int]
WatermarkFetcher = Callable[[Iterable[TopicPartition]], dict[TopicPartition, tuple[int, int]]]
"""Given topic-partitions, return ``{(topic, partition): (earliest, latest)}``; raises ``BrokerError``."""


def kafka_offsets(value: Any) -> dict[TopicPartition, int] | None:
    """Return ``{(topic, partition): offset}`` if ``value`` looks like a Kafka source offset, else
    ``None``."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[TopicPartition, int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict) or not partitions:
            return None
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                return None
            try:
                out[(str(topic), int(partition))] = offset
            except ValueError:
                return None
    return out


def _consumer(bootstrap: str, timeout_s: float) -> Any:
    try:
        from confluent_kafka import Consumer
    except ImportError as err:  # pragma: no cover - confluent-kafka is a dependency
        raise BrokerError("confluent-kafka is not installed") from err
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
    """Return ``{(topic, partition): (earliest, latest)}`` from the broker at ``bootstrap``.

    Raises:
        BrokerError: The broker is unreachable or does not know a partition.
    """
    from sparkonce.kafka.offsets import TopicPartition as KafkaPartition
    from sparkonce.kafka.planner import broker_offsets

    wanted = [(str(topic), int(partition)) for topic, partition in partitions]
    # broker_offsets confirms each end offset with a fetch: ListOffsets alone is wrong on the embedded broker.
    found = broker_offsets(bootstrap, [KafkaPartition(t, p) for t, p in wanted], timeout_ms=int(timeout_s * 1000))
    result: dict[TopicPartition, tuple[int, int]] = {}
    for topic, partition in wanted:
        offsets = found.get(KafkaPartition(topic, partition))
        if offsets is None:
            raise BrokerError(f"broker {bootstrap}: does not know partition {topic}-{partition}")
        result[(topic, partition)] = (int(offsets[0]), int(offsets[1]))
    return result


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
