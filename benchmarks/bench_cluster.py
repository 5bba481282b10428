"""The pipeline's raw stage (Kafka -> raw Delta table) on a 2-worker standalone cluster vs local mode, same data.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--records 200000] [--batch 50000] [--partitions 2]
[--workers 2] [--repeat 2]``.

An embedded Kafka broker and a standalone cluster (``--workers`` workers of 1 core and 2 GiB, from
:mod:`sparkonce_local.services.cluster`) are started in a temporary directory and stopped at the end; ``--records``
sensor readings are produced once to a topic of ``--partitions`` partitions, plus a small warm-up topic. For each
mode a driver process (``local[2]``, then ``spark://...``) builds its session (executors probed), runs the raw
stage once on the warm-up topic (JVM and Python workers warm), then ``--repeat`` times on the big topic into a
fresh table and checkpoint (``trigger = availableNow``, ``max_offsets_per_trigger = --batch``). The figure is
rows/s of the best timed run, query start included; the ratio is cluster over local.

Both modes use the same 2 cores of this machine: local mode runs 2 task threads in the driver's JVM, the cluster
one 1-core executor per worker in their own JVMs, so the ratio shows the cost of the cluster's extra processes
(task serialisation, executor JVMs, RPC), not a speed-up. The machine is shared with other jobs: expect noise.

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.services.broker import start_broker, stop_broker
from sparkonce_local.services.cluster import start_cluster, stop_cluster
from sparkonce_local.services.producer import produce_sensor_readings

console = Console(width=140)


def raw_pipeline(work: Path, bootstrap: str, topic: str, batch: int) -> Path:
    """A pipeline file with only the raw stage, in its own folder."""
    work.mkdir(parents=True)
    text = quickstart_pipeline(bootstrap, topic=topic, max_offsets_per_trigger=batch)
    text = text[: text.index("[stages.bronze]")]
    path = work / "pipeline.toml"
    path.write_text(text)
    return path


def drive(master: str, pipelines: list[str]) -> None:
    """Driver process: build the session, run the raw stage of each pipeline file in turn, print timings."""
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.run import run_pipeline
    from sparkonce.pipeline.streams import table_rows
    from sparkonce.spark import local_session

    spark = local_session(app_name="bench-cluster", master=master, extra_conf={"spark.ui.showConsoleProgress": "false"})
    for path in pipelines:
        config = load_pipeline(Path(path))
        started = time.perf_counter()
        run_pipeline(config, stages=["raw"], spark=spark, poll_seconds=0.2)
        seconds = time.perf_counter() - started
        print(json.dumps({"pipeline": path, "seconds": seconds, "rows": table_rows(config.raw.table)}), flush=True)
    spark.stop()


def measure(master: str, warm: Path, timed: list[Path]) -> list[dict[str, float]]:
    proc = subprocess.run(
        [sys.executable, __file__, "--drive", master, str(warm), *map(str, timed)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"driver on {master} failed:\n{proc.stderr[-3000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return lines[1:]  # the first is the warm-up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--drive", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.drive[0], args.drive[1:])
        return

    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    broker_dir, cluster_dir = work / "broker", work / "cluster"
    try:
        broker = start_broker(state_dir=broker_dir)
        for topic, count in (("warm", 2_000), ("readings", args.records)):
            produce_sensor_readings(
                broker.bootstrap, topic=topic, count=count, partitions=args.partitions, malformed_share=0.01, seed=1
            )
        cluster = start_cluster(state_dir=cluster_dir, workers=args.workers, worker_cores=1, worker_memory="2g")
        results: dict[str, float] = {}
        for label, master in (("local[2]", "local[2]"), (f"cluster ({args.workers} workers)", cluster.master_url)):
            slug = label.split()[0].replace("[", "").replace("]", "")
            warm = raw_pipeline(work / f"{slug}-warm", broker.bootstrap, "warm", args.batch)
            timed = [
                raw_pipeline(work / f"{slug}-{i}", broker.bootstrap, "readings", args.batch) for i in range(args.repeat)
            ]
            runs = measure(master, warm, timed)
            for run in runs:
                if run["rows"] != args.records:
                    raise SystemExit(f"{label}: raw table has {run['rows']} rows, expected {args.records}")
            results[label] = max(args.records / run["seconds"] for run in runs)
        table = Table(title=f"raw stage, {args.records:,} records, {args.partitions} partitions, best of {args.repeat}")
        for column in ("mode", "rows/s", "ratio to local[2]"):
            table.add_column(column, justify="right")
        local = next(iter(results.values()))
        for label, rate in results.items():
            table.add_row(label, f"{rate:,.0f}", f"{rate / local:.2f}")
        console.print(table)
    finally:
        stop_cluster(state_dir=cluster_dir)
        stop_broker(state_dir=broker_dir)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
