"""Running a pipeline: its stages as streaming queries on one SparkSession, with progress and a clean stop.

Runs in the driver process. With ``processingTime`` triggers the stages run concurrently until ``stop`` is set
(the CLI sets it on Ctrl-C / SIGTERM); then each query is stopped between two batches (once no trigger is
active), so the batch in flight finishes and is committed. When every selected stage uses ``availableNow``, the
stages run one after the other, upstream first, so each one sees everything its input stage wrote; the run ends
when the last one has drained its input.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sparkonce.errors as errors
from sparkonce.errors import BrokerError, SparkonceError
from sparkonce.pipeline.lag import DeltaLagReader, PartitionLag, delta_lag_or_none, kafka_positions, partition_lags
from sparkonce.pipeline.model import SOURCE, PipelineConfig, Stage
from sparkonce.pipeline.owner import RunLock, lock_run
from sparkonce.pipeline.session import use_catalog, use_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageProgress:
    """One stage's streaming query as last seen."""

    stage: str
    query_name: str
    active: bool
    batch_id: int | None
    """The last batch the query reported progress for."""
    batch_rows: int
    rows_per_second: float
    """Processed rows per second of the last batch."""
    total_rows: int
    """Rows of every batch reported in this run."""
    batches: int
    partition_lag: tuple[PartitionLag, ...] = ()
    """Raw stage: lag per Kafka partition."""
    consumer_group: str | None = None
    """A stage reading Kafka: the consumer group its batches' end offsets are committed to."""
    versions_behind: int | None = None
    """A stage reading a Delta table: input table versions not read yet."""
    bytes_behind: int | None = None
    """A stage reading a Delta table: bytes of the input's data files not read yet."""
    batch_ms_p50: float | None = None
    """Median duration of the stage's batches that read rows in this run (Spark's ``triggerExecution``), ms."""
    batch_ms_p95: float | None = None
    """95th percentile of the same, ms."""


@dataclass(frozen=True)
class RunResult:
    """How a run ended."""

    pipeline: str
    stages: tuple[StageProgress, ...]
    stopped: bool
    """True when the run was asked to stop (signal), False when every query finished by itself."""
    seconds: float


ProgressCallback = Callable[[tuple[StageProgress, ...]], None]


def select_stages(config: PipelineConfig, names: Sequence[str] | None) -> tuple[Stage, ...]:
    """The stages to run, upstream first.

    Raises:
        PipelineConfigError: a name is not a stage of the pipeline.
    """
    if not names:
        return config.stages
    wanted = {config.stage(n).name for n in names}
    return tuple(s for s in config.stages if s.name in wanted)


def preflight(config: PipelineConfig, stages: Sequence[Stage]) -> None:
    """Fail before any data moves: an unreachable broker or a missing topic.

    Raises:
        BrokerError: the broker does not answer, or the topic does not exist.
    """
    if not any(s.input == SOURCE for s in stages):
        return
    from sparkonce.kafka.topics import list_topics

    topics = list_topics(config.source.bootstrap_servers, timeout=10.0)
    if config.source.topic not in topics:
        raise BrokerError(
            f"source.topic: topic {config.source.topic!r} does not exist on {config.source.bootstrap_servers} "
            f"(topics: {sorted(topics)[:10]})"
        )


def run_pipeline(
    config: PipelineConfig,
    *,
    stages: Sequence[str] | None = None,
    spark: SparkSession | None = None,
    master: str | None = None,
    stop: threading.Event | None = None,
    on_progress: ProgressCallback | None = None,
    poll_seconds: float = 1.0,
    stop_timeout: float = 120.0,
) -> RunResult:
    """Run the pipeline's stages (all, or ``stages``) until they finish or ``stop`` is set.

    Raises:
        PipelineConfigError: an unknown stage name, or a transformation that does not resolve or analyse
            (checked for every selected stage before any query starts).
        BrokerError: the broker is unreachable or the topic is missing.
        CheckpointError: a checkpoint is shared, foreign or moved.
        SparkonceError: a stage failed (the error of the stage, e.g. SchemaMismatchError for drift = "fail").
    """
    from sparkonce.pipeline.stages import check_stages

    selected = select_stages(config, stages)
    config.storage_options()  # an unset [storage_env] variable fails before Spark starts
    preflight(config, selected)
    if spark is None:
        from sparkonce.spark import local_session

        spark = local_session(app_name=f"sparkonce-{config.name}", master=master or "local[2]")
    use_storage(config, spark)
    use_catalog(config, spark)
    check_stages(spark, config, selected)
    locks = _lock_stages(config, selected)
    try:
        return _run(config, spark, selected, stop or threading.Event(), on_progress, poll_seconds, stop_timeout)
    finally:
        for held in locks:
            held.release()


