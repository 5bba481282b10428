"""The exactly-once demo: stream files into a Delta table, SIGKILL the driver between the Delta commit and the
checkpoint commit, restart, and prove from the table that no row is duplicated or lost.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sparkonce.errors import DriverError
from sparkonce_local.chaos import DriverRun, run_driver
from sparkonce_local.workdir import fresh_work_dir


@dataclass(frozen=True)
class CrashState:
    """What the checkpoint and the table held right after the crash (plain data)."""

    planned_batch: int
    checkpoint_committed: bool
    table_txn_version: int | None
    rows_in_table: int


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo checked (plain data; computed in the CLI process)."""

    work_dir: Path
    query_id: str
    crash_at: str
    crashed: bool
    after_crash: CrashState
    rows_expected: int
    rows_in_table: int
    duplicated_ids: int
    missing_ids: int
    delta_commits: int
    commits_of_crashed_batch: int
    """Delta commits carrying txn(query id, crashed batch id): 1 means the replay was skipped."""

    @property
    def exactly_once(self) -> bool:
        return (
            self.crashed
            and self.duplicated_ids == 0
            and self.missing_ids == 0
            and (self.rows_in_table == self.rows_expected)
        )


def write_json_batches(directory: Path, files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
    """Write ``files`` JSON-lines files of ``rows_per_file`` sensor rows with consecutive ids; return the ids."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = []
    # Spark's file source takes files in modification-time order: space them a second apart so that batch N
    # always reads file N (files written in the same instant may be taken in any order).
    base = time.time() - files - 10
    for f in range(files):
        lines = []
        for r in range(rows_per_file):
            row_id = start + f * rows_per_file + r
            ids.append(row_id)
            lines.append(json.dumps({"id": row_id, "device": f"dev-{row_id % 4}", "value": row_id / 10}))
        path = directory / f"input-{start + f:06d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (base + start + f, base + start + f))
    return ids


def table_ids(table: Path) -> list[int]:
    """Every ``id`` of a Delta table, read with delta-rs (independently of sparkonce's reader)."""
    from deltalake import DeltaTable

    return list(pa.table(DeltaTable(str(table)).to_pyarrow_table(columns=["id"])).column("id").to_pylist())


def require_success(run: DriverRun, *, what: str) -> None:
    """Raise :class:`DriverError` with the exit code and the log's tail unless ``run`` exited with 0.

    Raises:
        DriverError: ``run`` failed.
    """
    if run.returncode != 0:
        raise DriverError(f"{what} failed (exit {run.returncode}); the end of its log:\n{run.stderr[-4000:]}")


def run_demo(work_dir: Path, *, batches: int = 4, rows_per_batch: int = 1000, crash_batch: int = 2) -> DemoResult:
    """Run the demo in ``work_dir`` (wiped first if sparkonce created it). Needs a JDK; takes about a minute.

    Raises:
        OptionError: ``work_dir`` is a folder sparkonce did not create and is not empty (nothing is deleted).
        DriverError: The streaming driver failed other than by the planned crash.
    """
    work_dir = fresh_work_dir(work_dir, command="demo")
    inputs, table, checkpoint = work_dir / "input", work_dir / "table", work_dir / "checkpoint"
    expected = write_json_batches(inputs, batches, rows_per_batch)
    args = ["-m", "sparkonce.ops.stream_files", str(inputs), str(table), str(checkpoint)]
    crash_at = f"after_delta_commit:{crash_batch}"

    first = run_driver(args, crash_at=crash_at)
    if not first.killed:
        require_success(first, what="the first driver run (before the crash point fired)")
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    from deltalake import DeltaTable

    after_crash = CrashState(
        planned_batch=crash_batch,
        checkpoint_committed=(checkpoint / "commits" / str(crash_batch)).exists(),
        table_txn_version=DeltaTable(str(table)).transaction_version(query_id),
        rows_in_table=len(table_ids(table)),
    )
    require_success(run_driver(args), what="the restarted driver")
    ids = table_ids(table)
    counts = Counter(ids)
    from sparkonce.delta.log.delta_log import DeltaLog

    batch_commits = sum(
        1
        for entry in DeltaLog(table).history()
        for txn in entry.txns
        if txn.app_id == query_id and txn.txn_version == crash_batch
    )
    return DemoResult(
        work_dir=work_dir,
        query_id=query_id,
        crash_at=crash_at,
        crashed=first.killed,
        after_crash=after_crash,
        rows_expected=len(expected),
        rows_in_table=len(ids),
        duplicated_ids=sum(1 for n in counts.values() if n > 1),
        missing_ids=len(set(expected) - set(counts)),
        delta_commits=DeltaTable(str(table)).version() + 1,
        commits_of_crashed_batch=batch_commits,
    )


__all__ = ["CrashState", "DemoResult", "require_success", "run_demo", "table_ids", "write_json_batches"]
