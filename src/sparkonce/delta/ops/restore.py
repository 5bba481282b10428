"""``RESTORE``: a table's content back to an earlier table version, in one Delta commit made by the commit engine.

The commit holds what Delta's ``RestoreTableCommand`` writes:

* ``commitInfo``: operation ``RESTORE``, its parameters (``version``; ``timestamp`` and the ``version`` it resolved
  to for a restore to a timestamp), Delta's metrics (``tableSizeAfterRestore``, ``numOfFilesAfterRestore``,
  ``numRemovedFiles``, ``numRestoredFiles``, ``removedFilesSize``, ``restoredFilesSize``), ``isBlindAppend`` false;
* the ``metaData`` of the restored table version (always, as Delta's ``commitLarge`` writes the transaction's
  metadata): the schema, properties, constraints and comment it had;
* an ``add`` (``dataChange`` true) for each file live at the restored table version and not now, and a ``remove``
  (``dataChange`` true, extended file metadata, the deletion vector) for each file live now and not then. A file is
  a path and its deletion vector, as Delta reconciles them: one live in both with another deletion vector is
  removed with the one it has and added with the one it had;
* the ``protocol``: the restored table version's merged with today's (Delta's ``Protocol.merge``), never a
  downgrade, which would break time travel to the versions between.

Before anything is written, every file the commit adds must still be in the store (VACUUM may have deleted it;
Delta's check, skipped with ``spark.sql.files.ignoreMissingFiles``). sparkonce refuses, as before, a restore that
would take identity columns' high-water marks back or change the clustering columns (Delta merges the marks and
restores the clustering domain; sparkonce does neither yet).

The commit goes through the one commit engine (:class:`sparkonce.delta.txn.commit.Transaction`): put-if-absent of
the next table version, the landed-anyway check, backoff and the ``delta_commit`` retry line. The restore read the
whole table and writes its metadata, so by Delta's conflict rules any winner of a lost race that added or removed
files, or changed the metadata or protocol, is a conflict (``ConcurrentAppendError``, ``ConcurrentDeleteReadError``,
``MetadataChangedError``, ``ProtocolChangedError``) and nothing is written; only a winner that changed none of it is
committed on top of. (Delta's restore makes one attempt only and fails any lost race with
``ConcurrentWriteException``.)

Runs on the driver; reads the log and lists data files, reads no data.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkonce._types import TableVersion
from sparkonce.delta.log.actions import Action, AddFile, Protocol
from sparkonce.delta.log.delta_log import DeltaLog, Snapshot, advance
from sparkonce.delta.log.log_entry import Operation, check_writable, commit_info, remove_action
from sparkonce.delta.log.paths import data_file_fs_path
from sparkonce.delta.log.table_view import LogTable, existing_table, remember_table
from sparkonce.delta.log.tombstones import file_key
from sparkonce.delta.table.clustering import clustering_columns
from sparkonce.delta.table.identity import identity_columns
from sparkonce.delta.table.options import parse_timestamp
from sparkonce.delta.table.protocol import merged
from sparkonce.delta.txn.commit import PlannedCommit, Transaction, checkpoint_if_due
from sparkonce.delta.txn.conflicts import ReadSet
from sparkonce.errors import DataFileMissingError, OptionError, UnsupportedFeatureError, analysis_error
from sparkonce.storage import TableLocation, table_location

__all__ = ["RESTORE_METRICS", "RestoreResult", "restore_table"]

log = logging.getLogger(__name__)

OPERATION = "RESTORE"
RESTORE_METRICS = (
    "tableSizeAfterRestore",
    "numOfFilesAfterRestore",
    "numRemovedFiles",
    "numRestoredFiles",
    "removedFilesSize",
    "restoredFilesSize",
)
"""Delta's RESTORE metrics, in the order of the command's output columns."""
MISSING_FILES_SHOWN = 100
"""How many missing files the error names (Delta's "top 100 files")."""


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore_table` committed."""

    table_version: TableVersion
    """The RESTORE commit."""
    restored_table_version: int
    metrics: dict[str, int]
    """Delta's metrics (:data:`RESTORE_METRICS`, in that order)."""


@dataclass(frozen=True)
class _Diff:
    adds: list[AddFile]
    removes: list[AddFile]
    metrics: dict[str, int]


def restore_table(
    table: str | TableLocation,
    *,
    table_version: int | None = None,
    timestamp: str | None = None,
    ignore_missing_files: bool = False,
    max_attempts: int = 100,
) -> RestoreResult:
    """Restore ``table`` to ``table_version``, or to the newest table version committed at or before
    ``timestamp`` (one of the two), in one Delta commit (the module says what it holds). Runs on the driver.

    Raises:
        OptionError: neither or both targets given, or the table version is not an earlier one of the table.
        SqlError: ``timestamp`` is not a timestamp (Delta's ``DELTA_TIMESTAMP_INVALID``, an ``AnalysisException``).
        VersionNotFoundError: the table version is no longer in the log (log cleanup).
        DataFileMissingError: a file to restore is gone from the store (and ``ignore_missing_files`` is False).
        UnsupportedFeatureError: the restore would take identity high-water marks back or change the clustering
            columns, or the table's protocol asks what sparkonce does not do.
        CommitConflictError: a concurrent commit conflicts (its subclass names Delta's exception).
        CommitRetriesExceededError: lost ``max_attempts`` races in a row to commits that did not conflict.
    """
    if (table_version is None) == (timestamp is None):
        raise OptionError("version", table_version, "give a table version or a timestamp to restore to (one of them)")
    location = table_location(table)
    location.check_commit_safety()
    first = existing_table(location)
    latest = first.version()
    delta_log = DeltaLog(location)
    parameters: dict[str, Any]
    if timestamp is not None:
        target = _version_at(delta_log, location, timestamp)
        parameters = {"timestamp": timestamp, "version": str(target)}
    else:
        assert table_version is not None
        target = table_version
        parameters = {"version": str(target)}
    if not 0 <= target < latest:
        resolved = "" if timestamp is None else f" (the timestamp resolves to table version {target})"
        raise OptionError(
            "version" if timestamp is None else "timestamp",
            target if timestamp is None else timestamp,
            f"is not a table version of {location} before its latest ({latest}); RESTORE goes back to one of "
            f"0 to {latest - 1}{resolved}",
        )
    restored = delta_log.snapshot(target)
    read = ReadSet.of_files(
        latest, [(p, a.get("partitionValues") or {}) for p, a in first.snapshot.files.items()], whole_table=True
    )
    transaction = Transaction(
        location,
        what=f"RESTORE to table_version {target}",
        read=read,
        changes_metadata=True,
        max_attempts=max_attempts,
    )
    made: tuple[Snapshot, list[Action], Protocol] | None = None
    """What the last attempt planned on: its snapshot, its actions and the protocol it wrote."""
    diff: _Diff | None = None

    def plan(attempt: int) -> PlannedCommit:
        nonlocal made, diff
        current: LogTable = first if attempt == 1 else existing_table(location)
        read_version = current.version()
        transaction.check_conflicts(read_version)
        _check_restorable(location, current.snapshot, restored)
        diff = _diff(current.snapshot, restored)
        if not ignore_missing_files:
            _check_files_exist(location, diff.adds, target)
        protocol = merged(restored.protocol, current.snapshot.protocol)
        schema_string = str(restored.metadata.get("schemaString") or "")
        check_writable(
            protocol,
            restored.configuration,
            schema_string,
            table=str(location),
            operation=OPERATION,
            removes_rows=False,
            identity_handled=True,
        )
        now = int(time.time() * 1000)
        info = commit_info(
            Operation(OPERATION, parameters, diff.metrics),
            commit_id=transaction.commit_id,
            read_version=read_version,
            blind_append=False,
            metrics=diff.metrics,
            now_ms=now,
        )
        adds: list[Action] = [{"add": {**add, "dataChange": True}} for add in diff.adds]
        removes: list[Action] = [
            {"remove": remove_action(add, deletion_timestamp=now, data_change=True)} for add in diff.removes
        ]
        actions: list[Action] = [{"metaData": restored.metadata}, *adds, *removes, {"protocol": protocol}]
        made = (current.snapshot, actions, protocol)
        return PlannedCommit(read_version, [{"commitInfo": info}, *actions])

    done = transaction.run(plan)
    assert done is not None and diff is not None, "a RESTORE always has a commit to make"
    if done.planned is not None and made is not None:
        base, actions, protocol = made
        after = advance(base, done.table_version, actions)
        remember_table(location, after)
        log.info(
            "Delta commit table_version %s on %s (RESTORE to table_version %s): %d file(s) restored, %d removed",
            done.table_version,
            location,
            target,
            diff.metrics["numRestoredFiles"],
            diff.metrics["numRemovedFiles"],
        )
        checkpoint_if_due(location, done.table_version, after.configuration, protocol, snapshot=after)
    return RestoreResult(done.table_version, target, diff.metrics)


def _version_at(delta_log: DeltaLog, location: TableLocation, timestamp: str) -> int:
    """The newest table version committed at or before ``timestamp`` (the commit times history shows and
    ``timestampAsOf`` reads by: :meth:`DeltaLog.commit_timestamps`).

    Raises:
        SqlError: not a timestamp (Delta's ``DELTA_TIMESTAMP_INVALID``).
        OptionError: before the oldest commit the log keeps.
    """
    try:
        when = parse_timestamp("timestamp", timestamp)
    except OptionError as err:
        raise analysis_error(
            "DELTA_TIMESTAMP_INVALID",
            f"The provided timestamp ('{timestamp}') cannot be converted to a valid timestamp.",
        ) from err
    millis = when.timestamp() * 1000
    found: int | None = None
    first_ms: int | None = None
    for table_version, ts in delta_log.commit_timestamps():
        first_ms = ts if first_ms is None else first_ms
        if ts > millis:
            break
        found = table_version
    if found is None:
        earliest = "none" if first_ms is None else dt.datetime.fromtimestamp(first_ms / 1000, dt.UTC).isoformat()
        raise OptionError(
            "timestamp",
            timestamp,
            f"is before the earliest commit {location} keeps ({earliest}); nothing to restore to",
        )
    return found


def _diff(current: Snapshot, restored: Snapshot) -> _Diff:
    """The files to add and to remove, each a file of one snapshot that the other lacks (a file: its path and
    deletion vector), and Delta's metrics of the restore."""
    now = {file_key(add): add for add in current.files.values()}
    then = {file_key(add): add for add in restored.files.values()}
    adds = [add for key, add in then.items() if key not in now]
    removes = [add for key, add in now.items() if key not in then]
    metrics = {
        "tableSizeAfterRestore": sum(_size(a) for a in then.values()),
        "numOfFilesAfterRestore": len(then),
        "numRemovedFiles": len(removes),
        "numRestoredFiles": len(adds),
        "removedFilesSize": sum(_size(a) for a in removes),
        "restoredFilesSize": sum(_size(a) for a in adds),
    }
    return _Diff(adds, removes, metrics)


def _size(add: Mapping[str, Any]) -> int:
    return int(add.get("size") or 0)


def _check_files_exist(location: TableLocation, adds: list[AddFile], target: int) -> None:
    """Delta's check that the files a restore adds are still in the store (VACUUM deletes removed files).

    Raises:
        DataFileMissingError: naming up to :data:`MISSING_FILES_SHOWN` of them.
    """
    found = [(str(a["path"]), data_file_fs_path(location, str(a["path"]))) for a in adds]
    checked = [(raw, path) for raw, path in found if path is not None]  # a file in another store is not looked up
    if not checked:
        return
    from pyarrow import fs as pafs

    try:
        infos = location.filesystem().get_file_info([path for _, path in checked])
    except OSError as err:
        raise location.store_error(err) from err
    missing = [raw for (raw, _), info in zip(checked, infos, strict=True) if info.type == pafs.FileType.NotFound]
    if missing:
        raise DataFileMissingError(
            f"RESTORE of {location} to table_version {target}: not all files of that table version are in the "
            f"store; missing ({len(missing)}, at most {MISSING_FILES_SHOWN} shown): "
            f"{', '.join(missing[:MISSING_FILES_SHOWN])}. Restore a more recent table version, or set "
            "spark.sql.files.ignoreMissingFiles to true to restore without them; nothing was written"
        )


def _check_restorable(location: TableLocation, current: Snapshot, restored: Snapshot) -> None:
    """Refuse a RESTORE that sparkonce would make wrong: one that takes identity high-water marks back (later
    values could repeat; Delta keeps the newer marks) or restores other clustering columns (Delta restores the
    clustering domain; sparkonce does not yet).

    Raises:
        UnsupportedFeatureError: naming what the restore would break.
    """
    now_fields, then_fields = _fields(current), _fields(restored)
    now = {c.name: c.high_water_mark for c in identity_columns(now_fields)}
    then = {c.name: c.high_water_mark for c in identity_columns(then_fields)}
    if now and now != then:
        raise UnsupportedFeatureError(
            f"RESTORE of {location} to table_version {restored.table_version}: the table has identity columns "
            f"{sorted(now)} whose high-water marks the restore would take back; nothing was written"
        )
    if clustering_columns(current.domains, now_fields) != clustering_columns(restored.domains, then_fields):
        raise UnsupportedFeatureError(
            f"RESTORE of {location} to table_version {restored.table_version}: its clustering columns differ from "
            "the table's now, and sparkonce cannot restore them; nothing was written"
        )


def _fields(snapshot: Snapshot) -> list[Mapping[str, Any]]:
    return list(json.loads(str(snapshot.metadata.get("schemaString") or "{}")).get("fields") or [])