def _lock_stages(config: PipelineConfig, stages: Sequence[Stage]) -> list[RunLock]:
    """The run lock of every stage's checkpoint (:func:`~sparkonce.pipeline.owner.lock_run`); a refusal frees
    those already taken.

    Raises:
        CheckpointError: another process runs one of the stages now.
    """
    locks: list[RunLock] = []
    try:
        for stage in stages:
            locks.append(lock_run(config.path, stage.name, stage.checkpoint))
    except BaseException:
        for held in locks:
            held.release()
        raise
    return locks


def _run(
    config: PipelineConfig,
    spark: SparkSession,
    selected: tuple[Stage, ...],
    stop: threading.Event,
    on_progress: ProgressCallback | None,
    poll_seconds: float,
    stop_timeout: float,
) -> RunResult:
    from sparkonce.pipeline.catch_up import reporting
    from sparkonce.pipeline.compaction import ScheduledCompaction
    from sparkonce.pipeline.stages import start_stage, waiting_for

    started = time.monotonic()
    monitor = _Monitor(config, selected)
    compaction = ScheduledCompaction.of(spark, config, selected)
    sequential = all(s.trigger.kind == "availableNow" for s in selected)
    groups: list[tuple[Stage, ...]] = [(s,) for s in selected] if sequential else [selected]
    queries: dict[str, StreamingQuery] = {}
    with reporting(spark, config, selected):
        try:
            for group in groups:
                if stop.is_set():
                    break
                pending = list(group)
                while not stop.is_set():
                    for stage in list(pending):
                        needed = waiting_for(config, stage)
                        if needed is None:
                            queries[stage.name] = start_stage(spark, config, stage)
                            log.info("started stage %s (query id %s)", stage.name, queries[stage.name].id)
                            pending.remove(stage)
                        elif sequential:
                            log.info(
                                "stage %s: nothing to replay on (waits for input table_version %s)", stage.name, needed
                            )
                            pending.remove(stage)
                    running = [queries[s.name] for s in group if s.name in queries]
                    if not pending and not any(q.isActive for q in running):
                        break
                    _check_failed(queries)
                    compaction.poll(queries)
                    monitor.update(queries)
                    if on_progress is not None:
                        on_progress(monitor.snapshot(queries))
                    _wait(stop, [q for q in running if q.isActive] if sequential else [], poll_seconds)
                _check_failed(queries)
                compaction.poll(queries)  # the batches since the last poll (an availableNow query that ended)
            if stop.is_set():
                _stop_between_batches(list(queries.values()), stop_timeout)
                _check_failed(queries)
            compaction.wait()
        except BaseException:
            for query in queries.values():
                if query.isActive:
                    query.stop()
            raise
        monitor.update(queries)
        snapshot = monitor.snapshot(queries)
        if on_progress is not None:
            on_progress(snapshot)
        return RunResult(config.path, snapshot, stop.is_set(), time.monotonic() - started)


def _wait(stop: threading.Event, ending: list[StreamingQuery], seconds: float) -> None:
    """Wait ``seconds``, or less: until ``stop`` is set or, with one ``ending`` query, until that query ends.

    A sequential run's next stage starts as soon as the one before it has drained its input, instead of at the
    next poll. A query that ends with a failure is reported by the caller's next :func:`_check_failed`.
    """
    if len(ending) != 1:
        stop.wait(seconds)
        return
    try:
        ending[0].awaitTermination(seconds)  # type: ignore[arg-type]  # PySpark takes float seconds too
    except Exception:  # the failure is raised, mapped to its stage, by the caller's _check_failed
        pass


