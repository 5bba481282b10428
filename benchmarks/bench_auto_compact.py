"""What auto compaction adds to a streaming batch's commit (no Spark: the sink runs it in its commit process).

A partitioned table gets one-file appends (delta-rs) into a few partitions, as a stream's batches would leave it.
Timed in this process, p50 over ``--repeat`` samples:

* baseline: a one-file append commit through sparkonce's ``commit_files`` (what every batch pays);
* check: :func:`compact_after_commit` when nothing is due (what every batch pays with auto compaction on);
* compaction: :func:`compact_after_commit` when a partition passes the threshold (``--min-num-files`` small
  files read, rewritten into one file, committed).

Usage: ``.venv/bin/python benchmarks/bench_auto_compact.py [--files 300] [--partitions 6] [--rows 2000]
[--min-num-files 50] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from rich.console import Console
from rich.table import Table

from sparkonce.delta.ops.auto_compact import AutoCompactSettings, compact_after_commit
from sparkonce.delta.txn.commit import commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location


def _frame(first: int, rows: int, part: str) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + rows), pa.int64()), "part": [part] * rows})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--min-num-files", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-auto-compact-"))
    try:
        table = root / "t"
        parts = [f"p{i}" for i in range(args.partitions)]
        for i in range(args.files):  # spread so no partition passes the threshold yet
            write_deltalake(str(table), _frame(i * args.rows, args.rows, parts[i % len(parts)]), mode="append",
                            partition_by=["part"])  # fmt: skip
        location = table_location(str(table))
        settings = AutoCompactSettings(enabled=True, min_num_files=args.min_num_files)
        quiet = AutoCompactSettings(enabled=True, min_num_files=10**9)
        options = FileWriterOptions(location=location, partition_by=("part",))
        commit, check, compaction = [], [], []
        next_id = args.files * args.rows
        for _ in range(args.repeat):
            with TableFileWriter(options, task_id=0) as writer:
                writer.write_batches(_frame(next_id, args.rows, parts[0]).to_batches())
                files = writer.close()
            next_id += args.rows
            started = time.perf_counter()
            commit_files(location, files, data_schema=_frame(0, 1, "x").schema, partition_by=("part",))
            commit.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert compact_after_commit(location, files, quiet) is None
            check.append(time.perf_counter() - started)
            started = time.perf_counter()
            result = compact_after_commit(location, files, settings)
            compaction.append(time.perf_counter() - started)
            assert result is not None and result.table_version is not None
            for _ in range(args.min_num_files):  # the partition's small files again, for the next sample
                write_deltalake(str(table), _frame(next_id, args.rows, parts[0]), mode="append", partition_by=["part"])
                next_id += args.rows
        out = Table(title=f"auto compaction, {args.files} files in {args.partitions} partitions, p50 of {args.repeat}")
        for column in ("step", "p50 ms", "x one-file commit"):
            out.add_column(column)
        base = statistics.median(commit)
        for name, samples in (("one-file commit", commit), ("check, nothing due", check), ("compaction", compaction)):
            p50 = statistics.median(samples)
            out.add_row(name, f"{p50 * 1000:.1f}", f"{p50 / base:.2f}x")
        Console().print(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
