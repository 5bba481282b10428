"""Readers for Spark's compactible file logs: the file sink's ``_spark_metadata`` and the file source's log.

Both are ``CompactibleFileStreamLog`` folders: a file per batch (``N``) and, every ``compactInterval``
batches,
``N.compact`` holding all entries up to ``N``. Each file is ``v1`` then one JSON entry per line. Sink entries
are ``SinkFileStatus`` (``path``, ``size``, ``isDir``, ``modificationTime``, ``blockReplication``,
``blockSize``, ``action`` = ``add``/``delete``); file-source entries are ``FileEntry`` (``path``,
``timestamp``,
``batchId``). Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkonce.checkpoint.files import parse_log_version, read_text
from sparkonce.errors import CheckpointError

__all__ = ["FileLog", "FileLogBatch", "FileLogProblem", "read_file_log"]

_BATCH_RE = re.compile(r"^(\d+)(\.compact)?$")


@dataclass(frozen=True)
class FileLogBatch:
    """One file of the log: its batch id, whether it is a compaction, and its entries (parsed JSON
    objects)."""

    batch_id: int
    compact: bool
    log_version: int
    entries: tuple[dict[str, Any], ...]
    path: Path


@dataclass(frozen=True)
class FileLogProblem:
    """A file of the log that could not be used, and why."""

    path: Path
    problem: str


@dataclass(frozen=True)
class FileLog:
    """A compactible file log read from disk.

    ``entries`` are the live entries as Spark computes them: the newest compaction plus the later batch files,
    with sink ``delete`` entries removing earlier ``add`` entries of the same path.
    """

    log_dir: Path
    batches: tuple[FileLogBatch, ...]
    entries: tuple[dict[str, Any], ...]
    problems: tuple[FileLogProblem, ...]
    missing_batches: tuple[int, ...]
    """Batch ids after the newest compaction (or from 0) with no file: entries Spark can no longer see."""

    @property
    def latest_batch_id(self) -> int | None:
        """The newest batch id with a file, or ``None`` for an empty log."""
        return self.batches[-1].batch_id if self.batches else None

    def paths(self) -> set[str]:
        """The ``path`` of every live entry (URIs such as ``file:///...`` for the sink)."""
        return {str(e["path"]) for e in self.entries if "path" in e}


def _parse(path: Path, batch_id: int, compact: bool) -> FileLogBatch:
    text = read_text(path)
    if not text:
        raise CheckpointError(f"{path}: empty log file")
    lines = text.split("\n")
    version = parse_log_version(lines[0], 1, path=path)
    entries = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise CheckpointError(f"{path}: line {lineno} is not valid JSON ({err.msg})") from err
        if not isinstance(entry, dict):
            raise CheckpointError(f"{path}: line {lineno} is not a JSON object")
        entries.append(entry)
    return FileLogBatch(batch_id, compact, version, tuple(entries), path)


def read_file_log(log_dir: str | os.PathLike[str]) -> FileLog:
    """Read a ``_spark_metadata`` (or file-source) log folder; unreadable files become problems, not errors.

    Raises:
        CheckpointError: ``log_dir`` is not a folder.
    """
    folder = Path(log_dir)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: file log folder not found")
    found: dict[int, tuple[Path, bool]] = {}
    for entry in os.scandir(folder):
        m = _BATCH_RE.match(entry.name)
        if not m:
            continue  # .crc, .tmp and other dotfiles are written and removed by Hadoop: ignore them
        batch_id = int(m.group(1))
        compact = m.group(2) is not None
        if batch_id in found and not compact:
            continue  # "N.compact" wins over a stray "N"
        found[batch_id] = (Path(entry.path), compact)
    problems: list[FileLogProblem] = []
    batches: list[FileLogBatch] = []
    for batch_id in sorted(found):
        path, compact = found[batch_id]
        try:
            batches.append(_parse(path, batch_id, compact))
        except CheckpointError as err:
            problems.append(FileLogProblem(path, str(err)))
    compactions = [b for b in batches if b.compact]
    base = compactions[-1] if compactions else None
    start = base.batch_id + 1 if base else 0
    live: list[dict[str, Any]] = list(base.entries) if base else []
    later = [b for b in batches if b.batch_id >= start]
    present = {b.batch_id for b in batches} | {int(Path(p.path).name.split(".")[0]) for p in problems}
    last = max(present) if present else -1
    missing = tuple(i for i in range(start, last + 1) if i not in present)
    for batch in later:
        live.extend(batch.entries)
    deleted = {str(e.get("path")) for e in live if e.get("action") == "delete"}
    if deleted:
        live = [e for e in live if str(e.get("path")) not in deleted]
    return FileLog(folder, tuple(batches), tuple(live), tuple(problems), missing)
