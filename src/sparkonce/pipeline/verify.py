"""Verify a pipeline's exactly-once bookkeeping, stage by stage. Runs on the driver (no Spark).

For every stage with a checkpoint, each batch the checkpoint committed (``commits/N``) must be recorded once in
every place the stage writes:

* a Delta table: one ``txn`` action with the stage's txn app id and version ``N`` (raw and merge stages: the query
  id; bronze: ``f"{query id}:bronze"`` / ``":quarantine"``; a transform stage: ``f"{query id}:{table name}"``);
* a changes-fed merge stage (``input_mode = "changes"``) also: its table holds its input's rows at the table
  version the newest recorded batch read the change data feed through (:mod:`sparkonce.pipeline.feed_state`);
* a PostgreSQL table: one ledger row ``(f"{query id}:{table}", N)``; in append mode the target also holds exactly
  the rows the ledger says the batches moved (when the stage is the table's only writer).

A batch recorded but not committed is fine (the crash fell between the write and ``commits/N``; the re-run skips
it). A batch committed but not recorded, or recorded twice, is a finding. ``sparkonce verify`` checks a raw table
against Kafka offsets; this checks that every stage after it kept its batches exactly once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from sparkonce.checkpoint.reader import read_checkpoint
from sparkonce.pipeline.feed_state import feed_state_check
from sparkonce.pipeline.kinds import kind_of
from sparkonce.pipeline.model import MergeStage, PipelineConfig
from sparkonce.pipeline.records import TargetCheck
from sparkonce.pipeline.session import use_storage


@dataclass(frozen=True)
class PipelineVerifyReport:
    """Every target of every checked stage."""

    pipeline: str
    targets: tuple[TargetCheck, ...]
    skipped: tuple[str, ...]
    """Stages not checked: no checkpoint metadata yet (never started)."""

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.targets)


def verify_pipeline(config: PipelineConfig, *, stages: tuple[str, ...] | None = None) -> PipelineVerifyReport:
    """Check the stages' (all, or ``stages``) targets against their checkpoints.

    Raises:
        PipelineConfigError: an unknown stage name; the DSN variable of a PostgreSQL stage is unset.
        SinkError: a PostgreSQL stage's database is unreachable.
        DeltaLogError: a Delta log cannot be read.
    """
    use_storage(config)
    selected = config.stages if not stages else tuple(config.stage(n) for n in stages)
    targets: list[TargetCheck] = []
    skipped: list[str] = []
    changes_fed = {m.name: m for m in config.merges if m.input_mode == "changes"}
    for stage in selected:
        state = read_checkpoint(stage.checkpoint, read_sources=False) if os.path.isdir(stage.checkpoint) else None
        if state is None or state.query_id is None:
            skipped.append(stage.name)
            continue
        checks = kind_of(stage).verify(stage, state.query_id, set(state.commit_ids))
        if stage.name in changes_fed:
            checks = [_with_feed_state(config, changes_fed[stage.name], c, state.query_id) for c in checks]
        targets += checks
    return PipelineVerifyReport(config.path, tuple(targets), tuple(skipped))


def _with_feed_state(config: PipelineConfig, stage: MergeStage, check: TargetCheck, query_id: str) -> TargetCheck:
    """Add to a changes-fed stage's table check how its rows stand against the state its input's feed implies."""
    input_table = config.input_table(stage)
    if check.target != stage.table or input_table is None:
        return check
    state = feed_state_check(
        table=stage.table,
        input_table=input_table,
        checkpoint=stage.checkpoint,
        app_id=query_id,
        keys=stage.keys,
        order_by=stage.order_by,
        storage_options=config.storage_options(),
    )
    if state.differences is None:
        return check
    return replace(check, state_differences=state.differences.total, input_table_version=state.input_table_version)


__all__ = ["PipelineVerifyReport", "verify_pipeline"]
