"""The file system of a Spark streaming checkpoint (``checkpointLocation``), chosen by the location's scheme.

Runs on the driver (or in the CLI process). Spark reads and writes a checkpoint through Hadoop's ``FileSystem``
API, so a checkpoint can live on any file system the cluster has jars for (``hdfs://``, ``s3a://``, ``abfss://``,
``dbfs:``, ``viewfs://``, ...). sparkonce reads and writes it the same way:

* :class:`LocalCheckpointFS` for a plain path or a ``file:`` URI: Python's ``os``, no JVM needed (the CLI works on a
  local checkpoint without starting Spark);
* :class:`HadoopCheckpointFS` for any other scheme: Hadoop's ``FileSystem`` of the driver's JVM through py4j
  (``Path(uri).getFileSystem(hadoopConfiguration)``), so it needs a Spark session, and sees exactly what Spark sees
  (the session's ``spark.hadoop.*`` settings included).

Paths are strings: local absolute paths for the local file system, URIs for Hadoop (a ``pathlib.Path`` would fold
``viewfs://cluster/x`` into ``viewfs:/cluster/x``). Files are created like Spark's ``CheckpointFileManager``: written
to ``<dir>/.<name>.<uuid>.tmp``, then renamed to ``<dir>/<name>`` only if that does not exist yet.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sparkonce.errors import CheckpointError, StorageError
from sparkonce.storage import put_if_absent_local

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CheckpointFS",
    "FileStat",
    "HadoopCheckpointFS",
    "LocalCheckpointFS",
    "checkpoint_fs",
    "checkpoint_scheme",
    "is_local_checkpoint",
]

_SCHEME_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):")
_WINDOWS_DRIVE_RE = re.compile(r"^[A-Za-z]:[\\/]")


@dataclass(frozen=True)
class FileStat:
    """One entry of a listing: its name in the folder, whether it is a folder, its size and modification time."""

    name: str
    is_dir: bool
    size: int
    mtime_ms: int


class CheckpointFS(Protocol):
    """The operations sparkonce needs on a checkpoint. Runs on the driver.

    ``root`` is the checkpoint location in this file system's form (an absolute local path, or the URI).
    """

    root: str

    def join(self, base: str, *parts: str) -> str:
        """``base`` with ``/``-separated ``parts`` appended."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def names(self, path: str) -> list[str]:
        """The names of the entries of folder ``path`` ([] when it does not exist)."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """The file's size and modification time (None when it does not exist)."""
        ...

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes.

        Raises:
            FileNotFoundError: the file does not exist.
            OSError: it cannot be read.
        """
        ...

    def create(self, path: str, data: bytes) -> None:
        """Create file ``path`` holding ``data`` (folders made as needed), atomically, never over an existing one.

        Raises:
            CheckpointError: the file exists already, or cannot be written (the message names it).
        """
        ...

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file (or a folder with ``recursive``); nothing when it does not exist."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` (file or folder) to ``target``, which must not exist.

        Raises:
            CheckpointError: ``target`` exists or the move failed.
        """
        ...


def checkpoint_scheme(location: str | os.PathLike[str]) -> str:
    """The URI scheme of a checkpoint location, lower-cased (``file`` for a plain path).

    Raises:
        StorageError: the location is empty.
    """
    text = os.fspath(location)
    if not text.strip():
        raise StorageError("empty checkpoint location: give a directory or a URI (file:, hdfs://, s3a://, ...)")
    match = _SCHEME_RE.match(text)
    if match is None or _WINDOWS_DRIVE_RE.match(text):
        return "file"
    return match.group("scheme").lower()


def is_local_checkpoint(location: str | os.PathLike[str]) -> bool:
    """True for a plain path or a ``file:`` URI: read with Python's ``os``, no Spark needed."""
    return checkpoint_scheme(location) == "file"


