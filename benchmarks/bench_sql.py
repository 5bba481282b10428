"""Delta's SQL through ``spark.sql``: ``DESCRIBE HISTORY`` on a long table, and ``MERGE INTO`` against the same merge
through the ``DeltaTable`` API.

Run: ``.venv/bin/python benchmarks/bench_sql.py [--versions 100000] [--merge-files 40] [--rows-per-file 2000]
[--touched-keys 4] [--repeat 3] [--part all|history|merge]``.

**(a) DESCRIBE HISTORY**: a streaming table of ``--versions`` table versions (one Delta commit per batch, a Delta
checkpoint every 1000; generated directly, as ``bench_doctor.py`` makes it), then ``spark.sql("DESCRIBE HISTORY
delta.`path`")`` written to Spark's noop sink (every row read, none brought to Python) and collected, ``... LIMIT
10``, and the articles' duplicate-epoch query over it (``SELECT ... FROM (DESCRIBE HISTORY ...) ... GROUP BY ...
HAVING count(*) > 1``), each against delta-rs's ``DeltaTable.history()`` of the same table in the same run. Target:
under 2 s for the whole history.

**(b) MERGE INTO vs DeltaTable.merge**: a table of ``--merge-files`` files of ``--rows-per-file`` rows; each round
merges a source updating ``--touched-keys`` keys and inserting as many, alternately through ``spark.sql("MERGE INTO
... WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")`` and through the builder, best of
``--repeat`` each, same run. Target: SQL within 1.1x of the API.

Prints tables; asserts nothing. The machine is shared, so figures are noisy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_doctor import make_table
from sparkonce.delta.tables import DeltaTable
from sparkonce.spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

console = Console(width=140)

DUPLICATE_EPOCHS = """
SELECT operationParameters.txnVersion AS epoch_id, operationParameters.txnAppId AS query_id, count(*) AS n
FROM (DESCRIBE HISTORY delta.`{path}`)
WHERE operation = 'STREAMING UPDATE'
GROUP BY operationParameters.txnVersion, operationParameters.txnAppId
HAVING count(*) > 1
"""


def best(repeat: int, run: object) -> tuple[float, object]:
    """Best wall time of ``repeat`` calls of ``run`` and its last result."""
    times = []
    result: object = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times), result


def bench_history(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    path = work / "history"
    started = time.perf_counter()
    make_table(path, args.versions)
    generated = time.perf_counter() - started
    spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()  # warm-up
    import deltalake

    baseline, commits = best(args.repeat, lambda: deltalake.DeltaTable(str(path)).history())
    table = Table(title=f"(a) DESCRIBE HISTORY on {args.versions:,} table versions (generated in {generated:.1f} s)")
    for name in ("statement", "rows", f"seconds (best of {args.repeat})", "vs delta-rs history()", "target"):
        table.add_column(name, justify="right")
    table.add_row("baseline: delta-rs DeltaTable(t).history()", f"{len(commits):,}", f"{baseline:.2f}", "1.00x", "")  # type: ignore[arg-type]
    for label, text, run, target in [
        ("DESCRIBE HISTORY t (written to Spark's noop sink)", f"DESCRIBE HISTORY delta.`{path}`", "noop", "< 2 s"),
        ("DESCRIBE HISTORY t (collected into Python)", f"DESCRIBE HISTORY delta.`{path}`", "collect", ""),
        ("DESCRIBE HISTORY t LIMIT 10", f"DESCRIBE HISTORY delta.`{path}` LIMIT 10", "collect", ""),
        ("the articles' duplicate-epoch query", DUPLICATE_EPOCHS.format(path=path), "collect", ""),
    ]:

        def action(text: str = text, run: str = run) -> int:
            frame = spark.sql(text)
            if run == "noop":
                frame.write.format("noop").mode("overwrite").save()
                return args.versions  # type: ignore[no-any-return]
            return len(frame.collect())

        seconds, rows = best(args.repeat, action)
        table.add_row(label, f"{rows:,}", f"{seconds:.2f}", f"{seconds / baseline:.2f}x", target)  # type: ignore[arg-type]
    console.print(table)
    shutil.rmtree(path, ignore_errors=True)


def _build(spark: SparkSession, path: Path, files: int, rows_per_file: int) -> int:
    import pyspark.sql.functions as F

    rows = files * rows_per_file
    frame = spark.range(0, rows * 10, 10).select(
        F.col("id").alias("key"), (F.col("id") % 97).alias("n"), F.sha2(F.col("id").cast("string"), 256).alias("s")
    )
    frame.repartitionByRange(files, "key").write.format("delta").mode("overwrite").save(str(path))
    return rows


def _source(spark: SparkSession, rows: int, touched: int, round_: int) -> DataFrame:
    import pyspark.sql.functions as F

    existing = [((i * rows // touched) + round_) * 10 for i in range(touched)]
    new = [rows * 10 + round_ * touched * 10 + 1 + i * 10 for i in range(touched)]
    return spark.createDataFrame([(k,) for k in existing + new], "key long").select(
        "key", F.lit(round_ + 1000).cast("long").alias("n"), F.lit("merged").alias("s")
    )


def bench_merge(spark: SparkSession, work: Path, args: argparse.Namespace) -> None:
    path = work / "merge"
    rows = _build(spark, path, args.merge_files, args.rows_per_file)
    sql_times: list[float] = []
    api_times: list[float] = []
    for round_ in range(args.repeat * 2 + 2):  # the first SQL and API rounds warm up
        source = _source(spark, rows, args.touched_keys, round_)
        started = time.perf_counter()
        if round_ % 2 == 0:
            source.createOrReplaceTempView("updates")
            spark.sql(
                f"""MERGE INTO delta.`{path}` AS t USING updates AS u ON t.key = u.key
                    WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"""
            ).collect()
            (sql_times if round_ >= 2 else []).append(time.perf_counter() - started)
        else:
            DeltaTable.forPath(spark, str(path)).alias("t").merge(
                source.alias("u"), "t.key = u.key"
            ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute().collect()
            (api_times if round_ >= 2 else []).append(time.perf_counter() - started)
    table = Table(
        title=(
            f"(b) MERGE INTO vs DeltaTable.merge: {args.merge_files} files x {args.rows_per_file:,} rows, "
            f"{args.touched_keys} updated + {args.touched_keys} new keys per merge (best of {args.repeat})"
        )
    )
    for name in ("path", "seconds", "vs API", "target"):
        table.add_column(name, justify="right")
    api = min(api_times)
    table.add_row("DeltaTable.merge(...).execute()", f"{api:.2f}", "1.00x", "")
    table.add_row("spark.sql('MERGE INTO ...')", f"{min(sql_times):.2f}", f"{min(sql_times) / api:.2f}x", "<= 1.1x")
    console.print(table)
    shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--merge-files", type=int, default=40)
    parser.add_argument("--rows-per-file", type=int, default=2000)
    parser.add_argument("--touched-keys", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=("all", "history", "merge"), default="all")
    args = parser.parse_args()
    spark = local_session(app_name="bench-sql")
    work = Path(tempfile.mkdtemp(prefix="bench-sql-"))
    try:
        if args.part in ("all", "history"):
            bench_history(spark, work, args)
        if args.part in ("all", "merge"):
            bench_merge(spark, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
