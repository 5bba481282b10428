"""Let code written for the Delta JVM connector run unchanged on the Python data source.

Spark refuses two things for Python data sources before any sparkonce code runs:

* ``DataFrameWriter.partitionBy(...)``: Spark compares it with the (empty) partitioning of the Python table and
  fails with "The provided partitioning or clustering columns do not match the existing table's"; for
  ``DataStreamWriter.partitionBy(...)`` it silently drops the columns;
* save modes ``error``/``errorifexists`` (DataFrameWriter's default) and ``ignore``: "cannot be written in the
  ErrorIfExists mode".

:func:`install` wraps the classic (py4j) ``DataFrameWriter`` and ``DataStreamWriter`` so that, for sparkonce's
Delta format names only, the partition columns and the save mode travel as options (``__sparkonce_partition_by``,
``sparkonce.saveMode``) and the sink applies them exactly as Delta does, and ``start`` refuses a checkpoint location
that is not on a file system the driver sees with sparkonce's ``StorageError`` (Spark would fail on it with "No
FileSystem for scheme"). Every other format is untouched.

They also make the writer's session the JVM's active session of the calling thread before ``save``/``start``:
Spark looks Python data sources up for a write in the thread's active session, so a write started from any thread
but the one that created the session failed with ``DATA_SOURCE_NOT_FOUND`` (a pipeline run in a worker thread, a
service starting queries per request).
The explicit options ``partitionBy`` and ``sparkonce.saveMode`` work without the shim (e.g. on Spark Connect).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sparkonce.delta.table.catalog import serves_catalog
from sparkonce.delta.table.options import (
    CHECKPOINT_PART_SIZE_CONF,
    CHECKPOINT_PART_SIZE_OPTION,
    COMPAT_PARTITION_OPTION,
    PARTITION_OVERWRITE_MODE_OPTION,
    REPLACE_WHERE_OPTION,
    SAVE_MODE_OPTION,
    SESSION_CONF_OPTION,
    TABLE_DEFAULTS_OPTION,
)

if TYPE_CHECKING:
    from sparkonce.checkpoint.tables import RecordedTable
    from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

_FORMATS: set[str] = set()
_INSTALLED = False


def install(format_names: Iterable[str]) -> None:
    """Route ``partitionBy`` and save modes of the given format names through options (idempotent)."""
    global _INSTALLED
    _FORMATS.update(name.lower() for name in format_names)
    if _INSTALLED:
        return
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    for cls in (DataFrameWriter, DataStreamWriter):
        _record(cls, "format", lambda self, source: setattr(self, "_sparkonce_format", str(source).lower()))
        _record(cls, "partitionBy", lambda self, *cols: setattr(self, "_sparkonce_partition_by", _flatten(cols)))
    _record(DataFrameWriter, "mode", _remember_mode)
    for cls in (DataFrameWriter, DataStreamWriter):
        _record(cls, "option", _remember_option)
        _record(cls, "options", _remember_options)
    _wrap_save(DataFrameWriter)
    _wrap_start(DataStreamWriter)
    _wrap_load()
    _wrap_table_names()
    _INSTALLED = True


def _remember_mode(writer: Any, mode: str | None) -> None:
    if mode is not None:
        writer._sparkonce_mode = str(mode).lower()


def _remember_option(writer: Any, key: str, value: Any) -> None:
    _writer_options(writer)[str(key)] = _option_text(value)
    if str(key).lower() == "checkpointlocation":
        writer._sparkonce_checkpoint = str(value)
    elif str(key).lower() == "path":
        writer._sparkonce_path = str(value)


def _remember_options(writer: Any, **options: Any) -> None:
    for key, value in options.items():
        _remember_option(writer, key, value)


def _writer_options(writer: Any) -> dict[str, str]:
    """Every option given to ``writer`` (a selective overwrite plans from them on the driver)."""
    found: dict[str, str] | None = getattr(writer, "_sparkonce_options", None)
    if found is None:
        found = writer._sparkonce_options = {}
    return found


def _flatten(cols: tuple[Any, ...]) -> list[str]:
    if len(cols) == 1 and isinstance(cols[0], list | tuple):
        return [str(c) for c in cols[0]]
    return [str(c) for c in cols]


def _record(cls: type, method: str, remember: Any) -> None:
    original = getattr(cls, method)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        remember(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    setattr(cls, method, wrapper)


def _wrap_save(cls: type) -> None:
    original = cls.save  # type: ignore[attr-defined]

    @functools.wraps(original)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> Any:
        if mode is not None:
            self.mode(mode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        if getattr(self, "_sparkonce_format", None) in _FORMATS:
            _activate(self._spark)
            if options:
                self.options(**options)
            if _overwrite_selectively(self, path):
                return None
            _adapt_batch_writer(self)
        return original(self, path, **options)

    cls.save = save  # type: ignore[attr-defined]


def _activate(spark: Any) -> None:
    """Make ``spark`` the JVM's active session of the calling thread (where Spark looks up Python data sources)."""
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is not None and jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def _pass_session_defaults(writer: Any) -> None:
    """Hand the session's settings a Delta write reads (:func:`_session_options`) to the data source (which cannot
    read the session's configuration)."""
    for key, value in _session_options(writer._spark).items():
        writer._jwrite = writer._jwrite.option(key, value)


