"""The streaming source: ``spark.readStream.format("delta").load(path)``.

Each micro-batch reads the data files added by new table versions, in order (table version, then file index), up
to the read limit (``maxFilesPerTrigger``, default 1000, and/or ``maxBytesPerTrigger``). A new query first reads the
snapshot of the latest table version, unless ``startingVersion``/``startingTimestamp`` ask for the changes from a
table version on. Planning runs on the driver from the Delta log (commits are parsed once and cached); executors
read Parquet files through :func:`sparkonce.delta.read.reader.read_files`.

Offsets have the shape of Delta's own ``DeltaSourceOffset``::

    {"sourceVersion": 1, "reservoirId": <table id>, "reservoirVersion": v, "index": i, "isStartingVersion": b}

As in Delta, an offset names the *last file read*: ``index`` -1 is the base of table version ``v`` (nothing of it
read yet), and ``isStartingVersion`` true means ``index`` points into the initial snapshot of ``v`` rather than
into the changes committed at ``v``. So a batch planned between ``start`` and ``end`` covers the file positions
strictly after ``start`` up to and including ``end``; put in this project's words, the first unread position is
inclusive and ``end`` is the exclusive bound of the next batch. When a batch ends on the last file of a table
version, its end offset is normalized to ``(v + 1, -1, false)``. Commits are immutable, so the same ``(start,
end)`` always yields the same files: a batch re-run after a crash reads identical data.

Spark does not checkpoint a source's *initial* offset: when it re-runs an uncommitted batch 0 after a crash it
calls ``initialOffset()`` again and pairs the answer with the end saved in ``offsets/0``. An initial offset that
depends on when it is asked ("the latest table version") would then name another table version. So, as the
Kafka source keeps ``latest``/``earliest`` unresolved, :meth:`DeltaStreamReader.initialOffset` answers with an
*unresolved* offset (``reservoirVersion`` -1) whenever the start depends on time, and batch 0's start is derived
from its end (Delta's JVM source does the same in ``getBatch(None, end)``):

- the initial snapshot (no ``startingVersion``/``startingTimestamp``): batch 0 reads only the snapshot of the
  table version fixed when its end is chosen; its end names that table version (``(v, i, true)`` inside the
  snapshot, ``(v + 1, -1, false)`` after all of it), so a re-run reads the same snapshot files;
- ``startingVersion=latest``, and ``startingTimestamp`` when no commit is at or after it yet: batch 0 reads
  nothing and its end ``(v, -1, false)`` pins the first table version to read;
- ``startingTimestamp`` with a commit at or after it: the first such table version (commit timestamps never
  change), capped by the end's table version.

Why one module of ~650 lines: the Delta stream source's offsets, admission control (maxFilesPerTrigger /
maxBytesPerTrigger) and planning state are one state machine over the same offset tuple; the change feed stream
(:mod:`sparkonce.delta.read.change_stream`) extends it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sparkonce.crash import crash_point
from sparkonce.delta.log.actions import Action, AddFile, Metadata, Protocol
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.read.reader import (
    SUPPORTED_READER_FEATURES,
    DataFile,
    FilesPartition,
    ScanSchema,
    plan_partitions,
    read_files,
)
from sparkonce.delta.table.column_mapping import configured_mode, logical_by_physical
from sparkonce.delta.table.deletion_vectors import DeletionVector
from sparkonce.delta.table.options import StreamReadOptions
from sparkonce.delta.table.schema_log import (
    METADATA_CHANGE_INDEX,
    POST_METADATA_CHANGE_INDEX,
    PersistedMetadata,
    SchemaLog,
    differs,
    evolution_message,
    log_folder,
    merged_consecutive,
)
from sparkonce.delta.table.type_widening import widens_to
from sparkonce.errors import (
    DeltaLogError,
    OptionError,
    SchemaTrackingError,
    SourceOffsetError,
    UnsupportedFeatureError,
)

log = logging.getLogger(__name__)

SOURCE_VERSION = 1
BARRIER_SOURCE_VERSION = 3
"""``sourceVersion`` of an offset at a metadata change barrier (Delta's ``VERSION_3``)."""
BASE_INDEX = -1
_BASE_ORDER = -100
UNRESOLVED_VERSION = -1
"""``reservoirVersion`` of an unresolved initial offset: batch 0's start is derived from its end."""
DEFAULT_MAX_FILES_PER_TRIGGER = 1000


_OFFSET_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("reservoirId", str, "string"),
    ("reservoirVersion", int, "integer"),
    ("index", int, "integer"),
    ("isStartingVersion", bool, "boolean"),
)


