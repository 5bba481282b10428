"""A fast start: launch to first raw Delta commit of ``sparkonce run`` vs a bare PySpark query started the same way.

Run: ``.venv/bin/python benchmarks/bench_start.py [--repeat 3] [--records 1000] [--part all|launch|breakdown]``.

An embedded Kafka broker is started (and stopped) in a temporary directory and ``--records`` sensor readings are
produced once. Then, alternated, ``--repeat`` times each, every run a fresh Python process in a fresh directory:

* ``bare PySpark``: ``python -c <script>`` building a ``local[2]`` SparkSession with the confs
  :func:`sparkonce.spark.local_session` sets (UI off, 2 shuffle partitions, Python workers on this interpreter),
  without importing sparkonce, and starting ``rate-micro-batch`` (1,000 rows per batch) -> ``parquet`` file sink,
  ``processingTime = 1 second``; the first commit is the file sink's ``_spark_metadata/0``;
* ``sparkonce run``: the ``sparkonce`` CLI (``python -m sparkonce.cli.main run PIPELINE --plain``) on a raw +
  bronze pipeline over the topic (``processingTime = 1 second``); the first commit is the first raw Delta commit
  carrying a ``txn`` (a streaming batch).

Each figure is the time from ``Popen`` to the first poll (every 50 ms) that sees the commit; the process group is
then killed. Prints best and median per kind and the ratio of the bests (target <= 1.5x).

``--part breakdown`` runs one more fresh process that times each step of ``run_pipeline`` itself: Python imports
(the CLI's, then pyspark's), the SparkSession start, ``register``, the broker preflight, the load-time checks,
each stage's start (claim, table creation, query start), and the first raw commit. ``python -X importtime`` of
the CLI module is summarised too (the top modules by cumulative time).

Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(width=140)

BARE = r"""
import os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[2]").appName("bare")
    .config("spark.pyspark.python", sys.executable)
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.driver.memory", "2g")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
out, checkpoint = sys.argv[1], sys.argv[2]
query = (
    spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1000).load()
    .writeStream.format("parquet").option("checkpointLocation", checkpoint)
    .trigger(processingTime="1 second").start(out)
)
query.awaitTermination()
"""

PIPELINE = """name = "start"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
max_offsets_per_trigger = 500