def _session_options(spark: Any) -> dict[str, str]:
    """The session's ``spark.databricks.delta.properties.defaults.*`` (the properties of a table the write
    creates), ``spark.databricks.delta.checkpoint.partSize`` (the most actions per log checkpoint file) and its auto
    compaction / optimized write confs, as the write options that carry them."""
    from sparkonce.delta.ops.auto_compact import SESSION_CONFS
    from sparkonce.delta.table.properties import SESSION_DEFAULTS_PREFIX

    conf = spark.conf.getAll
    found: dict[str, str] = {}
    defaults = {k: v for k, v in conf.items() if k.startswith(SESSION_DEFAULTS_PREFIX)}
    if defaults:
        found[TABLE_DEFAULTS_OPTION] = json.dumps(defaults)
    if conf.get(CHECKPOINT_PART_SIZE_CONF):  # Delta's limit of actions per log checkpoint file
        found[CHECKPOINT_PART_SIZE_OPTION] = conf[CHECKPOINT_PART_SIZE_CONF]
    compaction = {k: v for k, v in conf.items() if k in SESSION_CONFS}
    if compaction:
        found[SESSION_CONF_OPTION] = json.dumps(compaction)
    return found


def _overwrite_selectively(writer: Any, path: str | None) -> bool:
    """An overwrite with ``replaceWhere`` or dynamic partition overwrite, run on this driver
    (:mod:`sparkonce.delta.overwrite`); False for every other write, which goes to the data source."""
    from sparkonce.delta.overwrite import overwrite_selectively, session_settings, wants_selective_overwrite

    if getattr(writer, "_sparkonce_mode", "errorifexists") != "overwrite":
        return False
    spark = writer._spark
    options = dict(_writer_options(writer))
    settings = session_settings(spark)
    if not wants_selective_overwrite(options, settings):
        return False
    if path is not None:
        options["path"] = path
    columns = getattr(writer, "_sparkonce_partition_by", None)
    if columns:
        options[COMPAT_PARTITION_OPTION] = json.dumps(columns)
    options.update(_session_options(spark))
    overwrite_selectively(spark, writer._df, options, settings)
    return True


def _pass_checkpoint_query_id(writer: Any, checkpoint: str) -> None:
    """For a checkpoint on a Hadoop file system (``hdfs://``, ``s3a://``, ...): hand the sink its query id, which the
    driver reads (or writes first, as Spark would) through the session's Hadoop file system; the sink's commit
    runs in a Python worker that cannot. A local checkpoint is only checked: the sink reads it itself.

    Raises:
        StorageError: the location is malformed, or Hadoop has no file system for its scheme.
        CheckpointError: its ``metadata`` cannot be read or written.
    """
    from sparkonce.checkpoint.fs import is_local_checkpoint

    if is_local_checkpoint(checkpoint):
        from sparkonce.storage import checkpoint_path

        checkpoint_path(checkpoint)  # a malformed file: URI fails here, before Spark starts the query
        return
    from sparkonce.checkpoint.query import claim_query_id
    from sparkonce.delta.table.options import CHECKPOINT_QUERY_ID_OPTION

    query_id = claim_query_id(checkpoint, spark=writer._spark)
    writer._jwrite = writer._jwrite.option(CHECKPOINT_QUERY_ID_OPTION, query_id)