def checkpoint_fs(location: str | os.PathLike[str], *, spark: SparkSession | None = None) -> CheckpointFS:
    """The file system of checkpoint ``location``: local for a plain path or ``file:`` URI, Hadoop's otherwise.

    Args:
        location: The ``checkpointLocation`` as the user gave it.
        spark: The session whose Hadoop configuration serves a non-local location (default: the active one).

    Raises:
        StorageError: a malformed ``file:`` URI; a non-local location and no Spark session in this process; or a
            scheme the session's Hadoop has no file system for (the message names the URI and what is needed).
    """
    if is_local_checkpoint(location):
        from sparkonce.storage import checkpoint_path

        return LocalCheckpointFS(checkpoint_path(location))
    return HadoopCheckpointFS(os.fspath(location), spark=spark)


class LocalCheckpointFS:
    """A checkpoint on a file system the driver's Python sees (a local disk or a shared mount). Runs on the driver."""

    def __init__(self, root: str) -> None:
        self.root = root

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def names(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stat(self, path: str) -> FileStat | None:
        try:
            found = os.stat(path)
        except FileNotFoundError:  # renamed or removed by its writer since the listing
            return None
        return FileStat(os.path.basename(path), os.path.isdir(path), found.st_size, int(found.st_mtime * 1000))

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

    def create(self, path: str, data: bytes) -> None:
        if os.path.exists(path):
            raise CheckpointError(f"{path}: already exists; checkpoint files are written once and never replaced")
        try:
            created = put_if_absent_local(path, data)
        except OSError as err:
            raise CheckpointError(f"{path}: cannot write: {err}") from err
        if not created:
            raise CheckpointError(f"{path}: written concurrently by another writer")

    def delete(self, path: str, *, recursive: bool = False) -> None:
        if os.path.isdir(path) and recursive:
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    def rename(self, source: str, target: str) -> None:
        if os.path.exists(target):
            raise CheckpointError(f"{target}: already exists; cannot move {source} there")
        try:
            os.rename(source, target)
        except OSError as err:
            raise CheckpointError(f"cannot move {source} to {target}: {err}") from err


class HadoopCheckpointFS:
    """A checkpoint on a Hadoop file system of the driver's JVM (``hdfs://``, ``s3a://``, ``abfss://``, ``dbfs:``,
    ``viewfs://``, ...), reached through py4j. Runs on the driver (a process with a Spark session; never in a
    Python worker, which has no JVM gateway)."""

    def __init__(self, root: str, *, spark: SparkSession | None = None) -> None:
        if spark is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
        jvm = getattr(spark, "_jvm", None) if spark is not None else None
        if spark is None or jvm is None:
            raise StorageError(
                f"checkpoint location {root}: a {checkpoint_scheme(root)}: checkpoint is read through Spark's Hadoop "
                "file system, which needs a Spark session in this process (a classic session, not Spark Connect); "
                "the sparkonce CLI starts one for such a location, with the --conf settings given"
            )
        self._jvm: Any = jvm
        self._conf: Any = spark._jsc.hadoopConfiguration()
        root = root.rstrip("/") or root
        try:
            self._fs: Any = self._call(root, lambda: self._path(root).getFileSystem(self._conf))
        except OSError as err:  # e.g. fs.<scheme>.impl names a class whose jar is missing
            raise StorageError(
                f"checkpoint location {root}: Hadoop cannot open its file system ({err}); put the file system's jars "
                "on the driver's and executors' classpath and its spark.hadoop.fs.* settings in the session conf"
            ) from err
        # The qualified form ("dbfs:/x" -> "dbfs:/x", "hdfs:/x" -> "hdfs://namenode:8020/x"), as Spark records it.
        self.root = str(self._fs.makeQualified(self._path(root)).toString())

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _call(self, path: str, action: Any) -> Any:
        """Run a JVM call; map Hadoop's exceptions to Python's (``FileNotFoundError``) and sparkonce's."""
        from py4j.protocol import Py4JJavaError

        try:
            return action()
        except Py4JJavaError as err:
            java = err.java_exception
            name = str(java.getClass().getName())
            message = str(java.getMessage() or name)
            if name.endswith("UnsupportedFileSystemException") or "No FileSystem for scheme" in message:
                raise StorageError(
                    f"checkpoint location {path}: {message}: the Spark session has no Hadoop file system for this "
                    "scheme; put the file system's jars on the driver's and executors' classpath (e.g. hadoop-aws "
                    "for s3a://, hadoop-azure for abfss://) and its spark.hadoop.fs.* settings in the session conf"
                ) from err
            if name.endswith("FileNotFoundException"):
                raise FileNotFoundError(f"{path}: {message}") from err
            if name.endswith("FileAlreadyExistsException"):
                raise FileExistsError(f"{path}: {message}") from err
            raise OSError(f"{path}: {name}: {message}") from err

    def join(self, base: str, *parts: str) -> str:
        return posixpath.join(base, *parts) if parts else base

    def exists(self, path: str) -> bool:
        return bool(self._call(path, lambda: self._fs.exists(self._path(path))))

    def is_dir(self, path: str) -> bool:
        try:
            status = self._call(path, lambda: self._fs.getFileStatus(self._path(path)))
        except FileNotFoundError:
            return False
        return bool(status.isDirectory())

    def names(self, path: str) -> list[str]:
        try:
            statuses = self._call(path, lambda: self._fs.listStatus(self._path(path)))
        except FileNotFoundError:
            return []
        return [str(s.getPath().getName()) for s in statuses]

    def stat(self, path: str) -> FileStat | None:
        try:
            s = self._call(path, lambda: self._fs.getFileStatus(self._path(path)))
        except FileNotFoundError:
            return None
        return FileStat(
            str(s.getPath().getName()), bool(s.isDirectory()), int(s.getLen()), int(s.getModificationTime())
        )

    def read_bytes(self, path: str) -> bytes:
        def read() -> bytes:
            stream = self._fs.open(self._path(path))
            try:
                return bytes(self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream))
            finally:
                stream.close()

        return bytes(self._call(path, read))

    def create(self, path: str, data: bytes) -> None:
        # Spark's FileSystemBasedCheckpointFileManager: write a temp file next to the target, then rename it
        # unless the target exists. Atomic where the file system's rename is (HDFS, local); on object stores
        # (s3a) rename is a copy, as it is for Spark's own checkpoint files there.
        target = self._path(path)
        tmp = self._path(posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.{uuid.uuid4()}.tmp"))
        if self.exists(path):
            raise CheckpointError(f"{path}: already exists; checkpoint files are written once and never replaced")

        def write() -> None:
            self._fs.mkdirs(target.getParent())
            out = self._fs.create(tmp, False)
            try:
                out.write(bytearray(data))
            finally:
                out.close()

        try:
            self._call(path, write)
            if self.exists(path):
                raise CheckpointError(f"{path}: written concurrently by another writer")
            if not self._call(path, lambda: self._fs.rename(tmp, target)):
                raise CheckpointError(f"{path}: cannot write: renaming the temporary file into place failed")
        except OSError as err:
            raise CheckpointError(f"{path}: cannot write: {err}") from err
        finally:
            try:
                self._call(path, lambda: self._fs.delete(tmp, False))
            except OSError:
                pass  # the temp file stays; doctor reports leftover .tmp files

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self._call(path, lambda: self._fs.delete(self._path(path), recursive))

    def rename(self, source: str, target: str) -> None:
        if self.exists(target):
            raise CheckpointError(f"{target}: already exists; cannot move {source} there")
        try:
            moved = self._call(source, lambda: self._fs.rename(self._path(source), self._path(target)))
        except OSError as err:
            raise CheckpointError(f"cannot move {source} to {target}: {err}") from err
        if not moved:
            raise CheckpointError(f"cannot move {source} to {target}: the file system refused the rename")
