"""The driver program the chaos harness starts, kills and restarts: ``python -m sparkonce_local.chaos.driver SPEC``.

Runs every stage of the pipeline with the ``availableNow`` trigger (upstream first, each one drains its input),
then the PostgreSQL stage when the spec has one (the bronze table into PostgreSQL through
:class:`sparkonce.sinks.postgres.PostgresSink`, or the naive append); exits 0 once everything is drained. With a
naive kind, the stage it names is replaced by the naive sink (:mod:`sparkonce_local.chaos.naive`). Crash points are
armed by the environment (:mod:`sparkonce.crash`). In soak mode (``DriverSpec.soak_stop``) it runs pass after
pass: ``availableNow`` until every table is made (one such pass succeeded, or every stage's checkpoint holds a
committed batch), then every stage at once on a ``processingTime`` trigger, until the stop file.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkonce_local.chaos.driverlog import failed_pass_line
from sparkonce_local.chaos.reconcile import checkpoint_batches
from sparkonce_local.chaos.spec import DriverSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from sparkonce.pipeline.model import PipelineConfig, Trigger


MAX_FAILED_PASSES = 30
"""Soak mode: failed passes in a row after which the driver gives up (the harness starts a new one)."""


def run(spec: DriverSpec) -> None:
    """Run the spec's stages to the end of their input (in soak mode: pass after pass, until the stop file).

    Raises what a stage raised (soak mode: only what the last pass raised when it cannot start at all).
    """
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.session import use_storage
    from sparkonce.spark import local_session

    config = _available_now(load_pipeline(spec.pipeline))
    master = "local[1,4]" if spec.naive == "file-sink-glob" else spec.master
    spark = local_session(
        app_name="sparkonce-chaos", master=master, extra_conf={"spark.ui.showConsoleProgress": "false"}
    )
    use_storage(config, spark)  # tables on the object store: the pipeline file's [storage] options
    if spec.soak_stop is None:
        _run_pass(spark, config, spec)
        return
    stop = Path(spec.soak_stop)
    passes = failed = 0
    tables_made = False
    while True:
        last = stop.exists()  # the producer stopped before the stop file was written: this pass sees every record
        passes += 1
        # Continuous passes start every stage at once: only once every table a stage reads is made (by an
        # availableNow pass, upstream first; or before, e.g. by the driver before this one: every stage committed a
        # batch). Under a fault every few seconds a pass in sequence can take many minutes to end without one, and
        # the stages downstream, PostgreSQL's last, would make no batch all that time.
        tables_made = tables_made or all(checkpoint_batches(s.checkpoint) > 0 for s in config.stages)
        continuous = tables_made and not last
        started = time.monotonic()
        try:
            if continuous:
                _run_continuous(spark, config, spec, stop)
            else:
                _run_pass(spark, config, spec)
        except Exception as err:  # a fault's doing (a service down, a task out of retries): next pass
            print(failed_pass_line(passes, time.monotonic() - started, _first_line(err)), flush=True)
            for query in spark.streams.active:  # a failed stage can leave the others of its pass running
                query.stop()
            failed += 1
            if failed >= MAX_FAILED_PASSES:
                raise
            time.sleep(min(5.0, 0.2 * failed))  # back off while a service is still coming back
            continue
        failed = 0
        tables_made = True
        kind = "continuous" if continuous else "availableNow"
        print(f"pass {passes} ({kind}) done in {time.monotonic() - started:.1f}s", flush=True)
        if last:
            return


def _run_continuous(spark: SparkSession, config: PipelineConfig, spec: DriverSpec, stop_file: Path) -> None:
    """Every stage at once on a 1-second ``processingTime`` trigger, the PostgreSQL stage too, until the stop
    file appears (the stages then stop between batches) or a stage fails (raised), so a fault can land in any
    stage's batch, not only in the first stage of a sequential pass."""
    from sparkonce.pipeline.model import Trigger
    from sparkonce.pipeline.run import run_pipeline

    trigger = Trigger("processingTime", "1 second")
    stages = tuple(dataclasses.replace(s, trigger=trigger) for s in config.stages)
    stop = threading.Event()
    postgres = _start_postgres(spark, config, spec, trigger=trigger) if spec.postgres_dsn is not None else None

    def watch() -> None:
        while not stop.is_set():
            if stop_file.exists() or (postgres is not None and not postgres.isActive):
                stop.set()
                return
            stop.wait(0.2)

    threading.Thread(target=watch, name="chaos-soak-stop", daemon=True).start()
    try:
        run_pipeline(dataclasses.replace(config, stages=stages), spark=spark, stop=stop, poll_seconds=0.2)
    finally:
        stop.set()
        if postgres is not None:
            if postgres.isActive:
                postgres.stop()
            failure = postgres.exception()
            if failure is not None:
                raise RuntimeError(f"query {postgres.name} failed: {failure}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _run_pass(spark: SparkSession, config: PipelineConfig, spec: DriverSpec) -> None:
    """Every stage once with ``availableNow``, upstream first, then the PostgreSQL stage."""
    from sparkonce.pipeline.run import run_pipeline

    if spec.naive == "file-sink-glob":
        _await(_start_file_sink(spark, config, spec))
        return
    if spec.naive == "delta-append":
        _await(_start_naive_raw(spark, config))
        rest = [s.name for s in config.stages if s.name != "raw"]
        if rest:
            run_pipeline(config, stages=rest, spark=spark, poll_seconds=0.2)
    else:
        run_pipeline(config, spark=spark, poll_seconds=0.2)
    if spec.postgres_dsn is not None:
        _await(_start_postgres(spark, config, spec))


def _available_now(config: PipelineConfig) -> PipelineConfig:
    """The same pipeline with every stage on ``availableNow``, so a run drains the input and ends."""
    from sparkonce.pipeline.model import Trigger

    trigger = Trigger("availableNow")
    return dataclasses.replace(config, stages=tuple(dataclasses.replace(s, trigger=trigger) for s in config.stages))


def _await(query: StreamingQuery) -> None:
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"query {query.name} failed: {failure}")


