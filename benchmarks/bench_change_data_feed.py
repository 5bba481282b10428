"""A batch read of a table's change data feed vs a plain Delta read of the same table's data files, same run.

Run: ``.venv/bin/python benchmarks/bench_change_data_feed.py [--commits 8] [--rows-per-commit 500000] [--repeat 3]
[--updates 0]``.

1. Writes a table with ``delta.enableChangeDataFeed = true`` in ``--commits`` appends (one file each), then
   ``--updates`` UPDATEs of 1 % of the rows each (which write ``_change_data/`` files).
2. Reads it into the ``noop`` sink (every column decoded), alternated, best of ``--repeat``: the plain Delta read of
   the latest table version, and the change data feed from table version 0 to the latest (the appends' files as
   ``insert`` rows plus the updates' change files, with ``_change_type``, ``_commit_version``,
   ``_commit_timestamp``).
3. Prints rows/s of each and the ratio change feed / plain (target >= 0.8).

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


def main() -> None:
    parser = argparse.ArgumentParser()
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
