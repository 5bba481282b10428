"""Issue 24 item 3: the change data feed as an exactly-once stream.

A source table with the feed on gets inserts, UPDATEs, DELETEs, MERGEs and a compaction; the stream's rows in a
Delta sink (read back with delta-rs) must equal, as a multiset, a batch ``readChangeFeed`` of the same range,
also when the driver is SIGKILLed mid-batch and the source keeps changing before the restart.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as RsTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from sparkonce.delta.tables import DeltaTable
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import delta_txns

pytestmark = pytest.mark.spark

SCHEMA = "id long, name string"
Row = tuple[Any, ...]


def _create(spark: SparkSession, table: Path) -> None:
    frame = spark.createDataFrame([(i, f"v{i}") for i in range(6)], SCHEMA)
    frame.write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(table))  # 0


def _change(spark: SparkSession, table: Path, salt: int) -> None:
    """Four commits: an append, an UPDATE, a DELETE and a MERGE (update, delete, insert); then a compaction."""
    base = 100 * salt
    rows = [(base + i, f"a{base + i}") for i in range(3)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(str(table))
    dt_ = DeltaTable.forPath(spark, str(table))
    dt_.update(f"id = {base}", {"name": f"'u{salt}'"})
    dt_.delete(f"id = {base + 1}")
    source = spark.createDataFrame([(base + 2, None), (base + 50, "m"), (0, f"merged{salt}")], SCHEMA)
    (
        dt_.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.name IS NULL")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    RsTable(str(table)).optimize.compact()  # dataChange=false: delivers nothing


def _batch_changes(spark: SparkSession, table: Path, start: int) -> list[Row]:
    frame = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
    return sorted(tuple(r) for r in frame.load(str(table)).collect())


def _sink_rows(target: Path) -> list[Row]:
    rows = RsTable(str(target)).to_pyarrow_table().to_pylist()
    out = []
    for r in rows:
        stamp = r["_commit_timestamp"]
        if stamp.tzinfo is not None:  # Spark collects naive UTC timestamps (session time zone UTC)
            stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
        out.append((r["id"], r["name"], r["_change_type"], r["_commit_version"], stamp))
    return sorted(out)


def _stream(spark: SparkSession, table: Path, target: Path, ck: Path, **options: str) -> None:
    reader = spark.readStream.format("delta").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(str(table))
        .writeStream.format("delta")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination()


def _admission_units(table: Path) -> int:
    """Micro-batches a feed stream with ``maxFilesPerTrigger`` 1 runs: one per commit with change data files (read
    whole), one per data-changing add/remove of the other commits (read file by file), as Delta's CDC source."""
    units = 0
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        if any("cdc" in a for a in actions):
            units += 1
        else:
            units += sum(1 for a in actions for k in ("add", "remove") if k in a and a[k].get("dataChange", True))
    return units


def test_stream_from_a_starting_version_reads_change_data_commits_whole_and_equals_the_batch_feed(
    spark: SparkSession, tmp_path: Path
) -> None:
    table, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    _create(spark, table)
    _change(spark, table, 1)  # versions 1..4 change rows, 5 compacts
    _stream(spark, table, target, ck, startingVersion="0", maxFilesPerTrigger="1")
    assert _sink_rows(target) == _batch_changes(spark, table, 0)
    # maxFilesPerTrigger 1: one batch per appended file, one per UPDATE/DELETE/MERGE (its change data files are
    # never split); none for the compaction.
    batches = _admission_units(table)
    assert batches > 5
    assert [v for _, v in delta_txns(target)] == list(range(batches))

    _change(spark, table, 2)  # 6..9, 10 compacts
    _stream(spark, table, target, ck, startingVersion="0", maxFilesPerTrigger="1")
    assert _sink_rows(target) == _batch_changes(spark, table, 0)
    assert [v for _, v in delta_txns(target)] == list(range(_admission_units(table)))


def test_stream_without_starting_version_reads_the_snapshot_as_inserts_then_the_changes(
    spark: SparkSession, tmp_path: Path
) -> None:
    table, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    _create(spark, table)
    _change(spark, table, 1)
    snapshot_version = RsTable(str(table)).version()
    current = sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).collect())
    _stream(spark, table, target, ck)
    first = _sink_rows(target)
    assert sorted((i, n) for i, n, *_ in first) == current
    assert {(c, v) for _, _, c, v, _ in first} == {("insert", snapshot_version)}

    _change(spark, table, 2)
    _stream(spark, table, target, ck)
    assert _sink_rows(target) == sorted(first + _batch_changes(spark, table, snapshot_version + 1))


def test_skip_change_commits_does_not_apply_to_the_change_feed(spark: SparkSession, tmp_path: Path) -> None:
    table, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    _create(spark, table)
    _change(spark, table, 1)
    _stream(spark, table, target, ck, startingVersion="0", skipChangeCommits="true")
    assert _sink_rows(target) == _batch_changes(spark, table, 0)


def test_feed_turned_off_mid_stream_stops_it_with_delta_error(spark: SparkSession, tmp_path: Path) -> None:
    table, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    _create(spark, table)
    _stream(spark, table, target, ck, startingVersion="0")
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    spark.createDataFrame([(50, "x")], SCHEMA).write.format("delta").mode("append").save(str(table))
    with pytest.raises(StreamingQueryException, match=r"(?s)DELTA_MISSING_CHANGE_DATA.*version \[1\]"):
        _stream(spark, table, target, ck, startingVersion="0")


def test_feed_not_on_at_the_starting_version_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    spark.range(3).write.format("delta").save(str(table))
    with pytest.raises(StreamingQueryException, match=r"(?s)startingVersion.*DELTA_MISSING_CHANGE_DATA"):
        _stream(spark, table, tmp_path / "dst", tmp_path / "ck", startingVersion="0")


@pytest.mark.sampled(keep=2)
@pytest.mark.crash
@pytest.mark.parametrize(
    ("starting_version", "crash_at"),
    [("0", "mid_write:1"), ("0", "after_delta_commit:2"), ("none", "mid_write:0"), ("none", "after_delta_commit:0")],
)
def test_killed_change_feed_stream_delivers_every_change_row_exactly_once(
    spark: SparkSession, tmp_path: Path, starting_version: str, crash_at: str
) -> None:
    table, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    _create(spark, table)
    _change(spark, table, 1)
    first_version = 0 if starting_version == "0" else RsTable(str(table)).version()
    args = ["-m", "tests.integration.drivers.delta_to_delta", str(table), str(target), str(ck)]
    args += ["--starting-version", starting_version, "--read-change-feed", "--max-files", "1"]

    crashed = run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=900)
    assert crashed.killed, crashed.stderr[-3000:]
    _change(spark, table, 2)  # the source keeps changing while the stream is down

    finished = run_driver(args, cwd=str(REPO), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = _sink_rows(target)
    if starting_version == "0":
        assert rows == _batch_changes(spark, table, 0)
    else:
        snapshot = [r for r in rows if r[3] == first_version]
        assert {r[2] for r in snapshot} == {"insert"}
        changes = [r for r in rows if r[3] != first_version]
        assert changes == _batch_changes(spark, table, first_version + 1)
        assert len(snapshot) == len(set(snapshot))
    assert [r for r, n in Counter(rows).items() if n > 1] == []
    batches = sorted(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    assert [v for _, v in delta_txns(target)] == batches == list(range(len(batches)))
