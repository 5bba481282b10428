"""Scheduled compaction of a pipeline's tables while its streams run (a stage's ``optimize`` table).

``sparkonce run`` polls each running query; when a stage with ``optimize = { every_batches = N }`` has completed
another ``N`` micro-batches (its batch id crossed a multiple of ``N``), its Delta tables are compacted
(:func:`sparkonce.delta.ops.optimize.compact`: OPTIMIZE, with ``zorder_by`` ``OPTIMIZE ... ZORDER BY``) in a thread of
the driver, with Spark tasks rewriting the files, while the stream goes on committing: an append and a compaction
never conflict, and downstream streams skip the OPTIMIZE commits (``dataChange=false``). A compaction that loses
to a concurrent DELETE/MERGE of a file it compacted (:class:`~sparkonce.errors.CommitConflictError`), or that
gives up after losing the commit race too often (:class:`~sparkonce.errors.CommitRetriesExceededError`), is logged
and tried again at the next schedule; any other failure fails the run, naming the stage. Runs on the driver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkonce.errors import CommitConflictError, CommitRetriesExceededError, SparkonceError
from sparkonce.pipeline.model import CompactionSchedule, PipelineConfig, Stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def due(schedule: CompactionSchedule, last_batch: int, batch_id: int) -> bool:
    """True when the stage's batch id went from ``last_batch`` (when it was last compacted, or seen first) to
    ``batch_id`` across a multiple of ``every_batches``: after batches ``N-1``, ``2N-1``, ... (batch ids count from
    0, so after every ``N`` batches of the query, also across restarts)."""
    return (batch_id + 1) // schedule.every_batches > (last_batch + 1) // schedule.every_batches


@dataclass
class _Running:
    last_batch: int
    thread: threading.Thread | None = None
    failure: BaseException | None = None
    compactions: int = 0


@dataclass
class ScheduledCompaction:
    """The scheduled compactions of a run's stages. Runs on the driver."""

    spark: SparkSession
    config: PipelineConfig
    stages: Mapping[str, Stage]
    _state: dict[str, _Running] = field(default_factory=dict)

    @classmethod
    def of(cls, spark: SparkSession, config: PipelineConfig, stages: tuple[Stage, ...]) -> ScheduledCompaction:
        return cls(spark, config, {s.name: s for s in stages})

    def poll(self, queries: Mapping[str, StreamingQuery]) -> None:
        """Start the compactions that are due (one at a time per stage).

        Raises:
            SparkonceError: a compaction failed other than by a conflict (naming the stage).
        """
        for schedule in self.config.compaction:
            stage, query = self.stages.get(schedule.stage), queries.get(schedule.stage)
            if stage is None or query is None:
                continue
            progress = query.lastProgress
            if not progress or progress.get("batchId") is None:
                continue
            batch_id = int(progress["batchId"])
            state = self._state.setdefault(schedule.stage, _Running(last_batch=batch_id - 1))
            self._raise_failure(schedule.stage, state)
            if state.thread is not None and state.thread.is_alive():
                continue
            if due(schedule, state.last_batch, batch_id):
                state.last_batch = batch_id
                state.thread = threading.Thread(
                    target=self._compact,
                    args=(schedule, stage, state),
                    name=f"sparkonce-optimize-{schedule.stage}",
                    daemon=True,
                )
                state.thread.start()

    def wait(self) -> None:
        """Wait for the compactions running now.

        Raises:
            SparkonceError: one failed other than by a conflict.
        """
        for name, state in self._state.items():
            if state.thread is not None:
                state.thread.join()
            self._raise_failure(name, state)

    def compactions(self, stage: str) -> int:
        """How many compactions of ``stage`` committed in this run."""
        state = self._state.get(stage)
        return state.compactions if state is not None else 0

    def _compact(self, schedule: CompactionSchedule, stage: Stage, state: _Running) -> None:
        from sparkonce.delta.ops.optimize import compact
        from sparkonce.storage import table_location

        try:
            for table in stage.tables:
                location = table_location(table, storage_options=self.config.storage_options())
                result = compact(self.spark, location, zorder_by=schedule.zorder_by)
                if result.table_version is not None:
                    state.compactions += 1
                log.info(
                    "scheduled compaction of stage %s, %s: table_version %s, %d file(s) into %d",
                    schedule.stage,
                    table,
                    result.table_version,
                    result.files_removed,
                    result.files_added,
                )
        except (CommitConflictError, CommitRetriesExceededError) as conflict:
            log.warning(
                "scheduled compaction of stage %s lost to a concurrent change (%s); tried again at the next schedule",
                schedule.stage,
                conflict,
            )
        except BaseException as err:  # surfaced by the run's next poll
            state.failure = err

    @staticmethod
    def _raise_failure(stage: str, state: _Running) -> None:
        failure, state.failure = state.failure, None
        if failure is not None:
            raise SparkonceError(
                f"stage {stage}: scheduled compaction (optimize) failed: {type(failure).__name__}: {failure}"
            ) from failure


__all__ = ["ScheduledCompaction", "due"]
