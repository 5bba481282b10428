"""Batches a RESTORE undid while the table kept their txn (delta-io/delta#1813), and the guard against skipping them.

Runs on the driver (or in the CLI process); reads ``_delta_log`` only.

A ``RESTORE`` commit (Delta's ``RestoreTableCommand``, delta-rs's ``restore``, sparkonce's ``restoreToVersion``)
carries ``add``/``remove`` actions, metadata, protocol and domain metadata: never a ``txn``. The table's txns are
the newest per app id over the whole log, so after restoring to a table version before batch N the table still
holds ``txn(app_id, version >= N)``: a replay of batches N.. under the same app id is taken for "already written"
and skipped, and their rows are lost without a word.

The table's content at the newest table version descends from a chain of commits: walking down from the newest,
each ordinary commit leads to the one before it, a ``RESTORE`` to the table version it restored. A commit off that
chain was undone; its batch (its ``txn``) is one a replay would skip. The safe path writes those batches again under
a new app id, :func:`restored_app_id`, which :func:`undone_batches` then counts as written again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from sparkonce.delta.log.delta_log import CommitEntry, DeltaLog
from sparkonce.errors import DeltaLogError

__all__ = [
    "UndoneBatches",
    "restore_target",
    "restored_app_id",
    "undone_batch",
    "undone_batches",
    "undone_table_versions",
]

RESTORE_OPERATION = "RESTORE"


@dataclass(frozen=True)
class UndoneBatches:
    """The batches of one app id that one RESTORE undid while the table kept their txn."""

    app_id: str
    restore_table_version: int
    """The table version of the RESTORE commit."""
    restored_table_version: int
    """The table version the RESTORE restored."""
    batch_ids: tuple[int, ...]
    table_versions: tuple[int, ...]
    """The undone commits that wrote those batches."""
    rewritten: bool
    """True when the table holds a txn of :func:`restored_app_id` for this app id and RESTORE (the safe path ran)."""


def restored_app_id(app_id: str, restore_table_version: int) -> str:
    """The app id under which the batches a RESTORE undid are written again: ``<app_id>-restore-<table version>``."""
    return f"{app_id}-restore-{restore_table_version}"


def restore_target(entry: CommitEntry) -> int | None:
    """The table version a RESTORE commit restored (``operationParameters.version``), or None for another commit or
    a RESTORE that names only a timestamp."""
    if (entry.operation or "").upper() != RESTORE_OPERATION:
        return None
    version = entry.operation_parameters.get("version")
    try:
        return int(version) if version is not None else None
    except (TypeError, ValueError):
        return None


def _live_versions(entries: dict[int, CommitEntry], newest: int) -> tuple[set[int], list[tuple[int, int]]]:
    """The table versions the newest content descends from (within ``entries``), and each RESTORE on that chain."""
    live: set[int] = set()
    restores: list[tuple[int, int]] = []
    cur = newest
    while cur in entries and cur not in live:
        live.add(cur)
        target = restore_target(entries[cur])
        if target is not None and target < cur:
            restores.append((cur, target))
            cur = target
        else:
            cur -= 1
    return live, restores


def undone_table_versions(entries: Iterable[CommitEntry], newest: int) -> set[int]:
    """The table versions among ``entries`` (a contiguous run down from ``newest``) that a later RESTORE undid."""
    by_version = {e.table_version: e for e in entries}
    live, restores = _live_versions(by_version, newest)
    return {v for at, to in restores for v in range(to + 1, at) if v in by_version and v not in live}


def undone_batches(entries: Iterable[CommitEntry], newest: int, txns: Iterable[str]) -> list[UndoneBatches]:
    """Per RESTORE on the newest content's chain and per app id: the batches it undid whose txn the table kept.

    Args:
        entries: Delta commits (any order), a contiguous run down from ``newest``; a RESTORE whose undone commits are
            older than the run reports only those in it.
        newest: The newest table version.
        txns: The app ids the table holds txns for (the safe path's app ids among them mark RESTOREs written again).
    """
    by_version = {e.table_version: e for e in entries}
    live, restores = _live_versions(by_version, newest)
    app_ids = set(txns)
    found: list[UndoneBatches] = []
    for restore_at, restored in restores:
        undone: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for version in range(restored + 1, restore_at):
            entry = by_version.get(version)
            if entry is None or version in live:
                continue
            for txn in entry.txns:
                undone[txn.app_id].append((txn.txn_version, version))
        for app_id, pairs in sorted(undone.items()):
            if app_id.endswith(f"-restore-{restore_at}"):
                continue
            found.append(
                UndoneBatches(
                    app_id=app_id,
                    restore_table_version=restore_at,
                    restored_table_version=restored,
                    batch_ids=tuple(sorted(b for b, _ in pairs)),
                    table_versions=tuple(sorted(v for _, v in pairs)),
                    rewritten=restored_app_id(app_id, restore_at) in app_ids,
                )
            )
    return found


def undone_batch(log: DeltaLog, newest: int, app_id: str, txn_version: int) -> UndoneBatches | None:
    """The RESTORE that undid batch ``txn_version`` of ``app_id`` although the table keeps its txn, or None.

    Reads Delta commits from ``newest`` down until the commit that wrote ``txn(app_id, txn_version)`` (only when a
    batch is about to be skipped, so never on the path of an ordinary batch), or until a commit is gone (log
    clean-up: nothing can be said, None), or an older batch of the app (the batch id was never written, None).
    """
    entries: dict[int, CommitEntry] = {}
    written_at = None
    for version in range(newest, -1, -1):
        try:
            if not log.has_commit(version):
                return None
            entry = log.commit_entry(version)
        except DeltaLogError:
            return None
        entries[version] = entry
        ours = [t.txn_version for t in entry.txns if t.app_id == app_id]
        if txn_version in ours:
            written_at = version
            break
        if any(v < txn_version for v in ours):
            return None  # an older batch of the app: this batch id was never written (an empty batch)
    if written_at is None:
        return None
    for undone in undone_batches(entries.values(), newest, [app_id]):
        if undone.app_id == app_id and written_at in undone.table_versions:
            return undone
    return None
