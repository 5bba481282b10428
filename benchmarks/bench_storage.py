"""Writing Delta data files and commits to the embedded S3 store (SeaweedFS), measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_storage.py [--part all|stream|writes|commits] [--processes 2] [--files 4]
[--rows-per-file 500000] [--commits 20] [--stream-batches 6] [--rows-per-batch 1000000] [--arrow-batch-rows N]``.

0. **Streaming sink** (the issue's figure): a Spark streaming query on ``local[--processes]``,
   ``rate-micro-batch`` (``--rows-per-batch`` rows per batch in ``--processes`` partitions, shaped as below) ->
   ``writeStream.format("delta")`` with the checkpoint on local disk and the table on the store, ``--stream-batches``
   batches; steady state = the batches after the first two (the first creates the table, the second warms the
   workers), rows / the sum of their ``triggerExecution`` times. Against pyarrow writing the same rows as Parquet
   (one file per partition per batch, the same row count per file) to the same store from ``--processes`` processes
   (pyarrow's native ``S3FileSystem``; each process's rows built before its clock starts, the slowest process's
   time counted): the store's ceiling. Ratio target >= 0.7. The same source into Spark's ``noop`` sink shows
   Spark's own ceiling (row generation, no Python, no store), and into a Python data source sink that drops its
   Arrow batches the ceiling of any Python sink (Spark's JVM -> Arrow -> Python worker hand-over), same run.

1. **Executor writes**: ``--processes`` processes each write ``--files`` Parquet files of the same rows (``id``,
   ``ts``, a 96-character string) to the store, as executors do: (a) sparkonce's ``TableFileWriter`` through the
   table location's file system (delta-rs's object_store in ``pyarrow.fs.PyFileSystem``, the path every store
   takes); (b) ``pyarrow.parquet.write_table`` through pyarrow's native ``S3FileSystem`` (the store's ceiling
   for the same work). Ratio = (a) / (b) rows/s (target >= 0.7).
2. **Commit latency** on S3 per batch: ``--commits`` batches committed one after the other with a ``txn`` each
   (``commit_files``: snapshot load, txn check, put-if-absent of the log file); p50 / p95 in ms. Then what the
   streaming sink's commit process does per batch (its writer's checks and the commit), the earlier way (a
   listing of the whole ``_delta_log``, an existence check and two snapshot loads) against the current one (a
   one-key listing, one snapshot kept for the commit), alternated on the same table; ``--commits 1000`` shows
   the earlier way growing with the log.

Starts its own store (``sparkonce_local.services.storage``) in a temporary folder and stops it. Asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa

from drop_sink import drop_sink


def _rows(n: int) -> pa.Table:
    import numpy as np

    ids = np.arange(n, dtype=np.int64)
    text = pa.array(["x" * 96] * n, pa.string())
    return pa.table({"id": ids, "ts": pa.array(ids * 1000, pa.timestamp("us")), "payload": text})


def _write_sparkonce(uri: str, options: dict[str, str], files: int, rows: int, queue: Any) -> None:
    from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
    from sparkonce.storage import table_location

    data = _rows(rows)
    started = time.perf_counter()
    writer = TableFileWriter(FileWriterOptions(location=table_location(uri, storage_options=options)))
    for _ in range(files):
        writer.write(data)
        writer.close()  # one file per table written
        writer = TableFileWriter(FileWriterOptions(location=table_location(uri, storage_options=options)))
    queue.put(time.perf_counter() - started)


def _write_pyarrow(bucket_prefix: str, endpoint: str, keys: tuple[str, str], files: int, rows: int, queue: Any) -> None:
    """Write ``files`` Parquet files of ``rows`` rows; puts the seconds the writes took (rows built before)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    data = _rows(rows)
    filesystem = pafs.S3FileSystem(
        access_key=keys[0],
        secret_key=keys[1],
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
    )
    started = time.perf_counter()
    for _ in range(files):
        pq.write_table(data, f"{bucket_prefix}/part-{uuid.uuid4()}.snappy.parquet", filesystem=filesystem)
    queue.put(time.perf_counter() - started)


