"""``sparkonce.kafka`` against Spark's own Kafka connector (issue 37 item 2): both read the same topics with the same
options, in batch and in stream, and their rows, checkpoint offsets and progress are compared as values.

The connector runs in the ``spark_kafka`` oracle process (``sparkonce_local.services.spark_kafka``); sparkonce runs in
this process's session. The embedded broker is Apache Kafka; ``produce`` writes multi-record batches (``linger.ms``
100), as producers do: the connector and sparkonce both take ListOffsets(latest) as the end, and DeleteRecords can
move a partition's log start offset into a batch.
Where sparkonce differs on purpose, the test asserts both answers and docs/kafka.md (*Checked against Spark's Kafka
connector*) says why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkonce_local.services.spark_kafka import (
    KafkaRow,
    SparkKafkaProcess,
    StreamRun,
    load,
    read_batch,
    run_stream,
)
from tests.fixtures_broker import EmbeddedBroker, Record, numbered

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# One worker runs them all: one oracle JVM per CI run instead of one per pytest-xdist worker.
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.spark_kafka]

OURS = "sparkonce.kafka"


def produce(broker: EmbeddedBroker, topic: str, records: list[Record], *, partition: int, **kwargs: Any) -> None:
    """Produce ``records`` to ``partition`` in one record batch (see the module docstring)."""
    broker.produce(topic, records, partition=partition, linger_ms=100, **kwargs)


def filled_topic(broker: EmbeddedBroker, sizes: list[int]) -> str:
    """A new topic whose partition ``p`` holds ``sizes[p]`` records ``k<i>``/``v<i>`` (i unique across partitions)."""
    topic = broker.create_topic(partitions=len(sizes))
    start = 0
    for partition, size in enumerate(sizes):
        produce(broker, topic, numbered(size, start=start), partition=partition)
        start += size
    return topic


def options_for(broker: EmbeddedBroker, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, **options}


def offsets_log(checkpoint_dir: Path) -> dict[int, Any]:
    """The source offsets of every ``offsets/N`` file of a one-source query, parsed: {batch_id: offsets}."""
    logged = {}
    for path in (checkpoint_dir / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            assert lines[0] == "v1", f"{path}: {lines[0]!r}"
            logged[int(path.name)] = json.loads(lines[2])
    return dict(sorted(logged.items()))


def initial_offsets(checkpoint_dir: Path) -> Any:
    """The initial offsets Spark's Kafka source wrote to ``sources/0/0``, parsed; None when there is no such file."""
    path = checkpoint_dir / "sources" / "0" / "0"
    if not path.exists():
        return None
    data = path.read_bytes()
    assert data.startswith(b"\x00v1\n"), data[:10]
    return json.loads(data[4:])


