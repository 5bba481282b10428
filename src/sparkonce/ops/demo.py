"""The exactly-once demo: stream files into a Delta table, SIGKILL the driver between the Delta commit and the
checkpoint commit, restart, and prove from the table that no row is duplicated or lost.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sparkonce.ops.chaos import run_driver


@dataclass(frozen=True)
class CrashState:
    """What the checkpoint and the table held right after the crash."""

    planned_batch: int
    checkpoint_committed: bool
    table_txn_version: int | None
    rows_in_table: int


@dataclass(frozen=True)
class DemoResult:
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


def run_demo(work_dir: Path, *, batches: int = 4, rows_per_batch: int = 1000, crash_batch: int = 2) -> DemoResult:
    """Run the demo in ``work_dir`` (wiped first). Needs a JDK; takes about a minute."""
    if work_dir.exists():
        shutil.rmtree(work_dir)
    inputs, table, checkpoint = work_dir / "input", work_dir / "table", work_dir / "checkpoint"
    expected = write_json_batches(inputs, batches, rows_per_batch)
    args = ["-m", "sparkonce.ops.stream_files", str(inputs), str(table), str(checkpoint)]
    crash_at = f"after_delta_commit:{crash_batch}"

    first = run_driver(args, crash_at=crash_at)
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    from deltalake import DeltaTable

    after_crash = CrashState(
        planned_batch=crash_batch,
        checkpoint_committed=(checkpoint / "commits" / str(crash_batch)).exists(),
        table_txn_version=DeltaTable(str(table)).transaction_version(query_id),
        rows_in_table=len(table_ids(table)),
    )
    second = run_driver(args)
    if second.returncode != 0:
        raise RuntimeError(f"the restarted driver failed (exit {second.returncode}):\n{second.stderr[-4000:]}")
    ids = table_ids(table)
    counts = Counter(ids)
    from sparkonce.delta.log import DeltaLog

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


__all__ = ["CrashState", "DemoResult", "run_demo", "table_ids", "write_json_batches"]