[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
trigger = {{ processingTime = "1 second" }}

[stages.bronze]
table = "tables/bronze"
checkpoint = "checkpoints/bronze"
quarantine = "tables/quarantine"
schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"
required = ["device_id", "reading_time", "value"]
trigger = {{ processingTime = "1 second" }}
"""


def env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([src, environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return environ


def first_raw_commit(table: Path) -> bool:
    """A raw Delta commit from a streaming batch (its log file carries a ``txn`` action)."""
    log = table / "_delta_log"
    if not log.is_dir():
        return False
    return any(p.name.endswith(".json") and '"txn"' in p.read_text(encoding="utf-8") for p in log.iterdir())


def launch(args: list[str], cwd: Path, done: Path, kind: str, *, timeout: float = 300.0) -> float:
    """Seconds from launching ``args`` to the first poll that sees the first commit; the process group is killed."""
    log = (cwd / "out.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=cwd, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while time.monotonic() - started < timeout:
            if done.exists() if kind == "bare" else first_raw_commit(done):
                return time.monotonic() - started
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} exited {proc.returncode}: {(cwd / 'out.log').read_text()[-2000:]}")
            time.sleep(0.05)  # the poll step bounds the measurement's resolution
        raise RuntimeError(f"{kind}: no first commit within {timeout:.0f} s")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def bare_run(root: Path) -> float:
    root.mkdir(parents=True)
    return launch(
        [sys.executable, "-c", BARE, str(root / "out"), str(root / "checkpoint")],
        root,
        root / "out" / "_spark_metadata" / "0",
        "bare",
    )


def sparkonce_run(root: Path, bootstrap: str, topic: str) -> float:
    root.mkdir(parents=True)
    (root / "pipeline.toml").write_text(PIPELINE.format(bootstrap=bootstrap, topic=topic), encoding="utf-8")
    return launch(
        [sys.executable, "-m", "sparkonce.cli.main", "run", "pipeline.toml", "--plain"],
        root,
        root / "tables" / "raw",
        "sparkonce",
    )


BREAKDOWN = r"""
import json, sys, time, threading
marks = []
t0 = time.monotonic()
def mark(what):
    marks.append((what, time.monotonic() - t0))
import sparkonce.cli.main
mark("import sparkonce.cli.main")
import pyspark.sql
mark("import pyspark.sql")
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.run import preflight, select_stages
from sparkonce.pipeline import stages as st
from sparkonce.pipeline.session import use_storage
config = load_pipeline(sys.argv[1])
selected = select_stages(config, None)
mark("import pipeline modules, load pipeline file")
preflight(config, selected)
mark("preflight (broker, topic)")
from sparkonce.spark import local_session
import sparkonce
real_register = sparkonce.register
def timed_register(spark):
    mark("SparkSession started")
    names = real_register(spark)
    mark("register")
    return names
sparkonce.register = timed_register
spark = local_session(app_name="start", master="local[2]")
use_storage(config, spark)
st.check_stages(spark, config, selected)
mark("check_stages")
queries = []
for stage in selected:
    queries.append(st.start_stage(spark, config, stage))
    mark(f"start stage {stage.name}")
from pathlib import Path
log = Path(config.raw.table) / "_delta_log"
while not any('"txn"' in p.read_text() for p in log.glob("*.json")):
    time.sleep(0.02)
mark("first raw commit")
print("MARKS " + json.dumps(marks), flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not queries[0].recentProgress:
    time.sleep(0.05)
for q in queries:
    for p in q.recentProgress[:1]:
        print("FIRST " + json.dumps([q.name, p.numInputRows, p.durationMs]), flush=True)
for q in queries:
    q.stop()
"""


def breakdown(root: Path, bootstrap: str, topic: str) -> tuple[list[tuple[str, float]], list[str]]:
    root.mkdir(parents=True)
    (root / "pipeline.toml").write_text(PIPELINE.format(bootstrap=bootstrap, topic=topic), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-c", BREAKDOWN, "pipeline.toml"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    firsts = []
    for line in out.stdout.splitlines():
        if line.startswith("FIRST "):
            name, rows, durations = json.loads(line[6:])
            phases = ", ".join(f"{k} {v} ms" for k, v in sorted(durations.items(), key=lambda kv: -kv[1]))
            firsts.append(f"{name} batch 0 ({rows} rows): {phases}")
    for line in out.stdout.splitlines():
        if line.startswith("MARKS "):
            return [(what, float(at)) for what, at in json.loads(line[6:])], firsts
    raise RuntimeError(f"breakdown failed: {out.stdout[-2000:]} {out.stderr[-3000:]}")


def import_profile(top: int = 12) -> list[tuple[str, int]]:
    """Modules with the largest cumulative import time (µs) of ``import sparkonce.cli.main``."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import sparkonce.cli.main"],
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        rows.append((name.rstrip(), int(cumulative)))
    total = next((c for n, c in rows if n.strip() == "sparkonce.cli.main"), 0)
    # direct imports of the module: the name column is indented by one space, then two per level
    shown = sorted((r for r in rows if r[0].startswith("   ") and not r[0].startswith("    ")), key=lambda r: -r[1])
    return [("(total) sparkonce.cli.main", total), *[(n.strip(), c) for n, c in shown[:top]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--part", choices=("all", "launch", "breakdown"), default="all")
    args = parser.parse_args()

    from sparkonce_local.services.broker import start_broker, stop_broker
    from sparkonce_local.services.producer import produce_sensor_readings

    load = os.getloadavg()[0]
    console.print(f"load average at start: {load:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="sparkonce-bench-start-") as tmp:
        base = Path(tmp)
        broker = start_broker(state_dir=base / "broker")
        try:
            topic = "readings"
            produce_sensor_readings(broker.bootstrap, topic=topic, count=args.records, partitions=2, seed=1)
            if args.part in ("all", "launch"):
                times: dict[str, list[float]] = {"bare PySpark (rate -> parquet)": [], "sparkonce run": []}
                for i in range(args.repeat):
                    times["bare PySpark (rate -> parquet)"].append(bare_run(base / f"bare-{i}"))
                    times["sparkonce run"].append(sparkonce_run(base / f"run-{i}", broker.bootstrap, topic))
                    console.print(
                        f"run {i}: bare {times['bare PySpark (rate -> parquet)'][-1]:.2f} s, "
                        f"sparkonce {times['sparkonce run'][-1]:.2f} s (load {os.getloadavg()[0]:.2f})"
                    )
                table = Table(title="launch to first commit (fresh Python process each)")
                for col in ("what", "best s", "median s", "runs"):
                    table.add_column(col)
                for what, values in times.items():
                    table.add_row(what, f"{min(values):.2f}", f"{statistics.median(values):.2f}", str(len(values)))
                console.print(table)
                bare, ours = (min(v) for v in times.values())
                console.print(f"sparkonce run / bare PySpark (best of {args.repeat} each): {ours / bare:.2f}x")
            if args.part in ("all", "breakdown"):
                marks, firsts = breakdown(base / "breakdown", broker.bootstrap, topic)
                table = Table(title="run_pipeline's start, step by step (one fresh process)")
                for col in ("step", "at s", "took s"):
                    table.add_column(col)
                previous = 0.0
                for what, at in marks:
                    table.add_row(what, f"{at:.2f}", f"{at - previous:.2f}")
                    previous = at
                console.print(table)
                for line in firsts:  # Spark's own phases of each stage's first batch (query progress)
                    console.print(line, soft_wrap=True)
                table = Table(title="python -X importtime -c 'import sparkonce.cli.main' (cumulative)")
                table.add_column("module")
                table.add_column("ms")
                for name, micros in import_profile():
                    table.add_row(name, f"{micros / 1000:.0f}")
                console.print(table)
        finally:
            stop_broker(state_dir=base / "broker")


if __name__ == "__main__":
    main()
