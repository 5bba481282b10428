"""Issue 13: a Delta stream re-runs any uncommitted batch, batch 0 included, with exactly the files first planned.

Spark does not checkpoint a source's initial offset: it calls ``initialOffset()`` again when it re-runs batch 0 after
a crash and pairs the answer with the end saved in ``offsets/0``. Between the crash and the restart the input table
moves on here every time: appends, a compaction (``dataChange=false``), a Delta checkpoint and a vacuum within
retention. First the planning itself (two readers, as two driver lives), then real SIGKILLs of a Delta -> Delta
stream inside batch 0 and inside a later batch, for every way a stream can start.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.streaming.datasource import ReadMaxFiles

from sparkonce.delta.read.stream import DeltaStreamReader, StreamPartition
from sparkonce.delta.table.options import StreamReadOptions
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import commit_times, delta_txns
from tests.integration.conftest import delta_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
ROWS = 10


def _append(table: Path, first_id: int) -> list[int]:
    ids = list(range(first_id, first_id + ROWS))
    write_deltalake(str(table), pa.table({"id": ids, "part": ["a"] * ROWS}, schema=SCHEMA), mode="append")
    return ids


def _source(table: Path, versions: int = 3) -> list[int]:
    """Table versions 0..versions-1, one file of ``ROWS`` consecutive ids each."""
    return [i for v in range(versions) for i in _append(table, v * ROWS)]


def _move_on(table: Path) -> list[int]:
    """What happens to the input while the stream is down: every kind of commit a stream must read past."""
    added = _append(table, 1000)
    DeltaTable(str(table)).optimize.compact()  # rewrites every file, dataChange=false
    DeltaTable(str(table)).create_checkpoint()
    DeltaTable(str(table)).vacuum(dry_run=False)  # within retention: the files compacted away stay
    return [*added, *_append(table, 2000)]


def _timestamp_of(table: Path, table_version: int) -> str:
    return dt.datetime.fromtimestamp(commit_times(table)[table_version] / 1000, dt.UTC).isoformat()


def _options(table: Path, mode: str) -> dict[str, str]:
    if mode == "snapshot":
        return {}
    if mode == "startingVersion":
        return {"startingVersion": "0"}
    if mode == "latest":
        return {"startingVersion": "latest"}
    if mode == "startingTimestamp":
        return {"startingTimestamp": _timestamp_of(table, 1)}
    assert mode == "futureTimestamp"
    return {"startingTimestamp": "2999-01-01"}


def _planned_ids(partitions: Any) -> list[int]:
    ids: list[int] = []
    for partition in partitions:
        assert isinstance(partition, StreamPartition)
        for data_file in partition.files:
            ids.extend(pq.read_table(data_file.path, columns=["id"]).column("id").to_pylist())
    return sorted(ids)


def _first_snapshot_file_ids(table: Path) -> list[int]:
    """The ids of the file Delta's snapshot order (modification time, path) puts first."""
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    first = min(adds, key=lambda a: (a["modification_time"], a["path"]))
    return sorted(pq.read_table(str(table / first["path"]), columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize("rerun_batch", [0, 1], ids=["batch0", "batch1"])
@pytest.mark.parametrize("mode", ["snapshot", "startingVersion", "latest", "startingTimestamp", "futureTimestamp"])
def test_a_rerun_batch_plans_the_files_of_the_first_attempt(
    spark: SparkSession, tmp_path: Path, mode: str, rerun_batch: int
) -> None:
    table = tmp_path / "src"
    _source(table)
    schema = spark.read.format("delta").load(str(table)).schema
    options = StreamReadOptions.parse({"path": str(table), **_options(table, mode)})
    first_snapshot_file = _first_snapshot_file_ids(table)

    first = DeltaStreamReader(options, schema)  # the driver that crashes
    initial = first.initialOffset()
    starts, ends, planned = [], [], []
    start = initial
    for batch_id in range(2):
        end = first.latestOffset(start, ReadMaxFiles(1))  # what Spark saves in offsets/N
        starts.append(start)
        ends.append(end)
        planned.append(_planned_ids(first.partitions(start, end)))
        start = end
        if batch_id == 0:
            _append(table, 100)  # table version 3, committed after batch 0 was planned
    expected = {
        "snapshot": [first_snapshot_file, None],
        "startingVersion": [list(range(0, 10)), list(range(10, 20))],
        "latest": [[], list(range(100, 110))],
        "startingTimestamp": [list(range(10, 20)), list(range(20, 30))],
        "futureTimestamp": [[], list(range(100, 110))],
    }[mode]
    assert planned[0] == expected[0]
    if expected[1] is not None:
        assert planned[1] == expected[1]
    assert len(planned[1]) == ROWS and not set(planned[0]) & set(planned[1])

    _move_on(table)
    restarted = DeltaStreamReader(options, schema)  # the next driver: a fresh initialOffset() for batch 0
    start = restarted.initialOffset() if rerun_batch == 0 else starts[rerun_batch]
    assert _planned_ids(restarted.partitions(start, ends[rerun_batch])) == planned[rerun_batch]
    if rerun_batch == 0:
        assert restarted.initialOffset() == initial  # the answer does not depend on when it is asked


# -- real crashes ---------------------------------------------------------------------------------------------------


@pytest.mark.sampled(keep=2)
@pytest.mark.crash
@pytest.mark.parametrize(
    ("mode", "crash_at"),
    [
        ("snapshot", "mid_write:0"),
        ("snapshot", "mid_write:2"),
        ("startingVersion", "mid_write:0"),
        ("startingTimestamp", "mid_write:0"),
        ("startingTimestamp", "mid_write:1"),
        ("latest", "after_delta_commit:0"),
    ],
)
def test_killed_stream_restarts_after_its_input_grew_with_exact_contents(
    tmp_path: Path, mode: str, crash_at: str
) -> None:
    source, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    before = _source(source, versions=4)
    args = ["-m", "tests.integration.drivers.delta_to_delta", str(source), str(target), str(ck)]
    if mode == "startingTimestamp":
        args += ["--starting-timestamp", _timestamp_of(source, 1)]
    else:
        args += ["--starting-version", {"snapshot": "none", "startingVersion": "0", "latest": "latest"}[mode]]

    crashed = run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=900)
    assert crashed.killed, crashed.stderr[-3000:]
    crashed_batch = int(crash_at.split(":")[1])
    assert (ck / "offsets" / str(crashed_batch)).exists() and not (ck / "commits" / str(crashed_batch)).exists()
    after = _move_on(source)

    finished = run_driver(args, cwd=str(REPO), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "DONE" in finished.stdout
    ids = delta_ids(target)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    expected = {
        "snapshot": before + after,
        "startingVersion": before + after,
        "startingTimestamp": before[ROWS:] + after,
        "latest": after,  # batch 0 pinned the start before the crash; what came after is read once
    }[mode]
    assert ids == sorted(expected)
    batches = sorted(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    assert [v for _, v in delta_txns(target)] == batches == list(range(len(batches)))
