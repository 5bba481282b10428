"""The one place that deletes data files of a write attempt: never a file that a Delta commit references.

A write attempt writes its data files first and commits them after; it may fail, be aborted or find its batch
already in the table at any step, and each of those leaves files to clean up. But "the attempt failed" does not
mean "its Delta commit did not land": the process that made the commit can die right after it, a store can apply
the PUT of the log file and lose its answer, a retry can find the attempt's own txn. Deleting the files then breaks
a committed table version. So the rule, for every path that cleans up:

* :func:`remove_unreferenced_files` (driver): reads the Delta commits made since the attempt read the table
  (``written_after``: the table version read before the files were written; a commit naming them can only come
  later) and deletes only the files none of them adds. When it cannot read those commits it deletes nothing and
  says so: an orphan costs storage until VACUUM, a deleted referenced file costs the data.
* :func:`remove_unreported_files` (executors): the files of a task that failed before handing them to the driver;
  no commit can name a file that the driver was never told of.

:func:`find_commit` is the other half of the same question, asked by the committing driver after an ambiguous
failure: did my own Delta commit land, and as which table version?
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.table.deletion_vectors import dv_relative_path
from sparkonce.errors import DeltaLogError, StorageError, TableNotFoundError
from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

COMMIT_ID_KEY = "txnId"
"""The ``commitInfo`` field naming a Delta commit uniquely (Delta's JVM connector writes it too): sparkonce sets it
to a fresh UUID per commit so that a writer can recognise its own commit after an ambiguous failure."""


@dataclass(frozen=True)
class Cleanup:
    """What :func:`remove_unreferenced_files` did."""

    removed: int
    """Files deleted (none of them referenced by a Delta commit)."""
    referenced: tuple[str, ...]
    """Files kept because a Delta commit adds them (a commit of this attempt landed after all)."""
    undecided: str | None = None
    """Why nothing was deleted: the commits since ``written_after`` could not be read. None when decided."""


def remove_unreferenced_files(
    location: TableLocation, paths: Iterable[str], *, written_after: int, purpose: str
) -> Cleanup:
    """Delete the files of a write attempt that no Delta commit references. Runs on the driver.

    Args:
        location: the table.
        paths: the attempt's files, relative to the table root as the executors wrote them (not URL-encoded).
        written_after: the table version the attempt read before writing the files (-1: there was no table);
            only commits after it can name them.
        purpose: what is being cleaned up, for the log (e.g. ``"abort of batch 3"``).

    Never raises for an unreadable log or store: it then deletes nothing and returns why.
    """
    wanted = list(dict.fromkeys(paths))
    if not wanted:
        return Cleanup(0, ())
    try:
        referenced = sorted(referencing_commits(location, wanted, written_after=written_after))
    except (DeltaLogError, StorageError, OSError) as err:
        reason = f"cannot read the Delta commits after table_version {written_after} of {location}: {err}"
        log.warning(
            "%s: kept all %d file(s) of the attempt, since they may be referenced (%s); VACUUM removes them "
            "once no table version references them",
            purpose,
            len(wanted),
            reason,
        )
        return Cleanup(0, (), reason)
    kept = set(referenced)
    removed = _delete(location, (p for p in wanted if p not in kept))
    if referenced:
        log.warning(
            "%s: kept %d file(s) that a Delta commit of %s references (the attempt's commit landed), e.g. %s; "
            "removed %d unreferenced file(s)",
            purpose,
            len(referenced),
            location,
            referenced[0],
            removed,
        )
    else:
        log.info("%s: removed %d unreferenced file(s) of %s", purpose, removed, location)
    return Cleanup(removed, tuple(referenced))


def remove_unreported_files(location: TableLocation, paths: Iterable[str]) -> int:
    """Delete files of a task that failed before it reported them to the driver. Runs on executors.

    No Delta commit can reference them: the driver commits only files that tasks reported.
    """
    return _delete(location, paths)


def referencing_commits(location: TableLocation, paths: Collection[str], *, written_after: int) -> dict[str, int]:
    """The files among ``paths`` that a Delta commit after ``written_after`` adds (data and change data files, and
    the deletion vector files its ``add`` actions name), each with that table version.

    Raises:
        DeltaLogError: a commit in that range cannot be read (e.g. removed by log clean-up), or is not valid.
        StorageError: the store cannot be reached.
    """
    try:
        delta_log = DeltaLog(location)
    except TableNotFoundError:
        return {}  # no Delta commit at all
    wanted = {os.path.normpath(location.fs_path(p)): p for p in paths}
    found: dict[str, int] = {}
    for table_version in range(max(written_after + 1, 0), delta_log.latest_version() + 1):
        for action in delta_log.read_actions(table_version):
            for kind in ("add", "cdc"):
                entry = action.get(kind)
                if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                    for fs_path in _readings(delta_log, entry["path"]) & wanted.keys():
                        found.setdefault(wanted[fs_path], table_version)
                    dv_file = dv_relative_path(entry.get("deletionVector") or {})
                    if dv_file is not None:  # the deletion vector file the add names
                        fs_path = os.path.normpath(location.fs_path(dv_file))
                        if fs_path in wanted:
                            found.setdefault(wanted[fs_path], table_version)
    return found


def find_commit(location: TableLocation, commit_id: str, *, after: int) -> int | None:
    """The table version of the Delta commit whose ``commitInfo.txnId`` is ``commit_id``, if one after ``after``
    exists. Runs on the driver.

    Raises:
        DeltaLogError: a commit in that range cannot be read.
        StorageError: the store cannot be reached.
    """
    try:
        delta_log = DeltaLog(location)
    except TableNotFoundError:
        return None
    for table_version in range(max(after + 1, 0), delta_log.latest_version() + 1):
        for action in delta_log.read_actions(table_version):
            info = action.get("commitInfo")
            if isinstance(info, dict) and info.get(COMMIT_ID_KEY) == commit_id:
                return table_version
    return None


def _readings(delta_log: DeltaLog, raw: str) -> set[str]:
    """The file-system paths an ``add`` path may stand for: as the protocol reads it (a URI, URL-decoded; the
    log's one resolver :meth:`DeltaLog.data_file_fs_path`), and taken literally (a writer that did not encode it).

    Generous on purpose: a file counts as referenced if either reading names it.
    """
    readings = {os.path.normpath(delta_log.location.fs_path(raw))}
    resolved = delta_log.data_file_fs_path(raw)
    if resolved is not None:
        readings.add(os.path.normpath(resolved))
    return readings


def _delete(location: TableLocation, paths: Iterable[str]) -> int:
    """Delete data files (relative paths); how many existed and were removed."""
    filesystem = location.filesystem()
    removed = 0
    for path in paths:
        try:
            filesystem.delete_file(location.fs_path(path))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


__all__ = [
    "COMMIT_ID_KEY",
    "Cleanup",
    "find_commit",
    "referencing_commits",
    "remove_unreferenced_files",
    "remove_unreported_files",
]
