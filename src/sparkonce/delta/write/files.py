"""Executor side: writing a task's Arrow batches into Parquet data files inside a Delta table directory.

Nothing written here is visible to readers: a file becomes part of the table only when the driver's Delta commit
adds it. A task that fails deletes what it wrote; the files of an aborted or skipped attempt are deleted by the
driver only when no Delta commit references them (:mod:`sparkonce.delta.txn.cleanup`). Files go through the table
location's file system (:meth:`sparkonce.storage.TableLocation.filesystem`): the local disk, or straight to the
object store from the executor.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import string
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.table.column_mapping import RANDOM_PREFIX_LENGTH, ColumnMapping
from sparkonce.delta.table.constraints import CheckConstraints
from sparkonce.delta.table.generated import GeneratedColumns
from sparkonce.delta.table.identity import IdentityFill
from sparkonce.delta.table.schema import geo_type
from sparkonce.delta.txn.cleanup import remove_unreported_files
from sparkonce.errors import SchemaMismatchError
from sparkonce.storage import TableLocation

NULL_PARTITION_DIR = "__HIVE_DEFAULT_PARTITION__"
_STRING_STATS_LIMIT = 32
# Characters Hive/Spark escape in partition directory names.
_ESCAPE = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(0x20)}


@dataclass
class FileWriterOptions:
    """What an executor needs to know to write data files (pickled to executors, storage options included)."""

    location: TableLocation
    partition_by: tuple[str, ...] = ()
    max_records_per_file: int | None = None
    compression: str = "snappy"
    file_prefix: str = "part"
    directory: str = ""
    """A folder under the table root that every file goes into (``_change_data`` for change data files), before
    the partition folders; "" for data files."""
    column_mapping: ColumnMapping | None = None
    """The table's column mapping (None: not column-mapped): files then name columns by physical name and carry
    the field ids, ``partitionValues`` and stats are keyed by physical name, and files go into folders of random
    letters instead of partition folders, as Delta writes them."""
    identity: tuple[IdentityFill, ...] = ()
    """Identity columns the tasks fill (:func:`sparkonce.delta.table.identity.fill_batches`)."""
    generated: GeneratedColumns | None = None
    """The table's generated columns: computed when the data lacks them, checked when given
    (:meth:`GeneratedColumns.apply`)."""
    constraints: CheckConstraints | None = None
    """The table's CHECK constraints: every row written must pass them (:meth:`CheckConstraints.apply`)."""
    stats_columns: frozenset[str] | None = None
    """The logical top-level columns whose statistics go into the ``add`` actions: the table's statistics columns
    (:func:`sparkonce.delta.table.skipping.top_level_stats_columns`, Delta's ``delta.dataSkippingStatsColumns`` /
    ``delta.dataSkippingNumIndexedCols``); None for every column."""
    written_after: int = -1
    """The table version the driver read before any file was written (-1: no table yet). A Delta commit naming
    the files can only be a later one: cleaning up after a failure reads the commits after it
    (:func:`sparkonce.delta.txn.cleanup.remove_unreferenced_files`)."""
    cast_schema: pa.Schema | None = None
    """The Arrow schema each batch is cast to before it is written: the table's types where the write keeps them
    over the data's (:func:`sparkonce.delta.writer.files_schema`); None: batches are written as they come."""

    def cast(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its columns cast to :attr:`cast_schema` (executor side). A value the table's type cannot
        hold (an overflow, a fraction into an integer column) fails the task, naming the column, as Delta's ANSI
        store assignment fails the write.

        Raises:
            SchemaMismatchError: a value does not fit the table's type.
        """
        if self.cast_schema is None:
            return batch
        columns, fields = [], []
        for column, data_field in zip(batch.columns, batch.schema, strict=True):
            index = self.cast_schema.get_field_index(data_field.name)
            target = self.cast_schema.field(index).type if index >= 0 else data_field.type
            if column.type != target:
                try:
                    column = column.cast(target, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                    raise SchemaMismatchError(
                        f"[CAST_OVERFLOW_IN_TABLE_INSERT] Fail to assign a value of {column.type} type to the "
                        f"{target} type column `{data_field.name}` of the Delta table at {self.location}: {err}"
                    ) from err
            columns.append(column)
            fields.append(data_field.with_type(target))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata=batch.schema.metadata))


class GeoArrowWkb(pa.ExtensionType):  # type: ignore[misc]
    """GeoArrow's ``geoarrow.wkb`` Arrow type: WKB values with their CRS (and ``spherical`` edges for a
    geography), which pyarrow's Parquet writer writes as Parquet's ``GEOMETRY`` / ``GEOGRAPHY`` logical types,
    as Spark's Parquet writer does for its geometry and geography columns."""

    def __init__(self, metadata: bytes = b"{}") -> None:
        self._metadata = metadata
        super().__init__(pa.binary(), "geoarrow.wkb")

    def __arrow_ext_serialize__(self) -> bytes:
        return self._metadata

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> GeoArrowWkb:
        return cls(serialized)

    def __reduce__(self) -> tuple[Any, ...]:
        return GeoArrowWkb, (self._metadata,)


