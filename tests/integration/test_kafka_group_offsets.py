"""Consumer-group offsets for lag tools (issue 39 item 3, apache/spark#24613): after each batch the Kafka source
commits the batch's end offsets to its consumer group; lag tools read them; a restart never does.

Read back with the admin API's committed offsets (``AdminClient.list_consumer_group_offsets``) and with Kafka's own
``kafka-consumer-groups.sh --describe`` (its ``ConsumerGroupCommand``), against the embedded Apache Kafka broker.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkonce.kafka.group import group_id_for
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.watermarks import fetch_watermarks
from sparkonce_local.services.broker import describe_group
from tests.fixtures_broker import EmbeddedBroker, numbered

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def delta_offsets(table: Path) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) of a raw table, read with delta-rs (independently of sparkonce), sorted."""
    from deltalake import DeltaTable

    data = DeltaTable(str(table)).to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pylist()
    return sorted((r["topic"], r["partition"], r["offset"]) for r in data)


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets per (topic, partition), as lag tools read them (unset ones left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:  # a broker just started loads its group coordinator first (COORDINATOR_LOAD_IN_PROGRESS)
        (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        try:
            result = future.result(timeout=30)
            break
        except KafkaException as err:
            loading = err.args[0].code() in (
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
            )
            if not loading or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return {(p.topic, p.partition): p.offset for p in result.topic_partitions if p.offset >= 0}


def _lag(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition: the latest offset minus the group's committed offset (kafka_consumergroup_lag)."""
    from sparkonce.kafka.offsets import TopicPartition

    committed = committed_offsets(bootstrap, group)
    marks = fetch_watermarks(bootstrap, [TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: high - committed.get((topic, tp.partition), 0) for tp, (_, high) in marks.items()}


def _wait_for(read, expected, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``read()`` until it returns ``expected`` (the async commit lands shortly after the query ends)."""
    deadline = time.monotonic() + timeout
    while (got := read()) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {got} instead of {expected}")
        time.sleep(0.2)


def _run(spark: SparkSession, broker: EmbeddedBroker, topic: str, ck: Path, table: Path, **options: str) -> None:
    reader = (
        spark.readStream.format("sparkonce.kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .select("topic", "partition", "offset")
        .writeStream.format("delta")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()


def test_each_batch_commits_its_end_offsets_and_the_lag_shrinks_to_zero(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(30), partitions=2)
    group = group_id_for(KafkaOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}))
    assert group.startswith("spark-kafka-source-")
    assert committed_offsets(broker.bootstrap, group) == {}

    _run(spark, broker, topic, tmp_path / "ck", tmp_path / "raw")
    _wait_for(lambda: _lag(broker.bootstrap, group, topic, 2), {0: 0, 1: 0}, "the group's lag to reach 0")

    broker.produce(topic, numbered(20, start=30), partitions=2)
    assert _lag(broker.bootstrap, group, topic, 2) == {0: 10, 1: 10}  # the group stays where the stream is
    _run(spark, broker, topic, tmp_path / "ck", tmp_path / "raw")
    _wait_for(lambda: _lag(broker.bootstrap, group, topic, 2), {0: 0, 1: 0}, "the lag to shrink to 0 again")
    assert committed_offsets(broker.bootstrap, group) == {(topic, 0): 25, (topic, 1): 25}

    # Informational only: the group's offsets moved back to 0 change nothing; the restart reads from its checkpoint.
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    rewinder = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    rewinder.commit(offsets=[KafkaTopicPartition(topic, p, 0) for p in range(2)], asynchronous=False)
    rewinder.close()
    broker.produce(topic, numbered(4, start=50), partitions=2)
    _run(spark, broker, topic, tmp_path / "ck", tmp_path / "raw")
    offsets = delta_offsets(tmp_path / "raw")
    assert offsets == sorted((topic, p, o) for p in range(2) for o in range(27))  # each offset exactly once
    _wait_for(lambda: committed_offsets(broker.bootstrap, group), {(topic, 0): 27, (topic, 1): 27}, "the new end")


def test_kafka_group_id_names_the_group_and_the_commits_can_be_switched_off(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, numbered(12), partition=0)
    named = f"lag-tools-{topic}"
    _run(spark, broker, topic, tmp_path / "ck1", tmp_path / "t1", **{"kafka.group.id": named})
    _wait_for(lambda: committed_offsets(broker.bootstrap, named), {(topic, 0): 12}, "the named group's offsets")

    off = f"off-{topic}"
    switched_off = {"kafka.group.id": off, "commitOffsetsToGroup": "false"}
    _run(spark, broker, topic, tmp_path / "ck2", tmp_path / "t2", **switched_off)
    assert len(delta_offsets(tmp_path / "t2")) == 12
    assert committed_offsets(broker.bootstrap, off) == {}


def test_kafkas_consumer_groups_tool_sees_the_lag_shrink_to_zero(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """``kafka-consumer-groups.sh --describe``, Kafka's own lag tool, sees the stream: a group it does not know
    before the first batch, then each partition's committed offset, log end offset and lag, which a backlog raises
    and the next run brings back to 0."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(20), partitions=2)
    group = f"lag-tool-{topic}"

    def described() -> list[tuple[int, int | None, int | None, int | None]]:
        rows = describe_group(broker.bootstrap, group)
        assert {r.topic for r in rows} <= {topic}
        return [(r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows]

    assert described() == []
    _run(spark, broker, topic, tmp_path / "ck", tmp_path / "raw", **{"kafka.group.id": group})
    _wait_for(described, [(0, 10, 10, 0), (1, 10, 10, 0)], "the tool to show the group at lag 0")

    broker.produce(topic, numbered(10, start=20), partitions=2)
    assert described() == [(0, 10, 15, 5), (1, 10, 15, 5)]  # a backlog: the tool shows the stream's lag
    _run(spark, broker, topic, tmp_path / "ck", tmp_path / "raw", **{"kafka.group.id": group})
    _wait_for(described, [(0, 15, 15, 0), (1, 15, 15, 0)], "the lag to shrink to 0 in the tool")
    assert len(delta_offsets(tmp_path / "raw")) == 30
