"""A 4-stage DAG with a user transform: end-to-end throughput vs each stage alone on the same rows.

Run: ``.venv/bin/python benchmarks/bench_dag.py [--records 100000] [--batch 25000] [--partitions 2]``.

The pipeline (written to a temporary directory with its transform module):

* ``raw``: Kafka -> Delta;
* ``bronze``: the built-in JSON parse with quarantine (1 % of the records are malformed);
* ``enriched``: a user Python transform (``dag_transforms:enrich``: Fahrenheit, the reading's minute, a band
  label) -> Delta;
* ``gold``: a merge stage, the latest enriched row per device.

Measurements, same records, same SparkSession (``local[2]``), after a small warm-up run:

* ``end to end``: all four stages running concurrently (``processingTime = "1 second"``), timed from the start
  until the gold stage has read every enriched row (its queries' reported input rows);
* ``<stage> alone``: each stage with ``availableNow`` on its input pre-filled by the stage before it (one after
  another, fresh tables and checkpoints), timed like ``sparkonce run`` (query start included). A stage's rows are
  the rows it read: raw and bronze every record, enriched and gold the parsed ones.

The ratio column is end-to-end rows/s over the line's rows/s; the end-to-end run can be no faster than its slowest
stage, and all stages share 2 cores. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench_pipeline import Throughput, console, pipeline_text, print_throughput
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.model import PipelineConfig
from sparkonce.pipeline.run import StageProgress, run_pipeline
from sparkonce.spark import local_session
from sparkonce_local.services.broker import start_broker, stop_broker
from sparkonce_local.services.producer import produce_sensor_readings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STAGES = ("raw", "bronze", "enriched", "gold")

TRANSFORMS = '''"""The DAG benchmark's user transform."""

import pyspark.sql.functions as F


def enrich(df):
    return df.select(
        "device_id",
        "reading_time",
        "value",
        (F.col("value") * 9 / 5 + 32).alias("value_f"),
        F.date_trunc("minute", "reading_time").alias("minute"),
        F.when(F.col("value") < 20, "low").when(F.col("value") < 30, "mid").otherwise("high").alias("band"),
    )
'''


def dag_file(directory: Path, bootstrap: str, topic: str, *, batch: int, trigger: str) -> PipelineConfig:
    """Write the 4-stage pipeline and its transform module under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "dag_transforms.py").write_text(TRANSFORMS, encoding="utf-8")
    text = (
        pipeline_text(bootstrap, topic, batch=batch, trigger=trigger)
        + f"""
[stages.enriched]
input = "bronze"
transform = "dag_transforms:enrich"
table = "tables/enriched"
checkpoint = "checkpoints/enriched"
trigger = {trigger}

[stages.gold]
kind = "merge"
input = "enriched"
table = "tables/gold"
checkpoint = "checkpoints/gold"
keys = ["device_id"]
order_by = "reading_time"
trigger = {trigger}
"""
    )
    path = directory / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return load_pipeline(path)


def end_to_end(spark: SparkSession, config: PipelineConfig, parsed: int, *, deadline_s: float) -> Throughput:
    """Every stage concurrently; the time until gold has read ``parsed`` enriched rows."""
    stop = threading.Event()
    failure: list[BaseException] = []
    done = threading.Event()
    finished_at: list[float] = []
    started = time.monotonic()

    def progress(stages: tuple[StageProgress, ...]) -> None:
        gold = next((s for s in stages if s.stage == "gold"), None)
        if gold is not None and gold.total_rows >= parsed and not done.is_set():
            finished_at.append(time.monotonic() - started)
            done.set()

    def run() -> None:
        try:
            run_pipeline(config, spark=spark, stop=stop, on_progress=progress, poll_seconds=0.25)
        except BaseException as err:  # reported by the main thread
            failure.append(err)
        finally:
            done.set()

    worker = threading.Thread(target=run, name="bench-dag")
    worker.start()
    try:
        done.wait(deadline_s)
    finally:
        stop.set()
        worker.join()
    if failure:
        raise failure[0]
    seconds = finished_at[0] if finished_at else float("inf")
    batches = len([p for p in (Path(config.stage("gold").checkpoint) / "commits").iterdir() if p.name.isdigit()])
    return Throughput("end to end (4 stages, concurrent)", parsed, seconds, f"{batches} gold")


def stages_alone(spark: SparkSession, config: PipelineConfig, records: int, parsed: int) -> list[Throughput]:
    """Each stage alone (availableNow) on the input the stage before it left, upstream first."""
    results = []
    for name in STAGES:
        result = run_pipeline(config, stages=[name], spark=spark)
        rows = records if name in ("raw", "bronze") else parsed
        batches = str(result.stages[0].batches)
        results.append(Throughput(f"{name} alone", rows, result.seconds, batches))
    return results


def measure(spark: SparkSession, bootstrap: str, work: Path, args: argparse.Namespace) -> list[Throughput]:
    topic = "bench-dag"
    produced = produce_sensor_readings(
        bootstrap, topic=topic, count=args.records, partitions=args.partitions, malformed_share=0.01, seed=42
    )
    parsed = produced.records - produced.malformed
    console.print(
        f"produced {produced.records:,} records ({produced.malformed:,} malformed) in {produced.seconds:.1f} s"
    )
    produce_sensor_readings(bootstrap, topic="bench-dag-warmup", count=2000, partitions=2, seed=1)
    warm = dag_file(work / "warmup", bootstrap, "bench-dag-warmup", batch=1000, trigger="{ availableNow = true }")
    run_pipeline(warm, spark=spark)
    e2e_config = dag_file(work / "e2e", bootstrap, topic, batch=args.batch, trigger='{ processingTime = "1 second" }')
    e2e = end_to_end(spark, e2e_config, parsed, deadline_s=args.timeout)
    alone_config = dag_file(work / "alone", bootstrap, topic, batch=args.batch, trigger="{ availableNow = true }")
    return [e2e, *stages_alone(spark, alone_config, produced.records, parsed)]


def print_results(results: list[Throughput]) -> None:
    e2e = results[0]
    print_throughput(results, "4-stage DAG (raw -> bronze -> user transform -> merge) vs each stage alone (same run)")
    slowest = min(results[1:], key=lambda r: r.rows_per_second)
    sequential = sum(r.seconds for r in results[1:])
    console.print(
        f"slowest stage alone: {slowest.what} ({slowest.rows_per_second:,.0f} rows/s); end to end "
        f"{e2e.rows_per_second / slowest.rows_per_second:.2f}x of it. The four stages one after another took "
        f"{sequential:.1f} s, concurrently {e2e.seconds:.1f} s."
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=25_000, help="max_offsets_per_trigger")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1200.0, help="deadline of the end-to-end run, seconds")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-dag-"))
    try:
        spark = local_session(app_name="bench-dag", extra_conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        info = start_broker(state_dir=work / "broker")
        try:
            print_results(measure(spark, info.bootstrap, work, args))
        finally:
            stop_broker(state_dir=work / "broker")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