def geo_as_wkb(table: pa.Table) -> pa.Table:
    """``table`` with each top-level geometry or geography column, as PySpark hands it to Arrow (a ``struct<srid,
    wkb>``: :func:`sparkonce.delta.table.schema.geo_type`), turned into a :class:`GeoArrowWkb` column of its CRS
    (``OGC:CRS84`` is Parquet's default, written as such; ``SRID:0`` as Spark writes it). Executor side."""
    for index, column_field in enumerate(table.schema):
        spark_type = geo_type(column_field.type)
        if spark_type is None:
            continue
        kind, _, rest = spark_type.partition("(")
        crs, _, edges = rest.rstrip(")").partition(",")
        metadata: dict[str, str] = {"crs": crs.strip()}
        if kind == "geography":
            metadata["edges"] = (edges.strip() or "spherical").lower()
        wkb_type = GeoArrowWkb(json.dumps(metadata).encode())
        chunks = [
            pa.ExtensionArray.from_storage(wkb_type, chunk.flatten()[chunk.type.get_field_index("wkb")])
            for chunk in table.column(index).chunks
        ]
        table = table.set_column(index, column_field.with_type(wkb_type), pa.chunked_array(chunks, type=wkb_type))
    return table


def escape_partition_value(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def partition_directory(values: Mapping[str, str | None]) -> str:
    """The Hive-style folder of a partition (``day=2026-01-01/h=__HIVE_DEFAULT_PARTITION__``), from partition
    column -> serialized value (None for null); "" without partition columns."""
    return "/".join(
        f"{escape_partition_value(n)}={NULL_PARTITION_DIR if v is None else escape_partition_value(v)}"
        for n, v in values.items()
    )


def partition_value_string(value: Any) -> str | None:
    """Delta's string form of a partition value (protocol: "Partition Value Serialization")."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return str(value.strftime("%Y-%m-%d %H:%M:%S.%f"))
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _json_stat(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat(timespec="milliseconds")
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def delta_stats(
    metadata: pq.FileMetaData, schema: pa.Schema, *, columns: Collection[str] | None = None
) -> tuple[int, str]:
    """numRecords, minValues, maxValues and nullCount of top-level primitive columns, from the Parquet footer: of
    ``columns`` only (names as the file spells them: physical names under column mapping) when given."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    top_level = {f.name: f for f in schema if columns is None or f.name in columns}
    for rg_index in range(metadata.num_row_groups):
        row_group = metadata.row_group(rg_index)
        for col_index in range(row_group.num_columns):
            column = row_group.column(col_index)
            name = column.path_in_schema
            if name not in top_level or pa.types.is_nested(top_level[name].type):
                continue
            stats = column.statistics
            if stats is None:
                mins[name] = maxs[name] = None  # unknown: poison this column's min/max
                continue
            nulls[name] = nulls.get(name, 0) + (stats.null_count or 0)
            if (
                not stats.has_min_max
                or pa.types.is_boolean(top_level[name].type)
                or pa.types.is_binary(top_level[name].type)
            ):
                continue
            try:
                lo, hi = _json_stat(stats.min), _json_stat(stats.max)
            except UnicodeDecodeError:  # a string column holding bytes that are not UTF-8 (a Kafka record's)
                lo = hi = None
            if isinstance(lo, str) and (len(lo) > _STRING_STATS_LIMIT or len(str(hi)) > _STRING_STATS_LIMIT):
                lo = hi = None
            if lo is None or hi is None or (name in mins and mins[name] is None):
                mins[name] = maxs[name] = None
                continue
            mins[name] = lo if name not in mins else min(mins[name], lo)
            maxs[name] = hi if name not in maxs else max(maxs[name], hi)
    stats_json = {
        "numRecords": metadata.num_rows,
        "minValues": {k: v for k, v in mins.items() if v is not None},
        "maxValues": {k: v for k, v in maxs.items() if v is not None},
        "nullCount": nulls,
    }
    return metadata.num_rows, json.dumps(stats_json, separators=(",", ":"))


DICTIONARY_MAX_DISTINCT_SHARE = 0.5
"""A column is dictionary-encoded when at most this share of the first rows written to a file are distinct."""


DICTIONARY_MIN_ROWS = 1000
"""Fewer first rows than this say too little: every column keeps dictionary encoding (pyarrow's default)."""


def dictionary_columns(first: pa.Table) -> list[str] | bool:
    """Top-level columns worth dictionary encoding in a file, judged on the first rows written to it.

    Spark hands the writer 10,000-row Arrow batches and each becomes a row group; Parquet writers try a dictionary
    per row group and fall back when it grows, so dictionary encoding on a mostly-distinct column (ids, payloads,
    measurements) costs up to 4x the encoding time and makes the file larger. Low-cardinality columns (devices,
    flags, dates) keep it: smaller files and faster reads.
    """
    import pyarrow.compute as pc  # executors only: the driver's commit process never writes files

    rows = first.num_rows
    if rows < DICTIONARY_MIN_ROWS:
        return True
    chosen = []
    for name, column in zip(first.column_names, first.columns):
        if pa.types.is_nested(column.type):
            continue
        if pc.count_distinct(column, mode="all").as_py() <= DICTIONARY_MAX_DISTINCT_SHARE * rows:
            chosen.append(name)
    return chosen


@dataclass
class _OpenFile:
    writer: pq.ParquetWriter
    sink: Any
    relative_path: str
    partition_values: dict[str, str | None]
    collector: list[pq.FileMetaData] = field(default_factory=list)
    rows: int = 0


class TableFileWriter:
    """Writes one task's rows into Parquet files under the table root. Runs on executors.

    Partition columns are not stored in the files; they go to the directory name and the ``add`` action, as Delta
    does. Files roll over at ``max_records_per_file``. Used as a context manager, it aborts (deletes what it wrote)
    when the block raises: a task reports its files with :meth:`close` or leaves nothing behind::

        with TableFileWriter(options, task_id=task_id) as writer:
            writer.write_batches(batches)
            files = writer.close()
    """

    def __init__(self, options: FileWriterOptions, *, task_id: int = 0) -> None:
        self.options = options
        self.task_id = task_id
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self._done: list[WrittenFile] = []

    def __enter__(self) -> TableFileWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if kind is not None:
            self.abort()

    def write_batches(self, batches: Iterable[pa.RecordBatch]) -> None:
        for batch in batches:
            if batch.num_rows:
                self.write(batch)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = geo_as_wkb(batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch]))
        if self.options.generated is not None:
            table = self.options.generated.apply(table)
        if self.options.constraints is not None:
            self.options.constraints.apply(table)
        mapping = self.options.column_mapping
        for key, values, part in self._split(table):
            if mapping is not None:
                part = mapping.to_physical(part)
                values = {mapping.physical_name(name): value for name, value in values.items()}
            self._append(key, values, part)

    def close(self) -> list[WrittenFile]:
        """Close every open file and return all files written by this task."""
        for key in list(self._open):
            self._close(key)
        return list(self._done)

    def abort(self) -> None:
        """Close and delete everything this task wrote: it reported none of it to the driver. Runs on executors."""
        for key in list(self._open):
            opened = self._open.pop(key)
            opened.writer.close()
            opened.sink.close()
        remove_unreported_files(self.options.location, [written.path for written in self._done])

    # -- internals ---------------------------------------------------------------------------------------------

    def _split(self, table: pa.Table) -> Iterator[tuple[tuple[str | None, ...], dict[str, str | None], pa.Table]]:
        names = self.options.partition_by
        if not names:
            yield (), {}, table
            return
        missing = [n for n in names if n not in table.column_names]
        if missing:
            raise KeyError(f"partition column(s) {missing} not in the data columns {table.column_names}")
        import pyarrow.compute as pc  # here: the commit process, which imports this module, never needs it

        data = table.drop_columns(list(names))
        codes = np.zeros(table.num_rows, dtype=np.int64)
        dictionaries = []
        for name in names:
            encoded = pc.dictionary_encode(table.column(name)).combine_chunks()
            indices = encoded.indices.to_numpy(zero_copy_only=False)
            null_code = len(encoded.dictionary)
            indices = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), null_code, indices)
            codes = codes * (null_code + 1) + indices.astype(np.int64)
            dictionaries.append((encoded.dictionary, null_code))
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        ends = np.r_[starts[1:], len(order)]
        for start, end in zip(starts, ends):
            rows = order[start:end]
            first = int(rows[0])
            values: dict[str, str | None] = {}
            for name in names:
                values[name] = partition_value_string(table.column(name)[first].as_py())
            key = tuple(values[n] for n in names)
            yield key, values, data.take(pa.array(rows))

    def _append(self, key: tuple[str | None, ...], values: dict[str, str | None], table: pa.Table) -> None:
        limit = self.options.max_records_per_file
        offset = 0
        while offset < table.num_rows:
            current = self._open.get(key)
            if current is None:
                current = self._new_file(key, values, table)
            take = table.num_rows - offset
            if limit:
                take = min(take, limit - current.rows)
            chunk = table.slice(offset, take)
            current.writer.write_table(
                chunk.cast(current.writer.schema) if chunk.schema != current.writer.schema else chunk
            )
            current.rows += take
            offset += take
            if limit and current.rows >= limit:
                self._close(key)

    def _new_file(self, key: tuple[str | None, ...], values: dict[str, str | None], first: pa.Table) -> _OpenFile:
        schema = first.schema
        if self.options.column_mapping is not None:  # as Delta: random folders, never the physical names' folders
            directory = "".join(random.choices(string.ascii_letters + string.digits, k=RANDOM_PREFIX_LENGTH))
        else:
            directory = partition_directory(values)
        suffix = f".{self.options.compression}" if self.options.compression != "none" else ""
        name = f"{self.options.file_prefix}-{self.task_id:05d}-{uuid.uuid4()}.c000{suffix}.parquet"
        relative = "/".join(part for part in (self.options.directory, directory, name) if part)
        location = self.options.location
        filesystem = location.filesystem()
        if location.is_local:
            os.makedirs(os.path.dirname(location.fs_path(relative)), exist_ok=True)
        sink = filesystem.open_output_stream(location.fs_path(relative))
        collector: list[pq.FileMetaData] = []
        writer = pq.ParquetWriter(
            sink,
            schema,
            compression=self.options.compression,
            metadata_collector=collector,
            use_dictionary=dictionary_columns(first),
        )
        opened = _OpenFile(writer, sink, relative, values, collector)
        self._open[key] = opened
        return opened

    def _close(self, key: tuple[str | None, ...]) -> None:
        opened = self._open.pop(key)
        opened.writer.close()
        size = opened.sink.tell()
        opened.sink.close()  # on an object store: completes the upload
        wanted = self.options.stats_columns
        mapping = self.options.column_mapping
        if wanted is not None and mapping is not None:
            wanted = frozenset(mapping.physical_name(name) for name in wanted)
        num_records, stats = delta_stats(opened.collector[0], opened.writer.schema, columns=wanted)
        self._done.append(
            WrittenFile(
                path=opened.relative_path,
                size=size,
                partition_values=opened.partition_values,
                modification_time=int(time.time() * 1000),
                num_records=num_records,
                stats=stats,
            )
        )


