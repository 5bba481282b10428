"""Batch reads: ``spark.read.format("delta").option("versionAsOf", 3).load(path)``.

The snapshot (which files make up the table at a table version) is resolved on the driver through the Delta log,
never by listing directories, so orphan files of failed writes are never read. Executors read the Parquet files
of their partition and restore partition columns from the ``add`` actions.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)

from sparkonce.delta.log.paths import data_file_uri, require_fs_path
from sparkonce.delta.table import type_widening
from sparkonce.delta.table.column_mapping import rename_nested, rename_tree
from sparkonce.delta.table.deletion_vectors import DeletionVector, keep_mask
from sparkonce.delta.table.options import ReadOptions
from sparkonce.delta.table.partition_filters import DerivedPartition, derived_partitions, partition_tests
from sparkonce.delta.txn.commit import load_table
from sparkonce.errors import OptionError, UnsupportedFeatureError
from sparkonce.storage import TableLocation

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "geospatial",
        "geospatial-dev",
    }
)
TARGET_SPLIT_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class DataFile:
    """One file of a snapshot as executors need it."""

    path: str
    """The path in the table's file system (:meth:`TableLocation.fs_path`): absolute for a local table."""
    size: int
    partition_values: dict[str, Any]
    """Logical partition column name -> typed Python value (None for null)."""
    table_version: int | None = None
    deletion_vector: DeletionVector | None = None
    """Rows of the file the table has deleted (dropped while reading), when the ``add`` carries one."""
    modification_time: int | None = None
    """The ``add``'s ``modificationTime`` (milliseconds), for ``_metadata.file_modification_time``."""
    uri: str | None = None
    """The file's URI as Spark's ``_metadata.file_path`` shows it (``file:/...``, ``s3://...``)."""
    selected_rows: tuple[DeletionVector, DeletionVector | None] | None = None
    """Read only the rows the first deletion vector deletes and the second (if any) does not (the change data
    feed's rows of a commit that changed a file's deletion vector); ``deletion_vector`` is then None."""
    action: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The ``add`` action the file comes from, kept on the driver for the native read path (the streaming source
    hands a micro-batch's files to Spark's Parquet scan); None in what is shipped to executors."""


@dataclass
class FilesPartition(InputPartition):
    """A Spark input partition: a group of data files read by one task."""

    files: list[DataFile] = field(default_factory=list)

    def __init__(self, files: list[DataFile]) -> None:
        super().__init__(None)
        self.files = files


@dataclass(frozen=True)
class ScanSchema:
    """What an executor needs to turn a data file into rows of the table schema (pickled to executors)."""

    output: pa.Schema
    partition_columns: tuple[str, ...]
    physical_names: dict[str, str]
    """Logical top-level column name -> physical name in the Parquet files (column mapping), when different."""
    nested_renames: dict[str, Any]
    """Physical -> logical names of nested fields (column mapping), per top-level logical column."""
    metadata_column: bool = False
    """``output`` ends with Spark's ``_metadata`` struct (:data:`METADATA_FIELDS`)."""


METADATA_COLUMN = "_metadata"
METADATA_FIELDS = (
    ("file_path", "string"),
    ("file_name", "string"),
    ("file_size", "long"),
    ("file_block_start", "long"),
    ("file_block_length", "long"),
    ("file_modification_time", "timestamp"),
    ("row_index", "long"),
)
"""The fields of Spark's file-source ``_metadata`` column (Parquet's, with ``row_index``): name, Spark type."""


def check_reader_features(table: DeltaTable, table_uri: str) -> None:
    """Refuse tables whose reader features we cannot honour (reading them would give wrong rows)."""
    protocol = table.protocol()
    check_protocol_readable(
        {"minReaderVersion": protocol.min_reader_version, "readerFeatures": protocol.reader_features or []},
        table_uri,
        fields=json.loads(table.schema().to_json())["fields"],
    )


def check_protocol_readable(
    protocol: Mapping[str, Any], table_uri: str, *, fields: Sequence[Mapping[str, Any]] = ()
) -> None:
    """:func:`check_reader_features` of a ``protocol`` action and the schema's ``fields``: with type widening, every
    type change the schema records must be one Delta allows
    (:func:`sparkonce.delta.table.type_widening.check_readable`).

    Raises:
        UnsupportedFeatureError: a reader feature sparkonce cannot honour, a reader version above 3, or a recorded
            type change Delta does not allow.
    """
    features = {str(f) for f in protocol.get("readerFeatures") or []}
    reader_version = int(protocol.get("minReaderVersion", 1))
    unsupported = sorted(features - SUPPORTED_READER_FEATURES)
    if unsupported:
        raise UnsupportedFeatureError(
            f"the Delta table at {table_uri} uses reader feature(s) {', '.join(unsupported)} that sparkonce "
            f"cannot honour yet (reader version {reader_version}); refusing to read rather than "
            "return wrong rows"
        )
    if reader_version > 3:
        raise UnsupportedFeatureError(f"the Delta table at {table_uri} needs reader version {reader_version} (> 3)")
    if features & set(type_widening.FEATURES):
        type_widening.check_readable(fields, table_uri)


