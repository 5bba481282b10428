"""The ``sparkonce.kafka`` source against the real embedded broker and a real SparkSession."""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException

from sparkonce import crash
from sparkonce.errors import BrokerError, SourceOffsetError
from sparkonce.kafka.isolated import read_range
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import OffsetPlanner, broker_offsets
from sparkonce.kafka.reader import BATCH_ROWS, ReadSettings, kafka_schema
from sparkonce.kafka.source import KafkaStreamReader
from sparkonce_local.services.broker import free_port, start_broker, stop_broker
from tests.fixtures_broker import EmbeddedBroker, numbered

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = [pytest.mark.spark, pytest.mark.broker]

FORMAT = "sparkonce.kafka"


def read_batch(spark: SparkSession, broker: EmbeddedBroker, **options: str) -> DataFrame:
    reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_stream(spark: SparkSession, broker: EmbeddedBroker, **options: str) -> DataFrame:
    reader = spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def offsets_of(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((row["partition"], row["offset"]) for row in rows)


def run_available_now(df: DataFrame, tmp_path: Path, name: str) -> tuple[list[Any], list[int]]:
    """Run ``df`` to a memory sink with the availableNow trigger; return its rows and the batch sizes."""
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "availableNow query did not finish"
        assert query.exception() is None, query.exception()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
        rows = df.sparkSession.table(name).collect()
    finally:
        query.stop()
    return rows, sizes


def wait_for_status(query: StreamingQuery, message: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while query.status["message"] != message:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"query status stayed {query.status!r}"
        time.sleep(0.05)


@pytest.fixture
def memory_query(spark: SparkSession, tmp_path: Path) -> Iterator[Any]:
    """Start streams to memory sinks (processing-time trigger); stop them all after the test."""
    started: list[StreamingQuery] = []

    def start(df: DataFrame, name: str) -> StreamingQuery:
        query = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
            .start()
        )
        started.append(query)
        return query

    yield start
    for query in started:
        query.stop()


# -- batch reads ----------------------------------------------------------------------------------------------------


def test_batch_read_has_sparks_schema_and_every_record(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=3)
    broker.produce(topic, numbered(90), partitions=3)
    df = read_batch(spark, broker, subscribe=topic)
    assert df.schema == kafka_schema(include_headers=False)
    assert "headers" not in df.columns
    rows = df.collect()
    assert offsets_of(rows) == sorted((p, o) for p in range(3) for o in range(30))
    assert sorted(row["value"] for row in rows) == sorted(f"v{i}".encode() for i in range(90))
    by_value = {row["value"]: row for row in rows}
    assert by_value[b"v4"]["key"] == b"k4" and by_value[b"v4"]["topic"] == topic
    assert by_value[b"v4"]["partition"] == 4 % 3
    assert all(row["timestamp"] is not None and row["timestampType"] == 0 for row in rows)


def test_headers_column(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic()
    broker.produce(topic, numbered(3), partition=0, headers=[("h1", b"x"), ("h2", None)])
    broker.produce(topic, numbered(1, start=3), partition=0)
    df = read_batch(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema == kafka_schema(include_headers=True)
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert [[(h["key"], h["value"]) for h in row["headers"]] for row in rows[:3]] == [[("h1", b"x"), ("h2", None)]] * 3
    assert rows[3]["headers"] is None


def test_batch_read_between_starting_and_ending_offsets(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(40), partitions=2)
    df = read_batch(
        spark,
        broker,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 3, "1": -2}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 8, "1": -1}}}}',
    )
    assert offsets_of(df.collect()) == [(0, o) for o in range(3, 8)] + [(1, o) for o in range(20)]


@pytest.mark.parametrize(
    ("ending", "problem"),
    [('{"T": {"0": 500}}', "beyond its last offset 10"), ('{"T": {"0": 2}}', "before its start 4")],
    ids=["beyond-end", "before-start"],
)
def test_batch_ending_offsets_out_of_range_fail_naming_the_option(
    spark: SparkSession, broker: EmbeddedBroker, ending: str, problem: str
) -> None:
    topic = broker.create_topic()
    broker.produce(topic, numbered(10), partition=0)
    # An end before its start fails at load(), as in Spark; an end beyond the last offset when planning the read.
    with pytest.raises(AnalysisException, match="OptionError: option 'endingOffsets'") as info:
        read_batch(
            spark,
            broker,
            subscribe=topic,
            startingOffsets=f'{{"{topic}": {{"0": 4}}}}',
            endingOffsets=ending.replace('"T"', f'"{topic}"'),
        ).collect()
    assert "'endingOffsets'" in str(info.value) and problem in str(info.value)


