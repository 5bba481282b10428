"""Driver side: a table's state, from sparkonce's own log reader, kept between batches: the one door to it.

:func:`existing_table` (and :func:`current_table`, None when there is no table) is how sparkonce asks for a table's
state: a :class:`LogTable` over a :class:`~sparkonce.delta.log.delta_log.Snapshot`. :class:`DeltaLog` stays the log
reader below it (listing, commits, history, checkpoints); delta-rs (``sparkonce.delta.txn.commit.load_table``) is
kept for what the log code does not do (docs/architecture.md, "Table state").

A stream commits every few seconds for months; its table grows to 10^5..10^6 table versions. Opening the table
through delta-rs for every batch lists the whole ``_delta_log`` (its cost grows with the log's length). The commit
path reads the table here instead: :func:`current_table` starts from the newest checkpoint (found through
``_last_checkpoint``, :meth:`sparkonce.delta.log.delta_log.DeltaLog.snapshot`) and, in a process that committed to the
table before (a running stream's driver), brings the snapshot it keeps up to date by reading only the Delta commits
after the table version it holds (:meth:`sparkonce.delta.log.delta_log.DeltaLog.update`, Delta's ``update()``).

A stale snapshot is never unsafe: a commit made on it is the put-if-absent of its next table version, which fails
when another writer made that version; the retry reads again (:mod:`sparkonce.delta.txn.commit`).

:class:`LogTable` answers the questions the commit path asks of a table (version, metadata, schema, protocol, txn
versions) with the names delta-rs's ``DeltaTable`` uses, so the checks shared with delta-rs callers
(:func:`sparkonce.delta.writer.check_target`, column mapping, generated columns, constraints) take either.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias

from sparkonce.delta.log.delta_log import DeltaLog, Snapshot
from sparkonce.errors import TableNotFoundError
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from deltalake import DeltaTable, Schema
    from deltalake.table import ProtocolVersions

__all__ = [
    "AnyTable",
    "LogTable",
    "TableMetadata",
    "current_table",
    "existing_table",
    "forget_table",
    "remember_table",
]


@dataclass(frozen=True)
class TableMetadata:
    """A table's ``metaData`` action, with the attribute names of delta-rs's ``Metadata``."""

    id: str
    name: str | None
    description: str | None
    partition_columns: list[str]
    configuration: dict[str, str]
    created_time: int | None


class LogTable:
    """One table version read by sparkonce's log reader, asked what a ``deltalake.DeltaTable`` is asked. Runs on
    the driver."""

    def __init__(self, location: TableLocation, snapshot: Snapshot) -> None:
        self.location = location
        self.snapshot = snapshot

    @property
    def table_uri(self) -> str:
        return self.location.uri

    def version(self) -> int:
        return self.snapshot.table_version

    def metadata(self) -> TableMetadata:
        meta = self.snapshot.metadata
        return TableMetadata(
            id=str(meta.get("id")),
            name=meta.get("name"),
            description=meta.get("description"),
            partition_columns=list(meta.get("partitionColumns") or []),
            configuration={str(k): str(v) for k, v in (meta.get("configuration") or {}).items() if v is not None},
            created_time=meta.get("createdTime"),
        )

    @cached_property
    def _schema(self) -> Schema:
        from deltalake import Schema

        return Schema.from_json(str(self.snapshot.metadata.get("schemaString") or '{"type":"struct","fields":[]}'))

    def schema(self) -> Schema:
        """The table schema as delta-rs's ``Schema`` (built from ``schemaString``; no log access)."""
        return self._schema

    def schema_fields(self) -> list[dict[str, Any]]:
        """The ``fields`` of ``schemaString``."""
        return list(json.loads(str(self.snapshot.metadata.get("schemaString") or "{}")).get("fields") or [])

    def protocol(self) -> ProtocolVersions:
        from deltalake.table import ProtocolVersions

        protocol = self.snapshot.protocol
        return ProtocolVersions(
            min_reader_version=int(protocol.get("minReaderVersion", 1)),
            min_writer_version=int(protocol.get("minWriterVersion", 2)),
            writer_features=list(protocol["writerFeatures"]) if "writerFeatures" in protocol else None,
            reader_features=list(protocol["readerFeatures"]) if "readerFeatures" in protocol else None,
        )

    def transaction_version(self, app_id: str) -> int | None:
        """The table's ``txn_version`` of ``app_id`` (from the checkpoint's ``txn`` rows and later commits)."""
        return self.snapshot.txn_version(app_id)


