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
* modification times are made monotonic in table-version order first (a file whose time is not later than the
  previous version's counts as one millisecond after it, and files adjusted that way are deleted together with the
  file they were adjusted to, or not at all), so a clock step back on the writer never deletes a file newer than
  the cut-off while keeping an older one, which would leave time travel with a hole;
* files are deleted in ascending table-version order: a crash in the middle leaves the oldest versions gone and
  every later one intact, never a gap.

What is deliberately not done: tables with V2 checkpoints (sidecar cleanup; sparkonce writes no V2 checkpoints) and
tables with the ``checkpointProtection`` feature keep all their log files (keeping files is always safe; deleting
them there needs rules sparkonce does not implement). Time travel to a version removed here fails with Delta's
``DELTA_VERSION_NOT_FOUND`` message, which names the retention (:meth:`sparkonce.delta.log.DeltaLog.snapshot`).

Runs on the driver, after the Delta commit and checkpoint it follows; never on executors.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sparkonce.delta.interval import parse_interval_ms
from sparkonce.delta.log import DeltaLog
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
    """

    table: str
    cutoff_ms: int | None
    deleted: tuple[str, ...]
    skipped: str | None = None


def _property(configuration: Mapping[str, str], name: str) -> str | None:
    for key, value in configuration.items():
        if key.lower() == name.lower():
            return str(value)
    return None


def log_cleanup_enabled(configuration: Mapping[str, str]) -> bool:
    """False only when ``delta.enableExpiredLogCleanup`` is ``false`` (Delta's default is on)."""
    value = _property(configuration, ENABLED_PROPERTY)
    return value is None or value.strip().lower() != "false"


def log_retention_ms(configuration: Mapping[str, str]) -> int:
    """The table's ``delta.logRetentionDuration`` in ms (30 days when unset).

    Raises:
        DeltaLogError: The property is not an interval (the message names it).
    """
    raw = _property(configuration, RETENTION_PROPERTY)
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


def cleanup_expired_logs(
    location: TableLocation,
    configuration: Mapping[str, str],
    protocol: Mapping[str, Any],
    *,
    now_ms: int | None = None,
) -> LogCleanupResult:
    """Delete the table's expired log files (see the module's rules); called after a checkpoint is written.

    Args:
        location: The table.
        configuration: Its ``metaData.configuration`` at the table version just checkpointed.
        protocol: Its protocol at that table version.
        now_ms: The current time (ms since the epoch); the clock by default.

    Raises:
        DeltaLogError: ``delta.logRetentionDuration`` is not an interval, or ``_last_checkpoint`` is unreadable.
        OSError: A file could not be listed or deleted (files deleted before it stay deleted: always the oldest).
    """
    table = str(location)
    if not log_cleanup_enabled(configuration):
        return LogCleanupResult(table, None, (), skipped=f"{ENABLED_PROPERTY} is false")
    features = set(protocol.get("writerFeatures") or ())
    if "v2Checkpoint" in features or "checkpointProtection" in features:
        kept = "v2Checkpoint" if "v2Checkpoint" in features else "checkpointProtection"
        return LogCleanupResult(table, None, (), skipped=f"the table has the {kept} feature")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = (now - log_retention_ms(configuration)) // _DAY_MS * _DAY_MS
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
    files = _log_files(delta_log)
    expired = expired_log_files(files, cutoff_ms=cutoff, max_table_version=checkpoint_version - 1)
    for name in expired:
        delta_log.fs.delete_file(f"{delta_log.log_dir}/{name}")
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
    return LogCleanupResult(table, cutoff, tuple(expired))


def _log_files(delta_log: DeltaLog) -> list[LogFile]:
    """The commits and checkpoint files of ``_delta_log`` with their modification times, sorted by name."""
    import pyarrow.fs as pafs

    infos = delta_log.fs.get_file_info(pafs.FileSelector(delta_log.log_dir, allow_not_found=True))
    found: list[LogFile] = []
    for info in infos:
        m = _LOG_FILE_RE.match(info.base_name)
        if m is None or info.type != pafs.FileType.File or info.mtime is None:
            continue
        found.append(LogFile(info.base_name, int(m.group(1)), int(info.mtime.timestamp() * 1000)))
    found.sort(key=lambda f: f.name)
    return found