@dataclass(frozen=True)
class DeltaSourceOffset:
    """A position in a Delta table's stream of added files, shaped like Delta's ``DeltaSourceOffset``.

    Runs on the driver (planning); round-trips through the checkpoint's ``offsets/N`` as a JSON dict.
    """

    reservoir_id: str
    """The table id (``metaData.id``); a different id means the table was replaced."""
    reservoir_version: int
    """The table version being read."""
    index: int
    """The last file read within ``reservoir_version`` (``-1``: none yet)."""
    is_starting_version: bool
    """True while reading the initial snapshot of ``reservoir_version``; false for the changes committed at it."""

    @property
    def is_unresolved(self) -> bool:
        """True for an initial offset whose table version is fixed by batch 0's end (never checkpointed)."""
        return self.reservoir_version == UNRESOLVED_VERSION

    @property
    def key(self) -> tuple[int, int]:
        """Ordering key: snapshot positions of version ``v`` sort before the changes of ``v + 1``; within a table
        version, the base (index -1) before a metadata change barrier (-20, then -19) before the files (0, 1, ...),
        as Delta orders them in memory (its base index is -100 there)."""
        return (self.reservoir_version, _BASE_ORDER if self.index == BASE_INDEX else self.index)

    @property
    def is_barrier(self) -> bool:
        """True at a metadata change barrier of schema tracking (index -20 or -19)."""
        return self.index in (METADATA_CHANGE_INDEX, POST_METADATA_CHANGE_INDEX)

    def to_json(self) -> dict[str, Any]:
        """Return the offset as Delta serializes it (``sourceVersion`` 1; 3 at a metadata change barrier)."""
        return {
            "sourceVersion": BARRIER_SOURCE_VERSION if self.is_barrier else SOURCE_VERSION,
            "reservoirId": self.reservoir_id,
            "reservoirVersion": self.reservoir_version,
            "index": self.index,
            "isStartingVersion": self.is_starting_version,
        }

    @classmethod
    def from_json(cls, data: Any) -> DeltaSourceOffset:
        """Parse an offset dict from ``offsets/N``.

        Raises:
            SourceOffsetError: the dict is not a Delta source offset this source can resume from.
        """
        if not isinstance(data, dict):
            raise SourceOffsetError(f"Delta source offset {data!r} is not a JSON object")
        source_version = data.get("sourceVersion")
        if type(source_version) is not int or source_version not in (SOURCE_VERSION, BARRIER_SOURCE_VERSION):
            problem = (
                f"[DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION] Unsupported format. Expected version should be smaller "
                f"than or equal to {BARRIER_SOURCE_VERSION} but was {source_version}"
                if type(source_version) is int and source_version > BARRIER_SOURCE_VERSION
                else f"[DELTA_INVALID_SOURCE_VERSION] sourceVersion({source_version}) is invalid"
            )
            raise SourceOffsetError(f"Delta source offset {json.dumps(data)}: {problem}")
        for key, kind, name in _OFFSET_FIELDS:
            value = data.get(key)
            if type(value) is not kind:  # exact: a bool is no version, a float no index, None no id
                raise SourceOffsetError(
                    f"Delta source offset {json.dumps(data)} is malformed: {key!r} must be a JSON {name}, not {value!r}"
                )
        offset = cls(
            reservoir_id=data["reservoirId"],
            reservoir_version=data["reservoirVersion"],
            index=data["index"],
            is_starting_version=data["isStartingVersion"],
        )
        unresolved = (offset.reservoir_version, offset.index) == (UNRESOLVED_VERSION, BASE_INDEX)
        if offset.index < BASE_INDEX and not offset.is_barrier:
            raise SourceOffsetError(f"Delta source offset {json.dumps(data)} has a negative table version or index")
        if offset.reservoir_version < 0 and not unresolved:
            raise SourceOffsetError(f"Delta source offset {json.dumps(data)} has a negative table version or index")
        if (source_version == BARRIER_SOURCE_VERSION) != offset.is_barrier:
            raise SourceOffsetError(
                f"Delta source offset {json.dumps(data)}: [DELTA_INVALID_SOURCE_OFFSET_FORMAT] The stored source "
                f"offset format is invalid (sourceVersion {BARRIER_SOURCE_VERSION} is for the metadata change indexes "
                f"{METADATA_CHANGE_INDEX} and {POST_METADATA_CHANGE_INDEX} only, which need it)"
            )
        return offset


@dataclass(frozen=True)
class VersionChanges:
    """What one Delta commit contributes to the stream. Runs on the driver (cached per table version)."""

    table_version: int
    files: tuple[DataFile, ...]
    """The ``dataChange`` adds, in commit order (their position is the offset ``index``)."""
    skipped: bool = False
    """True when the commit changes data and ``skipChangeCommits``/``ignoreDeletes`` says to skip it whole."""
    problem: str | None = None
    """Why the stream cannot go past this commit (a data change without the option allowing it)."""
    barrier: bool = False
    """Under schema tracking: the commit changes the metadata the stream reads with (a barrier before its files)."""


class StreamPartition(FilesPartition):
    """A task of a micro-batch: files plus the scan schema to read them with (built on the driver, pickled to
    executors)."""

    def __init__(self, files: list[DataFile], scan: ScanSchema) -> None:
        super().__init__(files)
        self.scan = scan


@dataclass(frozen=True)
class Position:
    """What one offset position covers: one data file (or, for the change data feed, one file of the initial
    snapshot or all change files of one commit, which are admitted whole)."""

    key: tuple[int, int]
    is_snapshot: bool
    files: tuple[Any, ...]
    size: int
    last_in_version: bool
    whole: bool = False
    """A commit admitted as a unit (Delta's ``admit(Seq)``): the first position of a batch always, a later one
    only when all its files and bytes fit in what the batch has left."""
    barrier: bool = False
    """A metadata change under schema tracking (no files): the batch ends here, whatever its budget."""