def _record_query_tables(writer: Any, checkpoint: str, sink: str | None) -> list[tuple[RecordedTable, TableLocation]]:
    """Record in the checkpoint the Delta table this query writes (``sink``, when it is sparkonce's Delta sink) and
    the tables and topics its sparkonce sources read (:mod:`sparkonce.checkpoint.tables`), so ``doctor`` finds
    them without ``--table``. Returns the records of the Delta tables it reads (the retention guard registers the
    query on them once it runs: :mod:`sparkonce.delta.reader_listener`).

    The sources come from the query's analyzed plan (its ``StreamingRelationV2`` leaves of Python data sources named
    ``sparkonce.*`` or one of the Delta names sparkonce registered, and the native Delta source's
    ``StreamingExecutionRelation`` leaves). That plan is Spark's internal API: should its
    shape ever change, the sources are not recorded and a WARNING says so (the query starts as before; ``doctor``
    then needs ``--table``), rather than failing every streaming query started in the session.

    Raises:
        CheckpointError: a record cannot be written to the checkpoint.
        StorageError: the sink path or the checkpoint location is malformed.
    """
    from py4j.protocol import Py4JError

    from sparkonce.checkpoint.tables import RECORDED_OPTIONS, RecordedTable, record_tables
    from sparkonce.delta.read.native_stream import native_source_of
    from sparkonce.storage import storage_options_from, table_location

    tables = [RecordedTable("sink", "delta", table_location(sink).uri)] if sink is not None else []
    stores: dict[str, TableLocation] = {}
    """A source table's URI -> its location with the query's storage options (never recorded: credentials)."""
    try:
        leaves = writer._df._jdf.queryExecution().analyzed().collectLeaves().iterator()
        while leaves.hasNext():
            leaf = leaves.next()
            kind = leaf.getClass().getSimpleName()
            if kind == "StreamingExecutionRelation":  # the native Delta source (sparkonce.delta.read.native_stream)
                native = native_source_of(leaf.source())
                if native is not None:
                    kept = {k: v for k, v in native.given.items() if k.lower() in RECORDED_OPTIONS}
                    tables.append(RecordedTable("source", native.format_name, native.options.location.uri, kept))
                    stores[native.options.location.uri] = native.options.location
                continue
            if kind != "StreamingRelationV2" or not leaf.source().isDefined():
                continue
            name = str(leaf.sourceName()).lower()
            python = leaf.source().get().getClass().getSimpleName() == "PythonDataSourceV2"
            if not python or not (name in _FORMATS or name.startswith("sparkonce.")):
                continue
            options = {str(k): str(v) for k, v in dict(leaf.extraOptions().asCaseSensitiveMap()).items()}
            lowered = {k.lower(): v for k, v in options.items()}
            location = lowered.get("path") or lowered.get("kafka.bootstrap.servers")
            if location is None:
                continue
            if "path" in lowered:
                store = table_location(location, storage_options=storage_options_from(options))
                location = store.uri
                stores[location] = store
            kept = {k: v for k, v in options.items() if k.lower() in RECORDED_OPTIONS}
            tables.append(RecordedTable("source", name, location, kept))
    except Py4JError as err:
        log.warning(
            "checkpoint %s: the query's sources were not recorded (Spark's plan could not be read: %s); "
            "sparkonce doctor needs --table for them",
            checkpoint,
            str(err).splitlines()[0],
        )
    if tables:
        record_tables(checkpoint, tables, spark=writer._spark)
    return [
        (t, stores.get(t.location) or table_location(t.location)) for t in tables if t.role == "source" and t.is_delta
    ]


_STREAMING_LEAVES = ("StreamingRelation", "StreamingRelationV2", "StreamingExecutionRelation")


def _start_schema_tracking(writer: Any, checkpoint: str | None) -> None:
    """Delta's checks of a query's Delta sources with a ``schemaTrackingLocation``, before the query starts
    (:func:`sparkonce.delta.read.stream.start_schema_tracking`): the query's plan gives each source's options,
    schema and position (its ``sources/<i>`` folder); the session gives the confs that unblock a schema change.

    Raises:
        OptionError: a source's ``schemaTrackingLocation`` is not under the checkpoint location, or the query has none.
        SchemaTrackingError: see :func:`sparkonce.delta.read.stream.start_schema_tracking`.
    """
    from py4j.protocol import Py4JError
    from pyspark.sql.types import StructType

    from sparkonce.delta.read.native_stream import native_source_of
    from sparkonce.delta.read.stream import start_schema_tracking
    from sparkonce.delta.table.schema_log import (
        ALLOW_OUTSIDE_CHECKPOINT_CONF,
        SCHEMA_TRACKING_LOCATION_OPTION,
        UNBLOCK_CONFS,
        checkpoint_hash,
        source_metadata_path,
        tracking_root,
    )
    from sparkonce.delta.write.cdf import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
    from sparkonce.errors import OptionError

    feed = {CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN}
    sources: list[tuple[int, dict[str, str], StructType]] = []
    try:
        leaves = writer._df._jdf.queryExecution().analyzed().collectLeaves().iterator()
        index = 0
        while leaves.hasNext():
            leaf = leaves.next()
            kind = leaf.getClass().getSimpleName()
            if kind not in _STREAMING_LEAVES:
                continue
            position, index = index, index + 1
            if kind == "StreamingExecutionRelation":
                native = native_source_of(leaf.source())
                if native is not None and tracking_root(native.given) is not None:
                    fields = [f for f in native.spark_schema.fields if f.name not in feed]
                    sources.append((position, dict(native.given), StructType(fields)))
                continue
            if kind != "StreamingRelationV2" or not leaf.source().isDefined():
                continue
            name = str(leaf.sourceName()).lower()
            if name not in _FORMATS or leaf.source().get().getClass().getSimpleName() != "PythonDataSourceV2":
                continue
            options = {str(k): str(v) for k, v in dict(leaf.extraOptions().asCaseSensitiveMap()).items()}
            if tracking_root(options) is None:
                continue
            schema = StructType.fromJson(json.loads(str(leaf.schema().json())))
            sources.append((position, options, StructType([f for f in schema.fields if f.name not in feed])))
    except Py4JError as err:
        log.warning("the query's Delta sources were not checked for schema tracking (its plan: %s)", err)
        return
    if not sources:
        return
    if checkpoint is None:
        raise OptionError(
            SCHEMA_TRACKING_LOCATION_OPTION,
            tracking_root(sources[0][1]),
            "needs the query's checkpointLocation (the schema log must be under it)",
        )
    conf = writer._spark.conf
    for position, options, schema in sources:
        ckpt = checkpoint_hash(source_metadata_path(checkpoint, position))
        keys = [ALLOW_OUTSIDE_CHECKPOINT_CONF, *UNBLOCK_CONFS, *(f"{c}.ckpt_{ckpt}" for c in UNBLOCK_CONFS)]
        confs = {k: str(v) for k in keys if (v := conf.get(k, None)) is not None}
        start_schema_tracking(options, checkpoint=checkpoint, source_index=position, stream_schema=schema, confs=confs)


