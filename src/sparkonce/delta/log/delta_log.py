"""A pure-Python reader of a Delta table's ``_delta_log`` (no delta-rs, no Spark).

It reads JSON commits, classic single-file and multi-part Parquet checkpoints, V2 checkpoints with
sidecars and
``_last_checkpoint``, following the Delta protocol (``PROTOCOL.md``, "Delta Log Entries", "Checkpoints",
"Action Reconciliation"). It runs on the driver or in a CLI process; nothing here is shipped to executors. Files are
read through the table location's file system (local disk or object store, :mod:`sparkonce.storage`).

Vocabulary: a *table version* is a Delta log version (``NNN.json``); a *Delta commit* is one such file.
Streaming
writers record ``txn(appId = query id, version = batch id)`` and, for Delta-JVM writers, a ``commitInfo`` with
``operation: "STREAMING UPDATE"``; sparkonce's own sink adds a ``sparkonce`` object to ``commitInfo`` (see
:func:`streaming_info`).

Why one module of ~970 lines: the listing, the commit parser, the checkpoint reader and the snapshot replay share
the listing, the file access through the table's file system and one wording of errors that name the file; what
interprets a ``commitInfo`` (:class:`CommitFacts`, :class:`CommitSummary`) is the part to move out first if it
grows.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import unquote

from sparkonce.delta.log.actions import (
    Action,
    ActionParseError,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    LastCheckpoint,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_problem,
    parse_action,
)
from sparkonce.delta.log.tombstones import Tombstones, arrow_rows, file_key
from sparkonce.errors import DeltaLogError, TableNotFoundError, VersionNotFoundError
from sparkonce.storage import TableLocation, table_location

logger = logging.getLogger(__name__)

_MONOTONIZE_WINDOW = 100
"""How many commits before a table version :meth:`DeltaLog.commit_file_time` monotonizes over (Delta's
``DeltaHistoryManager.POTENTIALLY_UNMONOTONIZED_TIMESTAMPS``)."""

__all__ = [
    "CheckpointRef",
    "CommitEntry",
    "CommitFacts",
    "CommitSummary",
    "DeltaLog",
    "Snapshot",
    "Txn",
    "advance",
    "commit_facts",
    "commit_version_of",
    "in_commit_timestamp",
    "monotonized",
    "streaming_info",
]

_MAX_CHECKPOINT_PARTS = 1_000_000
"""The most parts a ``_last_checkpoint`` may name (Delta writes one part per ``checkpoint.partSize`` actions, 1,000,000
by default: this is a table of 10^12 files); more is a damaged file, not a table."""
_CLASSIC_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")

_DECODER = json.JSONDecoder()
_CHECKPOINT_COLUMNS = ("add", "remove", "txn", "metaData", "protocol", "domainMetadata")


@dataclass(frozen=True)
class Txn:
    """A Delta ``txn`` action: the latest ``txn_version`` committed by ``app_id`` (for streaming: the
    query id)."""

    app_id: str
    txn_version: int
    last_updated: int | None


@dataclass(frozen=True)
class CommitEntry:
    """One Delta commit (one table version), like a row of ``DESCRIBE HISTORY``.

    ``operation`` and ``operation_parameters`` present sparkonce's own streaming commits as Delta would
    (``STREAMING UPDATE`` with ``outputMode``/``queryId``/``epochId``), reading the ``sparkonce`` object of
    ``commitInfo`` when present. ``query_id``/``batch_id`` come from that object, from a Delta-JVM
    ``STREAMING UPDATE`` commitInfo, or else from the commit's single ``txn`` action.
    """

    table_version: int
    timestamp_ms: int | None
    """The commit's time as Delta dates it: ``inCommitTimestamp``, else its file's modification time
    (:meth:`DeltaLog.commit_file_time`); ``commit_info["timestamp"]`` is the writer's clock before the write."""
    operation: str | None
    operation_parameters: dict[str, Any]
    operation_metrics: dict[str, Any]
    read_version: int | None
    is_blind_append: bool | None
    user_metadata: str | None
    engine_info: str | None
    txns: tuple[Txn, ...]
    num_added_files: int
    num_removed_files: int
    added_bytes: int
    added_rows: int | None
    commit_info: CommitInfo
    query_id: str | None
    batch_id: int | None
    added_paths: tuple[str, ...] = ()
    """Raw (URL-encoded, table-relative) ``add.path`` of every file this commit added."""


@dataclass(frozen=True)
class CheckpointRef:
    """A Delta checkpoint found in ``_delta_log``: its table version and the files that make it up."""

    table_version: int
    kind: str  # "classic", "multi-part" or "v2"
    files: tuple[str, ...]
    """Paths in the table's file system (:meth:`DeltaLog.read_bytes` reads them)."""


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at ``table_version``: metadata, protocol, active files and app transactions."""

    table_version: int
    metadata: Metadata
    protocol: Protocol
    files: dict[str, AddFile]
    """Active files: raw ``add.path`` (URL-encoded, usually relative) -> the ``add`` action."""
    txns: dict[str, Txn]
    checkpoint_version: int | None = None
    """The Delta checkpoint the snapshot started from, or ``None`` when replayed from table version 0."""
    tombstone_set: Tombstones = field(default_factory=Tombstones)
    """The ``remove`` actions still in the log (checkpoint tombstones and later removes), not re-added: kept as the
    checkpoint's Arrow column until asked for (:mod:`sparkonce.delta.log.tombstones`)."""
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    """Metadata domains (``domainMetadata`` actions, tombstones dropped): domain name -> the action."""
    notes: tuple[str, ...] = field(default=())
    """Things worth knowing about how the snapshot was built (e.g. a corrupt ``_last_checkpoint`` was
    ignored)."""

    def txn_version(self, app_id: str) -> int | None:
        """Return the latest ``txn_version`` committed by ``app_id``, or ``None`` if it never committed."""
        txn = self.txns.get(app_id)
        return None if txn is None else txn.txn_version

    @property
    def tombstones(self) -> frozenset[str]:
        """Raw paths of ``remove`` actions still in the log (checkpoint tombstones and later removes), not
        re-added."""
        return self.tombstone_set.paths

    @property
    def tombstone_dvs(self) -> tuple[DeletionVectorDescriptor, ...]:
        """Deletion vector descriptors of those ``remove`` actions (their files stay until VACUUM)."""
        return self.tombstone_set.dvs

    @property
    def removes(self) -> dict[str, RemoveFile]:
        """The ``remove`` actions behind :attr:`tombstones` (what a checkpoint keeps): the logical file they name
        (:func:`sparkonce.delta.log.tombstones.file_key`: the raw path, with the deletion vector's unique id when there
        is one, as Delta reconciles them) -> the action."""
        return self.tombstone_set.removes

    @property
    def configuration(self) -> dict[str, str]:
        """The table properties (``metaData.configuration``)."""
        conf = self.metadata.get("configuration") or {}
        return dict(conf)


