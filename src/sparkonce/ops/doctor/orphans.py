"""A table's data files against its log, from one listing: files no table version references (left by failed or
aborted writes) and files the newest table version references that are missing or of another size (deleted by
hand, by a defect, or by a VACUUM with a short retention).

CLI/driver only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkonce.delta.log import DeltaLog, Snapshot, dv_relative_path

__all__ = ["FileCheck", "MissingFile", "check_files", "walk_data_files"]


@dataclass(frozen=True)
class MissingFile:
    """A file the newest table version references that is not there as the log describes it."""

    path: str
    """As the log names it (an ``add`` path, or a deletion vector's file relative to the table root)."""
    size: int | None
    """The size the log records (None for a deletion vector file, whose size the log does not give)."""
    found_size: int | None
    """The size of the file found, or None when there is none."""


@dataclass(frozen=True)
class FileCheck:
    """What :func:`check_files` found."""

    orphans: list[str]
    orphan_bytes: int
    missing: list[MissingFile]
    """Referenced files that are missing (``found_size`` None) or whose size differs from the log's."""


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


def check_files(log: DeltaLog, snap: Snapshot) -> FileCheck:
    """Compare the files under the table root (one listing) with what the log references.

    Files and references are compared as normalised paths in the table's file system (local or object store).
    """
    listed = dict(
        walk_data_files(log.table_path) if log.location.is_local else _listed_data_files(log)
    )  # relative path -> bytes
    by_fs_path = {os.path.normpath(log.location.fs_path(rel)): n for rel, n in listed.items()}
    missing: list[MissingFile] = []
    for raw, add in snap.files.items():
        fs_path = log.data_file_fs_path(raw)
        if fs_path is None:
            continue  # a file outside the table root: not in this listing
        found = by_fs_path.get(os.path.normpath(fs_path))
        size = add.get("size")
        if found is None or (isinstance(size, int) and found != size):
            missing.append(MissingFile(raw, size if isinstance(size, int) else None, found))
        dv = add.get("deletionVector")
        rel = dv_relative_path(dv) if isinstance(dv, dict) else None
        if rel is not None and os.path.normpath(log.location.fs_path(rel)) not in by_fs_path:
            missing.append(MissingFile(rel, None, None))
    orphans, orphan_bytes = _orphans(log, snap, listed)
    return FileCheck(orphans, orphan_bytes, missing)


def _orphans(log: DeltaLog, snap: Snapshot, listed: dict[str, int]) -> tuple[list[str], int]:
    """Files under the table root that no table version still in ``_delta_log`` references."""
    candidates = dict(listed)
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
    return sorted(candidates), sum(candidates.values())
