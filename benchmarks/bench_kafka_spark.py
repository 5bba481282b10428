"""``sparkonce.kafka`` vs Spark's own Kafka connector, same topic, same broker, same run, alternated.

Run: ``.venv/bin/python benchmarks/bench_kafka_spark.py [--records 200000] [--value-bytes 100] [--partitions 2]
[--repeat 3] [--bootstrap host:port]``.

Without ``--bootstrap`` an embedded Apache Kafka broker is started (and stopped) in a temporary directory. The
topic is filled once (``bench_kafka.fill_topic``, multi-record batches); both readers take the broker's
ListOffsets(latest) answer, the log end offset, as the end (sparkonce's default ``confirmLatestOffsets=false``), and
each run must read every record (a run that does not is printed in red).

Each round runs both readers once, in alternated order, on a fresh checkpoint: ``readStream`` with
``startingOffsets=earliest`` and the availableNow trigger into Spark's ``noop`` sink, timed from ``start()`` to the
query's end inside its own Spark process (sparkonce in this process's session; the connector in the Spark Kafka
oracle process, ``sparkonce_local.services.spark_kafka``, which has its jars; both ``local[2]``, the same JVM mode).
One warm-up run each first. Prints the best of ``--repeat`` rounds per reader, rows/s and the ratio
sparkonce / Spark (throughput; above 1 means sparkonce is faster). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_kafka import fill_topic
from sparkonce_local.services.broker import create_topic, start_broker, stop_broker
from sparkonce_local.services.spark_kafka import StreamRun, load, run_stream, spark_kafka_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    console = Console()

    work = Path(tempfile.mkdtemp(prefix="bench-kafka-spark-"))
    bootstrap = args.bootstrap
    if bootstrap is None:
        bootstrap = start_broker(state_dir=work / "broker").bootstrap
    try:
        topic = f"bench-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        fill_topic(bootstrap, topic, records=args.records, value_bytes=args.value_bytes, partitions=args.partitions)
        total = args.records
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
        console.print(f"filled {topic}: {total:,} records, {args.partitions} partitions (broker {bootstrap})")

        from sparkonce.spark import local_session

        spark = local_session(app_name="bench-kafka-spark")
        with spark_kafka_process(log_dir=work) as oracle:
            runs = 0

            def ours() -> StreamRun:
                nonlocal runs
                runs += 1
                df = load(spark, "sparkonce.kafka", options, stream=True)
                return run_stream(df, work / f"ck-{runs}", sink="noop")

            def theirs() -> StreamRun:
                nonlocal runs
                runs += 1
                return oracle.stream(options, work / f"ck-{runs}", sink="noop")

            readers = {"sparkonce.kafka": ours, "Spark's kafka": theirs}
            for read in readers.values():
                read()  # warm-up: JVM, Python workers, broker caches
            seconds: dict[str, list[float]] = {name: [] for name in readers}
            for round_ in range(args.repeat):
                order = list(readers) if round_ % 2 == 0 else list(reversed(readers))
                for name in order:
                    run = readers[name]()
                    rows = sum(p["numInputRows"] for p in run.progress)
                    if run.error is not None or rows != total:
                        console.print(f"[red]{name}: {rows:,} rows of {total:,}, error {run.error}[/red]")
                    seconds[name].append(run.seconds)
                    console.print(f"round {round_ + 1}: {name} {run.seconds:.2f}s")
        spark.stop()
    finally:
        if args.bootstrap is None:
            stop_broker(state_dir=work / "broker")

    best = {name: min(values) for name, values in seconds.items()}
    spark_best = best["Spark's kafka"]
    table = Table(title=f"availableNow -> noop, {total:,} records of {args.value_bytes} B, best of {args.repeat}")
    for column in ("source", "best s", "all s", "rows/s", "vs Spark's kafka"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for name, value in best.items():
        table.add_row(
            name,
            f"{value:.2f}",
            " ".join(f"{s:.2f}" for s in seconds[name]),
            f"{total / value:,.0f}",
            f"{spark_best / value:.2f}x",
        )
    console.print(table)


if __name__ == "__main__":
    main()