class _Budget:
    """Delta's admission control: files and bytes left; the file that crosses the byte limit is still admitted."""

    def __init__(self, max_files: int | None, max_bytes: int | None) -> None:
        self.files = max_files
        self.bytes = max_bytes

    def admits(self) -> bool:
        return (self.files is None or self.files > 0) and (self.bytes is None or self.bytes > 0)

    def fits(self, size: int, files: int) -> bool:
        """True when ``files`` files of ``size`` bytes together stay within what is left."""
        return (self.files is None or self.files >= files) and (self.bytes is None or self.bytes >= size)

    def take(self, size: int, files: int = 1) -> None:
        if self.files is not None:
            self.files -= files
        if self.bytes is not None:
            self.bytes -= size


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The Delta streaming source. Planning (offsets, partitions) runs on the driver; ``read`` on executors.

    Spark creates one instance for planning (kept for the life of the query, so its per-version cache lives as
    long) and another whose ``read`` is shipped to executors; ``__init__`` therefore does no I/O.

    Args:
        options: The parsed ``readStream`` options.
        schema: The Spark schema of the stream (the table schema when the query started).
    """

    def __init__(self, options: StreamReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._state: _TableState | None = None
        self._target_version: int | None = None

    # ------------------------------------------------------------------ driver: Spark's API
    def initialOffset(self) -> dict[str, Any]:  # driver, when batch 0 is planned and again when it is re-run
        """Where the stream starts; unresolved (see the module docstring) unless ``startingVersion`` is a number.

        Spark calls this again when it re-runs an uncommitted batch 0 after a crash, so the answer must not depend
        on when it is asked: a table version that later commits move is resolved against batch 0's end instead.
        """
        state = self._table()
        options = self.options
        if isinstance(options.starting_version, int):
            latest = state.delta_log.latest_version()
            if options.starting_version > latest:
                raise OptionError(
                    "startingVersion",
                    str(options.starting_version),
                    f"is beyond the latest table version {latest} of {options.path}",
                )
            offset = DeltaSourceOffset(state.table_id, options.starting_version, BASE_INDEX, False)
        else:
            from_snapshot = options.starting_version is None and options.starting_timestamp is None
            offset = DeltaSourceOffset(state.table_id, UNRESOLVED_VERSION, BASE_INDEX, from_snapshot)
        log.info("Delta stream from %s starts at %s", options.path, offset.to_json())
        return offset.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:  # driver
        if self.options.max_bytes_per_trigger is not None and self.options.max_files_per_trigger is None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadMaxFiles(self.options.max_files_per_trigger or DEFAULT_MAX_FILES_PER_TRIGGER)

    @property
    def available_now(self) -> bool:
        """Whether the query runs with the availableNow trigger (it stops at a table version fixed at its start)."""
        return self._target_version is not None

    def prepareForTriggerAvailableNow(self) -> None:  # driver, once, before the first availableNow batch
        self._target_version = self._table().delta_log.latest_version()
        log.info(
            "availableNow: the Delta stream from %s stops at table_version %s", self.options.path, self._target_version
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # driver, each trigger
        crash_point("before_offsets")
        begin = self._parse(start)
        if begin.is_barrier and self._pending_change(begin.reservoir_version):
            if begin.index == METADATA_CHANGE_INDEX:  # the batch ending at the barrier is done: one more offset
                return replace(begin, index=POST_METADATA_CHANGE_INDEX).to_json()  # so Spark commits the barrier
            self._evolve(begin.reservoir_version)  # the barrier was committed (a crash before commit() evolved it)
        last_version = self._last_version()
        if begin.is_unresolved:
            if begin.is_starting_version:
                # Batch 0 reads only the snapshot of ``last_version``, so its end names that table version.
                begin = DeltaSourceOffset(begin.reservoir_id, last_version, BASE_INDEX, True)
                empty_end = DeltaSourceOffset(begin.reservoir_id, last_version + 1, BASE_INDEX, False)
            else:
                first = self._starting_version()
                begin = DeltaSourceOffset(begin.reservoir_id, first, BASE_INDEX, False)
                if first > last_version:
                    return begin.to_json()  # nothing to read yet: batch 0 is empty and pins ``first``
                empty_end = begin
        else:
            empty_end = begin
        budget = self._budget(limit)
        last: Position | None = None
        self._initialize_schema_log(begin)
        for position in self._positions(begin, last_version):
            if (
                position.barrier
            ):  # a metadata change ends the batch (Delta's stopIndexedFileIteratorAtSchemaChangeBarrier)
                last = position
                break
            if not budget.admits():
                break
            if position.whole and last is not None and not budget.fits(position.size, len(position.files)):
                break
            budget.take(position.size, len(position.files))
            last = position
        if last is None:
            return empty_end.to_json()
        return self._offset_after(begin.reservoir_id, last).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:  # driver, for query progress
        if self._state is None:
            return None
        latest = self._state.delta_log.latest_version()
        return DeltaSourceOffset(self._state.table_id, latest + 1, BASE_INDEX, False).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:  # driver
        return self._tasks(self.batch_files(start, end))

    def batch_files(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:  # driver
        """The files of the micro-batch between ``start`` and ``end`` (the positions strictly after ``start`` up to
        and including ``end``), in stream order; the native source reads them through Spark's Parquet scan."""
        crash_point("after_offsets")
        begin, finish = self._parse(start), self._parse(end)
        if finish.is_unresolved:
            raise SourceOffsetError(f"Delta source end offset {finish.to_json()} is unresolved; Spark never plans one")
        if begin.is_unresolved:
            begin = self._start_of_first_batch(begin, finish)
        _check_order(begin, finish)
        # An end at the base of table version v covers nothing of v: do not read its commit (it may not exist yet).
        last_version = finish.reservoir_version - (1 if finish.index == BASE_INDEX else 0)
        files = [f for p in self._positions(begin, last_version) if p.key <= finish.key for f in p.files]
        self._log_batch(files, begin, finish)
        return files

    def _tasks(self, files: list[Any]) -> list[InputPartition]:
        """The tasks reading a micro-batch's ``files`` on executors. Runs on the driver."""
        scan = self._table().scan
        shipped = [replace(f, action=None) for f in files]
        return [StreamPartition(p.files, scan) for p in plan_partitions(shipped)]

    def _log_batch(self, files: list[Any], begin: DeltaSourceOffset, finish: DeltaSourceOffset) -> None:
        """Log what a micro-batch between ``begin`` and ``finish`` reads. Runs on the driver."""
        if files:
            versions = sorted({f.table_version for f in files if f.table_version is not None})
            log.info(
                "Delta stream from %s: planned %d file(s), %d byte(s) of table_version %s..%s between %s and %s",
                self.options.path,
                len(files),
                sum(f.size for f in files),
                versions[0] if versions else None,
                versions[-1] if versions else None,
                begin.key,
                finish.key,
            )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        if isinstance(partition, StreamPartition):
            yield from read_files(partition.files, partition.scan, self.options.location)

    def commit(self, end: dict[str, Any]) -> None:  # driver, after Spark's checkpoint commit
        crash_point("after_commits")
        finish = self._parse(end)
        if self._state is not None:
            self._state.forget_before(finish)
        if finish.is_barrier and self._pending_change(finish.reservoir_version):
            self._evolve(finish.reservoir_version)  # Delta's updateMetadataTrackingLogAndFailTheStreamIfNeeded

    def stop(self) -> None:  # driver
        self._state = None

    # ------------------------------------------------------------------ driver: planning
    def _table(self) -> _TableState:
        if self._state is None:
            self._state = _TableState.open(self.options, self.schema)
        return self._state

    def _parse(self, data: dict[str, Any]) -> DeltaSourceOffset:
        offset = DeltaSourceOffset.from_json(data)
        state = self._table()
        if offset.reservoir_id != state.table_id:
            raise SourceOffsetError(
                f"the Delta table at {self.options.path} has id {state.table_id}, but the stream's checkpoint "
                f"was reading table id {offset.reservoir_id}: the table was replaced (deleted and recreated, or "
                "overwritten by another table). Start the query with a new checkpointLocation to read the new table"
            )
        return offset

    def _starting_version(self) -> int:
        """The first table version to read for ``startingVersion=latest`` or ``startingTimestamp``, resolved now."""
        latest = self._table().delta_log.latest_version()
        when = self.options.starting_timestamp
        if when is None:
            return latest + 1
        return self._table().first_version_at_or_after(when, latest)

    def _start_of_first_batch(self, start: DeltaSourceOffset, end: DeltaSourceOffset) -> DeltaSourceOffset:
        """Resolve an unresolved initial offset against batch 0's checkpointed end (a re-run reads what was planned).

        Raises:
            SourceOffsetError: the end cannot follow that initial offset (the checkpoint does not match the options).
        """
        if start.is_starting_version:
            # The snapshot whose table version the end names: inside it, or just after all of it.
            table_version = end.reservoir_version if end.is_starting_version else end.reservoir_version - 1
            if table_version < 0:
                raise SourceOffsetError(
                    f"batch 0 of the Delta stream from {self.options.path} ends at {end.to_json()}, which names no "
                    "initial snapshot; was the query restarted with other startingVersion/startingTimestamp options?"
                )
            return DeltaSourceOffset(start.reservoir_id, table_version, BASE_INDEX, True)
        # Commits after the first resolution may only move the answer later (when none was at or after the
        # timestamp, or for ``latest``); batch 0 then read nothing and its end is where reading starts.
        first = min(self._starting_version(), end.reservoir_version)
        return DeltaSourceOffset(start.reservoir_id, first, BASE_INDEX, False)

    def _last_version(self) -> int:
        latest = self._table().delta_log.latest_version()
        return latest if self._target_version is None else min(latest, self._target_version)

    def _budget(self, limit: ReadLimit) -> _Budget:
        max_files, max_bytes = self.options.max_files_per_trigger, self.options.max_bytes_per_trigger
        if isinstance(limit, ReadAllAvailable):
            return _Budget(None, None)
        if isinstance(limit, ReadMaxFiles):
            return _Budget(limit.max_files, max_bytes)
        if isinstance(limit, ReadMaxBytes):
            return _Budget(max_files, limit.max_bytes)
        return _Budget(max_files or DEFAULT_MAX_FILES_PER_TRIGGER, max_bytes)

    def _positions(self, start: DeltaSourceOffset, last_version: int) -> Iterator[Position]:
        """Yield the file positions strictly after ``start``, through table version ``last_version`` (under schema
        tracking, a metadata change's barrier before its commit's files)."""
        state = self._table()
        version = start.reservoir_version
        if start.is_starting_version:
            snapshot = state.snapshot_files(version)
            for i in range(start.index + 1, len(snapshot)):
                yield Position((version, i), True, (snapshot[i],), snapshot[i].size, i == len(snapshot) - 1)
            version += 1
            first_index = 0
        else:
            first_index = max(start.index + 1, 0)
        while version <= last_version:
            changes = state.changes(version)
            if changes.barrier and (version, METADATA_CHANGE_INDEX) > start.key:
                yield Position((version, METADATA_CHANGE_INDEX), False, (), 0, False, barrier=True)
            if changes.problem is not None:
                raise SourceOffsetError(changes.problem)
            files = changes.files
            for i in range(first_index, len(files)):
                yield Position((version, i), False, (files[i],), files[i].size, i == len(files) - 1)
            version += 1
            first_index = 0

    # ------------------------------------------------------------------ driver: schema tracking
    def _pending_change(self, table_version: int) -> bool:
        """True when the commit of ``table_version`` changes the metadata the stream reads with (schema tracking)."""
        state = self._table()
        return state.schema_log is not None and state.barrier_at(table_version)

    def _evolve(self, table_version: int) -> None:
        """Append the metadata of ``table_version`` to the schema log and stop the query (Delta's
        ``DELTA_STREAMING_METADATA_EVOLUTION``): the batch ending at its barrier is done, the restarted query reads
        with the new schema.

        Raises:
            SchemaTrackingError: always.
        """
        state = self._table()
        entry = state.entry_at(table_version)
        assert state.schema_log is not None
        state.schema_log.append(entry)
        crash_point("after_schema_log_write")
        raise SchemaTrackingError(evolution_message(entry))

    def _initialize_schema_log(self, begin: DeltaSourceOffset) -> None:
        """The first entry of an empty schema log: the metadata of the table version the stream starts reading at
        (``begin``'s), as Delta's source writes it at its first offset; a stream whose schema is not that one stops
        for a restart. (A query started through ``writeStream.start`` has its first entry already, written with
        its source's checkpoint folder.)"""
        state = self._table()
        if state.schema_log is None or state.entry is not None:
            return
        entry = state.entry_at(min(begin.reservoir_version, state.delta_log.latest_version()), snapshot=True)
        state.schema_log.append(entry)
        if not same_columns(entry_schema(entry), self.schema):
            raise SchemaTrackingError(evolution_message(entry))
        state.use_entry(entry)

    @staticmethod
    def _offset_after(table_id: str, position: Position) -> DeltaSourceOffset:
        version, index = position.key
        if position.barrier:
            return DeltaSourceOffset(table_id, version, METADATA_CHANGE_INDEX, False)
        if position.last_in_version:
            return DeltaSourceOffset(table_id, version + 1, BASE_INDEX, False)
        return DeltaSourceOffset(table_id, version, index, position.is_snapshot)


