"""The change data feed as a stream: ``spark.readStream.format("delta").option("readChangeFeed", "true")``.

The Delta streaming source (:mod:`sparkonce.delta.read.stream`) with change rows instead of added files, following
Delta's ``DeltaSourceCDCSupport``: the same offsets (``reservoirVersion``, ``index``, ``isStartingVersion``), the
same unresolved initial offset, the same ``startingVersion``/``startingTimestamp`` and availableNow handling.

- Without ``startingVersion``/``startingTimestamp`` the stream first reads the snapshot of the table version fixed
  by batch 0's end, every row as an ``insert`` whose ``_commit_version`` is that table version (one offset
  position per snapshot file, admitted file by file), then the changes of every later commit.
- Each commit's change rows come from :func:`sparkonce.delta.read.changes.commit_changes` (its ``cdc`` files, else
  its data changing adds and removes). Admission follows Delta's ``IndexedChangeFileSeq.filterFiles``: a commit
  with change data files, or whose adds/removes carry deletion vectors, is **one** offset position, admitted
  whole, never split across batches (the first commit of a batch whatever ``maxFilesPerTrigger`` or
  ``maxBytesPerTrigger`` say; a later one only when all its files and bytes fit in what the batch has left, as
  Delta's ``AdmissionLimits.admit(Seq)``); plain adds and removes (appends, whole-file deletes) are admitted file
  by file like the plain source, so an offset may point inside such a commit: ``(v, i, false)``; its removes come
  before its adds (Delta keeps log order), so a key that an overwrite rewrites, split across batches, is deleted
  before it is upserted again. A batch ending
  on a commit's last file ends at ``(v + 1, -1, false)`` (Delta keeps ``(v, last index, false)`` after a change
  data commit; both are read here as "commit v done").
- Commits that change no data (OPTIMIZE, ``dataChange = false``; a MERGE that changed no row) give nothing.
- ``skipChangeCommits`` and ``ignoreDeletes`` do not apply: updates and deletes are what the feed delivers.
- The feed must be on at the first table version read (``DELTA_MISSING_CHANGE_DATA`` otherwise); a commit that
  turns it off, replaces the table, changes partition columns or changes the schema incompatibly stops the
  stream with an error naming the table version, as the plain source does.

Commits are immutable, so a batch re-run after a crash plans the same change files: with an idempotent sink
(sparkonce's Delta sink, whose ``txn`` skips a batch already committed) each change row lands exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from sparkonce.delta.read.changes import (
    ChangeFile,
    ChangesPartition,
    change_scan,
    commit_changes,
    plan_tasks,
    read_changes,
    require_feed_on,
)
from sparkonce.delta.read.reader import ScanSchema
from sparkonce.delta.read.stream import (
    BASE_INDEX,
    DeltaSourceOffset,
    DeltaStreamReader,
    Position,
    check_source_protocol,
)
from sparkonce.delta.table.options import StreamReadOptions
from sparkonce.delta.table.schema_log import METADATA_CHANGE_INDEX
from sparkonce.delta.write.cdf import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
from sparkonce.errors import DeltaLogError, SourceOffsetError

log = logging.getLogger(__name__)

_FEED_COLUMNS = (CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN)


class ChangeStreamPartition(ChangesPartition):
    """A task of a change feed micro-batch: change files plus how to read them (built on the driver, pickled to
    executors, whose reader instance has done no I/O)."""

    def __init__(self, files: list[ChangeFile], scan: ScanSchema, output: pa.Schema) -> None:
        super().__init__(files)
        self.scan = scan
        self.output = output


class ChangeFeedStreamReader(DeltaStreamReader):
    """The change data feed streaming source. Planning runs on the driver; ``read`` on executors.

    Args:
        options: The parsed ``readStream`` options.
        schema: The stream's schema: the table's columns, then ``_change_type``, ``_commit_version``,
            ``_commit_timestamp``.
    """

    def __init__(self, options: StreamReadOptions, schema: StructType) -> None:
        from sparkonce.delta.table.schema import arrow_schema_for_spark

        super().__init__(options, StructType([f for f in schema.fields if f.name not in _FEED_COLUMNS]))
        self.output = arrow_schema_for_spark(schema)
        self._commits: dict[int, tuple[ChangeFile, ...]] = {}
        self._checked_start: int | None = None

    # ------------------------------------------------------------------ driver
    def commit(self, end: dict[str, Any]) -> None:  # driver, after Spark's checkpoint commit
        super().commit(end)
        done = DeltaSourceOffset.from_json(end).reservoir_version
        for table_version in [v for v in self._commits if v < done]:
            del self._commits[table_version]

    def _positions(self, start: DeltaSourceOffset, last_version: int) -> Iterator[Position]:
        """Yield the positions strictly after ``start`` through ``last_version``: snapshot files one by one, then
        each commit's change files as one position."""
        state = self._table()
        version = start.reservoir_version
        if start.is_starting_version or version <= last_version:  # else nothing to read (the version may not exist)
            self._require_feed_on(version)
        if start.is_starting_version:
            snapshot = state.snapshot_files(version)
            timestamp = self._timestamp(version)
            for i in range(start.index + 1, len(snapshot)):
                change = ChangeFile(snapshot[i], "insert", version, timestamp)
                yield Position((version, i), True, (change,), snapshot[i].size, i == len(snapshot) - 1)
            version += 1
            first_index = BASE_INDEX
        else:
            first_index = BASE_INDEX if start.is_barrier else start.index
        while version <= last_version:
            if state.barrier_at(version) and (version, METADATA_CHANGE_INDEX) > start.key:
                yield Position((version, METADATA_CHANGE_INDEX), False, (), 0, False, barrier=True)
            files = self._commit_files(version)
            if files and _admitted_whole(files):
                if BASE_INDEX < first_index < len(files) - 1:
                    raise SourceOffsetError(
                        f"change data feed offset {start.to_json()} of {self.options.path} points inside the "
                        f"changes of table version {version}, which are read whole (change data files or deletion "
                        "vectors), so no offset of this source does: was the checkpoint written by a plain (not "
                        "readChangeFeed) Delta stream?"
                    )
                if first_index == BASE_INDEX:
                    size = sum(f.data_file.size for f in files)
                    yield Position((version, len(files) - 1), False, files, size, True, whole=True)
            else:
                # Deletes first: a key an overwrite rewrites, split across batches, is deleted then upserted, so a
                # consumer applying each batch by key (a changes-fed merge stage) ends with the commit's state.
                files = tuple(sorted(files, key=lambda f: f.kind != "delete"))
                for i in range(first_index + 1, len(files)):
                    yield Position((version, i), False, (files[i],), files[i].data_file.size, i == len(files) - 1)
            version += 1
            first_index = BASE_INDEX

    def _log_batch(self, files: list[Any], begin: DeltaSourceOffset, finish: DeltaSourceOffset) -> None:
        changes: list[ChangeFile] = list(files)
        if changes:
            log.info(
                "change data feed stream from %s: planned %d file(s), %d byte(s) of table_version %s..%s "
                "between %s and %s",
                self.options.path,
                len(changes),
                sum(f.data_file.size for f in changes),
                changes[0].table_version,
                changes[-1].table_version,
                begin.key,
                finish.key,
            )

    def _tasks(self, files: list[Any]) -> list[InputPartition]:
        changes = [replace(f, data_file=replace(f.data_file, action=None)) for f in files]
        scan = change_scan(self._table().scan)
        return [ChangeStreamPartition(p.files, scan, self.output) for p in plan_tasks(changes)]

    def _require_feed_on(self, table_version: int) -> None:
        """The feed must be on at the first table version the stream reads (checked once per driver life)."""
        if self._checked_start is not None and self._checked_start <= table_version:
            return
        delta_log = self._table().delta_log
        require_feed_on(
            delta_log, table_version, end=delta_log.latest_version(), table=self.options.path, option=self._option()
        )
        self._checked_start = table_version

    def _commit_files(self, table_version: int) -> tuple[ChangeFile, ...]:
        cached = self._commits.get(table_version)
        if cached is not None:
            return cached
        state = self._table()
        actions = state.read_commit(table_version, stream="the change data feed stream")
        state.note_metadata(table_version, actions)
        for action in actions:
            if "metaData" in action:
                state.check_metadata(table_version, action["metaData"])
            elif "protocol" in action:
                check_source_protocol(table_version, action["protocol"], self.options.path)
        scan = state.scan
        names = {scan.physical_names.get(c, c): c for c in scan.partition_columns}
        commit = commit_changes(
            state.delta_log,
            table_version,
            actions,
            start=self._checked_start if self._checked_start is not None else table_version,
            end=table_version,
            table=self.options.path,
            option=self._option(),
            partition_names=names,
        )
        self._commits[table_version] = commit.files
        return commit.files

    def _timestamp(self, table_version: int) -> int:
        """The commit timestamp of ``table_version`` in milliseconds (``_commit_timestamp`` of snapshot rows)."""
        delta_log = self._table().delta_log
        try:
            return delta_log.commit_entry(table_version).timestamp_ms or 0
        except DeltaLogError:  # the commit file was cleaned up; a checkpoint still names the table version
            return dict(delta_log.commit_timestamps()).get(table_version, 0)

    def _option(self) -> str:
        return "startingTimestamp" if self.options.starting_timestamp is not None else "startingVersion"

    # ------------------------------------------------------------------ executors
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        if isinstance(partition, ChangeStreamPartition):
            yield from read_changes(partition.files, partition.scan, self.options.location, partition.output)


def _admitted_whole(files: tuple[ChangeFile, ...]) -> bool:
    """Delta's ``IndexedChangeFileSeq.filterFiles``: a commit's change data files, or its adds and removes when
    one carries a deletion vector, are admitted whole (an update's pre- and post-images, a deletion vector's old
    and new state, stay in one batch); plain adds and removes are admitted file by file."""
    return any(
        f.kind == "cdc" or f.data_file.deletion_vector is not None or f.data_file.selected_rows is not None
        for f in files
    )


__all__ = ["ChangeFeedStreamReader", "ChangeStreamPartition"]