def _parallel(target: Any, args: tuple[Any, ...], processes: int) -> tuple[float, float]:
    """Run ``target`` in ``processes`` processes; the wall time (process start included) and the slowest
    process's own timed work."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=target, args=(*args, queue)) for _ in range(processes)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    return wall, max(queue.get() for _ in workers)


def _stream(
    spark: Any,
    fmt: str,
    uri: str | None,
    options: dict[str, str],
    checkpoint: str,
    rows_per_batch: int,
    partitions: int,
    batches: int,
) -> tuple[int, float, list[float]]:
    """Run the ``fmt`` streaming sink (to ``uri`` for ``delta``) for ``batches`` batches; (steady rows, steady
    seconds, every batch's ms)."""
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", partitions)
        .load()
        .selectExpr("value as id", "timestamp as ts", "repeat('x', 96) as payload")
    )
    writer = stream.writeStream.format(fmt).option("checkpointLocation", checkpoint)
    for name, value in options.items():
        writer = writer.option(f"storage.{name}", value)
    query = writer.start(uri) if uri else writer.start()
    try:
        deadline = time.time() + 1800
        while time.time() < deadline:
            done = [p for p in query.recentProgress if p["numInputRows"]]
            if len(done) >= batches:
                break
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            query.awaitTermination(0.5)
        else:
            raise RuntimeError(f"{batches} batches did not finish in time")
    finally:
        spark.sparkContext.setLogLevel("OFF")  # stopping interrupts the next batch; its abort is expected noise
        query.stop()
        spark.sparkContext.setLogLevel("ERROR")
    done = sorted((p for p in query.recentProgress if p["numInputRows"]), key=lambda p: p["batchId"])[:batches]
    times = [float(p["durationMs"]["triggerExecution"]) for p in done]
    steady = done[2:]
    rows = sum(int(p["numInputRows"]) for p in steady)
    return rows, sum(float(p["durationMs"]["triggerExecution"]) for p in steady) / 1000, times


