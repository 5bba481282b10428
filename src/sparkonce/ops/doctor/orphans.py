"""A table's data files against its log, from one listing: files no table version references (left by failed or
aborted writes) and files the newest table version references that are missing or of another size (deleted by
hand, by a defect, or by a VACUUM with a short retention), with the Delta commits that made the table reference them.

Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkonce.delta.log.delta_log import CommitEntry, DeltaLog, Snapshot
from sparkonce.delta.table.deletion_vectors import dv_relative_path
from sparkonce.errors import DeltaLogError

__all__ = [
    "DamagedFile",
    "FileCheck",
    "FileKind",
    "FileOrigins",
    "ReferencedFile",
    "check_files",
    "referenced_files",
    "trace_origins",
    "walk_data_files",
]

FileKind = Literal["data", "deletion-vector"]
_DV_FRAMING_BYTES = 8
"""A deletion vector in its file is framed by a 4-byte size before the bitmap and a 4-byte CRC after it."""


@dataclass(frozen=True)
class ReferencedFile:
    """A file an ``add`` or ``remove`` action references: its data file, or its deletion vector file."""

    key: str
    """The normalised path in the table's file system: the same file always has the same key."""
    kind: FileKind
    path: str
    """As the log names it: the raw ``add`` path, a ``u`` deletion vector's table-relative file, a ``p`` one's URI."""
    size: int | None
    """Data file: the size the log records. Deletion vector file: the least size the descriptor implies (``offset``
    + ``sizeInBytes`` + 8); several deletion vectors may share one file."""
    under_root: bool = True
    """False for a local file outside the table root (an absolute path, e.g. a shallow clone's)."""


@dataclass(frozen=True)
class DamagedFile:
    """A file the newest table version references that is not there as the log describes it."""

    key: str
    kind: FileKind
    path: str
    size: int | None
    """See :attr:`ReferencedFile.size`."""
    found_size: int | None
    """The size of the file found, or None when there is none."""

    @property
    def missing(self) -> bool:
        return self.found_size is None


@dataclass(frozen=True)
class FileCheck:
    """What :func:`check_files` found."""

    orphans: list[str]
    orphan_bytes: int
    damaged: list[DamagedFile]
    """Referenced files that are missing (``found_size`` None) or of another size than the log's (data files) or
    shorter than their deletion vectors need, sorted by path."""


def referenced_files(log: DeltaLog, action: Mapping[str, Any]) -> list[ReferencedFile]:
    """The files of one ``add`` or ``remove`` action: its data file and its deletion vector file (storage type ``u``
    or ``p``; inline vectors have none). Files on another store than the table's are left out."""
    found: list[ReferencedFile] = []
    raw = str(action.get("path"))
    key = _key(log, log.data_file_fs_path(raw))
    if key is not None:
        found.append(ReferencedFile(key[0], "data", raw, _int(action.get("size")), key[1]))
    dv = action.get("deletionVector")
    if isinstance(dv, dict) and (ref := _dv_file(log, dv)) is not None:
        found.append(ref)
    return found


def _key(log: DeltaLog, fs_path: str | None) -> tuple[str, bool] | None:
    """A file's normalised path in the table's file system and whether it is under the table root; None for a file
    the table's file system does not hold (:meth:`DeltaLog.data_file_fs_path` gives None, or a path above the root of
    an object-store table)."""
    if fs_path is None:
        return None
    key = os.path.normpath(fs_path)
    if log.location.is_local:
        return key, key.startswith(os.path.normpath(log.location.uri) + os.sep)
    return None if key.startswith("..") or os.path.isabs(key) else (key, True)


