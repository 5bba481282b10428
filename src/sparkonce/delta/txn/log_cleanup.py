"""Expired log cleanup: removing old ``_delta_log`` files at checkpoint time, by Delta's rule.

A stream that commits every few seconds leaves tens of thousands of JSON commits; Delta keeps the log bounded by
deleting, each time it writes a checkpoint, the commits and checkpoints that are both older than the table's
``delta.logRetentionDuration`` (``interval 30 days`` when unset) and superseded by a newer checkpoint. sparkonce
follows the same rule (Delta's ``MetadataCleanup``), so a table it writes looks to Delta, delta-rs and Databricks
exactly as theirs would:

* only when ``delta.enableExpiredLogCleanup`` is not ``false`` (the default is on);
* the cut-off is ``now - delta.logRetentionDuration``, truncated down to midnight UTC (files may live up to a day
  longer, so a table does not clean up on every checkpoint);
* candidates are the JSON commits and checkpoint files (classic, multi-part, V2) whose table version is below the
  checkpoint that ``_last_checkpoint`` names: that checkpoint, and every commit after it, stay, so the latest
  table version and every version from the checkpoint on can still be rebuilt;
* of the expired ones, only those below the newest checkpoint at or before the newest expired table version go
  (:func:`recreatable_cut`), as delta-spark deletes them: every table version younger than the cut-off can still be
  rebuilt (time travel to it works), not only those from the last checkpoint on;
* modification times are made monotonic in table-version order first (a file whose time is not later than the
  previous version's counts as one millisecond after it, and files adjusted that way are deleted together with the
  file they were adjusted to, or not at all), so a clock step back on the writer never deletes a file newer than
  the cut-off while keeping an older one, which would leave time travel with a hole;
* files a registered stream reader still needs stay (:mod:`sparkonce.delta.txn.readers`: from the newest checkpoint at
  or before the oldest active reader's table version on), and the result says which reader kept which files;
* files are deleted in ascending table-version order: a crash in the middle leaves the oldest versions gone and
  every later one intact, never a gap.

What is deliberately not done: tables with V2 checkpoints (sidecar cleanup; sparkonce writes no V2 checkpoints) and
tables with the ``checkpointProtection`` feature keep all their log files (keeping files is always safe; deleting
them there needs rules sparkonce does not implement). Time travel to a version removed here fails with Delta's
``DELTA_VERSION_NOT_FOUND`` message, which names the retention
(:meth:`sparkonce.delta.log.delta_log.DeltaLog.snapshot`).

Runs on the driver, after the Delta commit and checkpoint it follows; never on executors.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sparkonce.delta.log import clock
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.table.properties import property_value
from sparkonce.delta.txn.readers import HeldBack, RegisteredReader, held_log_files, reader_hold
from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LOG_RETENTION",
    "LogCleanupResult",
    "LogFile",
    "cleanup_expired_logs",
    "expired_log_files",
    "log_cleanup_enabled",
    "log_retention_ms",
    "recreatable_cut",
]

DEFAULT_LOG_RETENTION = "interval 30 days"
"""Delta's default ``delta.logRetentionDuration``."""

RETENTION_PROPERTY = "delta.logRetentionDuration"
ENABLED_PROPERTY = "delta.enableExpiredLogCleanup"
_DAY_MS = 86_400_000
_LOG_FILE_RE = re.compile(r"^(\d{20})\.(json|checkpoint\..*parquet|checkpoint\.[0-9a-fA-F-]{36}\.json)$")


class LogFile(NamedTuple):
    """A JSON commit or checkpoint file of ``_delta_log``: its name, table version and modification time (ms)."""

    name: str
    table_version: int
    mtime_ms: int


@dataclass(frozen=True)
class LogCleanupResult:
    """What one cleanup did.

    Attributes:
        table: The table's location, for messages.
        cutoff_ms: Files last modified at or before this time (ms since the epoch) could go; None when cleanup
            did not run.
        deleted: The names under ``_delta_log`` deleted, ascending.
        skipped: Why cleanup did not run (disabled, no checkpoint yet, ...); None when it ran.
        held_back: Per registered reader (:mod:`sparkonce.delta.txn.readers`), the expired log files kept for it.
        expired_readers: Registered readers past ``sparkonce.readerRetentionDuration``, which held nothing back.
    """

    table: str
    cutoff_ms: int | None
    deleted: tuple[str, ...]
    skipped: str | None = None
    held_back: tuple[HeldBack, ...] = ()
    expired_readers: tuple[RegisteredReader, ...] = ()


def log_cleanup_enabled(configuration: Mapping[str, str]) -> bool:
    """False only when ``delta.enableExpiredLogCleanup`` is ``false`` (Delta's default is on)."""
    value = property_value(configuration, ENABLED_PROPERTY)
    return value is None or value.strip().lower() != "false"


def log_retention_ms(configuration: Mapping[str, str]) -> int:
    """The table's ``delta.logRetentionDuration`` in ms (30 days when unset).

    Raises:
        DeltaLogError: The property is not an interval (the message names it).
    """
    raw = property_value(configuration, RETENTION_PROPERTY)
    return parse_interval_ms(DEFAULT_LOG_RETENTION if raw is None else raw, name=RETENTION_PROPERTY)


