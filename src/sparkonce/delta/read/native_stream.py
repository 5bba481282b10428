"""Streaming reads of Delta tables through Spark's own Parquet scan: the native streaming source.

``spark.readStream.format("delta").load(path)`` in a classic session returns a streaming DataFrame whose source is
:class:`NativeDeltaSource`: Spark's (V1) streaming ``Source`` interface implemented in Python and handed to the
JVM as a py4j proxy, the way Spark's own file stream source and delta-spark's ``DeltaSource`` plug into the
micro-batch engine. Planning is the Python source's, unchanged (:class:`sparkonce.delta.read.stream.DeltaStreamReader`:
offsets shaped like Delta's, ``maxFilesPerTrigger``/``maxBytesPerTrigger``, ``startingVersion``/``startingTimestamp``,
``ignoreDeletes``/``skipChangeCommits``, the schema checks, ``availableNow``); only the reading differs: each
micro-batch is a streaming relation over exactly its files, read by Spark's vectorized Parquet reader (column
pruning, row-group pushdown, partition values from the log, data skipping on the batch's files), with no row
crossing into Python.

The offsets it writes to ``offsets/N`` are the Python source's JSON, byte for byte, so a checkpoint moves between
the two paths freely: a query restarted on the other path resumes where it stopped.

One source object can back several queries (two ``writeStream.start()`` on one DataFrame, or a query restarted on
the same DataFrame), so the planning state is kept per query run, keyed by the JVM thread that runs the query: py4j's
pinned-thread mode (PySpark's default) makes each callback run its JVM calls on that thread.

Stays on the Python data source (:func:`native_stream_frame` returns None): sessions without py4j (Spark Connect,
Spark Declarative Pipelines) or without pinned threads (``PYSPARK_PIN_THREAD=false``), a user-given schema, tables
on stores Spark cannot read here, and ``spark.sparkonce.nativeReads=false``. The change data feed
(``readChangeFeed``) streams through a subclass, :class:`sparkonce.delta.read.native_changes.NativeChangeSource`.
Deletion vectors are applied: a micro-batch's files are fixed, so are their deletion vectors, and an anti-join on
``_metadata.row_index`` drops the rows they delete (:meth:`sparkonce.delta.read.native.FileSetIndex.live_frame`).

Runs on the driver (the proxy's methods are JVM callbacks on the query's micro-batch thread); executors run
Spark's own Parquet reader.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from py4j.protocol import Py4JError
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxFiles

from sparkonce.delta.log.actions import Metadata, Protocol
from sparkonce.delta.log.delta_log import Snapshot
from sparkonce.delta.read.native import FileSetIndex, jvm_of, latest_snapshot, reads_natively
from sparkonce.delta.read.pacing import writer_catching_up
from sparkonce.delta.read.reader import check_protocol_readable
from sparkonce.delta.read.stream import DeltaSourceOffset, DeltaStreamReader, tracked_entry
from sparkonce.delta.table.options import METADATA_COLUMN_OPTION, StreamReadOptions
from sparkonce.errors import OptionError
from sparkonce.options import lookup

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_SOURCE = "org.apache.spark.sql.execution.streaming.Source"
_ADMISSION_CONTROL = "org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl"
_AVAILABLE_NOW = "org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow"

HOLD_POLL_S = 0.1
"""How long a held query's offset request sleeps before it says "no new data" (``maxCatchUpDelay``)."""


def native_stream_frame(spark: SparkSession, options: Mapping[str, str], *, format_name: str) -> DataFrame | None:
    """The streaming DataFrame of ``readStream.format(format_name).options(options).load()`` read through Spark's
    Parquet scan, or None when the Python data source reads it (see the module's documentation). Runs on the driver.

    Raises:
        OptionError: an option is malformed, or is for batch reads only.
        UnsupportedFeatureError: the table needs a reader feature sparkonce cannot honour.
        TableNotFoundError: there is no Delta table at the path.
    """
    from sparkonce.delta.read.changes import is_change_feed_read

    if is_change_feed_read(options):
        return None
    prepared = prepare_stream(spark, options)
    if prepared is None:
        return None
    parsed, snapshot = prepared
    return NativeDeltaSource(spark, parsed, snapshot, format_name=format_name, given=options).frame()


