"""Throughput of the exactly-once PostgreSQL sink vs a plain single-process COPY of the same rows, same run.

Run: ``.venv/bin/python benchmarks/bench_postgres.py [--rows 1000000] [--partitions 2] [--dsn URI] [--repeat 2]``.

Without ``--dsn`` a throwaway server is started (and stopped) with :mod:`sparkonce_local.services.postgres`. The rows
(``id bigint, device text, value double precision``) are generated once, kept in Spark's cache for the sink and as
an Arrow table for the baseline, so neither side pays for producing them. Each measurement writes into a fresh
table (best of ``--repeat`` runs kept):

* ``plain COPY, 1 process``: one psycopg connection, Arrow -> CSV -> ``COPY FROM STDIN`` into the table: the
  floor of what loading these rows costs, with no exactly-once at all;
* ``sink, append``: ``PostgresSink.write_batch`` (executors COPY into the UNLOGGED staging table in parallel, then
  one database transaction moves the rows, writes the ledger row and clears the staging rows);
* ``sink, upsert on id``: the same with ``keys=("id",)`` (``DISTINCT ON`` + ``ON CONFLICT DO UPDATE``);
* ``sink, append, two-phase``: ``commit_protocol="two-phase"`` (executors COPY straight into the target and
  PREPARE; the driver commits the ledger row naming them, then each prepared transaction).

Prints rows/s and the ratio to the plain COPY. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Measurement:
    writer: str
    rows: int
    seconds: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds


def arrow_rows(rows: int) -> pa.Table:
    import pyarrow.compute as pc

    ids = pa.array(range(rows), pa.int64())
    device = pc.binary_join_element_wise("dev-", pc.cast(pc.bit_wise_and(ids, 63), pa.string()), "")
    value = pc.divide(pc.cast(ids, pa.float64()), 10.0)
    return pa.table({"id": ids, "device": device, "value": value})


def plain_copy(dsn: str, table: str, data: pa.Table) -> None:
    import psycopg
    import pyarrow.csv as pacsv

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, device text, value double precision)")
        with conn.transaction(), conn.cursor().copy(f"COPY {table} (id, device, value) FROM STDIN (FORMAT csv)") as cp:
            for batch in data.to_batches(max_chunksize=65_536):
                buffer = io.BytesIO()
                pacsv.write_csv(batch, buffer, pacsv.WriteOptions(include_header=False))
                cp.write(buffer.getbuffer())


def best(name: str, rows: int, repeat: int, run: Callable[[int], None]) -> Measurement:
    times = []
    for attempt in range(repeat):
        start = time.perf_counter()
        run(attempt)
        times.append(time.perf_counter() - start)
    return Measurement(name, rows, min(times))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions
    from sparkonce.sinks.postgres.options import CommitProtocol
    from sparkonce.spark import local_session
    from sparkonce_local.services.postgres import start_postgres, stop_postgres

    server = start_postgres() if args.dsn is None else None
    dsn = args.dsn or (server.dsn if server else "")
    try:
        spark = local_session(app_name="bench-postgres", master=f"local[{args.partitions}]")
        data = arrow_rows(args.rows)
        frame = (
            spark.range(args.rows, numPartitions=args.partitions)
            .selectExpr("id", "concat('dev-', CAST(id & 63 AS STRING)) AS device", "id / 10.0D AS value")
            .cache()
        )
        frame.count()
        stamp = int(time.time())
        phases: dict[str, list[tuple[float, float]]] = {}
        results = [
            best("plain COPY, 1 process", args.rows, args.repeat, lambda i: plain_copy(dsn, f"plain_{stamp}_{i}", data))
        ]
        writers: tuple[tuple[str, tuple[str, ...], CommitProtocol], ...] = (
            ("sink, append", (), "staging"),
            ("sink, upsert on id", ("id",), "staging"),
            ("sink, append, two-phase", (), "two-phase"),
        )
        for label, keys, protocol in writers:

            def run(
                i: int, keys: tuple[str, ...] = keys, protocol: CommitProtocol = protocol, label: str = label
            ) -> None:
                table = f"sink_{len(keys)}_{protocol[0]}_{stamp}_{i}"
                options = PostgresSinkOptions(
                    dsn=dsn, table=table, keys=keys, app_id=f"bench-{table}", commit_protocol=protocol
                )
                sink = PostgresSink(options)
                sink.check(frame.schema)
                outcome = sink.write_batch(frame, 0)
                phases.setdefault(label, []).append((outcome.load_seconds, outcome.commit_seconds))

            results.append(best(label, args.rows, args.repeat, run))
        spark.stop()
    finally:
        if server is not None:
            stop_postgres(server)

    baseline = results[0].rows_per_second
    table = Table(title=f"PostgreSQL writes, {args.rows:,} rows, local[{args.partitions}], best of {args.repeat}")
    for column in ("writer", "seconds", "rows/s", "vs plain COPY"):
        table.add_column(column, justify="left" if column == "writer" else "right")
    for m in results:
        table.add_row(m.writer, f"{m.seconds:.2f}", f"{m.rows_per_second:,.0f}", f"{m.rows_per_second / baseline:.2f}x")
    console = Console()
    console.print(table)
    for label, runs in phases.items():
        shown = ", ".join(f"load {load:.2f} s + commit {commit:.2f} s" for load, commit in runs)
        console.print(f"{label}: {shown}", soft_wrap=True)


if __name__ == "__main__":
    main()
