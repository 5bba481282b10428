"""Batch reads of Delta tables through Spark's own Parquet scan: the native read path.

The Python data source (:mod:`sparkonce.delta.read.reader`) moves every row from a Python worker to the JVM as Arrow and
cannot prune columns. Here the driver gives Spark a plain file-source relation instead: Spark's
``HadoopFsRelation`` with its ``ParquetFileFormat`` and a file index that is sparkonce's, written in Python and
handed to the JVM through py4j (:class:`DeltaFileIndex`, a py4j proxy of Spark's ``FileIndex``). Spark then reads
the files itself, with its vectorized reader, column pruning and row-group filter pushdown, as delta-spark's
``TahoeLogFileIndex`` lets it.

Each time Spark plans a query over the relation it asks the index for the files (``listFiles``), and the index
answers from the Delta log as of that moment, the way Delta's file index re-resolves its snapshot per query:

* the latest table version (or the version a time-travel read pinned), from sparkonce's own log reader
  (:func:`sparkonce.delta.log.table_view.current_table`, which reads only the commits after the snapshot it holds);
* partition pruning with Spark's own evaluation of the partition filters (Spark leaves them to the index);
* data skipping on the ``add`` actions' statistics (:mod:`sparkonce.delta.table.skipping`);
* a schema check: a DataFrame (or a view over one) made before a column was dropped or retyped fails with Delta's
  error class rather than read wrong columns; added columns are simply not in its schema, as in Delta.

Column mapping is a projection from physical to logical names over the relation; partition columns are the
relation's partition columns, with their values from the log. Spark's ``_metadata`` columns come with the file
source.

Tables on ``s3://`` (or ``s3a://``) read natively too when the session has Hadoop's S3A file system (the S3A jars
of ``sparkonce jars fetch s3a`` on its classpath): the index lists ``s3a://bucket/key`` files and the relation
carries the S3A settings of the table's storage options (:func:`sparkonce.storage.s3a_hadoop_conf`) as its
options, which Spark puts into the Hadoop conf of that scan only (nothing global changes).

Tables that can hold deletion vectors (the ``deletionVectors`` reader feature) read through
:class:`DeletionVectorFileIndex`: each listed file carries its vector's descriptor as a constant column from the
same listing, and a vectorized Python filter drops the rows its vector deletes by ``_metadata.row_index``.

What stays on the Python data source (:func:`native_frame` returns None): sessions without py4j (Spark Connect,
Spark Declarative Pipelines), tables on object stores Spark cannot read here (S3 without the S3A jars, other
stores), and ``spark.sparkonce.nativeReads=false``.

Runs on the driver; executors run Spark's own Parquet reader.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from py4j.protocol import Py4JError

from sparkonce.delta.log.delta_log import DeltaLog, Snapshot
from sparkonce.delta.log.paths import require_fs_path
from sparkonce.delta.log.table_view import current_table, existing_table
from sparkonce.delta.read.reader import check_protocol_readable, version_as_of_timestamp
from sparkonce.delta.table.deletion_vectors import DeletionVector, deleted_rows
from sparkonce.delta.table.options import ReadOptions
from sparkonce.delta.table.skipping import (
    And,
    ColumnKind,
    Comparison,
    FileStats,
    InList,
    IsNotNull,
    IsNull,
    Not,
    Or,
    Predicate,
    StartsWith,
    Unknown,
    column_kinds,
    conjunction,
    flip,
    may_match,
    parse_stats,
    stats_columns,
)
from sparkonce.errors import DeltaLogError, SchemaMismatchError, TableNotFoundError
from sparkonce.storage import TableLocation, s3a_hadoop_conf, table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

NATIVE_READS_CONF = "spark.sparkonce.nativeReads"
"""``false`` sends every batch read through the Python data source (default ``true``)."""

_FILE_BLOCK_SIZE = 128 * 1024 * 1024
_S3_SCHEMES = ("s3", "s3a")
_S3A_FILE_SYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_PHYSICAL_NAME = "delta.columnMapping.physicalName"


@dataclass(frozen=True)
class ScanReport:
    """What the index answered the last time Spark planned a scan over it."""

    table_version: int
    files_total: int
    files_after_partition_pruning: int
    files_read: int

    @property
    def files_skipped(self) -> int:
        """Files dropped by data skipping (after partition pruning)."""
        return self.files_after_partition_pruning - self.files_read


_LAST_SCANS: dict[str, ScanReport] = {}


def last_scan(table: str | TableLocation) -> ScanReport | None:
    """What the native path's index answered the last time Spark planned a scan of ``table`` in this process (for
    tests, benchmarks and operators asking how many files data skipping dropped), or None."""
    return _LAST_SCANS.get(table_location(table).uri)


def native_frame(spark: SparkSession, options: ReadOptions, *, catalog_table: Any = None) -> DataFrame | None:
    """A DataFrame reading the table of ``options`` through Spark's Parquet scan, or None when the native path
    cannot read it (see the module's documentation); the caller then reads through the Python data source.

    Raises:
        VersionNotFoundError: ``versionAsOf`` names a table version the log does not have (Delta's
            ``DELTA_VERSION_NOT_FOUND``).
        OptionError: ``timestampAsOf`` names no table version.
        UnsupportedFeatureError: the table needs a reader feature sparkonce cannot honour.
        TableNotFoundError: there is no Delta table at the path.
    """
    if not reads_natively(spark, options.location):
        return None
    pinned = _pinned_version(options)
    snapshot = (
        existing_table(options.location, table_version=pinned).snapshot
        if pinned is not None
        else latest_snapshot(options.location)
    )
    check_protocol_readable(snapshot.protocol, options.path, fields=_schema_fields(snapshot))
    index = _index_of(spark, options.location, snapshot, pinned=pinned is not None)
    frame = index.frame(catalog_table)
    if isinstance(index, DeletionVectorFileIndex):
        frame = index.without_deleted_rows(frame, metadata_column=options.metadata_column)
    elif options.metadata_column:
        frame = frame.select("*", "_metadata")
    frame._sparkonce_native = True  # type: ignore[attr-defined]
    return frame


_INDEXES: OrderedDict[tuple[int, tuple[str, int | None, str]], DeltaFileIndex] = OrderedDict()
_INDEXES_KEPT = 256
_INDEXES_LOCK = threading.Lock()


def _index_of(spark: SparkSession, location: TableLocation, snapshot: Snapshot, *, pinned: bool) -> DeltaFileIndex:
    """The one index of this session for the table, its pinned table version (or the latest) and its schema: every
    DataFrame over it shares the index, so Spark's cache matches their plans (py4j compares proxies by identity)
    and the JVM file statuses are made once."""
    key = (id(spark.sparkContext), _identity(location, snapshot, pinned=pinned))
    with _INDEXES_LOCK:
        found = _INDEXES.get(key)
        if found is not None:
            _INDEXES.move_to_end(key)
            return found
    kind = DeletionVectorFileIndex if _has_deletion_vectors(snapshot) else DeltaFileIndex
    index = kind(spark, location, snapshot, pinned=pinned)
    with _INDEXES_LOCK:
        found = _INDEXES.setdefault(key, index)
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return found


def _identity(location: TableLocation, snapshot: Snapshot, *, pinned: bool) -> tuple[str, int | None, str]:
    """(table, pinned table version or None for the latest, schemaString, partition columns and whether the table
    can hold deletion vectors)."""
    layout = json.dumps(
        [
            snapshot.metadata.get("schemaString"),
            snapshot.metadata.get("partitionColumns"),
            _has_deletion_vectors(snapshot),
        ]
    )
    return (location.uri, snapshot.table_version if pinned else None, layout)


def _has_deletion_vectors(snapshot: Snapshot) -> bool:
    """True when the table's protocol lets it hold deletion vectors (the ``deletionVectors`` reader feature)."""
    return "deletionVectors" in set(snapshot.protocol.get("readerFeatures") or [])


def is_native(frame: DataFrame) -> bool:
    """True for a DataFrame of the native path: :func:`native_frame`'s (its file index reads the log at every query)
    or a streaming one of :mod:`sparkonce.delta.read.native_stream` (Spark's Parquet scan reads each micro-batch)."""
    return getattr(frame, "_sparkonce_native", False) is True


def native_reads_enabled(spark: SparkSession) -> bool:
    """True for a classic (py4j) session where :data:`NATIVE_READS_CONF` is not ``false``."""
    if getattr(spark, "_jsparkSession", None) is None or getattr(spark, "_jvm", None) is None:
        return False
    return str(spark.conf.get(NATIVE_READS_CONF, "true")).strip().lower() != "false"


def reads_natively(spark: SparkSession, location: TableLocation) -> bool:
    """True when native reads are on and Spark can read the table's store here (local, or S3 with S3A)."""
    return native_reads_enabled(spark) and _spark_reads_store(spark, location)


def _spark_reads_store(spark: SparkSession, location: TableLocation) -> bool:
    """True when Spark's Parquet scan can read the table's files: local tables, and tables on S3 when the session
    has the S3A file system."""
    if location.is_local:
        return True
    return location.scheme in _S3_SCHEMES and jvm_of(spark).has_s3a


def latest_snapshot(location: TableLocation) -> Snapshot:
    """The table's latest snapshot, from sparkonce's log reader (only the commits since the one it holds are read).

    Raises:
        TableNotFoundError: there is no Delta table at ``location``.
    """
    table = current_table(location)
    if table is None:
        raise TableNotFoundError(f"[DELTA_MISSING_DELTA_TABLE] {location} is not a Delta table.")
    return table.snapshot


def _pinned_version(options: ReadOptions) -> int | None:
    if options.version_as_of is not None:
        # Delta's DELTA_VERSION_NOT_FOUND beyond the latest version, naming the versions there are
        DeltaLog(options.location).check_table_version(options.version_as_of)
        return options.version_as_of
    if options.timestamp_as_of is not None:
        return version_as_of_timestamp(options.location, options.timestamp_as_of, options.path)
    return None


class _Jvm:
    """The JVM classes the index uses, looked up once per session (each py4j lookup is a round trip)."""

    def __init__(self, spark: SparkSession) -> None:
        from pyspark.java_gateway import ensure_callback_server_started

        sc = spark.sparkContext
        gateway: Any = sc._gateway
        self.gateway = gateway
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        jvm = sc._jvm
        assert jvm is not None
        self.jvm = jvm
        self.session = spark._jsparkSession
        self.Path = jvm.org.apache.hadoop.fs.Path
        self.FileStatus = jvm.org.apache.hadoop.fs.FileStatus
        ds = jvm.org.apache.spark.sql.execution.datasources
        self.PartitionDirectory = ds.PartitionDirectory
        self.expressions = jvm.org.apache.spark.sql.catalyst.expressions
        self.DataType = jvm.org.apache.spark.sql.types.DataType
        self.StringType = jvm.org.apache.spark.sql.types.DataTypes.StringType
        self.converters = jvm.scala.jdk.javaapi.CollectionConverters
        self.eval_mode = getattr(getattr(self.expressions, "EvalMode$"), "MODULE$").LEGACY()
        self.none = jvm.scala.Option.empty()
        self.utc = jvm.scala.Option.apply("UTC")
        self.logical_relation = getattr(getattr(ds, "LogicalRelation$"), "MODULE$")
        self.bind = getattr(getattr(self.expressions, "BindReferences$"), "MODULE$")
        self.attribute_seq = getattr(self.expressions, "package$AttributeSeq")
        self.predicate = getattr(getattr(self.expressions, "Predicate$"), "MODULE$")
        self._has_s3a: bool | None = None

    @property
    def has_s3a(self) -> bool:
        """True when Hadoop's S3A file system class loads in the driver's JVM (asked once per session)."""
        if self._has_s3a is None:
            from py4j.protocol import Py4JJavaError

            try:
                loader = self.jvm.java.lang.Thread.currentThread().getContextClassLoader()
                self.jvm.java.lang.Class.forName(_S3A_FILE_SYSTEM, False, loader)
                self._has_s3a = True
            except Py4JJavaError:
                self._has_s3a = False
        return self._has_s3a

    def seq(self, items: Sequence[Any]) -> Any:
        """A Scala immutable ``List`` of ``items``."""
        from py4j.java_collections import ListConverter

        java_list = ListConverter().convert(list(items), self.gateway._gateway_client)
        return self.converters.asScala(java_list).toList()

    def map(self, items: Mapping[str, str]) -> Any:
        """A Scala immutable ``Map`` of ``items``."""
        pairs = [self.jvm.scala.Tuple2(key, value) for key, value in items.items()]
        return getattr(self.jvm.scala.collection.immutable.Map, "from")(self.seq(pairs))


_JVMS: dict[int, _Jvm] = {}
_JVM_LOCK = threading.Lock()


def jvm_of(spark: SparkSession) -> _Jvm:
    """The JVM classes the native path uses, looked up once per SparkContext."""
    key = id(spark.sparkContext)
    with _JVM_LOCK:
        found = _JVMS.get(key)
        if found is None:
            found = _JVMS[key] = _Jvm(spark)
        return found


@dataclass(frozen=True)
class _Layout:
    """The relation's columns, fixed when the DataFrame is made."""

    fields: tuple[dict[str, Any], ...]
    """``schemaString``'s top-level fields."""
    partition_columns: tuple[str, ...]
    physical: dict[str, str]
    """Logical -> physical top-level name, where they differ (column mapping)."""
    kinds: dict[str, ColumnKind]

    @classmethod
    def of(cls, snapshot: Snapshot) -> _Layout:
        fields = tuple(_schema_fields(snapshot))
        partitions = tuple(str(c) for c in snapshot.metadata.get("partitionColumns") or [])
        physical = {}
        for field in fields:
            name = (field.get("metadata") or {}).get(_PHYSICAL_NAME)
            if name and name != field["name"]:
                physical[str(field["name"])] = str(name)
        return cls(fields, partitions, physical, column_kinds(fields))

    @property
    def mapped(self) -> bool:
        """True when the files' column names are not the logical names (column mapping)."""
        return any((f.get("metadata") or {}).get(_PHYSICAL_NAME) for f in self.fields) or any(
            _has_physical_names(f.get("type")) for f in self.fields
        )


def _schema_fields(snapshot: Snapshot) -> list[dict[str, Any]]:
    return list(json.loads(str(snapshot.metadata.get("schemaString") or "{}")).get("fields") or [])


def _has_physical_names(delta_type: Any) -> bool:
    if isinstance(delta_type, dict):
        if delta_type.get("type") == "struct":
            return any(
                (f.get("metadata") or {}).get(_PHYSICAL_NAME) or _has_physical_names(f.get("type"))
                for f in delta_type.get("fields") or []
            )
        if delta_type.get("type") == "array":
            return _has_physical_names(delta_type.get("elementType"))
        if delta_type.get("type") == "map":
            return _has_physical_names(delta_type.get("keyType")) or _has_physical_names(delta_type.get("valueType"))
    return False


def _physical_type(delta_type: Any) -> Any:
    """A Delta type with every nested field under its physical name and no field metadata."""
    return _spark_type(delta_type, physical=True)


def _logical_type(delta_type: Any) -> Any:
    """A Delta type as Spark shows the table: logical names, only the ``comment`` of the field metadata."""
    return _spark_type(delta_type, physical=False)


def _spark_type(delta_type: Any, *, physical: bool) -> Any:
    if isinstance(delta_type, dict):
        kind = delta_type.get("type")
        if kind == "struct":
            return {
                "type": "struct",
                "fields": [
                    {
                        "name": ((f.get("metadata") or {}).get(_PHYSICAL_NAME) if physical else None) or f["name"],
                        "type": _spark_type(f["type"], physical=physical),
                        "nullable": f.get("nullable", True),
                        "metadata": {} if physical else _comment(f),
                    }
                    for f in delta_type.get("fields") or []
                ],
            }
        if kind == "array":
            return {**delta_type, "elementType": _spark_type(delta_type["elementType"], physical=physical)}
        if kind == "map":
            return {
                **delta_type,
                "keyType": _spark_type(delta_type["keyType"], physical=physical),
                "valueType": _spark_type(delta_type["valueType"], physical=physical),
            }
    return delta_type


def _comment(field: Mapping[str, Any]) -> dict[str, Any]:
    """The field metadata Spark shows of a Delta field: its ``comment``, if any."""
    comment = (field.get("metadata") or {}).get("comment")
    return {"comment": comment} if comment is not None else {}


class DeltaFileIndex:
    """Spark's ``FileIndex`` for one Delta table, implemented in Python and called by the JVM through py4j while
    Spark plans a query (driver only: Spark's scan hands executors file splits, never the index).

    Args:
        spark: The (classic) session.
        location: The table.
        snapshot: The table version the DataFrame is made at: its schema and partitioning are the relation's.
        pinned: True for a time-travel read (every query reads ``snapshot``); False to read the latest table
            version at each query.
    """

    class Java:
        implements = ["org.apache.spark.sql.execution.datasources.FileIndex"]

    extra_fields: tuple[dict[str, Any], ...] = ()
    """Columns the files may hold beyond the table's (Delta schema JSON fields), read under their own names after
    the table's columns: a change data file's ``_change_type``; null where a file lacks them."""
    extra_partition_fields: tuple[dict[str, Any], ...] = ()
    applies_deletion_vectors = False
    """True when the DataFrames over the index drop the rows deletion vectors delete; else a listed file with a
    deletion vector is refused (the DataFrame was made before the table could hold them)."""
    """Constant columns of each listed file beyond the table's partition values (Delta schema JSON fields of
    primitive types), after the extra fields: Spark's scan fills them as it fills partition values, from
    :meth:`_partition_keys` (a change data feed read lists a file once per change entry it belongs to)."""

    def __init__(self, spark: SparkSession, location: TableLocation, snapshot: Snapshot, *, pinned: bool) -> None:
        self.spark = spark
        self.location = location
        self.snapshot = snapshot
        self.pinned = pinned
        self.layout = _Layout.of(snapshot)
        self._j = jvm_of(spark)
        self._lock = threading.Lock()
        self._statuses: dict[str, Any] = {}
        """Raw ``add.path`` -> the JVM ``FileStatus`` (made once per file: each py4j call is a round trip)."""
        self._rows: dict[tuple[Any, ...], Any] = {}
        """Raw partition values -> the JVM partition row."""
        self._stats: dict[str, FileStats | None] = {}
        self.last_scan: ScanReport | None = None
        self._partition_schema = self._j.DataType.fromJson(json.dumps(self._partition_struct()))
        self._placeholders: dict[str, Any] | None = None

    # -- the relation ----------------------------------------------------------------------------------------------

    def _partition_struct(self) -> dict[str, Any]:
        by_name = {f["name"]: f for f in self.layout.fields}
        return {
            "type": "struct",
            "fields": [
                {
                    "name": c,
                    "type": _logical_type(by_name[c]["type"]),
                    "nullable": by_name[c].get("nullable", True),
                    "metadata": _comment(by_name[c]),
                }
                for c in self.layout.partition_columns
            ]
            + list(self.extra_partition_fields),
        }

    def _data_struct(self) -> dict[str, Any]:
        """Every column in table order: data columns under their physical names, partition columns under their
        logical names (Spark then places them at their table position and fills them from the index)."""
        fields = []
        for f in self.layout.fields:
            partition = f["name"] in self.layout.partition_columns
            name = f["name"] if partition else self.layout.physical.get(f["name"], f["name"])
            kind = _logical_type(f["type"]) if partition else _physical_type(f["type"])
            fields.append({"name": name, "type": kind, "nullable": f.get("nullable", True), "metadata": _comment(f)})
        return {"type": "struct", "fields": [*fields, *self.extra_fields]}

    def frame(self, catalog_table: Any = None, *, stream: Any = None) -> DataFrame:
        """The DataFrame over this index (logical column names, table order).

        Args:
            catalog_table: Spark's catalog entry of the table when the DataFrame answers for a name (``REFRESH
                TABLE`` and the cache need it).
            stream: The streaming source (a py4j proxy of Spark's ``Source``) whose micro-batch the DataFrame
                is: the relation is then a streaming one, credited to that source in the query's progress.
        """
        from pyspark.sql import DataFrame

        j = self._j
        data_schema = j.DataType.fromJson(json.dumps(self._data_struct()))
        format_ = j.jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat()
        relation = j.jvm.org.apache.spark.sql.execution.datasources.HadoopFsRelation(
            self, self._partition_schema, data_schema, j.none, format_, j.map(self._hadoop_options()), j.session
        )
        if stream is not None:
            attributes = j.jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttributes(relation.schema())
            plan = j.jvm.org.apache.spark.sql.execution.datasources.LogicalRelation(
                relation, attributes, j.none, True, j.jvm.scala.Option.apply(stream)
            )
        elif catalog_table is None:
            plan = j.logical_relation.apply(relation, False)
        else:
            plan = j.logical_relation.apply(relation, catalog_table)
        frame = DataFrame(j.jvm.org.apache.spark.sql.classic.Dataset.ofRows(j.session, plan), self.spark)
        if not self.layout.mapped:
            return frame
        from pyspark.sql import functions as F
        from pyspark.sql.types import _parse_datatype_json_value

        columns = []
        for f in self.layout.fields:
            name = f["name"]
            if name in self.layout.partition_columns:
                columns.append(F.col(f"`{name}`"))
                continue
            physical = self.layout.physical.get(name, name)
            logical_type = _parse_datatype_json_value(_logical_type(f["type"]))
            columns.append(F.col(f"`{physical}`").cast(logical_type).alias(name, metadata=_comment(f)))
        extras = (*self.extra_fields, *self.extra_partition_fields)
        return frame.select(*columns, *[F.col(f"`{f['name']}`") for f in extras])

    # -- FileIndex -------------------------------------------------------------------------------------------------

    def rootPaths(self) -> Any:  # driver (JVM callback)
        return self._j.seq([self._j.Path(self._uri(""))])

    def listFiles(self, partitionFilters: Any, dataFilters: Any) -> Any:  # driver (JVM callback)
        """The files of the table's current (or pinned) snapshot that the filters may need; an error here reaches
        the query as py4j's exception with the Python traceback in its message."""
        return self._list_files(partitionFilters, dataFilters)

    def inputFiles(self) -> Any:  # driver (JVM callback)
        _, adds = self._listing()
        paths = [self._uri(require_fs_path(self.location, p)) for p in adds]
        array = self._j.gateway.new_array(self._j.jvm.java.lang.String, len(paths))
        for i, path in enumerate(paths):
            array[i] = path
        return array

    def refresh(self) -> None:  # driver (JVM callback)
        """Nothing is cached across queries that could be stale: each listing reads the log."""

    def sizeInBytes(self) -> int:  # driver (JVM callback)
        _, adds = self._listing()
        return sum(int(a.get("size") or 0) for a in adds.values())

    def partitionSchema(self) -> Any:  # driver (JVM callback)
        return self._partition_schema

    def isTimeTravel(self) -> bool:  # driver (JVM callback)
        return self.pinned

    def metadataOpsTimeNs(self) -> Any:  # driver (JVM callback)
        return self._j.none

    def toString(self) -> str:  # driver (JVM callback): how explain() shows the index
        scan = self.last_scan
        seen = (
            ""
            if scan is None
            else f", table_version={scan.table_version}, files read {scan.files_read} of {scan.files_total} "
            f"(partition pruning {scan.files_total - scan.files_after_partition_pruning}, "
            f"data skipping {scan.files_skipped})"
        )
        return f"DeltaFileIndex[{self.location}{seen}]"

    def equals(self, other: Any) -> bool:  # driver (JVM callback)
        """Two indexes of one table that read its latest version (or one pinned version) with one schema read the
        same files at any query: Spark's cache (``CACHE TABLE``, ``df.cache()``) matches their plans."""
        if other is self or (isinstance(other, DeltaFileIndex) and other.identity == self.identity):
            return True
        # another index reaches Python as its JVM proxy: ask it (back through py4j) for its identity's hash and name
        try:
            return bool(
                int(other.hashCode()) == self.hashCode()
                and str(other.toString()).startswith(f"DeltaFileIndex[{self.location}")
            )
        except Py4JError:  # not an index of ours: it has no such methods
            return False

    def hashCode(self) -> int:  # driver (JVM callback)
        return int(hashlib.sha1(repr(self.identity).encode()).hexdigest()[:7], 16)

    @property
    def identity(self) -> tuple[str, int | None, str]:
        """(table, pinned table version or None for the latest, schema and partition columns)."""
        return _identity(self.location, self.snapshot, pinned=self.pinned)

    # -- listing ---------------------------------------------------------------------------------------------------

    def _current(self) -> Snapshot:
        if self.pinned:
            return self.snapshot
        snapshot = latest_snapshot(self.location)
        self._check_schema(snapshot)
        return snapshot

    def _check_schema(self, snapshot: Snapshot) -> None:
        """Refuse a table whose columns changed incompatibly since the DataFrame was made (Delta's
        ``DELTA_SCHEMA_CHANGED_WITH_VERSION``); added columns are fine."""
        if snapshot.metadata.get("schemaString") == self.snapshot.metadata.get("schemaString") and list(
            snapshot.metadata.get("partitionColumns") or []
        ) == list(self.layout.partition_columns):
            return
        now = {f["name"]: f for f in _schema_fields(snapshot)}
        problems = []
        for f in self.layout.fields:
            found = now.get(f["name"])
            if found is None:
                problems.append(f"column {f['name']} is gone")
            elif _physical_type(found["type"]) != _physical_type(f["type"]) or (found.get("metadata") or {}).get(
                _PHYSICAL_NAME
            ) != (f.get("metadata") or {}).get(_PHYSICAL_NAME):
                problems.append(f"column {f['name']} changed type or physical name")
        if list(snapshot.metadata.get("partitionColumns") or []) != list(self.layout.partition_columns):
            problems.append("the partition columns changed")
        if problems:
            raise SchemaMismatchError(
                f"[DELTA_SCHEMA_CHANGED_WITH_VERSION] The schema of the Delta table at {self.location} changed in "
                f"an incompatible way since the DataFrame (or a view over it) was made at table version "
                f"{self.snapshot.table_version}; it is now at table version {snapshot.table_version}: "
                f"{'; '.join(problems)}. Read the table again (or re-create the view)."
            )

    def _listing(self) -> tuple[Snapshot, Mapping[str, Mapping[str, Any]]]:
        """The snapshot whose metadata (statistics columns) applies and the ``add`` actions to list, by raw path:
        the current (or pinned) snapshot's files."""
        snapshot = self._current()
        return snapshot, snapshot.files

    def _list_files(self, partition_filters: Any, data_filters: Any) -> Any:
        snapshot, adds = self._listing()
        j = self._j
        # group files by partition values (raw strings from the log)
        groups: dict[tuple[Any, ...], list[str]] = {}
        for path, add in adds.items():
            for key in self._partition_keys(path, add):
                groups.setdefault(key, []).append(path)
        total = len(adds)
        with self._lock:
            rows = {key: self._row(key) for key in groups}
            if self._partition_names() and not partition_filters.isEmpty():
                keep = self._partition_predicate(partition_filters)
                groups = {key: paths for key, paths in groups.items() if keep.eval(rows[key])}
            after_partitions = len({p for paths in groups.values() for p in paths})
            predicate = conjunction([_predicate(e) for e in _iterate(data_filters)])
            if predicate is not None and not isinstance(predicate, Unknown):
                kinds = self._indexed_kinds(snapshot)
                groups = {
                    key: kept
                    for key, paths in groups.items()
                    if (kept := [p for p in paths if may_match(predicate, self._file_stats(p, adds[p]), kinds)])
                }
            read = len({p for paths in groups.values() for p in paths})
            self._forget_removed(adds)
            directories = []
            for key, paths in groups.items():
                array = j.gateway.new_array(j.FileStatus, len(paths))
                for i, path in enumerate(paths):
                    array[i] = self._status(path, adds[path])
                directories.append(j.PartitionDirectory.apply(rows[key], array))
            self.last_scan = ScanReport(snapshot.table_version, total, after_partitions, read)
            self._record(self.last_scan)
        log.info(
            "native scan of %s%s at table_version %d: %d of %d file(s) read (partition pruning dropped %d, data "
            "skipping %d)",
            self.location,
            self._scan_label(),
            snapshot.table_version,
            read,
            total,
            total - after_partitions,
            after_partitions - read,
        )
        return j.seq(directories)

    def _partition_keys(self, path: str, add: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The partition keys (raw strings, one per field of the partition schema) a file is listed under: its
        partition values from the log, once.

        Raises:
            SchemaMismatchError: the file has a deletion vector the DataFrames over the index cannot apply.
        """
        if add.get("deletionVector") and not self.applies_deletion_vectors:
            raise SchemaMismatchError(
                f"The Delta table at {self.location} has deletion vectors (file {path}), which the DataFrame (or a "
                f"view over it), made at table version {self.snapshot.table_version} before the table could hold "
                "them, cannot apply: read the table again (or re-create the view)."
            )
        values = add.get("partitionValues") or {}
        physical = self.layout.physical
        return [tuple(_raw_partition_value(values, c, physical.get(c, c)) for c in self.layout.partition_columns)]

    def _partition_names(self) -> list[str]:
        """The names of the partition schema's fields, in order."""
        return [*self.layout.partition_columns, *[str(f["name"]) for f in self.extra_partition_fields]]

    def _record(self, scan: ScanReport) -> None:
        """Keep ``scan`` as the table's last native scan (:func:`last_scan`)."""
        _LAST_SCANS[self.location.uri] = scan

    def _scan_label(self) -> str:
        """What the log line of a listing adds after the table (nothing for a table's own index)."""
        return ""

    def _forget_removed(self, adds: Mapping[str, Any]) -> None:
        """Drop what the index keeps of files no longer in the table once they outnumber the live ones (a table
        that a stream appends to for months must not grow the driver's memory)."""
        for kept in (self._statuses, self._stats):
            if len(kept) > 2 * len(adds) + 1000:
                for path in [p for p in kept if p not in adds]:
                    del kept[path]

    def _uri(self, fs_path: str) -> str:
        """The Hadoop URI of a file (or, for ``""``, of the table root): ``file:/...`` or ``s3a://bucket/...``."""
        if self.location.is_local:
            return f"file:{fs_path or self.location.fs_path()}"
        root = "s3a://" + self.location.uri.split("://", 1)[1].rstrip("/")
        return f"{root}/{fs_path}" if fs_path else root

    def _hadoop_options(self) -> dict[str, str]:
        """The relation's options: Spark sets them in the Hadoop conf of its scan (the S3A settings of an S3
        table's storage options; none for a local table)."""
        return {} if self.location.is_local else s3a_hadoop_conf(self.location.options())

    def _status(self, path: str, add: Mapping[str, Any]) -> Any:
        """The JVM ``FileStatus`` of a file, from its action (a ``remove`` may lack its optional ``size``: the file
        system is then asked once, as Spark's scan needs each file's length)."""
        found = self._statuses.get(path)
        if found is None:
            j = self._j
            file = j.Path(self._uri(require_fs_path(self.location, path)))
            size = add.get("size")
            if size is None:
                conf = j.session.sessionState().newHadoopConfWithOptions(j.map(self._hadoop_options()))
                size = file.getFileSystem(conf).getFileStatus(file).getLen()
            mtime = int(add.get("modificationTime") or 0)
            found = j.FileStatus(int(size), False, 1, _FILE_BLOCK_SIZE, mtime, file)
            self._statuses[path] = found
        return found

    def _indexed_kinds(self, snapshot: Snapshot) -> dict[str, ColumnKind]:
        """The relation's columns whose statistics data skipping may use at ``snapshot``: the table's statistics
        columns (its ``delta.dataSkippingStatsColumns`` / ``delta.dataSkippingNumIndexedCols`` at that version)."""
        indexed = stats_columns(
            _schema_fields(snapshot),
            [str(c) for c in snapshot.metadata.get("partitionColumns") or []],
            snapshot.metadata.get("configuration") or {},
        )
        return column_kinds(self.layout.fields, indexed=indexed)

    def _file_stats(self, path: str, add: Mapping[str, Any]) -> FileStats | None:
        if path not in self._stats:
            raw = add.get("stats")
            if raw is None and add.get("stats_parsed") is not None:
                raw = add.get("stats_parsed")
            self._stats[path] = parse_stats(raw, self.layout.physical, self.layout.kinds)
        return self._stats[path]

    def _row(self, key: tuple[Any, ...]) -> Any:
        """The JVM partition row of raw partition values (Delta's serialization, cast as Delta casts them)."""
        found = self._rows.get(key)
        if found is None:
            j = self._j
            fields = self._partition_struct()["fields"]
            casts = []
            for raw, field in zip(key, fields):
                target = j.DataType.fromJson(json.dumps(field["type"]))
                literal = j.expressions.Literal.create(raw, j.StringType)
                casts.append(j.expressions.Cast(literal, target, j.utc, j.eval_mode))
            found = j.expressions.CreateStruct.apply(j.seq(casts)).eval(None)
            self._rows[key] = found
        return found

    def _partition_predicate(self, partition_filters: Any) -> Any:
        """Spark's interpreted predicate of the partition filters over the partition rows."""
        j = self._j
        expressions = list(_iterate(partition_filters))
        references: dict[str, Any] = {}
        for expression in expressions:
            for attribute in _iterate(expression.references().toSeq()):
                references[str(attribute.name()).lower()] = attribute
        attributes = [references.get(c.lower()) or self._placeholder(c) for c in self._partition_names()]
        combined = expressions[0]
        for expression in expressions[1:]:
            combined = j.expressions.And(combined, expression)
        bound = j.bind.bindReference(combined, j.attribute_seq(j.seq(attributes)), False)
        return j.predicate.createInterpreted(bound)

    def _placeholder(self, column: str) -> Any:
        """An attribute of a partition column no filter names (it only holds the column's place)."""
        if self._placeholders is None:
            fields = self._partition_schema.fields()
            self._placeholders = {str(f.name()): f for f in fields}
        field = self._placeholders[column]
        j = self._j
        return j.jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttribute(field)


_DELETION_VECTOR = "_sparkonce_deletion_vector"


class DeletionVectorFileIndex(DeltaFileIndex):
    """The index of a table that can hold deletion vectors: each listed file also carries its deletion vector's
    descriptor (:func:`_vector_key`; null without one) as a constant column, filled by Spark's scan from the same
    listing, so the rows and the vector that applies to them always come from one snapshot, however the table
    moves between queries. :meth:`without_deleted_rows` drops the deleted rows: a vectorized Python filter over each
    row's ``_metadata.row_index`` and that column (only those two cross into Python, never the table's columns);
    each Python worker loads a vector once and keeps the last ones it used. Made on the driver."""

    extra_partition_fields = ({"name": _DELETION_VECTOR, "type": "string", "nullable": True, "metadata": {}},)
    applies_deletion_vectors = True

    def __init__(self, spark: SparkSession, location: TableLocation, snapshot: Snapshot, *, pinned: bool) -> None:
        super().__init__(spark, location, snapshot, pinned=pinned)
        self._keep: Any = None

    def _partition_keys(self, path: str, add: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        (values,) = super()._partition_keys(path, add)
        descriptor = add.get("deletionVector")
        return [(*values, _vector_key(descriptor) if isinstance(descriptor, dict) else None)]

    def without_deleted_rows(self, frame: DataFrame, *, metadata_column: bool) -> DataFrame:
        """``frame`` (:meth:`frame` of this index) without the rows deletion vectors delete, in the table's columns
        (and ``_metadata`` when ``metadata_column``)."""
        from pyspark.sql import functions as F

        columns = [F.col(f"`{c}`") for c in frame.columns if c != _DELETION_VECTOR]
        if metadata_column:
            columns.append(F.col("_metadata"))
        if self._keep is None:  # one UDF per index: the plans of two DataFrames over it match (Spark's cache)
            from pyspark.sql.pandas.functions import arrow_udf

            self._keep = arrow_udf(_keep_rows(self.location), "boolean")  # type: ignore[call-overload]
        kept = frame.where(self._keep(F.col("_metadata.row_index"), F.col(_DELETION_VECTOR)))
        result: DataFrame = kept.select(*columns)
        return result


def _vector_key(descriptor: Mapping[str, Any]) -> str:
    """A deletion vector's descriptor as one short string (``storageType|offset|sizeInBytes|cardinality|
    pathOrInlineDv``): the constant column of its file's rows."""
    return "|".join(
        str(descriptor.get(k) if descriptor.get(k) is not None else "")
        for k in ("storageType", "offset", "sizeInBytes", "cardinality", "pathOrInlineDv")
    )


def _descriptor(key: str) -> dict[str, Any]:
    """The descriptor :func:`_vector_key` made ``key`` of."""
    storage, offset, size, cardinality, raw = key.split("|", 4)
    return {
        "storageType": storage,
        "offset": int(offset) if offset else None,
        "sizeInBytes": int(size),
        "cardinality": int(cardinality) if cardinality else 0,
        "pathOrInlineDv": raw,
    }


_LOADED: OrderedDict[tuple[str, str], Any] = OrderedDict()
"""(table URI, vector key) -> its deleted row indexes (sorted int64), the last few a Python worker loaded."""
_LOADED_KEPT = 32


def _keep_rows(location: TableLocation) -> Any:
    """The vectorized filter of :class:`DeletionVectorFileIndex`: (row index, vector key) -> keep the row."""

    def keep(row_index: Any, key: Any) -> Any:  # executor (a Python worker)
        import numpy as np
        import pyarrow as pa

        result = np.ones(len(row_index), dtype=np.bool_)
        if key.null_count == len(key):
            return pa.array(result)
        encoded = key.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        rows = row_index.to_numpy(zero_copy_only=False)
        for code, value in enumerate(encoded.dictionary.to_pylist()):
            where = codes == code
            result[where] = ~np.isin(rows[where], _deleted(location, value), assume_unique=True)
        return pa.array(result)

    import pyarrow as pa

    # what PySpark reads to make a scalar Arrow UDF (the module's annotations are strings)
    keep.__annotations__ = {"row_index": pa.Array, "key": pa.Array, "return": pa.Array}
    return keep


def _deleted(location: TableLocation, key: str) -> Any:  # executor
    cache_key = (location.uri, key)
    found = _LOADED.get(cache_key)
    if found is None:
        vector = DeletionVector.from_action(_descriptor(key), location, data_file=f"a data file of {location}")
        found = deleted_rows(vector).astype("int64")
        _LOADED[cache_key] = found
        while len(_LOADED) > _LOADED_KEPT:
            _LOADED.popitem(last=False)
    else:
        _LOADED.move_to_end(cache_key)
    return found


class FileSetIndex(DeltaFileIndex):
    """The file index of a fixed set of a table's files, read with the schema of one snapshot: a streaming
    micro-batch's files (:mod:`sparkonce.delta.read.native_stream`), or the candidate files a
    MERGE/UPDATE/DELETE/OPTIMIZE rewrites (:func:`file_rows`). Made on the driver; Spark calls it while planning that
    scan (partition pruning and data skipping apply to the set too).

    Args:
        spark: The (classic) session.
        location: The table.
        snapshot: The snapshot whose schema, partitioning and column mapping the files are read with.
        adds: The files' ``add`` actions, by raw path.
        label: How the set shows in logs and ``explain``.
    """

    def __init__(
        self,
        spark: SparkSession,
        location: TableLocation,
        snapshot: Snapshot,
        adds: Mapping[str, Mapping[str, Any]],
        label: str,
    ) -> None:
        super().__init__(spark, location, snapshot, pinned=True)
        self.label = label
        self._adds = dict(adds)
        self._uris: dict[str, str] | None = None

    applies_deletion_vectors = True  # the callers apply them (live_frame; the change data feed per entry)

    def _listing(self) -> tuple[Snapshot, Mapping[str, Mapping[str, Any]]]:
        return self.snapshot, self._adds

    def _record(self, scan: ScanReport) -> None:
        """A file set's scan is not the table's last scan (:func:`last_scan`)."""

    def _scan_label(self) -> str:
        return f" ({self.label})"

    def toString(self) -> str:  # driver (JVM callback)
        return f"DeltaFileSetIndex[{self.location}, {self.label}, {len(self._adds)} file(s)]"

    def equals(self, other: Any) -> bool:  # driver (JVM callback)
        if other is self:
            return True
        try:
            return bool(int(other.hashCode()) == self.hashCode() and str(other.toString()) == self.toString())
        except Py4JError:
            return False

    def hashCode(self) -> int:  # driver (JVM callback)
        return id(self) & 0x7FFFFFFF

    def file_uris(self) -> dict[str, str]:
        """Raw ``add`` path -> the file's URI as Spark's ``_metadata.file_path`` shows it (asked of the JVM once:
        the set is fixed)."""
        if self._uris is None:
            self._uris = {
                path: str(self._status(path, add).getPath().toUri().toString()) for path, add in self._adds.items()
            }
        return self._uris

    def live_frame(self, *, stream: Any = None, row_column: str | None = None) -> DataFrame:
        """:meth:`frame` without the rows the files' deletion vectors delete: Spark's scan tags each row with its
        file and ``_metadata.row_index``, and an anti-join drops the deleted ones, whose indexes executors expand
        from the deletion vectors (only they cross into Python, never the table's rows). The set is fixed, so the
        deletion vectors are the ones its ``add`` actions name.

        Args:
            stream: As for :meth:`frame` (a streaming micro-batch).
            row_column: Also keep the row's position in its file under this name, and its file's URI under
                :data:`FILE_URI_COLUMN` (a rewrite needs both); None: only the table's columns.
        """
        from pyspark.sql import functions as F

        frame = self.frame(stream=stream)
        columns = [F.col(f"`{c}`") for c in frame.columns]
        vectors = self._deletion_vectors()
        if not vectors and row_column is None:
            return frame
        row = row_column or _ROW_INDEX
        tagged = frame.select(
            *columns, F.col("_metadata.file_path").alias(FILE_URI_COLUMN), F.col("_metadata.row_index").alias(row)
        )
        if vectors:
            deleted = expanded_rows(
                self.spark,
                [(uri, vector, None) for uri, vector in vectors],
                key_column=FILE_URI_COLUMN,
                key_type="string",
                row_column=row,
            )
            tagged = tagged.join(deleted, on=[FILE_URI_COLUMN, row], how="left_anti")
        return tagged if row_column is not None else tagged.select(*columns)

    def _deletion_vectors(self) -> list[tuple[str, DeletionVector]]:
        """(file URI, resolved deletion vector) of each file of the set that has one."""
        found = []
        for path, add in self._adds.items():
            descriptor = add.get("deletionVector")
            if isinstance(descriptor, dict):
                vector = DeletionVector.from_action(descriptor, self.location, data_file=path)
                found.append((self.file_uris()[path], vector))
        return found


FILE_URI_COLUMN = "_sparkonce_file_uri"
"""A row's file as Spark's ``_metadata.file_path`` names it (:meth:`FileSetIndex.live_frame`)."""
_ROW_INDEX = "_sparkonce_row_index"


def expanded_rows(
    spark: SparkSession,
    sets: Sequence[tuple[str | int, DeletionVector, DeletionVector | None]],
    *,
    key_column: str,
    key_type: Literal["string", "long"],
    row_column: str,
) -> DataFrame:
    """(key, row index) of every row the first deletion vector of each ``(key, first, second)`` deletes and its
    second (if any) does not, expanded on executors (only these indexes cross into Python). Runs on the driver."""
    import numpy as np
    import pyarrow as pa

    slices = max(1, min(len(sets), spark.sparkContext.defaultParallelism))
    listing = spark.createDataFrame([(i,) for i in range(len(sets))], "i int").repartition(slices)
    key_arrow = pa.string() if key_type == "string" else pa.int64()

    def expand(batches: Any) -> Any:  # executor
        for batch in batches:
            for i in batch.column(0).to_pylist():
                key, first, second = sets[i]
                rows = deleted_rows(first).astype(np.int64)
                if second is not None:
                    rows = np.setdiff1d(rows, deleted_rows(second).astype(np.int64), assume_unique=True)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([key] * len(rows), key_arrow), pa.array(rows, pa.int64())],
                    names=[key_column, row_column],
                )

    expanded: DataFrame = listing.mapInArrow(expand, f"`{key_column}` {key_type}, `{row_column}` long")
    return expanded


def file_rows(
    spark: SparkSession,
    location: TableLocation,
    table_version: int,
    paths: Sequence[str],
    *,
    file_column: str,
    row_column: str,
) -> DataFrame | None:
    """The rows of the table's files ``paths`` (raw ``add`` paths of ``table_version``) read by Spark's Parquet scan,
    in table column order, plus ``file_column`` (the file's raw path) and ``row_column`` (the row's position in its
    file, deleted rows included in the count): what a MERGE/UPDATE/DELETE/OPTIMIZE rewrite reads, deletion vectors
    applied (:meth:`FileSetIndex.live_frame`). None when the native path cannot read them (see the module's
    documentation); the caller then reads them on Python workers. Runs on the driver.

    Raises:
        DeltaLogError: ``table_version`` cannot be read, or a path is not a file of it.
    """
    from pyspark.sql import functions as F

    if not paths or not reads_natively(spark, location):
        return None
    held = current_table(location)
    if held is not None and held.snapshot.table_version == table_version:
        snapshot = held.snapshot
    else:
        snapshot = existing_table(location, table_version=table_version).snapshot
    missing = [p for p in paths if p not in snapshot.files]
    if missing:
        raise DeltaLogError(
            f"{location}: {len(missing)} file(s) to rewrite are not in table version {table_version} (first "
            f"{missing[0]})"
        )
    index = FileSetIndex(
        spark, location, snapshot, {p: snapshot.files[p] for p in paths}, f"{len(paths)} file(s) to rewrite"
    )
    tagged = index.live_frame(row_column=row_column)
    columns = [c for c in tagged.columns if c not in (FILE_URI_COLUMN, row_column)]
    uris = spark.createDataFrame(
        [(uri, path) for path, uri in index.file_uris().items()], f"`{FILE_URI_COLUMN}` string, `{file_column}` string"
    )
    joined = tagged.join(F.broadcast(uris), FILE_URI_COLUMN)
    return joined.select(*[F.col(f"`{c}`") for c in columns], F.col(f"`{file_column}`"), F.col(f"`{row_column}`"))


def _raw_partition_value(values: Mapping[str, Any], logical: str, physical: str) -> Any:
    raw = values.get(physical, values.get(logical))
    return None if raw is None else str(raw)


def _iterate(scala_seq: Any) -> list[Any]:
    """The elements of a Scala ``Seq``."""
    iterator = scala_seq.iterator()
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items


# -- Spark expressions -> data skipping predicates ----------------------------------------------------------------

_COMPARISONS = {
    "EqualTo": "=",
    "EqualNullSafe": "<=>",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}


def _predicate(expression: Any) -> Predicate:
    """A data skipping predicate of a Spark (Catalyst) expression: the parts skipping understands, the rest
    :class:`Unknown` (which keeps every file)."""
    try:
        return _convert(expression)
    except _NotUnderstood as err:
        return Unknown(str(err))


class _NotUnderstood(Exception):
    pass


def _convert(e: Any) -> Predicate:
    kind = str(e.nodeName())
    if kind == "And":
        return And(_predicate(e.left()), _predicate(e.right()))
    if kind == "Or":
        return Or(_predicate(e.left()), _predicate(e.right()))
    if kind == "Not":
        return Not(_predicate(e.child()))
    if kind in _COMPARISONS:
        op = _COMPARISONS[kind]
        left, right = e.left(), e.right()
        if _is_attribute(left) and _is_literal(right):
            return Comparison(str(left.name()), op, _literal(right))  # type: ignore[arg-type]
        if _is_literal(left) and _is_attribute(right):
            return Comparison(str(right.name()), flip(op), _literal(left))  # type: ignore[arg-type]
        raise _NotUnderstood(kind)
    if kind in ("IsNull", "IsNotNull"):
        child = e.child()
        if not _is_attribute(child):
            raise _NotUnderstood(kind)
        return IsNull(str(child.name())) if kind == "IsNull" else IsNotNull(str(child.name()))
    if kind == "In":
        value = e.value()
        items = _iterate(e.list())
        if not _is_attribute(value) or not all(_is_literal(i) for i in items):
            raise _NotUnderstood(kind)
        return InList(str(value.name()), tuple(_literal(i) for i in items))
    if kind == "InSet":
        child = e.child()
        if not _is_attribute(child):
            raise _NotUnderstood(kind)
        type_name = str(child.dataType().typeName())
        return InList(str(child.name()), tuple(_internal(v, type_name) for v in _iterate(e.hset().toSeq())))
    if kind == "StartsWith":
        left, right = e.left(), e.right()
        if _is_attribute(left) and _is_literal(right):
            prefix = _literal(right)
            if isinstance(prefix, str):
                return StartsWith(str(left.name()), prefix)
        raise _NotUnderstood(kind)
    raise _NotUnderstood(kind)


def _is_attribute(e: Any) -> bool:
    return str(e.nodeName()) == "AttributeReference"


def _is_literal(e: Any) -> bool:
    return str(e.nodeName()) == "Literal"


def _literal(e: Any) -> Any:
    return _internal(e.value(), str(e.dataType().typeName()))


def _internal(value: Any, type_name: str) -> Any:
    """A Catalyst internal value as the Python value statistics compare with."""
    import datetime as dt

    if value is None:
        return None
    if type_name in ("integer", "long", "short", "byte"):
        return int(value)
    if type_name in ("double", "float"):
        return float(value)
    if type_name == "string":
        return str(value.toString()) if not isinstance(value, str) else value
    if type_name == "boolean":
        return bool(value)
    if type_name.startswith("decimal"):
        big = value.toJavaBigDecimal()  # py4j hands a java.math.BigDecimal over as a Python Decimal
        return big if isinstance(big, Decimal) else Decimal(str(big.toPlainString()))
    if type_name == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=int(value))
    if type_name == "timestamp":
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(value))
    if type_name == "timestamp_ntz":
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(value))
    raise _NotUnderstood(type_name)


__all__ = [
    "NATIVE_READS_CONF",
    "DeltaFileIndex",
    "FileSetIndex",
    "ScanReport",
    "expanded_rows",
    "file_rows",
    "is_native",
    "jvm_of",
    "last_scan",
    "latest_snapshot",
    "native_frame",
    "native_reads_enabled",
    "reads_natively",
]
