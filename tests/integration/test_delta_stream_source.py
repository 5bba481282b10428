"""The Delta streaming source on real Spark and real tables: batches follow table versions, read limits,
availableNow, change commits, and a SIGKILL crash of a Delta -> Delta stream."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from sparkonce.delta.read.stream import DeltaSourceOffset, DeltaStreamReader
from sparkonce.delta.table.options import StreamReadOptions
from sparkonce.errors import OptionError, SourceOffsetError
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import commit_times
from tests.integration.conftest import delta_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = [pytest.mark.spark]

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _append(table: Path, ids: range, *, part: str = "a", partitioned: bool = False) -> None:
    data = pa.table({"id": list(ids), "part": [part] * len(ids)}, schema=SCHEMA)
    write_deltalake(str(table), data, mode="append", partition_by=["part"] if partitioned else None)


def _table_with_versions(table: Path, versions: int, rows: int = 10, *, partitioned: bool = False) -> list[int]:
    """Create ``versions`` table versions of one file each, ``rows`` consecutive ids per version."""
    for v in range(versions):
        _append(table, range(v * rows, (v + 1) * rows), part=f"p{v}", partitioned=partitioned)
    return list(range(versions * rows))


def _start(spark: SparkSession, table: Path, tmp_path: Path, name: str, **options: Any) -> StreamingQuery:
    reader = spark.readStream.format("delta")
    for key, value in options.pop("read", {}).items():
        reader = reader.option(key, str(value))
    writer = (
        reader.load(str(table))
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
    )
    if options.get("available_now"):
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _rows_per_batch(query: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def _ids(spark: SparkSession, name: str) -> list[int]:
    return sorted(r.id for r in spark.sql(f"SELECT id FROM {name}").collect())


def test_initial_snapshot_then_one_batch_per_new_table_version(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    expected = _table_with_versions(table, 3)
    query = _start(spark, table, tmp_path, "snap_then_changes")
    try:
        query.processAllAvailable()
        assert _ids(spark, "snap_then_changes") == expected  # the snapshot of the latest table version
        _append(table, range(100, 105))
        query.processAllAvailable()
        _append(table, range(200, 207))
        query.processAllAvailable()
        assert _ids(spark, "snap_then_changes") == [*expected, *range(100, 105), *range(200, 207)]
        assert _rows_per_batch(query) == [30, 5, 7]
        offset = json.loads(query.lastProgress["sources"][0]["endOffset"])
        assert offset["reservoirId"] == DeltaTable(str(table)).metadata().id
        assert (offset["reservoirVersion"], offset["index"], offset["isStartingVersion"]) == (5, -1, False)
        assert offset["sourceVersion"] == 1
    finally:
        query.stop()


@pytest.mark.parametrize(
    ("read", "batches"),
    [
        ({"startingVersion": 2}, [30]),
        ({"startingVersion": 0, "maxFilesPerTrigger": 2}, [20, 20, 10]),
        ({"startingVersion": "latest"}, []),
        ({"maxFilesPerTrigger": 1}, [10, 10, 10, 10, 10]),
        ({"startingVersion": 0, "maxBytesPerTrigger": 1}, [10, 10, 10, 10, 10]),
    ],
    ids=["startingVersion", "maxFilesPerTrigger", "latest", "snapshot-1-file", "maxBytesPerTrigger"],
)
def test_read_limits_and_starting_versions_with_available_now(
    spark: SparkSession, tmp_path: Path, read: dict[str, Any], batches: list[int]
) -> None:
    table = tmp_path / "src"
    expected = _table_with_versions(table, 5)
    query = _start(spark, table, tmp_path, "limits", read=read, available_now=True)
    query.awaitTermination(120)
    assert not query.isActive
    assert _rows_per_batch(query) == batches
    assert _ids(spark, "limits") == expected[len(expected) - sum(batches) :]


def test_available_now_stops_at_the_table_version_it_started_with(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    _table_with_versions(table, 2)
    reader = DeltaStreamReader(
        StreamReadOptions.parse({"path": str(table), "startingVersion": "0", "maxFilesPerTrigger": "1"}),
        spark.read.format("delta").load(str(table)).schema,
    )
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _append(table, range(100, 110))  # table version 2 arrives after the availableNow target was fixed
    first = reader.latestOffset(start, ReadMaxFiles(1))
    assert (first["reservoirVersion"], first["index"]) == (1, -1)
    everything = reader.latestOffset(start, ReadAllAvailable())
    assert (everything["reservoirVersion"], everything["index"]) == (2, -1)
    assert reader.latestOffset(everything, ReadAllAvailable()) == everything
    # Deterministic: the same (start, end) plans the same files, also on a fresh reader (a restarted driver).
    again = DeltaStreamReader(reader.options, reader.schema)
    files = [[f.path for f in p.files] for p in reader.partitions(start, everything)]
    assert files == [[f.path for f in p.files] for p in again.partitions(start, everything)]
    assert sum(len(f) for f in files) == 2


def test_offset_round_trip_and_replaced_table(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    _table_with_versions(table, 1)
    offset = DeltaSourceOffset("id-1", 3, -1, True)
    assert DeltaSourceOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset
    reader = DeltaStreamReader(
        StreamReadOptions.parse({"path": str(table)}), spark.read.format("delta").load(str(table)).schema
    )
    stale = DeltaSourceOffset("another-table-id", 0, -1, False).to_json()
    with pytest.raises(SourceOffsetError, match="was replaced"):
        reader.latestOffset(stale, ReadAllAvailable())


def _delete_partition(table: Path, part: str) -> None:
    DeltaTable(str(table)).delete(f"part = '{part}'")


def _update_rows(table: Path) -> None:
    DeltaTable(str(table)).delete("id = 1")  # rewrites the file: remove + add


@pytest.mark.parametrize(
    ("change", "read", "outcome"),
    [
        ("delete", {}, "ignoreDeletes"),
        ("rewrite", {}, "skipChangeCommits"),
        ("delete", {"ignoreDeletes": "true"}, None),
        ("rewrite", {"ignoreDeletes": "true"}, "skipChangeCommits"),
        ("rewrite", {"skipChangeCommits": "true"}, None),
        ("delete", {"skipChangeCommits": "true"}, None),
    ],
)
def test_change_commits(
    spark: SparkSession, tmp_path: Path, change: str, read: dict[str, str], outcome: str | None
) -> None:
    table = tmp_path / "src"
    _table_with_versions(table, 2, partitioned=True)  # table versions 0, 1
    (_delete_partition(table, "p0") if change == "delete" else _update_rows(table))  # table version 2
    _append(table, range(100, 103), part="p9", partitioned=True)  # table version 3
    query = _start(spark, table, tmp_path, "changes", read={"startingVersion": 0, **read}, available_now=True)
    if outcome is None:
        query.awaitTermination(120)
        assert query.exception() is None
        assert _ids(spark, "changes") == [*range(20), 100, 101, 102]
        return
    with pytest.raises(StreamingQueryException, match="SourceOffsetError: ") as failure:
        query.awaitTermination(120)
    message = str(failure.value)
    assert "table version 2" in message and outcome in message, message


def test_added_column_is_read_past_and_a_type_change_fails_the_stream(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    _table_with_versions(table, 1)
    query = _start(spark, table, tmp_path, "schema_change", read={"startingVersion": 0})
    try:
        query.processAllAvailable()
        wider = pa.table({"id": [50], "part": ["a"], "extra": [1.5]})
        write_deltalake(str(table), wider, mode="append", schema_mode="merge")  # table version 1: compatible
        query.processAllAvailable()
        assert _ids(spark, "schema_change") == [*range(10), 50]
        retyped = pa.table({"id": ["x"], "part": ["a"]})
        write_deltalake(str(table), retyped, mode="overwrite", schema_mode="overwrite")  # table version 2
        with pytest.raises(
            StreamingQueryException,
            match=r"schema of the source Delta table .* changed incompatibly at table version 2",
        ):
            query.processAllAvailable()
    finally:
        query.stop()


def test_starting_timestamp_starts_at_the_first_commit_at_or_after_it(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "src"
    _table_with_versions(table, 3)
    stamps = commit_times(table)
    schema = spark.read.format("delta").load(str(table)).schema
    for version, expected in ((1, 1), (2, 2)):
        when = dt.datetime.fromtimestamp(stamps[version] / 1000, dt.UTC).isoformat()
        reader = DeltaStreamReader(StreamReadOptions.parse({"path": str(table), "startingTimestamp": when}), schema)
        initial = reader.initialOffset()  # unresolved: batch 0's end fixes where reading starts
        assert (initial["reservoirVersion"], initial["index"], initial["isStartingVersion"]) == (-1, -1, False)
        end = reader.latestOffset(initial, ReadMaxFiles(1))  # one file: the one of table version ``expected``
        assert (end["reservoirVersion"], end["index"], end["isStartingVersion"]) == (expected + 1, -1, False)
    future = DeltaStreamReader(StreamReadOptions.parse({"path": str(table), "startingTimestamp": "2999-01-01"}), schema)
    end = future.latestOffset(future.initialOffset(), ReadAllAvailable())
    assert (end["reservoirVersion"], end["index"]) == (3, -1)  # nothing read yet: waits for table version 3
    with pytest.raises(OptionError, match="startingVersion"):
        DeltaStreamReader(StreamReadOptions.parse({"path": str(table), "startingVersion": "9"}), schema).initialOffset()


@pytest.mark.crash
def test_crash_after_sink_commit_delta_to_delta_exactly_once(tmp_path: Path) -> None:
    source, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    expected = _table_with_versions(source, 4, rows=25)
    args = ["-m", "tests.integration.drivers.delta_to_delta", str(source), str(target), str(ck)]

    crashed = run_driver(args, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=300)
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    assert delta_ids(target) == expected[:50]

    finished = run_driver(args, cwd=str(REPO), timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    ids = delta_ids(target)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert ids == expected
    offsets = [json.loads((ck / "offsets" / str(b)).read_text().splitlines()[-1]) for b in range(4)]
    assert [(o["reservoirVersion"], o["index"]) for o in offsets] == [(1, -1), (2, -1), (3, -1), (4, -1)]