def _follow_readers(spark: Any, query: Any, checkpoint: str, read: list[Any]) -> None:
    """Register the started ``query`` as a reader of the Delta tables it reads (the retention guard)."""
    from sparkonce.delta.reader_listener import ReadTable, follow_query

    tables = [ReadTable(t.location, {k.lower(): v for k, v in t.options.items()}, store) for t, store in read]
    follow_query(spark, query, checkpoint, tables)


def _adapt_batch_writer(writer: Any) -> None:
    from pyspark.sql.classic.column import _to_seq

    _pass_session_defaults(writer)

    mode = getattr(writer, "_sparkonce_mode", "errorifexists")
    if mode in ("error", "errorifexists", "default", "ignore"):
        writer._jwrite = writer._jwrite.mode("append")
        writer._jwrite = writer._jwrite.option(SAVE_MODE_OPTION, "ignore" if mode == "ignore" else "error")
    columns = getattr(writer, "_sparkonce_partition_by", None)
    if columns:
        writer._jwrite = writer._jwrite.partitionBy(_to_seq(writer._spark._sc, []))
        writer._jwrite = writer._jwrite.option(COMPAT_PARTITION_OPTION, json.dumps(columns))
    _pass_partition_overwrite_mode(writer)


def _pass_partition_overwrite_mode(writer: Any) -> None:
    """The session's ``spark.sql.sources.partitionOverwriteMode`` as the write's ``partitionOverwriteMode`` when it
    gives none: Delta records ``isDynamicPartitionOverwrite`` on every write the session's dynamic mode covers
    (appends too), and the data source cannot read the session. (An overwrite in that mode never gets here: it is
    a selective overwrite, :func:`_overwrite_selectively`.)"""
    from sparkonce.delta.overwrite import PARTITION_OVERWRITE_MODE_CONF
    from sparkonce.options import lookup

    if lookup(_writer_options(writer), PARTITION_OVERWRITE_MODE_OPTION) is not None:
        return
    mode = writer._spark.conf.get(PARTITION_OVERWRITE_MODE_CONF, None)
    if mode is not None and str(mode).strip().lower() == "dynamic":
        writer._jwrite = writer._jwrite.option(PARTITION_OVERWRITE_MODE_OPTION, "dynamic")


_CONNECT_INSTALLED = False


