"""Throughput of the ``sparkonce.kafka`` source vs the raw confluent-kafka consumer, same topic, same broker, same run.

Run: ``.venv/bin/python benchmarks/bench_kafka.py [--records 1000000] [--value-bytes 100] [--partitions 2]
[--bootstrap host:port]``.

Without ``--bootstrap`` an embedded Kafka broker is started (and stopped) in a temporary directory. The topic is
filled once; then each reader reads all of it, ``--repeat`` times (best run kept):

* ``raw consumer``: one confluent-kafka Consumer assigned to every partition, ``consume()`` in batches of 10,000,
  touching each record's key and value: the floor of what any Python reader can do;
* ``source, batch``: ``spark.read.format("sparkonce.kafka")...write.format("noop")``;
* ``source, stream``: ``readStream`` with the availableNow trigger into the ``noop`` sink.

Spark's rows are read by its executors in parallel (one task per partition, ``local[N]``); the raw consumer is one
thread. Prints a table with rows/s, MB/s (key + value bytes) and the ratio to the raw consumer. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkonce_local.services.broker import create_topic, start_broker, stop_broker


@dataclass(frozen=True)
class Measurement:
    reader: str
    rows: int
    seconds: float
    payload_bytes: int

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_second(self) -> float:
        return self.payload_bytes / self.seconds / 1e6


def fill_topic(bootstrap: str, topic: str, *, records: int, value_bytes: int, partitions: int) -> int:
    """Write ``records`` records round-robin over the partitions; return the key + value bytes written."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "log_level": 0,
        }
    )
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    total = 0
    for index in range(records):
        key = b"key-%08d" % index
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=index % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        total += len(key) + len(value)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the producer did not deliver every record")
    return total


def raw_consumer(bootstrap: str, topic: str, *, records: int, partitions: int) -> tuple[int, int]:
    """Read the whole topic with one consumer; return (rows, key + value bytes)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows = size = 0
    deadline = time.monotonic() + 600
    try:
        while rows < records and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error():
                    continue
                key, value = message.key(), message.value()
                size += len(key) + len(value)
                rows += 1
    finally:
        consumer.close()
    return rows, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    console = Console()

    state_dir = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    bootstrap = args.bootstrap
    if bootstrap is None:
        bootstrap = start_broker(state_dir=state_dir).bootstrap
    try:
        topic = f"bench-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        started = time.monotonic()
        payload = fill_topic(
            bootstrap, topic, records=args.records, value_bytes=args.value_bytes, partitions=args.partitions
        )
        console.print(
            f"filled {topic}: {args.records:,} records, {payload / 1e6:.1f} MB key+value, "
            f"{args.partitions} partitions, in {time.monotonic() - started:.1f}s (broker {bootstrap})"
        )

        from sparkonce.spark import local_session

        spark = local_session(app_name="bench-kafka", master=f"local[{args.cores}]")

        def source_batch() -> tuple[int, int]:
            (
                spark.read.format("sparkonce.kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )
            return args.records, payload

        def source_stream() -> tuple[int, int]:
            with tempfile.TemporaryDirectory(prefix="bench-kafka-ck-") as checkpoint:
                query = (
                    spark.readStream.format("sparkonce.kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", checkpoint)
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                rows = sum(p["numInputRows"] for p in query.recentProgress)
            return rows, payload

        readers: dict[str, Callable[[], tuple[int, int]]] = {
            "raw consumer": lambda: raw_consumer(bootstrap, topic, records=args.records, partitions=args.partitions),
            "source, batch": source_batch,
            "source, stream": source_stream,
        }
        source_batch()  # warm up the JVM and the Python workers
        results: list[Measurement] = []
        for name, read in readers.items():
            best: Measurement | None = None
            for _ in range(args.repeat):
                begin = time.monotonic()
                rows, size = read()
                measured = Measurement(name, rows, time.monotonic() - begin, size)
                if rows != args.records:
                    console.print(f"[red]{name} read {rows:,} rows, expected {args.records:,}[/red]")
                if best is None or measured.seconds < best.seconds:
                    best = measured
            assert best is not None
            results.append(best)
        spark.stop()
    finally:
        if args.bootstrap is None:
            stop_broker(state_dir=state_dir)

    raw = results[0]
    table = Table(title=f"sparkonce.kafka vs raw confluent-kafka ({args.records:,} records of {args.value_bytes} B)")
    for column in ("reader", "rows", "seconds", "rows/s", "MB/s", "vs raw"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for m in results:
        table.add_row(
            m.reader,
            f"{m.rows:,}",
            f"{m.seconds:.2f}",
            f"{m.rows_per_second:,.0f}",
            f"{m.mb_per_second:.1f}",
            f"{m.rows_per_second / raw.rows_per_second:.2f}x",
        )
    console.print(table)
    console.print(f"python {sys.version.split()[0]}, Spark local[{args.cores}], os.cpu_count()={os.cpu_count()}")


if __name__ == "__main__":
    main()
