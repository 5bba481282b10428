"""Spark Kafka source parity (issue 12 item 6) against the real embedded broker and a real SparkSession:
"latest" ends resolved when a batch read runs, stream-only options ignored on batch reads, timestamp starts and
ends, and ``minOffsetsPerTrigger`` with ``maxTriggerDelay``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.reader import kafka_schema
from sparkonce.kafka.source import KafkaStreamReader
from tests.fixtures_broker import EmbeddedBroker, numbered
from tests.integration.test_kafka_source import offsets_of, read_batch, read_stream, run_available_now

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.broker]

T0 = 1_700_000_000_000
"""Record i of a partition written by :func:`produce_timed` has timestamp ``T0 + 1000 * i``."""


def produce_timed(broker: EmbeddedBroker, topic: str, partition: int, count: int, *, start: int = 0) -> None:
    """``count`` records to ``partition`` with CreateTime ``T0 + 1000 * i`` (i from ``start``), in one batch."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 50, "log_level": 0}
    )
    for i in range(start, start + count):
        producer.produce(
            topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition, timestamp=T0 + 1000 * i
        )
    assert producer.flush(30) == 0


def stream_reader(broker: EmbeddedBroker, topic: str, **options: str) -> KafkaStreamReader:
    parsed = KafkaOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, **options})
    return KafkaStreamReader(parsed, kafka_schema(include_headers=False))


# -- batch reads: "latest" when the read runs ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [None, "latest", '{"T": {"0": -1, "1": 3}}'])
def test_each_execution_of_a_batch_dataframe_sees_the_current_end(
    spark: SparkSession, broker: EmbeddedBroker, ending: str | None
) -> None:
    """SPARK-30656: the same DataFrame run again after new records arrive reads them (latest ends only)."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(6), partition=0)
    broker.produce(topic, numbered(4, start=6), partition=1)
    options = {"subscribe": topic, "minPartitions": "4"}
    if ending is not None:
        options["endingOffsets"] = ending.replace('"T"', f'"{topic}"')
    df = read_batch(spark, broker, **options)
    first = [(0, o) for o in range(6)] + [(1, o) for o in range(4 if ending is None or ending == "latest" else 3)]
    assert offsets_of(df.collect()) == first

    broker.produce(topic, numbered(5, start=100), partition=0, linger_ms=50)
    broker.produce(topic, numbered(2, start=200), partition=1)
    second = offsets_of(df.collect())
    assert df.count() == len(second)
    if ending is None or ending == "latest":
        assert second == [(0, o) for o in range(11)] + [(1, o) for o in range(6)]
    else:  # partition 1 ends at a fixed offset
        assert second == [(0, o) for o in range(11)] + [(1, o) for o in range(3)]


def test_a_partition_empty_when_planned_is_read_by_later_executions(
    spark: SparkSession, broker: EmbeddedBroker
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(3), partition=0)
    df = read_batch(spark, broker, subscribe=topic)
    assert offsets_of(df.collect()) == [(0, 0), (0, 1), (0, 2)]
    broker.produce(topic, numbered(2, start=10), partition=1)
    assert offsets_of(df.collect()) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_stream_only_options_on_a_batch_read_are_ignored(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(40), partitions=2)
    df = read_batch(
        spark, broker, subscribe=topic, maxOffsetsPerTrigger="5", minOffsetsPerTrigger="2", maxTriggerDelay="1m"
    )
    assert offsets_of(df.collect()) == sorted((p, o) for p in range(2) for o in range(20))


# -- timestamps -------------------------------------------------------------------------------------------------------


def test_batch_read_between_timestamps(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=2)
    produce_timed(broker, topic, 0, 10)
    produce_timed(broker, topic, 1, 10)
    # Timestamps between records: start at the first record at or after, end before the first at or after.
    df = read_batch(spark, broker, subscribe=topic, startingTimestamp=str(T0 + 3500), endingTimestamp=str(T0 + 7000))
    assert offsets_of(df.collect()) == [(0, 4), (0, 5), (0, 6), (1, 4), (1, 5), (1, 6)]

    by_partition = read_batch(
        spark,
        broker,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0}, "1": {T0 + 8000}}}}}',
        endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 2000}, "1": {T0 + 99_000}}}}}',
    )
    # Partition 1's end has no record at or after it: the end is latest.
    assert offsets_of(by_partition.collect()) == [(0, 0), (0, 1), (1, 8), (1, 9)]


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_a_timestamp_start_without_a_match_fails_naming_the_option(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path, mode: str
) -> None:
    topic = broker.create_topic()
    produce_timed(broker, topic, 0, 5)
    if mode == "batch":
        with pytest.raises(AnalysisException, match="OptionError: option 'startingTimestamp'") as info:
            read_batch(spark, broker, subscribe=topic, startingTimestamp=str(T0 + 60_000)).collect()
    else:
        df = read_stream(spark, broker, subscribe=topic, startingTimestamp=str(T0 + 60_000))
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
        try:
            with pytest.raises(StreamingQueryException, match="OptionError: option 'startingTimestamp'") as info:
                query.awaitTermination(120)
        finally:
            query.stop()
    assert "'startingTimestamp'" in str(info.value) and f"no record of {topic}-0" in str(info.value)
    assert "startingOffsetsByTimestampStrategy=latest" in str(info.value)


def test_strategy_latest_starts_partitions_without_a_match_at_their_end(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    produce_timed(broker, topic, 0, 10)
    produce_timed(broker, topic, 1, 4)
    options = {
        "subscribe": topic,
        "startingTimestamp": str(T0 + 6000),
        "startingOffsetsByTimestampStrategy": "latest",
    }
    assert offsets_of(read_batch(spark, broker, **options).collect()) == [(0, 6), (0, 7), (0, 8), (0, 9)]
    rows, _ = run_available_now(read_stream(spark, broker, **options), tmp_path, "ts_latest")
    assert offsets_of(rows) == [(0, 6), (0, 7), (0, 8), (0, 9)]


def test_stream_by_timestamp_reads_from_the_first_matching_record(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    produce_timed(broker, topic, 0, 10)
    produce_timed(broker, topic, 1, 10)
    df = read_stream(
        spark,
        broker,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 7000}, "1": {T0}}}}}',
        maxOffsetsPerTrigger="5",
    )
    rows, sizes = run_available_now(df, tmp_path, "ts_stream")
    assert offsets_of(rows) == [(0, 7), (0, 8), (0, 9)] + [(1, o) for o in range(10)]
    assert sum(sizes) == 13 and max(sizes) <= 5


@pytest.mark.parametrize("strategy", ["error", "latest"])
def test_a_timestamp_start_is_planned_identically_when_batch_zero_reruns(broker: EmbeddedBroker, strategy: str) -> None:
    """Issue 13's trap: Spark asks ``initialOffset()`` again when it re-runs batch 0 after a crash; the
    timestamp start must give the same ranges, whatever was appended since (records with later timestamps too)."""
    topic = broker.create_topic(partitions=2)
    produce_timed(broker, topic, 0, 10)
    produce_timed(broker, topic, 1, 3)  # partition 1 has no record at or after T0 + 5000 ...
    options = {"startingTimestamp": str(T0 + 5000), "startingOffsetsByTimestampStrategy": strategy}
    if strategy == "error":
        options["startingTimestamp"] = str(T0 + 2000)
    first = stream_reader(broker, topic, **options)
    try:
        initial = first.initialOffset()
        produce_timed(broker, topic, 1, 4, start=20)  # ... until records arrive between initial offsets and the end
        end = first.latestOffset(initial, first.getDefaultReadLimit())
        planned = [p.range for p in first.partitions(initial, end)]
    finally:
        first.stop()
    produce_timed(broker, topic, 0, 5, start=30)  # the log grows while the driver is down
    produce_timed(broker, topic, 1, 5, start=40)

    restarted = stream_reader(broker, topic, **options)
    try:
        replanned = [p.range for p in restarted.partitions(restarted.initialOffset(), end)]
    finally:
        restarted.stop()
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    if strategy == "latest":
        # Partition 1's records 20-23 (offsets 3-6) arrived before batch 0's end and match: batch 0 reads them.
        assert planned == [OffsetRange(p0, 5, 10), OffsetRange(p1, 3, 7)]
    else:
        assert planned == [OffsetRange(p0, 2, 10), OffsetRange(p1, 2, 7)]
    assert replanned == planned


# -- minOffsetsPerTrigger / maxTriggerDelay ----------------------------------------------------------------------------


def latest_until(reader: KafkaStreamReader, start: dict[str, Any], limit: Any, timeout: float = 30.0) -> dict[str, Any]:
    """Ask for the next end until it differs from ``start`` (the delay has passed), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        end = reader.latestOffset(start, limit)
        if end != start:
            return end
        assert time.monotonic() < deadline, "the batch was never triggered"
        time.sleep(0.05)


