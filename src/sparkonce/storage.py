"""Where Delta tables and checkpoints live: the one parser of table locations.

Every path a user gives for a Delta table goes through :func:`table_location` once, at the boundary (options,
pipeline file, CLI argument), and the rest of sparkonce works with the resulting :class:`TableLocation`: the URI
to hand to delta-rs, its storage options, and the file system that reads and writes the table's files.

Accepted forms: a plain path (absolute or relative to the working directory), ``file:///abs/path``,
``file://localhost/abs/path`` and Hadoop's one-slash ``file:/abs/path`` (Spark, and Spark Declarative Pipelines,
hand qualified paths over like that). Checkpoints stay on a file system the driver sees; :func:`checkpoint_path`
turns the same forms into a local directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from sparkonce.errors import StorageError

__all__ = ["LOCAL_SCHEME", "TableLocation", "checkpoint_path", "table_location"]

LOCAL_SCHEME = "file"
_SCHEME_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class TableLocation:
    """The root of one Delta table, normalized. Driver and executors (pickles; no open clients inside).

    ``uri`` is an absolute local path for tables on the local file system (what delta-rs and pyarrow take for
    them), the URI otherwise.
    """

    uri: str
    scheme: str
    storage_options: tuple[tuple[str, str], ...] = ()

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL_SCHEME

    @property
    def local_path(self) -> str:
        """The table's directory on the local file system.

        Raises:
            StorageError: the table is not on the local file system.
        """
        if not self.is_local:
            raise StorageError(f"{self.uri}: not a local table (this step needs a local directory)")
        return self.uri

    def options(self) -> dict[str, str]:
        """The storage options for delta-rs (an empty dict for local tables)."""
        return dict(self.storage_options)

    def join(self, relative: str) -> str:
        """The location of a file of the table, given its ``/``-separated path relative to the root."""
        if self.is_local:
            return os.path.join(self.uri, relative)
        return f"{self.uri}/{relative}"

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:  # option values may be secrets: show their names only
        names = ", ".join(name for name, _ in self.storage_options)
        return f"TableLocation({self.uri!r}, storage_options=[{names}])"


def table_location(
    path: str | os.PathLike[str] | TableLocation, *, storage_options: Mapping[str, str] | None = None
) -> TableLocation:
    """Parse a Delta table location once.

    Args:
        path: A plain path, a ``file:`` URI (``file:///x``, ``file:/x``), or an already parsed location.
        storage_options: Options of the store (delta-rs names); ignored for local tables.

    Raises:
        StorageError: ``path`` is empty, a malformed ``file:`` URI, or names a store this version cannot use; the
            message names the URI.
    """
    if isinstance(path, TableLocation):
        return path
    text = os.fspath(path)
    if not text.strip():
        raise StorageError("empty table location: give a directory or a file: URI")
    if text.lower().startswith("file:"):
        return TableLocation(_file_uri_path(text), LOCAL_SCHEME)
    match = _SCHEME_RE.match(text)
    if match is not None:
        scheme = match.group("scheme").lower()
        raise StorageError(
            f"{text}: {scheme}:// tables are not supported by this version of sparkonce; give a local path or a "
            "file: URI"
        )
    return TableLocation(os.path.abspath(text), LOCAL_SCHEME)


def checkpoint_path(path: str | os.PathLike[str]) -> str:
    """A checkpoint location as an absolute local directory (plain path, ``file:///x`` or ``file:/x``).

    Raises:
        StorageError: the location is not on a file system the driver sees (Spark writes checkpoints through
            Hadoop's file system API, which has no object-store connector here).
    """
    text = os.fspath(path)
    if not text.strip():
        raise StorageError("empty checkpoint location: give a directory on the driver's file system")
    if text.lower().startswith("file:"):
        return _file_uri_path(text)
    match = _SCHEME_RE.match(text)
    if match is not None:
        raise StorageError(
            f"checkpoint location {text}: checkpoints must be on a file system the driver sees (a local disk or a "
            f"shared mount), not {match.group('scheme')}://; keep the table on the object store and the "
            "checkpoint on local disk (sparkonce rebuild-checkpoint restores a lost one from the table)"
        )
    return os.path.abspath(text)


def _file_uri_path(text: str) -> str:
    """The local path of ``file:///x``, ``file://localhost/x`` or Hadoop's ``file:/x``."""
    rest = text[len("file:") :]
    if rest.startswith("//"):
        host, slash, tail = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise StorageError(f"{text}: a file: URI must name a local path (file:///path), not host {host!r}")
        rest = slash + tail
    local = unquote(rest)
    if not local.startswith("/"):
        raise StorageError(f"{text}: a file: URI must hold an absolute path (file:///path or file:/path)")
    return os.path.normpath(local)
