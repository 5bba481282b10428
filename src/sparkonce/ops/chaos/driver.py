"""The driver program the chaos harness starts, kills and restarts: ``python -m sparkonce.ops.chaos.driver SPEC``.

Runs every stage of the pipeline with the ``availableNow`` trigger (upstream first, each one drains its input),
then the PostgreSQL stage when the spec has one (the bronze table into PostgreSQL through
:class:`sparkonce.sinks.postgres.PostgresSink`, or the naive append); exits 0 once everything is drained. With a
naive kind, the stage it names is replaced by the naive sink (:mod:`sparkonce.ops.chaos.naive`). Crash points are
armed by the environment (:mod:`sparkonce.crash`).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkonce.ops.chaos.spec import DriverSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from sparkonce.pipeline.config import PipelineConfig


def run(spec: DriverSpec) -> None:
    """Run the spec's stages to the end of their input. Raises what a stage raised."""
    from sparkonce.pipeline.config import load_pipeline
    from sparkonce.pipeline.run import run_pipeline
    from sparkonce.spark import local_session

    config = _available_now(load_pipeline(spec.pipeline))
    master = "local[1,4]" if spec.naive == "file-sink-glob" else spec.master
    spark = local_session(
        app_name="sparkonce-chaos", master=master, extra_conf={"spark.ui.showConsoleProgress": "false"}
    )
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
    from sparkonce.pipeline.config import Trigger

    trigger = Trigger("availableNow")
    return dataclasses.replace(config, stages=tuple(dataclasses.replace(s, trigger=trigger) for s in config.stages))


def _await(query: StreamingQuery) -> None:
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"query {query.name} failed: {failure}")


def _start_naive_raw(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    from sparkonce.ops.chaos.naive import NaiveDeltaAppend
    from sparkonce.pipeline.stages import RAW_DDL, ensure_table, raw_frame

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
    from sparkonce.ops.chaos.naive import file_sink_crash_passthrough
    from sparkonce.pipeline.stages import raw_frame

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


def _start_postgres(spark: SparkSession, config: PipelineConfig, spec: DriverSpec) -> StreamingQuery:
    from sparkonce.ops.chaos.naive import NaivePostgresAppend
    from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions

    assert config.bronze is not None and spec.postgres_dsn is not None and spec.postgres_checkpoint is not None
    sink: Any
    if spec.naive == "postgres-append":
        sink = NaivePostgresAppend(spec.postgres_dsn, spec.postgres_table)
    else:
        sink = PostgresSink(
            PostgresSinkOptions(
                dsn=spec.postgres_dsn, table=spec.postgres_table, checkpoint_dir=spec.postgres_checkpoint
            )
        )
    return (
        spark.readStream.format("delta")
        .load(config.bronze.table)
        .writeStream.foreachBatch(sink)
        .queryName(f"{config.name}.postgres")
        .option("checkpointLocation", spec.postgres_checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main() -> None:
    spec = DriverSpec.load(Path(sys.argv[1]))
    run(spec)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