def test_batch_read_with_assign_reads_only_assigned_partitions(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=3)
    broker.produce(topic, numbered(30), partitions=3)
    df = read_batch(spark, broker, assign=f'{{"{topic}": [2, 0]}}')
    assert {row["partition"] for row in df.collect()} == {0, 2}


def test_min_partitions_splits_ranges(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(600), partitions=2)
    df = read_batch(spark, broker, subscribe=topic, minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    assert offsets_of(df.collect()) == sorted((p, o) for p in range(2) for o in range(300))


# -- the ListOffsets quirk --------------------------------------------------------------------------------------------


def test_end_offsets_confirmed_by_fetch_see_every_record_of_multi_record_batches(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    # linger + batch.num.messages make the producer write multi-record batches; the last one of each partition
    # is where ListOffsets(latest) of some Kafka-compatible brokers (tansu) falls short. Kafka answers it right.
    broker.produce(topic, numbered(1003), partitions=2, linger_ms=50, batch_num_messages=100)
    true_end = {TopicPartition(topic, 0): 502, TopicPartition(topic, 1): 501}

    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}
    confirmed = OffsetPlanner(KafkaOptions.parse({**options, "confirmLatestOffsets": "true"}))
    unconfirmed = OffsetPlanner(KafkaOptions.parse(options))  # the default: ListOffsets as Kafka answers it
    try:
        assert confirmed.latest(confirmed.discover()) == true_end
        assert unconfirmed.latest(unconfirmed.discover()) == true_end
    finally:
        confirmed.close()
        unconfirmed.close()

    assert broker_offsets(broker.bootstrap, true_end) == {tp: (0, end) for tp, end in true_end.items()}
    assert read_batch(spark, broker, subscribe=topic).count() == 1003
    rows, _ = run_available_now(
        read_stream(spark, broker, subscribe=topic, startingOffsets="earliest"), tmp_path, "quirk"
    )
    assert offsets_of(rows) == sorted((tp.partition, o) for tp, end in true_end.items() for o in range(end))


def test_a_planner_whose_confirming_fetch_dies_ends_the_batch_at_list_offsets_and_confirms_the_rest_next(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The confirming fetch (confirmLatestOffsets=true) runs in a forked child (a librdkafka crash on a topic
    # deleted meanwhile costs the planning its confirmation, not the planner). Here that child dies once (crash
    # point, target process): that planning ends at the ListOffsets answers, an end no later than the true one
    # (on Kafka the true one), and the next planning confirms.
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(1003), partitions=2, linger_ms=50, batch_num_messages=100)
    true_end = {TopicPartition(topic, 0): 502, TopicPartition(topic, 1): 501}
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "confirmLatestOffsets": "true"}
    unconfirmed = OffsetPlanner(KafkaOptions.parse({**options, "confirmLatestOffsets": "false"}))
    try:
        listed = unconfirmed.latest(unconfirmed.discover())
    finally:
        unconfirmed.close()
    assert listed == true_end

    record = tmp_path / "crashes.jsonl"
    monkeypatch.setenv(crash.ENV_POINT, "kafka_planner_confirm#1")
    monkeypatch.setenv(crash.ENV_TARGET, "process")
    monkeypatch.setenv(crash.ENV_HITS_DIR, str(tmp_path))
    monkeypatch.setenv(crash.ENV_RECORD, str(record))
    caplog.set_level("WARNING", logger="sparkonce.kafka.planner")
    planner = OffsetPlanner(KafkaOptions.parse(options))
    try:
        partitions = planner.discover()
        assert planner.latest(partitions) == listed  # the child died: the ListOffsets answers
        assert planner.latest(partitions) == true_end  # confirmed by the next planning's child
    finally:
        planner.close()
    fired = crash.read_crash_records(str(record))
    assert [(r.point, r.target) for r in fired] == [("kafka_planner_confirm", "process")]
    assert os.getpid() not in {r.pid for r in fired}  # the child died, not the planner
    assert "crashed (SIGKILL) (a topic deleted meanwhile?); this batch ends at the ListOffsets answers" in caplog.text


# -- stream planning across a restart -------------------------------------------------------------------------------


@pytest.mark.parametrize("starting", ["latest", "earliest", '{"T": {"0": -1, "1": -2}}'])
def test_batch_zero_is_planned_identically_after_a_restart(broker: EmbeddedBroker, starting: str) -> None:
    """Spark re-runs an uncommitted batch 0 with a fresh ``initialOffset()``: the ranges must not change."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(20), partitions=2)
    options = KafkaOptions.parse(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": starting.replace('"T"', f'"{topic}"'),
            "maxOffsetsPerTrigger": "8",
        }
    )
    schema = kafka_schema(include_headers=False)
    first = KafkaStreamReader(options, schema)
    try:
        initial = first.initialOffset()
        end = first.latestOffset(initial, first.getDefaultReadLimit())  # what Spark checkpoints in offsets/0
        planned = [p.range for p in first.partitions(initial, end)]
    finally:
        first.stop()
    broker.produce(topic, numbered(10, start=20), partitions=2)  # the log grows while the driver is down

    restarted = KafkaStreamReader(options, schema)
    try:
        replanned = [p.range for p in restarted.partitions(restarted.initialOffset(), end)]
    finally:
        restarted.stop()
    assert replanned == planned
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    expected = {
        "latest": [],  # "latest" is resolved into batch 0's end: batch 0 reads nothing
        "earliest": [OffsetRange(p0, 0, 4), OffsetRange(p1, 0, 4)],
        '{"T": {"0": -1, "1": -2}}': [OffsetRange(p1, 0, 8)],
    }[starting]
    assert planned == expected


# -- streaming ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("starting", "expected"),
    [
        ("earliest", [(0, o) for o in range(10)] + [(1, o) for o in range(10)]),
        ('{"T": {"0": 4, "1": -2}}', [(0, o) for o in range(4, 10)] + [(1, o) for o in range(10)]),
        ('{"T": {"0": -1, "1": 7}}', [(1, 7), (1, 8), (1, 9)]),
    ],
    ids=["earliest", "json-specific-and-earliest", "json-latest-and-specific"],
)
def test_streaming_starting_offsets(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path, starting: str, expected: list[tuple[int, int]]
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(20), partitions=2)
    df = read_stream(spark, broker, subscribe=topic, startingOffsets=starting.replace('"T"', f'"{topic}"'))
    rows, _ = run_available_now(df, tmp_path, f"start_{abs(hash(starting))}")
    assert offsets_of(rows) == expected


def test_streaming_starting_offsets_latest_reads_only_new_records(
    spark: SparkSession, broker: EmbeddedBroker, memory_query: Any
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(20), partitions=2)
    query = memory_query(read_stream(spark, broker, subscribe=topic, startingOffsets="latest"), "latest")
    wait_for_status(query, "Waiting for data to arrive")
    broker.produce(topic, numbered(6, start=100), partitions=2)
    query.processAllAvailable()
    rows = spark.table("latest").collect()
    assert sorted(row["value"] for row in rows) == sorted(f"v{i}".encode() for i in range(100, 106))
    assert offsets_of(rows) == [(0, 10), (0, 11), (0, 12), (1, 10), (1, 11), (1, 12)]


def test_max_offsets_per_trigger_caps_every_batch(spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(100), partitions=2)
    df = read_stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    rows, sizes = run_available_now(df, tmp_path, "capped")
    assert sizes == [20, 20, 20, 20, 20]
    assert offsets_of(rows) == sorted((p, o) for p in range(2) for o in range(50))


def test_trigger_once_reads_all_available_despite_max_offsets(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(100), partitions=2)
    df = read_stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    query = (
        df.writeStream.format("memory")
        .queryName("once")
        .option("checkpointLocation", str(tmp_path / "ck-once"))
        .trigger(once=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [100]


def test_new_partitions_are_read_from_earliest(spark: SparkSession, broker: EmbeddedBroker, memory_query: Any) -> None:
    prefix = broker.unique_topic("np")
    first = broker.create_topic(f"{prefix}-a", partitions=1)
    broker.produce(first, numbered(5), partition=0)
    query = memory_query(
        read_stream(spark, broker, subscribePattern=f"{prefix}-.*", startingOffsets="latest"), "newparts"
    )
    wait_for_status(query, "Waiting for data to arrive")
    second = broker.create_topic(f"{prefix}-b", partitions=2)
    broker.produce(second, numbered(8), partitions=2)
    broker.produce(first, numbered(2, start=50), partition=0)
    query.processAllAvailable()
    rows = spark.table("newparts").collect()
    got = sorted((row["topic"], row["partition"], row["offset"]) for row in rows)
    assert got == [(first, 0, 5), (first, 0, 6)] + [(second, p, o) for p in range(2) for o in range(4)]


# -- data loss ------------------------------------------------------------------------------------------------------


def _to_parquet(df: DataFrame, out: Path, ck: Path) -> StreamingQuery:
    return (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(out))
    )


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fails", "goes-on"])
@pytest.mark.parametrize("change", ["recreated", "deleted"])
def test_data_loss_when_the_topic_changes_under_the_checkpoint(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path, fail_on_data_loss: bool, change: str
) -> None:
    topic = broker.create_topic()
    broker.produce(topic, numbered(20), partition=0)
    out, ck = tmp_path / "out", tmp_path / "ck"
    options = {"subscribe": topic, "startingOffsets": "earliest", "failOnDataLoss": str(fail_on_data_loss).lower()}
    first = _to_parquet(read_stream(spark, broker, **options), out, ck)
    assert first.awaitTermination(120) and first.exception() is None
    assert spark.read.parquet(str(out)).count() == 20

    # The checkpoint says "next: offset 20 of partition 0"; the topic is deleted (and recreated with 5 records).
    broker.delete_topic(topic)
    if change == "recreated":
        broker.create_topic(topic)
        broker.produce(topic, numbered(5, start=100), partition=0)

    second = _to_parquet(read_stream(spark, broker, **options), out, ck)
    old = sorted(f"v{i}".encode() for i in range(20))
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match="SourceOffsetError: data loss") as info:
            second.awaitTermination(120)
        missing = "offsets [5, 20) are gone" if change == "recreated" else "offsets from 20 are gone"
        assert f"data loss in topic '{topic}' partition 0: {missing}" in str(info.value)
        assert sorted(row["value"] for row in spark.read.parquet(str(out)).collect()) == old
    else:
        assert second.awaitTermination(120) and second.exception() is None
        values = sorted(row["value"] for row in spark.read.parquet(str(out)).collect())
        new = [f"v{i}".encode() for i in range(100, 105)] if change == "recreated" else []
        assert values == sorted(old + new)


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fails", "goes-on"])
def test_executor_detects_records_gone_after_planning(broker: EmbeddedBroker, fail_on_data_loss: bool) -> None:
    """A range planned before the topic shrank: the executor's read fails or ends, it never hangs."""
    topic = broker.create_topic()
    broker.produce(topic, numbered(3), partition=0)
    settings = ReadSettings(
        client_config={"bootstrap.servers": broker.bootstrap},
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=30_000,
    )
    stale = OffsetRange(TopicPartition(topic, 0), 5, 20)
    schema = kafka_schema(include_headers=False)
    if fail_on_data_loss:
        with pytest.raises(SourceOffsetError, match=r"offsets \[5, 20\) are gone: .* beyond the partition's end 3"):
            list(read_range(settings, stale, schema))
    else:
        assert list(read_range(settings, stale, schema)) == []


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fails", "goes-on"])
def test_a_topic_deleted_while_a_task_reads_it_ends_the_read_per_fail_on_data_loss(
    broker: EmbeddedBroker,
    fail_on_data_loss: bool,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The topic goes while the executor's consumer is fetching the rest of its range.

    The read runs in a forked child (librdkafka >= 2.5 crashed with SIGSEGV on tansu's answer to that fetch). On
    Kafka the child sees the topic gone and reports the loss itself: the error reaches this process (a Spark
    worker, here pytest); the warning goes to the task's stderr, which the child shares.
    """
    to_stderr = logging.StreamHandler(sys.stderr)  # the child's log records, as a Spark worker's stderr shows them
    logger = logging.getLogger("sparkonce.kafka")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, to_stderr])
    topic = broker.create_topic()
    broker.produce(topic, numbered(BATCH_ROWS + 5), partition=0, linger_ms=50)
    settings = ReadSettings(
        client_config={"bootstrap.servers": broker.bootstrap},
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=30_000,
    )
    # The range goes beyond the records written: the consumer keeps fetching for the rest when the topic goes.
    rng = OffsetRange(TopicPartition(topic, 0), 0, BATCH_ROWS + 50)
    batches: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for batch in read_range(settings, rng, kafka_schema(include_headers=False)):
                batches.put(batch)
            batches.put(None)
        except SourceOffsetError as err:
            batches.put(err)

    reader = threading.Thread(target=read)
    reader.start()
    first = batches.get(timeout=120)  # the first full batch reached this process: the read is under way
    assert first.num_rows == BATCH_ROWS
    broker.delete_topic(topic)
    reader.join(120)
    rest = []
    while not batches.empty():
        rest.append(batches.get())
    if fail_on_data_loss:
        assert len(rest) == 1 and isinstance(rest[0], SourceOffsetError)
        message = str(rest[0])
        assert f"data loss in topic '{topic}' partition 0: offsets [" in message
        assert "[KAFKA_DATA_LOSS.PARTITIONS_DELETED] " in message and f"Set({topic}-0)" in message
    else:
        assert rest[-1] is None
        offsets = [o for b in [first, *rest[:-1]] for o in b.column("offset").to_pylist()]
        assert offsets == list(range(len(offsets)))  # a prefix of the range, each record once
        assert f"data loss in topic '{topic}' partition 0" in capfd.readouterr().err


@pytest.mark.parametrize("deaths", [1, 2], ids=["once", "twice"])
def test_a_kafka_client_that_dies_mid_range_on_a_topic_that_exists(
    broker: EmbeddedBroker,
    deaths: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The task's forked Kafka client dies (SIGKILL, as librdkafka's crashes kill it) after handing over its first
    batch, and the partition still exists: a new client reads the rest of the range (every record once, in order);
    when that one dies too before the range's end, the task fails with a BrokerError (Spark retries it)."""
    topic = broker.create_topic()
    size = BATCH_ROWS * deaths + 5  # twice: the second client hands over one batch of the rest, then dies
    broker.produce(topic, numbered(size), partition=0, linger_ms=50)
    settings = ReadSettings(client_config={"bootstrap.servers": broker.bootstrap}, poll_timeout_ms=30_000)
    rng = OffsetRange(TopicPartition(topic, 0), 0, size)
    record = tmp_path / "crashes.jsonl"
    monkeypatch.setenv(crash.ENV_POINT, "kafka_client_read#1" if deaths == 1 else "kafka_client_read")
    monkeypatch.setenv(crash.ENV_TARGET, "process")
    monkeypatch.setenv(crash.ENV_HITS_DIR, str(tmp_path))
    monkeypatch.setenv(crash.ENV_RECORD, str(record))
    caplog.set_level("WARNING", logger="sparkonce.kafka.isolated")
    offsets: list[int] = []
    if deaths == 1:
        for batch in read_range(settings, rng, kafka_schema(include_headers=False)):
            offsets += batch.column(4).to_pylist()
        assert offsets == list(range(size))
    else:
        with pytest.raises(BrokerError, match=rf"crashed \(SIGKILL\) at offset {2 * BATCH_ROWS}, 2 times, while"):
            for batch in read_range(settings, rng, kafka_schema(include_headers=False)):
                offsets += batch.column(4).to_pylist()
        assert offsets == list(range(2 * BATCH_ROWS))  # a batch from each client, each record once
    fired = crash.read_crash_records(str(record))
    assert [(r.point, r.target) for r in fired] == [("kafka_client_read", "process")] * deaths
    assert os.getpid() not in {r.pid for r in fired}  # the children died, not this process (the task)
    assert f"crashed (SIGKILL) at offset {BATCH_ROWS}; {topic}-0 still exists: reading the rest again" in caplog.text


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fails", "goes-on"])
def test_a_range_whose_topic_was_deleted_before_the_task_ends_per_fail_on_data_loss(
    broker: EmbeddedBroker, fail_on_data_loss: bool
) -> None:
    """Deleted between planning and the task: no record comes; the task asks whether the topic still exists."""
    topic = broker.create_topic()
    broker.produce(topic, numbered(3), partition=0)
    broker.delete_topic(topic)
    settings = ReadSettings(
        client_config={"bootstrap.servers": broker.bootstrap},
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=1_000,
    )
    rng = OffsetRange(TopicPartition(topic, 0), 0, 3)
    schema = kafka_schema(include_headers=False)
    if fail_on_data_loss:
        with pytest.raises(SourceOffsetError, match=r"offsets \[0, 3\) are gone: the topic was deleted"):
            list(read_range(settings, rng, schema))
    else:
        assert list(read_range(settings, rng, schema)) == []


def _records(spark: SparkSession, table: str) -> list[tuple[str, int, int, bytes]]:
    return sorted((r["topic"], r["partition"], r["offset"], r["value"]) for r in spark.table(table).collect())


def test_a_pattern_stream_goes_on_when_its_topics_are_deleted_and_recreated(
    spark: SparkSession, broker: EmbeddedBroker, memory_query: Any
) -> None:
    """failOnDataLoss=false: a deleted topic drops out, a recreated one is read from its new beginning."""
    prefix = broker.unique_topic("chg")
    gone, kept = broker.create_topic(f"{prefix}-a"), broker.create_topic(f"{prefix}-b")
    broker.produce(gone, numbered(5), partition=0)
    broker.produce(kept, numbered(5), partition=0)
    df = read_stream(spark, broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest", failOnDataLoss="false")
    query = memory_query(df, "changing")
    query.processAllAvailable()
    first = [(gone, 0, o, f"v{o}".encode()) for o in range(5)] + [(kept, 0, o, f"v{o}".encode()) for o in range(5)]
    assert _records(spark, "changing") == sorted(first)

    # Deleted while the query runs: its partition drops out of the next offsets, the other topic goes on.
    broker.delete_topic(gone)
    broker.produce(kept, numbered(3, start=5), partition=0)
    query.processAllAvailable()
    after_delete = first + [(kept, 0, o, f"v{o}".encode()) for o in range(5, 8)]
    assert _records(spark, "changing") == sorted(after_delete)
    assert query.exception() is None

    # Created again: a new partition for the query, read from its earliest offset.
    broker.create_topic(gone)
    broker.produce(gone, numbered(3, start=100), partition=0)
    query.processAllAvailable()
    recreated = after_delete + [(gone, 0, o, f"v{100 + o}".encode()) for o in range(3)]
    assert _records(spark, "changing") == sorted(recreated)

    # Deleted and created again between two batches: its end went back from 3 to 2; read from the new beginning.
    broker.delete_topic(gone)
    broker.create_topic(gone)
    broker.produce(gone, numbered(2, start=200), partition=0)
    query.processAllAvailable()
    again = recreated + [(gone, 0, o, f"v{200 + o}".encode()) for o in range(2)]
    assert _records(spark, "changing") == sorted(again)
    assert query.exception() is None


def test_a_pattern_stream_goes_on_when_a_topic_is_deleted_while_records_flow(
    spark: SparkSession, broker: EmbeddedBroker, memory_query: Any
) -> None:
    """failOnDataLoss=false: the topic goes while a producer still writes and the query plans and reads it.

    Wherever the deletion lands (a planning's confirmation fetch, a task's read, between batches) the query goes
    on; no record is written twice and the other topic's records all arrive.
    """
    from confluent_kafka import Producer

    prefix = broker.unique_topic("flow")
    gone, kept = broker.create_topic(f"{prefix}-a"), broker.create_topic(f"{prefix}-b")
    stop = threading.Event()

    def produce() -> None:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5, "log_level": 0}
        )
        index = 0
        while not stop.is_set():
            producer.produce(gone, key=None, value=f"g{index}".encode(), partition=0)
            producer.poll(0.002)
            index += 1
        producer.flush(5)  # records for the deleted topic may fail: nobody counts them

    df = read_stream(
        spark,
        broker,
        subscribePattern=f"{prefix}-.*",
        startingOffsets="earliest",
        failOnDataLoss="false",
        **{"kafkaConsumer.pollTimeoutMs": "10000"},  # a read that waits for the deleted topic's records: 10 s
    )
    query = memory_query(df, "flowing")
    writer = threading.Thread(target=produce)
    writer.start()
    try:
        deadline = time.monotonic() + 120
        while not spark.table("flowing").where(f"topic = '{gone}'").limit(1).collect():
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "no record of the flowing topic reached the sink"
            time.sleep(0.1)
        broker.delete_topic(gone)  # the producer is still writing, the query still planning and reading
    finally:
        stop.set()
        writer.join()
    broker.produce(kept, numbered(3), partition=0)
    query.processAllAvailable()
    assert query.exception() is None
    rows = spark.table("flowing").collect()
    assert sorted((r["offset"], r["value"]) for r in rows if r["topic"] == kept) == [
        (o, f"v{o}".encode()) for o in range(3)
    ]
    values = [r["value"] for r in rows if r["topic"] == gone]
    assert values and len(values) == len(set(values))  # exactly once: nothing read twice


def test_a_topic_deleted_under_a_running_stream_fails_it_with_sparks_data_loss_error(
    spark: SparkSession, broker: EmbeddedBroker, memory_query: Any
) -> None:
    prefix = broker.unique_topic("del")
    gone, kept = broker.create_topic(f"{prefix}-a"), broker.create_topic(f"{prefix}-b")
    broker.produce(gone, numbered(4), partition=0)
    broker.produce(kept, numbered(2), partition=0)
    query = memory_query(read_stream(spark, broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest"), "del")
    query.processAllAvailable()
    assert len(spark.table("del").collect()) == 6
    broker.delete_topic(gone)
    with pytest.raises(StreamingQueryException, match="SourceOffsetError: data loss") as info:
        query.awaitTermination(120)
    message = str(info.value)
    assert f"data loss in topic '{gone}' partition 0: offsets from 4 are gone" in message
    assert (
        "[KAFKA_DATA_LOSS.PARTITIONS_DELETED]" in message and f"Partitions Set({gone}-0) have been deleted." in message
    )
    assert len(spark.table("del").collect()) == 6


def test_a_pattern_stream_goes_on_across_a_sigkill_and_restart_of_its_broker(
    spark: SparkSession, tmp_path: Path, memory_query: Any
) -> None:
    """The broker SIGKILLed and restarted under the stream: it keeps its topics and records (its log is on disk);
    the offset requests that meet the restarting broker are retried (``fetchOffset.numRetries``, Spark's 3), and
    the stream reads on from where it was, every record once."""
    from sparkonce_local.services.broker import restart_broker

    state = tmp_path / "own-broker"
    own = EmbeddedBroker(start_broker(state_dir=state))
    try:
        topic = own.create_topic("restarted-a")
        own.produce(topic, numbered(5), partition=0)
        df = read_stream(spark, own, subscribePattern="restarted-.*", startingOffsets="earliest", failOnDataLoss="true")
        query = memory_query(df, "restarted")
        query.processAllAvailable()
        assert _records(spark, "restarted") == [(topic, 0, o, f"v{o}".encode()) for o in range(5)]

        restart_broker(state_dir=state, crash=True)
        own.produce(topic, numbered(3, start=5), partition=0)
        query.processAllAvailable()
        assert query.exception() is None
        assert _records(spark, "restarted") == [(topic, 0, o, f"v{o}".encode()) for o in range(8)]
        query.stop()
    finally:
        stop_broker(state_dir=state)


# -- bad input ------------------------------------------------------------------------------------------------------


BOOT = "{bootstrap}"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"subscribe": "x"}, ["kafka.bootstrap.servers", "is required"]),
        (
            {"kafka.bootstrap.servers": BOOT, "subscribe": "x", "subscribePattern": "x.*"},
            ["exactly one of subscribe, subscribePattern, assign"],
        ),
        (
            {"kafka.bootstrap.servers": BOOT, "subscribe": "x", "startingOffsets": '{"x": {"0": 1'},
            ["startingOffsets", "JSON"],
        ),
        (
            {"kafka.bootstrap.servers": BOOT, "assign": '{"no-such-topic": [0]}'},
            ["'assign'", "'no-such-topic' does not exist"],
        ),
    ],
    ids=["missing-bootstrap", "two-subscriptions", "malformed-json", "unknown-assign-topic"],
)
@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_bad_input_fails_at_load(
    spark: SparkSession, broker: EmbeddedBroker, options: dict[str, str], expected: list[str], mode: str
) -> None:
    reader = (spark.read if mode == "batch" else spark.readStream).format(FORMAT)
    for key, value in options.items():
        reader = reader.option(key, value.replace(BOOT, broker.bootstrap))
    with pytest.raises(AnalysisException, match="OptionError: option ") as info:
        reader.load()
    for text in expected:
        assert text in str(info.value)


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_broker_down_fails_at_load_naming_the_address(spark: SparkSession, mode: str) -> None:
    address = f"127.0.0.1:{free_port()}"
    reader = spark.read if mode == "batch" else spark.readStream
    reader = (
        reader.format(FORMAT)
        .option("kafka.bootstrap.servers", address)
        .option("subscribe", "x")
        .option("metadataTimeoutMs", "1500")
    )
    with pytest.raises(AnalysisException, match="BrokerError: ") as info:
        reader.load()
    assert f"Kafka broker at {address} is unreachable" in str(info.value)
