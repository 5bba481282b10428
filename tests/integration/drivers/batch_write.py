"""Driver program for crash tests: one batch write of consecutive ids into a Delta table through sparkonce.

Usage: python -m tests.integration.drivers.batch_write TABLE --rows N [--start S] [--txn-app-id A --txn-version V]
           [--partition-by device]

Writes ids ``S .. S+N-1`` (column ``device`` = id % 3) in two tasks with mode append, then prints ``DONE`` and
exits 0. Crash points are armed by the environment (see sparkonce.crash).
"""

from __future__ import annotations

import argparse

from sparkonce.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--txn-app-id", default=None)
    parser.add_argument("--txn-version", default=None)
    parser.add_argument("--partition-by", default=None)
    args = parser.parse_args()

    spark = local_session(app_name="batch-write")
    frame = spark.range(args.start, args.start + args.rows, numPartitions=2).selectExpr(
        "id", "CAST(id % 3 AS STRING) AS device"
    )
    writer = frame.write.format("delta").mode("append")
    if args.txn_app_id is not None:
        writer = writer.option("txnAppId", args.txn_app_id).option("txnVersion", args.txn_version)
    if args.partition_by:
        writer = writer.partitionBy(args.partition_by)
    writer.save(args.table)
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