@dataclass
class _Listing:
    commits: set[int]
    checkpoints: list[CheckpointRef]
    last_checkpoint: str | None


def streaming_info(commit_info: CommitInfo, txns: Iterable[Txn] = ()) -> tuple[str | None, int | None]:
    """Return ``(query_id, batch_id)`` of a Delta commit, or ``(None, None)`` if it is not a streaming write.

    Reads, in order: the ``sparkonce`` object in ``commitInfo`` (our sink), a Delta-JVM ``STREAMING UPDATE``
    ``operationParameters`` (``queryId``/``epochId``), then a single ``txn`` action (``appId``/``version``).
    """
    ours = commit_info.get("sparkonce")
    if isinstance(ours, dict):
        params = _object(ours.get("operationParameters"))
        query_id = params.get("queryId") or params.get("txnAppId")
        batch = ours.get("batchId", params.get("epochId", params.get("txnVersion")))
        batch_id = _as_int(batch)
        if query_id is not None and batch_id is not None:
            return str(query_id), batch_id
    params = _object(commit_info.get("operationParameters"))
    if commit_info.get("operation") == "STREAMING UPDATE" and "queryId" in params:
        return str(params["queryId"]), _as_int(params.get("epochId"))
    txn_list = list(txns)
    if len(txn_list) == 1:
        return txn_list[0].app_id, txn_list[0].txn_version
    return None, None


def _txn(txn: SetTransaction) -> Txn:
    """A ``txn`` action's content as a :class:`Txn`.

    Raises:
        TypeError: ``appId`` is not a string or ``version`` not an integer (:meth:`DeltaLog.read_actions` names the
            line).
    """
    app_id, version = txn["appId"], txn["version"]
    if type(app_id) is not str or type(version) is not int:
        raise TypeError("'txn' action needs a string 'appId' and an integer 'version'")
    return Txn(app_id, version, _as_int(txn.get("lastUpdated")))


def _object(value: Any) -> dict[str, Any]:
    """A ``commitInfo`` field that should be a JSON object (``operationParameters``, ``operationMetrics``); ``{}``
    when it is absent or not an object (``commitInfo`` is informational: a damaged field reads as a missing one)."""
    return value if isinstance(value, dict) else {}


def _as_int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a NaN or infinite float
        return None


