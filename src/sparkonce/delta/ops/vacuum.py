"""``VACUUM``: delete the files of a Delta table that no table version within the retention period references.

Runs on the driver or in a CLI process (no Spark). Candidates are, as in Delta:

* files removed from the table (``remove`` actions) longer ago than the retention period, and
* files the log never mentions (orphans: data files of failed or aborted write attempts, crashed batches)
  older than the retention period, by modification time.

Files whose name starts with ``_`` or ``.`` (``_delta_log``, ``_spark_metadata``, ...) are never touched, and a
file written within the retention period is kept even if nothing references it yet: it may belong to a write in
flight. Listing and deletion are done by delta-rs (``DeltaTable.vacuum(full=True)``), whose full mode was checked
to include orphans by modification time and tombstones by deletion time; the retention guard is ours, so its
error names the table property and the override.

Files a registered stream reader still needs stay (:mod:`sparkonce.delta.txn.readers`): every file removed at or after
the table version an active reader reads from, whatever the retention; the result names the readers and the files
each kept. While readers are registered the candidates are deleted here, without ``VACUUM START``/``END`` commits:
delta-rs's vacuum would delete the held files too, and the post-commit hook of its ``VACUUM START`` commit (which
takes no settings) cleans the log by the retention alone. ``force`` deletes the held files too (still here, so the
log stays as the guard keeps it).

Deletion vector files (``deletion_vector_<uuid>.bin``) go as Delta's VACUUM lets them go: those that the active files
or the tombstones within the retention name stay (:func:`needed_deletion_vectors`), the others are deleted once older
than the retention. delta-rs does not know them (its full mode lists every one as an orphan by age, live ones
included), so when it lists one that is still needed the candidates are deleted here too, without ``VACUUM
START``/``END`` commits.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.table.deletion_vectors import dv_relative_path
from sparkonce.delta.txn.commit import load_table
from sparkonce.delta.txn.readers import HeldBack, RegisteredReader, held_data_files, reader_hold
from sparkonce.errors import DeltaLogError, OptionError
from sparkonce.storage import TableLocation, table_location

log = logging.getLogger(__name__)

DEFAULT_RETENTION_HOURS = 168.0
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum deleted (or, with ``dry_run``, would delete)."""

    table_path: str
    table_version: int
    """The table version whose snapshot decided what is referenced."""
    retention_hours: float
    dry_run: bool
    files: tuple[str, ...]
    """Paths of the files deleted (or to delete) relative to the table root, as on storage; each once, sorted."""
    bytes: int
    """Their total size."""
    held_back: tuple[HeldBack, ...] = ()
    """Per registered stream reader, the files it still needs that the retention alone would have deleted."""
    expired_readers: tuple[RegisteredReader, ...] = ()
    """Registered readers past ``sparkonce.readerRetentionDuration``: they held nothing back."""


def retention_from_properties(configuration: dict[str, str | None]) -> float:
    """The table's minimum retention in hours (``delta.deletedFileRetentionDuration``, default 168).

    Raises:
        DeltaLogError: the property is not an interval such as ``interval 7 days``.
    """
    raw = configuration.get(RETENTION_PROPERTY)
    if raw is None:
        return DEFAULT_RETENTION_HOURS
    return parse_interval_ms(raw, name=RETENTION_PROPERTY) / 3_600_000


def vacuum(
    path: str | os.PathLike[str] | TableLocation,
    *,
    retention_hours: float | None = None,
    dry_run: bool = True,
    enforce_retention_duration: bool = True,
    force: bool = False,
) -> VacuumResult:
    """Delete (or list, with ``dry_run``) files of the table at ``path`` that no table version within
    ``retention_hours`` references, orphan files of failed attempts included.

    Args:
        path: The table root.
        retention_hours: Keep files removed, or written, less than this many hours ago (default: the table's
            ``delta.deletedFileRetentionDuration``, 168 hours when unset, as Delta does).
        dry_run: Only list the files (the default: deleting is destructive).
        enforce_retention_duration: Refuse a retention below the table's ``delta.deletedFileRetentionDuration``
            (default 168 hours), as Delta does; a shorter retention can delete files that a running reader or
            writer (including a stream's batch in flight) still needs.
        force: Delete files that registered stream readers still need (:mod:`sparkonce.delta.txn.readers`), as Delta
            does: a paused stream then cannot resume from its checkpoint. For operators.

    Raises:
        OptionError: ``retention_hours`` is negative, or below the table's retention while enforced.
        TableNotFoundError: ``path`` is not a Delta table.
    """
    if retention_hours is not None and retention_hours < 0:
        raise OptionError("retention_hours", retention_hours, "must be >= 0")
    location = table_location(path)
    table_path = str(location)
    table = load_table(location)
    minimum = retention_from_properties(dict(table.metadata().configuration))
    if retention_hours is None:
        retention_hours = minimum
    if enforce_retention_duration and retention_hours < minimum:
        raise OptionError(
            "retention_hours",
            retention_hours,
            f"is below the table's {RETENTION_PROPERTY} of {minimum:g} hours; a shorter retention can delete files "
            "that readers of older table versions or writes in flight still need. If you are certain no operation "
            "on this table runs for longer than that, pass enforce_retention_duration=False (Delta's "
            "spark.databricks.delta.retentionDurationCheck.enabled=false)",
        )
    # delta-rs takes whole hours; round up so nothing younger than asked is deleted.
    hours = int(-(-retention_hours // 1))
    listed = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False, full=True)
    candidates = _table_relative(location, listed)
    # delta-rs does not know deletion vector files: it lists them all as orphans by age, live ones included
    needed = needed_deletion_vectors(location, table.version(), retention_ms=hours * 3_600_000)
    deletion_vectors_kept = bool(candidates.keys() & needed)
    candidates = {path: size for path, size in candidates.items() if path not in needed}
    held: tuple[HeldBack, ...] = ()
    expired_readers: tuple[RegisteredReader, ...] = ()
    kept: frozenset[str] = frozenset()
    readers = False
    if candidates:
        hold = reader_hold(location, dict(table.metadata().configuration), operation="VACUUM")
        oldest = hold.table_version
        readers = oldest is not None
        if oldest is not None and not force:
            expired_readers = hold.expired
            removed_at = _removed_since(location, oldest, table.version())
            kept, held = held_data_files(hold, candidates, removed_at)
    files = {path: size for path, size in candidates.items() if path not in kept}
    if not dry_run and files:
        if readers or deletion_vectors_kept:
            # delta-rs's vacuum would delete the held files (or the deletion vector files still needed) too, and
            # its VACUUM START commit cleans the log by the retention alone (that commit takes no post-commit
            # settings): with readers registered, or deletion vectors to keep, delete here
            fs = location.filesystem()
            for path in sorted(files):
                try:
                    fs.delete_file(location.fs_path(path))
                except FileNotFoundError:  # delta-rs lists the tombstones of files deleted before
                    del files[path]
        else:
            deleted = table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False, full=True)
            files = _table_relative(location, deleted, known=candidates)
    result = VacuumResult(
        table_path=table_path,
        table_version=table.version(),
        retention_hours=float(hours),
        dry_run=dry_run,
        files=tuple(sorted(files)),
        bytes=sum(files.values()),
        held_back=held,
        expired_readers=expired_readers,
    )
    for entry in held:
        log.info(
            "vacuum %s kept %d file(s) for the reader query %s (checkpoint %s) at table_version %s",
            table_path,
            len(entry.files),
            entry.reader.query_id,
            entry.reader.checkpoint_dir,
            entry.reader.table_version,
        )
    log.info(
        "vacuum %s at table_version %s (retention %s hours, dry_run=%s): %d file(s), %d byte(s)",
        table_path,
        result.table_version,
        hours,
        dry_run,
        len(result.files),
        result.bytes,
    )
    return result