AnyTable: TypeAlias = "DeltaTable | LogTable"
"""A table loaded by delta-rs or read by :class:`LogTable`: what the checks shared by both take."""

_KEPT = 64
"""Tables whose snapshot a process keeps (least recently used dropped first)."""
_snapshots: OrderedDict[TableLocation, tuple[Snapshot, tuple[int, int] | None]] = OrderedDict()
"""Per table: the snapshot held and the (size, mtime) of its table version's commit file when it was read, which
tells a table replaced at the same place (a new log, whose commit of that table version is another file)."""
_lock = threading.Lock()


def current_table(table: str | TableLocation) -> LogTable | None:
    """The table at its latest table version, or None when there is no table (no commit and no checkpoint).

    Reads only the commits after the snapshot this process holds for the table, when it holds one; else starts
    from the newest checkpoint. Runs on the driver; safe from several threads (each query's commit runs on its own).

    Raises:
        DeltaLogError: the log cannot be read.
        StorageError: the store cannot be reached.
    """
    location = table_location(table)
    with _lock:
        held = _snapshots.get(location)
    try:
        delta_log = DeltaLog(location)
    except TableNotFoundError:
        forget_table(location)
        return None
    if held is not None and held[1] is not None and delta_log.commit_stamp(held[0].table_version) == held[1]:
        snapshot = delta_log.update(held[0])
    else:
        snapshot = delta_log.snapshot()
    _keep(location, snapshot, delta_log.commit_stamp(snapshot.table_version))
    return LogTable(location, snapshot)


def existing_table(table: str | TableLocation, *, table_version: int | None = None) -> LogTable:
    """The one door to a table's state: the table at its latest table version (:func:`current_table`, kept between
    calls) or at ``table_version``, for a table that must exist. Unlike delta-rs, it opens a table whose protocol
    names features delta-rs does not know (Delta's test features, newer reader features). Runs on the driver.

    Raises:
        TableNotFoundError: no Delta table there.
        VersionNotFoundError: ``table_version`` is beyond the latest or was removed by log cleanup.
        DeltaLogError: the log cannot be read.
        StorageError: the store cannot be reached.
    """
    if table_version is not None:
        location = table_location(table)
        return LogTable(location, DeltaLog(location).snapshot(table_version))
    found = current_table(table)
    if found is None:
        raise TableNotFoundError(f"{table_location(table)} is not a Delta table (no _delta_log commits found)")
    return found


def _keep(location: TableLocation, snapshot: Snapshot, stamp: tuple[int, int] | None) -> None:
    with _lock:
        kept = _snapshots.get(location)
        if kept is None or kept[0].table_version <= snapshot.table_version:
            _snapshots[location] = (snapshot, stamp)
            _snapshots.move_to_end(location)
            while len(_snapshots) > _KEPT:
                _snapshots.popitem(last=False)


def remember_table(table: str | TableLocation, snapshot: Snapshot) -> None:
    """Keep ``snapshot`` as this process's snapshot of ``table`` (the state after a commit this process made), when
    it is newer than the one held."""
    location = table_location(table)
    stamp = DeltaLog(location, check=False).commit_stamp(snapshot.table_version)
    _keep(location, snapshot, stamp)


def forget_table(table: str | TableLocation) -> None:
    """Drop the snapshot this process holds for ``table`` (the table was removed or replaced)."""
    with _lock:
        _snapshots.pop(table_location(table), None)