def install_connect(format_names: Iterable[str]) -> None:
    """On Spark Connect, pass the session's ``spark.sql.sources.partitionOverwriteMode`` to sparkonce's Delta writes
    (idempotent). The data source on the server cannot read the session's settings: without this, an overwrite in the
    session's dynamic mode replaced the whole table (delta-spark, on the server, honours the mode). With the mode
    as the write's ``partitionOverwriteMode`` option, the data source refuses the overwrite naming the option, as
    every selective overwrite that reaches it without the classic shim (it needs the driver's session)."""
    global _CONNECT_INSTALLED
    _FORMATS.update(name.lower() for name in format_names)
    if _CONNECT_INSTALLED:
        return
    from pyspark.sql.connect.readwriter import DataFrameWriter

    original = DataFrameWriter.save

    @functools.wraps(original)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> Any:
        from sparkonce.delta.overwrite import PARTITION_OVERWRITE_MODE_CONF
        from sparkonce.options import lookup

        self.mode(mode).options(**options)
        if format is not None:
            self.format(format)
        write = self._write
        given = {str(k): str(v) for k, v in write.options.items()}
        if (
            str(write.source or "").lower() in _FORMATS
            and str(write.mode or "").lower() == "overwrite"
            and lookup(given, PARTITION_OVERWRITE_MODE_OPTION) is None
            and lookup(given, REPLACE_WHERE_OPTION) is None
            and str(self._spark.conf.get(PARTITION_OVERWRITE_MODE_CONF, "static")).strip().lower() == "dynamic"
        ):
            self.option(PARTITION_OVERWRITE_MODE_OPTION, "dynamic")
        return original(self, path, partitionBy=partitionBy)

    DataFrameWriter.save = save  # type: ignore[method-assign]
    _CONNECT_INSTALLED = True


def _wrap_start(cls: type) -> None:
    original = cls.start  # type: ignore[attr-defined]

    @functools.wraps(original)
    def start(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        outputMode: str | None = None,
        partitionBy: Any = None,
        queryName: str | None = None,
        **options: Any,
    ) -> Any:
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        checkpoint = options.get("checkpointLocation", getattr(self, "_sparkonce_checkpoint", None))
        ours = getattr(self, "_sparkonce_format", None) in _FORMATS
        if ours:
            _activate(self._spark)
            _pass_session_defaults(self)
            if checkpoint is not None:
                _pass_checkpoint_query_id(self, str(checkpoint))
        columns = getattr(self, "_sparkonce_partition_by", None)
        if columns and ours:
            self._jwrite = self._jwrite.option(COMPAT_PARTITION_OPTION, json.dumps(columns))
        read: list[Any] = []
        _start_schema_tracking(self, None if checkpoint is None else str(checkpoint))
        if checkpoint is not None:
            sink = path or options.get("path") or getattr(self, "_sparkonce_path", None)
            read = _record_query_tables(self, str(checkpoint), str(sink) if ours and sink else None)
        query = original(self, path, outputMode=outputMode, queryName=queryName, **options)
        if read:
            _follow_readers(self._spark, query, str(checkpoint), read)
        return query

    cls.start = start  # type: ignore[attr-defined]


# -- batch reads through Spark's own Parquet scan (:mod:`sparkonce.delta.read.native`) -----------------------------


def _wrap_load() -> None:
    """``spark.read.format("delta")...load(path)`` (and ``spark.readStream``'s) of sparkonce's Delta formats returns
    the native read's DataFrame when the native path can read the table, else the Python data source's."""
    from pyspark.sql.readwriter import DataFrameReader
    from pyspark.sql.streaming.readwriter import DataStreamReader

    _wrap_reader_load(DataFrameReader, _native_read)
    _wrap_reader_load(DataStreamReader, _native_stream)


def _wrap_reader_load(cls: type, native: Any) -> None:
    def remember_format(reader: Any, source: str) -> None:
        reader._sparkonce_format = str(source).lower()

    def remember_option(reader: Any, key: str, value: Any) -> None:
        _reader_options(reader)[str(key)] = _option_text(value)

    def remember_options(reader: Any, **options: Any) -> None:
        for key, value in options.items():
            remember_option(reader, key, value)

    def remember_schema(reader: Any, schema: Any) -> None:
        reader._sparkonce_schema = schema

    _record(cls, "format", remember_format)
    _record(cls, "option", remember_option)
    _record(cls, "options", remember_options)
    _record(cls, "schema", remember_schema)
    original = cls.load  # type: ignore[attr-defined]

    @functools.wraps(original)
    def load(self: Any, path: Any = None, format: str | None = None, schema: Any = None, **options: Any) -> Any:
        if format is not None:
            self.format(format)
        if schema is not None:
            self.schema(schema)
        self.options(**options)
        if (
            getattr(self, "_sparkonce_format", None) in _FORMATS
            and getattr(self, "_sparkonce_schema", None) is None
            and (path is None or isinstance(path, str))
        ):
            frame = native(self, path)
            if frame is not None:
                return frame
        return original(self, path)

    cls.load = load  # type: ignore[attr-defined]


def _reader_options(reader: Any) -> dict[str, str]:
    found: dict[str, str] | None = getattr(reader, "_sparkonce_options", None)
    if found is None:
        found = reader._sparkonce_options = {}
    return found