def prepare_stream(spark: SparkSession, options: Mapping[str, str]) -> tuple[StreamReadOptions, Snapshot] | None:
    """The parsed options and the snapshot (the stream's schema) of a native streaming read of ``options``, or None
    when the Python data source reads it (see the module's documentation). Runs on the driver.

    Raises:
        OptionError: an option is malformed, or is for batch reads only.
        UnsupportedFeatureError: the table needs a reader feature sparkonce cannot honour.
        TableNotFoundError: there is no Delta table at the path.
    """
    if not _pinned_threads(spark):
        return None
    metadata_column = lookup(options, METADATA_COLUMN_OPTION)
    if metadata_column is not None:
        raise OptionError(METADATA_COLUMN_OPTION, metadata_column, "is for batch reads")
    parsed = StreamReadOptions.parse(options)
    if not reads_natively(spark, parsed.location):
        return None
    snapshot = latest_snapshot(parsed.location)
    entry = tracked_entry(parsed, str(snapshot.metadata.get("id")))
    if entry is not None:  # schema tracking: read with the schema log's entry (Delta's readSnapshotDescriptor)
        metadata = cast(Metadata, entry.metadata_action(snapshot.metadata))  # the snapshot's, with the entry's schema
        protocol = cast(Protocol, entry.protocol) if entry.protocol else snapshot.protocol  # the log's JSON
        snapshot = replace(snapshot, metadata=metadata, protocol=protocol)
    fields = json.loads(str(snapshot.metadata.get("schemaString") or "{}")).get("fields") or []
    check_protocol_readable(snapshot.protocol, parsed.path, fields=fields)
    return parsed, snapshot


def native_source_of(source: Any) -> NativeDeltaSource | None:
    """The :class:`NativeDeltaSource` behind a JVM reference to a streaming source (a leaf of a query's plan), or
    None when it is another source. Runs on the driver."""
    try:
        if not str(source.toString()).startswith(NativeDeltaSource.NAME + "["):
            return None
        return _SOURCES.get(int(source.hashCode()))
    except Py4JError:
        return None


_SOURCES: weakref.WeakValueDictionary[int, NativeDeltaSource] = weakref.WeakValueDictionary()


def _pinned_threads(spark: SparkSession) -> bool:
    """True when py4j runs in pinned-thread mode: a JVM callback's own calls run on the calling JVM thread."""
    from py4j.clientserver import ClientServer

    return isinstance(spark.sparkContext._gateway, ClientServer)