def _dv_file(log: DeltaLog, dv: Mapping[str, Any]) -> ReferencedFile | None:
    storage = dv.get("storageType")
    if storage == "u":
        name = dv_relative_path(dv)
        fs_path = log.location.fs_path(name) if name is not None else None
    elif storage == "p":
        name = str(dv.get("pathOrInlineDv") or "")
        fs_path = log.data_file_fs_path(name) if name else None
    else:
        return None
    key = _key(log, fs_path)
    if name is None or key is None:
        return None
    offset, size = _int(dv.get("offset")), _int(dv.get("sizeInBytes"))
    least = (offset or 0) + size + _DV_FRAMING_BYTES if size is not None else None
    return ReferencedFile(key[0], "deletion-vector", name, least, key[1])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _hidden(rel: str) -> bool:
    """Delta's hidden names (logs, checksums, ``_SUCCESS``, CDC folders): no data file of a table version."""
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def walk_data_files(root: Path) -> Iterable[tuple[str, int]]:
    """Yield ``(relative path, bytes)`` of data files, skipping ``_``/``.`` names (logs, checksums, CDC)."""
    prefix = os.path.join(os.fspath(root), "")
    stack = [prefix]
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
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                yield entry.path[len(prefix) :], entry.stat().st_size


def _list_files(log: DeltaLog) -> Iterator[tuple[str, int]]:
    """The table's files from one listing: a walk of a local table's folders (hidden ones left out, so
    ``_delta_log`` is never walked), one recursive listing of an object-store prefix (every file but
    ``_delta_log``'s: a flat listing cannot skip folders). Paths relative to the table root."""
    if log.location.is_local:
        yield from walk_data_files(log.table_path)
        return
    import pyarrow.fs as pafs

    listing = log.fs.get_file_info(pafs.FileSelector(log.location.fs_path(), recursive=True, allow_not_found=True))
    for info in listing:
        if info.type == pafs.FileType.File and not info.path.startswith("_delta_log/"):
            yield info.path, int(info.size or 0)


