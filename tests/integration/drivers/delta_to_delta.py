"""Driver program for crash tests: a Delta table streamed into another Delta table through sparkonce.

Usage: python -m tests.integration.drivers.delta_to_delta SOURCE_TABLE TARGET_TABLE CHECKPOINT [--max-files N]
           [--starting-version V|none] [--starting-timestamp TS] [--read-change-feed]
           [--schema-tracking LOCATION] [--conf KEY=VALUE ...] [--python]

Reads the source from table version 0 (``startingVersion``; ``none`` reads the latest snapshot first, then the
changes) or from ``--starting-timestamp``, with the availableNow trigger, ``--max-files`` files per batch, then
prints ``DONE`` and exits 0. ``--read-change-feed`` streams the source's change data feed (its change rows land in
the target with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``). ``--schema-tracking`` sets the
source's ``schemaTrackingLocation`` (the target then takes new columns: ``mergeSchema``), ``--conf`` sets session
confs, ``--python`` reads through the Python data source instead of the native one. Crash points are armed by the
environment (see sparkonce.crash).
"""

from __future__ import annotations

import argparse

from sparkonce.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("checkpoint")
    parser.add_argument("--max-files", type=int, default=1)
    parser.add_argument("--starting-version", default="0")
    parser.add_argument("--starting-timestamp", default=None)
    parser.add_argument("--read-change-feed", action="store_true")
    parser.add_argument("--schema-tracking", default=None)
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--python", action="store_true")
    args = parser.parse_args()

    spark = local_session(app_name="delta-to-delta")
    for item in args.conf:
        key, _, value = item.partition("=")
        spark.conf.set(key, value)
    if args.python:
        spark.conf.set("spark.sparkonce.nativeReads", "false")
    reader = spark.readStream.format("delta").option("maxFilesPerTrigger", args.max_files)
    if args.schema_tracking is not None:
        reader = reader.option("schemaTrackingLocation", args.schema_tracking)
    if args.read_change_feed:
        reader = reader.option("readChangeFeed", "true")
    if args.starting_timestamp is not None:
        reader = reader.option("startingTimestamp", args.starting_timestamp)
    elif args.starting_version != "none":
        reader = reader.option("startingVersion", args.starting_version)
    writer = reader.load(args.source).writeStream.format("delta")
    if args.schema_tracking is not None:
        writer = writer.option("mergeSchema", "true")
    query = writer.option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start(args.target)
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