def stream_part(info: Any, args: argparse.Namespace) -> None:
    """The Delta streaming sink on the store against pyarrow writing the same rows (see the module docstring)."""
    from sparkonce.spark import local_session

    options = info.storage_options()
    spark = local_session(
        app_name="bench-storage",
        master=f"local[{args.processes}]",
        extra_conf={"spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    if args.arrow_batch_rows:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch_rows))
    spark.dataSource.register(drop_sink())
    try:
        with tempfile.TemporaryDirectory() as work:
            best: dict[str, tuple[int, float]] = {}
            for attempt in range(args.repeat):  # alternated, best kept
                for name in ("noop", "bench_drop", "delta"):
                    uri = f"s3://bench/stream-{uuid.uuid4().hex[:8]}" if name == "delta" else None
                    rows, seconds, times = _stream(
                        spark,
                        name,
                        uri,
                        options if uri else {},
                        f"{work}/ck-{name}-{attempt}",
                        args.rows_per_batch,
                        args.processes,
                        args.stream_batches,
                    )
                    print(f"  {name} batch times (ms): {', '.join(f'{t:.0f}' for t in times)}")
                    if name not in best or rows / seconds > best[name][0] / best[name][1]:
                        best[name] = (rows, seconds)
                files = args.stream_batches - 2  # one file per process per steady batch, as the sink writes
                per_file = args.rows_per_batch // args.processes
                keys = (info.access_key, info.secret_key)
                work2 = (f"bench/pyarrow-{uuid.uuid4().hex[:8]}", info.endpoint, keys, files, per_file)
                _, slowest = _parallel(_write_pyarrow, work2, args.processes)
                rows2 = files * per_file * args.processes
                if "pyarrow" not in best or rows2 / slowest > best["pyarrow"][0] / best["pyarrow"][1]:
                    best["pyarrow"] = (rows2, slowest)
        ours = best["delta"][0] / best["delta"][1]
        ceiling = best["pyarrow"][0] / best["pyarrow"][1]
        noop = best["noop"][0] / best["noop"][1]
        drop = best["bench_drop"][0] / best["bench_drop"][1]
        print(
            f"streaming sink, local[{args.processes}], {args.stream_batches} batches x {args.rows_per_batch:,} rows "
            f"(steady: batches 2..{args.stream_batches - 1}), "
            f"Arrow batches of {args.arrow_batch_rows or 10_000:,} rows, "
            f"best of {args.repeat}:"
        )
        print(f"  Spark writeStream.format('delta') to S3:           {ours:,.0f} rows/s")
        print(f"  pyarrow write_table to S3, {args.processes} processes (same rows): {ceiling:,.0f} rows/s")
        print(f"  Spark into noop (same source: Spark's own ceiling):    {noop:,.0f} rows/s")
        print(f"  a Python sink dropping its Arrow batches (any Python sink's ceiling): {drop:,.0f} rows/s")
        print(
            f"  ratio delta / pyarrow: {ours / ceiling:.2f}x; delta / noop: {ours / noop:.2f}x; "
            f"delta / Python drop sink: {ours / drop:.2f}x"
        )
    finally:
        spark.stop()


def writes_part(info: Any, args: argparse.Namespace) -> None:
    """Executor-style writes: sparkonce's table file system against pyarrow's S3FileSystem."""
    options = info.storage_options()
    rows = args.processes * args.files * args.rows_per_file
    best: dict[str, float] = {}
    for _ in range(args.repeat):  # alternated, best kept
        for name in ("sparkonce", "pyarrow"):
            prefix = f"bench/{name}-{uuid.uuid4().hex[:8]}"
            if name == "sparkonce":
                work = (f"s3://{prefix}", options, args.files, args.rows_per_file)
                wall, _ = _parallel(_write_sparkonce, work, args.processes)
            else:
                keys = (info.access_key, info.secret_key)
                work2 = (prefix, info.endpoint, keys, args.files, args.rows_per_file)
                wall, _ = _parallel(_write_pyarrow, work2, args.processes)
            best[name] = min(best.get(name, wall), wall)
    ours, ceiling = rows / best["sparkonce"], rows / best["pyarrow"]
    print(f"executor writes, {args.processes} processes x {args.files} files x {args.rows_per_file} rows:")
    print(f"  sparkonce TableFileWriter (object_store): {ours:,.0f} rows/s")
    print(f"  pyarrow S3FileSystem write_table:         {ceiling:,.0f} rows/s")
    print(f"  ratio: {ours / ceiling:.2f}x")


def commits_part(info: Any, args: argparse.Namespace) -> None:
    """Commit latency per batch on S3."""
    options = info.storage_options()
    from sparkonce.delta.txn.commit import BatchTxn, commit_files
    from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
    from sparkonce.storage import table_location

    location = table_location(f"s3://bench/commits-{uuid.uuid4().hex[:8]}", storage_options=options)
    data = _rows(1000)
    latencies = []
    for batch_id in range(args.commits):
        writer = TableFileWriter(FileWriterOptions(location=location))
        writer.write(data)
        files = writer.close()
        started = time.perf_counter()
        commit_files(location, files, data_schema=data.schema, txn=BatchTxn("bench", batch_id))
        latencies.append((time.perf_counter() - started) * 1000)
    steady = latencies[1:]  # the first commit also creates the table
    print(f"commit latency per batch on S3 ({len(steady)} batches): {_p50_p95(steady)}")
    _sink_commit_process(location, data, args.commits)


def _p50_p95(samples: list[float]) -> str:
    p95 = statistics.quantiles(samples, n=20)[18] if len(samples) >= 2 else samples[0]
    return f"p50 {statistics.median(samples):.0f} ms, p95 {p95:.0f} ms"


def _sink_commit_process(location: Any, data: pa.Table, first_batch: int) -> None:
    """What the streaming sink's commit process does per batch on S3 (Spark builds the writer there again, then
    commits), the earlier way and the current way, alternated batch by batch on the same table."""
    import pyarrow.fs as pafs

    from sparkonce.delta.txn.commit import BatchTxn, commit_files, load_table, table_exists
    from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter

    def files() -> list[Any]:
        writer = TableFileWriter(FileWriterOptions(location=location))
        writer.write(data)
        return writer.close()

    def earlier(batch_id: int) -> None:
        # the writer's checks: a listing of the whole _delta_log, table_exists, a snapshot; then the commit loads again
        location.filesystem().get_file_info(pafs.FileSelector("_delta_log", allow_not_found=True))
        if table_exists(location):
            load_table(location)
        commit_files(location, files(), data_schema=data.schema, txn=BatchTxn("bench", batch_id))

    def current(batch_id: int) -> None:
        # one HEAD and a one-key LIST, one snapshot, kept for the commit
        snapshot = load_table(location) if location.check_reachable(for_write=True) else None
        commit_files(location, files(), data_schema=data.schema, txn=BatchTxn("bench", batch_id), snapshot=snapshot)

    timings: dict[str, list[float]] = {"earlier": [], "current": []}
    batch_id = first_batch
    for _ in range(10):
        for name, run in (("earlier", earlier), ("current", current)):
            started = time.perf_counter()
            run(batch_id)
            timings[name].append((time.perf_counter() - started) * 1000)
            batch_id += 1
    versions = load_table(location).version() + 1
    ratio = statistics.median(timings["current"]) / statistics.median(timings["earlier"])
    print(f"sink commit process per batch on S3 (writer checks + commit, {versions} log entries at the end):")
    print(f"  earlier (whole-log listing, existence check, two snapshot loads): {_p50_p95(timings['earlier'])}")
    print(f"  current (one-key listing, one snapshot kept for the commit):      {_p50_p95(timings['current'])}")
    print(f"  ratio: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows-per-file", type=int, default=500_000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--part", choices=("all", "stream", "writes", "commits"), default="all")
    parser.add_argument("--stream-batches", type=int, default=6)
    parser.add_argument("--rows-per-batch", type=int, default=1_000_000)
    parser.add_argument(
        "--arrow-batch-rows",
        type=int,
        default=0,
        help="spark.sql.execution.arrow.maxRecordsPerBatch for the stream part (Spark's default: 10000)",
    )
    args = parser.parse_args()

    from sparkonce_local.services.storage import start_storage, stop_storage

    with tempfile.TemporaryDirectory() as state:
        info = start_storage(state_dir=state)
        try:
            info.create_bucket("bench")
            if args.part in ("all", "stream"):
                stream_part(info, args)
            if args.part in ("all", "writes"):
                writes_part(info, args)
            if args.part in ("all", "commits"):
                commits_part(info, args)
        finally:
            stop_storage(state_dir=state)


if __name__ == "__main__":
    main()