def source_progress(run: StreamRun) -> list[dict[str, Any]]:
    """Per batch of a run: numInputRows, and startOffset / endOffset / latestOffset parsed (JSON in the progress)."""

    def parsed(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    batches = []
    for progress in run.progress:
        (source,) = progress["sources"]
        batches.append(
            {
                "batchId": progress["batchId"],
                "numInputRows": source["numInputRows"],
                **{key: parsed(source.get(key)) for key in ("startOffset", "endOffset", "latestOffset")},
            }
        )
    return batches


class Both:
    """Runs the same read on sparkonce (this process) and on Spark's connector (the oracle process)."""

    def __init__(self, spark: SparkSession, oracle: SparkKafkaProcess, broker: EmbeddedBroker, tmp_path: Path) -> None:
        self.spark = spark
        self.oracle = oracle
        self.broker = broker
        self.tmp_path = tmp_path

    def batch(self, **options: str) -> tuple[list[KafkaRow], list[KafkaRow]]:
        full = options_for(self.broker, **options)
        return read_batch(self.spark, OURS, full).rows, self.oracle.batch(full).rows

    def checkpoints(self, name: str) -> tuple[Path, Path]:
        return self.tmp_path / f"ours-{name}", self.tmp_path / f"spark-{name}"

    def stream(self, name: str, **options: str) -> tuple[StreamRun, StreamRun]:
        """One availableNow run of each side on its checkpoint ``name`` (a second call with ``name`` resumes it)."""
        full = options_for(self.broker, **options)
        ours_dir, spark_dir = self.checkpoints(name)
        ours = run_stream(load(self.spark, OURS, full, stream=True), ours_dir)
        return ours, self.oracle.stream(full, spark_dir)


@pytest.fixture
def both(spark: SparkSession, spark_kafka: SparkKafkaProcess, broker: EmbeddedBroker, tmp_path: Path) -> Both:
    return Both(spark, spark_kafka, broker, tmp_path)


# -- batch reads ------------------------------------------------------------------------------------------------------


def test_a_batch_read_has_the_same_rows_columns_and_headers(both: Both) -> None:
    topic = both.broker.create_topic(partitions=2)
    produce(both.broker, topic, numbered(3), partition=0, headers=[("h1", b"x"), ("h2", None), ("h1", b"y")])
    produce(both.broker, topic, [(None, b"no key"), (b"no value", None)], partition=0)
    produce(both.broker, topic, numbered(4, start=10), partition=1)
    for include in ("false", "true"):
        ours, spark = both.batch(subscribe=topic, includeHeaders=include)
        assert len(spark) == 9
        assert ours == spark, include


@pytest.mark.parametrize(
    ("starting", "ending"),
    [
        (None, None),
        ("earliest", "latest"),
        ('{"T": {"0": 2, "1": -2}}', '{"T": {"0": 5, "1": -1}}'),
        ('{"T": {"0": -2, "1": 1}}', '{"T": {"0": -1, "1": 3}}'),
        ('{"T": {"0": 7, "1": 4}}', None),
    ],
)
def test_a_batch_read_between_starting_and_ending_offsets_has_the_same_rows(
    both: Both, starting: str | None, ending: str | None
) -> None:
    topic = filled_topic(both.broker, [7, 4])
    options = {"subscribe": topic}
    if starting is not None:
        options["startingOffsets"] = starting.replace('"T"', json.dumps(topic))
    if ending is not None:
        options["endingOffsets"] = ending.replace('"T"', json.dumps(topic))
    ours, spark = both.batch(**options)
    assert ours == spark


@pytest.mark.parametrize("subscription", ["assign", "subscribePattern", "subscribe-two"])
def test_each_subscription_kind_reads_the_same_partitions(both: Both, subscription: str) -> None:
    first = filled_topic(both.broker, [3, 2])
    second = filled_topic(both.broker, [4])
    options = {
        "assign": {"assign": json.dumps({first: [1], second: [0]})},
        "subscribePattern": {"subscribePattern": f"{first}|{second}"},
        "subscribe-two": {"subscribe": f"{first},{second}"},
    }[subscription]
    ours, spark = both.batch(**options)
    assert len(spark) == (6 if subscription == "assign" else 9)
    assert ours == spark


def test_min_partitions_splits_a_batch_read_into_the_same_number_of_tasks(both: Both) -> None:
    topic = filled_topic(both.broker, [12, 4])
    full = options_for(both.broker, subscribe=topic, minPartitions="6")
    ours, spark = read_batch(both.spark, OURS, full), both.oracle.batch(full)
    assert ours.rows == spark.rows
    assert spark.partitions > 2
    assert ours.partitions == spark.partitions


# -- streams ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_offsets", [None, "5"])
def test_a_stream_from_earliest_logs_the_same_offsets_and_progress(both: Both, max_offsets: str | None) -> None:
    topic = filled_topic(both.broker, [9, 4])
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    if max_offsets is not None:
        options["maxOffsetsPerTrigger"] = max_offsets
    ours, spark = both.stream("s", **options)
    assert ours.error is None and spark.error is None, (ours.error, spark.error)
    assert len(spark.rows) == 13
    assert ours.rows == spark.rows
    ours_dir, spark_dir = both.checkpoints("s")
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert source_progress(ours) == source_progress(spark)
    # Spark's JVM source writes its initial offsets to sources/0/0; a Python source cannot (docs/kafka.md).
    assert initial_offsets(spark_dir) == {topic: {"0": 0, "1": 0}}
    assert initial_offsets(ours_dir) is None
    # Spark's source reports how far behind the latest offsets a batch is; a Python source has no way to report metrics.
    behind = {"avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest"}
    assert all(set(p["sources"][0]["metrics"]) == behind for p in spark.progress)
    assert all(p["sources"][0].get("metrics") is None for p in ours.progress)


def test_a_stream_from_latest_reads_what_comes_after_its_start(both: Both) -> None:
    topic = filled_topic(both.broker, [5, 2])
    first = both.stream("s", subscribe=topic, startingOffsets="latest")
    produce(both.broker, topic, numbered(3, start=100), partition=0)
    produce(both.broker, topic, numbered(1, start=200), partition=1)
    second = both.stream("s", subscribe=topic, startingOffsets="latest")
    ours_dir, spark_dir = both.checkpoints("s")
    for ours, spark in (first, second):
        assert ours.error is None and spark.error is None, (ours.error, spark.error)
        assert ours.rows == spark.rows
    assert [row[4] for row in second[1].rows] == [5, 6, 7, 2]
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert initial_offsets(spark_dir) == {topic: {"0": 5, "1": 2}}
    assert initial_offsets(ours_dir) is None


def test_a_stream_from_json_offsets_with_max_offsets_per_trigger(both: Both) -> None:
    topic = filled_topic(both.broker, [8, 3, 0])
    starting = json.dumps({topic: {"0": 2, "1": -2, "2": -1}})
    options = {"subscribe": topic, "startingOffsets": starting, "maxOffsetsPerTrigger": "3"}
    ours, spark = both.stream("s", **options)
    assert ours.error is None and spark.error is None, (ours.error, spark.error)
    assert len(spark.rows) == 9
    assert ours.rows == spark.rows
    ours_dir, spark_dir = both.checkpoints("s")
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert source_progress(ours) == source_progress(spark)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
@pytest.mark.parametrize("subscription", ["subscribePattern", "subscribe"])
def test_a_topic_deleted_between_two_runs_of_a_stream(both: Both, subscription: str, fail_on_data_loss: str) -> None:
    prefix = both.broker.unique_topic("del")
    gone, kept = f"{prefix}-gone", f"{prefix}-kept"
    both.broker.create_topic(gone)
    both.broker.create_topic(kept)
    produce(both.broker, gone, numbered(4), partition=0)
    produce(both.broker, kept, numbered(3, start=10), partition=0)
    topics = {"subscribePattern": f"{prefix}-.*", "subscribe": f"{gone},{kept}"}[subscription]
    options = {subscription: topics, "startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss}
    first = both.stream("s", **options)
    assert first[0].rows == first[1].rows
    both.broker.delete_topic(gone)
    produce(both.broker, kept, numbered(2, start=100), partition=0)
    ours, spark = both.stream("s", **options)
    ours_dir, spark_dir = both.checkpoints("s")
    if subscription == "subscribe":
        # Spark describes every subscribed topic when it looks up offsets: a missing one fails the query whatever
        # failOnDataLoss says, before a batch is planned. sparkonce treats its partitions as deleted ones (on purpose,
        # docs/kafka.md "Checked against Spark's Kafka connector").
        assert spark.error is not None and "UnknownTopicOrPartitionException" in spark.error, spark.error
        assert sorted(offsets_log(spark_dir)) == [0]
        if fail_on_data_loss == "true":
            assert ours.error is not None and "KAFKA_DATA_LOSS.PARTITIONS_DELETED" in ours.error, ours.error
        else:
            assert ours.error is None, ours.error
            assert [row[1] for row in ours.rows] == [b"v100", b"v101"]
            assert offsets_log(ours_dir)[1] == {kept: {"0": 5}}
        return
    if fail_on_data_loss == "true":
        for error in (ours.error, spark.error):  # Spark's text; the error class is in sparkonce's text only
            assert error is not None and f"Reason: Partitions Set({gone}-0) have been deleted" in error, error
    else:
        assert ours.error is None and spark.error is None, (ours.error, spark.error)
        assert len(spark.rows) == 2
        assert ours.rows == spark.rows
        assert source_progress(ours) == source_progress(spark)
    assert offsets_log(ours_dir) == offsets_log(spark_dir)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_recreated_with_fewer_records_between_two_runs(both: Both, fail_on_data_loss: str) -> None:
    prefix = both.broker.unique_topic("re")
    topic = both.broker.create_topic(f"{prefix}-a")
    produce(both.broker, topic, numbered(5), partition=0)
    options = {"subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss}
    first = both.stream("s", **options)
    assert first[0].rows == first[1].rows
    both.broker.delete_topic(topic)
    both.broker.create_topic(topic)
    produce(both.broker, topic, numbered(3, start=50), partition=0)
    ours, spark = both.stream("s", **options)
    ours_dir, spark_dir = both.checkpoints("s")
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert offsets_log(spark_dir)[1] == {topic: {"0": 3}}
    if fail_on_data_loss == "true":
        for error in (ours.error, spark.error):
            assert error is not None and f"Partition {topic}-0 offset was changed from 5 to 3" in error, error
        return
    assert ours.error is None and spark.error is None, (ours.error, spark.error)
    # Spark drops the partition's range of that batch and goes on from the new end: the recreated topic's first
    # three records are never read. sparkonce reads every record that still exists (on purpose, docs/kafka.md).
    assert spark.rows == []
    assert [(row[1], row[4]) for row in ours.rows] == [(b"v50", 0), (b"v51", 1), (b"v52", 2)]
    assert [batch["numInputRows"] for batch in source_progress(ours)] == [3]
    assert source_progress(spark) == [{**source_progress(ours)[0], "numInputRows": 0}]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_records_aged_out_before_a_stream_read_them(both: Both, fail_on_data_loss: str) -> None:
    """Retention deleted records a stream had not read yet: Kafka's DeleteRecords moves partition 0's log start
    offset from 0 to 7 as retention would, so offsets 4 to 6, the start of the next batch, are gone."""
    topic = filled_topic(both.broker, [4, 3])
    options = {"subscribe": topic, "startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss}
    first = both.stream("s", **options)
    assert len(first[1].rows) == 7
    assert first[0].rows == first[1].rows
    produce(both.broker, topic, numbered(6, start=100), partition=0)
    produce(both.broker, topic, numbered(2, start=200), partition=1)
    both.broker.delete_records(topic, {0: 7})
    ours_batch, spark_batch = both.batch(subscribe=topic)  # earliest is the new log start
    assert [(row[3], row[4]) for row in spark_batch][:1] == [(0, 7)]
    assert ours_batch == spark_batch
    ours, spark = both.stream("s", **options)
    ours_dir, spark_dir = both.checkpoints("s")
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert offsets_log(spark_dir)[1] == {topic: {"0": 10, "1": 5}}
    if fail_on_data_loss == "true":
        # Both fail before writing anything. Spark's task finds it reading the batch's range; sparkonce's planner
        # finds it first, and names the offsets that are gone (docs/kafka.md, "Checked against Spark's Kafka
        # connector").
        assert spark.error is not None, spark.error
        assert f"Could not read records in offset [4, 10) for topic partition {topic}-0" in spark.error, spark.error
        assert ours.error is not None and "KAFKA_DATA_LOSS.START_OFFSET_RESET" in ours.error, ours.error
        assert f"data loss in topic '{topic}' partition 0: offsets [4, 7) are gone" in ours.error, ours.error
        assert ours.rows == spark.rows == []
        return
    assert ours.error is None and spark.error is None, (ours.error, spark.error)
    assert [(row[3], row[4]) for row in spark.rows] == [(0, 7), (0, 8), (0, 9), (1, 3), (1, 4)]
    assert ours.rows == spark.rows
    assert source_progress(ours) == source_progress(spark)


def test_a_pattern_stream_across_topics_added_and_removed(both: Both) -> None:
    prefix = both.broker.unique_topic("pat")
    options = {"subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest", "failOnDataLoss": "false"}
    first_topic = both.broker.create_topic(f"{prefix}-a", partitions=2)
    produce(both.broker, first_topic, numbered(3), partition=0)
    produce(both.broker, first_topic, numbered(1, start=10), partition=1)
    runs = [both.stream("s", **options)]
    second_topic = both.broker.create_topic(f"{prefix}-b")
    produce(both.broker, second_topic, numbered(2, start=20), partition=0)
    produce(both.broker, first_topic, numbered(1, start=30), partition=0)
    runs.append(both.stream("s", **options))
    both.broker.delete_topic(first_topic)
    produce(both.broker, second_topic, numbered(2, start=40), partition=0)
    runs.append(both.stream("s", **options))
    for ours, spark in runs:
        assert ours.error is None and spark.error is None, (ours.error, spark.error)
        assert ours.rows == spark.rows
        assert source_progress(ours) == source_progress(spark)
    assert [len(spark.rows) for _, spark in runs] == [4, 3, 2]
    ours_dir, spark_dir = both.checkpoints("s")
    assert offsets_log(ours_dir) == offsets_log(spark_dir)
    assert offsets_log(spark_dir)[2] == {second_topic: {"0": 4}}


def test_a_start_by_timestamp_starts_at_the_same_records(both: Both) -> None:
    """``startingTimestamp`` and ``startingOffsetsByTimestamp``, batch and stream.

    Spark's connector trusts the broker's ListOffsets(timestamp) answer, which a broker may give from its append
    time rather than the records' timestamps (tansu did, docs/kafka.md): the start is a time after the first group
    of records was acknowledged (so after their timestamps and append times) and before the second group was
    produced, so both times agree.
    """
    topic = both.broker.create_topic(partitions=2)
    produce(both.broker, topic, numbered(3), partition=0)
    produce(both.broker, topic, numbered(3, start=10), partition=1)
    start_ms = int(time.time() * 1000) + 20
    deadline = time.monotonic() + 10
    while time.time() * 1000 < start_ms + 20:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    produce(both.broker, topic, numbered(2, start=20), partition=0)
    produce(both.broker, topic, numbered(2, start=30), partition=1)
    by_partition = json.dumps({topic: {"0": start_ms, "1": start_ms - 600_000}})
    for name, option in [
        ("one", {"startingTimestamp": str(start_ms)}),
        ("each", {"startingOffsetsByTimestamp": by_partition}),
    ]:
        ours, spark = both.batch(subscribe=topic, **option)
        expected = [(0, o) for o in range(3, 5)] + [(1, o) for o in range(3 if name == "one" else 0, 5)]
        assert [(row[3], row[4]) for row in spark] == expected
        assert ours == spark
        ours_run, spark_run = both.stream(name, subscribe=topic, **option)
        assert ours_run.error is None and spark_run.error is None, (ours_run.error, spark_run.error)
        assert ours_run.rows == spark_run.rows == spark
        ours_dir, spark_dir = both.checkpoints(name)
        assert offsets_log(ours_dir) == offsets_log(spark_dir)
        assert initial_offsets(spark_dir) == {topic: {"0": 3, "1": 3 if name == "one" else 0}}