# -- written files, from executors back to the driver (through mapInArrow) ----------------------------------

WRITTEN_FILES_DDL = (
    "path string, size long, partition_values string, modification_time long, num_records long, stats string"
)
"""The rows a writing task yields (:func:`written_batch`): one per file it wrote."""
_WRITTEN_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("modification_time", pa.int64()),
        ("num_records", pa.int64()),
        ("stats", pa.string()),
    ]
)


def write_task(batches: Iterator[pa.RecordBatch], options: FileWriterOptions) -> Iterator[pa.RecordBatch]:
    """Executor side: one task's rows into Parquet files; yields their descriptions (nothing visible yet)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    with TableFileWriter(options, task_id=context.partitionId() if context else 0) as writer:
        writer.write_batches(batches)
        files = writer.close()
    if files:
        yield written_batch(files)


def written_batch(files: Sequence[WrittenFile]) -> pa.RecordBatch:
    """Executor side: written files as one record batch of :data:`WRITTEN_FILES_DDL`, sent back to the driver."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "path": f.path,
                "size": f.size,
                "partition_values": json.dumps(f.partition_values),
                "modification_time": f.modification_time or int(time.time() * 1000),
                "num_records": f.num_records,
                "stats": f.stats,
            }
            for f in files
        ],
        schema=_WRITTEN_SCHEMA,
    )


def written_files(rows: Sequence[Any]) -> list[WrittenFile]:
    """Driver side: the rows of :func:`written_batch` back as :class:`WrittenFile` for the Delta commit."""
    return [
        WrittenFile(r.path, r.size, json.loads(r.partition_values), r.modification_time, r.num_records, r.stats)
        for r in rows
    ]


__all__ = [
    "NULL_PARTITION_DIR",
    "WRITTEN_FILES_DDL",
    "FileWriterOptions",
    "GeoArrowWkb",
    "TableFileWriter",
    "WrittenFile",
    "geo_as_wkb",
    "delta_stats",
    "escape_partition_value",
    "partition_directory",
    "partition_value_string",
    "write_task",
    "written_batch",
    "written_files",
]
