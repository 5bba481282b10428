"""``sparkonce.kafka``: Spark's Kafka source as a Python data source on confluent-kafka (no JVM connector).

Usage is Spark's, with the format name changed::

    spark.readStream.format("sparkonce.kafka")
        .option("kafka.bootstrap.servers", "host:9092")
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10000)
        .load()

Offsets are Spark's Kafka JSON (``{"events": {"0": 42}}``, the next offset to read). Each micro-batch reads
exactly ``[start, end)`` per partition, so a re-run batch reads the identical records. After each batch the end
offsets are committed to a consumer group for lag tools, never read back (:mod:`sparkonce.kafka.group`). See
:mod:`sparkonce.kafka.options` for every option.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from sparkonce.crash import crash_point
from sparkonce.errors import BrokerError, OptionError
from sparkonce.extras import require
from sparkonce.kafka.group import GroupOffsetsCommitter
from sparkonce.kafka.isolated import read_range
from sparkonce.kafka.offsets import EARLIEST, LATEST, OffsetRange, PartitionOffsets, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import OffsetPlanner, check_broker
from sparkonce.kafka.ranges import BY_TIMESTAMP, plan_ranges, rate_limit, resolve_start
from sparkonce.kafka.reader import ReadSettings, kafka_schema
from sparkonce.retries import call_with_retries

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

T = TypeVar("T")


class KafkaInputPartition(InputPartition):
    """One task's work: an offset range of one topic-partition. Built on the driver, read on executors.

    ``open_end``: a batch read's last range of a partition whose end is "latest": the task reads to the
    partition's end *when it runs* (at least to ``range.end``, the end when the read was planned), so each
    execution of the same DataFrame sees the records written since (Spark resolves "latest" per execution).
    """

    def __init__(self, offset_range: OffsetRange, *, open_end: bool = False) -> None:
        super().__init__(offset_range)
        self.range = offset_range
        self.open_end = open_end


class KafkaDataSource(DataSource):
    """The ``sparkonce.kafka`` data source: created on the driver at ``load()``, pickled to planner workers.

    Options are parsed and the brokers checked (reachable; ``assign`` names existing partitions) when the
    source is created, so bad input fails at ``load()``, before any batch is planned.
    """

    def __init__(self, options: dict[str, str]) -> None:
        require("kafka", "the sparkonce.kafka source")
        super().__init__(options)
        self.kafka_options = KafkaOptions.parse(options)
        self.given_options = dict(options)
        check_broker(self.kafka_options)

    @classmethod
    def name(cls) -> str:
        return "sparkonce.kafka"

    def schema(self) -> StructType | str:
        return kafka_schema(include_headers=self.kafka_options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        self.kafka_options.check_mode("batch", given=self.given_options)
        return KafkaBatchReader(self.kafka_options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        self.kafka_options.check_mode("stream")
        return KafkaStreamReader(self.kafka_options, schema)

    def _check_schema(self, schema: StructType) -> None:
        expected = kafka_schema(include_headers=self.kafka_options.include_headers)
        if schema != expected:
            raise OptionError(
                "schema",
                schema.simpleString(),
                f"the Kafka source has a fixed schema ({expected.simpleString()}); do not set one",
            )


def _parse_start(start: dict[str, Any]) -> PartitionOffsets:
    """A batch's start offsets; the initial ones may hold the -2 / -1 / -3 markers of the starting options."""
    return PartitionOffsets.from_json(
        start, what="start offsets", allowed_special=frozenset({EARLIEST, LATEST, BY_TIMESTAMP})
    )


def _read_settings(options: KafkaOptions) -> ReadSettings:
    return ReadSettings(
        client_config=dict(options.client_config),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        group_id_prefix=options.group_id_prefix,
    )