def open_snapshot(options: ReadOptions) -> DeltaTable:
    """Load the table at the requested table version or timestamp, with errors naming the option."""
    table = load_table(options.location)
    latest = table.version()
    if options.version_as_of is not None:
        if options.version_as_of > latest:  # Delta's DELTA_VERSION_NOT_FOUND, naming the versions there are
            from sparkonce.delta.log.delta_log import DeltaLog

            DeltaLog(options.location).check_table_version(options.version_as_of)
        table = load_table(options.location, table_version=options.version_as_of)
    elif options.timestamp_as_of is not None:
        table_version = version_as_of_timestamp(options.location, options.timestamp_as_of, options.path)
        table = load_table(options.location, table_version=table_version)
    check_reader_features(table, options.path)
    return table


def version_as_of_timestamp(location: TableLocation, when: dt.datetime, path: str) -> int:
    """The newest table version committed at or before ``when``, on the commit timestamps history shows.

    Raises:
        OptionError: ``when`` is before the first commit still in the log, or after the latest commit (Delta's
            ``DELTA_TIMESTAMP_GREATER_THAN_COMMIT``: no table version exists at that time yet).
    """
    from sparkonce.delta.log.delta_log import DeltaLog

    millis = when.timestamp() * 1000
    found: int | None = None
    first = "none present"
    latest_ms: int | None = None
    for table_version, ts in DeltaLog(location).commit_timestamps():
        if ts > millis:
            if found is None:
                first = dt.datetime.fromtimestamp(ts / 1000, dt.UTC).isoformat()
            break
        found = table_version
        latest_ms = ts
    else:
        if found is not None and latest_ms is not None and millis > latest_ms:
            latest = dt.datetime.fromtimestamp(latest_ms / 1000, dt.UTC).isoformat()
            raise OptionError(
                "timestampAsOf",
                when.isoformat(),
                f"[DELTA_TIMESTAMP_GREATER_THAN_COMMIT] The provided timestamp is after the latest version "
                f"available to the table {path} ({latest}). Please use a timestamp before or at {latest}.",
            )
    if found is None:
        raise OptionError(
            "timestampAsOf",
            when.isoformat(),
            f"[DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION] is before the earliest version available to the "
            f"table {path} ({first})",
        )
    return found


def scan_schema(table: DeltaTable, *, metadata_column: bool = False) -> ScanSchema:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from sparkonce.delta.table.schema import arrow_schema_for_spark, spark_schema, table_arrow_schema

    logical = table_arrow_schema(table)
    schema = _with_comments(spark_schema(_strip_field_metadata(logical)), json.loads(table.schema().to_json()))
    if metadata_column:
        if METADATA_COLUMN in schema.names:
            raise OptionError("metadataColumn", "true", f"the table has a column named {METADATA_COLUMN} already")
        kinds = {"string": StringType(), "long": LongType(), "timestamp": TimestampType()}
        metadata = StructType([StructField(name, kinds[kind], False) for name, kind in METADATA_FIELDS])
        schema = StructType([*schema.fields, StructField(METADATA_COLUMN, metadata, False)])
    output = arrow_schema_for_spark(schema)
    physical, nested = mapped_columns(json.loads(table.schema().to_json())["fields"])
    return ScanSchema(output, tuple(table.metadata().partition_columns), physical, nested, metadata_column)


