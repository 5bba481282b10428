"""Fewer, larger batches downstream while a stage catches up on its input. Runs on the driver.

A stage that reads another stage's table starts a batch as soon as that table has a new commit. While the upstream
stage is behind its own source (its batches stop at ``max_offsets_per_trigger``, or at its ``maxFilesPerTrigger``,
with more waiting), each of its commits would start a downstream batch of its own, and every batch pays a fixed cost
besides its rows (planning, job, checkpoint and Delta commits: ~0.3-0.5 CPU-seconds for bronze on 2 cores). In a run
of several stages, :func:`reporting` follows each stage's progress and tells the downstream readers
(:mod:`sparkonce.delta.read.pacing`) whether it is catching up; each Delta-fed stage reads with ``maxCatchUpDelay``
(:data:`CATCH_UP_DELAY_CONF`, default :data:`DEFAULT_CATCH_UP_DELAY`), so it waits for more of its input while that
lasts, at most that long since it last planned a batch or found nothing new. Once the upstream stage has caught up
(its last batch took all its source had), or stops, the downstream stage runs at once: only a backlog trades latency
for throughput.

Batch boundaries are all it changes: offsets are planned and recorded as before, so exactly-once is untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sparkonce.delta.read.pacing import forget_writer, report_writer
from sparkonce.delta.read.stream import DeltaSourceOffset
from sparkonce.delta.reader_listener import add_query_listener, remove_query_listener
from sparkonce.errors import SourceOffsetError
from sparkonce.pipeline.kinds import kind_of
from sparkonce.pipeline.model import PipelineConfig, Stage
from sparkonce.pipeline.streams import query_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CATCH_UP_DELAY_CONF", "DEFAULT_CATCH_UP_DELAY", "catch_up_delay", "reporting", "stopped_short"]

log = logging.getLogger(__name__)

CATCH_UP_DELAY_CONF = "spark.sparkonce.pipeline.catchUpDelay"
"""How long a Delta-fed stage may wait for more input while the stage writing it catches up (an interval, e.g.
``"2 seconds"``; ``"0 seconds"``: never wait). Short, since what a stage held back when its input catches up runs
after it: the wait bounds that tail too."""
DEFAULT_CATCH_UP_DELAY = "2 seconds"


def catch_up_delay(spark: SparkSession) -> str:
    """The session's :data:`CATCH_UP_DELAY_CONF`, else :data:`DEFAULT_CATCH_UP_DELAY`."""
    return str(spark.conf.get(CATCH_UP_DELAY_CONF, DEFAULT_CATCH_UP_DELAY))


@contextmanager
def reporting(spark: SparkSession, config: PipelineConfig, stages: Sequence[Stage]) -> Iterator[None]:
    """While the block runs, report after each batch of ``stages`` whether the stage is catching up on its input
    (a streaming query listener of the session); on exit, remove the listener and report every stage caught up."""
    tables = {query_name(config, s): tuple(t for _, t in kind_of(s).places(s)) for s in stages}
    listener = add_query_listener(spark, _CatchUpListener(tables))
    try:
        yield
    finally:
        remove_query_listener(spark, listener)
        for written in tables.values():
            for table in written:
                forget_writer(table)


def stopped_short(end: Any, latest: Any) -> bool:
    """Whether a source's batch (its progress' ``endOffset`` and ``latestOffset``, JSON texts) stopped short of
    what the source had: its read limit left data for later batches. False when the source does not report its
    latest offset.

    A Kafka source's two offsets have one form: they differ exactly when records wait. A Delta source's are
    positions (table version, index in it) whose other fields can differ (``isStartingVersion``): its batch stopped
    short when its end lies before the latest position (the base of the next table version).
    """
    if latest is None or end is None:
        return False
    try:
        end_offset, latest_offset = json.loads(str(end)), json.loads(str(latest))
    except json.JSONDecodeError:
        return False
    if isinstance(end_offset, dict) and "reservoirVersion" in end_offset:
        try:
            return DeltaSourceOffset.from_json(end_offset).key < DeltaSourceOffset.from_json(latest_offset).key
        except SourceOffsetError:
            return False
    return bool(end_offset != latest_offset)


class _CatchUpListener:
    """Spark's Python listener interface, implemented directly (two or three py4j calls an event). Driver (Spark's
    listener bus thread, through py4j)."""

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

    def __init__(self, tables: Mapping[str, tuple[str, ...]]) -> None:
        self._tables = dict(tables)
        """Query name -> the tables its stage writes."""
        self._names: dict[str, str] = {}
        """Query id -> name, for the events that carry no name."""

    def onQueryStarted(self, event: Any) -> None:
        name = event.name()
        if name in self._tables:
            self._names[str(event.id().toString())] = str(name)

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress()
            written = self._tables.get(str(progress.name()))
            if not written:
                return
            behind = any(stopped_short(s.endOffset(), s.latestOffset()) for s in progress.sources())
            for table in written:
                report_writer(table, catching_up=behind)
        except Exception as err:  # a listener must never fail the query's events: downstream just does not wait
            log.warning("catch-up report of a pipeline stage failed: %s", err)

    def onQueryIdle(self, event: Any) -> None:
        self._caught_up(event)

    def onQueryTerminated(self, event: Any) -> None:
        self._caught_up(event)

    def _caught_up(self, event: Any) -> None:
        try:
            name = self._names.get(str(event.id().toString()))
            for table in self._tables.get(name or "", ()):
                report_writer(table, catching_up=False)
        except Exception as err:  # as above
            log.warning("catch-up report of a pipeline stage failed: %s", err)