class DeltaLog:
    """Reads the ``_delta_log`` of one Delta table.

    Runs on the driver (or in the CLI). Every call lists ``_delta_log`` afresh, so a long-lived instance
    sees new
    Delta commits.

    Args:
        table: The table root (the folder or prefix that holds ``_delta_log``): a path, a URI, or a parsed
            :class:`~sparkonce.storage.TableLocation` (with its storage options).
        check: False to skip the listing that makes sure ``_delta_log`` exists (for a task reading files the
            driver listed).

    Raises:
        TableNotFoundError: ``_delta_log`` is missing or holds neither a commit nor a checkpoint.
        StorageError: the object store is unreachable, the bucket is missing or the credentials are refused.
    """

    def __init__(self, table: str | os.PathLike[str] | TableLocation, *, check: bool = True) -> None:
        self.location = table_location(table)
        self.table_path = Path(self.location.uri) if self.location.is_local else Path("/")
        """The table root on the local file system (meaningful for local tables only)."""
        self.fs = self.location.filesystem()
        self.log_dir = self.location.fs_path("_delta_log")
        self._mtimes: dict[int, int | None] = {}
        """Commit files' modification times (ms) looked up so far: a commit file is written once."""
        if not check:  # the caller found the table a moment ago (a task of a read the driver planned)
            return
        if self._exists(self._join("_last_checkpoint")) or self._exists(self.commit_path(0)):
            return  # a Delta table, found without listing a log that may hold 10^5..10^6 files
        names = self._names()
        if names is None:
            raise TableNotFoundError(f"{self.location} is not a Delta table: no _delta_log folder")
        if not any((n.endswith(".json") and n[:20].isdigit()) or ".checkpoint." in n for n in names):
            raise TableNotFoundError(f"{self.location} is not a Delta table: _delta_log holds no commit or checkpoint")

    # ------------------------------------------------------------------ file access
    def _join(self, *parts: str) -> str:
        return "/".join((self.log_dir, *parts))

    def _names(self) -> list[str] | None:
        """The names in ``_delta_log`` (None when it does not exist)."""
        if self.location.is_local:
            try:
                return os.listdir(self.log_dir)
            except FileNotFoundError:
                return None
            except OSError as err:
                raise TableNotFoundError(f"cannot list {self.log_dir}: {err}") from err
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.log_dir, allow_not_found=True))
        except OSError as err:  # unreachable store, missing bucket, refused credentials: say which
            raise self.location.store_error(err) from err
        names = [info.base_name for info in infos]
        return names or None

    def read_bytes(self, path: str) -> bytes:
        """The content of a file of the table (a path from this log).

        Raises:
            FileNotFoundError: the file does not exist.
            OSError: it cannot be read.
        """
        if self.location.is_local:
            handle = os.open(path, os.O_RDONLY)  # unbuffered: half the cost of open() for a small commit
            try:
                chunks = []
                while chunk := os.read(handle, 1 << 20):
                    chunks.append(chunk)
            finally:
                os.close(handle)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        import pyarrow.fs as pafs

        try:
            with self.fs.open_input_file(path) as handle:
                return bytes(handle.read())
        except OSError:
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                raise FileNotFoundError(path) from None
            raise

    def commit_mtime_ms(self, table_version: int) -> int | None:
        """The modification time of the JSON commit of ``table_version`` (what a commit without
        ``inCommitTimestamp`` is dated by, as in Delta), or None when it cannot be read."""
        return self._mtime_ms(self.commit_path(table_version))

    def commit_stamp(self, table_version: int) -> tuple[int, int] | None:
        """The (size, modification time in ns) of the JSON commit of ``table_version``, or None when it is missing:
        a commit file is written once (put-if-absent), so a different stamp means a different log."""
        if self.location.is_local:
            try:
                st = os.stat(self.commit_path(table_version))
            except FileNotFoundError:
                return None
            return st.st_size, st.st_mtime_ns
        import pyarrow.fs as pafs

        try:
            info = self.fs.get_file_info(self.commit_path(table_version))
        except OSError as err:
            raise self.location.store_error(err) from err
        if info.type != pafs.FileType.File:
            return None
        return int(info.size or 0), int(info.mtime_ns or 0)

    def _mtime_ms(self, path: str) -> int | None:
        if self.location.is_local:
            try:
                return os.stat(path).st_mtime_ns // 1_000_000
            except OSError:
                return None
        try:
            mtime_ns = self.fs.get_file_info(path).mtime_ns
        except OSError:
            return None
        return int(mtime_ns) // 1_000_000 if mtime_ns is not None else None

    def where(self, path: str) -> str:
        """A file's name for messages: its local path, or its URI on an object store."""
        return path if self.location.is_local else f"{self.location}/{path}"

    # ------------------------------------------------------------------ listing
    def _list(self) -> _Listing:
        commits: set[int] = set()
        multi: dict[tuple[int, int], dict[int, str]] = {}
        checkpoints: list[CheckpointRef] = []
        last: str | None = None
        names = self._names() or []
        for name in names:
            # Fast path for the common case (names are plain strings; no Path objects per entry).
            if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():  # commit_version_of, inline
                commits.add(int(name[:20]))
            elif name == "_last_checkpoint":
                last = self._join(name)
            elif ".checkpoint." in name:
                if m := _CLASSIC_CP_RE.match(name):
                    checkpoints.append(CheckpointRef(int(m.group(1)), "classic", (self._join(name),)))
                elif m := _MULTI_CP_RE.match(name):
                    key = (int(m.group(1)), int(m.group(3)))
                    multi.setdefault(key, {})[int(m.group(2))] = self._join(name)
                elif m := _V2_CP_RE.match(name):
                    checkpoints.append(CheckpointRef(int(m.group(1)), "v2", (self._join(name),)))
        for (table_version, parts), found in multi.items():
            if len(found) == parts and set(found) == set(range(1, parts + 1)):
                files = tuple(found[i] for i in range(1, parts + 1))
                checkpoints.append(CheckpointRef(table_version, "multi-part", files))
            else:
                logger.warning(
                    "incomplete multi-part checkpoint at table version %d: %d of %d parts",
                    table_version,
                    len(found),
                    parts,
                )
        checkpoints.sort(key=lambda c: (c.table_version, c.kind != "v2"))
        return _Listing(commits, checkpoints, last)

    def last_checkpoint_ref(self) -> CheckpointRef | None:
        """The classic, multi-part or V2 checkpoint that ``_last_checkpoint`` names (a V2 one by its
        ``v2Checkpoint.path``), when every file of it is there (a V2 checkpoint's sidecars are checked on reading);
        None when the hint is missing, unreadable or names files that are not there. Found without listing
        ``_delta_log``."""
        try:
            last = self.read_last_checkpoint()
        except DeltaLogError:
            return None
        if last is None:
            return None
        version = int(last["version"])
        parts = last.get("parts")
        if "v2Checkpoint" in last:  # the V2 checkpoint's top-level file, named in the hint (sidecars: on reading)
            v2 = last["v2Checkpoint"]
            name = v2.get("path") if isinstance(v2, dict) else None
            if not isinstance(name, str) or not _V2_CP_RE.match(name) or int(name[:20]) != version:
                return None
            ref = CheckpointRef(version, "v2", (self._join(name),))
        elif isinstance(parts, int) and parts > 1:
            names = [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
            ref = CheckpointRef(version, "multi-part", tuple(self._join(n) for n in names))
        else:
            ref = CheckpointRef(version, "classic", (self._join(f"{version:020d}.checkpoint.parquet"),))
        return ref if all(self._exists(path) for path in ref.files) else None

    def _tail_listing(self) -> _Listing | None:
        """What the latest snapshot needs, found without listing ``_delta_log``: the checkpoint
        :meth:`last_checkpoint_ref` finds and the Delta commits after it, probed one by one up to the first missing
        one (as Delta lists from the checkpoint on). A log of a long-lived stream holds 10^5..10^6 files, so a full
        listing would dominate every open. None when there is no such checkpoint: then the full listing decides."""
        ref = self.last_checkpoint_ref()
        if ref is None:
            return None
        commits: set[int] = set()
        while self._exists(self.commit_path(ref.table_version + 1 + len(commits))):
            commits.add(ref.table_version + 1 + len(commits))
        return _Listing(commits, [ref], self._join("_last_checkpoint"))

    def _exists(self, path: str) -> bool:
        if self.location.is_local:
            return os.path.isfile(path)
        import pyarrow.fs as pafs

        try:
            return bool(self.fs.get_file_info(path).type == pafs.FileType.File)
        except OSError as err:
            raise self.location.store_error(err) from err

    def latest_version(self) -> int:
        """Return the newest table version (the newest JSON commit or checkpoint)."""
        tail = self._tail_listing()
        if tail is not None:
            return max([*tail.commits, tail.checkpoints[0].table_version])
        listing = self._list()
        versions = list(listing.commits) + [c.table_version for c in listing.checkpoints]
        if not versions:
            raise TableNotFoundError(f"{self.location}: _delta_log holds no commit or checkpoint")
        return max(versions)

    def commit_versions(self) -> list[int]:
        """Return the table versions whose JSON commit is present, ascending."""
        return sorted(self._list().commits)

    def commit_timestamps(self) -> Iterator[tuple[int, int]]:
        """Yield ``(table_version, timestamp_ms)`` for every JSON commit present, ascending, reading each commit's
        ``commitInfo`` only when asked for (a caller that found its answer stops reading).

        The timestamp is the one :meth:`history` shows and Delta's ``DeltaHistoryManager`` uses: the commit's
        ``inCommitTimestamp``, else the commit file's modification time (one listing of ``_delta_log``) made later
        than the previous commit's when it is not (:func:`monotonized`), so that a clock that stepped back cannot
        make two table versions answer one instant. Both ``timestampAsOf`` (batch) and ``startingTimestamp``
        (stream) resolve against these.
        """
        mtimes = self.commit_mtimes()
        previous: int | None = None
        for table_version in sorted(mtimes):
            raw = self._read_commit(table_version)
            ts = None
            if b"inCommitTimestamp" in raw:
                ts = in_commit_timestamp(self._summary(table_version, raw).commit_info)
            if ts is None:
                ts = mtimes[table_version]
                if previous is not None and ts <= previous:
                    ts = previous + 1
            yield table_version, ts
            previous = ts

    def commit_file_time(self, table_version: int) -> int | None:
        """The time of the commit of ``table_version`` by its file, as Delta reads it for the change data feed:
        the file's modification time, monotonized (:func:`monotonized`) over the up to 100 commits before it
        (Delta's ``POTENTIALLY_UNMONOTONIZED_TIMESTAMPS``). None when the file cannot be read."""
        if not self.location.is_local and table_version not in self._mtimes:
            self._mtimes.update(self.commit_mtimes())  # one listing, not a request per commit
        stamps: dict[int, int] = {}
        for version in range(max(0, table_version - _MONOTONIZE_WINDOW), table_version + 1):
            if version not in self._mtimes:
                self._mtimes[version] = self.commit_mtime_ms(version)
            mtime = self._mtimes[version]
            if mtime is not None:
                stamps[version] = mtime
        return monotonized(stamps).get(table_version)

    def commit_mtimes(self) -> dict[int, int]:
        """The modification time in ms of every JSON commit present, by table version, from one listing of
        ``_delta_log`` (Delta's commit timestamp for a commit without ``inCommitTimestamp``)."""
        if self.location.is_local:
            found: dict[int, int] = {}
            try:
                entries = list(os.scandir(self.log_dir))
            except FileNotFoundError:
                return found
            for entry in entries:
                version = commit_version_of(entry.name)
                if version is not None:
                    try:
                        found[version] = entry.stat().st_mtime_ns // 1_000_000
                    except FileNotFoundError:  # removed by log cleanup meanwhile
                        continue
            return found
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.log_dir, allow_not_found=True))
        except OSError as err:
            raise self.location.store_error(err) from err
        versions = ((commit_version_of(info.base_name), info) for info in infos)
        return {v: int(info.mtime_ns or 0) // 1_000_000 for v, info in versions if v is not None}

    def checkpoints(self) -> list[CheckpointRef]:
        """Return the complete Delta checkpoints present, oldest first."""
        return self._list().checkpoints

    def commit_path(self, table_version: int) -> str:
        """Return the path of the JSON commit of ``table_version`` (which may not exist)."""
        return self._join(f"{table_version:020d}.json")

    def has_commit(self, table_version: int) -> bool:
        """True when the JSON commit of ``table_version`` exists (one look-up, no listing)."""
        path = self.commit_path(table_version)
        if self.location.is_local:
            return os.path.isfile(path)
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(path).type == pafs.FileType.File)

    def read_last_checkpoint(self) -> LastCheckpoint | None:
        """Return the parsed ``_last_checkpoint``, or ``None`` when it is absent.

        Raises:
            DeltaLogError: The file is not a JSON object with an integer ``version``.
        """
        path = self.where(self._join("_last_checkpoint"))
        try:
            text = self.read_bytes(self._join("_last_checkpoint")).decode("utf-8")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise DeltaLogError(f"{path}: cannot read: {err}") from err
        except UnicodeDecodeError as err:
            raise DeltaLogError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DeltaLogError(f"{path}: not valid JSON ({err.msg} at char {err.pos})") from err
        if not isinstance(data, dict) or type(data.get("version")) is not int or data["version"] < 0:
            raise DeltaLogError(f"{path}: expected a JSON object with a non-negative integer 'version'")
        parts = data.get("parts")
        if parts is not None and (type(parts) is not int or not 0 < parts <= _MAX_CHECKPOINT_PARTS):
            raise DeltaLogError(f"{path}: 'parts' must be an integer from 1 to {_MAX_CHECKPOINT_PARTS}, not {parts!r}")
        return cast(LastCheckpoint, data)

    # ------------------------------------------------------------------ commits
    def read_actions(self, table_version: int, *, only: tuple[bytes, ...] = ()) -> list[Action]:
        """Return the actions of the JSON commit of ``table_version``, in file order; with ``only`` (action names
        such as ``b"commitInfo"``) just those, the other lines left unparsed.

        Raises:
            DeltaLogError: The file is missing (e.g. removed by log clean-up) or a line is not a JSON object.
        """
        return self._parse_actions(table_version, self._read_commit(table_version), only)

    def _read_commit(self, table_version: int) -> bytes:
        path = self.commit_path(table_version)
        try:
            return self.read_bytes(path)
        except FileNotFoundError as err:
            raise DeltaLogError(
                f"{self.where(path)}: the Delta commit of table version {table_version} is missing"
            ) from err
        except OSError as err:
            raise DeltaLogError(f"{self.where(path)}: cannot read table version {table_version}: {err}") from err

    def _parse_actions(self, table_version: int, raw: bytes, only: tuple[bytes, ...] = ()) -> list[Action]:
        path = self.where(self.commit_path(table_version))
        actions: list[Action] = []
        keys = tuple(b'"' + name + b'"' for name in only)
        for lineno, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            if keys and not line[:40].lstrip(b" \t{").lstrip().startswith(keys):
                continue
            try:
                actions.append(parse_action(line))
            except ActionParseError as err:
                where = f"{path}: line {lineno} of table version {table_version}"
                raise DeltaLogError(f"{where} {err}" if err.malformed else f"{where}: {err}") from err
        return actions

    def commit_entry(self, table_version: int, actions: Sequence[Action] | None = None) -> CommitEntry:
        """Return the :class:`CommitEntry` of one table version (see :meth:`history`).

        Args:
            table_version: The table version.
            actions: Its actions when the caller has already read them (:meth:`read_actions`); read otherwise.
        """
        if actions is None:
            actions = self.read_actions(table_version)
        return _entry_from_actions(table_version, actions, lambda: self.commit_file_time(table_version))

    def history(self, *, start: int | None = None, end: int | None = None) -> list[CommitEntry]:
        """Return one :class:`CommitEntry` per JSON commit with ``start <= table_version <= end``, newest
        first.

        Like ``DESCRIBE HISTORY``, only commits still present in ``_delta_log`` are listed.

        Raises:
            DeltaLogError: A commit in the range is not valid JSON.
        """
        versions = [
            v
            for v in sorted(self._list().commits, reverse=True)
            if (start is None or v >= start) and (end is None or v <= end)
        ]
        return [self.commit_entry(v) for v in versions]

    def commit_summaries(self, table_versions: Sequence[int]) -> list[CommitSummary]:
        """The :class:`CommitSummary` (``commitInfo`` and ``txn`` actions) of each of ``table_versions``, in
        that order: what ``DESCRIBE HISTORY`` shows. Other actions are not parsed: the lines that start with
        ``{"commitInfo"`` or ``{"txn"`` (how Delta writers write them) are found by a byte search; a commit
        written otherwise is parsed line by line. On an object store the files are read by a pool of threads: a
        history of 100,000 table versions is 100,000 small requests.

        Raises:
            DeltaLogError: a commit is missing, unreadable, or its ``commitInfo``/``txn`` line is malformed.
        """
        if self.location.is_local or len(table_versions) < 8:  # local reads are CPU-bound: threads only contend
            return [self._summary(v, self._read_commit(v)) for v in table_versions]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=32) as pool:  # an object store's latency dominates: overlap requests
            raws = list(pool.map(self._read_commit, table_versions, chunksize=16))
        return [self._summary(v, raw) for v, raw in zip(table_versions, raws, strict=True)]

    def _summary(self, table_version: int, raw: bytes) -> CommitSummary:
        info_lines, txn_lines = _lines_starting(raw, b'{"commitInfo"'), _lines_starting(raw, b'{"txn"')
        if len(info_lines) == 1 and (txn_lines or b'"txn"' not in raw):
            try:  # the found lines as one JSON array: one decoder call
                info, *found = _DECODER.decode("[" + b",".join(info_lines + txn_lines).decode() + "]")
                commit_info = info["commitInfo"]
                txns = tuple(_txn(t["txn"]) for t in found)
                if isinstance(commit_info, dict):
                    return CommitSummary(table_version, cast(CommitInfo, commit_info), txns)
            except (ValueError, TypeError, KeyError):  # malformed: the line-by-line parse below names the line
                pass
        commit_info = {}
        parsed: list[Txn] = []
        for action in self._parse_actions(table_version, raw, (b"commitInfo", b"txn")):
            if "commitInfo" in action:
                commit_info = action["commitInfo"]
            elif "txn" in action:
                parsed.append(_txn(action["txn"]))
        return CommitSummary(table_version, commit_info, tuple(parsed))

    def iter_history(self) -> Iterator[CommitEntry]:
        """Yield commit entries newest first, reading each JSON commit only when asked for."""
        for v in sorted(self._list().commits, reverse=True):
            yield self.commit_entry(v)

    # ------------------------------------------------------------------ snapshot
    def snapshot(self, table_version: int | None = None) -> Snapshot:
        """Return the table state at ``table_version`` (default: the latest).

        Starts from the newest complete Delta checkpoint at or below ``table_version`` (classic, multi-part or
        V2), then replays the later JSON commits. ``_last_checkpoint`` is only a hint: when it is missing,
        corrupt or points at a missing checkpoint, the listing decides; a checkpoint that cannot be read is
        skipped in favour of an older one (noted in :attr:`Snapshot.notes`).

        The latest snapshot starts from ``_last_checkpoint``'s checkpoint without listing ``_delta_log`` when it can
        (:meth:`_tail_listing`); when that checkpoint turns out unusable the full listing decides.

        Raises:
            DeltaLogError: The table version does not exist, or the commits needed to reach it are missing or
                corrupt.
        """
        if table_version is None and (tail := self._tail_listing()) is not None:
            try:
                quick = self._snapshot(tail, None)
            except DeltaLogError:
                quick = None
            if quick is not None and quick.checkpoint_version is not None and not quick.notes:
                return quick
        return self._snapshot(self._list(), table_version)

    def _snapshot(self, listing: _Listing, table_version: int | None) -> Snapshot:
        latest = max(list(listing.commits) + [c.table_version for c in listing.checkpoints])
        target = latest if table_version is None else table_version
        if target < 0 or target > latest:
            raise self._version_not_found(target, listing, latest)
        notes: list[str] = []
        try:
            last = self.read_last_checkpoint()
        except DeltaLogError as err:
            notes.append(f"ignored _last_checkpoint: {err}")
            last = None
        if (
            last is not None
            and last["version"] <= target
            and not any(c.table_version == last["version"] for c in listing.checkpoints)
        ):
            notes.append(
                f"_last_checkpoint points at table version {last['version']}, whose checkpoint is "
                "missing or incomplete; used the listing instead"
            )
        candidates = [c for c in listing.checkpoints if c.table_version <= target]
        state = _State()
        start = 0
        checkpoint_version: int | None = None
        for ref in reversed(candidates):
            if any(v not in listing.commits for v in range(ref.table_version + 1, target + 1)):
                continue
            try:
                state = self._load_checkpoint(ref)
            except DeltaLogError as err:
                notes.append(f"skipped checkpoint at table version {ref.table_version}: {err}")
                continue
            checkpoint_version = ref.table_version
            start = ref.table_version + 1
            break
        if checkpoint_version is None:
            missing = [v for v in range(0, target + 1) if v not in listing.commits]
            if missing and not any(v < missing[0] for v in listing.commits) and target < latest:
                raise self._version_not_found(target, listing, latest)  # the oldest versions left the log
            if missing:
                why = "".join(f"; {note}" for note in notes if note.startswith("skipped checkpoint"))
                raise DeltaLogError(
                    f"{self.location}: cannot rebuild table version {target}: no usable checkpoint and the "
                    f"Delta commit of table version {missing[0]} is missing from _delta_log{why}"
                )
        for v in range(start, target + 1):
            state.apply(self.read_actions(v))
        if not state.protocol or not state.metadata:
            raise DeltaLogError(
                f"{self.location}: table version {target} has no "
                f"{'protocol' if not state.protocol else 'metaData'} action"
            )
        return state.snapshot(target, checkpoint_version, tuple(notes))

    REBASE_AFTER = 1000
    """Commits an updated snapshot replays past its checkpoint before :meth:`update` starts again from a newer
    checkpoint."""

    def update(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` brought up to the latest table version by reading only the Delta commits after its table
        version (Delta's ``update()``): probed one by one up to the first missing one, no listing of ``_delta_log``.

        A long-running stream keeps its snapshot this way instead of rebuilding it every batch. Rebuilt from the
        newest checkpoint instead (:meth:`snapshot`) when ``_last_checkpoint`` names a checkpoint beyond every commit
        found (log cleanup removed commits the snapshot needs: it is older than the log's retention), or when the
        snapshot has replayed more than :attr:`REBASE_AFTER` commits past its own checkpoint and a newer checkpoint
        exists (its tombstones would otherwise grow with the stream's age). The snapshot passed in is not changed.

        Raises:
            DeltaLogError: a new commit cannot be read.
        """
        found = snapshot.table_version
        while self._exists(self.commit_path(found + 1)):
            found += 1
        try:
            last = self.read_last_checkpoint()
        except DeltaLogError:
            last = None
        newest_checkpoint = -1 if last is None else int(last["version"])
        if newest_checkpoint > found:  # the log moved past what the held snapshot can reach by commits
            return self.snapshot()
        base = snapshot.checkpoint_version or 0
        if newest_checkpoint > base and found - base > self.REBASE_AFTER and self.last_checkpoint_ref() is not None:
            return self.snapshot()
        if found == snapshot.table_version:
            return snapshot
        state = _State.of(snapshot)
        for table_version in range(snapshot.table_version + 1, found + 1):
            state.apply(self.read_actions(table_version))
        return state.snapshot(found, snapshot.checkpoint_version, snapshot.notes)

    def check_table_version(self, table_version: int) -> None:
        """Raise when ``table_version`` cannot be read: beyond the latest, or before the oldest the log keeps.

        Raises:
            VersionNotFoundError: Delta's ``DELTA_VERSION_NOT_FOUND``, naming the available range.
        """
        listing = self._list()
        latest = max(list(listing.commits) + [c.table_version for c in listing.checkpoints])
        if not self._earliest(listing, latest) <= table_version <= latest:
            raise self._version_not_found(table_version, listing, latest)

    def earliest_version(self) -> int:
        """The oldest table version that can still be rebuilt: 0, or the oldest checkpoint from which every later
        Delta commit is present (after log cleanup removed the versions before it)."""
        listing = self._list()
        return self._earliest(listing, max(list(listing.commits) + [c.table_version for c in listing.checkpoints]))

    @staticmethod
    def _earliest(listing: _Listing, latest: int) -> int:
        present = listing.commits
        start = latest
        while start - 1 in present:  # the contiguous run of commits that ends at the latest table version
            start -= 1
        if start == 0:
            return 0
        anchors = [c.table_version for c in listing.checkpoints if c.table_version >= start - 1]
        return min(anchors) if anchors else latest

    def _version_not_found(self, target: int, listing: _Listing, latest: int) -> VersionNotFoundError:
        earliest = self._earliest(listing, latest)
        why = (
            ""
            if target > latest or earliest == 0
            else f"; versions before {earliest} were removed from the log after delta.logRetentionDuration "
            "(Delta's default: 30 days)"
        )
        return VersionNotFoundError(
            f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version {target}. Available versions: "
            f"[{earliest}, {latest}]. ({self.location}{why})"
        )

    def _load_checkpoint(self, ref: CheckpointRef) -> _State:
        state = _State()
        for path in ref.files:
            _read_checkpoint_file(self, path, state)
        if ref.kind == "v2":
            for sidecar in list(state.sidecars):
                sidecar_path = self._join("_sidecars", unquote(sidecar))
                try:
                    _read_checkpoint_file(self, sidecar_path, state)
                except DeltaLogError as err:
                    raise DeltaLogError(
                        f"{err} (a sidecar of the V2 checkpoint {self.where(ref.files[0])}, table feature v2Checkpoint)"
                    ) from err
        return state

    # ------------------------------------------------------------------ files
    def data_file_fs_path(self, raw_path: str) -> str | None:
        """A raw ``add``/``remove`` path as a path in :attr:`fs` (the table's file system), or ``None`` when the
        file is elsewhere (:func:`sparkonce.delta.log.paths.data_file_fs_path`)."""
        from sparkonce.delta.log.paths import data_file_fs_path

        return data_file_fs_path(self.location, raw_path)


def advance(snapshot: Snapshot, table_version: int, actions: Sequence[Action]) -> Snapshot:
    """``snapshot`` with the actions of the Delta commit of ``table_version`` (the next one) applied: the state a
    writer that made that commit on top of ``snapshot`` knows without reading the log again."""
    state = _State.of(snapshot)
    state.apply(actions)
    return state.snapshot(table_version, snapshot.checkpoint_version, snapshot.notes)


class _State:
    """Mutable replay state; actions are reconciled as PROTOCOL.md "Action Reconciliation" says."""

    def __init__(self) -> None:
        self.metadata: Metadata | None = None
        self.protocol: Protocol | None = None
        self.files: dict[str, AddFile] = {}
        self.txns: dict[str, Txn] = {}
        self.sidecars: list[str] = []
        self.base_removes: list[Any] = []
        """The checkpoint's ``remove`` rows (pyarrow struct arrays, every row valid), kept as read."""
        self.base: Any = None
        """The :class:`Tombstones` base of a state copied from a snapshot."""
        self.readded: set[str] = set()
        self.removes: dict[str, RemoveFile] = {}
        self.tombstone_dvs: list[DeletionVectorDescriptor] = []
        self.domains: dict[str, DomainMetadata] = {}

    @classmethod
    def of(cls, snapshot: Snapshot) -> _State:
        """A replay state holding ``snapshot`` (copies: the snapshot stays as it is)."""
        state = cls()
        state.metadata = snapshot.metadata
        state.protocol = snapshot.protocol
        state.files = dict(snapshot.files)
        state.txns = dict(snapshot.txns)
        held = snapshot.tombstone_set
        state.base = held.base
        state.readded = set(held.hidden)
        state.removes = dict(held.later)
        state.tombstone_dvs = list(held.later_dvs)
        state.domains = dict(snapshot.domains)
        return state

    def snapshot(self, table_version: int, checkpoint_version: int | None, notes: tuple[str, ...]) -> Snapshot:
        """The :class:`Snapshot` this state holds at ``table_version`` (the caller checked it has a protocol and
        metadata)."""
        assert self.metadata is not None and self.protocol is not None
        return Snapshot(
            table_version=table_version,
            metadata=self.metadata,
            protocol=self.protocol,
            files=self.files,
            txns=self.txns,
            checkpoint_version=checkpoint_version,
            tombstone_set=self._tombstones(),
            domains={k: v for k, v in self.domains.items() if not v.get("removed")},
            notes=notes,
        )

    def _tombstones(self) -> Tombstones:
        base = self.base
        if self.base_removes:
            import pyarrow as pa

            base = self.base_removes[0] if len(self.base_removes) == 1 else pa.concat_arrays(self.base_removes)
        hidden = frozenset(self.readded) if base is not None else frozenset()
        return Tombstones(base, hidden=hidden, later=self.removes, later_dvs=tuple(self.tombstone_dvs))

    def _remove(self, remove: RemoveFile) -> None:
        self.removes[file_key(remove)] = remove
        dv = remove.get("deletionVector")
        if isinstance(dv, dict):
            self.tombstone_dvs.append(dv)

    def apply_checkpoint_action(self, action: Action) -> None:
        if "add" in action:
            add = action["add"]
            self.files[add["path"]] = add
        elif "txn" in action:
            self._txn(action["txn"])
        elif "metaData" in action:
            self.metadata = action["metaData"]
        elif "protocol" in action:
            self.protocol = action["protocol"]
        elif "remove" in action:
            self._remove(action["remove"])
        elif "sidecar" in action:
            self.sidecars.append(action["sidecar"]["path"])
        elif "domainMetadata" in action:
            self.domains[str(action["domainMetadata"]["domain"])] = action["domainMetadata"]

    def apply(self, actions: Sequence[Action]) -> None:
        # Removes first: a deletion-vector update is remove(path, old DV) + add(path, new DV) in one commit.
        for action in actions:
            if "remove" in action:
                self.files.pop(action["remove"]["path"], None)
                self._remove(action["remove"])
        for action in actions:
            if "add" in action:
                add = action["add"]
                self.files[add["path"]] = add
                key = file_key(add)
                self.readded.add(key)
                self.removes.pop(key, None)
            elif "txn" in action:
                self._txn(action["txn"])
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "domainMetadata" in action:
                self.domains[str(action["domainMetadata"]["domain"])] = action["domainMetadata"]

    def _txn(self, txn: SetTransaction) -> None:
        app_id = str(txn["appId"])
        self.txns[app_id] = Txn(app_id, int(txn["version"]), _as_int(txn.get("lastUpdated")))


def _entry_from_actions(
    table_version: int, actions: Sequence[Action], file_mtime_ms: Callable[[], int | None]
) -> CommitEntry:
    commit_info: CommitInfo = {}
    txns: list[Txn] = []
    added: list[AddFile] = []
    removed = 0
    for action in actions:
        if "commitInfo" in action and isinstance(action["commitInfo"], dict):
            commit_info = action["commitInfo"]
        elif "add" in action:
            added.append(action["add"])
        elif "remove" in action:
            removed += 1
        elif "txn" in action:
            txns.append(_txn(action["txn"]))
    facts = commit_facts(commit_info, txns)
    timestamp = facts.in_commit_timestamp_ms if facts.in_commit_timestamp_ms is not None else file_mtime_ms()
    query_id, batch_id = facts.query_id, facts.batch_id
    return CommitEntry(
        table_version=table_version,
        timestamp_ms=timestamp,
        operation=facts.operation,
        operation_parameters=dict(facts.parameters),
        operation_metrics=dict(facts.metrics),
        read_version=_as_int(commit_info.get("readVersion")),
        is_blind_append=commit_info.get("isBlindAppend"),
        user_metadata=commit_info.get("userMetadata"),
        engine_info=commit_info.get("engineInfo"),
        txns=tuple(txns),
        num_added_files=len(added),
        num_removed_files=removed,
        added_bytes=sum(int(a.get("size") or 0) for a in added),
        added_rows=_added_rows(added, facts.metrics),
        commit_info=commit_info,
        query_id=query_id,
        batch_id=batch_id,
        added_paths=tuple(str(a.get("path")) for a in added),
    )


class CommitFacts(NamedTuple):
    """What a ``commitInfo`` says, read the same way by every reader of history."""

    operation: str | None
    parameters: dict[str, Any]
    metrics: dict[str, Any]
    in_commit_timestamp_ms: int | None
    """``inCommitTimestamp``; None when the commit has none (then the commit file's modification time is the
    commit's timestamp, as in Delta: ``commitInfo.timestamp`` is the writer's clock before the file was written)."""
    query_id: str | None
    batch_id: int | None


def commit_facts(commit_info: CommitInfo, txns: Sequence[Txn]) -> CommitFacts:
    """The operation, parameters and metrics of a Delta commit, and its streaming query and batch (see
    :func:`streaming_info`). Tables written before sparkonce wrote Delta's ``commitInfo`` at the top level keep the
    real operation in a nested ``sparkonce`` object, which wins. The dicts returned are the commit's own: do not
    change them."""
    ours = commit_info.get("sparkonce")
    operation = commit_info.get("operation")
    params = _object(commit_info.get("operationParameters"))
    metrics = _object(commit_info.get("operationMetrics"))
    if isinstance(ours, dict):
        operation = ours.get("operation", operation)
        params = _object(ours.get("operationParameters")) or params
        if isinstance(ours.get("operationMetrics"), dict):
            metrics = ours["operationMetrics"]  # Delta's metric names for MERGE, DELETE, UPDATE, OPTIMIZE, ...
    query_id, batch_id = streaming_info(commit_info, txns)
    return CommitFacts(operation, params, metrics, in_commit_timestamp(commit_info), query_id, batch_id)


def commit_version_of(name: str) -> int | None:
    """The table version a ``_delta_log`` file name is the JSON commit of (``00000000000000000012.json``), else
    None."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
        return int(name[:20])
    return None


def monotonized(stamps: Mapping[int, int]) -> dict[int, int]:
    """``stamps`` (ms by table version) made strictly increasing in table version order, as Delta's
    ``DeltaHistoryManager`` does with commit files' modification times: a time not after the previous one becomes
    the previous one + 1 ms."""
    done: dict[int, int] = {}
    previous: int | None = None
    for table_version in sorted(stamps):
        ts = stamps[table_version]
        if previous is not None and ts <= previous:
            ts = previous + 1
        done[table_version] = previous = ts
    return done


def in_commit_timestamp(commit_info: CommitInfo) -> int | None:
    """The commit's ``inCommitTimestamp`` (Delta's ``inCommitTimestamp`` feature), None when it has none."""
    return _as_int(commit_info.get("inCommitTimestamp"))


class CommitSummary(NamedTuple):
    """The ``commitInfo`` (``{}`` when there is none) and ``txn`` actions of one Delta commit."""

    table_version: int
    commit_info: CommitInfo
    txns: tuple[Txn, ...]


def _lines_starting(raw: bytes, prefix: bytes) -> list[bytes]:
    """The lines of ``raw`` that start with ``prefix`` (a byte search: the other lines are never split out)."""
    found = []
    at = raw.find(prefix)
    while at >= 0:
        end = raw.find(b"\n", at)
        if at == 0 or raw[at - 1] == 0x0A:  # 0x0A: a newline
            found.append(raw[at:] if end < 0 else raw[at:end])
        if end < 0:
            break
        at = raw.find(prefix, end)
    return found


def _added_rows(added: Sequence[AddFile], metrics: dict[str, Any]) -> int | None:
    if not added:
        return 0
    total = 0
    for add in added:
        stats = add.get("stats")
        if not stats:
            break
        try:
            records = json.loads(stats).get("numRecords")
        except (json.JSONDecodeError, AttributeError, TypeError):
            break
        if not isinstance(records, int):
            break
        total += records
    else:
        return total
    for key in ("numOutputRows", "num_added_rows"):
        value = _as_int(metrics.get(key))
        if value is not None:
            return value
    return None


def _read_checkpoint_file(delta_log: DeltaLog, fs_path: str, state: _State) -> None:
    """Apply the actions of one checkpoint file (Parquet, or JSON lines for V2 checkpoints) to ``state``.

    A Parquet file is read column by column: ``add`` rows become dicts built field by field (no walk of each
    value), ``remove`` rows stay an Arrow column (:mod:`sparkonce.delta.log.tombstones`), and the checks of
    :func:`~sparkonce.delta.log.actions.action_problem` are made on the columns' types and null counts for both.
    """
    path = delta_log.where(fs_path)
    if fs_path.endswith(".json"):
        try:
            lines = delta_log.read_bytes(fs_path).split(b"\n")
        except OSError as err:
            raise DeltaLogError(f"{path}: cannot read checkpoint: {err}") from err
        for lineno, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    action = parse_action(line)
                except ActionParseError as err:
                    raise DeltaLogError(
                        f"{path}: line {lineno} {err}" if err.malformed else f"{path}: line {lineno}: {err}"
                    ) from err
                state.apply_checkpoint_action(action)
        return
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(fs_path, filesystem=delta_log.fs)
        columns = [c for c in (*_CHECKPOINT_COLUMNS, "sidecar") if c in schema.names]
        table = pq.read_table(fs_path, columns=columns, filesystem=delta_log.fs)
    except FileNotFoundError as err:
        raise DeltaLogError(f"{path}: checkpoint file is missing") from err
    except Exception as err:  # pyarrow raises ArrowInvalid/OSError subclasses on garbled files
        raise DeltaLogError(f"{path}: not a readable Parquet checkpoint ({err})") from err
    with _gc_paused():
        for name in columns:
            _read_checkpoint_column(path, name, table.column(name), state)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a checkpoint's rows become dicts: 10^5 new dicts (no cycles
    among them) otherwise trigger collections that walk every object the process holds (a running stream holds its
    snapshot): measured 40 % of a 100,000-file checkpoint's read."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_checkpoint_column(path: str, name: str, column: Any, state: _State) -> None:
    """Apply the ``name`` rows of a Parquet checkpoint (``column``) to ``state``."""
    import pyarrow as pa

    if column.null_count == len(column):
        return
    chunks = [chunk.filter(chunk.is_valid()) for chunk in column.chunks]
    try:
        for chunk in chunks:
            chunk.validate(full=True)  # e.g. a string column with bytes that are not UTF-8
    except (pa.ArrowInvalid, ValueError) as err:
        raise DeltaLogError(f"{path}: column {name!r} of the Parquet checkpoint is unreadable ({err})") from err
    if name in ("add", "remove"):
        if (problem := _file_column_problem(name, column.type, chunks)) is not None:
            raise DeltaLogError(f"{path}: a {name!r} row of the Parquet checkpoint: {problem}")
        if name == "remove":
            state.base_removes.extend(chunk for chunk in chunks if len(chunk))
        else:
            for chunk in chunks:
                for add in arrow_rows(chunk):
                    state.files[add["path"]] = add
        return
    for chunk in chunks:
        for value in arrow_rows(chunk):
            row = {name: value}
            if (problem := action_problem(row)) is not None:
                raise DeltaLogError(f"{path}: a {name!r} row of the Parquet checkpoint: {problem}")
            state.apply_checkpoint_action(cast(Action, row))


def _file_column_problem(name: str, arrow_type: Any, chunks: list[Any]) -> str | None:
    """What :func:`~sparkonce.delta.log.actions.action_problem` would find in some row of an ``add`` or ``remove``
    column, from its type and its null counts (every row of ``chunks`` is valid)."""
    import pyarrow as pa

    def text(t: Any) -> bool:
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))

    if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index("path") < 0:
        return f"{name!r} action has no string 'path'"
    if not text(arrow_type.field("path").type) or any(c.field("path").null_count for c in chunks):
        return f"{name!r} action has no string 'path'"
    checks = (
        ("size", pa.types.is_integer, "a non-integer 'size'"),
        ("partitionValues", pa.types.is_map, "a malformed 'partitionValues'"),
        ("deletionVector", pa.types.is_struct, "a malformed 'deletionVector'"),
        ("stats", text, "a malformed 'stats'"),
    )
    for field_name, fits, what in checks:
        at = arrow_type.get_field_index(field_name)
        if at < 0 or fits(arrow_type.field(at).type):
            continue
        for chunk in chunks:  # a column of another type is a problem in the rows that set it
            values = chunk.field(field_name)
            if values.null_count < len(values):
                row = values.is_valid().to_pylist().index(True)
                return f"{name!r} action for {chunk.field('path')[row].as_py()} has {what}"
    return None