def _check_order(start: DeltaSourceOffset, end: DeltaSourceOffset) -> None:
    if start.key > end.key or (not start.is_starting_version and end.is_starting_version):
        raise SourceOffsetError(
            f"Delta source offsets move backwards: start {start.to_json()} is after end {end.to_json()}"
        )


class _TableState:
    """Driver-side view of the table for planning: table id, read schema and a per-table-version cache."""

    def __init__(
        self, options: StreamReadOptions, delta_log: DeltaLog, table_id: str, scan: ScanSchema, fields: Any
    ) -> None:
        self.options = options
        self.delta_log = delta_log
        self.table_id = table_id
        self.scan = scan
        self.table_version = 0
        self.read_fields: dict[str, Any] = {f["name"].lower(): f for f in fields}
        self.schema_log: SchemaLog | None = None
        """The source's schema log (``schemaTrackingLocation``), None without schema tracking."""
        self.entry: PersistedMetadata | None = None
        """The schema log's newest entry: what the stream reads with (None: no schema tracking, or none yet)."""
        self._changes: dict[int, VersionChanges] = {}
        self._snapshots: dict[int, tuple[DataFile, ...]] = {}
        self._metadata: dict[int, tuple[Metadata | None, Protocol | None]] = {}

    @classmethod
    def open(cls, options: StreamReadOptions, schema: StructType) -> _TableState:
        from sparkonce.delta.read.reader import check_reader_features, scan_schema
        from sparkonce.delta.table.schema import arrow_schema_for_spark, table_fields
        from sparkonce.delta.txn.commit import load_table

        table = load_table(options.location)
        check_reader_features(table, options.path)
        table_id = str(table.metadata().id)
        schema_log = None
        latest = None
        if options.schema_tracking_location is not None:
            folder = log_folder(options.schema_tracking_location, table_id, options.source_tracking_id)
            schema_log = SchemaLog(folder, table_id, storage_options=options.location.options())
            latest = schema_log.latest()
        # Read exactly the schema Spark resolved for this query, whatever the table has become since.
        scan = replace(scan_schema(table), output=arrow_schema_for_spark(schema))
        fields = table_fields(table)
        if latest is None:
            _check_resolved_types(schema, fields, options.path, table.version())
        state = cls(options, DeltaLog(options.location), table_id, scan, fields)
        state.table_version = table.version()
        state.schema_log = schema_log
        if latest is not None:
            state.use_entry(latest[1])
        return state

    def use_entry(self, entry: PersistedMetadata) -> None:
        """Read with a schema log entry's metadata (its schema, partitioning, column mapping) from its table
        version on."""
        from sparkonce.delta.read.reader import mapped_columns

        fields = entry.fields
        physical, nested = mapped_columns(fields)
        self.scan = replace(
            self.scan, partition_columns=entry.partition_columns, physical_names=physical, nested_renames=nested
        )
        self.read_fields = {f["name"].lower(): f for f in fields}
        self.table_version = entry.delta_commit_version
        self.entry = entry
        log.info(
            "Delta stream from %s reads with the schema log's entry of table_version %s (%s)",
            self.options.path,
            entry.delta_commit_version,
            self.schema_log.folder if self.schema_log is not None else None,
        )

    def barrier_at(self, table_version: int) -> bool:
        """True when schema tracking reads with an entry and the commit of ``table_version``, after the entry's,
        changes its metadata or protocol (Delta's ``hasMetadataOrProtocolChangeComparedToStreamMetadata``)."""
        if self.entry is None or table_version <= self.entry.delta_commit_version:
            return False
        metadata, protocol = self.metadata_actions(table_version)
        return differs(self.entry, metadata, protocol)

    def metadata_actions(self, table_version: int) -> tuple[Metadata | None, Protocol | None]:
        """The ``metaData`` and ``protocol`` actions of the commit of ``table_version`` (None where it has none)."""
        cached = self._metadata.get(table_version)
        if cached is None:
            actions = self.read_commit(table_version, only=(b"metaData", b"protocol"))
            self.note_metadata(table_version, actions)
            cached = self._metadata[table_version]
        return cached

    def read_commit(
        self, table_version: int, *, only: tuple[bytes, ...] = (), stream: str = "the stream"
    ) -> list[Action]:
        """The actions of the Delta commit of ``table_version`` (with ``only``, just those;
        :meth:`sparkonce.delta.log.delta_log.DeltaLog.read_actions`).

        Raises:
            SourceOffsetError: the commit cannot be read (removed by log clean-up, or corrupt), naming ``stream``.
        """
        try:
            return self.delta_log.read_actions(table_version, only=only)
        except DeltaLogError as err:
            raise SourceOffsetError(
                f"{stream} from {self.options.path} needs table version {table_version}, but its Delta "
                f"commit cannot be read (removed by log clean-up, or corrupt): {err}"
            ) from err

    def note_metadata(self, table_version: int, actions: Sequence[Action]) -> None:
        """Keep the ``metaData`` / ``protocol`` actions of a commit read for planning."""
        metadata = next((Metadata(**a["metaData"]) for a in actions if "metaData" in a), None)
        protocol = next((Protocol(**a["protocol"]) for a in actions if "protocol" in a), None)
        self._metadata[table_version] = (metadata, protocol)

    def entry_at(self, table_version: int, *, snapshot: bool = False) -> PersistedMetadata:
        """The schema log entry for the metadata of ``table_version``: the table's state there (``snapshot``), or
        what its commit changes over the current entry."""
        path = self.entry.source_metadata_path if self.entry is not None else ""
        if snapshot or self.entry is None:
            state = self.delta_log.snapshot(table_version)
            return PersistedMetadata.of(self.table_id, table_version, state.metadata, state.protocol, path)
        metadata, protocol = self.metadata_actions(table_version)
        return PersistedMetadata.of(
            self.table_id,
            table_version,
            metadata if metadata is not None else self.entry.metadata_action({}),
            protocol if protocol is not None else self.entry.protocol,
            path,
        )

    def first_version_at_or_after(self, when: dt.datetime, latest: int) -> int:
        """The first table version committed at or after ``when`` (``latest + 1`` when none is)."""
        millis = when.timestamp() * 1000
        for version, ts in self.delta_log.commit_timestamps():
            if ts >= millis:
                return version
        return latest + 1

    def forget_before(self, end: DeltaSourceOffset) -> None:
        """Drop what Spark will not plan again once ``end`` is committed (keeps driver memory flat)."""
        for version in [v for v in self._changes if v < end.reservoir_version]:
            del self._changes[version]
        for version in [v for v in self._metadata if v < end.reservoir_version]:
            del self._metadata[version]
        if not end.is_starting_version:
            self._snapshots.clear()

    def snapshot_files(self, table_version: int) -> tuple[DataFile, ...]:
        """The files of the snapshot at ``table_version``, sorted like Delta (modification time, path)."""
        cached = self._snapshots.get(table_version)
        if cached is None:
            try:
                snapshot = self.delta_log.snapshot(table_version)
            except DeltaLogError as err:
                raise SourceOffsetError(
                    f"cannot rebuild the snapshot of table version {table_version} of {self.options.path} that "
                    f"the stream started from: {err}"
                ) from err
            self._check_snapshot_metadata(table_version, snapshot.metadata, snapshot.protocol)
            adds = sorted(snapshot.files.values(), key=lambda a: (int(a.get("modificationTime") or 0), a["path"]))
            cached = tuple(self._data_file(a, table_version) for a in adds)
            self._snapshots[table_version] = cached
            log.info(
                "Delta stream from %s: initial snapshot of table_version %s has %d file(s)",
                self.options.path,
                table_version,
                len(cached),
            )
        return cached

    def _check_snapshot_metadata(self, table_version: int, metadata: Metadata, protocol: Protocol) -> None:
        """Under schema tracking, the initial snapshot a stream reads is newer than its entry and has other metadata
        (a commit landed between the entry and the stream's first offset): the snapshot's metadata replaces the
        entry and the query stops for a restart (Delta's ``getSnapshotAt``).

        Raises:
            SchemaTrackingError: ``DELTA_STREAMING_METADATA_EVOLUTION``.
        """
        if self.schema_log is None or self.entry is None or table_version <= self.entry.delta_commit_version:
            return
        if not differs(self.entry, metadata, protocol):
            return
        path = self.entry.source_metadata_path
        entry = PersistedMetadata.of(self.table_id, table_version, metadata, protocol, path)
        self.schema_log.append(entry, replace_current=True)
        raise SchemaTrackingError(evolution_message(entry))

    def changes(self, table_version: int) -> VersionChanges:
        """What the Delta commit of ``table_version`` adds to the stream (parsed once, then cached)."""
        cached = self._changes.get(table_version)
        if cached is None:
            actions = self.read_commit(table_version)
            self.note_metadata(table_version, actions)
            cached = replace(self._classify(table_version, actions), barrier=self.barrier_at(table_version))
            self._changes[table_version] = cached
        return cached

    def _classify(self, table_version: int, actions: Sequence[Action]) -> VersionChanges:
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        removes = [a["remove"] for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        for action in actions:
            if "metaData" in action:
                self.check_metadata(table_version, action["metaData"])
            elif "protocol" in action:
                check_source_protocol(table_version, action["protocol"], self.options.path)
        if removes:
            if self.options.skip_change_commits:
                log.info(
                    "Delta stream from %s: skipped change commit table_version %s", self.options.path, table_version
                )
                return VersionChanges(table_version, (), skipped=True)
            if self.options.ignore_deletes and not adds:
                log.info("Delta stream from %s: ignored delete at table_version %s", self.options.path, table_version)
                return VersionChanges(table_version, (), skipped=True)
            kind = "delete" if not adds else "update (rewrite)"
            allow = (
                "set the option 'ignoreDeletes' to 'true' to ignore deletes, or 'skipChangeCommits' to 'true'"
                if not adds
                else "set the option 'skipChangeCommits' to 'true' to skip commits that change existing data"
            )
            problem = (
                f"Detected a data {kind} in the source Delta table {self.options.path} at table version "
                f"{table_version} ({len(removes)} file(s) removed with dataChange=true). The streaming source only "
                f"reads appends; {allow}, or restart the query with a new checkpoint to read the table afresh."
            )
            return VersionChanges(table_version, (), problem=problem)
        return VersionChanges(table_version, tuple(self._data_file(a, table_version) for a in adds))

    def check_metadata(self, table_version: int, metadata: Metadata) -> None:
        new_id = metadata.get("id")
        if new_id is not None and new_id != self.table_id:
            raise SourceOffsetError(
                f"the Delta table at {self.options.path} was replaced at table version {table_version} (table id "
                f"{self.table_id} became {new_id}); start the query with a new checkpointLocation"
            )
        if self.entry is not None:
            return  # schema tracking: a change of schema or partitioning is a barrier (VersionChanges.barrier)
        self._check_mapped_schema(table_version, metadata)
        partitions = tuple(metadata.get("partitionColumns") or ())
        if partitions != self.scan.partition_columns:
            raise SourceOffsetError(
                f"the partition columns of {self.options.path} changed at table version {table_version} "
                f"({list(self.scan.partition_columns)} -> {list(partitions)}); the stream cannot read across that "
                "change: restart the query with a new checkpointLocation"
            )
        try:
            fields = json.loads(metadata.get("schemaString") or "{}").get("fields", [])
        except json.JSONDecodeError as err:
            raise DeltaLogError(
                f"{self.options.path}: the schemaString of table version {table_version} is not valid JSON"
            ) from err
        problems = []
        names = set()
        for field in fields:
            names.add(field["name"].lower())
            read = self.read_fields.get(field["name"].lower())
            if read is not None and _type_shape(read["type"]) != _type_shape(field["type"]):
                if table_version <= self.table_version and widens_to(field["type"], read["type"]):
                    continue  # an older, narrower type: its files read with the wider type (type widening)
                problems.append(
                    f"column {field['name']!r} changed type: stream reads {json.dumps(read['type'])}, "
                    f"table version {table_version} has {json.dumps(field['type'])}"
                )
        if table_version > self.table_version:
            dropped = [f["name"] for name, f in self.read_fields.items() if name not in names]
            if dropped:
                problems.append(f"column(s) {dropped} were dropped or renamed")
        if problems:
            raise SourceOffsetError(
                f"the schema of the source Delta table {self.options.path} changed incompatibly at table version "
                f"{table_version}: {'; '.join(problems)}. Restart the query (with a new checkpointLocation if the "
                "old data cannot be read with the new schema)"
            )
        new_columns = [f["name"] for f in fields if f["name"].lower() not in self.read_fields]
        if new_columns:
            log.warning(
                "Delta stream from %s: table_version %s added column(s) %s; they are not read until the query restarts",
                self.options.path,
                table_version,
                new_columns,
            )

    def _check_mapped_schema(self, table_version: int, metadata: Metadata) -> None:
        """A column-mapped table's rename or drop between the schema the stream reads and ``metadata``'s stops the
        stream with Delta's error for readers without schema tracking
        (``DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE_USE_SCHEMA_LOG``): a field's physical name under another
        logical name (a rename, nested fields too), or a field on one side only that the other side must have had
        (read by the stream but gone later; in an older schema but not read: dropped since)."""
        if configured_mode(metadata.get("configuration") or {}) == "none":
            return
        try:
            fields = json.loads(metadata.get("schemaString") or "{}").get("fields", [])
        except json.JSONDecodeError:
            return  # reported by check_metadata
        read = logical_by_physical(list(self.read_fields.values()))
        data = logical_by_physical(fields)
        renamed = [p for p in read.keys() & data.keys() if read[p] != data[p]]
        gone = [p for p in read if p not in data] if table_version > self.table_version else []
        dropped = [p for p in data if p not in read] if table_version <= self.table_version else []
        if not (renamed or gone or dropped):
            return
        read_schema = json.dumps({"type": "struct", "fields": list(self.read_fields.values())}, separators=(",", ":"))
        data_schema = json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))
        raise SourceOffsetError(
            "[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE_USE_SCHEMA_LOG] Streaming read is not supported on tables "
            "with read-incompatible schema changes (e.g. rename or drop or datatype changes).\nPlease provide a "
            "'schemaTrackingLocation' to enable non-additive schema evolution for Delta stream processing.\nSee "
            "https://docs.delta.io/latest/versioning.html#column-mapping for more details.\nRead schema: "
            f"{read_schema}. Incompatible data schema: {data_schema}. (source {self.options.path}, table version "
            f"{table_version})"
        )

    def _data_file(self, add: AddFile, table_version: int) -> DataFile:
        raw = str(add["path"])
        fs_path = self.delta_log.data_file_fs_path(raw)
        if fs_path is None:
            raise UnsupportedFeatureError(
                f"table version {table_version} of {self.options.path} adds {raw}, which is outside the table's "
                "store; the streaming source reads files under the table root only"
            )
        values = add.get("partitionValues") or {}
        typed = {}
        for name in self.scan.partition_columns:
            physical = self.scan.physical_names.get(name, name)
            raw_value = values.get(physical, values.get(name))
            typed[name] = _partition_value(raw_value, self.scan.output.field(name).type, table_version, raw)
        descriptor = add.get("deletionVector")
        dv = None
        if isinstance(descriptor, dict):
            dv = DeletionVector.from_action(descriptor, self.delta_log.location, data_file=fs_path)
        modified = add.get("modificationTime")
        return DataFile(
            fs_path,
            int(add.get("size") or 0),
            typed,
            table_version,
            dv,
            modification_time=None if modified is None else int(modified),
            action=add,
        )


