"""``sparkonce.kafka``: Spark's Kafka source as a Python data source on confluent-kafka (no JVM connector).

Usage is Spark's, with the format name changed::

    spark.readStream.format("sparkonce.kafka")
        .option("kafka.bootstrap.servers", "host:9092")
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10000)
        .load()

Offsets are Spark's Kafka JSON (``{"events": {"0": 42}}``, the next offset to read). Each micro-batch reads
exactly ``[start, end)`` per partition, so a re-run batch reads the identical records; nothing is committed to
Kafka consumer groups. See :mod:`sparkonce.kafka.options` for every option.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sparkonce.crash import crash_point
from sparkonce.errors import OptionError
from sparkonce.kafka.offsets import EARLIEST, LATEST, OffsetRange, PartitionOffsets, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import OffsetPlanner, check_broker, plan_ranges, rate_limit, resolve_start
from sparkonce.kafka.reader import ReadSettings, kafka_schema, read_range

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


class KafkaInputPartition(InputPartition):
    """One task's work: an offset range of one topic-partition. Built on the driver, read on executors."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


class KafkaDataSource(DataSource):
    """The ``sparkonce.kafka`` data source: created on the driver at ``load()``, pickled to planner workers.

    Options are parsed and the brokers checked (reachable; ``assign`` names existing partitions) when the
    source is created, so bad input fails at ``load()``, before any batch is planned.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.kafka_options = KafkaOptions.parse(options)
        check_broker(self.kafka_options)

    @classmethod
    def name(cls) -> str:
        return "sparkonce.kafka"

    def schema(self) -> StructType:
        return kafka_schema(include_headers=self.kafka_options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        self.kafka_options.check_mode("batch")
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
    """A batch's start offsets; the initial ones may hold the -2 / -1 markers of ``startingOffsets``."""
    return PartitionOffsets.from_json(start, what="start offsets", allowed_special=frozenset({EARLIEST, LATEST}))


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
    """One Spark input partition per planned ``[start, end)`` range (driver; batch and streaming reads)."""
    ranges = plan_ranges(
        start, end, earliest, fail_on_data_loss=options.fail_on_data_loss, min_partitions=options.min_partitions
    )
    return [KafkaInputPartition(r) for r in ranges]


def _read_partition(settings: ReadSettings, partition: InputPartition, schema: Any) -> Iterator[pa.RecordBatch]:
    """Read one planned range (executor)."""
    assert isinstance(partition, KafkaInputPartition)
    return read_range(settings, partition.range, schema)


class KafkaBatchReader(DataSourceReader):
    """Batch read between ``startingOffsets`` and ``endingOffsets``.

    ``partitions()`` runs on the driver side (it asks the brokers for offsets); ``read()`` runs on executors.
    """

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = _read_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve start and end offsets and plan the ranges (driver side)."""
        planner = OffsetPlanner(self.options)
        try:
            tps = planner.discover()
            start = planner.resolve(self.options.starting_for("batch"), tps, option="startingOffsets")
            ending = self.options.ending_for_batch()
            end = planner.resolve(ending, tps, option="endingOffsets")
            latest = planner.latest(tps) if ending.kind == "specific" else end.offsets
            for tp in tps:
                if end[tp] < start[tp]:
                    raise OptionError(
                        "endingOffsets", ending.raw, f"{tp} ends at {end[tp]}, before its start {start[tp]}"
                    )
                if end[tp] > latest[tp]:
                    raise OptionError(
                        "endingOffsets", ending.raw, f"{tp} ends at {end[tp]}, beyond its last offset {latest[tp]}"
                    )
            earliest = planner.earliest(tps)
        finally:
            planner.close()
        return _input_partitions(self.options, start, end, earliest)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (executor)."""
        return _read_partition(self.settings, partition, self.schema)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reading with admission control (``maxOffsetsPerTrigger``) and ``Trigger.AvailableNow``.

    ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and ``stop`` run on the driver side, in
    the long-lived Python worker Spark keeps for this stream (which holds one :class:`OffsetPlanner`);
    ``read`` runs on executors, where the planner is never shipped.
    """

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = _read_settings(options)
        self._planner: OffsetPlanner | None = None
        self._latest: PartitionOffsets | None = None
        self._available_now_target: dict[TopicPartition, int] | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None  # clients stay on the driver
        return state

    @property
    def planner(self) -> OffsetPlanner:
        if self._planner is None:
            self._planner = OffsetPlanner(self.options)
        return self._planner

    # -- offsets ---------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Offsets the first batch starts from (driver).

        ``earliest`` / ``latest`` (and -2 / -1 in JSON) stay *unresolved* here: Spark does not checkpoint the
        initial offsets and calls this again when it re-runs batch 0 after a crash, when "latest" would mean
        something else. They are resolved when batch 0's end is chosen (:meth:`latestOffset`, which Spark
        checkpoints in ``offsets/0``) and replayed from there: a ``latest`` partition reads nothing in batch 0,
        an ``earliest`` one reads from its earliest offset.
        """
        tps = self.planner.discover()
        start = self.planner.resolve(
            self.options.starting_for("stream"), tps, option="startingOffsets", keep_special=True
        )
        log.info("initial offsets: %s", start.dumps())
        return start.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end of an ``availableNow`` run at the first ``latestOffset`` call (driver)."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next batch: the partitions' ends, capped by ``limit`` (driver)."""
        crash_point("before_offsets")
        start_offsets = _parse_start(start)
        if self._available_now and self._available_now_target is not None:
            latest = dict(self._available_now_target)
        else:
            tps = self.planner.discover()
            latest = self.planner.latest(tps)
            if self._available_now:
                self._available_now_target = dict(latest)
        self._latest = PartitionOffsets(latest)
        if isinstance(limit, ReadMaxRows):
            need_earliest = [tp for tp in latest if tp not in start_offsets or start_offsets[tp] == EARLIEST]
            earliest = self.planner.earliest(need_earliest) if need_earliest else {}
            begin = resolve_start(start_offsets, latest, earliest)
            latest = rate_limit(limit.max_rows, begin, latest, earliest)
        elif not isinstance(limit, ReadAllAvailable):
            log.warning("read limit %r is not supported by sparkonce.kafka; reading all available records", limit)
        return PartitionOffsets(latest).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._latest is None or not self._latest:
            return None
        return self._latest.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Plan the ranges of one batch, checking for data loss (driver)."""
        crash_point("after_offsets")
        start_offsets = _parse_start(start)
        end_offsets = PartitionOffsets.from_json(end, what="end offsets")
        if start_offsets == end_offsets:
            return []
        earliest = self.planner.earliest(end_offsets.partitions())
        # Initial-offset markers: -1 reads nothing in this batch (its end is where "latest" was resolved).
        begin = resolve_start(start_offsets, end_offsets.offsets, earliest)
        return _input_partitions(self.options, begin, end_offsets, earliest)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range (executor)."""
        return _read_partition(self.settings, partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Source commit: nothing to do; Kafka consumer groups are never written (the checkpoint rules)."""
        crash_point("after_commits")
        log.debug("batch up to %s done; no offsets are committed to Kafka", end)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


__all__ = ["KafkaBatchReader", "KafkaDataSource", "KafkaInputPartition", "KafkaStreamReader"]
