"""Starting a pipeline's stages: each stage's checkpoint claimed, the tables it reads and writes created, the
load-time checks that need Spark run, and its streaming query started, by its kind (:mod:`sparkonce.pipeline.kinds`,
one module per kind). Runs on the driver.

Every query's checkpoint is claimed first (:mod:`sparkonce.pipeline.owner`); every table is created empty with its
schema before any query starts, so a downstream stage can start before upstream data arrives, and a path holding
something that is not a Delta table fails before any data moves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.table.options import MAX_CATCH_UP_DELAY_OPTION
from sparkonce.pipeline.catch_up import catch_up_delay
from sparkonce.pipeline.kinds import kind_of
from sparkonce.pipeline.model import SOURCE, PipelineConfig, Stage
from sparkonce.pipeline.owner import claim_checkpoint
from sparkonce.pipeline.streams import ensure_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType


def start_stage(spark: SparkSession, config: PipelineConfig, stage: Stage) -> StreamingQuery:
    """Claim the stage's checkpoint, create its tables when missing, and start its streaming query.

    Raises:
        CheckpointError: the checkpoint belongs to another stage or pipeline, or was moved.
        TableNotFoundError: a table path holds something that is not a Delta table.
    """
    owner = claim_checkpoint(config.path, stage.name, stage.checkpoint)
    prepare_tables(spark, config, stage)
    options: dict[str, str] = {}
    if owner.starting_version is not None:
        options["startingVersion"] = str(owner.starting_version)
    if config.input_table(stage) is not None:  # waits while its input's stage catches up (catch_up)
        options[MAX_CATCH_UP_DELAY_OPTION] = catch_up_delay(spark)
    return kind_of(stage).start(spark, config, stage, options)


def waiting_for(config: PipelineConfig, stage: Stage) -> int | None:
    """The input table version a replayed stage waits for before it can start streaming (None: ready).

    After ``replay`` a fresh checkpoint starts from ``starting_version`` (the replayed table version + 1); until
    the input table has that version there is nothing to stream, and Delta refuses a start beyond the latest.
    """
    from sparkonce.pipeline.owner import read_owner

    input_table = config.input_table(stage)
    owner = read_owner(stage.checkpoint)
    if input_table is None or owner is None or owner.starting_version is None:
        return None
    if os.path.exists(os.path.join(stage.checkpoint, "offsets")):
        return None
    latest = int(existing_table(input_table).version())
    return owner.starting_version if latest < owner.starting_version else None


def prepare_tables(spark: SparkSession, config: PipelineConfig, stage: Stage) -> None:
    """Create the tables a stage reads and writes when missing (empty, with their schema).

    Raises:
        PipelineConfigError: a transformation does not resolve or does not apply to its input's schema.
        TableNotFoundError: a table path holds something that is not a Delta table.
    """
    if stage.input != SOURCE:
        upstream = config.stage(stage.input)
        ensure_table(
            upstream.tables[0],
            output_schemas(spark, config, upstream, downstream=True)[upstream.tables[0]],
            partition_by=kind_of(upstream).partition_by(upstream),
        )
    partition_by = kind_of(stage).partition_by(stage)
    for table, schema in output_schemas(spark, config, stage).items():
        ensure_table(table, schema, partition_by=partition_by)


def output_schemas(
    spark: SparkSession, config: PipelineConfig, stage: Stage, *, downstream: bool = False
) -> dict[str, StructType]:
    """The schema of each Delta table the stage creates before it starts (``downstream``: a stage reading its
    first table needs that table to exist)."""
    return kind_of(stage).output_schemas(spark, config, stage, downstream=downstream)


def check_stages(spark: SparkSession, config: PipelineConfig, stages: Sequence[Stage]) -> None:
    """Every load-time check that needs Spark, for ``stages``, before any of them starts (no data moves).

    Raises:
        PipelineConfigError: a transformation of a stage does not resolve or analyse, or a merge stage's keys,
            order columns or clauses do not fit its input's schema.
    """
    for stage in stages:
        kind_of(stage).check(spark, config, stage)


__all__ = ["check_stages", "output_schemas", "prepare_tables", "start_stage", "waiting_for"]