def tracked_entry(options: StreamReadOptions, table_id: str) -> PersistedMetadata | None:
    """The newest entry of the stream's schema log: the metadata it reads with (None: no ``schemaTrackingLocation``,
    or an empty log), after Delta's look-ahead over consecutive metadata-only commits (which, when it finds some,
    writes their merged entry in place of the newest). Runs on the driver (or the Python source's worker) when the
    stream is defined."""
    if options.schema_tracking_location is None:
        return None
    folder = log_folder(options.schema_tracking_location, table_id, options.source_tracking_id)
    schema_log = SchemaLog(folder, table_id, storage_options=options.location.options())
    latest = schema_log.latest()
    if latest is None:
        return None
    merged = merged_consecutive(latest[1], DeltaLog(options.location))
    if merged is None:
        return latest[1]
    return schema_log.append(merged, replace_current=True)


def entry_schema(entry: PersistedMetadata) -> StructType:
    """The Spark schema a stream reads with under a schema log entry: its data schema, column comments kept and
    Delta's own field metadata (column mapping, type changes) left out, as a read of the table shows it."""

    def plain(kind: Any) -> Any:
        if isinstance(kind, dict):
            if kind.get("type") == "struct":
                return {**kind, "fields": [field(f) for f in kind.get("fields") or []]}
            if kind.get("type") == "array":
                return {**kind, "elementType": plain(kind.get("elementType"))}
            if kind.get("type") == "map":
                return {**kind, "keyType": plain(kind.get("keyType")), "valueType": plain(kind.get("valueType"))}
        return kind

    def field(f: Mapping[str, Any]) -> dict[str, Any]:
        comment = (f.get("metadata") or {}).get("comment")
        return {**f, "type": plain(f["type"]), "metadata": {} if comment is None else {"comment": comment}}

    return StructType.fromJson({"type": "struct", "fields": [field(f) for f in entry.fields]})