class NativeDeltaSource:
    """Spark's streaming ``Source`` of one Delta table, as a py4j proxy (driver only: the JVM calls it from the
    query's micro-batch thread). Planning is delegated to one :class:`DeltaStreamReader` per query run; each
    micro-batch is a streaming relation over its files (:class:`sparkonce.delta.read.native.FileSetIndex`).

    Args:
        spark: The (classic) session.
        options: The parsed ``readStream`` options.
        snapshot: The table's snapshot when the DataFrame is made: the stream's schema.
        format_name: The format the query named (``delta`` or ``sparkonce.delta``), for the checkpoint's record.
        given: The options as the query gave them (the checkpoint's record keeps some of them).
    """

    NAME = "DeltaSource"

    class Java:
        implements = [_SOURCE, _ADMISSION_CONTROL, _AVAILABLE_NOW]

    def __init__(
        self,
        spark: SparkSession,
        options: StreamReadOptions,
        snapshot: Snapshot,
        *,
        format_name: str,
        given: Mapping[str, str],
    ) -> None:
        self.spark = spark
        self.given = dict(given)
        self.options = options
        self.snapshot = snapshot
        self.format_name = format_name
        self._j = jvm_of(spark)
        self._token = uuid.uuid4().int & 0x7FFFFFFF
        self.spark_schema = self._stream_schema(FileSetIndex(spark, options.location, snapshot, {}, "schema").frame())
        self._jschema = self._j.DataType.fromJson(self.spark_schema.json())
        self._offset = self._j.jvm.org.apache.spark.sql.execution.streaming.runtime.SerializedOffset
        self._limits = self._j.jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit
        self._readers: dict[str, DeltaStreamReader] = {}
        self._admitted: dict[str, float] = {}
        """Per query run: when its last batch was admitted (``time.monotonic()``), for ``maxCatchUpDelay``."""
        self._lock = threading.Lock()
        _SOURCES[self._token] = self

    def frame(self) -> DataFrame:
        """The streaming DataFrame whose source this is. Runs on the driver."""
        from pyspark.sql import DataFrame

        j = self._j
        streaming = j.jvm.org.apache.spark.sql.catalyst.streaming
        unnamed = getattr(getattr(streaming, "Unassigned$"), "MODULE$")
        attributes = j.jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttributes(self._jschema)
        relation = j.jvm.org.apache.spark.sql.execution.streaming.runtime.StreamingExecutionRelation(
            self, attributes, j.none, unnamed, j.session
        )
        frame = DataFrame(j.jvm.org.apache.spark.sql.classic.Dataset.ofRows(j.session, relation), self.spark)
        frame._sparkonce_native = True  # type: ignore[attr-defined]
        return frame

    # -- Spark's Source / SupportsAdmissionControl / SupportsTriggerAvailableNow (JVM callbacks) -------------------

    def schema(self) -> Any:  # driver (JVM callback)
        return self._jschema

    def initialOffset(self) -> Any:  # driver (JVM callback)
        return self._serialized(self._reader().initialOffset())

    def deserializeOffset(self, text: str) -> Any:  # driver (JVM callback)
        return self._offset(text)

    def getDefaultReadLimit(self) -> Any:  # driver (JVM callback)
        limit = self._reader().getDefaultReadLimit()
        if isinstance(limit, ReadMaxBytes):
            return self._limits.maxBytes(limit.max_bytes)
        if isinstance(limit, ReadMaxFiles):
            return self._limits.maxFiles(limit.max_files)
        return self._limits.allAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # driver (JVM callback)
        self._reader().prepareForTriggerAvailableNow()

    def getOffset(self) -> Any:  # driver (JVM callback): Spark asks latestOffset of an admission-controlled source
        return self._j.jvm.scala.Option.apply(self.latestOffset(None, self._limits.allAvailable()))

    def latestOffset(self, start: Any, limit: Any) -> Any:  # driver (JVM callback), each trigger
        """The end of the next micro-batch after ``start`` (None: no batch committed yet, so the stream's initial
        offset), within ``limit``; None (no new data) when the stream has nothing past its initial offset."""
        reader = self._reader()
        first = start is None
        begin = reader.initialOffset() if first else json.loads(str(start.json()))
        read_limit = _python_limit(limit)
        pacing = not first and self._may_hold(reader)
        # The table's latest version before the batch's end: a commit landing between the two cannot pass for a
        # batch the read limit cut (which would release the hold).
        latest = reader.reportLatestOffset() if pacing else None
        end = reader.latestOffset(begin, read_limit)
        if first and end == begin:
            return None
        if pacing and end != begin and self._holds(end, read_limit, latest):
            return start  # no new data yet: Spark asks again at the next trigger
        self._admitted[self._run()] = time.monotonic()
        return self._serialized(end)

    def _may_hold(self, reader: DeltaStreamReader) -> bool:
        """Whether the next batch may be held back at all: a ``maxCatchUpDelay``, not an availableNow query, and the
        table's writer in this process catching up (:mod:`sparkonce.delta.read.pacing`)."""
        delay_s = self.options.max_catch_up_delay_ms / 1000.0
        return delay_s > 0 and not reader.available_now and writer_catching_up(self.options.location)

    def _holds(self, end: dict[str, Any], limit: ReadLimit, latest: dict[str, Any] | None) -> bool:
        """Whether to hold the batch up to ``end`` back, when :meth:`_may_hold` (``latest``: the table's latest
        offset, read before ``end`` was).

        It holds when the stream planned a batch or found nothing new less than the delay ago (so no row waits longer
        for it) and the batch does not stop short of ``latest`` (a batch its read limit cut would not grow by
        waiting). A hold sleeps up to :data:`HOLD_POLL_S` first, so a held query asks a few times a second, not at
        every ``pollingDelay``.
        """
        delay_s = self.options.max_catch_up_delay_ms / 1000.0
        now = time.monotonic()
        admitted = self._admitted.setdefault(self._run(), now)
        if now - admitted >= delay_s:
            return False
        if (
            not isinstance(limit, ReadAllAvailable)
            and latest is not None
            and DeltaSourceOffset.from_json(end).key < DeltaSourceOffset.from_json(latest).key
        ):
            return False  # the read limit already fills this batch: waiting would not make it larger
        time.sleep(min(HOLD_POLL_S, delay_s - (now - admitted)))
        return True

    def reportLatestOffset(self) -> Any:  # driver (JVM callback), for the query's progress
        latest = self._reader().reportLatestOffset()
        return None if latest is None else self._serialized(latest)

    def getBatch(self, start: Any, end: Any) -> Any:  # driver (JVM callback)
        """The micro-batch between ``start`` (an empty Option for the first batch) and ``end``: a streaming relation
        over its files, read by Spark's Parquet scan (:meth:`_batch_frame`)."""
        reader = self._reader()
        begin = reader.initialOffset() if start.isEmpty() else json.loads(str(start.get().json()))
        finish = json.loads(str(end.json()))
        files = reader.batch_files(begin, finish)
        label = f"micro-batch ending at table_version {finish.get('reservoirVersion')} index {finish.get('index')}"
        return self._batch_frame(files, label)._jdf

    def _batch_frame(self, files: list[Any], label: str) -> DataFrame:
        """A micro-batch's rows: a streaming relation over its data files, their deletion vectors applied
        (:meth:`sparkonce.delta.read.native.FileSetIndex.live_frame`)."""
        adds = {}
        for f in files:
            if f.action is None:
                raise ValueError(f"{f.path}: a stream's data file without its add action")
            adds[str(f.action["path"])] = f.action
        index = FileSetIndex(self.spark, self.options.location, self.snapshot, adds, label)
        return index.live_frame(stream=self)

    def commit(self, end: Any) -> None:  # driver (JVM callback), after Spark's checkpoint commit
        self._reader().commit(json.loads(str(end.json())))

    def stop(self) -> None:  # driver (JVM callback), when the query stops
        with self._lock:
            reader = self._readers.pop(self._run(), None)
            self._admitted.pop(self._run(), None)
        if reader is not None:
            reader.stop()

    def toString(self) -> str:  # driver (JVM callback): the source's description in the query's progress
        return f"{self.NAME}[{self.options.location}]"

    def hashCode(self) -> int:  # driver (JVM callback)
        return self._token

    def equals(self, other: Any) -> bool:  # driver (JVM callback)
        if other is self:
            return True
        try:  # our own proxy reaches Python as a JVM reference: ask it who it is
            return bool(int(other.hashCode()) == self._token and str(other.toString()) == self.toString())
        except Py4JError:
            return False

    # -- planning state per query run -----------------------------------------------------------------------------

    def _run(self) -> str:
        """The JVM thread running the calling query (one per query run)."""
        return str(self._j.jvm.java.lang.Thread.currentThread().getName())

    def _reader(self) -> DeltaStreamReader:
        run = self._run()
        with self._lock:
            reader = self._readers.get(run)
            if reader is None:
                reader = self._readers[run] = self._new_reader()
                log.info("native Delta stream from %s: planning for %s", self.options.location, run)
            return reader

    # -- what a subclass streams (the change data feed: sparkonce.delta.read.native_changes) ----------------------

    def _stream_schema(self, table: DataFrame) -> StructType:
        """The stream's schema, given a DataFrame with the table's columns."""
        return table.schema

    def _new_reader(self) -> DeltaStreamReader:
        """The planning state of one query run."""
        return DeltaStreamReader(self.options, self.spark_schema)

    def _serialized(self, offset: dict[str, Any]) -> Any:
        # json.dumps as the Python source's runner writes it: the checkpoint reads the same on both paths
        return self._offset(json.dumps(offset))


def _python_limit(limit: Any) -> ReadLimit:
    """The Python form of Spark's ``ReadLimit`` (a composite keeps its file and byte limits)."""
    kind = str(limit.getClass().getSimpleName())
    if kind == "ReadMaxFiles":
        return ReadMaxFiles(int(limit.maxFiles()))
    if kind == "ReadMaxBytes":
        return ReadMaxBytes(int(limit.maxBytes()))
    if kind == "CompositeReadLimit":
        parts = [_python_limit(part) for part in limit.getReadLimits()]
        files = [p for p in parts if isinstance(p, ReadMaxFiles)]
        if files:
            return files[0]
        sizes = [p for p in parts if isinstance(p, ReadMaxBytes)]
        return sizes[0] if sizes else ReadAllAvailable()
    return ReadAllAvailable()


__all__ = ["NativeDeltaSource", "native_source_of", "native_stream_frame", "prepare_stream"]