def mapped_columns(fields: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    """The column mapping of a schema's ``fields`` as :class:`ScanSchema` holds it: top-level logical -> physical
    names (where they differ), and the nested renames per top-level column."""
    physical: dict[str, str] = {}
    nested: dict[str, Any] = {}
    for f in fields:
        name = (f.get("metadata") or {}).get("delta.columnMapping.physicalName")
        if name and name != f["name"]:
            physical[f["name"]] = name
        renames = rename_tree(f["type"], to_physical=False)
        if renames:
            nested[f["name"]] = renames
    return physical, nested


def _with_comments(schema: StructType, delta_schema: dict[str, Any]) -> StructType:
    """``schema`` with the columns' comments of the Delta schema (as Delta's reads show them: a column's
    ``comment``, not its generation expression, identity or column mapping metadata)."""
    from pyspark.sql.types import StructField, StructType

    fields = delta_schema["fields"]
    comments = {f["name"]: f["metadata"]["comment"] for f in fields if "comment" in (f.get("metadata") or {})}
    if not comments:
        return schema
    return StructType(
        [
            StructField(f.name, f.dataType, f.nullable, {"comment": comments[f.name]}) if f.name in comments else f
            for f in schema.fields
        ]
    )


def _strip_field_metadata(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


def snapshot_files(table: DeltaTable, location: TableLocation, scan: ScanSchema) -> list[DataFile]:
    """The active files of the loaded table version, with typed partition values (from the Delta log) and,
    on tables with the ``deletionVectors`` feature, their deletion vectors."""
    adds = pa.table(table.get_add_actions(flatten=True))
    dvs = _deletion_vectors(table, location)
    paths = adds.column("path").to_pylist()
    sizes = adds.column("size_bytes").to_pylist()
    times = adds.column("modification_time").to_pylist()
    partition_cols: dict[str, list[Any]] = {}
    for name in scan.partition_columns:
        physical = scan.physical_names.get(name, name)
        column = f"partition.{physical}" if f"partition.{physical}" in adds.column_names else f"partition.{name}"
        partition_cols[name] = adds.column(column).to_pylist() if column in adds.column_names else [None] * len(paths)
    files = []
    for i, path in enumerate(paths):
        dv = dvs.get(unquote(path))
        fs_path = require_fs_path(location, path)
        values = {n: v[i] for n, v in partition_cols.items()}
        uri = data_file_uri(location, fs_path)
        files.append(DataFile(fs_path, int(sizes[i]), values, deletion_vector=dv, modification_time=times[i], uri=uri))
    return files


def _deletion_vectors(table: DeltaTable, location: TableLocation) -> dict[str, DeletionVector]:
    """Decoded data file path -> deletion vector of the loaded table version (delta-rs does not expose the
    descriptors, so they come from sparkonce's own log replay; only on tables that can have them)."""
    if "deletionVectors" not in set(table.protocol().reader_features or []):
        return {}
    from sparkonce.delta.log.table_view import existing_table

    snapshot = existing_table(location, table_version=table.version()).snapshot
    result: dict[str, DeletionVector] = {}
    for path, add in snapshot.files.items():
        descriptor = add.get("deletionVector")
        if isinstance(descriptor, dict):
            local = unquote(path)
            result[local] = DeletionVector.from_action(descriptor, location, data_file=local)
    return result


def prune(
    files: Sequence[DataFile],
    filters: Sequence[Filter],
    partition_columns: Iterable[str],
    derived: Sequence[DerivedPartition] = (),
) -> list[DataFile]:
    """Keep files whose partition values may satisfy every filter on partition columns, and every partition filter
    ``derived`` from a generation expression (:mod:`sparkonce.delta.table.partition_filters`)."""
    keys = set(partition_columns)
    usable: list[tuple[Filter, str]] = []
    for flt in filters:
        column = _column(flt)
        if column is not None and column in keys:
            usable.append((flt, column))
    tests = [(c, t) for c, t in partition_tests(derived, filters) if c in keys]
    if not usable and not tests:
        return list(files)
    return [
        f
        for f in files
        if all(_matches(flt, f.partition_values[column]) for flt, column in usable)
        and all(test(f.partition_values[column]) for column, test in tests)
    ]


def _column(flt: Filter) -> str | None:
    """The top-level column a filter tests, or None (nested columns and filter trees are left to Spark)."""
    attribute: tuple[str, ...] = tuple(getattr(flt, "attribute", ()))
    return str(attribute[0]) if len(attribute) == 1 else None


def _matches(flt: Filter, value: Any) -> bool:
    try:
        if isinstance(flt, IsNull):
            return value is None
        if isinstance(flt, IsNotNull):
            return value is not None
        if isinstance(flt, EqualNullSafe):
            return bool(value == flt.value)
        if value is None:
            return False  # a comparison with null is never true
        if isinstance(flt, EqualTo):
            return bool(value == flt.value)
        if isinstance(flt, In):
            return value in flt.value
        if isinstance(flt, GreaterThan):
            return bool(value > flt.value)
        if isinstance(flt, GreaterThanOrEqual):
            return bool(value >= flt.value)
        if isinstance(flt, LessThan):
            return bool(value < flt.value)
        if isinstance(flt, LessThanOrEqual):
            return bool(value <= flt.value)
    except TypeError:
        return True  # cannot compare: keep the file, Spark evaluates the filter
    return True


def plan_partitions(
    files: Sequence[DataFile], *, target_bytes: int = TARGET_SPLIT_BYTES, parallelism: int | None = None
) -> list[FilesPartition]:
    """Spread files over tasks: at least ``parallelism`` tasks when there are that many files (so every core
    works, as Spark's own file sources do), more when the data exceeds ``target_bytes`` per task. Files are
    placed largest first into the lightest task; the order is deterministic for the same files.
    """
    if not files:
        return []
    cores = parallelism if parallelism is not None else (os.cpu_count() or 1)
    total = sum(f.size for f in files)
    tasks = min(len(files), max(cores, -(-total // target_bytes)))
    bins: list[list[DataFile]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for data_file in sorted(files, key=lambda f: (-f.size, f.path)):
        lightest = min(range(tasks), key=lambda i: (loads[i], i))
        bins[lightest].append(data_file)
        loads[lightest] += data_file.size
    return [FilesPartition(b) for b in bins if b]


def _open_data_file(filesystem: Any, data_file: DataFile, location: TableLocation) -> Any:
    """The data file opened for reading (runs on executors).

    Raises:
        DataFileMissingError: the file is gone, with Delta's error name, the file and the table.
    """
    from sparkonce.errors import DataFileMissingError

    try:
        return filesystem.open_input_file(data_file.path)
    except FileNotFoundError as err:
        at = f" (table version {data_file.table_version})" if data_file.table_version is not None else ""
        raise DataFileMissingError(
            f"[DELTA_FILE_NOT_FOUND_DETAILED] {data_file.uri or data_file.path}: a data file the Delta log of "
            f"{location}{at} references cannot be found. It was deleted outside Delta (not by DELETE, OPTIMIZE or "
            "VACUUM); `sparkonce doctor` lists every missing file, and RESTORE or a replay from the source can bring "
            "the rows back"
        ) from err


def read_files(
    files: Iterable[DataFile], scan: ScanSchema, location: TableLocation, *, batch_size: int = 65536
) -> Iterator[pa.RecordBatch]:
    """Executor side: stream record batches of the table schema out of data files (local or object store),
    without the rows their deletion vectors delete."""
    import pyarrow.parquet as pq

    filesystem = location.filesystem()
    for data_file in files:
        with _open_data_file(filesystem, data_file, location) as source:
            parquet = pq.ParquetFile(source)
            present = set(parquet.schema_arrow.names)
            keep = None
            num_rows = parquet.metadata.num_rows
            if data_file.deletion_vector is not None:
                keep = keep_mask(data_file.deletion_vector, num_rows, data_file=data_file.path)
            if data_file.selected_rows is not None:
                rows_in, rows_not_in = data_file.selected_rows
                keep = ~keep_mask(rows_in, num_rows, data_file=data_file.path)
                if rows_not_in is not None:
                    keep &= keep_mask(rows_not_in, num_rows, data_file=data_file.path)
            first_row = 0
            for batch in parquet.iter_batches(batch_size=batch_size, use_threads=False):
                rows = batch.num_rows
                row_index = np.arange(first_row, first_row + rows, dtype=np.int64) if scan.metadata_column else None
                if keep is not None:
                    selected = keep[first_row : first_row + rows]
                    if not selected.all():
                        batch = batch.filter(pa.array(selected))
                        row_index = row_index[selected] if row_index is not None else None
                first_row += rows
                yield _to_output(batch, data_file, scan, present, row_index)


def has_other_types(data_file: DataFile, scan: ScanSchema, location: TableLocation) -> bool:
    """True when a data file holds a column or nested field whose Parquet type is not the table's (a file written
    before a type change: Delta's ``ReorgTableHelper.fileHasDifferentTypes``); only its footer is read. Runs on
    executors."""
    import pyarrow.parquet as pq

    with _open_data_file(location.filesystem(), data_file, location) as source:
        found = pq.ParquetFile(source).schema_arrow
    for out_field in scan.output:
        physical = scan.physical_names.get(out_field.name, out_field.name)
        if out_field.name in data_file.partition_values or found.get_field_index(physical) < 0:
            continue
        column = pa.array([], type=found.field(physical).type)
        renames = scan.nested_renames.get(out_field.name)
        if renames:
            column = rename_nested(column, renames)
        if _other_type(column.type, out_field.type):
            return True
    return False


def _other_type(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Two Arrow types differ in a primitive of a field both have (nullability, metadata and timestamp units
    aside; a nested field only one has is no difference)."""
    if pa.types.is_struct(found) and pa.types.is_struct(wanted):
        wanted_children = {wanted.field(i).name: wanted.field(i).type for i in range(wanted.num_fields)}
        return any(
            _other_type(found.field(i).type, wanted_children[found.field(i).name])
            for i in range(found.num_fields)
            if found.field(i).name in wanted_children
        )
    if pa.types.is_map(found) and pa.types.is_map(wanted):
        return _other_type(found.key_type, wanted.key_type) or _other_type(found.item_type, wanted.item_type)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(t(found) for t in lists) and any(t(wanted) for t in lists):
        return _other_type(found.value_type, wanted.value_type)
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(wanted):
        return (found.tz is None) != (wanted.tz is None)
    return bool(found != wanted)


def _to_output(
    batch: pa.RecordBatch,
    data_file: DataFile,
    scan: ScanSchema,
    present: set[str],
    row_index: np.ndarray[Any, Any] | None = None,
) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = []
    for out_field in scan.output:
        name = out_field.name
        if scan.metadata_column and name == METADATA_COLUMN:
            arrays.append(_metadata_array(data_file, out_field.type, n, row_index))
            continue
        if name in data_file.partition_values:
            arrays.append(_constant(data_file.partition_values[name], out_field.type, n))
            continue
        physical = scan.physical_names.get(name, name)
        if physical not in present:
            arrays.append(pa.nulls(n, out_field.type))  # column added after this file was written
            continue
        column = batch.column(batch.schema.get_field_index(physical))
        renames = scan.nested_renames.get(name)
        if renames:
            column = rename_nested(column, renames)
        arrays.append(column.cast(out_field.type) if column.type != out_field.type else column)
    return pa.RecordBatch.from_arrays(arrays, schema=scan.output)


def _metadata_array(
    data_file: DataFile, type_: pa.DataType, n: int, row_index: np.ndarray[Any, Any] | None
) -> pa.Array:
    """Spark's ``_metadata`` struct for ``n`` rows of one file (constants but ``row_index``)."""
    uri = data_file.uri or data_file.path
    values = {
        "file_path": uri,
        "file_name": uri.rsplit("/", 1)[-1],
        "file_size": data_file.size,
        "file_block_start": 0,
        "file_block_length": data_file.size,
    }
    children = []
    for child in type_:
        if child.name == "row_index":
            indices = row_index if row_index is not None else np.arange(n, dtype=np.int64)
            children.append(pa.array(indices, type=child.type))
        elif child.name == "file_modification_time":
            millis = data_file.modification_time
            when = None if millis is None else dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
            children.append(_constant(when, child.type, n))
        else:
            children.append(_constant(values[child.name], child.type, n))
    return pa.StructArray.from_arrays(children, fields=list(type_))


def _constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    if value is None:
        return pa.nulls(n, type_)
    scalar = pa.array([value]).cast(type_)
    return scalar.take(pa.array(np.zeros(n, dtype=np.int32)))


class DeltaBatchReader(DataSourceReader):
    """Batch reader: plans on the driver (snapshot, pruning, splits); ``read`` runs on executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        table = open_snapshot(options)
        self.table_version = table.version()
        self.scan = scan_schema(table, metadata_column=options.metadata_column)
        self.files = snapshot_files(table, options.location, self.scan)
        self.derived = derived_partitions(json.loads(table.schema().to_json())["fields"], self.scan.partition_columns)
        self.pushed: list[Filter] = []

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # driver
        # Partition filters prune whole files; every filter is still returned so Spark evaluates it on rows.
        self.pushed = list(filters)
        return filters

    def partitions(self) -> Sequence[InputPartition]:  # driver
        files = prune(self.files, self.pushed, self.scan.partition_columns, self.derived)
        log.info(
            "reading %s at table_version %s: %d of %d file(s) after partition pruning",
            self.options.path,
            self.table_version,
            len(files),
            len(self.files),
        )
        return plan_partitions(files)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        if isinstance(partition, FilesPartition):  # Spark plans one empty task when there are no files
            yield from read_files(partition.files, self.scan, self.options.location)


__all__ = [
    "DataFile",
    "DeltaBatchReader",
    "FilesPartition",
    "has_other_types",
    "ScanSchema",
    "check_protocol_readable",
    "check_reader_features",
    "mapped_columns",
    "open_snapshot",
    "plan_partitions",
    "prune",
    "read_files",
    "scan_schema",
    "snapshot_files",
    "version_as_of_timestamp",
]
