"""The raw stage's ingest (``sparkonce.pipeline.raw_ingest``): the tasks that read Kafka write the raw table's files.

Real broker, real Spark, real Delta tables. The same records through the ingest and through the Kafka source into
the Delta sink (``spark.sparkonce.pipeline.rawIngest=false``) give the same rows, byte for byte (keys and values
that are not UTF-8, null keys and values), the same statistics layout, and each batch one commit with its txn. A
driver killed after a batch's Delta commit, or while its tasks write, restarts to every record exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.checkpoint.query import read_query_id
from sparkonce.pipeline.kinds.raw import RAW_INGEST_CONF
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.run import run_pipeline
from sparkonce_local.chaos import run_driver
from sparkonce_local.services.broker import create_topic
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_commits, delta_txns

pytestmark = [pytest.mark.spark, pytest.mark.broker]

RECORDS: list[tuple[bytes | None, bytes | None]] = [
    (b"k1", b'{"v": 1}'),
    (None, b"no key"),
    (b"k3", None),
    (b"\xff\xfe not utf-8", b"\xc3\x28 not utf-8 either"),
    (b"", b""),
] + [(f"k{i}".encode(), f'{{"v": {i}}}'.encode()) for i in range(5, 45)]


def _pipeline(tmp_path: Path, bootstrap: str, topic: str, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    text = f"""
name = "{name}"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
starting_offsets = "earliest"
max_offsets_per_trigger = 16

[stages.raw]
table = "{folder / "raw"}"
checkpoint = "{folder / "ck-raw"}"
trigger = {{ availableNow = true }}
"""
    path = folder / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _records(spark: SparkSession, table: Path) -> list[tuple[Any, ...]]:
    """The raw rows, key and value as their bytes (Spark keeps a string's bytes as they are)."""
    frame = spark.read.format("delta").load(str(table))
    columns = ["CAST(key AS BINARY)", "CAST(value AS BINARY)", "topic", "partition", "offset", "kafka_timestamp"]
    rows = frame.selectExpr(*columns).collect()
    return sorted((tuple(r) for r in rows), key=lambda r: (r[3], r[4]))


def _adds(table: Path) -> list[dict[str, Any]]:
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                found.append(action["add"])
    return found


def test_ingest_and_sink_write_the_same_raw_rows(spark: SparkSession, broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = broker.unique_topic("raw-ingest")
    create_topic(broker.bootstrap, topic, partitions=2)
    assert broker.produce(topic, RECORDS, partitions=2) == len(RECORDS)
    ingest = load_pipeline(_pipeline(tmp_path, broker.bootstrap, topic, "ingest"))
    sink = load_pipeline(_pipeline(tmp_path, broker.bootstrap, topic, "sink"))

    result = run_pipeline(ingest, spark=spark, poll_seconds=0.2)
    (stage,) = result.stages
    assert stage.total_rows == len(RECORDS)  # the records, from observedMetrics (the query's rows are files)
    spark.conf.set(RAW_INGEST_CONF, "false")
    try:
        run_pipeline(sink, spark=spark, poll_seconds=0.2)
    finally:
        spark.conf.unset(RAW_INGEST_CONF)

    ours, theirs = Path(ingest.raw.table), Path(sink.raw.table)
    assert _records(spark, ours) == _records(spark, theirs)
    raw = {(r[3], r[4]): r for r in _records(spark, ours)}
    by_partition = [[r for i, r in enumerate(RECORDS) if i % 2 == p] for p in (0, 1)]
    for partition, records in enumerate(by_partition):
        for offset, (key, value) in enumerate(records):
            row = raw[(partition, offset)]
            assert (_bytes(row[0]), _bytes(row[1])) == (key, value), (partition, offset)
    # One commit per batch, each with its txn (query id, batch id): batches of at most 16 records, 2 partitions.
    app_id = read_query_id(ingest.raw.checkpoint)
    assert sorted(delta_txns(ours)) == [(app_id, b) for b in sorted(checkpoint_commits(ingest.raw.checkpoint))]
    assert len(checkpoint_commits(ingest.raw.checkpoint)) >= 2
    ours_adds, theirs_adds = _adds(ours), _adds(theirs)
    assert sum(json.loads(a["stats"])["numRecords"] for a in ours_adds) == len(RECORDS)
    stats_keys = {frozenset(json.loads(a["stats"])["minValues"]) for a in ours_adds}
    assert stats_keys == {frozenset(json.loads(a["stats"])["minValues"]) for a in theirs_adds}
    assert all(a["dataChange"] is True and a["partitionValues"] == {} for a in ours_adds)


def _bytes(value: bytearray | None) -> bytes | None:
    return None if value is None else bytes(value)


@pytest.mark.parametrize("crash_at", ["after_delta_commit:1", "mid_write:1"])
def test_a_killed_ingest_restarts_exactly_once(spark: SparkSession, broker, tmp_path: Path, crash_at: str) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL of the driver after batch 1's Delta commit (before commits/1: the restart runs batch 1 again, writes
    new files, commits nothing and deletes them) or while batch 1's tasks write: every record once, one txn per
    batch."""
    topic = broker.unique_topic("raw-ingest-crash")
    create_topic(broker.bootstrap, topic, partitions=2)
    broker.produce(topic, RECORDS, partitions=2)
    pipeline = _pipeline(tmp_path, broker.bootstrap, topic, "crash")
    config = load_pipeline(pipeline)
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain"]
    crashed = run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=600)
    assert crashed.killed, crashed.stderr[-3000:]
    checkpoint, table = Path(config.raw.checkpoint), Path(config.raw.table)
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()
    app_id = read_query_id(config.raw.checkpoint)
    committed_before = {v for a, v in delta_txns(table) if a == app_id}
    assert committed_before == ({0, 1} if crash_at.startswith("after_delta_commit") else {0})
    finished = run_driver(args, cwd=str(REPO), timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    offsets = sorted((r[3], r[4]) for r in _records(spark, table))
    assert offsets == sorted((i % 2, i // 2) for i in range(len(RECORDS)))  # every record once
    assert sorted(delta_txns(table)) == [(app_id, b) for b in sorted(checkpoint_commits(config.raw.checkpoint))]
    named = {a["path"] for a in _adds(table)}
    on_disk = {p.name for p in table.glob("*.parquet")}
    if crash_at.startswith("after_delta_commit"):
        assert on_disk == named  # the re-run's files were deleted when its commit found the txn
    else:
        assert named <= on_disk  # a killed task's half-written files stay unreferenced (vacuum's)
