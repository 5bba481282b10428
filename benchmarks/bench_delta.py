"""Throughput of the Delta data source vs Spark's own Parquet paths, measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_delta.py [--part all|sink|read|write|memory] [--files 4]
[--rows-per-file 1000000] [--repeat 2] [--shapes mixed,narrow,wide-strings,partitioned] [--memory-rows 1000000,10000000]
[--memory-storage local|s3]``.

1. **Streaming sink**: the same Parquet input files, streamed with ``maxFilesPerTrigger=1`` and the availableNow
   trigger, into the ``noop`` sink (the ceiling: Spark reads and drops the rows), a Python data source sink that
   drops its Arrow batches (``bench_drop``: the ceiling of any Python sink), Spark's built-in ``parquet`` file
   sink (exactly-once through ``_spark_metadata``) and our ``delta`` sink (one Delta commit with a txn per batch),
   for each row shape (``SHAPES``: ``mixed`` = id, device, value, timestamp, 64-character payload; ``narrow`` = id,
   value; ``wide-strings`` = id, timestamp, a 96-character string; ``partitioned`` = ``mixed`` written with
   ``partitionBy`` on an 8-value column by both file sinks). Ratios: delta / parquet rows/s (target >= 1.1) and
   delta / noop (target >= 0.7).
2. **Batch read**: the Delta table vs ``spark.read.parquet`` of the same data files, both materialised into the
   ``noop`` sink (every column decoded). Ratio target >= 0.7.
3. **Batch write**: for each row shape, the same cached DataFrame (``--files`` x ``--rows-per-file`` rows in 2
   partitions) written by ``df.write.format("delta")`` (sparkonce's writer: Arrow to Python workers, pyarrow's
   Parquet writer, the Delta statistics of every file, one commit) and by ``df.write.parquet`` (Spark's own
   Parquet writer, no statistics, no log), alternated. It answers whether DML rewrites and batch writes should go
   through Spark's writer instead: only where it is clearly faster.
4. **Driver memory** as the batch grows: one streaming batch of N rows (``rate-micro-batch`` source, generated on
   executors) into the Delta sink; prints the Python driver's peak RSS, the driver JVM's heap in use after a GC
   (in local mode the executors share that JVM) and the size of the batch's Delta commit file. Flat figures show
   that data never passes through the driver: the commit carries file metadata only. ``--memory-storage s3`` puts
   the table on the embedded S3 store (SeaweedFS, started and stopped by the script; checkpoint on local disk):
   executors upload the Parquet files, the driver commits to the store.

Runs are alternated and the best of ``--repeat`` kept. Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from drop_sink import drop_sink
from sparkonce.spark import local_session

_MIXED = (
    "id",
    "concat('device-', cast(id % 1000 as string)) as device",
    "cast(id % 9973 as double) / 7 as value",
    "timestamp_seconds(1700000000 + id) as event_time",
    "repeat(substr(sha2(cast(id as string), 256), 1, 16), 4) as payload",
)
SHAPES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "mixed": (_MIXED, None),
    "narrow": (("id", "cast(id % 9973 as double) / 7 as value"), None),
    "wide-strings": (
        (
            "id",
            "timestamp_seconds(1700000000 + id) as event_time",
            "concat(sha2(cast(id as string), 256), substr(sha2(cast(id + 1 as string), 256), 1, 32)) as payload",
        ),
        None,
    ),
    "partitioned": ((*_MIXED, "cast(id % 8 as int) as bucket"), "bucket"),
}
"""Row shapes of the sink benchmark: the input columns and the partition column (None: unpartitioned)."""
DROP = "bench_drop"
"""A Python data source sink that drops its Arrow batches (``drop_sink.py``): the ceiling of any Python sink."""


def make_input(spark, directory: Path, files: int, rows_per_file: int, shape: str = "mixed") -> None:  # type: ignore[no-untyped-def]
    columns, _ = SHAPES[shape]
    df = spark.range(0, files * rows_per_file, numPartitions=files).selectExpr(*columns)
    df.write.mode("overwrite").parquet(str(directory))


def stream_once(  # type: ignore[no-untyped-def]
    spark, fmt: str, source: Path, target: Path, checkpoint: Path, schema, partition_by: str | None = None
) -> float:
    for path in (target, checkpoint):
        shutil.rmtree(path, ignore_errors=True)
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    start = time.perf_counter()
    writer = stream.writeStream.format(fmt).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if partition_by is not None and fmt not in ("noop", DROP):
        writer = writer.partitionBy(partition_by)
    query = writer.start() if fmt in ("noop", DROP) else writer.start(str(target))
    query.awaitTermination()
    return time.perf_counter() - start


def read_once(spark, fmt: str, path: Path) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    reader = spark.read.format("delta").load(str(path)) if fmt == "delta" else spark.read.parquet(str(path))
    reader.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def memory_probe(spark, rows: int, work: Path, storage: dict[str, str] | None) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """One streaming batch of ``rows`` rows into a new Delta table, on local disk or (``storage``: the embedded
    store's options) on S3; the driver's peak RSS, JVM heap after GC and the batch's commit size."""
    from sparkonce.storage import table_location

    checkpoint = work / f"mem-ck-{rows}"
    table = f"s3://bench/mem-{rows}-{time.time_ns()}" if storage is not None else str(work / f"mem-{rows}")
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value as id", "timestamp", "repeat('x', 32) as payload")
    )
    writer = stream.writeStream.format("delta").option("checkpointLocation", str(checkpoint))
    for name, value in (storage or {}).items():
        writer = writer.option(f"storage.{name}", value)
    query = writer.start(table)
    deadline = time.time() + 900
    while not (checkpoint / "commits" / "0").exists() and time.time() < deadline:
        query.awaitTermination(1)
    spark.sparkContext.setLogLevel("OFF")  # stopping interrupts batch 1; its abort is expected noise
    query.stop()
    spark.sparkContext.setLogLevel("ERROR")
    runtime = spark._jvm.java.lang.Runtime.getRuntime()
    spark._jvm.java.lang.System.gc()
    jvm_used = runtime.totalMemory() - runtime.freeMemory()
    location = table_location(table, storage_options=storage)
    first_commit = location.fs_path(f"_delta_log/{0:020d}.json")  # table version 0 holds batch 0
    commit_bytes = location.filesystem().get_file_info(first_commit).size
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, jvm_used, int(commit_bytes or 0)