@pytest.mark.parametrize("with_max", [False, True])
def test_min_offsets_per_trigger_holds_batches_back_until_enough_records_wait(
    broker: EmbeddedBroker, with_max: bool
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(4), partitions=2)
    options = {"startingOffsets": "earliest", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "1h"}
    if with_max:
        options["maxOffsetsPerTrigger"] = "100"
    reader = stream_reader(broker, topic, **options)
    try:
        limit = reader.getDefaultReadLimit()
        assert isinstance(limit, ReadMaxRows if with_max else ReadMinRows)
        # The first trigger always runs (as Spark: the delay is counted from the last batch, none yet).
        end0 = reader.latestOffset(reader.initialOffset(), limit)
        assert end0 == {topic: {"0": 2, "1": 2}}
        broker.produce(topic, numbered(6, start=10), partitions=2)
        assert reader.latestOffset(end0, limit) == end0  # 6 waiting < 10: no batch
        broker.produce(topic, numbered(4, start=20), partitions=2)
        assert reader.latestOffset(end0, limit) == {topic: {"0": 7, "1": 7}}  # 10 waiting: a batch
    finally:
        reader.stop()


def test_max_trigger_delay_releases_a_small_batch(broker: EmbeddedBroker) -> None:
    topic = broker.create_topic()
    broker.produce(topic, numbered(2), partition=0)
    reader = stream_reader(
        broker, topic, startingOffsets="earliest", minOffsetsPerTrigger="1000", maxTriggerDelay="200ms"
    )
    try:
        limit = reader.getDefaultReadLimit()
        end0 = reader.latestOffset(reader.initialOffset(), limit)
        broker.produce(topic, numbered(1, start=5), partition=0)
        assert latest_until(reader, end0, limit) == {topic: {"0": 3}}
    finally:
        reader.stop()
