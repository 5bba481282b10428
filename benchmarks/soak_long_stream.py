"""A long-running stream in fast motion: many micro-batches into one Delta table, and what the table costs on the way.

Run: ``.venv/bin/python benchmarks/soak_long_stream.py [--batches 20000] [--rows-per-batch 10] [--partitions 4]
[--report-every 1000] [--clock-rate 36] [--work-dir DIR] [--property delta.autoOptimize.autoCompact=true ...]``.

One query, Spark's ``rate-micro-batch`` source (exactly ``--rows-per-batch`` rows per micro-batch, ``value`` numbering
them from 0) into sparkonce's Delta sink, partitioned by ``value % --partitions``, as fast as Spark triggers it. The
table is created with the given table properties (by default: a checkpoint every 10 commits, Delta's default;
expired log files removed after 10 minutes and checkpoint tombstones after a day; auto compaction on). The
retention rules run on a clock ``--clock-rate`` times as fast as the real one (``SPARKONCE_RETENTION_CLOCK``, see
``sparkonce.delta.log.clock``; 1 = the real clock): at the default 36, 20,000 batches at about 4 a second are about two
days of the stream's clock, so the run crosses Delta's midnight cut-off for log files twice and its tombstones
reach the steady state of a stream that has run longer than their retention.

Every ``--report-every`` batches it prints one line: the batch's commit and trigger
times (mean over the last interval), the files in ``_delta_log`` (commits, checkpoints, CRCs and their bytes), the
active data files, and the Delta log's checkpoint. At the end the table is read with delta-rs and checked exactly:
the rows of every committed batch (Spark's ``commits/``), each ``value`` once, nothing else.

What it shows (issue 25): the per-batch cost on the last interval vs the first, a log that stays bounded
(checkpoints + the retained commits) and active files that stay bounded (compaction). Asserts nothing but the
exactly-once check (exit 1 when it fails); the figures go into docs/delta.md ("A long-running stream in fast motion").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_PROPERTIES = (
    "delta.checkpointInterval=10",
    "delta.logRetentionDuration=interval 10 minutes",
    "delta.deletedFileRetentionDuration=interval 1 day",
    "delta.autoOptimize.autoCompact=true",
)


def log_files(table: Path) -> dict[str, float]:
    """Counts and bytes of what ``_delta_log`` holds now."""
    commits = checkpoints = other = 0
    size = 0
    for path in (table / "_delta_log").iterdir():
        if not path.is_file():
            continue
        size += path.stat().st_size
        if path.name.endswith(".json") and path.name[:20].isdigit():
            commits += 1
        elif ".checkpoint" in path.name:
            checkpoints += 1
        else:
            other += 1
    return {"commits": commits, "checkpoints": checkpoints, "other": other, "log MiB": size / 2**20}


def table_facts(table: Path) -> dict[str, Any]:
    from sparkonce.delta.log.delta_log import DeltaLog

    snapshot = DeltaLog(table).snapshot()
    return {
        "table_version": snapshot.table_version,
        "active files": len(snapshot.files),
        "tombstones": len(snapshot.removes),
        "from checkpoint": snapshot.checkpoint_version,
    }


def committed_batches(checkpoint_dir: Path) -> list[int]:
    folder = checkpoint_dir / "commits"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def check_exactly_once(table: Path, checkpoint_dir: Path, rows_per_batch: int) -> tuple[bool, str]:
    """Every row of the committed batches once, nothing else (delta-rs reads the table)."""
    import deltalake
    import pyarrow.compute as pc

    batches = committed_batches(checkpoint_dir)
    values = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["value"]).column("value")
    count = len(values)
    distinct = len(pc.unique(values))
    # Rows of a batch planned after the last commits/N may already be in the table (its Delta commit landed, the
    # checkpoint's commit not yet, when the query was stopped): they are counted as that batch's rows.
    planned = max(batches, default=-1) + 1
    lo, hi = (pc.min(values).as_py(), pc.max(values).as_py()) if count else (None, None)
    ok = count == distinct and lo == 0 and hi is not None and count == hi + 1 and count % rows_per_batch == 0
    ok = ok and count // rows_per_batch in (planned, planned + 1)
    return ok, f"{count:,} rows, {distinct:,} distinct, values {lo}..{hi}, batches 0..{planned - 1} committed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--rows-per-batch", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--report-every", type=int, default=1_000)
    parser.add_argument("--clock-rate", type=float, default=36.0, help="the retention clock's speed (1: real)")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--property", action="append", metavar="KEY=VALUE", help="a table property (repeatable)")
    args = parser.parse_args(argv)
    properties = dict(p.split("=", 1) for p in (args.property or DEFAULT_PROPERTIES))

    from pyspark.sql import functions as F

    from sparkonce.delta.log.clock import CLOCK_VARIABLE, now_ms
    from sparkonce.spark import local_session

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="sparkonce-soak-"))
    table, checkpoint_dir = work / "table", work / "checkpoint"
    shutil.rmtree(table, ignore_errors=True)
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    if args.clock_rate != 1.0:  # before Spark starts: its Python processes (the sink's commit runner) inherit it
        os.environ[CLOCK_VARIABLE] = f"{int(time.time() * 1000)}:{args.clock_rate}"
    spark = local_session(app_name="sparkonce-soak")
    spark.sparkContext.setLogLevel("ERROR")
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", args.rows_per_batch)
        .option("numPartitions", 1)
        .load()
        .select("value", (F.col("value") % args.partitions).alias("part"))
    )
    writer = stream.writeStream.format("delta").option("checkpointLocation", str(checkpoint_dir))
    for key, value in properties.items():
        writer = writer.option(key, value)
    clock = os.environ.get(CLOCK_VARIABLE, "real")
    print(f"work dir {work}; properties {json.dumps(properties)}; retention clock {clock}", flush=True)
    started = time.perf_counter()
    query = writer.partitionBy("part").trigger(processingTime="0 seconds").start(str(table))
    seen = -1
    commit_ms: list[float] = []
    trigger_ms: list[float] = []
    intervals: list[dict[str, Any]] = []
    try:
        while seen < args.batches - 1:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            for progress in query.recentProgress:
                batch_id = int(progress["batchId"])
                if batch_id <= seen:
                    continue
                seen = batch_id
                durations = progress.get("durationMs", {})
                commit_ms.append(float(durations.get("addBatch", 0)))
                trigger_ms.append(float(durations.get("triggerExecution", 0)))
                if (batch_id + 1) % args.report_every == 0:
                    row = {
                        "batch_id": batch_id,
                        "elapsed s": round(time.perf_counter() - started, 1),
                        "clock": time.strftime("%d %H:%M", time.gmtime(now_ms() / 1000)),
                        "addBatch ms (mean)": round(statistics.fmean(commit_ms[-args.report_every :]), 1),
                        "trigger ms (mean)": round(statistics.fmean(trigger_ms[-args.report_every :]), 1),
                        **log_files(table),
                        **table_facts(table),
                    }
                    row["log MiB"] = round(row["log MiB"], 2)
                    intervals.append(row)
                    print(json.dumps(row), flush=True)
            time.sleep(0.2)
    finally:
        query.stop()
    ok, summary = check_exactly_once(table, checkpoint_dir, args.rows_per_batch)
    print(f"exactly once: {'yes' if ok else 'NO'}: {summary}", flush=True)
    if len(intervals) >= 2:
        first, last = intervals[0], intervals[-1]
        for key in ("addBatch ms (mean)", "trigger ms (mean)"):
            ratio = last[key] / first[key] if first[key] else float("nan")
            print(f"{key}: first interval {first[key]}, last {last[key]}, last/first {ratio:.2f}x", flush=True)
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
