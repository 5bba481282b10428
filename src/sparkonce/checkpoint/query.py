"""What a running query's driver reads from its own checkpoint: the query id and the text of ``offsets/N``.

Runs on the driver. The Delta streaming sink, the fan-out and PostgreSQL sinks and the pipeline's stages take the query
id (``metadata``) as the app id of their per-batch transactions, and the Delta sink records ``offsets/N`` in its
commit so a lost checkpoint can be rebuilt from the table.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkonce._types import BatchId
from sparkonce.checkpoint.files import parse_metadata, read_text
from sparkonce.errors import CheckpointError
from sparkonce.storage import checkpoint_path

__all__ = ["read_offsets_text", "read_query_id"]


def read_query_id(checkpoint_dir: str | os.PathLike[str]) -> str:
    """The streaming query id from ``<checkpoint_dir>/metadata`` (Spark writes it before the first batch).

    Raises:
        CheckpointError: the file is missing or has no query id; the message names the file.
        StorageError: ``checkpoint_dir`` is not on a file system the driver sees.
    """
    path = Path(checkpoint_path(checkpoint_dir), "metadata")
    if not path.is_file():
        raise CheckpointError(f"checkpoint metadata {path} is missing: cannot tell the query id")
    return parse_metadata(read_text(path), path=path).query_id


def read_offsets_text(checkpoint_dir: str | os.PathLike[str], batch_id: BatchId) -> str | None:
    """The raw text of ``<checkpoint_dir>/offsets/<batch_id>``, or None when Spark has not written it."""
    path = Path(checkpoint_path(checkpoint_dir), "offsets", str(batch_id))
    try:
        return read_text(path)
    except CheckpointError:
        if not path.exists():
            return None
        raise