def _list_folder(folder: str) -> dict[str, int]:
    """The files of one local folder: normalised path -> bytes (none when it cannot be listed)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return {}
    return {os.path.normpath(e.path): e.stat().st_size for e in entries if e.is_file(follow_symlinks=False)}


def check_files(log: DeltaLog, snap: Snapshot) -> FileCheck:
    """Compare the files under the table root (one listing, no request per file) with what the log references.

    Files and references are compared as normalised paths in the table's file system (local or object store).
    A local file the walk did not see because it lies under a hidden name (a partition column named ``_p`` gives
    folders ``_p=0``) is looked for in a listing of its folder, once per folder; a local file outside the table root
    (rare: a shallow clone's) is looked up alone. A data file is also found under its ``add`` path taken literally
    (a writer that did not URL-encode it), as :mod:`sparkonce.delta.txn.cleanup` reads paths. Hidden files are never
    orphans.
    """
    by_key: dict[str, int] = {}  # normalised path in the table's file system -> bytes
    rel_of: dict[str, str] = {}  # the same -> relative path, for the files that may be orphans
    for rel, n in _list_files(log):
        key = os.path.normpath(log.location.fs_path(rel))
        by_key[key] = n
        if not _hidden(rel):
            rel_of[key] = rel
    hidden_folders: set[str] = set()

    def size_of(ref: ReferencedFile) -> int | None:
        if not ref.under_root:
            try:
                return os.stat(ref.key).st_size
            except OSError:
                return None
        if ref.key not in by_key and log.location.is_local:
            folder = os.path.dirname(ref.key)
            if folder not in hidden_folders and _hidden(os.path.relpath(ref.key, log.table_path).replace(os.sep, "/")):
                hidden_folders.add(folder)
                by_key.update(_list_folder(folder))
        found = by_key.get(ref.key)
        if found is None and ref.kind == "data" and "%" in ref.path:
            found = by_key.get(os.path.normpath(log.location.fs_path(ref.path)))
        return found

    active = [ref for add in snap.files.values() for ref in referenced_files(log, add)]
    damaged: dict[str, DamagedFile] = {}
    vectors: dict[str, ReferencedFile] = {}  # deletion vector file -> the reference that needs the most of it
    for ref in active:
        if ref.kind == "deletion-vector":
            known = vectors.get(ref.key)
            if known is None or (ref.size or 0) > (known.size or 0):
                vectors[ref.key] = ref
            continue
        found = size_of(ref)
        if found is None or (ref.size is not None and found != ref.size):
            damaged[ref.key] = DamagedFile(ref.key, ref.kind, ref.path, ref.size, found)
    for ref in vectors.values():
        found = size_of(ref)
        if found is None or (ref.size is not None and found < ref.size):
            damaged[ref.key] = DamagedFile(ref.key, ref.kind, ref.path, ref.size, found)
    orphans, orphan_bytes = _orphans(log, snap, {ref.key for ref in active}, rel_of, by_key)
    return FileCheck(orphans, orphan_bytes, sorted(damaged.values(), key=lambda d: d.path))


def _orphans(
    log: DeltaLog, snap: Snapshot, active: set[str], rel_of: dict[str, str], by_key: dict[str, int]
) -> tuple[list[str], int]:
    """Files under the table root that no table version still in ``_delta_log`` references: the listed files
    (``rel_of``) that neither the active files (``active``), the tombstones nor older JSON commits name."""
    candidates = {key for key in rel_of if key not in active}

    def drop(actions: Iterable[Mapping[str, Any]], dvs: Iterable[Any] = ()) -> None:
        candidates.difference_update(ref.key for action in actions for ref in referenced_files(log, action))
        candidates.difference_update(
            ref.key for dv in dvs if isinstance(dv, dict) and (ref := _dv_file(log, dv)) is not None
        )

    if candidates:
        drop(({"path": p} for p in snap.tombstones), snap.tombstone_dvs)
    if candidates and snap.checkpoint_version is not None:
        # Older JSON commits still in the log may reference them (e.g. superseded deletion vectors).
        for v in log.commit_versions():
            if v > snap.checkpoint_version or not candidates:
                break
            actions = [a.get("add") or a.get("remove") for a in log.read_actions(v)]
            drop(a for a in actions if isinstance(a, dict))
    return sorted(rel_of[key] for key in candidates), sum(by_key[key] for key in candidates)


@dataclass(frozen=True)
class FileOrigins:
    """Where damaged files came from: the Delta commits read, newest first, down to the oldest that matters."""

    introduced_at: dict[str, int]
    """File key -> the table version from which on the table references the file without a break (the Delta commit
    that wrote it, or that re-added it, e.g. a RESTORE). Files whose commit is no longer in the log are absent."""
    commits: list[CommitEntry]
    """Every Delta commit read, newest first: from the newest table version down to the oldest in
    :attr:`introduced_at` (further down when some file's commit was not found)."""


def trace_origins(log: DeltaLog, newest: int, keys: Iterable[str]) -> FileOrigins:
    """Read Delta commits from ``newest`` down until every file in ``keys`` has the table version that made the
    table reference it, or the log ends (JSON commits removed by log clean-up, or unreadable).

    A commit that removes a file and adds it again (a deletion vector update: ``remove`` and ``add`` of one path) did
    not introduce it: the table referenced it before, so the search goes on below it.
    """
    wanted = set(keys)
    introduced: dict[str, int] = {}
    commits: list[CommitEntry] = []
    for table_version in range(newest, -1, -1):
        if not wanted or not log.has_commit(table_version):
            break
        try:
            actions = log.read_actions(table_version)
        except DeltaLogError:
            break  # unreadable: the files it would explain are reported as of unknown origin
        added: set[str] = set()
        removed: set[str] = set()
        for action in actions:
            if "add" in action:
                added.update(ref.key for ref in referenced_files(log, action["add"]))
            elif "remove" in action:
                removed.update(ref.key for ref in referenced_files(log, action["remove"]))
        for key in (added - removed) & wanted:
            introduced[key] = table_version
        wanted -= added - removed
        commits.append(log.commit_entry(table_version, actions))
    return FileOrigins(introduced, commits)