def _stop_between_batches(queries: list[StreamingQuery], timeout: float) -> None:
    """Stop each query once no batch is running (the batch in flight finishes and commits first)."""
    deadline = time.monotonic() + timeout
    for query in queries:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.1)
        if query.isActive:
            query.stop()
            log.info("stopped query %s", query.name)


def _check_failed(queries: dict[str, StreamingQuery]) -> None:
    for name, query in queries.items():
        if query.isActive:
            continue
        failure = query.exception()
        if failure is not None:
            raise _stage_error(name, str(failure)) from None


_ERROR = re.compile(r"sparkonce\.errors\.(\w+): (.+)|\b(\w+Error): (.+)")


def _stage_error(stage: str, text: str) -> SparkonceError:
    """Turn a streaming query failure back into the sparkonce error raised in the stage's Python code."""
    for match in _ERROR.finditer(text):
        name = match.group(1) or match.group(3)
        message = match.group(2) or match.group(4)
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, SparkonceError) and cls not in (errors.OptionError,):
            return cls(f"stage {stage}: {message.strip()}")
    first = next((line for line in text.splitlines() if line.strip()), text)
    return SparkonceError(f"stage {stage} failed: {first.strip()[:500]}")


def _progress_marker(data: Mapping[str, Any]) -> tuple[str, int]:
    """Where a progress update stands in its query's run: ISO-8601 trigger start times sort as text, batch ids as
    numbers (as text, batch 10 < batch 9)."""
    return str(data.get("timestamp") or ""), int(data.get("batchId") or 0)


def _new_progress(query: StreamingQuery, seen: tuple[str, int] | None) -> list[dict[str, Any]]:
    """The query's progress updates after ``seen`` (a :func:`_progress_marker`), oldest first. Runs on the driver.

    Spark keeps the last 100 updates of a query; PySpark's ``recentProgress`` converts each of them at each call.
    This reads the newest ones back only to the first already seen (its time and batch id: two py4j calls) and
    converts only the new ones: a poll with nothing new costs a few calls, not a hundred conversions. A query
    without py4j (Spark Connect) is read through ``recentProgress``.
    """
    jquery = getattr(query, "_jsq", None)
    if jquery is None:
        found = [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]
        return [data for data in found if seen is None or _progress_marker(data) > seen]
    updates = jquery.recentProgress()
    new = []
    for index in range(len(updates) - 1, -1, -1):
        update = updates[index]
        marker = _progress_marker({"timestamp": update.timestamp(), "batchId": update.batchId()})
        if seen is not None and marker <= seen:
            break
        new.append(update)
    return [json.loads(update.json()) for update in reversed(new)]


