"""Driver program for Kafka crash tests: ``sparkonce.kafka`` into a parquet or Delta sink, availableNow.

Usage: python -m tests.integration.drivers.kafka_to_sink BOOTSTRAP TOPIC OUTPUT CHECKPOINT
           [--format parquet|delta] [--max-offsets N] [--starting-offsets earliest|latest]

Reads TOPIC from the earliest offset (or ``--starting-offsets``) in micro-batches of at most N records until
everything available when it started is processed, prints ``DONE`` and exits 0. Crash points are armed by the
environment (sparkonce.crash).
"""

from __future__ import annotations

import argparse

from sparkonce.spark import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("output")
    parser.add_argument("checkpoint")
    parser.add_argument("--format", default="parquet", choices=["parquet", "delta"])
    parser.add_argument("--max-offsets", type=int, default=100)
    parser.add_argument("--starting-offsets", default="earliest")
    args = parser.parse_args()

    spark = local_session(app_name="kafka-to-sink")
    stream = (
        spark.readStream.format("sparkonce.kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
        .selectExpr("topic", "partition", "offset", "cast(value as string) as value")
    )
    query = (
        stream.writeStream.format(args.format)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start(args.output)
    )
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
