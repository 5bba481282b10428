"""The pipeline Kafka -> raw Delta -> bronze Delta on sparkonce and on delta-spark with Spark's Kafka connector:
the same records, the same broker, in one run, alternated.

Run: ``bash scripts/setup_delta_oracle.sh`` once (makes ``.venv-delta``: PySpark 4.2 and delta-spark 4.4's jars;
``scripts/setup.sh`` resolved Spark's Kafka connector), then ``.venv/bin/python
benchmarks/bench_pipeline_vs_delta_spark.py [--records 200000] [--batch 50000] [--partitions 2] [--repeat 3]
[--trigger-interval "1 second"] [--part all|processing-time|available-now] [--timeout 600]``.

An embedded Apache Kafka broker is started (and stopped) in a temporary directory; ``--records`` sensor readings
(1 % malformed) are produced once to one topic, which every run reads from ``earliest``. The two systems:

* **sparkonce**: ``run_pipeline`` in this process (PySpark 4.3, ``local_session``) on a raw + bronze pipeline
  file (``bench_pipeline.pipeline_text``): ``sparkonce.kafka`` -> sparkonce's Delta sink, and the bronze stage
  (Delta stream -> parse -> bronze and quarantine, one fan-out pass, one txn per table and batch);
* **delta-spark**: the same topology written as a user writes it without sparkonce
  (``benchmarks/delta_spark_pipeline.py``): Spark's ``kafka`` source (``spark-sql-kafka-0-10`` 4.2.0) ->
  delta-spark's streaming sink, and delta-spark's Delta stream -> ``foreachBatch`` parsing with the same
  expressions and quarantine reasons, the batch persisted and appended to bronze and quarantine with
  ``txnAppId``/``txnVersion``. It runs in the delta-spark worker (``delta_spark_worker.py`` under ``.venv-delta``,
  PySpark 4.2, with Delta's jars and the connector's), a second JVM configured as ``local_session`` is
  (``local[2]``, 2 shuffle partitions, 2 GB driver).

Both read the pipeline file's options: the Kafka options of ``[source]`` (``maxOffsetsPerTrigger`` = ``--batch``),
the bronze schema and required fields, the trigger. Each round runs, per variant, sparkonce then delta-spark (the
order flips every round), each in fresh tables and checkpoints:

* **processingTime** (``--trigger-interval``, default 1 s): raw and bronze running concurrently; timed from the
  start until bronze + quarantine hold every record (and, from the same runs, until raw held them). Both systems'
  tables are polled by this process in the same way (the files' ``numRecords`` stats, every 0.25 s);
* **availableNow**: each stage alone, one after the other, as ``sparkonce run`` runs availableNow stages: Kafka ->
  raw, then raw -> bronze + quarantine; each timed from its start (sparkonce: the ``run_pipeline`` call; delta-spark:
  the request to the worker, whose no-op round trip is about a millisecond) to its end.

After every run its tables are checked (by sparkonce's session): raw and bronze + quarantine each hold every record
once (count = distinct (partition, offset) = records produced), quarantine holds the malformed records, and its
rows per reason are the same in every run of both systems. A run that fails the check stops the benchmark. One
warm-up run (availableNow, 2,000 records) per system comes first. Prints the best of ``--repeat`` rounds per
measurement, rows/s, and the ratio sparkonce rows/s / delta-spark rows/s (above 1: sparkonce is faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.table import Table

from bench_pipeline import Throughput, committed_batches, end_to_end, pipeline_file, wait_for_records, warm_up
from bench_vs_delta_spark import REPO, DeltaSpark
from sparkonce.pipeline.model import PipelineConfig
from sparkonce.pipeline.run import run_pipeline
from sparkonce.spark import local_session
from sparkonce_local.services.broker import start_broker, stop_broker
from sparkonce_local.services.process import log_tail
from sparkonce_local.services.producer import produce_sensor_readings
from sparkonce_local.services.spark_kafka import connector_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Side = Literal["sparkonce", "delta-spark"]
SIDES: tuple[Side, Side] = ("sparkonce", "delta-spark")
TOPIC = "bench-readings"
E2E = "end to end: raw + bronze concurrent"
E2E_RAW = "  same runs: raw held every record"
RAW_ALONE = "availableNow: Kafka -> raw"
BRONZE_ALONE = "availableNow: raw -> bronze + quarantine"
BOTH_ALONE = "availableNow: raw, then bronze"

console = Console(width=160)


# -- delta-spark's side -------------------------------------------------------------------------------------------


def delta_spark_spec(config: PipelineConfig, app_id: str) -> dict[str, Any]:
    """The pipeline file's tables, checkpoints, Kafka options, bronze schema and trigger, as the worker's request."""
    bronze = config.bronze
    assert bronze is not None
    return {
        "kafka": config.source.spark_options(),
        "raw": config.raw.table,
        "raw_checkpoint": config.raw.checkpoint,
        "bronze": bronze.table,
        "quarantine": bronze.quarantine,
        "bronze_checkpoint": bronze.checkpoint,
        "schema": bronze.schema,
        "required": list(bronze.required),
        "app_id": app_id,
        "trigger": config.raw.trigger.spark_kwargs(),
    }


def delta_spark_end_to_end(delta: DeltaSpark, config: PipelineConfig, records: int, *, deadline_s: float) -> Throughput:
    """delta-spark's raw and bronze queries running concurrently, polled as :func:`bench_pipeline.end_to_end` polls
    sparkonce's."""
    bronze = config.bronze
    assert bronze is not None
    started = time.monotonic()
    delta.request("pipeline_start", **delta_spark_spec(config, app_id="bench-bronze"))
    try:
        raw_seconds, seconds = wait_for_records(
            config.raw.table,
            [bronze.table, bronze.quarantine],
            records,
            started=started,
            deadline_s=deadline_s,
            running=lambda: bool(delta.request("pipeline_running")[1]),
        )
    finally:
        delta.request("pipeline_stop")
    return Throughput(E2E, records, seconds, batches(config), raw_seconds)