class _Monitor:
    """Collects progress of the queries and the lag behind their inputs. Runs on the driver."""

    def __init__(self, config: PipelineConfig, stages: Sequence[Stage]) -> None:
        self.config = config
        self.stages = stages
        self.totals: dict[str, tuple[int, int, tuple[str, int] | None]] = {}
        """Per stage: rows, batches, and the (trigger start time, batch id) of the last progress counted."""
        self.last: dict[str, dict[str, Any]] = {}
        self.latest_offsets: dict[tuple[str, int], int] = {}
        self.durations: dict[str, collections.deque[float]] = {}
        """Per stage: ``triggerExecution`` ms of its latest batches that read rows."""
        self._last_broker_poll = 0.0
        self._delta_lag: dict[str, DeltaLagReader] = {}
        """Per stage reading a Delta table: its lag reader (caches the bytes added per input table version)."""

    def update(self, queries: dict[str, StreamingQuery]) -> None:
        for name, query in queries.items():
            rows, batches, seen_run = self.totals.get(name, (0, 0, None))
            for data in _new_progress(query, seen_run):
                marker = _progress_marker(data)
                if _batch_rows(data) or name not in self.last:
                    self.last[name] = data
                if _batch_rows(data):
                    took = (data.get("durationMs") or {}).get("triggerExecution")
                    if took is not None:
                        self.durations.setdefault(name, collections.deque(maxlen=_DURATIONS_KEPT)).append(float(took))
                rows += _batch_rows(data)
                batches += 1
                seen_run = marker
            self.totals[name] = (rows, batches, seen_run)
        self._poll_broker()

    def _poll_broker(self) -> None:
        if not any(s.input == SOURCE for s in self.stages) or time.monotonic() - self._last_broker_poll < 2.0:
            return
        self._last_broker_poll = time.monotonic()
        from sparkonce.kafka import broker_offsets
        from sparkonce.kafka.watermarks import list_partitions

        try:
            partitions = list_partitions(self.config.source.bootstrap_servers, self.config.source.topic, timeout_s=3)
            from sparkonce.kafka.offsets import TopicPartition

            ends = broker_offsets(
                self.config.source.bootstrap_servers,
                [TopicPartition(self.config.source.topic, p) for p in partitions],
                timeout_ms=3000,
            )
            self.latest_offsets = {(tp.topic, tp.partition): end for tp, (_, end) in ends.items()}
        except SparkonceError as err:  # lag is display only: keep the last known ends, say why in the log
            log.warning("cannot read broker offsets for the lag display: %s", err)

    def snapshot(self, queries: dict[str, StreamingQuery]) -> tuple[StageProgress, ...]:
        out = []
        for stage in self.stages:
            query = queries.get(stage.name)
            data = self.last.get(stage.name, {})
            rows, batches, _ = self.totals.get(stage.name, (0, 0, None))
            end = _end_offset(data)
            lag: tuple[PartitionLag, ...] = ()
            behind = None
            if stage.input == SOURCE:
                lag = partition_lags(kafka_positions(end), self.latest_offsets)
            else:
                behind = delta_lag_or_none(self._delta_reader(stage), end)
            out.append(
                StageProgress(
                    stage=stage.name,
                    query_name=f"{self.config.name}.{stage.name}",
                    active=bool(query is not None and query.isActive),
                    batch_id=data.get("batchId"),
                    batch_rows=_batch_rows(data),
                    rows_per_second=float(data.get("processedRowsPerSecond") or 0.0),
                    total_rows=rows,
                    batches=batches,
                    partition_lag=lag,
                    consumer_group=self.config.consumer_group(stage.name) if stage.input == SOURCE else None,
                    versions_behind=None if behind is None else behind.versions_behind,
                    bytes_behind=None if behind is None else behind.bytes_behind,
                    batch_ms_p50=_percentile(self.durations.get(stage.name), 0.50),
                    batch_ms_p95=_percentile(self.durations.get(stage.name), 0.95),
                )
            )
        return tuple(out)

    def _delta_reader(self, stage: Stage) -> DeltaLagReader | None:
        table = self.config.input_table(stage)
        if table is None:
            return None
        reader = self._delta_lag.get(stage.name)
        if reader is None:
            try:
                options = self.config.storage_options()
            except SparkonceError:
                return None
            reader = self._delta_lag[stage.name] = DeltaLagReader(table, storage_options=options)
        return reader


_DURATIONS_KEPT = 1000
"""Batch durations kept per stage for the percentiles (the latest ones)."""


def _percentile(values: Iterable[float] | None, q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``; None without any."""
    ordered = sorted(values or ())
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _end_offset(progress: dict[str, Any]) -> Any:
    sources = progress.get("sources") or []
    if not sources:
        return None
    end = sources[0].get("endOffset")
    if isinstance(end, str):
        try:
            return json.loads(end)
        except json.JSONDecodeError:
            return None
    return end


def _batch_rows(progress: dict[str, Any]) -> int:
    """The records a batch read: the raw ingest's observed count (its query's rows are files), else
    ``numInputRows``."""
    observed = (progress.get("observedMetrics") or {}).get("raw") or {}
    if "rows" in observed:
        return int(observed["rows"] or 0)
    return int(progress.get("numInputRows") or 0)


__all__ = [
    "PartitionLag",
    "ProgressCallback",
    "RunResult",
    "StageProgress",
    "preflight",
    "run_pipeline",
    "select_stages",
]