def same_columns(a: StructType, b: StructType) -> bool:
    """True when two schemas have the same columns by name and type (order, nullability and metadata aside: the
    native source lists partition columns last)."""

    def key(schema: StructType) -> list[tuple[str, str]]:
        return sorted((f.name.lower(), f.dataType.simpleString()) for f in schema.fields)

    return key(a) == key(b)


def tracked_schema(options: Mapping[str, str]) -> StructType | None:
    """The schema of ``readStream.format("delta")`` under schema tracking (the schema log's newest entry), None
    when the stream has no ``schemaTrackingLocation`` or its log is empty (then the table's latest schema is the
    stream's, as in Delta). Runs where Spark asks a data source for its schema."""
    from sparkonce.delta.log.table_view import existing_table

    parsed = StreamReadOptions.parse(options)
    if parsed.schema_tracking_location is None:
        return None
    entry = tracked_entry(parsed, str(existing_table(parsed.location).metadata().id))
    return None if entry is None else entry_schema(entry)


def start_schema_tracking(
    options: Mapping[str, str],
    *,
    checkpoint: str,
    source_index: int,
    stream_schema: StructType,
    confs: Mapping[str, str],
) -> None:
    """What Delta checks when a query with a ``schemaTrackingLocation`` starts (``DeltaAnalysis`` and
    ``DeltaDataSource.createSource``), before any batch: the location is under the checkpoint, the log belongs to
    this source, and a non-additive change the log took last is unblocked; an empty log takes its first entry here
    (the schema of the table version the query reads first), naming the source's checkpoint folder. Runs on the
    driver, in ``writeStream.start()``.

    Args:
        options: The source's options.
        checkpoint: The query's checkpoint location.
        source_index: The source's position among the query's sources (its ``sources/<i>`` folder).
        stream_schema: The schema the stream was defined with (``readStream...load()``), change feed columns left out.
        confs: The session's SQL confs that unblock changes (only those keys are read).

    Raises:
        OptionError: the location is not under the checkpoint location.
        SchemaTrackingError: Delta's errors (a change to unblock, a log of another source, the first entry's schema is
            not the stream's: restart).
    """
    from sparkonce.delta.table.schema_log import (
        ALLOW_OUTSIDE_CHECKPOINT_CONF,
        check_unblocked,
        check_under_checkpoint,
        source_metadata_path,
    )

    parsed = StreamReadOptions.parse(options)
    root = parsed.schema_tracking_location
    if root is None:
        return
    delta_log = DeltaLog(parsed.location)
    latest_version = delta_log.latest_version()
    table = delta_log.snapshot(latest_version)
    table_id = str(table.metadata.get("id"))
    folder = log_folder(root, table_id, parsed.source_tracking_id)
    if str(confs.get(ALLOW_OUTSIDE_CHECKPOINT_CONF, "false")).strip().lower() != "true":
        check_under_checkpoint(folder, checkpoint)
    schema_log = SchemaLog(folder, table_id, storage_options=parsed.location.options())
    metadata_path = source_metadata_path(checkpoint, source_index)
    latest = schema_log.latest()
    if latest is None:
        version = _first_tracked_version(parsed, delta_log, latest_version, checkpoint, source_index)
        state = table if version == latest_version else delta_log.snapshot(version)
        entry = PersistedMetadata.of(table_id, version, state.metadata, state.protocol, metadata_path)
        schema_log.append(entry)
        if not same_columns(entry_schema(entry), stream_schema):
            raise SchemaTrackingError(evolution_message(entry))
        return
    _, current = latest
    if current.source_metadata_path and current.source_metadata_path != metadata_path:
        raise SchemaTrackingError(
            f"The Delta source metadata path used for execution '{metadata_path}' is different from the one "
            f"persisted for previous processing '{current.source_metadata_path}'. Please check if the schema location "
            "has been reused across different streaming sources. Pick a new `schemaTrackingLocation` or use "
            "`streamingSourceTrackingId` to distinguish between streaming sources."
        )
    if not same_columns(entry_schema(current), stream_schema):
        raise SchemaTrackingError(
            f"the stream from {parsed.path} was defined (readStream...load) with the schema "
            f"{stream_schema.simpleString()}, but its schema log {folder} now reads with "
            f"{entry_schema(current).simpleString()} (table version {current.delta_commit_version}): define the "
            "stream again before starting it"
        )
    previous = schema_log.previous()
    if previous is not None:
        check_unblocked(previous, current, options=options, confs=confs, metadata_path=metadata_path)