def _start_naive_raw(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    from sparkonce.pipeline.streams import RAW_DDL, ensure_table, raw_frame
    from sparkonce_local.chaos.naive import NaiveDeltaAppend

    ensure_table(config.raw.table, spark.createDataFrame([], RAW_DDL).schema)
    return (
        raw_frame(spark, config)
        .writeStream.foreachBatch(NaiveDeltaAppend(config.raw.table))
        .queryName(f"{config.name}.raw-naive")
        .option("checkpointLocation", config.raw.checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def _start_file_sink(spark: SparkSession, config: PipelineConfig, spec: DriverSpec) -> StreamingQuery:
    from sparkonce.pipeline.streams import raw_frame
    from sparkonce_local.chaos.naive import file_sink_crash_passthrough

    assert spec.file_sink_dir is not None and spec.file_sink_checkpoint is not None
    frame = raw_frame(spark, config)
    return (
        frame.mapInArrow(file_sink_crash_passthrough, frame.schema)
        .writeStream.format("parquet")
        .queryName(f"{config.name}.raw-files")
        .option("checkpointLocation", spec.file_sink_checkpoint)
        .option("path", spec.file_sink_dir)
        .trigger(availableNow=True)
        .start()
    )


def _start_postgres(
    spark: SparkSession, config: PipelineConfig, spec: DriverSpec, *, trigger: Trigger | None = None
) -> StreamingQuery:
    from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions
    from sparkonce_local.chaos.naive import NaivePostgresAppend

    assert config.bronze is not None and spec.postgres_dsn is not None and spec.postgres_checkpoint is not None
    sink: Any
    if spec.naive == "postgres-append":
        sink = NaivePostgresAppend(spec.postgres_dsn, spec.postgres_table)
    else:
        sink = PostgresSink(
            PostgresSinkOptions(
                dsn=spec.postgres_dsn,
                table=spec.postgres_table,
                checkpoint_dir=spec.postgres_checkpoint,
                commit_protocol=spec.postgres_commit_protocol,
            )
        )
    reader = spark.readStream.format("delta")
    if spec.postgres_max_files is not None:
        reader = reader.option("maxFilesPerTrigger", str(spec.postgres_max_files))
    return (
        reader.load(config.bronze.table)
        .writeStream.foreachBatch(sink)
        .queryName(f"{config.name}.postgres")
        .option("checkpointLocation", spec.postgres_checkpoint)
        .trigger(**(trigger.spark_kwargs() if trigger is not None else {"availableNow": True}))
        .start()
    )


def main() -> None:
    spec = DriverSpec.load(Path(sys.argv[1]))
    run(spec)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
