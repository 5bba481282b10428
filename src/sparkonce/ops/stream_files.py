"""Driver program for the demo and crash tests: a JSON file stream (one input file per batch) into a Delta table.

Usage: python -m sparkonce.ops.stream_files INPUT_DIR TABLE CHECKPOINT [--format FMT]
           [--partition-by COL] [--option KEY=VALUE ...] [--conf KEY=VALUE ...]

Runs with the availableNow trigger until every input file is processed, then prints ``DONE`` and exits 0.
Crash points are armed by the environment (see sparkonce.crash).
"""

from __future__ import annotations

import argparse

from sparkonce.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input_dir")
    parser.add_argument("table")
    parser.add_argument("checkpoint")
    parser.add_argument("--format", default="delta")
    parser.add_argument("--partition-by", default=None)
    parser.add_argument("--option", action="append", default=[], help="a sink option KEY=VALUE (repeatable)")
    parser.add_argument("--conf", action="append", default=[], help="a Spark conf KEY=VALUE (repeatable)")
    args = parser.parse_args()

    conf = dict(pair.partition("=")[::2] for pair in args.conf)
    spark = local_session(app_name="files-to-delta", extra_conf=conf)
    stream = (
        spark.readStream.format("json")
        .schema("id long, device string, value double")
        .option("maxFilesPerTrigger", 1)
        .load(args.input_dir)
    )
    writer = stream.writeStream.format(args.format).option("checkpointLocation", args.checkpoint)
    for option in args.option:
        key, _, value = option.partition("=")
        writer = writer.option(key, value)
    if args.partition_by:
        writer = writer.partitionBy(args.partition_by)
    query = writer.trigger(availableNow=True).start(args.table)
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
