"""A long-lived table: what a stream, a reader and ``doctor`` pay on a table of 100,000 versions vs 100.

Run: ``.venv/bin/python benchmarks/bench_long_log.py [--sizes 100 100000] [--checkpoint-every 10] [--appends 5]
[--repeat 3] [--batches 50]``.

For each size N a streaming table of N table versions is generated directly (one Delta commit per batch replacing
the previous file, ``txn`` + ``STREAMING UPDATE`` commitInfo, a Delta checkpoint every ``--checkpoint-every``
versions as sparkonce writes them, the newest version's file a real Parquet file), then, same run, side by side:

* **open latest**: sparkonce's log reader (``DeltaLog(t).snapshot()``), delta-rs's ``DeltaTable(t)`` (the baseline),
  and both at table version 100 (the cost of time travel into an old part of the log);
* **sink batch commit**: the driver side of a streaming batch (``commit_files`` with the query's ``txn``), ``--batches``
  of them in one process as a running stream makes them (mean, checkpoint batches included, and median), and the
  first batch of a new process (no snapshot kept yet);
* **append**: ``df.write.format("delta").mode("append")`` of 10 rows, best of ``--appends`` (a batch's commit on top of
  a whole Spark job; every one of them crosses a checkpoint or replays up to ``--checkpoint-every`` commits);
* **source planning**: a Delta stream started on the table to Spark's noop sink with ``availableNow`` (the
  initial snapshot's planning and one batch);
* **doctor**: ``diagnose`` of that stream's checkpoint with the table.

Target (issue 25): every figure on N = 100,000 within 1.5x of N = 100. Prints tables; asserts nothing. The
machine is shared, so figures are noisy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_doctor import QUERY_ID, _checkpoint_table
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.log.table_view import forget_table
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.ops.doctor import diagnose
from sparkonce.spark import local_session

console = Console(width=140)


def best(repeat: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def make_stream_table(root: Path, versions: int, checkpoint_every: int) -> None:
    """N table versions of a stream writing column ``id`` (long), one file live at a time; checkpoints at every
    multiple of ``checkpoint_every`` with ``_last_checkpoint``; the live file a real Parquet file."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    meta = {"id": "bench-long-log", "schemaString": json.dumps(schema), "partitionColumns": [], "createdTime": 0}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    for v in range(versions):
        info = {
            "timestamp": v,
            "operation": "STREAMING UPDATE",
            "operationParameters": {"outputMode": "Append", "queryId": QUERY_ID, "epochId": str(v)},
        }
        actions: list[dict[str, Any]] = [
            {"commitInfo": info},
            {"txn": {"appId": QUERY_ID, "version": v}},
            {
                "add": {
                    "path": f"f{v}.parquet",
                    "partitionValues": {},
                    "size": 1000,
                    "modificationTime": v,
                    "dataChange": True,
                    "stats": '{"numRecords":10}',
                }
            },
        ]
        if v == 0:
            actions += [{"protocol": protocol}, {"metaData": {**meta, "format": {"provider": "parquet"}}}]
        else:
            actions.append({"remove": {"path": f"f{v - 1}.parquet", "deletionTimestamp": v, "dataChange": True}})
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        if v and v % checkpoint_every == 0:
            pq.write_table(_checkpoint_table(v, f"f{v}.parquet", meta, protocol), log / f"{v:020d}.checkpoint.parquet")
            (log / "_last_checkpoint").write_text(json.dumps({"version": v, "size": 4}))
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), root / f"f{versions - 1}.parquet")


_batch_ids = itertools.count(1_000_000)


def sink_commits(table: Path, n: int, batches: int) -> list[float]:
    """The driver side of ``batches`` streaming batches as the sink makes them, in one process like a running
    stream's driver: ``commit_files`` of one data file with the query's ``txn`` (writing the file is the executors'
    part: not timed; every batch names the same file, which the commit does not read). Checkpoints come every
    ``delta.checkpointInterval`` (10) commits, with log cleanup, as in a running stream."""
    schema = pa.schema([("id", pa.int64())])
    written = WrittenFile(f"f{n - 1}.parquet", 1000, {}, 0, 10, '{"numRecords":10}')
    times = []
    for _ in range(batches):
        started = time.perf_counter()
        commit_files(str(table), [written], data_schema=schema, txn=BatchTxn("bench-sink", next(_batch_ids)))
        times.append(time.perf_counter() - started)
    return times


