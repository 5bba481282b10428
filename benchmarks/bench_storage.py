"""Writing Delta data files and commits to the embedded S3 store (SeaweedFS), measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_storage.py [--processes 2] [--files 4] [--rows-per-file 500000]
[--commits 20]``.

1. **Executor writes**: ``--processes`` processes each write ``--files`` Parquet files of the same rows (``id``,
   ``ts``, a 96-character string) to the store, as executors do: (a) sparkonce's ``TableFileWriter`` through the
   table location's file system (delta-rs's object_store in ``pyarrow.fs.PyFileSystem``, the path every store
   takes); (b) ``pyarrow.parquet.write_table`` through pyarrow's native ``S3FileSystem`` (the store's ceiling
   for the same work). Ratio = (a) / (b) rows/s (target >= 0.7).
2. **Commit latency** on S3 per batch: ``--commits`` batches committed one after the other with a ``txn`` each
   (``commit_files``: snapshot load, txn check, put-if-absent of the log file); p50 / p95 in ms.

Starts its own store (``sparkonce.services.storage``) in a temporary folder and stops it. Asserts nothing.
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


def _rows(n: int) -> pa.Table:
    import numpy as np

    ids = np.arange(n, dtype=np.int64)
    text = pa.array(["x" * 96] * n, pa.string())
    return pa.table({"id": ids, "ts": pa.array(ids * 1000, pa.timestamp("us")), "payload": text})


def _write_sparkonce(uri: str, options: dict[str, str], files: int, rows: int, queue: Any) -> None:
    from sparkonce.delta.files import FileWriterOptions, TableFileWriter
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


def _parallel(target: Any, args: tuple[Any, ...], processes: int) -> float:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=target, args=(*args, queue)) for _ in range(processes)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    for _ in workers:
        queue.get()
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows-per-file", type=int, default=500_000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from sparkonce.services.storage import start_storage, stop_storage

    with tempfile.TemporaryDirectory() as state:
        info = start_storage(state_dir=state)
        try:
            info.create_bucket("bench")
            options = info.storage_options()
            rows = args.processes * args.files * args.rows_per_file
            best: dict[str, float] = {}
            for _ in range(args.repeat):  # alternated, best kept
                for name in ("sparkonce", "pyarrow"):
                    prefix = f"bench/{name}-{uuid.uuid4().hex[:8]}"
                    if name == "sparkonce":
                        work = (f"s3://{prefix}", options, args.files, args.rows_per_file)
                        wall = _parallel(_write_sparkonce, work, args.processes)
                    else:
                        keys = (info.access_key, info.secret_key)
                        work2 = (prefix, info.endpoint, keys, args.files, args.rows_per_file)
                        wall = _parallel(_write_pyarrow, work2, args.processes)
                    best[name] = min(best.get(name, wall), wall)
            ours, ceiling = rows / best["sparkonce"], rows / best["pyarrow"]
            print(f"executor writes, {args.processes} processes x {args.files} files x {args.rows_per_file} rows:")
            print(f"  sparkonce TableFileWriter (object_store): {ours:,.0f} rows/s")
            print(f"  pyarrow S3FileSystem write_table:         {ceiling:,.0f} rows/s")
            print(f"  ratio: {ours / ceiling:.2f}x")

            from sparkonce.delta.commit import BatchTxn, commit_files
            from sparkonce.delta.files import FileWriterOptions, TableFileWriter
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
            p95 = statistics.quantiles(steady, n=20)[18] if len(steady) >= 2 else steady[0]
            print(
                f"commit latency per batch on S3 ({len(steady)} batches): p50 {statistics.median(steady):.0f} ms, "
                f"p95 {p95:.0f} ms"
            )
        finally:
            stop_storage(state_dir=state)


if __name__ == "__main__":
    main()
