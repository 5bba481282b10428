"""Read a whole Spark streaming checkpoint directory into one :class:`CheckpointState`.

Bad files never raise: each becomes a :class:`FileProblem` naming the file and what is wrong, so the
doctor can
report them. Hadoop's ``.crc`` dotfiles are ignored; ``.tmp`` files (left by a writer that crashed, or that is
writing right now) are collected. Batches purged by Spark's log retention simply start the logs above 0.
Driver/CLI only.
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass
from pathlib import Path
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
    read_text,
)
from sparkonce.errors import CheckpointError

__all__ = ["CheckpointState", "FileProblem", "TempFile", "list_batch_files", "read_checkpoint"]

# Hadoop's CheckpointFileManager writes "<dir>/.<name>.<uuid>.tmp" then renames it to "<dir>/<name>".
_TMP_RE = re.compile(r"^\.(?P<target>[^.]+(?:\.compact)?)\.(?P<writer>[0-9a-fA-F-]{8,})\.tmp$")

ProblemKind = Literal["unreadable", "malformed", "missing", "unexpected"]


@dataclass(frozen=True)
class FileProblem:
    """A checkpoint file that could not be used."""

    path: Path
    kind: ProblemKind
    problem: str


@dataclass(frozen=True)
class TempFile:
    """A leftover ``.tmp`` file: ``target`` is the file it was going to become, ``writer`` its random id."""

    path: Path
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

    checkpoint_dir: Path
    metadata: StreamMetadata | None
    metadata_present: bool
    offsets: dict[int, OffsetsFile]
    commits: dict[int, CommitFile]
    offset_ids: tuple[int, ...]
    commit_ids: tuple[int, ...]
    sources: dict[str, dict[int, SourceInitialOffsets]]
    problems: tuple[FileProblem, ...]
    temp_files: tuple[TempFile, ...]

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


def list_batch_files(folder: Path) -> tuple[dict[int, Path], list[TempFile]]:
    """Return the batch files (``N`` -> path) and leftover ``.tmp`` files of one log folder."""
    batches: dict[int, Path] = {}
    temps: list[TempFile] = []
    if not folder.is_dir():
        return batches, temps
    for entry in os.scandir(folder):
        name = entry.name
        if name.isdigit():
            batches[int(name)] = Path(entry.path)
        elif name.endswith(".tmp"):
            m = _TMP_RE.match(name)
            stat = entry.stat()
            temps.append(
                TempFile(
                    Path(entry.path),
                    m.group("target") if m else name,
                    m.group("writer") if m else "",
                    stat.st_size,
                    int(stat.st_mtime * 1000),
                )
            )
    return batches, temps


def read_checkpoint(checkpoint_dir: str | os.PathLike[str], *, read_sources: bool = True) -> CheckpointState:
    """Read ``metadata``, ``offsets/``, ``commits/`` and ``sources/`` of a checkpoint directory.

    Raises:
        CheckpointError: ``checkpoint_dir`` does not exist or is not a folder (the only error raised).
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        raise CheckpointError(f"{root}: checkpoint directory not found")
    # Hundreds of thousands of small, long-lived objects: pause the cyclic GC (nothing here forms cycles), or
    # its repeated full passes make reading grow faster than the number of files.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_checkpoint(root, read_sources=read_sources)
    finally:
        if gc_was_enabled:
            gc.enable()


def _read_checkpoint(root: Path, *, read_sources: bool) -> CheckpointState:
    problems: list[FileProblem] = []
    temps: list[TempFile] = []

    metadata: StreamMetadata | None = None
    metadata_path = root / "metadata"
    metadata_present = metadata_path.is_file()
    if metadata_present:
        try:
            metadata = parse_metadata(read_text(metadata_path), path=metadata_path)
        except CheckpointError as err:
            problems.append(FileProblem(metadata_path, "malformed", str(err)))
    _, root_temps = list_batch_files(root)
    temps.extend(root_temps)

    offsets: dict[int, OffsetsFile] = {}
    offset_files, offset_temps = list_batch_files(root / "offsets")
    temps.extend(offset_temps)
    for batch_id in sorted(offset_files):
        path = offset_files[batch_id]
        try:
            offsets[batch_id] = parse_offsets(read_text(path), batch_id, path=path)
        except (CheckpointError, OSError) as err:
            problems.append(FileProblem(path, "malformed", str(err)))

    commits: dict[int, CommitFile] = {}
    commit_files, commit_temps = list_batch_files(root / "commits")
    temps.extend(commit_temps)
    for batch_id in sorted(commit_files):
        path = commit_files[batch_id]
        try:
            commits[batch_id] = parse_commit(read_text(path), batch_id, path=path)
        except (CheckpointError, OSError) as err:
            problems.append(FileProblem(path, "malformed", str(err)))

    sources: dict[str, dict[int, SourceInitialOffsets]] = {}
    sources_dir = root / "sources"
    if read_sources and sources_dir.is_dir():
        for source in sorted(os.scandir(sources_dir), key=lambda e: e.name):
            if not source.is_dir():
                continue
            files, source_temps = list_batch_files(Path(source.path))
            temps.extend(source_temps)
            for batch_id in sorted(files):
                path = files[batch_id]
                try:
                    raw = path.read_bytes()
                    parsed = parse_source_initial_offsets(raw, path=path)
                except OSError as err:
                    problems.append(FileProblem(path, "unreadable", f"{path}: cannot read: {err}"))
                    continue
                except CheckpointError as err:
                    problems.append(FileProblem(path, "malformed", str(err)))
                    continue
                sources.setdefault(source.name, {})[batch_id] = parsed

    return CheckpointState(
        checkpoint_dir=root,
        metadata=metadata,
        metadata_present=metadata_present,
        offsets=offsets,
        commits=commits,
        offset_ids=tuple(sorted(offset_files)),
        commit_ids=tuple(sorted(commit_files)),
        sources=sources,
        problems=tuple(problems),
        temp_files=tuple(sorted(temps, key=lambda t: str(t.path))),
    )
