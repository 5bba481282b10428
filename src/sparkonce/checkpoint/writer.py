"""Write checkpoint files byte for byte as Spark 4 does (``metadata``, ``offsets/N``, ``commits/N``).

Used to rebuild a lost checkpoint from a table. Formats follow Spark's ``StreamMetadata``,
``OffsetSeqLog`` and
``CommitLog`` serializers (json4s compact JSON: no spaces, UTF-8, fields in declaration order, no trailing
newline) and are tested against files written by pyspark 4.3. Files are written like Hadoop's
``CheckpointFileManager``: to ``.<name>.<uuid>.tmp`` first, then renamed, never over an existing file, through
the checkpoint's file system (:mod:`sparkonce.checkpoint.fs`: local, or Hadoop's for ``hdfs://``, ``s3a://``, ...).
Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sparkonce.checkpoint.files import VOID_OFFSET, OffsetSeqMetadata
from sparkonce.checkpoint.fs import checkpoint_fs
from sparkonce.errors import CheckpointError

__all__ = [
    "format_commit",
    "format_metadata",
    "format_offsets",
    "write_commit",
    "write_metadata",
    "write_offsets",
]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def format_metadata(query_id: str) -> str:
    """Return the text of a checkpoint ``metadata`` file for ``query_id``."""
    return _json({"id": query_id})


def _metadata_json(metadata: OffsetSeqMetadata) -> str:
    data: dict[str, Any] = {
        "batchWatermarkMs": metadata.batch_watermark_ms,
        "batchTimestampMs": metadata.batch_timestamp_ms,
        "conf": dict(metadata.conf),
    }
    data.update(metadata.extra)
    return _json(data)


def format_offsets(
    *,
    metadata: OffsetSeqMetadata | None,
    sources: Sequence[str | None] | Mapping[str, str | None],
    log_version: Literal[1, 2] = 1,
) -> str:
    """Return the text of ``offsets/N``.

    Args:
        metadata: The batch's watermark, timestamp and conf; ``None`` writes an empty metadata line.
        sources: Each source's offset JSON text (``None`` for a source without offset, written ``-``): a
        list in
            source order for format v1, or ``{source id: offset}`` for format v2.
        log_version: 1 (``OffsetSeq``, what Spark writes by default) or 2 (``OffsetMap``).

    Raises:
        CheckpointError: An offset contains a newline, or ``sources`` does not fit ``log_version``.
    """
    parts = [f"v{log_version}", _metadata_json(metadata) if metadata is not None else ""]
    if log_version == 2:
        if not isinstance(sources, Mapping):
            raise CheckpointError("offsets format v2 needs {source id: offset}")
        items = [(str(k), v) for k, v in sources.items()]
    else:
        if isinstance(sources, Mapping):
            raise CheckpointError("offsets format v1 needs offsets in source order (a list)")
        items = [("", v) for v in sources]
    for source_id, offset in items:
        text = VOID_OFFSET if offset is None else offset
        if "\n" in text:
            raise CheckpointError(f"offset of source {source_id or len(parts) - 2} contains a newline")
        parts.append(f"{source_id}:{text}" if log_version == 2 else text)
    return "\n".join(parts)


def format_commit(
    *,
    next_batch_watermark_ms: int = 0,
    state_unique_ids: Mapping[str, Any] | None = None,
    log_version: Literal[1, 2] = 1,
) -> str:
    """Return the text of ``commits/N`` (``v1`` holds only ``nextBatchWatermarkMs``)."""
    data: dict[str, Any] = {"nextBatchWatermarkMs": next_batch_watermark_ms}
    if log_version == 2 and state_unique_ids is not None:
        data["stateUniqueIds"] = dict(state_unique_ids)
    return f"v{log_version}\n{_json(data)}"


def _atomic_write(checkpoint_dir: str | os.PathLike[str], relative: str, text: str) -> str:
    fs = checkpoint_fs(checkpoint_dir)
    path = fs.join(fs.root, relative)
    fs.create(path, text.encode("utf-8"))
    return path


def write_metadata(checkpoint_dir: str | os.PathLike[str], query_id: str) -> str:
    """Write ``<checkpoint_dir>/metadata`` for ``query_id`` and return its path.

    Raises:
        CheckpointError: The file exists already or cannot be written.
    """
    return _atomic_write(checkpoint_dir, "metadata", format_metadata(query_id))


def write_offsets(
    checkpoint_dir: str | os.PathLike[str],
    batch_id: int,
    *,
    metadata: OffsetSeqMetadata | None,
    sources: Sequence[str | None] | Mapping[str, str | None],
    log_version: Literal[1, 2] = 1,
) -> str:
    """Write ``<checkpoint_dir>/offsets/<batch_id>`` (see :func:`format_offsets`) and return its path.

    Raises:
        CheckpointError: The file exists already or cannot be written.
    """
    text = format_offsets(metadata=metadata, sources=sources, log_version=log_version)
    return _atomic_write(checkpoint_dir, f"offsets/{batch_id}", text)


def write_commit(
    checkpoint_dir: str | os.PathLike[str],
    batch_id: int,
    *,
    next_batch_watermark_ms: int = 0,
    state_unique_ids: Mapping[str, Any] | None = None,
    log_version: Literal[1, 2] = 1,
) -> str:
    """Write ``<checkpoint_dir>/commits/<batch_id>`` (see :func:`format_commit`) and return its path.

    Raises:
        CheckpointError: The file exists already or cannot be written.
    """
    text = format_commit(
        next_batch_watermark_ms=next_batch_watermark_ms,
        state_unique_ids=state_unique_ids,
        log_version=log_version,
    )
    return _atomic_write(checkpoint_dir, f"commits/{batch_id}", text)
