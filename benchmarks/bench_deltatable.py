"""The DeltaTable API: merge cost against table size, and compaction of small files against Spark's Parquet path.

Run: ``.venv/bin/python benchmarks/bench_deltatable.py [--merge-files 10,40,160] [--rows-per-file 2000]
[--touched-keys 4] [--small-files 1000] [--rows-per-small-file 1000] [--repeat 2] [--part all|merge|optimize]``.

One SparkSession (``local[2]``) serves every measurement; a warm-up of each operation on a tiny table runs first.

**(a) Merge through the builder against table size**: tables of ``--merge-files`` files of ``--rows-per-file`` rows
(key ranges narrow per file), one source per round updating ``--touched-keys`` existing keys spread over the key
space (so one file each) plus as many new keys, merged with ``DeltaTable.merge(...).whenMatchedUpdateAll()
.whenNotMatchedInsertAll().execute()``. Prints seconds (best of ``--repeat``), candidate files, files rewritten,
files in the table, and each size's time over the smallest table's: it should stay near 1 (cost follows files
touched, not table size).

**(b) Compaction of ``--small-files`` small files**: a Delta table written as that many files in one commit,
compacted by ``DeltaTable.optimize().executeCompaction()`` (one commit, ``dataChange=false``), against Spark
reading the same Parquet files and writing them back (``spark.read.parquet(files).write.parquet(out)``), same
run, best of ``--repeat`` each (the table is rebuilt for every compaction). Prints rows/s and the ratio.

Prints tables; asserts nothing. The machine is shared, so figures are noisy.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from sparkonce.delta.tables import DeltaTable
from sparkonce.spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

console = Console(width=140)


def build(spark: SparkSession, path: Path, files: int, rows_per_file: int) -> int:
    import pyspark.sql.functions as F

    rows = files * rows_per_file
    frame = spark.range(0, rows * 10, 10).select(
        F.col("id").alias("key"), (F.col("id") % 97).alias("n"), F.sha2(F.col("id").cast("string"), 256).alias("s")
    )
    frame.repartitionByRange(files, "key").write.format("delta").mode("overwrite").save(str(path))
    return rows


def merge_round(spark: SparkSession, path: Path, rows: int, touched: int, round_: int) -> tuple[float, dict[str, int]]:
    import pyspark.sql.functions as F

    existing = [((i * rows // touched) + round_) * 10 for i in range(touched)]
    new = [rows * 10 + round_ * touched * 10 + 1 + i * 10 for i in range(touched)]
    source = spark.createDataFrame([(k,) for k in existing + new], "key long").select(
        "key", F.lit(round_ + 1000).cast("long").alias("n"), F.lit("merged").alias("s")
    )
    started = time.monotonic()
    (
        DeltaTable.forPath(spark, str(path))
        .alias("t")
        .merge(source.alias("u"), "t.key = u.key")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    seconds = time.monotonic() - started
    metrics = DeltaTable.forPath(spark, str(path)).history(1).collect()[0].operationMetrics
    return seconds, {k: int(v) for k, v in metrics.items() if v is not None and v.lstrip("-").isdigit()}


def bench_merge(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    warm = work / "warm"
    build(spark, warm, 2, 100)
    merge_round(spark, warm, 200, 2, 0)
    table = Table(
        title=(
            f"(a) DeltaTable.merge: {args.touched_keys} updated + {args.touched_keys} new keys per merge, "
            f"{args.rows_per_file:,} rows per file (best of {args.repeat})"
        )
    )
    for name in ("table files", "table rows", "seconds", "candidates", "files rewritten", "vs smallest"):
        table.add_column(name, justify="right")
    first: float | None = None
    for files in args.merge_files:
        path = work / f"merge-{files}"
        rows = build(spark, path, files, args.rows_per_file)
        best: tuple[float, dict[str, int]] | None = None
        for round_ in range(args.repeat):
            seconds, metrics = merge_round(spark, path, rows, args.touched_keys, round_)
            if best is None or seconds < best[0]:
                best = (seconds, metrics)
        assert best is not None
        first = first or best[0]
        m = best[1]
        table.add_row(
            str(m["numTargetFilesBefore"]),
            f"{rows:,}",
            f"{best[0]:.2f}",
            str(m["numCandidateFiles"]),
            str(m["numTargetFilesRemoved"]),
            f"{best[0] / first:.2f}x",
        )
        shutil.rmtree(path, ignore_errors=True)
    console.print(table)


def bench_optimize(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    from deltalake import DeltaTable as RsTable

    warm = work / "warm-opt"
    build(spark, warm, 4, 100)
    DeltaTable.forPath(spark, str(warm)).optimize().executeCompaction()
    rows = args.small_files * args.rows_per_small_file
    best_opt = best_spark = float("inf")
    for _ in range(args.repeat):
        path = work / "small"
        shutil.rmtree(path, ignore_errors=True)
        build(spark, path, args.small_files, args.rows_per_small_file)
        files = [uri.removeprefix("file://") for uri in RsTable(str(path)).file_uris()]
        assert len(files) == args.small_files, len(files)
        out = work / "spark-out"
        shutil.rmtree(out, ignore_errors=True)
        started = time.monotonic()
        spark.read.parquet(*files).write.parquet(str(out))
        best_spark = min(best_spark, time.monotonic() - started)
        started = time.monotonic()
        result = DeltaTable.forPath(spark, str(path)).optimize().executeCompaction().collect()[0]
        best_opt = min(best_opt, time.monotonic() - started)
        assert result.metrics.numFilesRemoved == args.small_files, result
    table = Table(title=f"(b) compaction of {args.small_files:,} files, {rows:,} rows (best of {args.repeat})")
    for name in ("path", "seconds", "rows/s", "vs Spark parquet rewrite"):
        table.add_column(name, justify="right")
    table.add_row(
        "spark.read.parquet(...).write.parquet(...)", f"{best_spark:.2f}", f"{rows / best_spark:,.0f}", "1.00x"
    )
    table.add_row(
        "DeltaTable.optimize().executeCompaction()",
        f"{best_opt:.2f}",
        f"{rows / best_opt:,.0f}",
        f"{best_spark / best_opt:.2f}x",
    )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merge-files", type=lambda s: [int(x) for x in s.split(",")], default=[10, 40, 160])
    parser.add_argument("--rows-per-file", type=int, default=2000)
    parser.add_argument("--touched-keys", type=int, default=4)
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--rows-per-small-file", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--part", choices=["all", "merge", "optimize"], default="all")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-deltatable-"))
    spark = local_session(app_name="bench-deltatable")
    try:
        if args.part in ("all", "merge"):
            bench_merge(spark, work, args)
        if args.part in ("all", "optimize"):
            bench_optimize(spark, work, args)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
