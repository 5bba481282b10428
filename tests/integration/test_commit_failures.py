"""A commit step that fails after its Delta commit landed never deletes that commit's files (issue 21).

The sink's ``commit()`` runs in a driver-side Python process that Spark starts; here that process alone is
SIGKILLed right after the Delta commit (crash target ``process``): the driver lives, Spark calls the sink's
``abort()`` in a new process and fails the query. The abort must keep the committed files, and the restart must
skip the batch by its txn and leave every row exactly once, in a table delta-rs reads.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce_local.chaos import DriverRun, run_driver
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns
from tests.integration.conftest import delta_ids, missing_referenced_files

pytestmark = [pytest.mark.spark, pytest.mark.crash]


def _source_table(table: Path, versions: int, rows: int) -> list[int]:
    for v in range(versions):
        ids = list(range(v * rows, (v + 1) * rows))
        write_deltalake(str(table), pa.table({"id": ids, "device": [f"d{i % 3}" for i in ids]}), mode="append")
    return list(range(versions * rows))


def _assert_commit_process_killed(run: DriverRun, batch_id: int) -> None:
    """The driver lived (the query failed, so ``awaitTermination`` raised and Python exited with status 1); the
    commit process died at the point."""
    assert run.returncode == 1, run.stderr[-3000:]
    (record,) = run.killed_processes("process")
    assert (record.point, record.batch_id) == ("after_delta_commit", batch_id)
    assert record.pid != run.pgid  # not the Python driver: a process Spark started for the commit


@pytest.mark.sampled(keep=1)
@pytest.mark.parametrize("partition_by", [None, "device"], ids=["unpartitioned", "partitioned"])
def test_stream_commit_process_killed_after_delta_commit_keeps_its_files(
    tmp_path: Path, partition_by: str | None
) -> None:
    """The scenario of issue 21: Delta -> Delta, availableNow, the commit process of batch 0 dies after its commit."""
    source, target, ck = tmp_path / "src", tmp_path / "dst", tmp_path / "ck"
    expected = _source_table(source, 3, rows=20)
    if partition_by:
        write_deltalake(
            str(target),
            pa.table({"id": pa.array([], pa.int64()), "device": pa.array([], pa.string())}),
            partition_by=[partition_by],
        )
    args = ["-m", "tests.integration.drivers.delta_to_delta", str(source), str(target), str(ck)]

    crashed = run_driver(args, crash_at="after_delta_commit:0", crash_target="process", cwd=str(REPO), timeout=300)
    _assert_commit_process_killed(crashed, 0)
    query_id = checkpoint_query_id(ck)
    assert delta_txns(target) == [(query_id, 0)]
    assert not (ck / "commits" / "0").exists()
    assert missing_referenced_files(target) == []  # Spark's abort kept the files the Delta commit references
    assert delta_ids(target) == expected[:20]

    finished = run_driver(args, cwd=str(REPO), timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert missing_referenced_files(target) == []
    ids = delta_ids(target)  # read by delta-rs
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert ids == expected
    assert delta_txns(target) == [(query_id, b) for b in range(3)]  # batch 0 replayed by Spark, skipped by its txn


def test_batch_write_commit_process_killed_after_delta_commit_keeps_its_files(tmp_path: Path) -> None:
    table = tmp_path / "table"
    args = ["-m", "tests.integration.drivers.batch_write", str(table), "--txn-app-id", "loader"]
    assert run_driver([*args, "--rows", "30", "--txn-version", "0"], cwd=str(REPO), timeout=300).returncode == 0

    crashed = run_driver(
        [*args, "--rows", "40", "--start", "30", "--txn-version", "1"],
        crash_at="after_delta_commit:1",
        crash_target="process",
        cwd=str(REPO),
        timeout=300,
    )
    _assert_commit_process_killed(crashed, 1)
    assert delta_txns(table) == [("loader", 0), ("loader", 1)]
    assert missing_referenced_files(table) == []
    assert delta_ids(table) == list(range(70))

    again = run_driver([*args, "--rows", "40", "--start", "30", "--txn-version", "1"], cwd=str(REPO), timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert delta_txns(table) == [("loader", 0), ("loader", 1)]  # the re-run found its txn: skipped
    assert missing_referenced_files(table) == []
    assert delta_ids(table) == list(range(70))
    assert DeltaTable(str(table)).version() == 1