def _first_tracked_version(
    options: StreamReadOptions, delta_log: DeltaLog, latest: int, checkpoint: str, source_index: int
) -> int:
    """The table version whose metadata an empty schema log starts with: the end of the last batch planned in the
    checkpoint (a query that ran without schema tracking: Delta's ``endVersionForMetadataLogInit``), else the first
    table version the query reads (``startingVersion``, ``startingTimestamp``, or the latest snapshot)."""
    from sparkonce.checkpoint.reader import read_checkpoint
    from sparkonce.errors import CheckpointError

    try:
        state = read_checkpoint(checkpoint, read_sources=False, newest_batches=1)
    except CheckpointError:
        state = None
    last = None if state is None else state.last_planned
    if state is not None and last is not None and last in state.offsets:
        end = state.offsets[last].source_offset(str(source_index))
        if isinstance(end, dict) and type(end.get("reservoirVersion")) is int:
            version = int(end["reservoirVersion"]) - (1 if end.get("index") == BASE_INDEX else 0)
            return max(0, min(version, latest))
    if isinstance(options.starting_version, int):
        return min(options.starting_version, latest)
    if options.starting_timestamp is not None:
        millis = options.starting_timestamp.timestamp() * 1000
        return next((v for v, ts in delta_log.commit_timestamps() if ts >= millis), latest)
    return latest