def memory_part(spark, work: Path, args: argparse.Namespace, console: Console) -> None:  # type: ignore[no-untyped-def]
    """Driver memory against the rows of one streaming batch, the table on local disk or on the embedded S3."""
    where = "local disk" if args.memory_storage == "local" else "the embedded S3 store (SeaweedFS)"
    memory = Table(title=f"Driver memory vs rows per batch (Delta sink, one batch, table on {where})")
    for column in ("rows in batch", "Python driver peak RSS", "JVM heap used after GC", "Delta commit file"):
        memory.add_column(column, justify="right")
    state = work / "storage"
    storage: dict[str, str] | None = None
    if args.memory_storage == "s3":
        from sparkonce_local.services.storage import start_storage

        info = start_storage(state_dir=state)
        info.create_bucket("bench")
        storage = info.storage_options()
    try:
        for n in (int(x) for x in args.memory_rows.split(",")):
            rss, jvm_used, commit_bytes = memory_probe(spark, n, work, storage)
            memory.add_row(f"{n:,}", f"{rss / 2**20:,.0f} MiB", f"{jvm_used / 2**20:,.0f} MiB", f"{commit_bytes:,} B")
    finally:
        if storage is not None:
            from sparkonce_local.services.storage import stop_storage

            stop_storage(state_dir=state)
    console.print(memory)


