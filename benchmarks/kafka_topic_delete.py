"""How often deleting a topic while a consumer reads it kills the reading process (librdkafka SIGSEGV).

Run: ``.venv/bin/python benchmarks/kafka_topic_delete.py [--deletions 20] [--mode plain|reader|planner]
[--set key=value ...] [--child-python PATH] [--in-process]``.

An embedded Kafka broker is started in a temporary directory. Each round creates a topic, starts a producer
writing records to it continuously, starts a child process that reads the topic and deletes the topic while
records still flow and the child still reads. The child's exit status is counted: 0 (it went on), SIGSEGV or
another signal (the Kafka client crashed the process), or an error (a Python exception, e.g. a ``BrokerError``).

``--mode plain`` reads with a bare confluent-kafka consumer assigned to the partition, configured like the
source's executor reader (``--set`` adds client options); ``--mode reader`` reads with the source's own
``read_range`` over a range far beyond what is produced, with ``failOnDataLoss=false``; ``--mode planner`` plans
in a loop (the pattern subscription's ``discover`` and confirmed ``latest``) as the driver does for every batch.
``--in-process`` keeps the source's Kafka client in the reading process (as before the forked children).
Prints one line per round and the totals (``TOPIC_DELETE_STDERR=1`` shows the child's stderr, e.g. with
``--set debug=fetch,metadata``).
``--child-python`` reads with another interpreter (a throwaway venv with another confluent-kafka; plain mode
only needs ``confluent_kafka`` there). Nothing is asserted. Figures and the cause: docs/kafka.md, *A crash of the
Kafka client*.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

CHILD = r"""
import logging, os, sys, time, uuid
mode, bootstrap, topic, stop_file = sys.argv[1:5]
extra = dict(kv.split("=", 1) for kv in sys.argv[5:] if kv != "--in-process")
if "--in-process" in sys.argv[5:]:
    import sparkonce.kafka.isolated
    sparkonce.kafka.isolated.can_isolate = lambda: False
logging.basicConfig(level=logging.WARNING if os.environ.get("TOPIC_DELETE_STDERR") else logging.CRITICAL)
if mode == "plain":
    from confluent_kafka import Consumer, TopicPartition
    config = {
        "bootstrap.servers": bootstrap, "group.id": f"x-{uuid.uuid4()}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100, "log_level": 0,
    }
    config.update(extra)
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    print("ready", flush=True)
    while not os.path.exists(stop_file):
        for message in consumer.consume(num_messages=1000, timeout=0.1):
            if message.error() is None:
                read += 1
    consumer.close()
    print(f"read {read}", flush=True)
elif mode == "planner":
    from sparkonce.errors import SparkonceError
    from sparkonce.kafka.options import KafkaOptions
    from sparkonce.kafka.planner import OffsetPlanner
    pattern = topic.rsplit("-", 2)[0] + "-.*"
    planner = OffsetPlanner(KafkaOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribePattern": pattern}))
    print("ready", flush=True)
    plannings = errors = 0
    refused = ""
    while not os.path.exists(stop_file):
        try:
            planner.latest(planner.discover())
            plannings += 1
        except SparkonceError as err:
            errors += 1
            refused = f"{type(err).__name__}: {err}"
    planner.close()
    print(f"read {plannings} plannings, {errors} refused {refused[:300]}", flush=True)
else:
    from sparkonce.kafka.offsets import OffsetRange, TopicPartition as TP
    from sparkonce.kafka.isolated import read_range
    from sparkonce.kafka.reader import ReadSettings, kafka_schema
    settings = ReadSettings(
        client_config={"bootstrap.servers": bootstrap, "log_level": "0", **extra},
        fail_on_data_loss=False, poll_timeout_ms=5_000,
    )
    rng = OffsetRange(TP(topic, 0), 0, 10**9)
    import pyarrow, pyspark.sql.pandas.types  # what read_range imports, before the deletion's clock starts
    print("ready", flush=True)
    read = 0
    try:
        for batch in read_range(settings, rng, kafka_schema(include_headers=False)):
            read += batch.num_rows
    except Exception as err:
        print(f"error {type(err).__name__}: {err}", flush=True)
        sys.exit(3)
    print(f"read {read}", flush=True)
"""


def _produce_until(bootstrap: str, topic: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    index = 0
    while not stop.is_set():
        try:
            producer.produce(topic, key=f"k{index}".encode(), value=b"v" * 100)
        except BufferError:
            producer.poll(0.05)
            continue
        index += 1
        producer.poll(0)
        if index % 200 == 0:
            time.sleep(0.01)
    producer.flush(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deletions", type=int, default=20)
    parser.add_argument("--mode", choices=("plain", "reader", "planner"), default="plain")
    parser.add_argument(
        "--in-process", action="store_true", help="reader/planner: keep the Kafka client in process (no forked child)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a client option")
    parser.add_argument(
        "--child-python", default=sys.executable, help="the interpreter of the reading child (another client version)"
    )
    args = parser.parse_args()

    from sparkonce_local.services.broker import create_topic, delete_topic, start_broker, stop_broker

    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="topic-delete-") as tmp:
        state = Path(tmp) / "broker"
        info = start_broker(state_dir=state)
        try:
            for round_index in range(args.deletions):
                topic = f"del-{round_index}-{os.getpid()}"
                stop_file = Path(tmp) / f"stop-{round_index}"
                create_topic(info.bootstrap, topic)
                stop = threading.Event()
                producer = threading.Thread(target=_produce_until, args=(info.bootstrap, topic, stop))
                producer.start()
                child = subprocess.Popen(
                    [
                        args.child_python,
                        "-c",
                        CHILD,
                        args.mode,
                        info.bootstrap,
                        topic,
                        str(stop_file),
                        *args.set,
                        *(["--in-process"] if args.in_process else []),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if not os.environ.get("TOPIC_DELETE_STDERR") else None,
                    text=True,
                )
                assert child.stdout is not None
                child.stdout.readline()  # "ready"
                time.sleep(0.7)  # the child reads records as they are produced
                delete_topic(info.bootstrap, topic)
                time.sleep(0.5)  # records still produced (to a topic that is gone), the child still reads
                stop.set()
                producer.join()
                time.sleep(1.0)  # the client's metadata refresh after the deletion
                stop_file.touch()
                try:
                    out, _ = child.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()
                    out, _ = child.communicate()
                code = child.returncode
                if code == 0:
                    outcome = "survived"
                elif code < 0:
                    outcome = f"signal {-code}"
                else:
                    outcome = f"exit {code}"
                outcomes[outcome] += 1
                detail = (out.strip().splitlines() or [""])[-1]
                print(f"round {round_index + 1:3d}: {outcome:10s} {detail[:150]}", flush=True)
        finally:
            stop_broker(state_dir=state)
    print("totals: " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
