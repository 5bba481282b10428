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


def _listed_data_files(log: DeltaLog) -> Iterable[tuple[str, int]]:
    """:func:`walk_data_files` of an object-store table: one recursive listing of its prefix (in the table's file
    system, paths are relative to the table root)."""
    import pyarrow.fs as pafs

    listing = log.fs.get_file_info(pafs.FileSelector(log.location.fs_path(), recursive=True, allow_not_found=True))
    for info in listing:
        if info.type == pafs.FileType.File and not any(part.startswith(("_", ".")) for part in info.path.split("/")):
            yield info.path, int(info.size or 0)


def orphan_files(log: DeltaLog, snap: Snapshot) -> tuple[int, int, list[str]]:
    """Files under the table root that no table version still in ``_delta_log`` references.

    Files and references are compared as normalised paths in the table's file system (local or object store).
    """
    candidates = dict(
        walk_data_files(log.table_path) if log.location.is_local else _listed_data_files(log)
    )  # relative path -> bytes
    referenced: set[str] = set()

    def reference(raws: Iterable[str], dvs: Iterable[Any]) -> None:
        referenced.update(os.path.normpath(p) for p in map(log.data_file_fs_path, raws) if p is not None)
        for dv in dvs:
            if isinstance(dv, dict) and (rel := dv_relative_path(dv)) is not None:
                referenced.add(os.path.normpath(log.location.fs_path(rel)))

    def unreferenced() -> dict[str, int]:
        return {
            rel: n for rel, n in candidates.items() if os.path.normpath(log.location.fs_path(rel)) not in referenced
        }

    reference((*snap.files, *snap.tombstones), [a.get("deletionVector") for a in snap.files.values()])
    reference((), snap.tombstone_dvs)
    candidates = unreferenced()
    if candidates and snap.checkpoint_version is not None:
        # Older JSON commits still in the log may reference them (e.g. superseded deletion vectors).
        for v in log.commit_versions():
            if v > snap.checkpoint_version:
                break
            actions = [a.get("add") or a.get("remove") for a in log.read_actions(v)]
            files = [a for a in actions if isinstance(a, dict)]
            reference((str(a.get("path")) for a in files), (a.get("deletionVector") for a in files))
        candidates = unreferenced()
    return len(candidates), sum(candidates.values()), sorted(candidates)
