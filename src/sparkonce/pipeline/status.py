"""``sparkonce status``: where each stage of a pipeline stands, running or stopped, without Spark and without
starting anything. Runs in the CLI process (or on the driver).

Per stage: whether a process runs it now (its run lock, :func:`sparkonce.pipeline.owner.run_holder`), its
checkpoint's last planned batch (``offsets/N``) and last committed batch (``commits/N``, and when that file was
written), and its lag behind its input as of the last committed batch: Kafka records behind per partition (the
broker's end offsets minus the batch's end offsets) or Delta input table versions and bytes behind (the table's
latest table version vs the batch's end offset).

What is wrong is a finding, never an exception: a batch planned but never committed while the stage is stopped, an
unreadable checkpoint file, a checkpoint owned by another pipeline or moved, an unreachable broker, records the
topic's retention deleted before the stage read them, an input table that cannot be read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sparkonce.errors import SparkonceError
from sparkonce.pipeline.kinds.base import OutputFacts
from sparkonce.pipeline.lag import DeltaLag, DeltaLagReader, PartitionLag, kafka_positions, partition_lags
from sparkonce.pipeline.model import SOURCE, PipelineConfig, Stage
from sparkonce.storage import table_location

STATUS_SCHEMA_VERSION = 1
"""The ``schema_version`` of ``sparkonce status --json``; raised when a field changes meaning or goes away."""

StageState = Literal["running", "stopped", "never started"]


@dataclass(frozen=True)
class StageStatus:
    """One stage: its run, its checkpoint's batches and its lag."""

    stage: str
    kind: str
    input: str
    """``"source"`` (the Kafka topic) or the name of the stage whose table it reads."""
    checkpoint_dir: str
    state: StageState
    run_pid: int | None
    """The process running it now (``state`` running), as its run lock records it."""
    run_host: str | None
    run_started_at: str | None
    last_planned: int | None
    """The newest batch id with an ``offsets/N`` file."""
    last_committed: int | None
    """The newest batch id with a ``commits/N`` file."""
    last_commit_at: datetime | None
    """When ``commits/<last_committed>`` was written (its modification time, UTC)."""
    partition_lag: tuple[PartitionLag, ...]
    """A stage reading the Kafka source: records behind per partition."""
    delta_lag: DeltaLag | None
    """A stage reading a Delta table: input table versions and bytes behind (None before its first batch)."""
    outputs: tuple[OutputFacts, ...]
    """Where each place the stage writes stands (its kind's :meth:`~sparkonce.pipeline.kinds.base.Kind.describe`;
    none before the stage's first run)."""
    findings: tuple[str, ...]

    @property
    def records_behind(self) -> int | None:
        """Kafka records behind over every partition (None when a partition's end is unknown or no partition)."""
        lags = [p.lag for p in self.partition_lag]
        if not lags or any(x is None for x in lags):
            return None
        return sum(x for x in lags if x is not None)


@dataclass(frozen=True)
class PipelineStatus:
    """Every stage of a pipeline, and what is wrong."""

    pipeline: str
    """The definition file."""
    name: str
    running: bool
    """Whether any stage runs now."""
    stages: tuple[StageStatus, ...]
    findings: tuple[str, ...]
    """What is wrong beyond one stage (the broker is unreachable)."""

    @property
    def ok(self) -> bool:
        return not self.findings and not any(s.findings for s in self.stages)


