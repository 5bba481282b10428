"""Does the embedded broker keep every acknowledged record across SIGKILLs? A seeded kill loop, with counts.

Starts the embedded Kafka broker (its data directory on disk), produces ``--records`` distinct values with
``acks=all`` and ``enable.idempotence=true`` at ``--rate`` records/s, SIGKILLs the broker ``--kills`` times at
seeded moments (restarting it on the same ports and data), waits for every delivery report, then reads the topic to
the end of each partition and prints: acknowledged, refused, found, lost (acknowledged but missing), duplicated (in
the topic more than once), extra (in the topic but never acknowledged).

    PYTHONPATH=src python benchmarks/broker_durability.py --kills 5 --seed 1

Runs on the machine that starts it (a CLI process), never on Spark executors.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


def main() -> None:
    from confluent_kafka import Producer

    from sparkonce_local.chaos.reconcile import read_topic
    from sparkonce_local.services.broker import create_topic, restart_broker, start_broker, stop_broker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="sparkonce-durability-"))
    broker_dir = work / "broker"
    broker = start_broker(state_dir=broker_dir)
    topic = "durability"
    create_topic(broker.bootstrap, topic, partitions=args.partitions)

    acknowledged: Counter[bytes] = Counter()
    refused: Counter[bytes] = Counter()

    def delivered(err: Any, msg: Any) -> None:
        (refused if err is not None else acknowledged)[msg.value()] += 1

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": "true",
            "message.timeout.ms": "120000",
            "linger.ms": "5",
            "log_level": "2",
        }
    )
    done = threading.Event()

    def produce() -> None:
        started = time.monotonic()
        for index in range(args.records):
            while time.monotonic() - started < index / args.rate:
                producer.poll(0.005)
            while True:
                try:
                    producer.produce(topic, value=b"v%08d" % index, key=b"k%d" % (index % 97), on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(180)
        done.set()

    thread = threading.Thread(target=produce, daemon=True)
    started = time.monotonic()
    thread.start()
    duration = args.records / args.rate
    moments = sorted(rng.uniform(0.1 * duration, 0.9 * duration) for _ in range(args.kills))
    restarts: list[tuple[float, float]] = []
    for moment in moments:
        time.sleep(max(0.0, moment - (time.monotonic() - started)))
        killed_at = time.monotonic() - started
        restart_broker(state_dir=broker_dir, crash=True, timeout=60.0)
        restarts.append((round(killed_at, 2), round(time.monotonic() - started, 2)))
    thread.join()
    produce_seconds = time.monotonic() - started
    topic_records = read_topic(broker.bootstrap, topic, timeout=300.0)
    found = Counter(v for v in topic_records.values() if v is not None)
    missing = sorted(v for v, n in acknowledged.items() if found.get(v, 0) < n)
    lost = sum(max(0, n - found.get(v, 0)) for v, n in acknowledged.items())
    duplicated = sum(n - 1 for n in found.values() if n > 1)
    extra = sum(1 for v in found if v not in acknowledged and v not in refused)
    print(
        json.dumps(
            {
                "seed": args.seed,
                "kills": args.kills,
                "records": args.records,
                "acknowledged": acknowledged.total(),
                "refused": refused.total(),
                "found": found.total(),
                "lost": lost,
                "duplicated": duplicated,
                "extra": extra,
                "produce_seconds": round(produce_seconds, 1),
                "kills_at_and_ready_at_s": restarts,
                # A value's index / rate is when it was handed to the producer, in seconds since the start.
                "lost_handed_over_at_s": [round(int(v[1:]) / args.rate, 2) for v in missing][:50],
                "exactly_once": lost == 0 and duplicated == 0 and extra == 0,
            }
        )
    )
    stop_broker(state_dir=broker_dir)


if __name__ == "__main__":
    main()
