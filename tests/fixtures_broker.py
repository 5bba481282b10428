"""The session-wide embedded Kafka broker (Apache Kafka, KRaft, one node) for integration tests.

Register with ``pytest_plugins = ["tests.fixtures_broker"]``. The ``broker`` fixture starts one broker per test
session (so one per pytest-xdist worker: a JVM start costs seconds) in a temporary state directory and stops it at
the end; tests create their own uniquely named topics. Tests that kill or restart a broker start their own.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sparkonce_local.services.broker import BrokerInfo, create_topic, delete_topic, start_broker, stop_broker

Record = tuple[bytes | None, bytes | None]
"""(key, value) of one record to produce."""


@dataclass
class EmbeddedBroker:
    """A running test broker: its bootstrap address and helpers to make topics and records."""

    info: BrokerInfo
    _names: Iterator[int] = field(default_factory=lambda: itertools.count())

    @property
    def bootstrap(self) -> str:
        return self.info.bootstrap

    def unique_topic(self, prefix: str = "t") -> str:
        """A topic name no other test uses."""
        return f"{prefix}-{next(self._names)}-{uuid.uuid4().hex[:6]}"

    def create_topic(self, name: str | None = None, partitions: int = 1) -> str:
        """Create a topic (a fresh unique name when ``name`` is None) and return its name."""
        topic = name or self.unique_topic()
        create_topic(self.bootstrap, topic, partitions=partitions)
        return topic

    def delete_topic(self, name: str) -> None:
        delete_topic(self.bootstrap, name)

    def delete_records(self, topic: str, before: dict[int, int]) -> None:
        """Delete each partition's records below ``before[partition]`` (Kafka's DeleteRecords): its log start
        offset moves up, as when retention deletes old segments."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        futures = admin.delete_records([TopicPartition(topic, p, offset) for p, offset in before.items()])
        for future in futures.values():
            future.result(timeout=30)

    def produce(
        self,
        topic: str,
        records: Iterable[Record],
        *,
        partition: int | None = None,
        partitions: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        linger_ms: int = 5,
        batch_num_messages: int = 10_000,
    ) -> int:
        """Produce ``records`` and wait for every delivery; return how many were written.

        Records go to ``partition``, or round-robin over ``partitions`` partitions, or by key. A large
        ``linger_ms`` with a ``batch_num_messages`` above 1 writes multi-record batches.
        """
        from confluent_kafka import Producer

        errors: list[str] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": linger_ms,
                "batch.num.messages": batch_num_messages,
                "log_level": 0,
            }
        )
        count = 0
        for index, (key, value) in enumerate(records):
            kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            elif partitions is not None:
                kwargs["partition"] = index % partitions
            if headers is not None:
                kwargs["headers"] = list(headers)
            producer.produce(topic, **kwargs)
            producer.poll(0)
            count += 1
        remaining = producer.flush(30)
        assert remaining == 0, f"{remaining} records not delivered to {topic}"
        assert not errors, f"delivery failed: {errors[:3]}"
        return count


def numbered(count: int, *, start: int = 0) -> list[Record]:
    """``count`` records with keys ``k<i>`` and values ``v<i>``."""
    return [(f"k{i}".encode(), f"v{i}".encode()) for i in range(start, start + count)]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    state_dir: Path = tmp_path_factory.mktemp("broker")
    info = start_broker(state_dir=state_dir)
    try:
        yield EmbeddedBroker(info)
    finally:
        stop_broker(state_dir=state_dir)
