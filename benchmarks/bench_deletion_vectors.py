"""Deletion vectors, same run: reading a table with them vs the same rows without, and a DELETE that writes them vs
one that rewrites whole files.

Run: ``.venv/bin/python benchmarks/bench_deletion_vectors.py [--files 8] [--rows-per-file 500000] [--repeat 3]
[--delete-every 10] [--delete-one-in 100]``.

1. Writes table ``plain`` with the Delta sink (``files`` files), then builds ``with_dv``: a copy with
   ``delta.enableDeletionVectors`` whose DELETE (sparkonce's own, writing deletion vectors) deletes every
   ``--delete-every``-th row of every file.
2. Writes ``survivors``: the rows ``with_dv`` keeps, rewritten without deletion vectors (same number of files).
3. Reads ``with_dv`` (on the native path, which drops deleted rows by a vectorized filter on
   ``_metadata.row_index``, and through the Python data source) and ``survivors`` (native) into the ``noop`` sink,
   every column and one column, alternated, best of ``--repeat``, and prints rows/s of each, the ratio with_dv /
   survivors (target >= 0.8) and native / Python source on the DV table.
4. DELETE of one row in ``--delete-one-in`` (1% by default, spread over every file) on fresh copies of ``plain``:
   with deletion vectors enabled (each file keeps its rows, a deletion vector marks the deleted ones) and without
   (each file rewritten with its other 99% copied), alternated, best of ``--repeat``; prints seconds of each and the
   ratio.

Asserts only that the tables hold the same number of rows.
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

from sparkonce.spark import local_session


def copy_table(spark: Any, source: Path, target: Path, *, deletion_vectors: bool) -> None:
    """A copy of ``source`` at ``target``; with ``deletion_vectors``, with ``delta.enableDeletionVectors`` set."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    if deletion_vectors:
        spark.sql(f"ALTER TABLE delta.`{target}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")


def timed_delete(spark: Any, table: Path, condition: str) -> float:
    start = time.perf_counter()
    spark.sql(f"DELETE FROM delta.`{table}` WHERE {condition}")
    return time.perf_counter() - start


def read_noop(spark: Any, path: Path, *, native: bool = True, column: str | None = None) -> float:
    """Seconds to read the table into ``noop`` (every column, or only ``column``), on the native path or the Python
    data source."""
    spark.conf.set("spark.sparkonce.nativeReads", str(native).lower())
    try:
        start = time.perf_counter()
        frame = spark.read.format("delta").load(str(path))
        if column is not None:
            frame = frame.select(column)
        frame.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start
    finally:
        spark.conf.unset("spark.sparkonce.nativeReads")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--delete-every", type=int, default=10)
    parser.add_argument("--delete-one-in", type=int, default=100)
    args = parser.parse_args()

    spark = local_session(app_name="bench-deletion-vectors")
    work = Path(tempfile.mkdtemp(prefix="bench-dv-"))
    try:
        rows = args.files * args.rows_per_file
        df = spark.range(0, rows, numPartitions=args.files).selectExpr(
            "id",
            "concat('device-', cast(id % 1000 as string)) as device",
            "cast(id % 9973 as double) / 7 as value",
            "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as payload",
        )
        df.write.format("delta").mode("append").save(str(work / "plain"))
        copy_table(spark, work / "plain", work / "with_dv", deletion_vectors=True)
        spark.sql(f"DELETE FROM delta.`{work / 'with_dv'}` WHERE id % {args.delete_every} = 3")
        survivors = rows - len(range(3, rows, args.delete_every))
        (
            spark.read.format("delta")
            .load(str(work / "plain"))
            .where(f"id % {args.delete_every} != 3")
            .repartition(args.files)
            .write.format("delta")
            .mode("append")
            .save(str(work / "survivors"))
        )
        counts = {name: spark.read.format("delta").load(str(work / name)).count() for name in ("with_dv", "survivors")}
        assert counts == {"with_dv": survivors, "survivors": survivors}, counts

        runs = {
            "with_dv, native": ("with_dv", True, None),
            "with_dv, Python source": ("with_dv", False, None),
            "survivors, native": ("survivors", True, None),
            "with_dv, one column, native": ("with_dv", True, "value"),
            "with_dv, one column, Python source": ("with_dv", False, "value"),
            "survivors, one column, native": ("survivors", True, "value"),
        }
        best = dict.fromkeys(runs, float("inf"))
        read_noop(spark, work / "survivors")  # warm-up
        read_noop(spark, work / "with_dv")
        for _ in range(args.repeat):
            for name, (folder, native, column) in runs.items():
                best[name] = min(best[name], read_noop(spark, work / folder, native=native, column=column))
        table = Table(title=f"Delta batch read, {survivors:,} rows kept of {rows:,} ({args.files} files)")
        table.add_column("read")
        table.add_column("seconds", justify="right")
        table.add_column("rows/s", justify="right")
        for name, seconds in best.items():
            table.add_row(name, f"{seconds:.2f}", f"{survivors / seconds:,.0f}")
        Console().print(table)
        for suffix in ("", ", one column"):
            dv, plain = best[f"with_dv{suffix}, native"], best[f"survivors{suffix}, native"]
            python = best[f"with_dv{suffix}, Python source"]
            Console().print(
                f"{suffix.strip(', ') or 'every column'}: with deletion vectors / without, rows/s: "
                f"[bold]{plain / dv:.2f}x[/bold] (target >= 0.8); native / Python source on the DV table, time: "
                f"[bold]{dv / python:.2f}x[/bold]"
            )

        condition = f"id % {args.delete_one_in} = 7"
        deleted = len(range(7, rows, args.delete_one_in))
        seconds = {"deletion vectors": float("inf"), "whole-file rewrite": float("inf")}
        for _ in range(args.repeat):
            for name in seconds:
                table_path = work / "delete"
                copy_table(spark, work / "plain", table_path, deletion_vectors=name == "deletion vectors")
                seconds[name] = min(seconds[name], timed_delete(spark, table_path, condition))
                kept = spark.read.format("delta").load(str(table_path)).count()
                assert kept == rows - deleted, (name, kept)
        table = Table(title=f"DELETE of {deleted:,} rows of {rows:,} ({args.files} files), best of {args.repeat}")
        table.add_column("DELETE")
        table.add_column("seconds", justify="right")
        for name, value in seconds.items():
            table.add_row(name, f"{value:.2f}")
        Console().print(table)
        speedup = seconds["whole-file rewrite"] / seconds["deletion vectors"]
        Console().print(f"whole-file rewrite / deletion vectors, seconds: [bold]{speedup:.2f}x[/bold]")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