def expired_log_files(files: Sequence[LogFile], *, cutoff_ms: int, max_table_version: int) -> list[str]:
    """The names among ``files`` that Delta's rule deletes, ascending.

    Args:
        files: The commits and checkpoints of ``_delta_log``, sorted by name (which sorts by table version).
        cutoff_ms: A file qualifies when its (monotonic) modification time is at or before this.
        max_table_version: ... and its table version is at most this (the ``_last_checkpoint`` version - 1).
    """
    deletable: list[str] = []
    group: list[LogFile] = []

    def flush() -> None:
        last = group[-1] if group else None
        if last is not None and last.mtime_ms <= cutoff_ms and last.table_version <= max_table_version:
            deletable.extend(f.name for f in group)
        group.clear()

    previous: LogFile | None = None
    for entry in files:
        if (
            previous is not None
            and previous.table_version < entry.table_version
            and previous.mtime_ms >= entry.mtime_ms
        ):
            entry = entry._replace(mtime_ms=previous.mtime_ms + 1)  # a clock step back: keep times monotonic
        else:
            flush()
        group.append(entry)
        previous = entry
    flush()
    return deletable


def recreatable_cut(
    expired: Sequence[str], files: Sequence[LogFile], *, expired_checkpoint: int | None = None
) -> list[str]:
    """The ``expired`` names below the newest checkpoint at or before the newest expired table version, as Delta
    keeps them: every table version after the cut-off can still be rebuilt from that checkpoint (delta-spark keeps
    ``5.checkpoint`` and commits 5 and 6 when 0 to 6 expired and the next checkpoint is 10). None when no checkpoint
    is that old. ``expired_checkpoint``: the ``_last_checkpoint`` version when its commit expired too."""
    if not expired:
        return []
    newest = int(expired[-1][:20])
    anchors = [f.table_version for f in files if ".checkpoint." in f.name and f.table_version <= newest]
    if expired_checkpoint is not None:
        anchors.append(expired_checkpoint)
    if not anchors:
        return []
    keep_from = max(anchors)
    return [name for name in expired if int(name[:20]) < keep_from]


def cleanup_expired_logs(
    location: TableLocation,
    configuration: Mapping[str, str],
    protocol: Mapping[str, Any],
    *,
    now_ms: int | None = None,
    force: bool = False,
    granularity_ms: int | None = None,
) -> LogCleanupResult:
    """Delete the table's expired log files (see the module's rules); called after a checkpoint is written.

    Files that a registered stream reader still needs stay (:mod:`sparkonce.delta.txn.readers`), unless ``force``.

    Args:
        location: The table.
        configuration: Its ``metaData.configuration`` at the table version just checkpointed.
        protocol: Its protocol at that table version.
        now_ms: The current time (ms since the epoch); the clock by default.
        force: Ignore the registered readers (for operators: what Delta itself does).
        granularity_ms: The cutoff rounded down to this (Delta's day; a minute for ``DROP FEATURE ... TRUNCATE
            HISTORY``).

    Raises:
        DeltaLogError: ``delta.logRetentionDuration`` or ``sparkonce.readerRetentionDuration`` is not an interval,
            or ``_last_checkpoint`` is unreadable.
        OSError: A file could not be listed or deleted (files deleted before it stay deleted: always the oldest).
    """
    table = str(location)
    if not log_cleanup_enabled(configuration):
        return LogCleanupResult(table, None, (), skipped=f"{ENABLED_PROPERTY} is false")
    features = set(protocol.get("writerFeatures") or ())
    if "v2Checkpoint" in features or "checkpointProtection" in features:
        kept = "v2Checkpoint" if "v2Checkpoint" in features else "checkpointProtection"
        return LogCleanupResult(table, None, (), skipped=f"the table has the {kept} feature")
    now = clock.now_ms() if now_ms is None else now_ms
    granularity = _DAY_MS if granularity_ms is None else granularity_ms
    cutoff = (now - log_retention_ms(configuration)) // granularity * granularity
    delta_log = DeltaLog(location, check=False)
    last = delta_log.read_last_checkpoint()
    if last is None:
        return LogCleanupResult(table, cutoff, (), skipped="no _last_checkpoint")
    checkpoint_version = int(last["version"])
    if delta_log.last_checkpoint_ref() is None:
        return LogCleanupResult(
            table,
            cutoff,
            (),
            skipped=f"_last_checkpoint names table version {checkpoint_version}, whose checkpoint "
            "is missing or incomplete",
        )
    oldest = _oldest_kept.get(location)
    if oldest is not None and oldest.mtime_ms > cutoff and _mtime_ms(delta_log, oldest.name) == oldest.mtime_ms:
        return LogCleanupResult(table, cutoff, (), skipped=f"its oldest log file {oldest.name} is not expired yet")
    files = _log_files(delta_log, cutoff_ms=cutoff, max_table_version=checkpoint_version - 1)
    expired = expired_log_files(files, cutoff_ms=cutoff, max_table_version=checkpoint_version - 1)
    # The last checkpoint's own table version counts when it expired too (its files are beyond the candidates).
    last_expired = bool(expired) and int(expired[-1][:20]) == checkpoint_version - 1
    last_time = _mtime_ms(delta_log, f"{checkpoint_version:020d}.json") if last_expired else None
    expired = recreatable_cut(
        expired, files, expired_checkpoint=checkpoint_version if last_time is not None and last_time <= cutoff else None
    )
    held: tuple[HeldBack, ...] = ()
    expired_readers: tuple[RegisteredReader, ...] = ()
    if expired and not force:  # only then is the registry read: most checkpoints expire nothing
        hold = reader_hold(location, configuration, now_ms=now, operation="log cleanup")
        expired_readers = hold.expired
        anchors = [f.table_version for f in files if ".checkpoint." in f.name] + [checkpoint_version]
        limit, held = held_log_files(hold, expired, anchors)
        if limit is not None:
            expired = [name for name in expired if int(name[:20]) <= limit]
        for entry in held:
            log.info(
                "log cleanup of %s kept %d expired log file(s) from table version %s on for the reader query %s "
                "(checkpoint %s) at table_version %s",
                table,
                len(entry.files),
                int(entry.files[0][:20]),
                entry.reader.query_id,
                entry.reader.checkpoint_dir,
                entry.reader.table_version,
            )
    for name in expired:
        delta_log.fs.delete_file(f"{delta_log.log_dir}/{name}")
    first_kept = files[len(expired)] if len(files) > len(expired) else None
    if first_kept is not None and first_kept.mtime_ms > cutoff and first_kept.table_version < checkpoint_version:
        _oldest_kept[location] = first_kept  # every older file went; every newer one is (made) younger
    else:
        _oldest_kept.pop(location, None)
    if expired:
        log.info(
            "removed %d expired log file(s) of %s, table versions %s to %s (last modified before %s ms, %s)",
            len(expired),
            table,
            expired[0][:20].lstrip("0") or "0",
            expired[-1][:20].lstrip("0") or "0",
            cutoff,
            RETENTION_PROPERTY,
        )
    return LogCleanupResult(table, cutoff, tuple(expired), held_back=held, expired_readers=expired_readers)


