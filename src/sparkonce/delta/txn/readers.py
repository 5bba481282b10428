"""The retention guard: streams reading a Delta table register themselves, and log cleanup and VACUUM keep what
they still need.

A lagging or paused stream reads table versions later than the ones log cleanup and VACUUM keep: Delta deletes
the commits and data files older than ``delta.logRetentionDuration`` / ``delta.deletedFileRetentionDuration``
without knowing who still reads them, and the restarted stream fails or, reading with ``ignoreMissingFiles``,
skips data (delta-io/delta#1728, #1945). sparkonce sees both sides, so each query reading a Delta table with
sparkonce's source (plain, change data feed, pipeline stages) registers in the table itself, one small JSON file
per query::

    _delta_log/_sparkonce/readers/<query-id>.json
    {"queryId": ..., "checkpointDir": ..., "source": "delta" | "cdf", "queryName": ...,
     "tableVersion": v, "updatedAtMs": ...}

``tableVersion`` is where a restart of the query may read from: the ``reservoirVersion`` of the start of its last
planned batch (:mod:`sparkonce.delta.reader_listener` says why the start), that table version and the later ones
(or the snapshot of it). Delta's readers (delta-spark, delta-rs, the kernels)
ignore the folder: they keep only ``_delta_log`` names of their own patterns (``<version>.json``,
``<version>.checkpoint...``), and Delta's log already has subfolders of its own (``_sidecars/``, ``_commits/``).

What the guard keeps (:func:`reader_hold`), for every registered reader updated within the table's
``sparkonce.readerRetentionDuration`` (default ``interval 7 days``):

* log cleanup keeps every log file from the newest checkpoint at or before the reader's table version on (the
  commits it reads and the checkpoint a snapshot read starts from);
* VACUUM keeps every data file (and deletion vector) removed at or after the reader's table version: files the
  reader's next batches add, and, for the change data feed, the files a delete at that table version removed.

A reader not updated for longer than that stops holding back (a WARNING names it); ``doctor`` and
``sparkonce readers`` report it as expired. A stopped query's registration stays (it may restart) until it
expires or an operator forgets it (:func:`forget_reader`, ``sparkonce readers TABLE --forget QUERY_ID --yes``).

Runs on the driver or in the CLI process; no Spark. The registrations are written by
:mod:`sparkonce.delta.reader_listener`.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sparkonce.delta.log import clock
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.table.properties import property_value
from sparkonce.errors import DeltaLogError
from sparkonce.storage import TableLocation, table_location

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_READER_RETENTION",
    "READERS_DIR",
    "RETENTION_PROPERTY",
    "HeldBack",
    "ReaderHold",
    "ReaderState",
    "ReaderStatus",
    "RegisteredReader",
    "forget_reader",
    "held_data_files",
    "held_log_files",
    "hold_back",
    "read_readers",
    "reader_hold",
    "reader_retention_ms",
    "reader_states",
    "register_reader",
]

READERS_DIR = "_delta_log/_sparkonce/readers"
"""The folder, relative to the table root, holding one registration file per reading query."""
RETENTION_PROPERTY = "sparkonce.readerRetentionDuration"
DEFAULT_READER_RETENTION = "interval 7 days"
"""How long a registration holds back without an update, unless the table property says otherwise."""

ReaderStatus = Literal["active", "expired", "versions-gone"]


@dataclass(frozen=True)
class RegisteredReader:
    """One query reading the table, as registered in ``_delta_log/_sparkonce/readers/<query_id>.json``.

    Attributes:
        query_id: The query's id (its checkpoint's ``metadata``; stable across restarts).
        checkpoint_dir: The query's checkpoint location.
        source: ``delta`` (the streaming source) or ``cdf`` (the change data feed).
        table_version: The first table version a restart of the query may read (the ``reservoirVersion`` of its
            last planned batch's start offset).
        updated_at_ms: When the query last confirmed it (ms since the epoch).
        query_name: The query's name (a pipeline stage's ``<pipeline>.<stage>``), None when unnamed.
    """

    query_id: str
    checkpoint_dir: str
    source: str
    table_version: int
    updated_at_ms: int
    query_name: str | None = None

    def to_json(self) -> str:
        """The registration file's text."""
        return json.dumps(
            {
                "queryId": self.query_id,
                "checkpointDir": self.checkpoint_dir,
                "source": self.source,
                "queryName": self.query_name,
                "tableVersion": self.table_version,
                "updatedAtMs": self.updated_at_ms,
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str, *, path: str) -> RegisteredReader:
        """Parse a registration file.

        Raises:
            DeltaLogError: not a registration (the message names ``path``).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DeltaLogError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from err
        if not isinstance(data, dict):
            raise DeltaLogError(f"{path}: not a JSON object")
        query_id, checkpoint, source = data.get("queryId"), data.get("checkpointDir"), data.get("source")
        version, at, name = data.get("tableVersion"), data.get("updatedAtMs"), data.get("queryName")
        if not (isinstance(query_id, str) and isinstance(checkpoint, str) and isinstance(source, str)):
            raise DeltaLogError(f"{path}: needs queryId, checkpointDir and source (strings)")
        if type(version) is not int or version < 0 or type(at) is not int:
            raise DeltaLogError(f"{path}: needs tableVersion (an integer >= 0) and updatedAtMs (an integer)")
        return RegisteredReader(query_id, checkpoint, source, version, at, name if isinstance(name, str) else None)


@dataclass(frozen=True)
class HeldBack:
    """What one registered reader kept: the files that would have been deleted without it."""

    reader: RegisteredReader
    files: tuple[str, ...]
    """Log file names (log cleanup) or data file paths relative to the table root (VACUUM)."""


@dataclass(frozen=True)
class ReaderHold:
    """The registered readers of a table at one moment, split by the retention limit.

    Attributes:
        active: Readers updated within the limit, oldest table version first: they hold back.
        expired: Readers not updated within the limit: they no longer hold back.
        retention_ms: The limit (``sparkonce.readerRetentionDuration``).
        problems: Registration files that cannot be read (each naming its file); they hold nothing back.
    """

    active: tuple[RegisteredReader, ...] = ()
    expired: tuple[RegisteredReader, ...] = ()
    retention_ms: int = 0
    problems: tuple[str, ...] = ()

    @property
    def table_version(self) -> int | None:
        """The oldest table version an active reader still reads, None when no reader holds back."""
        return self.active[0].table_version if self.active else None


@dataclass(frozen=True)
class ReaderState:
    """A registered reader and what the table can still give it (``sparkonce readers``, ``doctor``).

    Attributes:
        reader: The registration.
        status: ``active``; ``expired`` (not updated within the retention limit: no longer held back for);
            ``versions-gone`` (a commit it needs was removed: its query cannot resume from its checkpoint).
        expires_at_ms: When it stops holding back unless its query confirms it again.
        missing_version: The first table version it needs whose Delta commit is gone (``versions-gone``).
    """

    reader: RegisteredReader
    status: ReaderStatus
    expires_at_ms: int
    missing_version: int | None = None


def reader_retention_ms(configuration: Mapping[str, str]) -> int:
    """The table's ``sparkonce.readerRetentionDuration`` in ms (7 days when unset).

    Raises:
        DeltaLogError: the property is not an interval (the message names it).
    """
    raw = property_value(configuration, RETENTION_PROPERTY)
    return parse_interval_ms(DEFAULT_READER_RETENTION if raw is None else raw, name=RETENTION_PROPERTY)


def _folder(location: TableLocation) -> str:
    return location.fs_path(READERS_DIR)


def _file(location: TableLocation, query_id: str) -> str:
    try:
        uuid.UUID(query_id)
    except ValueError as err:  # the name must never look like a Delta log file, nor leave the folder
        raise DeltaLogError(f"query id {query_id!r} is not a UUID; a reader registration is named by one") from err
    return f"{_folder(location)}/{query_id}.json"


def register_reader(path: str | os.PathLike[str] | TableLocation, reader: RegisteredReader) -> None:
    """Write (or overwrite) the registration of ``reader`` in the table at ``path``: one small PUT (on a local disk
    a write and a rename, so a reader of the folder never sees half a file). Runs on the driver.

    Raises:
        DeltaLogError: the query id is not a UUID.
        StorageError: the file cannot be written.
    """
    location = table_location(path)
    _file(location, reader.query_id)  # checks the query id
    location.put(f"{READERS_DIR}/{reader.query_id}.json", reader.to_json().encode("utf-8"))


def forget_reader(path: str | os.PathLike[str] | TableLocation, query_id: str) -> bool:
    """Delete the registration of ``query_id`` from the table at ``path``; False when there was none. The query,
    should it run again, registers anew at its next start.

    Raises:
        DeltaLogError: the query id is not a UUID.
        OSError: the file cannot be deleted.
    """
    import pyarrow.fs as pafs

    location = table_location(path)
    target = _file(location, query_id)
    fs = location.filesystem()
    if fs.get_file_info(target).type != pafs.FileType.File:
        return False
    fs.delete_file(target)
    log.info("forgot the reader registration of query %s on %s", query_id, location)
    return True


def read_readers(path: str | os.PathLike[str] | TableLocation) -> tuple[list[RegisteredReader], list[str]]:
    """The registered readers of the table at ``path`` (by table version, then query id), and the problems of
    registration files that cannot be read (each naming its file). No folder: no reader.

    Raises:
        OSError: the folder cannot be listed.
    """
    import pyarrow.fs as pafs

    location = table_location(path)
    fs = location.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(_folder(location), allow_not_found=True))
    found: list[RegisteredReader] = []
    problems: list[str] = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json") or info.base_name[0] in "._":
            continue
        where = info.path if location.is_local else f"{location}/{READERS_DIR}/{info.base_name}"
        try:
            with fs.open_input_stream(info.path) as stream:
                text = stream.read().decode("utf-8")
            found.append(RegisteredReader.from_json(text, path=where))
        except DeltaLogError as err:
            problems.append(str(err))
        except (OSError, UnicodeDecodeError) as err:
            if isinstance(err, FileNotFoundError):
                continue  # forgotten meanwhile
            problems.append(f"{where}: cannot read: {err}")
    found.sort(key=lambda r: (r.table_version, r.query_id))
    return found, problems


def hold_back(readers: Iterable[RegisteredReader], *, now_ms: int, retention_ms: int) -> ReaderHold:
    """Split ``readers`` into the active ones (updated within ``retention_ms`` before ``now_ms``, on the retention
    clock of :mod:`sparkonce.delta.log.clock`), oldest table version first, and the expired ones."""
    active: list[RegisteredReader] = []
    expired: list[RegisteredReader] = []
    for reader in readers:
        (active if clock.clock_ms(reader.updated_at_ms) >= now_ms - retention_ms else expired).append(reader)
    active.sort(key=lambda r: (r.table_version, r.query_id))
    expired.sort(key=lambda r: (r.table_version, r.query_id))
    return ReaderHold(tuple(active), tuple(expired), retention_ms)


def reader_hold(
    path: str | os.PathLike[str] | TableLocation,
    configuration: Mapping[str, str],
    *,
    now_ms: int | None = None,
    operation: str,
) -> ReaderHold:
    """The registered readers of the table at ``path``, split by its ``sparkonce.readerRetentionDuration``; each
    expired one is logged as a WARNING naming ``operation`` (``log cleanup``, ``VACUUM``), which no longer keeps
    what it needs.

    Raises:
        DeltaLogError: the property is not an interval.
        OSError: the folder cannot be listed.
    """
    location = table_location(path)
    retention = reader_retention_ms(configuration)
    readers, problems = read_readers(location)
    now = clock.now_ms() if now_ms is None else now_ms
    hold = hold_back(readers, now_ms=now, retention_ms=retention)
    for reader in hold.expired:
        log.warning(
            "%s of %s: the reader query %s (checkpoint %s) was last active %s ago, longer than %s allows: it no "
            "longer holds back table versions from %s (it may not resume from its checkpoint)",
            operation,
            location,
            reader.query_id,
            reader.checkpoint_dir,
            _ago(now - clock.clock_ms(reader.updated_at_ms)),
            RETENTION_PROPERTY,
            reader.table_version,
        )
    for problem in problems:
        log.warning("%s of %s: unreadable reader registration (holds nothing back): %s", operation, location, problem)
    return ReaderHold(hold.active, hold.expired, retention, tuple(problems))


def held_log_files(
    hold: ReaderHold, names: Sequence[str], checkpoint_versions: Iterable[int]
) -> tuple[int | None, tuple[HeldBack, ...]]:
    """Of the log files ``names`` (expired by Delta's rule, ascending), the ones the active readers of ``hold``
    need: every file from the newest checkpoint at or before a reader's table version on.

    Returns:
        The highest table version that may still go (None: no reader holds back; -1: nothing may go), and per
        active reader the names it kept.
    """
    if not hold.active:
        return None, ()
    checkpoints = sorted(set(checkpoint_versions))
    held: list[HeldBack] = []
    limit: int | None = None
    for reader in hold.active:
        anchors = [c for c in checkpoints if c <= reader.table_version]
        first_needed = anchors[-1] if anchors else 0
        kept = tuple(n for n in names if int(n[:20]) >= first_needed)
        if kept:
            held.append(HeldBack(reader, kept))
        limit = first_needed - 1 if limit is None else min(limit, first_needed - 1)
    return limit, tuple(held)


def held_data_files(
    hold: ReaderHold, candidates: Iterable[str], removed_at: Mapping[str, int]
) -> tuple[frozenset[str], tuple[HeldBack, ...]]:
    """Of VACUUM's ``candidates`` (paths relative to the table root), the ones the active readers of ``hold`` need:
    every file removed at or after a reader's table version (``removed_at``: path -> the first table version at or
    after the oldest reader's that removes it; orphans the log never names are not there and not held).

    Returns:
        The held paths, and per active reader the paths it needs.
    """
    if not hold.active:
        return frozenset(), ()
    listed = sorted(candidates)
    held: list[HeldBack] = []
    union: set[str] = set()
    for reader in hold.active:
        kept = tuple(p for p in listed if removed_at.get(p, -1) >= reader.table_version)
        if kept:
            held.append(HeldBack(reader, kept))
            union.update(kept)
    return frozenset(union), tuple(held)


def reader_states(
    path: str | os.PathLike[str] | TableLocation,
    *,
    now_ms: int | None = None,
) -> tuple[list[ReaderState], list[str]]:
    """Every registered reader of the table at ``path`` with its status (see :class:`ReaderState`), and the
    problems of unreadable registration files. Runs in the CLI process or on the driver.

    Raises:
        TableNotFoundError: ``path`` is not a Delta table.
        DeltaLogError: its ``sparkonce.readerRetentionDuration`` is not an interval.
        OSError: the registrations cannot be listed.
    """
    from sparkonce.delta.log.delta_log import DeltaLog

    location = table_location(path)
    delta_log = DeltaLog(location)
    snapshot = delta_log.snapshot()
    retention = reader_retention_ms(snapshot.configuration)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    readers, problems = read_readers(location)
    commits = set(delta_log.commit_versions()) if readers else set()
    latest = snapshot.table_version
    states: list[ReaderState] = []
    for reader in readers:
        expires = reader.updated_at_ms + retention
        missing = next((v for v in range(reader.table_version, latest + 1) if v not in commits), None)
        status: ReaderStatus = "versions-gone" if missing is not None else "active" if expires >= now else "expired"
        states.append(ReaderState(reader, status, expires, missing))
    return states, problems


def _ago(ms: int) -> str:
    hours = ms / 3_600_000
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} hours"
