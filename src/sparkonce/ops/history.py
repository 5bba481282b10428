"""``history``: a ``DESCRIBE HISTORY``-like view of a Delta table, read straight from ``_delta_log``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparkonce.delta.log.delta_log import CommitEntry, DeltaLog
from sparkonce.storage import TableLocation

__all__ = ["HistoryReport", "table_history"]


@dataclass(frozen=True)
class HistoryReport:
    """The newest Delta commits of a table, newest first."""

    table_path: str
    latest_table_version: int
    entries: tuple[CommitEntry, ...]


def table_history(table_path: str | os.PathLike[str] | TableLocation, *, limit: int | None = None) -> HistoryReport:
    """Return the ``limit`` newest Delta commits of ``table_path`` (all when ``None``), newest first.

    Only the JSON commits shown are read, so ``limit`` keeps this fast on tables with many table versions.

    Raises:
        TableNotFoundError: ``table_path`` is not a Delta table.
        DeltaLogError: A JSON commit in range is corrupt (the message names the file and table version).
    """
    log = DeltaLog(table_path)
    versions = log.commit_versions()
    shown = versions[::-1] if limit is None else versions[::-1][:limit]
    entries = tuple(log.commit_entry(v) for v in shown)
    return HistoryReport(str(table_path), log.latest_version(), entries)
