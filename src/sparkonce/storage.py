"""Where Delta tables and checkpoints live: the one parser of table locations.

Every path a user gives for a Delta table goes through :func:`table_location` once, at the boundary (options,
pipeline file, CLI argument), and the rest of sparkonce works with the resulting :class:`TableLocation`: the URI
to hand to delta-rs, its storage options, and the file system that reads and writes the table's files.

Accepted forms: a plain path (absolute or relative to the working directory), ``file:///abs/path``,
``file://localhost/abs/path`` and Hadoop's one-slash ``file:/abs/path`` (Spark, and Spark Declarative Pipelines,
hand qualified paths over like that), and object-store URIs that delta-rs serves (``s3://bucket/prefix``,
``s3a://``, ``gs://``, ``az://``, ``abfs://``, ``abfss://``, ``adl://``, ``azure://``). Checkpoints go through
:mod:`sparkonce.checkpoint.fs` (local, or Spark's Hadoop file systems); :func:`checkpoint_path` turns the local
forms into a directory and refuses the rest where a local directory is the point.

Storage options use delta-rs's (object_store's) names (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_ALLOW_HTTP``, ``conditional_put``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...). What is
not given explicitly comes from the environment (``AWS_*`` variables, the AWS profile), read by object_store in
each process. Data files are read and written through :meth:`TableLocation.filesystem`: pyarrow's local file
system for local tables, delta-rs's object_store (``DeltaStorageHandler`` in a ``pyarrow.fs.PyFileSystem``) for
object stores, so every store delta-rs supports works with the same code path and the same option names.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from sparkonce.errors import StorageError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "LOCAL_SCHEME",
    "OBJECT_STORE_SCHEMES",
    "SESSION_CONF_PREFIX",
    "STORAGE_OPTION_PREFIX",
    "TableLocation",
    "checkpoint_path",
    "hadoop_storage_options",
    "s3a_hadoop_conf",
    "session_storage_options",
    "set_session_storage_options",
    "storage_options_from",
    "storage_options_from_conf",
    "table_location",
]

LOCAL_SCHEME = "file"
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure")
"""URI schemes of the object stores delta-rs serves (and so sparkonce, through the same code path)."""
STORAGE_OPTION_PREFIX = "storage."
"""Data source options ``storage.<NAME>`` are storage options ``<NAME>`` (``.option("storage.AWS_REGION", ..)``)."""
SESSION_CONF_PREFIX = "spark.sparkonce.storage."
"""Spark conf entries ``spark.sparkonce.storage.<NAME>`` are session storage options ``<NAME>``, read by
``sparkonce.register(spark)``."""
_SCHEME_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_S3_SCHEMES = ("s3", "s3a")
_S3_UNSAFE_RENAME_KEYS = ("aws_s3_allow_unsafe_rename", "allow_unsafe_rename")


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

    def fs_path(self, relative: str = "") -> str:
        """The path of the table root (or of a file under it) inside :meth:`filesystem`."""
        if self.is_local:
            return os.path.join(self.uri, relative) if relative else self.uri
        return relative

    def filesystem(self) -> pafs.FileSystem:
        """The file system holding the table's files (cached per process; paths from :meth:`fs_path`)."""
        return _filesystem(self)

    def check_commit_safety(self) -> None:
        """Refuse a store where two writers could both create the same log file, before any data moves.
        Runs on the driver.

        Local file systems and the Google and Azure stores create files atomically. On S3, delta-rs 1.x creates
        log files with a conditional PUT (``If-None-Match: *``), which the store must honour (AWS S3, MinIO,
        SeaweedFS, Cloudflare R2 do): sparkonce asks for ``conditional_put=etag`` to say so.
        ``AWS_S3_ALLOW_UNSAFE_RENAME=true`` is the user's explicit choice of a single writer. A DynamoDB locking
        provider (``AWS_S3_LOCKING_PROVIDER``) does not count: delta-rs 1.x no longer supports it (it logs an
        error and ignores it).

        Raises:
            StorageError: neither is set, naming the options.
        """
        if self.scheme not in _S3_SCHEMES or self._s3_conditional_put():
            return
        given = {name.lower(): value for name, value in self.storage_options}
        for key in _S3_UNSAFE_RENAME_KEYS:
            if str(given.get(key) or os.environ.get(key.upper(), "")).lower() == "true":
                return
        raise StorageError(
            f"{self.uri}: S3 cannot make a Delta commit atomic on its own; set the storage option "
            "conditional_put=etag (S3 conditional writes, If-None-Match: *, supported by AWS S3, MinIO and SeaweedFS) "
            "so that two writers of one table version cannot both succeed (a DynamoDB locking provider, "
            "AWS_S3_LOCKING_PROVIDER, is no longer supported by delta-rs 1.x and does not count; "
            "AWS_S3_ALLOW_UNSAFE_RENAME=true only if there is never more than one writer)"
        )

    def _s3_conditional_put(self) -> bool:
        """``conditional_put`` (option or ``AWS_CONDITIONAL_PUT``) is set, and not to ``disabled``."""
        given = {name.lower(): value for name, value in self.storage_options}
        value = (
            given.get("conditional_put") or given.get("aws_conditional_put") or os.environ.get("AWS_CONDITIONAL_PUT")
        )
        return bool(value) and str(value).lower() != "disabled"

    def put_if_absent(self, relative: str, data: bytes) -> bool:
        """Create the table's file ``relative`` holding ``data`` only if it does not exist yet. Runs on the driver.

        The one atomic put-if-absent of a log file written by sparkonce itself (every Delta commit): a hard link of
        a staged file on local disks, a conditional create (``If-None-Match: *`` on S3) through object_store
        (``obstore``, the Rust crate delta-rs uses, with the same option names) on object stores. On S3 with
        ``AWS_S3_ALLOW_UNSAFE_RENAME`` and no ``conditional_put`` (the user's choice of a single writer) it looks
        first and then writes, which is not atomic. Call :meth:`check_commit_safety` first.

        Returns:
            False when the file already exists (another writer made it; it is left as it is).

        Raises:
            StorageError: the store failed or refused the write.
        """
        if self.is_local:
            return put_if_absent_local(os.path.join(self.uri, relative), data)
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError

        store = _object_store(self)
        try:
            if self.scheme in _S3_SCHEMES and not self._s3_conditional_put():
                # AWS_S3_ALLOW_UNSAFE_RENAME: the user's choice of a single writer (check_commit_safety)
                try:
                    obstore.head(store, relative)
                    return False
                except (FileNotFoundError, NotFoundError):
                    obstore.put(store, relative, data)
                    return True
            obstore.put(store, relative, data, mode="create")
        except AlreadyExistsError:
            return False
        except (OSError, obstore.exceptions.BaseError) as err:
            raise self.store_error(err) from err
        return True

    def put(self, relative: str, data: bytes) -> None:
        """Write the table's file ``relative`` holding ``data``, replacing it if it exists (not for log files,
        which :meth:`put_if_absent` writes). Readers see the old or the new content, never a part. Runs on the driver.

        Raises:
            StorageError: the store failed or refused the write.
        """
        if self.is_local:
            import tempfile

            path = os.path.join(self.uri, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, staged = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".sparkonce-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(staged, path)
            return
        import obstore

        try:
            obstore.put(_object_store(self), relative, data)
        except (OSError, obstore.exceptions.BaseError) as err:
            raise self.store_error(err) from err

    def delete_tree(self) -> int:
        """Delete every file under this location (``DROP TABLE`` of a managed table); returns how many.
        Runs on the driver.

        Raises:
            StorageError: the store failed or refused a listing or a delete.
        """
        if self.is_local:
            import shutil

            count = sum(len(files) for _, _, files in os.walk(self.uri))
            shutil.rmtree(self.uri, ignore_errors=True)
            return count
        import obstore

        store = _object_store(self)
        count = 0
        try:
            for chunk in obstore.list(store, chunk_size=1000):
                paths = [meta["path"] for meta in chunk]
                if paths:
                    obstore.delete(store, paths)
                    count += len(paths)
        except (OSError, obstore.exceptions.BaseError) as err:
            raise self.store_error(err) from err
        return count

    def check_reachable(self, *, for_write: bool) -> bool:
        """Ask the store about the table, before any data moves; True when ``_delta_log`` exists. Runs on the driver.

        For a write to an object store, a prefix that holds objects but no ``_delta_log`` is refused: it is not
        a Delta table, and writing a table over it would mix its files with the table's. Data files of a first
        write in flight (``part-*.parquet``, partition folders ``name=value``) do not count: Spark builds the
        writer again on the driver to commit, after the executors wrote them.

        Raises:
            StorageError: the store is unreachable, the bucket is missing, the credentials are refused, or the
                prefix holds something that is not a Delta table; the message names the URI and what to fix.
        """
        if self.is_local:
            return os.path.isdir(os.path.join(self.uri, "_delta_log"))
        import pyarrow.fs as pafs

        filesystem = self.filesystem()
        try:
            # One HEAD and a LIST of at most one key: not a listing of the whole log, which grows with every commit
            # (the streaming sink asks once per batch).
            if filesystem.get_file_info("_delta_log").type == pafs.FileType.Directory:
                return True
            if for_write and any(
                not _is_table_data(info)
                for info in filesystem.get_file_info(pafs.FileSelector("", allow_not_found=True))
            ):
                raise StorageError(
                    f"{self.uri} holds objects but no _delta_log: it is not a Delta table; write the table to an "
                    "empty prefix (or convert the data to Delta first)"
                )
        except OSError as err:
            raise self.store_error(err) from err
        return False

    def store_error(self, err: BaseException) -> StorageError:
        """A clear :class:`StorageError` for an object-store failure, naming the URI and what to fix."""
        text = str(err)
        endpoint = dict(self.storage_options).get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        where = f" at {endpoint}" if endpoint else ""
        bucket = self.uri.split("://", 1)[1].split("/", 1)[0]
        if "NoSuchBucket" in text or ("404 Not Found" in text and "list" in text.lower()):
            problem = f"the bucket {bucket!r} does not exist{where}: create it, or fix the URI"
        elif any(code in text for code in ("403 Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "401")):
            problem = (
                f"the store{where} refused the credentials: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (storage "
                "options, the environment or the AWS profile) and the bucket's permissions"
            )
        elif any(word in text for word in ("retries", "error sending request", "Connection refused", "timed out")):
            problem = (
                f"the store{where} is unreachable: check AWS_ENDPOINT_URL (and AWS_ALLOW_HTTP=true for http://) "
                "and that the store is running"
            )
        else:
            problem = f"the store{where} failed: {text.splitlines()[0] if text else type(err).__name__}"
        return StorageError(f"{self.uri}: {problem}")

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
        storage_options: Options of the store (delta-rs names); ignored for local tables. They win over the
            session options (:func:`set_session_storage_options`), which win over the environment.

    Raises:
        StorageError: ``path`` is empty, a malformed ``file:`` URI, or names a store this version cannot use; the
            message names the URI.
    """
    given = {str(k): str(v) for k, v in (storage_options or {}).items()}
    if isinstance(path, TableLocation):
        options = tuple(sorted(given.items()))
        if not options or path.is_local:
            return path
        return TableLocation(
            path.uri, path.scheme, tuple(sorted({**dict(path.storage_options), **dict(options)}.items()))
        )
    text = os.fspath(path)
    if not text.strip():
        raise StorageError("empty table location: give a directory, a file: URI or an object-store URI")
    if text.lower().startswith("file:"):
        return TableLocation(_file_uri_path(text), LOCAL_SCHEME)
    match = _SCHEME_RE.match(text)
    if match is None:
        return TableLocation(os.path.abspath(text), LOCAL_SCHEME)
    scheme = match.group("scheme").lower()
    if scheme not in OBJECT_STORE_SCHEMES:
        raise StorageError(
            f"{text}: {scheme}:// is not a store sparkonce can use; give a local path, a file: URI or one of "
            + ", ".join(f"{s}://" for s in OBJECT_STORE_SCHEMES)
        )
    rest = text[match.end() :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StorageError(f"{text}: the URI names no bucket or container ({scheme}://BUCKET/prefix)")
    prefix = "/".join(part for part in prefix.split("/") if part)
    uri = f"{scheme}://{bucket}/{prefix}" if prefix else f"{scheme}://{bucket}"
    return TableLocation(uri, scheme, tuple(sorted(_with_session_options(given).items())))


def storage_options_from(options: Mapping[str, str]) -> dict[str, str]:
    """The storage options among data source options: ``storage.<NAME>`` -> ``<NAME>`` (case kept)."""
    prefix = len(STORAGE_OPTION_PREFIX)
    return {key[prefix:]: value for key, value in options.items() if key.lower().startswith(STORAGE_OPTION_PREFIX)}


HADOOP_STORAGE_KEYS = {
    "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
    "fs.s3a.secret.key": "AWS_SECRET_ACCESS_KEY",
    "fs.s3a.session.token": "AWS_SESSION_TOKEN",
    "fs.s3a.endpoint": "AWS_ENDPOINT_URL",
    "fs.s3a.endpoint.region": "AWS_REGION",
    "fs.gs.auth.service.account.json.keyfile": "GOOGLE_SERVICE_ACCOUNT",
    "fs.gs.project.id": "GOOGLE_PROJECT_ID",
}
"""Hadoop file system settings (as delta-spark's ``hadoopConf`` passes them) -> the storage option of the same
meaning; Azure's per-account ``fs.azure.account.key.<account>.dfs.core.windows.net`` maps onto
``AZURE_STORAGE_ACCOUNT_KEY``."""


def hadoop_storage_options(conf: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split Hadoop file system settings into those that name a storage option (``{hadoop key: option name}``)
    and the rest (implementations, caches, buffers: nothing to do without Hadoop), in ``conf``'s order."""
    mapped: dict[str, str] = {}
    ignored: list[str] = []
    for key in conf:
        lowered = str(key).lower()
        if lowered in HADOOP_STORAGE_KEYS:
            mapped[key] = HADOOP_STORAGE_KEYS[lowered]
        elif lowered.startswith("fs.azure.account.key."):
            mapped[key] = "AZURE_STORAGE_ACCOUNT_KEY"
        else:
            ignored.append(key)
    return mapped, ignored


def s3a_hadoop_conf(options: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop S3A settings (``fs.s3a.*``) of S3 storage options, so Hadoop's S3A file system reaches the store
    delta-rs reaches with ``options`` (names in any letter case, with or without ``AWS_``): the endpoint
    (``AWS_ENDPOINT_URL``; TLS unless it is ``http://``), the region, the keys (simple credentials; a session token
    makes them temporary ones) and path-style access (object_store's default for an explicit endpoint, unless
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true``). What the options do not give is left to S3A's own defaults (its
    credential chain, AWS's endpoints). Runs on the driver.
    """
    given: dict[str, str] = {}
    for name, value in options.items():
        lowered = str(name).lower()
        given[lowered.removeprefix("aws_")] = str(value)
    conf: dict[str, str] = {}
    endpoint = given.get("endpoint_url") or given.get("endpoint")
    if endpoint:
        conf["fs.s3a.endpoint"] = endpoint
        conf["fs.s3a.connection.ssl.enabled"] = str(not endpoint.lower().startswith("http://")).lower()
    region = given.get("region") or given.get("default_region")
    if region:
        conf["fs.s3a.endpoint.region"] = region
    virtual_hosted = given.get("virtual_hosted_style_request")
    if virtual_hosted is not None or endpoint:
        conf["fs.s3a.path.style.access"] = str((virtual_hosted or "false").strip().lower() != "true").lower()
    access_key, secret_key = given.get("access_key_id"), given.get("secret_access_key")
    if access_key and secret_key:
        conf["fs.s3a.access.key"] = access_key
        conf["fs.s3a.secret.key"] = secret_key
        token = given.get("session_token") or given.get("token")
        if token:
            conf["fs.s3a.session.token"] = token
            conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        else:
            conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return conf


def storage_options_from_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The storage options among Spark conf entries: ``spark.sparkonce.storage.<NAME>`` -> ``<NAME>``."""
    prefix = len(SESSION_CONF_PREFIX)
    return {key[prefix:]: value for key, value in conf.items() if key.startswith(SESSION_CONF_PREFIX) and key[prefix:]}


_session_options: dict[str, str] = {}


def set_session_storage_options(options: Mapping[str, str]) -> None:
    """Make ``options`` this process's session storage options (``sparkonce.register`` does, from the conf).

    :func:`table_location` adds them under the explicit options of every object-store location parsed later in
    this process; the environment comes last (object_store reads it for what neither gives).
    """
    _session_options.clear()
    _session_options.update({str(k): str(v) for k, v in options.items()})


def session_storage_options() -> dict[str, str]:
    """This process's session storage options (a copy; empty until ``sparkonce.register`` found some)."""
    return dict(_session_options)


def _with_session_options(given: Mapping[str, str]) -> dict[str, str]:
    """``given`` over the session options; a name counts as given in any letter case (``storage.x`` options
    reach data sources lower-cased)."""
    names = {name.lower() for name in given}
    merged = {name: value for name, value in _session_options.items() if name.lower() not in names}
    merged.update(given)
    return merged


def checkpoint_path(path: str | os.PathLike[str]) -> str:
    """A checkpoint location as an absolute local directory (plain path, ``file:///x`` or ``file:/x``).

    Where any Hadoop file system will do, use :func:`sparkonce.checkpoint.fs.checkpoint_fs` instead; this is for
    the places that need a local directory (``sparkonce run`` pipelines: a stage's run lock is an ``flock`` on a
    file in its checkpoint).

    Raises:
        StorageError: the location has another scheme.
    """
    text = os.fspath(path)
    if not text.strip():
        raise StorageError("empty checkpoint location: give a directory on the driver's file system")
    if text.lower().startswith("file:"):
        return _file_uri_path(text)
    match = _SCHEME_RE.match(text)
    if match is not None:
        raise StorageError(
            f"checkpoint location {text}: this checkpoint must be on a file system the driver sees (a local disk or "
            f"a shared mount), not {match.group('scheme')}://: sparkonce run locks a stage's checkpoint with a file "
            "lock in it; keep the table on the object store and the checkpoint on local disk (sparkonce "
            "rebuild-checkpoint restores a lost one from the table)"
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


@functools.lru_cache(maxsize=64)
def _filesystem(location: TableLocation) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    if location.is_local:
        return pafs.LocalFileSystem()
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(location.uri, location.options() or None))


def put_if_absent_local(path: str, data: bytes) -> bool:
    """Create the local file ``path`` holding ``data`` (fsynced) only if it does not exist: a staged file hard-linked
    into place, which never replaces an existing file. Returns False when it exists (left as it is).

    Raises:
        OSError: the file system refused (full disk, permissions).
    """
    import uuid

    os.makedirs(os.path.dirname(path), exist_ok=True)  # the first commit of a new table makes _delta_log
    staged = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(staged, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(staged, path)  # fails when the file exists: never replaces it
    except FileExistsError:
        return False
    finally:
        if os.path.lexists(staged):  # also when the write failed (a full disk): no staged file stays behind
            os.unlink(staged)
    return True


_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "user_agent",
    }
)
"""object_store's HTTP client options: delta-rs takes them among the storage options (``AWS_ALLOW_HTTP``,
``timeout``), obstore apart."""
_DELTA_RS_ONLY_OPTIONS = frozenset(
    {
        "aws_s3_locking_provider",
        "delta_dynamo_table_name",
        "aws_s3_allow_unsafe_rename",
        "allow_unsafe_rename",
        "aws_ec2_metadata_disabled",
        "aws_force_credential_load",
        "aws_s3_pool_idle_timeout",
        "aws_sts_pool_idle_timeout",
        "aws_s3_get_internal_server_error_retries",
    }
)
"""Options delta-rs reads itself (locking, its own AWS SDK settings), not object_store's: they do not concern a
single conditional create."""


@functools.lru_cache(maxsize=16)
def _object_store(location: TableLocation) -> Any:
    """An obstore store rooted at the table (cached per process), from the table's delta-rs storage options.

    Raises:
        StorageError: an option that neither object_store nor delta-rs knows, naming it.
    """
    from obstore.exceptions import BaseError
    from obstore.store import from_url

    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for name, value in location.storage_options:
        key = name.lower()
        bare = key.split("_", 1)[1] if key.startswith(("aws_", "google_", "azure_")) else key
        if key == "aws_profile":
            raise StorageError(
                f"{location.uri}: AWS_PROFILE is read by delta-rs but not by object_store, which writes this log file; "
                "give the profile's credentials as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), "
                "in the environment or as storage options"
            )
        if bare in _CLIENT_OPTIONS:
            client[bare] = value
        elif key not in _DELTA_RS_ONLY_OPTIONS:
            config[key] = value
    try:
        options: dict[str, Any] = {"config": config or None, "client_options": client or None}
        return from_url(location.uri, **options)
    except BaseError as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise StorageError(
            f"{location.uri}: object_store (which writes the log file here) refused the storage options: {first_line}"
        ) from err


def _is_table_data(info: pafs.FileInfo) -> bool:
    """A data file or partition folder as sparkonce's writers lay them out (see :mod:`sparkonce.delta.write.files`)."""
    import pyarrow.fs as pafs

    name = info.base_name
    if info.type == pafs.FileType.Directory:
        return "=" in name
    return bool(name.startswith("part-") and name.endswith(".parquet"))