def _option_text(value: Any) -> str:
    """An option value as Spark passes it on (booleans lower-case, as ``DataFrameReader.option`` does)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _native_read(reader: Any, path: str | None) -> Any:
    """The native read of a load (None: the Python data source reads it)."""
    from sparkonce.delta.read.changes import is_change_feed_read
    from sparkonce.delta.read.native import native_frame, native_reads_enabled
    from sparkonce.delta.read.native_changes import native_change_frame
    from sparkonce.delta.table.options import ReadOptions

    spark = reader._spark
    if not native_reads_enabled(spark):
        return None
    options = _load_options(reader, path)
    if is_change_feed_read(options):
        return native_change_frame(spark, options)
    return native_frame(spark, ReadOptions.parse(options))


def _native_stream(reader: Any, path: str | None) -> Any:
    """The native streaming read of a ``readStream`` load (None: the Python data source reads it)."""
    from sparkonce.delta.read.changes import is_change_feed_read
    from sparkonce.delta.read.native import native_reads_enabled
    from sparkonce.delta.read.native_changes import native_change_stream_frame
    from sparkonce.delta.read.native_stream import native_stream_frame

    spark = reader._spark
    if not native_reads_enabled(spark):
        return None
    options = _load_options(reader, path)
    if is_change_feed_read(options):
        return native_change_stream_frame(spark, options, format_name=reader._sparkonce_format)
    return native_stream_frame(spark, options, format_name=reader._sparkonce_format)


def _load_options(reader: Any, path: str | None) -> dict[str, str]:
    """The options a ``load(path)`` of ``reader`` gives its source: the recorded ones, and ``path``."""
    options = dict(_reader_options(reader))
    if path is not None:
        options["path"] = path
    return options


# -- Delta tables by name (sparkonce's catalog, :mod:`sparkonce.delta.table.catalog`) ------------------------------


def _find(spark: Any, name: str) -> Any:
    """The catalog entry of ``name`` when sparkonce serves ``spark``'s Delta tables, else None."""
    if not serves_catalog(spark):
        return None
    from sparkonce.delta.table.catalog import find_table
    from sparkonce.sqltext.grammar import parse_name

    return find_table(spark, parse_name(name))


def _forget_stale(spark: Any, name: str) -> None:
    """A name sparkonce's catalog no longer holds leaves Spark's catalog too (:mod:`sparkonce.delta.spark_catalog`)."""
    if not serves_catalog(spark):
        return
    from sparkonce.delta.spark_catalog import forget_stale
    from sparkonce.delta.table.catalog import table_key
    from sparkonce.sqltext.grammar import parse_name

    key = table_key(spark, parse_name(name))
    if key is not None:
        forget_stale(spark, *key)


