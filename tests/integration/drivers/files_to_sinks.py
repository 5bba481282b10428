"""Driver program for the sink crash tests: a JSON file stream (one file per batch) into a fan-out or PostgreSQL.

Usage:
    python -m tests.integration.drivers.files_to_sinks INPUT_DIR CHECKPOINT fanout TABLE_ALL TABLE_EVEN
    python -m tests.integration.drivers.files_to_sinks INPUT_DIR CHECKPOINT postgres DSN TABLE [--keys id]
        [--commit-protocol two-phase] [--partitions N]

``fanout`` writes every row to TABLE_ALL and the even ids to TABLE_EVEN (txn app ids from the query id);
``postgres`` writes every row to TABLE through :class:`~sparkonce.sinks.postgres.PostgresSink` (app id from the
query id), its batches repartitioned into N partitions when given. Runs with the availableNow trigger, prints
``DONE`` and exits 0. Crash points are armed by the environment (see sparkonce.crash).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from sparkonce.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input_dir")
    parser.add_argument("checkpoint")
    sub = parser.add_subparsers(dest="sink", required=True)
    fanout = sub.add_parser("fanout")
    fanout.add_argument("table_all")
    fanout.add_argument("table_even")
    postgres = sub.add_parser("postgres")
    postgres.add_argument("dsn")
    postgres.add_argument("table")
    postgres.add_argument("--keys", default="")
    postgres.add_argument("--commit-protocol", default="staging")
    postgres.add_argument("--partitions", type=int, default=0)
    args = parser.parse_args()

    spark = local_session(app_name=f"files-to-{args.sink}")
    stream = (
        spark.readStream.format("json")
        .schema("id long, device string, value double")
        .option("maxFilesPerTrigger", 1)
        .load(args.input_dir)
    )
    sink: Callable[..., None]
    if args.sink == "fanout":
        from sparkonce.sinks.fanout import FanOutTarget, FanOutWriter

        sink = FanOutWriter(
            [
                FanOutTarget(args.table_all, name="all"),
                FanOutTarget(args.table_even, name="even", select=lambda df: df.where("id % 2 = 0")),
            ],
            checkpoint_dir=args.checkpoint,
        )
    else:
        from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions

        keys = tuple(k for k in args.keys.split(",") if k)
        pg_sink = PostgresSink(
            PostgresSinkOptions(
                dsn=args.dsn,
                table=args.table,
                keys=keys,
                checkpoint_dir=args.checkpoint,
                commit_protocol=args.commit_protocol,
            )
        )
        partitions = args.partitions
        sink = pg_sink if not partitions else (lambda df, batch_id: pg_sink(df.repartition(partitions), batch_id))
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
