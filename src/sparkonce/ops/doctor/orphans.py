"""Files under a table's root that no table version references (left by failed or aborted writes).

CLI/driver only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkonce.delta.log import DeltaLog, Snapshot, dv_relative_path

__all__ = ["orphan_files", "walk_data_files"]


def walk_data_files(root: Path) -> Iterable[tuple[str, int]]:
    """Yield ``(relative path, bytes)`` of data files, skipping ``_``/``.`` names (logs, checksums, CDC)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                yield os.path.relpath(entry.path, root), entry.stat().st_size


def _referenced(log: DeltaLog, paths: Iterable[str], dvs: Iterable[Any], into: set[str]) -> None:
    for raw in paths:
        local = log.data_file_path(raw)
        if local is not None:
            into.add(os.path.normpath(str(local)))
    for dv in dvs:
        if isinstance(dv, dict) and (rel := dv_relative_path(dv)) is not None:
            into.add(os.path.normpath(str(log.table_path / rel)))


def orphan_files(log: DeltaLog, snap: Snapshot) -> tuple[int, int, list[str]]:
    """Files under the table root that no table version still in ``_delta_log`` references."""
    if not log.location.is_local:
        return _store_orphan_files(log, snap)
    referenced: set[str] = set()
    dvs = [a.get("deletionVector") for a in snap.files.values()] + list(snap.tombstone_dvs)
    _referenced(log, (*snap.files, *snap.tombstones), dvs, referenced)
    candidates = {
        rel: nbytes
        for rel, nbytes in walk_data_files(log.table_path)
        if os.path.normpath(str(log.table_path / rel)) not in referenced
    }
    if candidates and snap.checkpoint_version is not None:
        # Older JSON commits still in the log may reference them (e.g. superseded deletion vectors).
        for v in log.commit_versions():
            if v > snap.checkpoint_version:
                break
            actions = [a.get("add") or a.get("remove") for a in log.read_actions(v)]
            files = [a for a in actions if isinstance(a, dict)]
            _referenced(log, (str(a.get("path")) for a in files), (a.get("deletionVector") for a in files), referenced)
        candidates = {
            rel: n for rel, n in candidates.items() if os.path.normpath(str(log.table_path / rel)) not in referenced
        }
    return len(candidates), sum(candidates.values()), sorted(candidates)


def _store_orphan_files(log: DeltaLog, snap: Snapshot) -> tuple[int, int, list[str]]:
    """:func:`orphan_files` of an object-store table: one recursive listing of its prefix (paths relative to it),
    then the same checks as the local walk."""
    import pyarrow.fs as pafs

    def fs_paths(raws: Iterable[str], dvs: Iterable[Any]) -> set[str]:
        found = {p for p in (log.data_file_fs_path(raw) for raw in raws) if p is not None}
        found |= {rel for dv in dvs if isinstance(dv, dict) and (rel := dv_relative_path(dv)) is not None}
        return found

    listing = log.fs.get_file_info(pafs.FileSelector(log.location.fs_path(), recursive=True, allow_not_found=True))
    candidates = {
        info.path: int(info.size or 0)
        for info in listing
        if info.type == pafs.FileType.File and not any(part.startswith(("_", ".")) for part in info.path.split("/"))
    }
    dvs = [a.get("deletionVector") for a in snap.files.values()] + list(snap.tombstone_dvs)
    referenced = fs_paths((*snap.files, *snap.tombstones), dvs)
    candidates = {rel: n for rel, n in candidates.items() if rel not in referenced}
    if candidates and snap.checkpoint_version is not None:
        for v in log.commit_versions():
            if v > snap.checkpoint_version:
                break
            actions = [a.get("add") or a.get("remove") for a in log.read_actions(v)]
            files = [a for a in actions if isinstance(a, dict)]
            referenced |= fs_paths((str(a.get("path")) for a in files), (a.get("deletionVector") for a in files))
        candidates = {rel: n for rel, n in candidates.items() if rel not in referenced}
    return len(candidates), sum(candidates.values()), sorted(candidates)
