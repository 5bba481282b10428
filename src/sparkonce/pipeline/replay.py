"""``replay``: rebuild a stage's table from its input table as of a table version or time (recovery by replay).

The input table (raw for bronze, bronze for gold, the ``input`` stage's table for a transform stage) is read as of
the resolved ``table_version`` and run through the stage's *current* logic; the result replaces the target table in
ONE Delta overwrite commit (readers see the old table or the new one, never a mix), written with a fresh
``txnAppId``. The stage's old checkpoint is retired (renamed, never deleted) and a fresh one is claimed, recording
``starting_version = table_version + 1``: the next ``run`` streams the input's later changes on top of the rebuilt
table, under a new query id, so the txn of the old query cannot make it skip anything.

Stop the pipeline before replaying. Runs on the driver; reads and writes run on executors.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sparkonce._types import TableVersion
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.table.options import parse_timestamp
from sparkonce.delta.txn.commit import load_table, table_exists
from sparkonce.errors import OptionError, PipelineConfigError
from sparkonce.pipeline.kinds import kind_of
from sparkonce.pipeline.model import SOURCE, PipelineConfig
from sparkonce.pipeline.owner import claim_checkpoint, new_owner, read_owner, write_owner
from sparkonce.pipeline.session import use_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay will do (printed before acting)."""

    pipeline: str
    stage: str
    input_table: str
    input_table_version: TableVersion
    as_of: str
    targets: tuple[str, ...]
    """Tables replaced (bronze: bronze and quarantine; gold: gold)."""
    checkpoint_dir: str
    retired_checkpoint_dir: str
    app_id: str
    """The txnAppId of the overwrite commits."""
    downstream: tuple[str, ...] = ()
    """Stages reading the rebuilt tables, directly or not: replay them after this one (upstream first), or they keep
    rows derived from the old tables."""


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did."""

    plan: ReplayPlan
    rows: dict[str, int]
    """Rows now in each target table."""
    table_versions: dict[str, int]
    """The Delta overwrite commit of each target table."""


def plan_replay(config: PipelineConfig, stage_name: str, as_of: str) -> ReplayPlan:
    """Resolve the stage, its input table and the table version ``as_of`` names.

    Raises:
        PipelineConfigError: the stage is unknown or is raw (its input is Kafka, not a table).
        OptionError: ``as_of`` is neither a table version nor a timestamp of the input table.
        CheckpointError: the stage's checkpoint belongs to another stage or pipeline, or was moved.
    """
    use_storage(config)
    stage = config.stage(stage_name)
    if not kind_of(stage).replayable(stage) or stage.input == SOURCE:
        raise PipelineConfigError(
            f"stages.{stage_name}: replay rebuilds a stage from its input table; this stage reads Kafka (reset its "
            "checkpoint and table instead: stop the job, clear the output, remove the checkpoint, restart)"
        )
    input_table = config.input_table(stage)
    assert input_table is not None
    table_version = resolve_as_of(input_table, as_of)
    owner = read_owner(stage.checkpoint)
    if owner is not None:
        claim_checkpoint(config.path, stage.name, stage.checkpoint)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    targets = stage.tables
    return ReplayPlan(
        pipeline=config.path,
        stage=stage.name,
        input_table=input_table,
        input_table_version=table_version,
        as_of=as_of,
        targets=targets,
        checkpoint_dir=stage.checkpoint,
        retired_checkpoint_dir=f"{stage.checkpoint}.replaced-{stamp}",
        app_id=f"sparkonce-replay-{uuid.uuid4()}",
        downstream=config.downstream(stage.name),
    )


def resolve_as_of(table: str, as_of: str) -> TableVersion:
    """``as_of`` (a table version, or a timestamp: the last table version committed at or before it).

    Raises:
        OptionError: not a version or timestamp of ``table``.
    """
    delta_table = load_table(table)
    latest = delta_table.version()
    text = as_of.strip()
    if text.isdigit():
        version = int(text)
        if version > latest:
            raise OptionError("--as-of", as_of, f"table version beyond the latest ({latest}) of {table}")
        return TableVersion(version)
    when = parse_timestamp("--as-of", text)
    try:
        delta_table.load_as_version(when)
    except Exception as err:  # delta-rs raises its own error types for a time before the first commit
        raise OptionError("--as-of", as_of, f"no table version of {table} at or before that time ({err})") from err
    return TableVersion(delta_table.version())


def replay_stage(spark: SparkSession, config: PipelineConfig, plan: ReplayPlan) -> ReplayResult:
    """Rebuild the stage's tables as planned, replace them atomically, and give the stage a fresh checkpoint."""
    from sparkonce.pipeline.streams import table_rows

    use_storage(config, spark)
    stage = config.stage(plan.stage)
    source = spark.read.format("delta").option("versionAsOf", str(plan.input_table_version)).load(plan.input_table)
    outputs = kind_of(stage).replay_outputs(spark, config, stage, source)
    versions: dict[str, int] = {}
    for table, frame in outputs:
        partitions = list(existing_table(table).metadata().partition_columns) if table_exists(table) else []
        writer = (
            frame.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .option("txnAppId", plan.app_id)
            .option("txnVersion", "0")
            .option("userMetadata", f"sparkonce replay of stage {plan.stage} as of {plan.as_of}")
        )
        if partitions:
            writer = writer.partitionBy(*partitions)
        writer.save(table)
        versions[table] = int(existing_table(table).version())
        log.info(
            "replay of stage %s: %s replaced at table_version %s (app_id %s, input table_version %s)",
            plan.stage,
            table,
            versions[table],
            plan.app_id,
            plan.input_table_version,
        )
    if os.path.exists(plan.checkpoint_dir):
        os.replace(plan.checkpoint_dir, plan.retired_checkpoint_dir)
    write_owner(new_owner(config.path, stage.name, stage.checkpoint, starting_version=plan.input_table_version + 1))
    return ReplayResult(plan, {t: table_rows(t) for t in plan.targets}, versions)


__all__ = ["ReplayPlan", "ReplayResult", "plan_replay", "replay_stage", "resolve_as_of"]