def _wrap_table_names() -> None:
    """``saveAsTable`` / ``toTable`` of sparkonce's Delta formats, and ``table`` reads of names in sparkonce's
    catalog, go to the table's location; every other name and format is Spark's."""
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.session import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    def read_table(original: Any) -> Any:
        @functools.wraps(original)
        def table(self: Any, tableName: str) -> Any:
            entry = _find(self._spark, tableName)
            if entry is None:
                _forget_stale(self._spark, tableName)
                return original(self, tableName)
            return self.format("sparkonce.delta").load(entry.location)

        return table

    DataFrameReader.table = read_table(DataFrameReader.table)  # type: ignore[method-assign]
    DataStreamReader.table = read_table(DataStreamReader.table)  # type: ignore[method-assign]
    session_table = SparkSession.table

    @functools.wraps(session_table)
    def spark_table(self: Any, tableName: str) -> Any:
        return self.read.table(tableName) if _find(self, tableName) is not None else session_table(self, tableName)

    SparkSession.table = spark_table  # type: ignore[method-assign]
    save_as_table = DataFrameWriter.saveAsTable

    @functools.wraps(save_as_table)
    def saveAsTable(
        self: Any,
        name: str,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        fmt = str(format).lower() if format is not None else getattr(self, "_sparkonce_format", None)
        if fmt not in _FORMATS or not serves_catalog(self._spark):
            return save_as_table(self, name, format, mode, partitionBy, **options)
        if mode is not None:
            self.mode(mode)
        effective = getattr(self, "_sparkonce_mode", "errorifexists")
        given_path = options.pop("path", None)
        path_option = getattr(self, "_sparkonce_path", None)
        entry, location, register = _table_target(self._spark, name, given_path or path_option)
        if entry is not None and effective in ("error", "errorifexists", "default"):
            from sparkonce.errors import SqlError

            raise SqlError(
                f"[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view {name} because it already exists "
                "(write with mode append or overwrite)."
            )
        if entry is not None and effective == "ignore":
            return None
        self.save(None if path_option else location, format=format, partitionBy=partitionBy, **options)
        register()
        return None

    DataFrameWriter.saveAsTable = saveAsTable  # type: ignore[method-assign]
    to_table = DataStreamWriter.toTable

    @functools.wraps(to_table)
    def toTable(
        self: Any,
        tableName: str,
        format: str | None = None,
        outputMode: str | None = None,
        partitionBy: Any = None,
        queryName: str | None = None,
        **options: Any,
    ) -> Any:
        fmt = str(format).lower() if format is not None else getattr(self, "_sparkonce_format", None)
        if fmt not in _FORMATS or not serves_catalog(self._spark):
            return to_table(self, tableName, format, outputMode, partitionBy, queryName, **options)
        path_option = getattr(self, "_sparkonce_path", None)
        _, location, register = _table_target(self._spark, tableName, options.pop("path", None) or path_option)
        query = self.start(
            None if path_option else location,
            format=format,
            outputMode=outputMode,
            partitionBy=partitionBy,
            queryName=queryName,
            **options,
        )
        register()
        return query

    DataStreamWriter.toTable = toTable  # type: ignore[method-assign]
    _wrap_catalog_api()
    _wrap_writer_v2()


# -- DataFrameWriterV2 (``df.writeTo(name)``) ------------------------------------------------------------------------

_V2_TERMINALS = ("create", "replace", "createOrReplace", "append", "overwrite", "overwritePartitions")


def _wrap_writer_v2() -> None:
    """``df.writeTo(name).using("delta")...create()`` and the other terminal calls of Spark's ``DataFrameWriterV2``
    run through sparkonce's table creation and writes when the provider is one of sparkonce's Delta formats, or when
    no provider is given and sparkonce's catalog holds the name (as delta-spark's catalog answers for its tables);
    every other table is Spark's."""
    from pyspark.sql.readwriter import DataFrameWriterV2

    init = DataFrameWriterV2.__init__

    @functools.wraps(init)
    def __init__(self: Any, df: Any, table: str) -> None:
        init(self, df, table)
        self._sparkonce_v2 = _V2Plan(table)

    DataFrameWriterV2.__init__ = __init__  # type: ignore[method-assign]
    _record(DataFrameWriterV2, "using", lambda w, provider: setattr(w._sparkonce_v2, "provider", str(provider).lower()))
    _record(
        DataFrameWriterV2,
        "option",
        lambda w, key, value: w._sparkonce_v2.options.update({str(key): _option_text(value)}),
    )
    _record(
        DataFrameWriterV2,
        "options",
        lambda w, **options: w._sparkonce_v2.options.update({str(k): _option_text(v) for k, v in options.items()}),
    )
    _record(DataFrameWriterV2, "tableProperty", lambda w, key, value: w._sparkonce_v2.properties.update({key: value}))
    _record(DataFrameWriterV2, "partitionedBy", lambda w, col, *cols: w._sparkonce_v2.partition((col, *cols)))
    _record(DataFrameWriterV2, "clusterBy", lambda w, col, *cols: w._sparkonce_v2.clustered.extend([col, *cols]))
    for name in _V2_TERMINALS:
        setattr(DataFrameWriterV2, name, _v2_terminal(name, getattr(DataFrameWriterV2, name)))


class _V2Plan:
    """What a ``DataFrameWriterV2`` was told, for sparkonce's terminal calls. Driver only."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.provider: str | None = None
        self.options: dict[str, str] = {}
        self.properties: dict[str, str] = {}
        self.partitioned: list[str] = []
        self.transforms: list[str] = []
        self.clustered: list[str] = []

    def partition(self, columns: tuple[Any, ...]) -> None:
        for column in columns:
            name = column if isinstance(column, str) else None
            if name is None:
                text = str(column)  # Column<'name'> for a plain column, Column<'days(ts)'> for a transform
                inner = text[len("Column<'") : -2] if text.startswith("Column<'") else text
                if inner.replace("_", "").replace("`", "").isalnum():
                    name = inner.strip("`")
                else:
                    self.transforms.append(inner)
                    continue
            self.partitioned.append(name)


def _v2_terminal(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def terminal(self: Any, *args: Any) -> Any:
        plan: _V2Plan | None = getattr(self, "_sparkonce_v2", None)
        if plan is None or not _v2_is_ours(self._spark, plan):
            return original(self, *args)
        _activate(self._spark)
        return _v2_write(self._spark, self._df, plan, name, *args)

    return terminal


def _v2_is_ours(spark: Any, plan: _V2Plan) -> bool:
    if not serves_catalog(spark):
        return False
    if plan.provider is not None:
        return plan.provider in _FORMATS
    return _find(spark, plan.table) is not None


def _v2_write(spark: Any, df: Any, plan: _V2Plan, terminal: str, *args: Any) -> None:
    """A ``DataFrameWriterV2`` terminal call on a Delta table of sparkonce's catalog (driver; executors write)."""
    from sparkonce.delta.ops.create import CreateMode, CreateRequest, create_table
    from sparkonce.delta.overwrite import condition_text
    from sparkonce.delta.spark_catalog import sync_table
    from sparkonce.errors import UnsupportedFeatureError, analysis_error
    from sparkonce.sqltext.grammar import parse_name

    if plan.transforms:
        raise UnsupportedFeatureError(
            f"writeTo({plan.table}).partitionedBy({', '.join(plan.transforms)}): Delta tables are partitioned by "
            "columns only (add a generated column for the transform and partition by it)"
        )
    parts = parse_name(plan.table)
    if terminal in ("append", "overwrite", "overwritePartitions"):
        if _find(spark, plan.table) is None:
            raise analysis_error("TABLE_OR_VIEW_NOT_FOUND", f"The table or view {plan.table} cannot be found.")
        writer = df.write.format("sparkonce.delta").options(**plan.options)
        if terminal == "append":
            writer.mode("append").saveAsTable(plan.table)
            return
        writer = writer.mode("overwrite")
        if terminal == "overwritePartitions":  # Delta's overwriteDynamicPartitions
            writer.option(PARTITION_OVERWRITE_MODE_OPTION, "dynamic").saveAsTable(plan.table)
            return
        predicate = condition_text(df, args[0])
        if any(k.lower() == REPLACE_WHERE_OPTION.lower() for k in plan.options):
            raise analysis_error(
                "DELTA_REPLACE_WHERE_IN_OVERWRITE",
                "You can't use replaceWhere in conjunction with an overwrite by filter",
            )
        if predicate.strip().lower() != "true":  # Spark: overwrite(lit(True)) truncates
            writer = writer.option(REPLACE_WHERE_OPTION, predicate)
        writer.saveAsTable(plan.table)
        return
    modes: dict[str, CreateMode] = {"create": "create", "replace": "replace", "createOrReplace": "createOrReplace"}
    create_table(
        spark,
        CreateRequest(
            mode=modes[terminal],
            name=tuple(parts),
            location=plan.options.get("path"),
            query=df,
            partitioned_by=tuple(plan.partitioned),
            properties=dict(plan.properties),
            shown=plan.table,
            cluster_by=tuple(str(c) for c in plan.clustered),
        ),
    )
    entry = _find(spark, plan.table)
    if entry is not None:
        sync_table(spark, entry)


def _wrap_catalog_api() -> None:
    """``spark.catalog``'s table calls see sparkonce's tables (mirrored into Spark's catalog first,
    :mod:`sparkonce.delta.spark_catalog`) and not the temporary views sparkonce's SQL makes for its reads."""
    from pyspark.sql.catalog import Catalog

    def synced(original: Any) -> Any:
        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if serves_catalog(self._sparkSession):
                from sparkonce.delta.spark_catalog import sync_all

                sync_all(self._sparkSession)
            return original(self, *args, **kwargs)

        return call

    for method in ("tableExists", "getTable", "listColumns", "refreshTable", "cacheTable", "isCached"):
        setattr(Catalog, method, synced(getattr(Catalog, method)))
    list_tables = synced(Catalog.listTables)

    @functools.wraps(list_tables)
    def listTables(self: Any, *args: Any, **kwargs: Any) -> Any:
        from sparkonce.delta.spark_catalog import HELPER_VIEW_PREFIX

        return [t for t in list_tables(self, *args, **kwargs) if not t.name.startswith(HELPER_VIEW_PREFIX)]

    Catalog.listTables = listTables  # type: ignore[method-assign]


def _table_target(spark: Any, name: str, path: str | None) -> tuple[Any, str, Any]:
    """(existing entry or None, the location to write, a function that registers a new name afterwards)."""
    from sparkonce.delta.table.catalog import DeltaCatalog, find_table, table_key
    from sparkonce.errors import SqlError
    from sparkonce.sqltext.grammar import parse_name

    parts = parse_name(name)
    entry = find_table(spark, parts)
    if entry is not None:
        if path is not None and path != entry.location:
            raise SqlError(f"table {name} is at {entry.location}, not at the path {path} given")
        return entry, entry.location, lambda: None
    key = table_key(spark, parts)
    if key is None:
        raise SqlError(f"{name}: sparkonce's catalog takes [spark_catalog.]database.table names")
    catalog = DeltaCatalog.of(spark)
    location = path or catalog.managed_location(*key)

    def register() -> None:
        from sparkonce.delta.spark_catalog import sync_table

        sync_table(spark, catalog.add(*key, location, managed=path is None))

    return None, location, register


__all__ = ["install"]