def _input_partitions(
    options: KafkaOptions, start: PartitionOffsets, end: PartitionOffsets, earliest: Any
) -> list[KafkaInputPartition]:
    """One Spark input partition per planned ``[start, end)`` range (batch and streaming reads). Runs on the driver."""
    ranges = plan_ranges(
        start, end, earliest, fail_on_data_loss=options.fail_on_data_loss, min_partitions=options.min_partitions
    )
    return [KafkaInputPartition(r) for r in ranges]


def _read_partition(settings: ReadSettings, partition: InputPartition, schema: Any) -> Iterator[pa.RecordBatch]:
    """Read one planned range. Runs on executors."""
    assert isinstance(partition, KafkaInputPartition)
    return read_range(settings, partition.range, schema)


class KafkaBatchReader(DataSourceReader):
    """Batch read between ``startingOffsets`` and ``endingOffsets``.

    ``partitions()`` runs on the driver (it asks the brokers for offsets); ``read()`` runs on executors.
    """

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = _read_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve start and end offsets and plan the ranges. Runs on the driver.

        Spark's Python data sources plan a DataFrame's partitions once and reuse them for every execution;
        ends that mean "latest" (``latest``, -1, an ending timestamp without a match) are therefore planned
        as open ranges that the tasks extend to the partition's end when they run.
        """
        planner = OffsetPlanner(self.options)
        try:
            tps = planner.discover()
            start = planner.resolve(self.options.starting_for("batch"), tps)
            ending = self.options.ending_for_batch()
            planned_end = planner.resolve(ending, tps, keep_latest=True)
            latest = planner.latest(tps)
            open_tps = {tp for tp in tps if planned_end[tp] == LATEST}
            end = PartitionOffsets({tp: latest[tp] if tp in open_tps else planned_end[tp] for tp in tps})
            for tp in tps:
                if end[tp] < start[tp]:
                    raise OptionError(
                        ending.option, ending.raw, f"{tp} ends at {end[tp]}, before its start {start[tp]}"
                    )
                if end[tp] > latest[tp]:
                    raise OptionError(
                        ending.option, ending.raw, f"{tp} ends at {end[tp]}, beyond its last offset {latest[tp]}"
                    )
            earliest = planner.earliest(tps)
        finally:
            planner.close()
        planned = _input_partitions(self.options, start, end, earliest)
        last = {p.range.tp: p for p in planned}  # ranges come sorted by partition and offset
        for tp in sorted(open_tps):
            if tp in last:
                last[tp].open_end = True
            else:  # nothing to read when planned: an empty range that the task extends when it runs
                planned.append(KafkaInputPartition(OffsetRange(tp, end[tp], end[tp]), open_end=True))
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range; an open range first looks up the partition's end. Runs on executors."""
        assert isinstance(partition, KafkaInputPartition)
        if partition.open_end:
            rng = partition.range
            planner = OffsetPlanner(self.options)
            try:
                now = planner.latest([rng.tp]).get(rng.tp, rng.end)
            finally:
                planner.close()
            partition = KafkaInputPartition(OffsetRange(rng.tp, rng.start, max(rng.end, now)))
        return _read_partition(self.settings, partition, self.schema)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reading with admission control (``maxOffsetsPerTrigger``) and ``Trigger.AvailableNow``.

    ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and ``stop`` run on the driver, in
    the long-lived Python worker Spark keeps for this stream (which holds one :class:`OffsetPlanner`);
    ``read`` runs on executors, where the planner is never shipped.
    """

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = _read_settings(options)
        self._planner: OffsetPlanner | None = None
        self._group: GroupOffsetsCommitter | None = None
        self._group_committed: dict[TopicPartition, int] = {}
        self._latest: PartitionOffsets | None = None
        self._available_now_target: dict[TopicPartition, int] | None = None
        self._available_now = False
        self._last_trigger_ms = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None  # clients stay on the driver
        state["_group"] = None
        return state

    @property
    def planner(self) -> OffsetPlanner:
        if self._planner is None:
            self._planner = OffsetPlanner(self.options)
        return self._planner

    def _with_retries(self, body: Callable[[], T]) -> T:
        """Run the offset requests in ``body``, retrying a :class:`~sparkonce.errors.BrokerError` as Spark does.

        Spark's Kafka source makes ``fetchOffset.numRetries`` attempts (default 3), waits
        ``fetchOffset.retryIntervalMs`` (default 1000 ms) between them and starts over with new clients: a
        broker restarting under the stream (the embedded one answers ListOffsets with -1001 right after a
        restart) costs a retry, not the query. Runs on the driver.
        """
        attempts = self.options.fetch_offset_attempts
        return call_with_retries(
            body,
            logger=log,
            kind="kafka_offsets",
            retry_on=BrokerError,
            attempts=attempts,
            pause=lambda _attempt: self.options.fetch_offset_retry_interval_ms / 1000.0,
            message=lambda attempt, err, pause: (
                f"attempt {attempt} of {attempts} getting Kafka offsets failed ({err}); again in {pause:.1f}s with "
                "new clients"
            ),
            before_retry=self.stop,
        )

    # -- offsets ---------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Offsets the first batch starts from. Runs on the driver.

        ``earliest`` / ``latest`` (and -2 / -1 in JSON) stay *unresolved* here: Spark does not checkpoint the
        initial offsets and calls this again when it re-runs batch 0 after a crash, when "latest" would mean
        something else. They are resolved when batch 0's end is chosen (:meth:`latestOffset`, which Spark
        checkpoints in ``offsets/0``) and replayed from there: a ``latest`` partition reads nothing in batch 0,
        an ``earliest`` one reads from its earliest offset. Timestamp starts are checked here (a partition
        without a matching record fails with the ``error`` strategy, or becomes ``latest``) and kept as
        :data:`~sparkonce.kafka.ranges.BY_TIMESTAMP`: batch 0 starts at the first record at or after the
        timestamp *before batch 0's end*, which is the same offset whenever batch 0 is planned again.
        """
        start = self._with_retries(
            lambda: self.planner.resolve(
                self.options.starting_for("stream"), self.planner.discover(), keep_special=True
            )
        )
        log.info("initial offsets: %s", start.dumps())
        return start.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark's admission control; ``minOffsetsPerTrigger`` goes through it too.

        Python sources have no composite read limit: with ``minOffsetsPerTrigger`` alone the limit is
        ``ReadMinRows``; with both, ``ReadMaxRows`` and the minimum applied by :meth:`latestOffset` itself.
        When the engine asks for everything (``ReadAllAvailable``: ``Trigger.Once``) neither applies, as in
        Spark.
        """
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end of an ``availableNow`` run at the first ``latestOffset`` call. Runs on the driver."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next batch: the partitions' ends, capped by ``limit``. Runs on the driver.

        ``minOffsetsPerTrigger`` (Spark's ``delayBatch``): while fewer new records than the minimum are
        available and ``maxTriggerDelay`` has not passed since the last batch, the answer is ``start`` (no
        batch). Under ``Trigger.AvailableNow`` the minimum does not apply: the run must drain its target.
        """
        crash_point("before_offsets")
        start_offsets = _parse_start(start)
        self._commit_to_group(start_offsets.offsets)
        if self._available_now and self._available_now_target is not None:
            latest = dict(self._available_now_target)
        else:
            latest = self._with_retries(lambda: self.planner.latest(self.planner.discover()))
            if self._available_now:
                self._available_now_target = dict(latest)
        self._latest = PartitionOffsets(latest)
        if isinstance(limit, ReadAllAvailable):
            return PartitionOffsets(latest).to_json()
        if not isinstance(limit, (ReadMaxRows, ReadMinRows)):
            log.warning("read limit %r is not supported by sparkonce.kafka; reading all available records", limit)
            return PartitionOffsets(latest).to_json()
        need_earliest = [tp for tp in latest if tp not in start_offsets or start_offsets[tp] == EARLIEST]
        earliest = self._with_retries(lambda: self.planner.earliest(need_earliest)) if need_earliest else {}
        begin = self._resolve_markers(start_offsets, latest, earliest)
        minimum = self.options.min_offsets_per_trigger if not self._available_now else None
        if minimum is not None and self._delay_batch(minimum, begin, latest):
            log.debug("fewer than minOffsetsPerTrigger=%d new records: delaying the batch", minimum)
            return start
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest, earliest)
        return PartitionOffsets(latest).to_json()

    def _delay_batch(self, minimum: int, begin: PartitionOffsets, latest: dict[TopicPartition, int]) -> bool:
        """Spark's ``delayBatch``: hold the batch back while too few records wait and the delay has not passed."""
        now_ms = time.time() * 1000.0
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        waiting = sum(end - (begin.get(tp, 0) or 0) for tp, end in latest.items())
        if waiting < minimum:
            return True
        self._last_trigger_ms = now_ms
        return False

    def _resolve_markers(
        self, start: PartitionOffsets, bound: dict[TopicPartition, int], earliest: Any
    ) -> PartitionOffsets:
        """Resolve the initial-offset markers against ``bound`` (batch 0's end, or the current ends)."""
        by_time = [tp for tp, offset in start.offsets.items() if offset == BY_TIMESTAMP and tp in bound]
        by_timestamp: dict[TopicPartition, int | None] = {}
        if by_time:
            spec = self.options.starting_for("stream")
            by_timestamp = self.planner.timestamp_offsets({tp: spec.timestamp_for(tp) for tp in by_time}, bound=bound)
        return resolve_start(start, bound, earliest, by_timestamp)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._latest is None or not self._latest:
            return None
        return self._latest.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Plan the ranges of one batch, checking for data loss. Runs on the driver."""
        crash_point("after_offsets")
        start_offsets = _parse_start(start)
        end_offsets = PartitionOffsets.from_json(end, what="end offsets")
        if start_offsets == end_offsets:
            return []
        earliest = self._with_retries(lambda: self.planner.earliest(end_offsets.partitions()))
        # Initial-offset markers: -1 reads nothing in this batch (its end is where "latest" was resolved);
        # a timestamp start is looked up below the batch's end, so a re-run finds the same offset.
        begin = self._resolve_markers(start_offsets, dict(end_offsets.offsets), earliest)
        return _input_partitions(self.options, begin, end_offsets, earliest)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range. Runs on executors."""
        return _read_partition(self.settings, partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Source commit: Spark calls it with batch N-1's end once batch N is planned (after ``commits/N-1``), so
        the consumer group usually has these offsets already (:meth:`_commit_to_group`). Runs on the driver."""
        crash_point("after_commits")
        self._commit_to_group(PartitionOffsets.from_json(end, what="end offsets").offsets)

    def _commit_to_group(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit where the next batch starts to the consumer group for lag tools (``commitOffsetsToGroup``;
        informational only: no restart reads them; see :mod:`sparkonce.kafka.group`). Runs on the driver.

        Called from :meth:`latestOffset`, whose ``start`` is the end of the last batch, committed to the checkpoint
        before Spark asks for the next one: this is the first call after a batch's checkpoint commit (Spark's
        ``commit(end)`` comes one batch late, when the next batch is planned, and never for a run's last batch).
        Offsets equal to the last ones committed are not sent again (an idle stream asks every trigger).
        """
        if not self.options.commit_offsets_to_group:
            return
        numbered = {tp: o for tp, o in offsets.items() if o >= 0}  # an initial marker (earliest/latest) is no offset
        if not numbered or numbered == self._group_committed:
            return
        if self._group is None:
            self._group = GroupOffsetsCommitter(self.options)
        self._group.commit(numbered)
        self._group_committed = numbered

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
        if self._group is not None:
            self._group.close()
            self._group = None


__all__ = ["KafkaBatchReader", "KafkaDataSource", "KafkaInputPartition", "KafkaStreamReader"]