def needed_deletion_vectors(location: TableLocation, table_version: int, *, retention_ms: int) -> frozenset[str]:
    """The deletion vector files (relative to the table root) that ``table_version`` still needs: those of its
    active files and of its tombstones removed less than ``retention_ms`` ago, which a read of an older table
    version within the retention uses (Delta's VACUUM keeps them as it keeps the tombstoned data files). Runs on
    the driver."""
    snapshot = DeltaLog(location).snapshot(table_version)
    cutoff = int(time.time() * 1000) - retention_ms
    descriptors = [add.get("deletionVector") for add in snapshot.files.values()]
    descriptors += [
        remove.get("deletionVector")
        for remove in snapshot.removes.values()
        if int(remove.get("deletionTimestamp") or 0) > cutoff
    ]
    found = (dv_relative_path(d) for d in descriptors if isinstance(d, dict))
    return frozenset(unquote(path) for path in found if path is not None)


def _removed_since(location: TableLocation, first: int, latest: int) -> dict[str, int]:
    """Path relative to the table root (as on storage) -> the first table version from ``first`` through ``latest``
    whose commit removes it (its deletion vector file too). Commits already gone are skipped: the readers that
    needed them cannot resume anyway."""
    delta_log = DeltaLog(location, check=False)
    root = f"{location.uri}/"
    found: dict[str, int] = {}
    for table_version in range(first, latest + 1):
        try:
            actions = delta_log.read_actions(table_version, only=(b"remove",))
        except DeltaLogError:
            continue
        for action in actions:
            remove = action.get("remove")
            if not isinstance(remove, dict):
                continue
            paths = [str(remove.get("path") or "")]
            descriptor = remove.get("deletionVector")
            if isinstance(descriptor, dict):
                paths.append(dv_relative_path(descriptor) or "")
            for raw in paths:
                if raw:
                    found.setdefault(unquote(raw.removeprefix(root)), table_version)
    return found


def _table_relative(
    location: TableLocation, listed: Iterable[str], *, known: Mapping[str, int] | None = None
) -> dict[str, int]:
    """delta-rs's vacuum list as each file once, by its path relative to the table root as it is on storage ->
    its size in bytes.

    delta-rs names a file once per ``remove`` action that tombstones it, as the log spells it (URL-encoded: Delta's
    JVM connector writes ``p=a b/`` on storage and ``p=a%20b/`` in the log), and absolute once it deleted it.
    ``known`` (the dry-run listing, taken while the files existed) resolves paths of files already deleted.
    """
    root = location.fs_path().rstrip("/") + "/"
    result: dict[str, int] = {}
    for raw in listed:
        relative = raw.removeprefix(f"{location.uri}/")
        if relative.startswith(root):
            relative = relative[len(root) :]
        for candidate in dict.fromkeys((relative, unquote(relative))):
            if known is not None and candidate in known:
                result[candidate] = known[candidate]
                break
            size = _size(location, candidate) if known is None else None
            if size is not None:
                result[candidate] = size
                break
        else:
            result.setdefault(relative, 0)
    return result


def _size(location: TableLocation, relative: str) -> int | None:
    """The size of the file at ``relative`` under the table root, None when there is none."""
    import pyarrow.fs as pafs

    info = location.filesystem().get_file_info(location.fs_path(relative))
    if info.type == pafs.FileType.File and info.size is not None:
        return int(info.size)
    return None


__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "RETENTION_PROPERTY",
    "VacuumResult",
    "needed_deletion_vectors",
    "retention_from_properties",
    "vacuum",
]