def batches(config: PipelineConfig) -> str:
    """The batches each stage's checkpoint committed."""
    assert config.bronze is not None
    return f"{committed_batches(config.raw.checkpoint)} raw, {committed_batches(config.bronze.checkpoint)} bronze"


# -- one run of each variant --------------------------------------------------------------------------------------


def stages_alone(run_stage: Callable[[str], object], config: PipelineConfig, records: int) -> list[Throughput]:
    """The raw stage, then the bronze stage, each availableNow and timed alone; and the two together."""
    assert config.bronze is not None
    seconds: dict[str, float] = {}
    for stage in ("raw", "bronze"):
        started = time.monotonic()
        run_stage(stage)
        seconds[stage] = time.monotonic() - started
    return [
        Throughput(RAW_ALONE, records, seconds["raw"], str(committed_batches(config.raw.checkpoint))),
        Throughput(BRONZE_ALONE, records, seconds["bronze"], str(committed_batches(config.bronze.checkpoint))),
        Throughput(BOTH_ALONE, records, seconds["raw"] + seconds["bronze"], batches(config)),
    ]


def run_once(
    side: Side,
    variant: str,
    spark: SparkSession,
    delta: DeltaSpark,
    config: PipelineConfig,
    records: int,
    *,
    deadline_s: float,
) -> list[Throughput]:
    """One run of ``variant`` (``processing-time`` or ``available-now``) on ``side``, in ``config``'s tables."""
    if variant == "processing-time":
        if side == "sparkonce":
            return [dataclasses.replace(end_to_end(spark, config, records, deadline_s=deadline_s), what=E2E)]
        return [delta_spark_end_to_end(delta, config, records, deadline_s=deadline_s)]
    if side == "sparkonce":
        return stages_alone(lambda stage: run_pipeline(config, stages=[stage], spark=spark), config, records)
    spec = delta_spark_spec(config, app_id="bench-bronze")
    return stages_alone(lambda stage: delta.request("pipeline_stage", stage=stage, **spec), config, records)


