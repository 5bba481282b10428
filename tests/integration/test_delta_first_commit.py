"""Table version 0 holds the first write (issue 12 item 2), and exactly-once holds for it.

Real processes race to create the same new table (no Spark needed: each writes its Parquet files and commits
through :func:`sparkonce.delta.txn.commit.commit_files`, as the sink's driver does); the table is then read back
with delta-rs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location

WRITER = """
import sys, time
from pathlib import Path
import pyarrow as pa
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location

table, go, writer, app_id = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = pa.table({"writer": pa.array([writer] * 5, pa.int64()), "n": pa.array(range(5), pa.int64())})
files = TableFileWriter(FileWriterOptions(table_location(table)), task_id=writer)
files.write(data)
written = files.close()
deadline = time.monotonic() + 60
while not go.exists():  # every writer has its files ready: then all commit at once
    assert time.monotonic() < deadline
    time.sleep(0.001)
result = commit_files(table, written, data_schema=data.schema, txn=BatchTxn(app_id, 0))
print(result.table_version if not result.skipped else "skipped")
"""


def race(table: Path, tmp_path: Path, app_ids: list[str]) -> list[str]:
    go = tmp_path / "go"
    table.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(table), str(go), str(i), app_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, app_id in enumerate(app_ids)
    ]
    ready = time.monotonic() + 60
    while not all(any(table.glob(f"part-{i:05d}-*.parquet")) for i in range(len(app_ids))):
        assert time.monotonic() < ready, "the writers did not write their files"
        time.sleep(0.01)
    go.touch()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def test_writers_racing_to_create_a_table_with_the_same_batch_make_one_commit(tmp_path: Path) -> None:
    table = tmp_path / "t"
    outputs = race(table, tmp_path, ["query-a"] * 4)
    assert sorted(outputs) == ["0", "skipped", "skipped", "skipped"]
    delta = DeltaTable(str(table))
    assert delta.version() == 0
    assert delta.transaction_version("query-a") == 0
    rows = delta.to_pyarrow_table().to_pylist()
    winners = {r["writer"] for r in rows}
    assert len(winners) == 1 and sorted(r["n"] for r in rows) == [0, 1, 2, 3, 4]


def test_writers_of_different_queries_racing_on_a_new_table_all_commit(tmp_path: Path) -> None:
    table = tmp_path / "t"
    outputs = race(table, tmp_path, [f"query-{i}" for i in range(4)])
    assert sorted(outputs) == ["0", "1", "2", "3"]
    delta = DeltaTable(str(table))
    assert delta.version() == 3
    assert all(delta.transaction_version(f"query-{i}") == 0 for i in range(4))
    rows = delta.to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["n"]) for r in rows) == [(w, n) for w in range(4) for n in range(5)]
    first = DeltaTable(str(table), version=0).to_pyarrow_table().to_pylist()
    assert len(first) == 5 and len({r["writer"] for r in first}) == 1  # version 0 holds one writer's data


def test_a_replayed_first_batch_is_skipped(tmp_path: Path) -> None:
    table = tmp_path / "t"
    table.mkdir()
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})

    def attempt() -> object:
        files = TableFileWriter(FileWriterOptions(table_location(table)))
        files.write(data)
        return commit_files(str(table), files.close(), data_schema=data.schema, txn=BatchTxn("q", 0))

    first, replay = attempt(), attempt()
    assert first.table_version == 0 and not first.skipped  # type: ignore[attr-defined]
    assert replay.skipped  # type: ignore[attr-defined]
    delta = DeltaTable(str(table))
    assert delta.version() == 0 and sorted(delta.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    assert len(list(table.glob("*.parquet"))) == 1  # the replay's files were removed


@pytest.mark.spark
def test_version_0_holds_the_first_batch_write(spark: object, tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(path)
    assert DeltaTable(path).version() == 0
    got = sorted(tuple(r) for r in spark.read.format("delta").option("versionAsOf", 0).load(path).collect())
    assert got == [(1, "a"), (2, "b")]
