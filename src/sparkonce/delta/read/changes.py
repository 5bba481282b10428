"""Change data feed, read side: ``spark.read.format("delta").option("readChangeFeed", "true")``.

The driver plans, executors read. :func:`plan_changes` maps a range of table versions to the files holding each
commit's change rows, following Delta's ``CDCReader``:

* the range must start at a table version whose table has the change data feed on (``DELTA_MISSING_CHANGE_DATA``
  otherwise, even when that version carries no ``metaData`` action), and no commit in it may turn the feed off;
* a commit with ``cdc`` actions: its change data files, whose rows carry ``_change_type``;
* any other commit: its ``add`` files (``dataChange = true``) as ``insert`` rows and its ``remove`` files
  (``dataChange = true``) as ``delete`` rows, each with its deletion vector applied; a file removed and re-added
  in one commit with another deletion vector gives the rows the new vector deletes as ``delete`` (and the rows it
  restores as ``insert``); a MERGE whose metrics say it changed no row gives none.

Every change row gets ``_commit_version`` (long) and ``_commit_timestamp`` (timestamp: the commit's in-commit
timestamp, else its ``commitInfo.timestamp``, else the commit file's time, as history shows it). The plan is the
unit the streaming source (:mod:`sparkonce.delta.read.change_stream`) reuses: a list of :class:`ChangeFile` per table
version, in commit order (:func:`commit_changes`, one commit at a time).

Why one module of ~550 lines: planning and reading the change data feed share one classification of each commit's
files (cdc files, else adds and removes, deletion-vector diffs), which both the batch read and the stream use.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from sparkonce.delta.log.actions import Action
from sparkonce.delta.log.paths import data_file_uri, require_fs_path
from sparkonce.delta.read.reader import DataFile, ScanSchema, read_files
from sparkonce.delta.table.deletion_vectors import DeletionVector
from sparkonce.delta.write.cdf import (
    CDF_PROPERTY,
    CHANGE_TYPE_COLUMN,
    COMMIT_TIMESTAMP_COLUMN,
    COMMIT_VERSION_COLUMN,
    cdf_enabled,
)
from sparkonce.errors import DataFileMissingError, OptionError
from sparkonce.options import get_bool, get_int, get_str, lookup
from sparkonce.storage import TableLocation, storage_options_from, table_location

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from sparkonce.delta.log.delta_log import DeltaLog

log = logging.getLogger(__name__)

READ_CHANGE_FEED_OPTION = "readChangeFeed"
FileKind = Literal["cdc", "insert", "delete"]
_TARGET_TASK_BYTES = 128 * 1024 * 1024


def is_change_feed_read(options: Mapping[str, str]) -> bool:
    """True when the options ask for the change data feed (``readChangeFeed``, or Delta's older name
    ``readChangeData``)."""
    return get_bool(options, READ_CHANGE_FEED_OPTION, False) or get_bool(options, "readChangeData", False)


@dataclass(frozen=True)
class ChangeFeedOptions:
    """The options of a batch change data feed read (Delta's names; both bounds inclusive). Runs on the driver."""

    path: str
    location: TableLocation
    starting_version: int | None
    starting_timestamp: dt.datetime | None
    ending_version: int | None
    ending_timestamp: dt.datetime | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ChangeFeedOptions:
        """Raises:
        OptionError: no start, two starts or two ends, a malformed value, or time travel options (which a
            change data feed read does not take)."""
        from sparkonce.delta.table.options import parse_timestamp, table_path

        for travel in ("versionAsOf", "timestampAsOf"):
            if lookup(options, travel) is not None:
                raise OptionError(travel, lookup(options, travel), f"cannot be combined with {READ_CHANGE_FEED_OPTION}")
        start_version = get_int(options, "startingVersion", None, minimum=0)
        start_ts = get_str(options, "startingTimestamp")
        end_version = get_int(options, "endingVersion", None, minimum=0)
        end_ts = get_str(options, "endingTimestamp")
        if start_version is None and start_ts is None:
            raise OptionError(
                "startingVersion",
                None,
                "[DELTA_NO_START_FOR_CDC_READ] No startingVersion or startingTimestamp provided for CDC read.",
            )
        if start_version is not None and start_ts is not None:
            raise OptionError("startingTimestamp", start_ts, "cannot be combined with startingVersion; give one")
        if end_version is not None and end_ts is not None:
            raise OptionError("endingTimestamp", end_ts, "cannot be combined with endingVersion; give one")
        path = table_path(options)
        return cls(
            path,
            table_location(path, storage_options=storage_options_from(options)),
            start_version,
            parse_timestamp("startingTimestamp", start_ts) if start_ts else None,
            end_version,
            parse_timestamp("endingTimestamp", end_ts) if end_ts else None,
        )

    def describe(self) -> str:
        """The range as the options gave it, for messages."""
        start = (
            f"startingVersion={self.starting_version}"
            if self.starting_version is not None
            else f"startingTimestamp={_iso(self.starting_timestamp)}"
        )
        if self.ending_version is not None:
            return f"{start}, endingVersion={self.ending_version}"
        if self.ending_timestamp is not None:
            return f"{start}, endingTimestamp={_iso(self.ending_timestamp)}"
        return start


def _iso(when: dt.datetime | None) -> str:
    return "" if when is None else when.isoformat()


@dataclass(frozen=True)
class ChangeFile:
    """One file of a commit's change rows, as executors read it."""

    data_file: DataFile
    kind: FileKind
    """``cdc``: a change data file (its rows carry ``_change_type``); ``insert``/``delete``: every row read is one."""
    table_version: int
    timestamp_ms: int


@dataclass(frozen=True)
class CommitChanges:
    """The change files of one commit."""

    table_version: int
    timestamp_ms: int
    files: tuple[ChangeFile, ...]


@dataclass(frozen=True)
class ChangePlan:
    """The change files of a range of table versions, commit by commit. Runs on the driver."""

    start: int
    end: int
    commits: tuple[CommitChanges, ...]

    @property
    def files(self) -> list[ChangeFile]:
        return [f for c in self.commits for f in c.files]


def resolve_range(options: ChangeFeedOptions, delta_log: DeltaLog) -> tuple[int, int]:
    """``(start, end)`` table versions of the options, bounds inclusive; an end beyond the latest table version
    means the latest, as in Delta. Runs on the driver.

    Raises:
        OptionError: a start after the latest table version or after the last commit's timestamp, an end before
            the first commit's timestamp, an end before the start (Delta's error names and wording).
    """
    latest = delta_log.latest_version()
    table = options.path
    stamps: list[tuple[int, int]] = []
    if options.starting_timestamp is not None or options.ending_timestamp is not None:
        stamps = list(delta_log.commit_timestamps())
    start = options.starting_version
    if options.starting_timestamp is not None:
        millis = options.starting_timestamp.timestamp() * 1000
        after = [v for v, ts in stamps if ts >= millis]
        if not after:
            last = dt.datetime.fromtimestamp(stamps[-1][1] / 1000, dt.UTC).isoformat() if stamps else "none"
            raise OptionError(
                "startingTimestamp",
                _iso(options.starting_timestamp),
                f"[DELTA_TIMESTAMP_GREATER_THAN_COMMIT] Timestamp {_iso(options.starting_timestamp)} is after the "
                f"table's latest version ({last}) of {table}. Use a timestamp at or before {last}.",
            )
        start = after[0]
    assert start is not None
    if start > latest:
        raise OptionError(
            "startingVersion",
            start,
            f"[DELTA_CDC_START_VERSION_AFTER_LATEST] Start version {start} for change data feed exceeds the latest "
            f"table version {latest} of {table}.",
        )
    end = latest if options.ending_version is None else min(options.ending_version, latest)
    if options.ending_timestamp is not None:
        millis = options.ending_timestamp.timestamp() * 1000
        before = [v for v, ts in stamps if ts <= millis]
        if not before:
            first = dt.datetime.fromtimestamp(stamps[0][1] / 1000, dt.UTC).isoformat() if stamps else "none"
            raise OptionError(
                "endingTimestamp",
                _iso(options.ending_timestamp),
                f"[DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION] The provided timestamp "
                f"({_iso(options.ending_timestamp)}) is before the earliest version available to {table} ({first}). "
                f"Please use a timestamp after {first}.",
            )
        end = before[-1]
    if end < start:
        option = "endingVersion" if options.ending_version is not None else "endingTimestamp"
        raise OptionError(
            option,
            options.ending_version if options.ending_version is not None else _iso(options.ending_timestamp),
            f"[DELTA_INVALID_CDC_RANGE] CDC range from start {start} to end {end} was invalid. End cannot be before "
            f"start. (table {table}, {options.describe()})",
        )
    return start, end


def plan_changes(
    delta_log: DeltaLog,
    start: int,
    end: int,
    *,
    table: str,
    option: str = "startingVersion",
    partition_names: Mapping[str, str] | None = None,
) -> ChangePlan:
    """The change files of table versions ``start`` to ``end`` (inclusive), in commit order. Runs on the driver.
    ``partition_names``: physical -> logical partition column names of a column-mapped table (the actions key
    ``partitionValues`` by physical name).

    Raises:
        OptionError: the table does not have the change data feed on at ``start``, or a commit in the range turns
            it off (``DELTA_MISSING_CHANGE_DATA``), naming ``option``.
        DeltaLogError: a commit of the range is missing from the log (cleaned up) or unreadable.
    """
    require_feed_on(delta_log, start, end=end, table=table, option=option)
    commits = []
    for table_version in range(start, end + 1):
        actions = delta_log.read_actions(table_version)
        commits.append(
            commit_changes(
                delta_log,
                table_version,
                actions,
                start=start,
                end=end,
                table=table,
                option=option,
                partition_names=partition_names,
            )
        )
    return ChangePlan(start, end, tuple(commits))


def commit_changes(
    delta_log: DeltaLog,
    table_version: int,
    actions: Sequence[Action],
    *,
    start: int,
    end: int,
    table: str,
    option: str = "startingVersion",
    partition_names: Mapping[str, str] | None = None,
) -> CommitChanges:
    """The change files of the commit of ``table_version`` (its ``actions``), read as part of the range ``start``
    to ``end`` (for messages). Runs on the driver; the streaming source calls it commit by commit.

    Raises:
        OptionError: the commit turns the change data feed off (``DELTA_MISSING_CHANGE_DATA``), naming ``option``.
    """
    for action in actions:
        if "metaData" in action and not cdf_enabled(action["metaData"].get("configuration") or {}):
            raise _not_recorded(table_version, start, end, table, option)
    timestamp = delta_log.commit_entry(table_version, actions).timestamp_ms or 0
    files = _commit_files(actions, delta_log.location, table_version, timestamp, partition_names or {})
    return CommitChanges(table_version, timestamp, tuple(files))


def require_feed_on(delta_log: DeltaLog, start: int, *, end: int, table: str, option: str) -> None:
    """Refuse a read of the change data feed from ``start`` when the table at ``start`` does not record it.
    Runs on the driver (one snapshot of ``start``).

    Raises:
        OptionError: ``DELTA_MISSING_CHANGE_DATA``, naming ``option`` and the range ``start`` to ``end``.
    """
    if not cdf_enabled(delta_log.snapshot(start).configuration):
        raise _not_recorded(start, start, end, table, option)


def _not_recorded(table_version: int, start: int, end: int, table: str, option: str) -> OptionError:
    return OptionError(
        option,
        start,
        f"[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [{start} , {end}] of {table} as change "
        f"data was not recorded for version [{table_version}]. If you've enabled change data feed on this table, "
        "use `DESCRIBE HISTORY` to see when it was first enabled. Otherwise, to start recording change data, use "
        f"`ALTER TABLE table_name SET TBLPROPERTIES ({CDF_PROPERTY}=true)`.",
    )


def _commit_files(
    actions: Sequence[Mapping[str, Any]],
    location: TableLocation,
    table_version: int,
    timestamp: int,
    partition_names: Mapping[str, str],
) -> list[ChangeFile]:
    """The change files of one commit (Delta's ``CDCReader.changesToDF`` rules, see the module docstring)."""

    def change_file(entry: Mapping[str, Any], kind: FileKind, dv: DeletionVector | None = None) -> ChangeFile:
        fs_path = require_fs_path(location, str(entry["path"]))
        data_file = DataFile(
            fs_path,
            int(entry.get("size") or 0),
            # serialized values: executors cast them to the column's type
            {partition_names.get(k, k): v for k, v in (entry.get("partitionValues") or {}).items()},
            table_version=table_version,
            deletion_vector=dv,
            uri=data_file_uri(location, fs_path),
            action=entry,  # the driver's: the native read lists the file from it (shipped without it)
        )
        return ChangeFile(data_file, kind, table_version, timestamp)

    def vector(entry: Mapping[str, Any]) -> DeletionVector | None:
        descriptor = entry.get("deletionVector")
        if not isinstance(descriptor, dict):
            return None
        return DeletionVector.from_action(descriptor, location, data_file=unquote(str(entry["path"])))

    cdcs = [a["cdc"] for a in actions if isinstance(a.get("cdc"), dict)]
    if cdcs:
        return [change_file(c, "cdc") for c in cdcs]
    info: Mapping[str, Any] = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
    if _merge_without_changes(info):
        return []
    adds = {unquote(a["add"]["path"]): a["add"] for a in actions if isinstance(a.get("add"), dict)}
    removes = {unquote(a["remove"]["path"]): a["remove"] for a in actions if isinstance(a.get("remove"), dict)}
    adds = {p: a for p, a in adds.items() if a.get("dataChange", True)}
    removes = {p: r for p, r in removes.items() if r.get("dataChange", True)}
    files = []
    for path, add in adds.items():
        if path not in removes:
            files.append(change_file(add, "insert", vector(add)))
    for path, remove in removes.items():
        if path not in adds:
            files.append(change_file(remove, "delete", vector(remove)))
            continue
        # The same file removed and re-added with another deletion vector: only the rows whose state changed.
        old, new = vector(remove), vector(adds[path])
        if new is not None:
            deleted = change_file(remove, "delete")
            files.append(replace(deleted, data_file=replace(deleted.data_file, selected_rows=(new, old))))
        if old is not None:
            restored = change_file(adds[path], "insert")
            files.append(replace(restored, data_file=replace(restored.data_file, selected_rows=(old, new))))
    return files


def _merge_without_changes(info: Mapping[str, Any]) -> bool:
    """Delta's ``shouldSkipFileActionsInCommit``: a MERGE whose metrics say it inserted, updated and deleted no
    row has no change rows, whatever files it rewrote."""
    if info.get("operation") != "MERGE":
        return False
    metrics = info.get("operationMetrics") or {}
    keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    return all(str(metrics.get(k)) == "0" for k in keys)


def check_files_present(plan: ChangePlan, location: TableLocation, *, table: str, asked: str) -> None:
    """Refuse, before any task starts, a read whose files VACUUM has removed. Runs on the driver (one metadata
    look-up per file, batched by the file system).

    Raises:
        DataFileMissingError: naming the file, its table version, the table and the options.
    """
    import pyarrow.fs as pafs

    files = plan.files
    if not files:
        return
    infos = location.filesystem().get_file_info([f.data_file.path for f in files])
    for change, info in zip(files, infos):
        if info.type == pafs.FileType.NotFound:
            raise DataFileMissingError(
                f"[DELTA_FILE_NOT_FOUND_DETAILED] {change.data_file.uri or change.data_file.path}: a file of table "
                f"version {change.table_version} of {table}, which the change data feed read ({asked}) needs, "
                "cannot be found: VACUUM removed it (or it was deleted outside Delta). Read from a startingVersion "
                "whose files are still there"
            )


# -- executors ---------------------------------------------------------------------------------------------------


def change_scan(scan: ScanSchema) -> ScanSchema:
    """The scan of change files: the table's columns plus ``_change_type`` (present in change data files only)."""
    output = pa.schema([*scan.output, pa.field(CHANGE_TYPE_COLUMN, pa.string())])
    return replace(scan, output=output)


def change_feed_schema(table_schema: StructType) -> StructType:
    """The rows of a change data feed read: the table's columns, ``_change_type``, ``_commit_version`` (long) and
    ``_commit_timestamp`` (timestamp)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    reserved = [
        c for c in (CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN) if c in table_schema.names
    ]
    if reserved:
        raise OptionError(
            READ_CHANGE_FEED_OPTION,
            "true",
            f"[DELTA_CDC_COLUMNS_IN_DATA] the table has column(s) {reserved}, which the change data feed reserves",
        )
    return StructType(
        [
            *table_schema.fields,
            StructField(CHANGE_TYPE_COLUMN, StringType()),
            StructField(COMMIT_VERSION_COLUMN, LongType()),
            StructField(COMMIT_TIMESTAMP_COLUMN, TimestampType()),
        ]
    )


def read_changes(
    files: Iterable[ChangeFile], scan: ScanSchema, location: TableLocation, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Executor side: the change rows of ``files`` in ``output`` (:func:`change_feed_schema` as Arrow)."""
    change_type_index = scan.output.get_field_index(CHANGE_TYPE_COLUMN)
    timestamp_type = output.field(COMMIT_TIMESTAMP_COLUMN).type
    for change in files:
        when = dt.datetime.fromtimestamp(change.timestamp_ms / 1000, dt.UTC)
        kind = pa.array([change.kind], pa.string())
        table_version = pa.array([change.table_version], pa.int64())
        timestamp = pa.array([when], timestamp_type)
        for batch in read_files([change.data_file], scan, location):
            first = pa.array(np.zeros(batch.num_rows, dtype=np.int32))  # constants: one value taken n times
            columns = list(batch.columns)
            if change.kind != "cdc":
                columns[change_type_index] = kind.take(first)
            columns += [table_version.take(first), timestamp.take(first)]
            yield pa.RecordBatch.from_arrays(columns, schema=output)


@dataclass
class ChangesPartition(InputPartition):
    """A Spark input partition: change files read by one task."""

    files: list[ChangeFile] = field(default_factory=list)

    def __init__(self, files: list[ChangeFile]) -> None:
        super().__init__(None)
        self.files = files


def plan_tasks(files: Sequence[ChangeFile], *, parallelism: int | None = None) -> list[ChangesPartition]:
    """Spread change files over tasks, largest first into the lightest task (as plain reads do)."""
    import os

    if not files:
        return []
    cores = parallelism if parallelism is not None else (os.cpu_count() or 1)
    total = sum(f.data_file.size for f in files)
    tasks = min(len(files), max(cores, -(-total // _TARGET_TASK_BYTES)))
    bins: list[list[ChangeFile]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for change in sorted(files, key=lambda f: (-f.data_file.size, f.table_version, f.data_file.path)):
        lightest = min(range(tasks), key=lambda i: (loads[i], i))
        bins[lightest].append(change)
        loads[lightest] += change.data_file.size
    return [ChangesPartition(b) for b in bins if b]


def plan_change_read(options: ChangeFeedOptions) -> tuple[ChangePlan, ScanSchema]:
    """The change files of a batch read of the feed (range resolved, reader features and the files' presence
    checked), and the scan of the table's latest schema they are read with. Runs on the driver.

    Raises:
        OptionError: the range is wrong or not recorded (Delta's error classes).
        UnsupportedFeatureError: the table needs a reader feature sparkonce cannot honour.
        DataFileMissingError: a change file of the range is gone.
    """
    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.delta.read.reader import check_reader_features, scan_schema
    from sparkonce.delta.txn.commit import load_table

    delta_log = DeltaLog(options.location)
    start, end = resolve_range(options, delta_log)
    table = load_table(options.location)
    check_reader_features(table, options.path)
    option = "startingVersion" if options.starting_version is not None else "startingTimestamp"
    scan = scan_schema(table)
    names = {scan.physical_names.get(c, c): c for c in scan.partition_columns}
    plan = plan_changes(delta_log, start, end, table=options.path, option=option, partition_names=names)
    check_files_present(plan, options.location, table=options.path, asked=options.describe())
    log.info("change data feed of %s, table_version %d to %d: %d file(s)", options.path, start, end, len(plan.files))
    return plan, scan


class ChangeFeedReader(DataSourceReader):
    """Batch reader of the change data feed: plans on the driver (range, files, checks); ``read`` runs on
    executors."""

    def __init__(self, options: ChangeFeedOptions, schema: StructType) -> None:
        from sparkonce.delta.table.schema import arrow_schema_for_spark

        self.options = options
        plan, scan = plan_change_read(options)
        # the reader is shipped to executors with every task: its files without their log actions
        self.files = [replace(f, data_file=replace(f.data_file, action=None)) for f in plan.files]
        self.scan = change_scan(scan)
        self.output = arrow_schema_for_spark(schema)

    def partitions(self) -> Sequence[InputPartition]:  # driver
        return plan_tasks(self.files)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        if isinstance(partition, ChangesPartition):  # Spark plans one empty task when there are no files
            yield from read_changes(partition.files, self.scan, self.options.location, self.output)


def change_feed_table_schema(options: Mapping[str, str]) -> StructType:
    """The schema of a change data feed read of the table (its latest schema), batch or stream (the range is
    checked by the reader). Runs on the driver."""
    from sparkonce.delta.read.reader import check_reader_features, scan_schema
    from sparkonce.delta.table.options import table_path
    from sparkonce.delta.table.schema import spark_schema
    from sparkonce.delta.txn.commit import load_table

    path = table_path(options)
    table = load_table(table_location(path, storage_options=storage_options_from(options)))
    check_reader_features(table, path)
    return change_feed_schema(spark_schema(scan_schema(table).output))


__all__ = [
    "READ_CHANGE_FEED_OPTION",
    "ChangeFeedOptions",
    "ChangeFeedReader",
    "ChangeFile",
    "ChangePlan",
    "ChangesPartition",
    "CommitChanges",
    "change_feed_schema",
    "change_feed_table_schema",
    "commit_changes",
    "check_files_present",
    "is_change_feed_read",
    "plan_change_read",
    "plan_changes",
    "plan_tasks",
    "read_changes",
    "require_feed_on",
    "resolve_range",
]
