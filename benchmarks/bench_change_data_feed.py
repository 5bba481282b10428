"""The change data feed vs plain Delta reads of the same table, same run: batch read and stream.

Run: ``.venv/bin/python benchmarks/bench_change_data_feed.py [--part all|batch|stream] [--commits 8]
[--rows-per-commit 500000] [--repeat 3] [--updates 0]``.

1. Writes a table with ``delta.enableChangeDataFeed = true`` in ``--commits`` appends (one file each), then
   ``--updates`` UPDATEs of 1 % of the rows each (which write ``_change_data/`` files).
2. Reads it into the ``noop`` sink (every column decoded), alternated, best of ``--repeat``: the plain Delta read of
   the latest table version, and the change data feed from table version 0 to the latest (the appends' files as
   ``insert`` rows plus the updates' change files, with ``_change_type``, ``_commit_version``,
   ``_commit_timestamp``).
3. Prints rows/s of each and the ratio change feed / plain (target >= 0.8).
4. ``--part stream``: the same change volume as streams, alternated, best of ``--repeat``: the plain Delta stream
   source and the change data feed stream, both from ``startingVersion`` 0 with ``maxFilesPerTrigger=1`` and the
   availableNow trigger into ``noop`` (one micro-batch per append; each a fresh checkpoint). The appends only
   (``--updates`` is ignored here: the plain stream source fails on an UPDATE commit), so both streams deliver the
   same rows; the feed's carry ``_change_type``, ``_commit_version``, ``_commit_timestamp`` too. Prints rows/s,
   batches and the ratio change feed stream / plain stream (target >= 0.8).

Asserts only the row counts.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkonce.delta.tables import DeltaTable
from sparkonce.spark import local_session


def read_noop(spark: Any, path: Path, *, changes: bool) -> float:
    reader = spark.read.format("delta")
    if changes:
        reader = reader.option("readChangeFeed", "true").option("startingVersion", 0)
    start = time.perf_counter()
    reader.load(str(path)).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def stream_noop(spark: Any, path: Path, checkpoint: Path, *, changes: bool) -> tuple[float, int]:
    """Stream the table from table version 0 into ``noop``; return (seconds, micro-batches run)."""
    shutil.rmtree(checkpoint, ignore_errors=True)
    reader = spark.readStream.format("delta").option("startingVersion", 0).option("maxFilesPerTrigger", 1)
    if changes:
        reader = reader.option("readChangeFeed", "true")
    start = time.perf_counter()
    query = (
        reader.load(str(path))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    return seconds, batches


def stream_part(spark: Any, table: Path, work: Path, rows: int, repeat: int) -> None:
    best = {"plain stream": float("inf"), "change feed stream": float("inf")}
    batches = {"plain stream": 0, "change feed stream": 0}
    checkpoint = work / "checkpoint"
    stream_noop(spark, table, checkpoint, changes=False)  # warm-up
    stream_noop(spark, table, checkpoint, changes=True)
    for _ in range(repeat):
        for name, changes in (("plain stream", False), ("change feed stream", True)):
            seconds, batches[name] = stream_noop(spark, table, checkpoint, changes=changes)
            best[name] = min(best[name], seconds)
    out = Table(title="Delta stream source vs change data feed stream (maxFilesPerTrigger=1, availableNow)")
    out.add_column("stream")
    out.add_column("rows")
    out.add_column("batches", justify="right")
    out.add_column("seconds", justify="right")
    out.add_column("rows/s", justify="right")
    for name, seconds in best.items():
        out.add_row(name, f"{rows:,}", str(batches[name]), f"{seconds:.2f}", f"{rows / seconds:,.0f}")
    Console().print(out)
    ratio = best["plain stream"] / best["change feed stream"]
    Console().print(f"change feed stream / plain stream, rows/s: [bold]{ratio:.2f}x[/bold] (target >= 0.8)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("all", "batch", "stream"), default="all")
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--rows-per-commit", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--updates", type=int, default=0)
    args = parser.parse_args()

    spark = local_session(app_name="bench-change-data-feed")
    work = Path(tempfile.mkdtemp(prefix="bench-cdf-"))
    table = work / "t"
    try:
        n = args.rows_per_commit
        for commit in range(args.commits):
            df = spark.range(commit * n, (commit + 1) * n, numPartitions=1).selectExpr(
                "id",
                "concat('device-', cast(id % 1000 as string)) as device",
                "cast(id % 9973 as double) / 7 as value",
                "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as payload",
            )
            df.write.format("delta").mode("append").option("delta.enableChangeDataFeed", "true").save(str(table))
        if args.part in ("all", "stream"):
            stream_part(spark, table, work, args.commits * n, args.repeat)
        if args.part == "stream":
            return
        for update in range(args.updates):
            DeltaTable.forPath(spark, str(table)).update(f"id % 100 = {update}", {"value": "value + 1"})
        plain_rows = spark.read.format("delta").load(str(table)).count()
        change_rows = (
            spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(str(table))
        ).count()
        assert plain_rows == args.commits * n, plain_rows

        best = {"plain": float("inf"), "change feed": float("inf")}
        read_noop(spark, table, changes=False)  # warm-up
        read_noop(spark, table, changes=True)
        for _ in range(args.repeat):
            best["plain"] = min(best["plain"], read_noop(spark, table, changes=False))
            best["change feed"] = min(best["change feed"], read_noop(spark, table, changes=True))
        rows = {"plain": plain_rows, "change feed": change_rows}
        out = Table(title=f"Delta batch read vs change data feed ({args.commits} appends, {args.updates} updates)")
        out.add_column("read")
        out.add_column("rows")
        out.add_column("seconds", justify="right")
        out.add_column("rows/s", justify="right")
        for name, seconds in best.items():
            out.add_row(name, f"{rows[name]:,}", f"{seconds:.2f}", f"{rows[name] / seconds:,.0f}")
        Console().print(out)
        ratio = (change_rows / best["change feed"]) / (plain_rows / best["plain"])
        Console().print(f"change feed / plain, rows/s: [bold]{ratio:.2f}x[/bold] (target >= 0.8)")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
