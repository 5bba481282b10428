"""What a running query's driver reads from its own checkpoint: the query id and the text of ``offsets/N``.

Runs on the driver. The Delta streaming sink, the fan-out and PostgreSQL sinks and the pipeline's stages take the query
id (``metadata``) as the app id of their per-batch transactions, and the Delta sink records ``offsets/N`` in its
commit so a lost checkpoint can be rebuilt from the table.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sparkonce._types import BatchId
from sparkonce.checkpoint.files import parse_metadata
from sparkonce.checkpoint.fs import checkpoint_fs
from sparkonce.errors import CheckpointError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["claim_query_id", "read_offsets_text", "read_query_id"]


def read_query_id(checkpoint_dir: str | os.PathLike[str], *, spark: SparkSession | None = None) -> str:
    """The streaming query id from ``<checkpoint_dir>/metadata`` (Spark writes it before the first batch).

    A non-local location is read through the active Spark session's Hadoop file system (``foreachBatch`` runs in
    the driver's process, which has one).

    Raises:
        CheckpointError: the file is missing or has no query id; the message names the file.
        StorageError: a non-local location with no Spark session in this process, or a scheme Hadoop cannot serve.
    """
    fs = checkpoint_fs(checkpoint_dir, spark=spark)
    path = fs.join(fs.root, "metadata")
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError as err:
        raise CheckpointError(f"checkpoint metadata {path} is missing: cannot tell the query id") from err
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err}") from err
    return parse_metadata(_decode(data, path), path=path).query_id


def claim_query_id(checkpoint_dir: str | os.PathLike[str], *, spark: SparkSession | None = None) -> str:
    """The query id of ``<checkpoint_dir>/metadata``, writing a new one (Spark's format) when the file is missing.

    Runs on the driver, before the query starts: Spark's ``StreamExecution`` takes the id of an existing
    ``metadata`` file and writes a new one only when there is none, so the id returned here is the one the query
    runs under. For a checkpoint the Delta sink's commit (a Python worker, without the driver's JVM) cannot read:
    the driver hands the id over as an option.

    Raises:
        CheckpointError: the file cannot be read or written, or holds no query id.
        StorageError: a non-local location with no Spark session in this process, or a scheme Hadoop cannot serve.
    """
    import uuid

    from sparkonce.checkpoint.writer import format_metadata

    fs = checkpoint_fs(checkpoint_dir, spark=spark)
    path = fs.join(fs.root, "metadata")
    if not fs.exists(path):
        try:
            fs.create(path, format_metadata(str(uuid.uuid4())).encode("utf-8"))
        except CheckpointError:
            if not fs.exists(path):  # not a concurrent writer that won: a real failure
                raise
    return read_query_id(checkpoint_dir, spark=spark)


def read_offsets_text(checkpoint_dir: str | os.PathLike[str], batch_id: BatchId) -> str | None:
    """The raw text of ``<checkpoint_dir>/offsets/<batch_id>``, or None when Spark has not written it."""
    fs = checkpoint_fs(checkpoint_dir)
    path = fs.join(fs.root, "offsets", str(batch_id))
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err}") from err
    return _decode(data, path)


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