def write_part(spark, work: Path, args: argparse.Namespace, console: Console) -> None:  # type: ignore[no-untyped-def]
    """Batch writes of one cached DataFrame per shape: sparkonce's Delta writer vs Spark's Parquet writer."""
    rows = args.files * args.rows_per_file
    table = Table(title=f"Batch write of {rows:,} cached rows (best of {args.repeat}, alternated)")
    for column in ("shape", "delta s", "parquet s", "delta / parquet (time)"):
        table.add_column(column, justify="right")
    for shape in [s.strip() for s in args.shapes.split(",")]:
        columns, partition_by = SHAPES[shape]
        df = spark.range(0, rows, numPartitions=2).selectExpr(*columns).persist()
        df.count()
        best: dict[str, float] = {}
        for round_ in range(args.repeat + 1):  # the first round warms both writers up
            for fmt in ("delta", "parquet") if round_ % 2 == 0 else ("parquet", "delta"):
                out = work / f"write-{shape}-{fmt}-{round_}"
                writer = df.write.format(fmt)
                if partition_by is not None:
                    writer = writer.partitionBy(partition_by)
                start = time.perf_counter()
                writer.save(str(out))
                seconds = time.perf_counter() - start
                if round_ > 0:
                    best[fmt] = min(best.get(fmt, float("inf")), seconds)
                shutil.rmtree(out, ignore_errors=True)
        df.unpersist()
        ratio = best["delta"] / best["parquet"]
        table.add_row(shape, f"{best['delta']:.2f}", f"{best['parquet']:.2f}", f"{ratio:.2f}x")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {sorted(SHAPES)}")
    parser.add_argument("--memory-rows", default="1000000,10000000")
    parser.add_argument("--memory-storage", choices=("local", "s3"), default="local")
    parser.add_argument("--part", choices=("all", "sink", "read", "write", "memory"), default="all")
    args = parser.parse_args()

    console = Console()
    spark = local_session(app_name="bench-delta")
    spark.dataSource.register(drop_sink())
    work = Path(tempfile.mkdtemp(prefix="sparkonce-bench-"))
    try:
        rows = args.files * args.rows_per_file
        if args.part in ("all", "sink", "read"):
            shapes = ["mixed"] if args.part == "read" else [s.strip() for s in args.shapes.split(",")]
            unknown = [s for s in shapes if s not in SHAPES]
            if unknown:
                parser.error(f"--shapes: unknown {unknown} (known: {sorted(SHAPES)})")
            sink = Table(
                title=f"Streaming sink: {args.files} batches x {args.rows_per_file:,} rows (best of {args.repeat})"
            )
            for column in ("shape", "sink", "seconds", "rows/s", "delta / this"):
                sink.add_column(column, justify="right")
            for shape in shapes:
                source = work / f"input-{shape}"
                make_input(spark, source, args.files, args.rows_per_file, shape)
                schema = spark.read.parquet(str(source)).schema
                partition_by = SHAPES[shape][1]
                best: dict[str, float] = {}
                fmts = ("noop", DROP, "parquet", "delta") if args.part != "read" else ("delta",)
                for _ in range(args.repeat):
                    for fmt in fmts:
                        out = work / ("out-delta" if (shape, fmt) == ("mixed", "delta") else f"out-{shape}-{fmt}")
                        seconds = stream_once(spark, fmt, source, out, work / f"ck-{shape}-{fmt}", schema, partition_by)
                        best[fmt] = min(best.get(fmt, float("inf")), seconds)
                for fmt in fmts:
                    sink.add_row(
                        shape, fmt, f"{best[fmt]:.2f}", f"{rows / best[fmt]:,.0f}", f"{best[fmt] / best['delta']:.2f}x"
                    )
                shutil.rmtree(source, ignore_errors=True)
            if args.part != "read":
                console.print(sink)

        if args.part in ("all", "read"):
            delta_table = work / "out-delta"
            plain = work / "plain-parquet"
            plain.mkdir()
            for data_file in delta_table.glob("*.parquet"):
                shutil.copy(data_file, plain / data_file.name)
            read_best: dict[str, float] = {}
            for _ in range(args.repeat):
                for fmt, path in (("parquet", plain), ("delta", delta_table)):
                    read_best[fmt] = min(read_best.get(fmt, float("inf")), read_once(spark, fmt, path))
            reads = Table(title=f"Batch read of {rows:,} rows into noop (best of {args.repeat})")
            for column in ("reader", "seconds", "rows/s", "ratio to spark.read.parquet"):
                reads.add_column(column, justify="right")
            for fmt in ("parquet", "delta"):
                reads.add_row(
                    fmt,
                    f"{read_best[fmt]:.2f}",
                    f"{rows / read_best[fmt]:,.0f}",
                    f"{read_best['parquet'] / read_best[fmt]:.2f}x",
                )
            console.print(reads)

        if args.part in ("all", "write"):
            write_part(spark, work, args, console)

        if args.part in ("all", "memory"):
            memory_part(spark, work, args, console)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