def check_run(spark: SparkSession, config: PipelineConfig, records: int, malformed: int) -> dict[str, int]:
    """Raw and bronze + quarantine each hold every record exactly once, quarantine the ``malformed`` ones.

    Returns:
        Quarantined rows per reason.

    Raises:
        RuntimeError: naming what does not hold.
    """
    import pyspark.sql.functions as F

    bronze = config.bronze
    assert bronze is not None

    def once(frame: Any) -> tuple[int, int]:
        row = frame.agg(F.count(F.lit(1)), F.count_distinct("p", "o")).first()
        return int(row[0]), int(row[1])

    load = spark.read.format("delta").load
    quarantine = load(bronze.quarantine)
    raw = once(load(config.raw.table).select(F.col("partition").alias("p"), F.col("offset").alias("o")))
    landed = once(
        load(bronze.table)
        .select(F.col("_partition").alias("p"), F.col("_offset").alias("o"))
        .unionByName(quarantine.select(F.col("partition").alias("p"), F.col("offset").alias("o")))
    )
    reasons = {str(row["reason"]): int(row["count"]) for row in quarantine.groupBy("reason").count().collect()}
    problems = []
    if raw != (records, records):
        problems.append(f"raw holds {raw[0]:,} rows with {raw[1]:,} distinct offsets")
    if landed != (records, records):
        problems.append(f"bronze + quarantine hold {landed[0]:,} rows with {landed[1]:,} distinct offsets")
    if sum(reasons.values()) != malformed:
        problems.append(f"quarantine holds {sum(reasons.values()):,} rows")
    if problems:
        raise RuntimeError(
            f"{config.path}: {'; '.join(problems)}; expected {records:,} records, {malformed:,} malformed"
        )
    return reasons


# -- the run ------------------------------------------------------------------------------------------------------


def bench(
    spark: SparkSession, delta: DeltaSpark, bootstrap: str, work: Path, args: argparse.Namespace
) -> dict[tuple[str, Side], list[Throughput]]:
    """Every round's measurements, by (measurement, side)."""
    produced = produce_sensor_readings(
        bootstrap, topic=TOPIC, count=args.records, partitions=args.partitions, malformed_share=0.01, seed=42
    )
    console.print(
        f"produced {produced.records:,} records ({produced.malformed:,} malformed) in {produced.seconds:.1f} s"
    )
    warm_up(spark, bootstrap, work)
    warm = pipeline_file(
        work / "warm-up-delta-spark", bootstrap, "bench-warmup", batch=1000, trigger="{ availableNow = true }"
    )
    run_once("delta-spark", "available-now", spark, delta, warm, 2000, deadline_s=args.timeout)
    variants = ["processing-time", "available-now"] if args.part == "all" else [args.part]
    triggers = {
        "processing-time": f'{{ processingTime = "{args.trigger_interval}" }}',
        "available-now": "{ availableNow = true }",
    }
    found: dict[tuple[str, Side], list[Throughput]] = {}
    reasons: dict[str, int] | None = None
    for round_ in range(args.repeat):
        order = SIDES if round_ % 2 == 0 else SIDES[::-1]
        for variant in variants:
            for side in order:
                directory = work / f"{side}-{variant}-{round_}"
                config = pipeline_file(directory, bootstrap, TOPIC, batch=args.batch, trigger=triggers[variant])
                results = run_once(side, variant, spark, delta, config, produced.records, deadline_s=args.timeout)
                seen = check_run(spark, config, produced.records, produced.malformed)
                if reasons is None:
                    reasons = seen
                elif seen != reasons:
                    raise RuntimeError(f"{side} {variant}: quarantine reasons {seen}, not {reasons} as before")
                for result in results:
                    found.setdefault((result.what, side), []).append(result)
                console.print(
                    f"round {round_ + 1}: {side:<11} {variant:<15} "
                    + ", ".join(f"{r.what.split(': ')[-1]} {r.seconds:.2f} s" for r in results)
                )
                shutil.rmtree(directory, ignore_errors=True)
    console.print(f"quarantine reasons (every run): {reasons}")
    return found


