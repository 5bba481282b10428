"""Where a micro-batch's time goes: Spark's phases per sink, and the Delta commit's own parts, same run.

Run: ``.venv/bin/python benchmarks/bench_batch.py [--rows 1,100000] [--batches 12] [--warmup 3]``.

For each batch size, the same ``rate-micro-batch`` input (``id``, ``ts``, a 96-character string; ``--rows`` rows
per batch, 2 partitions, ``local[2]``) streams into the ``noop`` sink, Spark's ``parquet`` file sink and
sparkonce's ``delta`` sink, one after another (alternated over ``--repeat`` rounds). From every steady batch
(after ``--warmup``) the query progress gives Spark's own phases (``durationMs``):

* ``latestOffset`` + ``getBatch`` + ``queryPlanning``: the source and planning (for the delta sink this includes
  the Python data source round trips that plan the write);
* ``walCommit``: writing ``offsets/N`` to the checkpoint; ``commitOffsets``: writing ``commits/N``;
* ``addBatch``: running the batch, i.e. executors writing the files plus the sink's commit (for delta: one
  Delta commit with the txn, made in a Python worker on the driver);
* ``triggerExecution``: the whole batch.

Then, on the delta sink's table as the stream left it, the parts of a Delta commit measured on their own in this
process: loading the newest snapshot (delta-rs), checking the txn, and committing one small file with a txn
(``sparkonce.delta.txn.commit.commit_files``), p50 of ``--commit-samples``.

Prints p50/p95 per phase and the delta/parquet and delta/noop ratios of the whole batch. Asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkonce.spark import local_session

PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")
SINKS = ("noop", "parquet", "delta")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def run_stream(spark, sink: str, rows: int, batches: int, work: Path) -> list[dict[str, float]]:  # type: ignore[no-untyped-def]
    """``batches`` micro-batches of ``rows`` rows into ``sink``; each batch's ``durationMs``."""
    target, checkpoint = work / f"{sink}-{rows}", work / f"{sink}-{rows}-ck"
    for path in (target, checkpoint):
        shutil.rmtree(path, ignore_errors=True)
    frame = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "timestamp AS ts", "repeat(substr(sha2(cast(value AS string), 256), 1, 48), 2) AS s")
    )
    writer = frame.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
    query = writer.start() if sink == "noop" else writer.start(str(target))
    seen: dict[int, dict[str, float]] = {}
    try:
        deadline = time.monotonic() + 600
        while len(seen) < batches and time.monotonic() < deadline:
            for progress in query.recentProgress:
                if progress["numInputRows"] > 0:
                    seen.setdefault(progress["batchId"], {k: float(v) for k, v in progress["durationMs"].items()})
            if query.exception() is not None:
                raise RuntimeError(f"{sink} stream failed: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()
    return [seen[b] for b in sorted(seen)[:batches]]


def commit_parts(table: Path, samples: int) -> dict[str, list[float]]:
    """Snapshot load, txn check and a one-file commit on ``table``, each timed on its own (milliseconds)."""
    import pyarrow as pa

    from sparkonce.delta.txn.commit import BatchTxn, commit_files, committed_txn_version, load_table
    from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
    from sparkonce.storage import table_location

    location = table_location(str(table))
    parts: dict[str, list[float]] = {"snapshot load": [], "txn check": [], "commit (load + check + put)": []}
    data = pa.table({"id": [1], "ts": pa.array([0], pa.timestamp("us", tz="UTC")), "s": ["x" * 96]})
    for i in range(samples):
        start = time.perf_counter()
        snapshot = load_table(location)
        parts["snapshot load"].append((time.perf_counter() - start) * 1000)
        txn = BatchTxn("bench-batch-commit", i)
        start = time.perf_counter()
        committed_txn_version(snapshot, txn)
        parts["txn check"].append((time.perf_counter() - start) * 1000)
        writer = TableFileWriter(FileWriterOptions(location=location))
        writer.write(data)
        files = writer.close()
        start = time.perf_counter()
        commit_files(location, files, data_schema=data.schema, txn=txn)
        parts["commit (load + check + put)"].append((time.perf_counter() - start) * 1000)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,100000", help="rows per batch, comma-separated")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the three sinks, alternated")
    parser.add_argument("--commit-samples", type=int, default=20)
    args = parser.parse_args()
    console = Console(width=200)
    spark = local_session(app_name="bench-batch", master="local[2]")
    spark.sparkContext.setLogLevel("OFF")  # stopping a stream mid-batch logs interrupted tasks
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        for rows in (int(r) for r in args.rows.split(",")):
            steady: dict[str, list[dict[str, float]]] = {s: [] for s in SINKS}
            for _ in range(args.repeat):
                for sink in SINKS:
                    steady[sink] += run_stream(spark, sink, rows, args.batches + args.warmup, work)[args.warmup :]
            title = f"{rows:,} rows per batch: Spark's phases, ms (p50 / p95 of {args.batches} steady batches)"
            table = Table(title=title)
            table.add_column("phase")
            for sink in SINKS:
                table.add_column(sink, justify="right")
            for phase in PHASES:
                cells = []
                for sink in SINKS:
                    values = [b.get(phase, 0.0) for b in steady[sink]]
                    cells.append(f"{percentile(values, 0.5):,.0f} / {percentile(values, 0.95):,.0f}")
                table.add_row(phase, *cells)
            console.print(table)
            whole = {s: statistics.median(b["triggerExecution"] for b in steady[s]) for s in SINKS}
            console.print(
                f"whole batch p50: delta {whole['delta']:,.0f} ms, parquet {whole['parquet']:,.0f} ms, noop "
                f"{whole['noop']:,.0f} ms; delta / parquet {whole['delta'] / whole['parquet']:.2f}x, delta / noop "
                f"{whole['delta'] / whole['noop']:.2f}x (per-batch time: lower is better)"
            )
            parts = commit_parts(work / f"delta-{rows}", args.commit_samples)
            title = f"Delta commit parts on the delta sink's table after the stream, ms ({args.commit_samples} samples)"
            table = Table(title=title)
            for column in ("part", "p50", "p95"):
                table.add_column(column, justify="left" if column == "part" else "right")
            for name, values in parts.items():
                table.add_row(name, f"{percentile(values, 0.5):.1f}", f"{percentile(values, 0.95):.1f}")
            console.print(table)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