def check_source_protocol(table_version: int, protocol: Protocol, path: str) -> None:
    """Stop a Delta stream at a commit whose protocol needs a reader feature sparkonce cannot honour. Runs on the
    driver."""
    features = set(protocol.get("readerFeatures") or [])
    unsupported = sorted(features - SUPPORTED_READER_FEATURES)
    if unsupported or int(protocol.get("minReaderVersion", 1)) > 3:
        raise UnsupportedFeatureError(
            f"the Delta table at {path} was upgraded at table version {table_version} to reader version "
            f"{protocol.get('minReaderVersion')} with feature(s) {unsupported} that sparkonce cannot honour"
        )


def _check_resolved_types(
    schema: StructType, fields: Sequence[Mapping[str, Any]], path: str, table_version: int
) -> None:
    """The query's columns (the schema Spark resolved when the stream was defined) against the table's now: a
    column whose type changed since (an ``ALTER COLUMN ... TYPE``) stops the query before any file is read, as
    Delta's source without a ``schemaTrackingLocation`` stops.

    Raises:
        SourceOffsetError: naming the column, the type the query reads and the table's.
    """
    resolved = {str(f["name"]).lower(): f["type"] for f in schema.jsonValue()["fields"]}
    problems = [
        f"column {f['name']!r} changed type: stream reads {json.dumps(resolved[str(f['name']).lower()])}, "
        f"table version {table_version} has {json.dumps(f['type'])}"
        for f in fields
        if str(f["name"]).lower() in resolved
        and _type_shape(resolved[str(f["name"]).lower()]) != _type_shape(f["type"])
    ]
    if problems:
        raise SourceOffsetError(
            f"the schema of the source Delta table {path} changed incompatibly since the stream was defined: "
            f"{'; '.join(problems)}. Define the stream again (readStream) to read the table's new schema"
        )


def _type_shape(delta_type: Any) -> Any:
    """A Delta type's JSON without nullability and metadata (what values fit)."""
    if isinstance(delta_type, dict):
        kind = delta_type.get("type")
        if kind == "struct":
            return ("struct", tuple((f["name"].lower(), _type_shape(f["type"])) for f in delta_type["fields"]))
        if kind == "array":
            return ("array", _type_shape(delta_type["elementType"]))
        if kind == "map":
            return ("map", _type_shape(delta_type["keyType"]), _type_shape(delta_type["valueType"]))
    return delta_type


def _partition_value(raw: str | None, type_: pa.DataType, table_version: int, path: str) -> Any:
    """Turn a serialized ``partitionValues`` entry (PROTOCOL.md "Partition Value Serialization") into a value."""
    if raw is None or (raw == "" and not pa.types.is_string(type_)):
        return None
    try:
        if pa.types.is_timestamp(type_):
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if type_.tz is not None and value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            return value
        if pa.types.is_binary(type_):
            return raw.encode("utf-8")
        return pa.array([raw]).cast(type_).to_pylist()[0]
    except (ValueError, pa.ArrowInvalid) as err:
        raise DeltaLogError(
            f"table version {table_version}: partition value {raw!r} of {path} is not a valid {type_}"
        ) from err


__all__ = [
    "BASE_INDEX",
    "DeltaSourceOffset",
    "DeltaStreamReader",
    "Position",
    "StreamPartition",
    "VersionChanges",
    "check_source_protocol",
    "entry_schema",
    "same_columns",
    "start_schema_tracking",
    "tracked_entry",
    "tracked_schema",
]