def pipeline_status(
    config: PipelineConfig, *, stages: tuple[str, ...] | None = None, broker_timeout_s: float = 10.0
) -> PipelineStatus:
    """Where each stage (all, or ``stages``) of the pipeline stands, with its lag. Reads checkpoints, the Delta
    logs of input tables and the broker's offsets; starts nothing.

    Raises:
        PipelineConfigError: a name in ``stages`` is not a stage of the pipeline.
    """
    from sparkonce.pipeline.run import select_stages

    selected = select_stages(config, stages)
    findings: list[str] = []
    latest: dict[tuple[str, int], int] = {}
    earliest: dict[tuple[str, int], int] = {}
    if any(s.input == SOURCE for s in selected):
        try:
            earliest, latest = _broker_offsets(config, broker_timeout_s)
        except SparkonceError as err:
            findings.append(f"Kafka lag unknown: {err}")
    try:
        storage_options: dict[str, str] | None = config.storage_options()
    except SparkonceError as err:
        storage_options = None
        findings.append(f"Delta lag unknown: {err}")
    out = tuple(_stage_status(config, s, latest, earliest, storage_options) for s in selected)
    return PipelineStatus(
        pipeline=config.path,
        name=config.name,
        running=any(s.state == "running" for s in out),
        stages=out,
        findings=tuple(findings),
    )


