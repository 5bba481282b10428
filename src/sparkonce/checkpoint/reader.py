"""Read a whole Spark streaming checkpoint directory into one :class:`CheckpointState`.

Bad files never raise: each becomes a :class:`FileProblem` naming the file and what is wrong, so the
doctor can
report them. Hadoop's ``.crc`` dotfiles are ignored; ``.tmp`` files (left by a writer that crashed, or that is
writing right now) are collected. Batches purged by Spark's log retention simply start the logs above 0.
Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass
from typing import Literal

from sparkonce.checkpoint.files import (
    CommitFile,
    OffsetsFile,
    SourceInitialOffsets,
    StreamMetadata,
    parse_commit,
    parse_metadata,
    parse_offsets,
    parse_source_initial_offsets,
)
from sparkonce.checkpoint.fs import CheckpointFS, LocalCheckpointFS, checkpoint_fs
from sparkonce.errors import CheckpointError

__all__ = ["CheckpointState", "FileProblem", "TempFile", "list_batch_files", "read_checkpoint"]

# Hadoop's CheckpointFileManager writes "<dir>/.<name>.<uuid>.tmp" then renames it to "<dir>/<name>".
_TMP_RE = re.compile(r"^\.(?P<target>[^.]+(?:\.compact)?)\.(?P<writer>[0-9a-fA-F-]{8,})\.tmp$")

ProblemKind = Literal["unreadable", "malformed", "missing", "unexpected"]


@dataclass(frozen=True)
class FileProblem:
    """A checkpoint file that could not be used."""

    path: str
    kind: ProblemKind
    problem: str


@dataclass(frozen=True)
class TempFile:
    """A leftover ``.tmp`` file: ``target`` is the file it was going to become, ``writer`` its random id."""

    path: str
    target: str
    writer: str
    size: int
    mtime_ms: int


@dataclass(frozen=True)
class CheckpointState:
    """Everything read from one checkpoint directory.

    ``offset_ids``/``commit_ids`` list every batch file present (even unreadable ones);
    ``offsets``/``commits``
    hold those that parsed.
    """

    checkpoint_dir: str
    """The location as read: an absolute local path, or the qualified URI."""
    metadata: StreamMetadata | None
    metadata_present: bool
    offsets: dict[int, OffsetsFile]
    commits: dict[int, CommitFile]
    offset_ids: tuple[int, ...]
    commit_ids: tuple[int, ...]
    sources: dict[str, dict[int, SourceInitialOffsets]]
    problems: tuple[FileProblem, ...]
    temp_files: tuple[TempFile, ...]
    unread_batches: int = 0
    """Batch files listed but not read (older than ``newest_batches``); their problems are not looked for."""

    @property
    def query_id(self) -> str | None:
        """The query id from ``metadata``, if readable."""
        return self.metadata.query_id if self.metadata else None

    @property
    def last_planned(self) -> int | None:
        """The newest batch id with an ``offsets/N`` file."""
        return self.offset_ids[-1] if self.offset_ids else None

    @property
    def last_committed(self) -> int | None:
        """The newest batch id with a ``commits/N`` file (a checkpoint commit)."""
        return self.commit_ids[-1] if self.commit_ids else None

    @property
    def is_empty(self) -> bool:
        """True when neither log holds a batch."""
        return not self.offset_ids and not self.commit_ids


def list_batch_files(folder: str, fs: CheckpointFS | None = None) -> tuple[dict[int, str], list[TempFile]]:
    """Return the batch files (``N`` -> file name in ``folder``) and leftover ``.tmp`` files of one log folder.

    Names stay strings: a checkpoint can hold hundreds of thousands of batch files, and an object per file would
    cost more than listing them. ``fs`` defaults to the file system of ``folder``.
    """
    fs = fs or checkpoint_fs(folder)
    temps: list[TempFile] = []
    names = fs.names(folder)
    batches = {int(name): name for name in names if name.isdigit()}
    for name in names:
        if name.endswith(".tmp"):
            path = fs.join(folder, name)
            m = _TMP_RE.match(name)
            stat = fs.stat(path)
            if stat is None:  # renamed into place by its writer since the listing
                continue
            temps.append(
                TempFile(
                    path, m.group("target") if m else name, m.group("writer") if m else "", stat.size, stat.mtime_ms
                )
            )
    return batches, temps


def read_checkpoint(
    checkpoint_dir: str | os.PathLike[str], *, read_sources: bool = True, newest_batches: int | None = None
) -> CheckpointState:
    """Read ``metadata``, ``offsets/``, ``commits/`` and ``sources/`` of a checkpoint directory.

    ``newest_batches`` limits the files parsed to that many newest of ``offsets/`` and of ``commits/`` (Spark
    itself keeps 100 by default and reads only the newest on restart); every batch file is still listed. A
    non-local location (``hdfs://``, ``s3a://``, ...) is read through the active Spark session's Hadoop file system.

    Raises:
        CheckpointError: ``checkpoint_dir`` does not exist or is not a folder.
        StorageError: a non-local location without a Spark session, or of a scheme Hadoop has no file system for.
    """
    fs = checkpoint_fs(checkpoint_dir)
    if not fs.is_dir(fs.root):
        raise CheckpointError(f"{fs.root}: checkpoint directory not found")
    # Hundreds of thousands of small, long-lived objects: pause the cyclic GC (nothing here forms cycles), or
    # its repeated full passes make reading grow faster than the number of files.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_checkpoint(fs, read_sources=read_sources, newest_batches=newest_batches)
    finally:
        if gc_was_enabled:
            gc.enable()


def _read_checkpoint(fs: CheckpointFS, *, read_sources: bool, newest_batches: int | None) -> CheckpointState:
    """Read the checkpoint; with ``newest_batches``, parse only that many newest files of each log (every batch
    file is still listed). Local files are read by a few threads (the reads release the GIL), parsed in this one."""
    root = fs.root
    problems: list[FileProblem] = []
    temps: list[TempFile] = []

    metadata: StreamMetadata | None = None
    metadata_path = fs.join(root, "metadata")
    metadata_present = fs.exists(metadata_path)
    if metadata_present:
        try:
            metadata = parse_metadata(_text(_read_bytes(fs, metadata_path), metadata_path), path=metadata_path)
        except CheckpointError as err:
            problems.append(FileProblem(metadata_path, "malformed", str(err)))
    _, root_temps = list_batch_files(root, fs)
    temps.extend(root_temps)

    offsets_dir, commits_dir = fs.join(root, "offsets"), fs.join(root, "commits")
    offset_files, offset_temps = list_batch_files(offsets_dir, fs)
    commit_files, commit_temps = list_batch_files(commits_dir, fs)
    temps.extend(offset_temps)
    temps.extend(commit_temps)
    offset_ids, commit_ids = sorted(offset_files), sorted(commit_files)
    wanted_offsets = offset_ids if newest_batches is None else offset_ids[-newest_batches:] if newest_batches else []
    wanted_commits = commit_ids if newest_batches is None else commit_ids[-newest_batches:] if newest_batches else []
    offset_paths = [fs.join(offsets_dir, offset_files[b]) for b in wanted_offsets]
    commit_paths = [fs.join(commits_dir, commit_files[b]) for b in wanted_commits]
    offset_texts = _read_texts(fs, offset_paths)
    commit_texts = _read_texts(fs, commit_paths)

    offsets: dict[int, OffsetsFile] = {}
    for batch_id, path, text in zip(wanted_offsets, offset_paths, offset_texts):
        try:
            offsets[batch_id] = parse_offsets(_text(text, path), batch_id, path=path)
        except CheckpointError as err:
            problems.append(FileProblem(path, "malformed", str(err)))

    commits: dict[int, CommitFile] = {}
    for batch_id, path, text in zip(wanted_commits, commit_paths, commit_texts):
        try:
            commits[batch_id] = parse_commit(_text(text, path), batch_id, path=path)
        except CheckpointError as err:
            problems.append(FileProblem(path, "malformed", str(err)))

    sources: dict[str, dict[int, SourceInitialOffsets]] = {}
    sources_dir = fs.join(root, "sources")
    if read_sources and fs.is_dir(sources_dir):
        for name in sorted(fs.names(sources_dir)):
            source_dir = fs.join(sources_dir, name)
            if not fs.is_dir(source_dir):
                continue
            files, source_temps = list_batch_files(source_dir, fs)
            temps.extend(source_temps)
            for batch_id in sorted(files):
                path = fs.join(source_dir, files[batch_id])
                raw = _read_bytes(fs, path)
                if isinstance(raw, OSError):
                    problems.append(FileProblem(path, "unreadable", f"{path}: cannot read: {raw}"))
                    continue
                try:
                    parsed = parse_source_initial_offsets(raw, path=path)
                except CheckpointError as err:
                    problems.append(FileProblem(path, "malformed", str(err)))
                    continue
                sources.setdefault(name, {})[batch_id] = parsed

    return CheckpointState(
        checkpoint_dir=root,
        metadata=metadata,
        metadata_present=metadata_present,
        offsets=offsets,
        commits=commits,
        offset_ids=tuple(offset_ids),
        commit_ids=tuple(commit_ids),
        sources=sources,
        problems=tuple(problems),
        temp_files=tuple(sorted(temps, key=lambda t: t.path)),
        unread_batches=len(offset_ids) - len(wanted_offsets) + len(commit_ids) - len(wanted_commits),
    )


_READ_THREADS = 8
_PARALLEL_FROM = 64


def _read_bytes(fs: CheckpointFS, path: str) -> bytes | OSError:
    try:
        return fs.read_bytes(path)
    except OSError as err:
        return err


def _read_texts(fs: CheckpointFS, paths: list[str]) -> list[bytes | OSError]:
    """The bytes of each file (or the error reading it), read by a few threads when there are many local ones (the
    JVM's file system is asked one file at a time: py4j calls from threads would each open a connection)."""
    if len(paths) < _PARALLEL_FROM or not isinstance(fs, LocalCheckpointFS):
        return [_read_bytes(fs, p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=_READ_THREADS, thread_name_prefix="checkpoint-read") as pool:
        return list(pool.map(lambda p: _read_bytes(fs, p), paths, chunksize=256))


def _text(data: bytes | OSError, path: str) -> str:
    """Decode what :func:`_read_bytes` returned, raising the error :func:`read_text` would.

    Raises:
        CheckpointError: The file could not be read or is not UTF-8.
    """
    if isinstance(data, OSError):
        raise CheckpointError(f"{path}: cannot read: {data.strerror or data}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
