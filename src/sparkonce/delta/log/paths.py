"""Where the file an ``add`` or ``remove`` action names is: the one resolver of Delta's file paths.

The Delta protocol makes ``path`` a URI reference, percent-encoded: relative to the table root (what writers
normally write: ``p=a%20b/part-0.parquet`` for the file ``p=a b/part-0.parquet``), or an absolute URI
(``file:/data/t/x.parquet``, ``file:///data/t/x.parquet``, ``s3://bucket/t/x.parquet``). Every reader of data
files (batch and stream reads, rewrites, vacuum, the doctor, verify, manifests) resolves paths here, so they agree
on which files are the table's.

Runs on the driver and on executors (no I/O).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from sparkonce.errors import DeltaLogError
from sparkonce.storage import TableLocation


def data_file_fs_path(location: TableLocation, raw_path: str) -> str | None:
    """The path, in ``location.filesystem()``, of the file ``raw_path`` (as the log spells it) names; None when the
    file is not in that file system: another host (``file://otherhost/...``), another bucket or scheme, or an
    absolute object-store URI outside the table root."""
    scheme = urlsplit(raw_path).scheme if ":" in raw_path else ""
    if len(scheme) <= 1:  # no scheme (a relative path; a one-letter "scheme" is a Windows drive, not a URI)
        return location.fs_path(unquote(raw_path))
    if location.is_local:
        if scheme != "file":
            return None
        parts = urlsplit(raw_path)
        if parts.netloc not in ("", "localhost"):
            return None
        return os.path.normpath(unquote(parts.path))
    prefix = f"{location.uri.rstrip('/')}/"
    return unquote(raw_path[len(prefix) :]) if raw_path.startswith(prefix) else None


def require_fs_path(location: TableLocation, raw_path: str) -> str:
    """:func:`data_file_fs_path`, for a file the caller must read.

    Raises:
        DeltaLogError: the file is not in the table's file system (naming the path and the table).
    """
    found = data_file_fs_path(location, raw_path)
    if found is None:
        raise DeltaLogError(
            f"{location}: the Delta log names the data file {raw_path}, which is outside the table's file system "
            "(another host, bucket or scheme); sparkonce reads files of the table's own store only"
        )
    return found


def data_file_uri(location: TableLocation, fs_path: str) -> str:
    """A file's URI as Spark's ``_metadata.file_path`` shows it (``file:/...``, ``s3://bucket/...``)."""
    return f"file:{fs_path}" if location.is_local else f"{location.uri.rstrip('/')}/{fs_path}"


__all__ = ["data_file_fs_path", "data_file_uri", "require_fs_path"]