def _broker_offsets(
    config: PipelineConfig, timeout_s: float
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """(earliest, latest) offset per partition of the source topic.

    Raises:
        BrokerError: the broker is unreachable or the topic does not exist.
        MissingExtraError: the Kafka client is not installed.
    """
    from sparkonce.extras import require

    require("kafka", "the Kafka lag of sparkonce status")
    from sparkonce.errors import BrokerError
    from sparkonce.kafka.offsets import TopicPartition
    from sparkonce.kafka.planner import broker_offsets
    from sparkonce.kafka.topics import list_topics

    source = config.source
    topics = list_topics(source.bootstrap_servers, timeout=timeout_s)  # librdkafka's own logging off
    if source.topic not in topics:
        raise BrokerError(f"topic {source.topic!r} does not exist on {source.bootstrap_servers}")
    partitions = range(topics[source.topic])
    found = broker_offsets(
        source.bootstrap_servers,
        [TopicPartition(source.topic, p) for p in partitions],
        timeout_ms=int(timeout_s * 1000),
    )
    earliest = {(tp.topic, tp.partition): int(first) for tp, (first, _) in found.items()}
    latest = {(tp.topic, tp.partition): int(end) for tp, (_, end) in found.items()}
    return earliest, latest


def _stage_status(
    config: PipelineConfig,
    stage: Stage,
    latest: dict[tuple[str, int], int],
    earliest: dict[tuple[str, int], int],
    storage_options: dict[str, str] | None,
) -> StageStatus:
    from sparkonce.checkpoint.reader import read_checkpoint
    from sparkonce.pipeline.owner import run_holder

    findings: list[str] = []
    checkpoint_dir = os.path.abspath(stage.checkpoint)
    holder = run_holder(checkpoint_dir)
    findings.extend(_owner_findings(config, stage, checkpoint_dir))
    last_planned = last_committed = None
    last_commit_at = None
    end: Any = None
    outputs: tuple[OutputFacts, ...] = ()
    if os.path.isdir(checkpoint_dir):
        state = read_checkpoint(checkpoint_dir, read_sources=False, newest_batches=3)
        last_planned, last_committed = state.last_planned, state.last_committed
        findings.extend(f"checkpoint file {p.path}: {p.problem}" for p in state.problems)
        findings.extend(_recorded_table_findings(stage, checkpoint_dir))
        if last_committed is not None:
            last_commit_at = _mtime(os.path.join(checkpoint_dir, "commits", str(last_committed)))
            offsets = state.offsets.get(last_committed)
            if offsets is not None and offsets.sources:
                end = offsets.source_offset(sorted(offsets.sources)[0])
        if state.query_id is not None and storage_options is not None:
            from sparkonce.pipeline.kinds import kind_of

            try:
                outputs = tuple(kind_of(stage).describe(stage, state.query_id, storage_options))
            except SparkonceError as err:
                findings.append(f"its output tables cannot be read: {err}")
    started = last_planned is not None or last_committed is not None
    stage_state: StageState = "running" if holder is not None else "stopped" if started else "never started"
    if holder is None and last_planned is not None and (last_committed is None or last_planned > last_committed):
        findings.append(
            f"batch {last_planned} was planned but never committed and the stage is stopped: the last run ended "
            "in the middle of it (killed or failed); the next run re-runs it"
        )
    partition_lag: tuple[PartitionLag, ...] = ()
    delta_lag: DeltaLag | None = None
    if stage.input == SOURCE:
        positions = kafka_positions(end)
        partition_lag = partition_lags(positions, latest)
        for p in partition_lag:
            first = earliest.get((p.topic, p.partition))
            if p.position is not None and first is not None and p.position < first:
                findings.append(
                    f"{p.topic} partition {p.partition}: offsets {p.position}..{first - 1} were deleted by the "
                    "topic's retention before the stage read them (data loss)"
                )
            if p.position is not None and p.latest is not None and p.position > p.latest:
                findings.append(
                    f"{p.topic} partition {p.partition}: the checkpoint is at offset {p.position}, beyond the "
                    f"broker's end offset {p.latest} (was the topic deleted and recreated?)"
                )
    elif end is not None and storage_options is not None:
        table = config.input_table(stage)
        if table is not None:
            try:
                delta_lag = DeltaLagReader(table, storage_options=storage_options).lag(end)
            except SparkonceError as err:
                findings.append(f"input table {table}: lag unknown: {err}")
    return StageStatus(
        stage=stage.name,
        kind=stage.kind,
        input=stage.input,
        checkpoint_dir=checkpoint_dir,
        state=stage_state,
        run_pid=None if holder is None else holder.pid,
        run_host=None if holder is None else holder.host,
        run_started_at=None if holder is None else holder.started_at,
        last_planned=last_planned,
        last_committed=last_committed,
        last_commit_at=last_commit_at,
        partition_lag=partition_lag,
        delta_lag=delta_lag,
        outputs=outputs,
        findings=tuple(findings),
    )


def _recorded_table_findings(stage: Stage, checkpoint_dir: str) -> list[str]:
    """What the checkpoint's record of its tables (``_sparkonce_tables/``) says against the pipeline file: a sink
    the stage no longer writes means the checkpoint's batches went to another table (the file was changed under a
    running pipeline, or the checkpoint belongs elsewhere), so its txns are not in the table the stage writes now."""
    from sparkonce.checkpoint.tables import read_recorded_tables

    recorded, problems = read_recorded_tables(checkpoint_dir)
    findings = [f"the record of its tables cannot be read: {p}" for p in problems]
    writes = {table_location(t).uri for t in stage.tables}
    for other in sorted(t.location for t in recorded if t.role == "sink" and t.is_delta and t.location not in writes):
        findings.append(
            f"its checkpoint records batches written to {other}, a table the stage does not write now "
            f"({', '.join(sorted(writes)) or 'no Delta table'}): the new table lacks them and holds no txn for them "
            "(replay the stage, or restore the pipeline file's table)"
        )
    return findings


def _owner_findings(config: PipelineConfig, stage: Stage, checkpoint_dir: str) -> list[str]:
    """What is wrong with the checkpoint's owner record (another pipeline's or stage's, moved, unreadable)."""
    from sparkonce.pipeline.owner import read_owner

    try:
        owner = read_owner(checkpoint_dir)
    except SparkonceError as err:
        return [str(err)]
    if owner is None:
        return []
    if os.path.abspath(owner.checkpoint_dir) != checkpoint_dir:
        return [f"checkpoint_dir {checkpoint_dir} was created at {owner.checkpoint_dir}: moved or copied"]
    if owner.pipeline != config.path or owner.stage != stage.name:
        return [f"checkpoint_dir {checkpoint_dir} belongs to stage {owner.stage!r} of pipeline {owner.pipeline}"]
    return []


def _mtime(path: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime, UTC)
    except OSError:
        return None


__all__ = ["STATUS_SCHEMA_VERSION", "PipelineStatus", "StageState", "StageStatus", "pipeline_status"]
