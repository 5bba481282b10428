"""Reads of a Delta table, batch and streaming: the native read path vs the Python data source vs Spark's own
Parquet reader on the same files, in one run, alternated.

Run: ``.venv/bin/python benchmarks/bench_reads.py [--rows 2000000] [--files 24] [--repeat 3] [--wide-columns 100]``.

The table has ``--rows`` rows and 15 columns (``id``, ``k`` = id % 1000, a 64-character string, 12 doubles),
written in one commit as ``--files`` files, each a contiguous ``id`` range (so every file in the folder is live and
``spark.read.parquet`` of the folder reads exactly the table). A second table of ``--wide-columns`` columns (``id``
and doubles) serves the one-column-of-many query. Each query runs on:

* ``native``: ``spark.read.format("delta").load`` through sparkonce's native read path (Spark's Parquet scan over
  the files the Delta log lists, with partition pruning and data skipping);
* ``python``: the same with ``spark.sparkonce.nativeReads=false`` (the Python data source);
* ``parquet``: ``spark.read.parquet`` of the table's folder (the anchor).

The stream read drains the 15-column table with ``readStream ... -> noop`` and ``trigger(availableNow=True)`` from a
new checkpoint each time: ``native`` and ``python`` through ``readStream.format("delta")`` (the native streaming
source / the Python one), ``parquet`` through Spark's own file stream source (``readStream.schema(...).parquet``).

Prints the best of ``--repeat`` seconds per query and reader and the time ratios to ``parquet``, and for the point
lookup how many files data skipping dropped. Asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkonce.delta.read.native import NATIVE_READS_CONF
from sparkonce.spark import local_session

QUERIES: dict[str, Callable] = {  # type: ignore[type-arg]
    "full scan sum(id), sum(d12)": lambda df: df.selectExpr("sum(id)", "sum(d12)").collect(),
    "point lookup id = 1234567": lambda df: df.where("id = 1234567").collect(),
    "one column of 15, countDistinct(k)": lambda df: df.selectExpr("count(distinct k)").collect(),
}
WIDE_QUERY = "one column of WIDE, sum(d1)"
STREAM_QUERY = "stream read -> noop, availableNow"


def make_tables(spark, work: Path, rows: int, files: int, wide: int) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    narrow = work / "table15"
    columns = ["id", "id % 1000 as k", "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as s"]
    columns += [f"cast(id % {97 + i} as double) / 3 as d{i + 1}" for i in range(12)]
    df = spark.range(rows).selectExpr(*columns).repartitionByRange(files, "id").sortWithinPartitions("id")
    df.write.format("delta").save(str(narrow))
    wide_path = work / "table_wide"
    wide_columns = ["id"] + [f"cast(id % {89 + i} as double) as d{i + 1}" for i in range(wide - 1)]
    spark.range(rows).selectExpr(*wide_columns).repartitionByRange(files, "id").write.format("delta").save(
        str(wide_path)
    )
    return narrow, wide_path


def drain(spark, table: Path, reader: str, checkpoint: Path) -> None:  # type: ignore[no-untyped-def]
    """Stream the whole table into Spark's noop sink once (availableNow) from the new ``checkpoint``."""
    if reader == "parquet":
        schema = spark.read.parquet(str(table)).schema
        stream = spark.readStream.schema(schema).parquet(str(table))
    else:
        stream = spark.readStream.format("delta").load(str(table))
    query = stream.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
    query.trigger(availableNow=True).start().awaitTermination()


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wide-columns", type=int, default=100)
    args = parser.parse_args()
    console = Console()
    spark = local_session(app_name="bench-reads")
    work = Path(tempfile.mkdtemp(prefix="sparkonce-bench-reads-"))
    try:
        narrow, wide = make_tables(spark, work, args.rows, args.files, args.wide_columns)
        readers: dict[str, Callable[[Path], object]] = {
            "native": lambda p: spark.read.format("delta").load(str(p)),
            "python": lambda p: spark.read.format("delta").load(str(p)),
            "parquet": lambda p: spark.read.parquet(str(p)),
        }
        queries = dict(QUERIES)
        wide_name = WIDE_QUERY.replace("WIDE", str(args.wide_columns))
        queries[wide_name] = lambda df: df.selectExpr("sum(d1)").collect()
        queries[STREAM_QUERY] = lambda df: None  # run by drain()
        best: dict[tuple[str, str], float] = {}
        for round_ in range(args.repeat):
            for query, run in queries.items():
                table = wide if query == wide_name else narrow
                for reader, load in readers.items():
                    spark.conf.set(NATIVE_READS_CONF, "false" if reader == "python" else "true")
                    if query == STREAM_QUERY:
                        checkpoint = work / f"ck-{reader}-{round_}"
                        seconds = timed(
                            lambda reader=reader, checkpoint=checkpoint: drain(spark, narrow, reader, checkpoint)
                        )
                    else:
                        seconds = timed(lambda load=load, run=run, table=table: run(load(table)))
                    key = (query, reader)
                    best[key] = min(best.get(key, seconds), seconds)
        spark.conf.unset(NATIVE_READS_CONF)
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("sparkonce.delta.read.native").setLevel(logging.INFO)
        spark.read.format("delta").load(str(narrow)).where("id = 1234567").collect()  # logs the files skipped
        result = Table(title=f"Reads, best of {args.repeat} (s); ratio = time / Spark's own Parquet reader")
        for column in ("query", "native", "python", "parquet", "native ratio", "python ratio"):
            result.add_column(column)
        for query in queries:
            times = {r: best[(query, r)] for r in readers}
            result.add_row(
                query,
                *(f"{times[r]:.2f}" for r in readers),
                f"{times['native'] / times['parquet']:.2f}x",
                f"{times['python'] / times['parquet']:.2f}x",
            )
        console.print(result)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