def print_results(found: dict[tuple[str, Side], list[Throughput]], args: argparse.Namespace, loads: str) -> None:
    records = next(iter(found.values()))[0].rows
    table = Table(
        title=(
            f"Kafka -> raw -> bronze, {records:,} records, maxOffsetsPerTrigger {args.batch:,}, {args.partitions} "
            f"partitions, best of {args.repeat}; ratio = sparkonce rows/s / delta-spark rows/s (above 1: sparkonce "
            f"faster); load average {loads}"
        )
    )
    for column in ("measurement", "sparkonce s", "delta-spark s", "sparkonce rows/s", "delta-spark rows/s", "ratio"):
        table.add_column(column, justify="left" if column == "measurement" else "right")
    table.add_column("batches (sparkonce; delta-spark)")

    def row(name: str, best: dict[Side, Throughput], seconds: Callable[[Throughput], float]) -> None:
        ours, theirs = seconds(best["sparkonce"]), seconds(best["delta-spark"])
        table.add_row(
            name,
            f"{ours:.2f}",
            f"{theirs:.2f}",
            f"{records / ours:,.0f}",
            f"{records / theirs:,.0f}",
            f"{theirs / ours:.2f}x",
            f"{best['sparkonce'].batches}; {best['delta-spark'].batches}",
        )

    for name in (E2E, RAW_ALONE, BRONZE_ALONE, BOTH_ALONE):
        if (name, "sparkonce") not in found:
            continue
        best = {side: min(found[(name, side)], key=lambda t: t.seconds) for side in SIDES}
        label = f"{name}, processingTime {args.trigger_interval}" if name == E2E else name
        row(label, best, lambda t: t.seconds)
        if name == E2E:
            row(E2E_RAW, best, lambda t: t.raw_seconds)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records produced (1 %% malformed)")
    parser.add_argument("--batch", type=int, default=50_000, help="maxOffsetsPerTrigger of the raw stage")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the topic")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (the best of each measurement is printed)")
    parser.add_argument("--trigger-interval", default="1 second", help="processingTime of the end-to-end runs")
    parser.add_argument("--part", choices=("all", "processing-time", "available-now"), default="all")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an end-to-end run may take")
    parser.add_argument("--delta-venv", type=Path, default=REPO / ".venv-delta")
    args = parser.parse_args()
    if not (args.delta_venv / "bin" / "python").exists():
        raise SystemExit(f"no delta-spark virtualenv at {args.delta_venv}: run scripts/setup_delta_oracle.sh")
    kafka_jars = connector_jars()
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-vs-delta-"))
    broker_dir = work / "broker"
    worker_log = work / "delta-spark-worker.log"
    try:
        spark = local_session(app_name="bench-pipeline-vs-delta-spark")
        spark.sparkContext.setLogLevel("ERROR")
        info = start_broker(state_dir=broker_dir)
        delta: DeltaSpark | None = None
        try:
            delta = DeltaSpark(args.delta_venv, extra_jars=kafka_jars, log=worker_log)
            console.print(f"delta-spark on Spark {delta.version} vs sparkonce on PySpark {spark.version}")
            found = bench(spark, delta, info.bootstrap, work, args)
        except BaseException:
            console.print(f"the delta-spark worker's log, last lines:\n{log_tail(worker_log)}")
            raise
        finally:
            if delta is not None:
                delta.close()
            stop_broker(state_dir=broker_dir)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_results(found, args, f"{load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    console.print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
