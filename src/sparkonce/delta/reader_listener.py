"""Keeping a streaming query's reader registrations (:mod:`sparkonce.delta.txn.readers`) up to date. Runs on the driver.

A query's Delta sources cannot register themselves: the Python source plans in a worker process that knows neither
the query id nor the checkpoint. The driver knows both, so when ``writeStream...start()`` starts a query in a
session where sparkonce is registered (the shim of :mod:`sparkonce.delta.patches`), :func:`follow_query` registers
the query on each Delta table it reads, and a streaming query listener of the session moves the registration on.

The table version registered is where the query's restart may read from: the **start** of its last planned batch
(the end offset of the batch before it), not the end of its last committed one. A restart re-runs an uncommitted
last batch from that start, and for a committed one Spark asks a V1 source (the native Delta source) for the
batch again (``getBatch(start, end)``, which plans its files from the log) before it goes on. So:

* at the start, from the checkpoint: the ``reservoirVersion`` of ``offsets/<L-1>`` (``L`` the last planned batch);
  a query with no batch before its first: ``startingVersion``, else the latest table version (``startingTimestamp``:
  table version 0), or the snapshot table version ``offsets/0`` names when that is older;
* at each progress event (sent after the batch's checkpoint commit ``commits/N``): its sources' start offsets;
  batch 0's start (none) leaves the registration as it is;
* a registration is rewritten when that table version moves, or, while it does not (an idle query), at most every
  :data:`REFRESH_MS` (a quarter of the table's ``sparkonce.readerRetentionDuration`` when shorter), so a running
  query never expires;
* listener events come late, never early, so a registration can only be behind its query (keeping more), never
  ahead (keeping less).

A failed write is logged as a WARNING and never fails a batch: the registration stays at its last table version,
which keeps more, not less.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkonce.checkpoint.files import OffsetsFile
from sparkonce.checkpoint.reader import read_checkpoint
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.txn.readers import RegisteredReader, reader_retention_ms, register_reader
from sparkonce.errors import SparkonceError
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "REFRESH_MS",
    "ReadTable",
    "Registration",
    "add_query_listener",
    "follow_query",
    "remove_query_listener",
    "restart_offsets",
    "restart_version",
]

log = logging.getLogger(__name__)

REFRESH_MS = 600_000
"""How often an idle query's registration is confirmed (at most; less when the table's limit is shorter)."""


@dataclass(frozen=True)
class ReadTable:
    """A Delta table a query reads, as found in its plan: its location and its source options (lower-case keys)."""

    location: str
    options: Mapping[str, str] = field(default_factory=dict)
    store: TableLocation | None = None
    """The table with the query's storage options (an S3 table's endpoint and keys); None: :attr:`location` alone."""

    @property
    def source(self) -> str:
        """``cdf`` for the change data feed, else ``delta``."""
        return "cdf" if self.options.get("readchangefeed", "").strip().lower() == "true" else "delta"


class Registration:
    """One query's registration on one table, and when this process last wrote it. Driver only.

    Args:
        location: The table.
        table_id: Its ``metaData.id`` (the ``reservoirId`` of the query's offsets on it).
        reader: The registration as last written (or to write first).
        refresh_ms: How long an unchanged registration goes without being written again.
    """

    def __init__(self, location: TableLocation, table_id: str, reader: RegisteredReader, refresh_ms: int) -> None:
        self.location = location
        self.table_id = table_id
        self.reader = reader
        self.refresh_ms = refresh_ms
        self.written_ms: int | None = None

    def update(self, table_version: int | None, *, now_ms: int) -> None:
        """Write the registration when ``table_version`` moved it, or when it is due a refresh."""
        moved = table_version is not None and table_version != self.reader.table_version
        if not moved and self.written_ms is not None and now_ms - self.written_ms < self.refresh_ms:
            return
        version = self.reader.table_version if table_version is None else table_version
        reader = RegisteredReader(
            self.reader.query_id,
            self.reader.checkpoint_dir,
            self.reader.source,
            version,
            now_ms,
            self.reader.query_name,
        )
        try:
            register_reader(self.location, reader)
        except Exception as err:  # best effort: the batch stands, the registration keeps its older version
            log.warning(
                "could not register the reader query %s on %s at table_version %s: %s",
                reader.query_id,
                self.location,
                version,
                err,
            )
            return
        self.reader = reader
        self.written_ms = now_ms


_FOLLOWED: dict[str, list[Registration]] = {}
"""Query id -> its registrations, while the query runs in this process."""
_LOCK = threading.Lock()
_LISTENING: set[int] = set()
"""The JVM sessions (by hash code) whose query manager has the listener."""


def follow_query(spark: SparkSession, query: StreamingQuery, checkpoint_dir: str, tables: Iterable[ReadTable]) -> None:
    """Register ``query`` on every Delta table of ``tables`` and keep the registrations up to date while it runs.

    Never raises for a table or checkpoint it cannot read: the query runs unguarded there, and a WARNING says so.
    """
    query_id = str(query.id)
    name = query.name
    registrations: list[Registration] = []
    restart = restart_offsets(checkpoint_dir)
    now = int(time.time() * 1000)
    by_location: dict[str, list[ReadTable]] = {}
    for table in tables:
        by_location.setdefault(table.location, []).append(table)
    for uri, reads in by_location.items():
        try:
            location = next((r.store for r in reads if r.store is not None), None) or table_location(uri)
            snapshot = existing_table(location).snapshot
            table_id = str(snapshot.metadata.get("id"))
            version = restart_version(restart, table_id, reads, snapshot.table_version)
            refresh = min(REFRESH_MS, reader_retention_ms(snapshot.configuration) // 4)
        except (OSError, SparkonceError, ValueError, TypeError) as err:
            log.warning(
                "the query %s reading %s is not registered as its reader (log cleanup and VACUUM do not know it "
                "reads the table): %s",
                query_id,
                uri,
                err,
            )
            continue
        source = "cdf" if any(r.source == "cdf" for r in reads) else "delta"
        reader = RegisteredReader(query_id, checkpoint_dir, source, version, now, name)
        registration = Registration(location, table_id, reader, refresh)
        registration.update(None, now_ms=now)
        registrations.append(registration)
        log.info("registered the query %s as a reader of %s from table_version %s", query_id, location, version)
    if not registrations:
        return
    with _LOCK:
        _FOLLOWED[query_id] = registrations
        key = int(spark._jsparkSession.hashCode())
        if key in _LISTENING:
            return
        _LISTENING.add(key)
    add_query_listener(spark, _ReaderListener())


def add_query_listener(spark: SparkSession, listener: Any) -> Any:
    """Add ``listener``, a py4j implementation of Spark's ``PythonStreamingQueryListener`` (Java events, read field by
    field), to the session's streaming query manager, as PySpark's ``spark.streams.addListener`` adds a listener
    (through Spark's Python listener wrapper). Returns the wrapper, to give to the manager's ``removeListener``."""
    from sparkonce.delta.read.native import jvm_of

    j = jvm_of(spark)  # the py4j callback server runs from here on
    wrapper = j.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(listener)
    j.session.streams().addListener(wrapper)
    return wrapper


def remove_query_listener(spark: SparkSession, wrapper: Any) -> None:
    """Remove a listener :func:`add_query_listener` added (``wrapper``: what it returned). A session that stopped
    took its listeners with it: nothing to remove then."""
    from py4j.protocol import Py4JError

    try:
        spark._jsparkSession.streams().removeListener(wrapper)
    except Py4JError as err:
        log.debug("streaming query listener not removed (the session stopped?): %s", err)


def _first_version(read: ReadTable, latest: int) -> int:
    """The first table version a query that has planned no batch may read."""
    starting = read.options.get("startingversion")
    if starting is not None and starting.strip().isdigit():
        return int(starting)
    if read.options.get("startingtimestamp") is not None:
        return 0  # resolved against commit timestamps by its first batch: keep everything until then
    return latest


def restart_offsets(checkpoint_dir: str) -> tuple[bool, list[dict[str, Any]]]:
    """Where a restart of the query reads from: (True, the Delta offsets of ``offsets/<L-1>``) for a last planned
    batch ``L`` >= 1; (False, the Delta offsets of ``offsets/0``, maybe none) for a query at its first batch."""
    try:
        state = read_checkpoint(checkpoint_dir, read_sources=False, newest_batches=2)
    except SparkonceError:
        return False, []
    last = state.last_planned
    if last is None:
        return False, []
    if last == 0:
        return False, _delta_offsets(state.offsets.get(0))
    return True, _delta_offsets(state.offsets.get(last - 1))


def _delta_offsets(offsets: OffsetsFile | None) -> list[dict[str, Any]]:
    if offsets is None:
        return []
    found = [offsets.source_offset(source) for source in offsets.sources]
    return [o for o in found if isinstance(o, dict) and type(o.get("reservoirVersion")) is int]


def restart_version(
    restart: tuple[bool, list[dict[str, Any]]], table_id: str, reads: list[ReadTable], latest: int
) -> int:
    """The table version to register for a query reading ``table_id`` (see the module's rules)."""
    resolved, offsets = restart
    mine = [o for o in offsets if o.get("reservoirId") == table_id]
    if resolved and mine:
        return min(int(o["reservoirVersion"]) for o in mine)
    first = min(_first_version(r, latest) for r in reads)
    for end in mine:  # batch 0's end: the snapshot it reads is of its table version, or of the one before
        snapshot = int(end["reservoirVersion"]) - (0 if end.get("isStartingVersion") else 1)
        first = min(first, max(snapshot, 0))
    return first


class _ReaderListener:
    """Moves the registrations of the queries :func:`follow_query` follows. Driver (Spark's listener bus thread,
    through py4j).

    It implements Spark's ``PythonStreamingQueryListener`` itself and reads the two or three fields it needs from
    each Java event. PySpark's ``StreamingQueryListener`` would first convert the whole event (durations, metrics,
    every source and the sink) call by call: ~50 ms of driver CPU a batch, against ~0.3 ms.
    """

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = None
        try:
            progress = event.progress()
            starts = [_json(source.startOffset()) for source in progress.sources()]
            _moved(str(progress.id().toString()), [e for e in starts if isinstance(e, dict)])
        except Exception as err:  # a listener must never fail the query's events; the registration stays behind
            log.warning("reader registration of query %s not updated: %s", _query_id(progress), err)

    def onQueryIdle(self, event: Any) -> None:
        try:
            _moved(str(event.id().toString()), [])
        except Exception as err:  # as above
            log.warning("reader registration of query %s not refreshed: %s", _query_id(event), err)

    def onQueryTerminated(self, event: Any) -> None:
        query_id = _query_id(event)
        with _LOCK:
            registrations = _FOLLOWED.pop(query_id, [])
        for registration in registrations:  # the registration stays (the query may restart) until it expires
            log.info(
                "the query %s stopped; its registration as a reader of %s stays at table_version %s",
                query_id,
                registration.location,
                registration.reader.table_version,
            )


def _query_id(event: Any) -> str:
    """The query id of a Java progress or event, for a warning (``?`` when even that cannot be read)."""
    try:
        return str(event.id().toString())
    except Exception:
        return "?"


def _json(text: Any) -> Any:
    try:
        return json.loads(str(text))
    except (TypeError, json.JSONDecodeError):
        return None


def _moved(query_id: str, starts: list[dict[str, Any]]) -> None:
    """Update ``query_id``'s registrations from a progress event's start offsets (none: an idle query, or batch 0)."""
    with _LOCK:
        registrations = list(_FOLLOWED.get(query_id, ()))
    now = int(time.time() * 1000)
    for registration in registrations:
        versions = [
            int(e["reservoirVersion"])
            for e in starts
            if e.get("reservoirId") == registration.table_id and type(e.get("reservoirVersion")) is int
        ]
        versions = [v for v in versions if v >= 0]  # an unresolved start names no table version
        registration.update(min(versions) if versions else None, now_ms=now)