_oldest_kept: dict[TableLocation, LogFile] = {}
"""Per table, in this process: the oldest log file the last cleanup kept because it was not expired (every older
one went). While it is there with the same modification time and still not expired, no log file is: the next
cleanup does not list ``_delta_log`` (a long-lived stream's checkpoints come every few minutes, expiry daily)."""


def _mtime_ms(delta_log: DeltaLog, name: str) -> int | None:
    """The modification time of the log file ``name`` (None when it is gone)."""
    if delta_log.location.is_local:
        try:
            return clock.clock_ms(os.stat(os.path.join(delta_log.log_dir, name)).st_mtime_ns // 1_000_000)
        except FileNotFoundError:
            return None
    import pyarrow.fs as pafs

    info = delta_log.fs.get_file_info(f"{delta_log.log_dir}/{name}")
    if info.type != pafs.FileType.File or info.mtime is None:
        return None
    return clock.clock_ms(int(info.mtime.timestamp() * 1000))


def _log_files(delta_log: DeltaLog, *, cutoff_ms: int, max_table_version: int) -> list[LogFile]:
    """The commits and checkpoint files of ``_delta_log`` with their modification times, sorted by name, up to and
    including the first that cannot go (modified after ``cutoff_ms`` or beyond ``max_table_version``): the files
    after it cannot go either (times are made monotonic), and :func:`expired_log_files` decides the same on this
    prefix as on the whole log.

    On a local disk only the names are listed and only the prefix's files are looked at (a long-lived stream's log
    holds 10^5 files, of which a cleanup removes a few); on an object store the listing carries the times."""
    if not delta_log.location.is_local:
        return _listed_log_files(delta_log)
    try:
        names = sorted(n for n in os.listdir(delta_log.log_dir) if n[:20].isdigit() and _LOG_FILE_RE.match(n))
    except FileNotFoundError:
        return []
    found: list[LogFile] = []
    for name in names:
        mtime_ms = _mtime_ms(delta_log, name)
        if mtime_ms is None:  # removed meanwhile (a concurrent cleanup)
            continue
        entry = LogFile(name, int(name[:20]), mtime_ms)
        found.append(entry)
        if entry.mtime_ms > cutoff_ms or entry.table_version > max_table_version:
            break
    return found


def _listed_log_files(delta_log: DeltaLog) -> list[LogFile]:
    """The commits and checkpoint files of ``_delta_log`` with their modification times, sorted by name."""
    import pyarrow.fs as pafs

    infos = delta_log.fs.get_file_info(pafs.FileSelector(delta_log.log_dir, allow_not_found=True))
    found: list[LogFile] = []
    for info in infos:
        m = _LOG_FILE_RE.match(info.base_name)
        if m is None or info.type != pafs.FileType.File or info.mtime is None:
            continue
        found.append(LogFile(info.base_name, int(m.group(1)), clock.clock_ms(int(info.mtime.timestamp() * 1000))))
    found.sort(key=lambda f: f.name)
    return found