def measure(spark: Any, work: Path, n: int, args: argparse.Namespace) -> dict[str, float]:
    import deltalake

    table = work / f"t{n}"
    started = time.perf_counter()
    make_stream_table(table, n, args.checkpoint_every)
    generated = time.perf_counter() - started
    console.print(f"N = {n:,}: generated in {generated:.1f} s")
    figures: dict[str, float] = {}
    figures["open latest: sparkonce DeltaLog.snapshot()"] = best(args.repeat, lambda: DeltaLog(table).snapshot())
    figures["open latest: delta-rs DeltaTable(t) (baseline)"] = best(
        args.repeat, lambda: deltalake.DeltaTable(str(table))
    )
    old = min(100, n - 1)
    figures["open at table version 100 (N - 1 when smaller): sparkonce"] = best(
        args.repeat, lambda: DeltaLog(table).snapshot(old)
    )
    figures["open at table version 100 (N - 1 when smaller): delta-rs"] = best(
        args.repeat, lambda: deltalake.DeltaTable(str(table), version=old)
    )
    rows = spark.range(10)
    rows.write.format("delta").mode("append").save(str(table))  # warm-up (also the Spark job's first run)
    figures["append of 10 rows (a whole Spark write)"] = best(
        args.appends, lambda: rows.write.format("delta").mode("append").save(str(table))
    )
    cp = work / f"cp{n}"

    def stream() -> None:
        shutil.rmtree(cp, ignore_errors=True)
        query = (
            spark.readStream.format("delta")
            .load(str(table))
            .writeStream.format("noop")
            .option("checkpointLocation", str(cp))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    try:
        figures["Delta source: start + plan + one batch (noop)"] = best(args.repeat, stream)
        figures["doctor of that stream with the table"] = best(args.repeat, lambda: diagnose(cp, tables=[table]))
    except Exception as err:  # a loaded machine: Spark's Python worker may time out connecting back
        console.print(f"N = {n:,}: the Delta source run failed ({type(err).__name__}): no source/doctor figures")
        figures["Delta source: start + plan + one batch (noop)"] = float("nan")
        figures["doctor of that stream with the table"] = float("nan")
    # Last: a second app id in the table would make doctor's "auto" history scan read every commit.
    commits = sink_commits(table, n, args.batches)
    figures[f"sink batch commit, mean of {args.batches} (checkpoints + log cleanup included)"] = sum(commits) / len(
        commits
    )
    figures[f"sink batch commit, median of {args.batches}"] = sorted(commits)[len(commits) // 2]
    figures["sink batch commit, first of a new process (no kept snapshot)"] = best(
        args.repeat, lambda: (forget_table(table), sink_commits(table, n, 1))
    )
    shutil.rmtree(table, ignore_errors=True)
    shutil.rmtree(cp, ignore_errors=True)
    for key, value in figures.items():  # as measured: a later failure of a loaded machine loses nothing
        console.print(f"N = {n:,}: {key}: {value:.4f} s")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[100, 100_000])
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--appends", type=int, default=5)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = local_session(app_name="bench-long-log")
    work = Path(tempfile.mkdtemp(prefix="bench-long-log-"))
    try:
        small, big = args.sizes
        a = measure(spark, work, small, args)
        b = measure(spark, work, big, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    table = Table(title=f"A table of {big:,} table versions vs {small:,} (checkpoint every {args.checkpoint_every})")
    for name in ("figure", f"N = {small:,} (s)", f"N = {big:,} (s)", "ratio", "target"):
        table.add_column(name, justify="right")
    for key in a:
        table.add_row(key, f"{a[key]:.3f}", f"{b[key]:.3f}", f"{b[key] / max(a[key], 1e-9):.2f}x", "<= 1.5x")
    console.print(table)


if __name__ == "__main__":
    main()
