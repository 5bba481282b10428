"""Rewriting data files of a Delta table: the plumbing under merge, delete, update and optimize.

The driver picks the files to read (from the Delta log: paths, sizes, partition values, stats), executors read
them (each row tagged with its file and its position in the file) and write the new files, and the driver makes
ONE Delta commit of ``remove`` (rewritten files) + ``add`` (new files) (+ ``txn``) through
:func:`sparkonce.delta.txn.commit.commit_files`, which checks the commits made since the rewrite read the table by
Delta's rules (:mod:`sparkonce.delta.txn.conflicts`: a blind append is fine; a rewrite of a file read, or a non-blind
append into what was read, is a conflict).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa

from sparkonce.delta.log.actions import AddFile, DeletionVectorDescriptor
from sparkonce.delta.log.log_entry import WrittenFile, commit_metadata
from sparkonce.delta.log.paths import require_fs_path
from sparkonce.delta.read.native import file_rows
from sparkonce.delta.read.reader import (
    METADATA_COLUMN,
    DataFile,
    ScanSchema,
    check_reader_features,
    read_files,
    scan_schema,
)
from sparkonce.delta.table.column_mapping import ColumnMapping
from sparkonce.delta.table.constraints import CheckConstraints
from sparkonce.delta.table.deletion_vectors import DeletionVector, deleted_rows, deletion_vectors_writable
from sparkonce.delta.table.generated import GeneratedColumns
from sparkonce.delta.table.identity import IdentityColumn, IdentityPlan, identity_columns
from sparkonce.delta.table.schema import delta_fields
from sparkonce.delta.table.skipping import top_level_stats_columns
from sparkonce.delta.txn.commit import (
    BatchTxn,
    CommitResult,
    RemovedFile,
    check_rewrite_supported,
    commit_files,
    load_table,
    protocol_action,
)
from sparkonce.delta.txn.conflicts import ReadSet
from sparkonce.delta.write.files import (
    WRITTEN_FILES_DDL,
    FileWriterOptions,
    partition_value_string,
    write_task,
    written_files,
)
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

log = logging.getLogger(__name__)

FILE_COLUMN = "_sparkonce_file"
"""The table-relative path of the file a target row was read from (null for a row that is not in the table)."""
ROW_COLUMN = "_sparkonce_row"
"""The row index of a target row in its file (Spark's ``_metadata.row_index``: deleted rows counted), by which a
deletion vector names it."""


@dataclass(frozen=True)
class TableFile:
    """One active data file of a table version, as the driver plans a rewrite with it."""

    path: str
    """As the ``add`` action names it, relative to the table root."""
    size: int
    partition_values: dict[str, Any]
    """Partition column -> typed value (None for null)."""
    num_records: int | None
    """Rows in the Parquet file, deleted ones included (the ``add`` action's stats)."""
    min_values: dict[str, Any]
    max_values: dict[str, Any]
    deletion_vector: DeletionVectorDescriptor | None = None
    """The ``add`` action's ``deletionVector`` descriptor (rows of the file the table has deleted), if any."""
    deletion_vector_rows: DeletionVector | None = None
    """The same, resolved for executors to load."""
    partition_keys: tuple[tuple[str, str], ...] = ()
    """Logical -> physical partition column names where they differ (column mapping): the ``remove`` action keys
    its ``partitionValues`` as the ``add`` did."""

    @property
    def deleted_rows(self) -> int:
        """Rows of the file its deletion vector deletes (0 without one)."""
        return self.deletion_vector_rows.cardinality if self.deletion_vector_rows is not None else 0

    @property
    def live_records(self) -> int:
        """Rows of the file that are in the table (its deletion vector applied); 0 when the stats are missing."""
        return int(self.num_records or 0) - self.deleted_rows

    def data_file(self, location: TableLocation) -> DataFile:
        """The file as executors read it: its deletion vector applied."""
        return DataFile(
            require_fs_path(location, self.path),
            self.size,
            dict(self.partition_values),
            deletion_vector=self.deletion_vector_rows,
        )

    def removed(self) -> RemovedFile:
        keys = dict(self.partition_keys)
        return RemovedFile(
            self.path,
            self.size,
            {keys.get(k, k): partition_value_string(v) for k, v in self.partition_values.items()},
            deletion_vector=self.deletion_vector,
        )


@dataclass(frozen=True)
class MarkedRows:
    """Rows of a table's files marked deleted with new deletion vectors, not yet committed
    (:func:`sparkonce.delta.ops.row_deletion.mark_deleted`). Made on the driver from what executors wrote."""

    removed: tuple[TableFile, ...] = ()
    """Every file with newly deleted rows: the commit removes it with the deletion vector it was read with."""
    readded: tuple[AddFile, ...] = ()
    """The ``add`` actions of those that keep rows: same path, the new deletion vector (old and new deletes),
    statistics kept with ``tightBounds`` false, as Delta's ``AddFile.removeRows``."""
    deletion_vector_files: tuple[str, ...] = ()
    """The new deletion vector files, relative to the table root."""
    rows: int = 0
    """Rows newly marked deleted."""
    added: int = 0
    """Files that had no deletion vector and get one."""
    updated: int = 0
    """Files whose deletion vector is replaced by a new one."""
    dropped: int = 0
    """Files removed whole (every row deleted) that had a deletion vector."""

    @property
    def removed_whole(self) -> list[TableFile]:
        """The files removed whole: every row is gone."""
        kept = {add["path"] for add in self.readded}
        return [f for f in self.removed if f.path not in kept]

    @property
    def files_removed(self) -> int:
        """Files removed whole: every row is gone."""
        return len(self.removed) - len(self.readded)

    def metrics(self, prefix: str = "") -> dict[str, int]:
        """Delta's deletion vector metrics of the commit (``numDeletionVectorsAdded``, ...; ``prefix`` ``Target``
        for a MERGE's): added and removed count the updated ones too, as Delta's history shows them."""
        return {
            f"num{prefix}DeletionVectorsAdded": self.added + self.updated,
            f"num{prefix}DeletionVectorsRemoved": self.dropped + self.updated,
            f"num{prefix}DeletionVectorsUpdated": self.updated,
        }


@dataclass(frozen=True)
class TableSnapshot:
    """A table version loaded for a rewrite. Runs on the driver."""

    table_uri: str
    location: TableLocation
    table_version: int
    scan: ScanSchema
    partition_columns: tuple[str, ...]
    files: tuple[TableFile, ...]
    configuration: dict[str, str | None]
    column_mapping: ColumnMapping | None = None
    """The table's column mapping, for the files a rewrite writes (None: not column-mapped)."""
    generated: GeneratedColumns | None = None
    """The table's generated columns (:mod:`sparkonce.delta.table.generated`), computed and checked by the writers."""
    constraints: CheckConstraints | None = None
    """The table's CHECK constraints (:mod:`sparkonce.delta.table.constraints`), checked by the writers."""
    identity: tuple[IdentityColumn, ...] = ()
    """The table's identity columns (:mod:`sparkonce.delta.table.identity`), with the high-water marks read."""
    deletion_vectors_writable: bool = False
    """DELETE, UPDATE and MERGE mark rows deleted with deletion vectors instead of rewriting files
    (:func:`sparkonce.delta.table.deletion_vectors.deletion_vectors_writable`)."""

    def read_set(
        self,
        files: Sequence[TableFile],
        *,
        whole_table: bool,
        data_change: bool = True,
        partitions: PartitionCondition | None = None,
    ) -> ReadSet:
        """What a rewrite of this snapshot read, for the conflict check of its commit: ``files``, and the whole
        table or only their partitions (a scan pruned by partition values) and the partitions ``partitions``
        selects (:func:`partition_condition`, files or not). ``data_change=False`` (OPTIMIZE): Delta's
        SnapshotIsolation, where only the removal of a file read conflicts."""
        return ReadSet.of_files(
            self.table_version,
            ((f.path, f.removed().partition_values) for f in files),
            whole_table=whole_table,
            isolation="WriteSerializable" if data_change else "SnapshotIsolation",
            partitions=partitions,
        )

    def stats_columns(self) -> frozenset[str]:
        """The top-level columns whose statistics the files a rewrite writes carry: the table's statistics columns
        (:func:`sparkonce.delta.table.skipping.top_level_stats_columns`)."""
        fields = delta_fields(pa.schema([f for f in self.scan.output if f.name != METADATA_COLUMN]))
        return top_level_stats_columns(fields, self.partition_columns, self.configuration)

    def spark_schema(self) -> StructType:
        from sparkonce.delta.table.schema import spark_schema

        return spark_schema(self.scan.output)


def open_snapshot(table: str | TableLocation, *, operation: str) -> TableSnapshot:
    """Load the newest table version for ``operation`` (``MERGE``, ``DELETE``, ...), with its active files.

    Raises:
        TableNotFoundError: not a Delta table.
        UnsupportedFeatureError: a reader feature sparkonce cannot honour, or a writer feature a rewrite of the
            table would have to honour and sparkonce does not
            (:func:`sparkonce.delta.txn.commit.check_rewrite_supported`).
    """
    location = table_location(table)
    table_uri = table if isinstance(table, str) else str(location)  # as given, for messages
    delta_table = load_table(location)
    check_reader_features(delta_table, table_uri)
    scan = scan_schema(delta_table)
    configuration: dict[str, str | None] = dict(delta_table.metadata().configuration)
    check_rewrite_supported(location, delta_table, table_uri, operation)
    has_dvs = "deletionVectors" in set(delta_table.protocol().reader_features or [])
    return TableSnapshot(
        table_uri=table_uri,
        location=location,
        table_version=int(delta_table.version()),
        scan=scan,
        partition_columns=tuple(delta_table.metadata().partition_columns),
        files=tuple(
            _active_files(
                delta_table,
                scan.partition_columns,
                _deletion_vectors(location, delta_table) if has_dvs else {},
                scan.physical_names,
            )
        ),
        configuration=configuration,
        column_mapping=ColumnMapping.of(delta_table),
        generated=GeneratedColumns.of(delta_table, shown=table_uri),
        constraints=CheckConstraints.of(delta_table, shown=table_uri),
        identity=tuple(identity_columns(json.loads(delta_table.schema().to_json())["fields"])),
        deletion_vectors_writable=deletion_vectors_writable(protocol_action(delta_table), configuration),
    )


def _deletion_vectors(
    location: TableLocation, table: DeltaTable
) -> dict[str, tuple[DeletionVectorDescriptor, DeletionVector]]:
    """Decoded data file path -> its ``add`` action's deletion vector descriptor, and resolved (delta-rs does not
    expose the descriptors: they come from sparkonce's own log replay of the loaded table version)."""
    from sparkonce.delta.log.delta_log import DeltaLog

    result: dict[str, tuple[DeletionVectorDescriptor, DeletionVector]] = {}
    for path, add in DeltaLog(location).snapshot(table.version()).files.items():
        descriptor = add.get("deletionVector")
        if isinstance(descriptor, dict):
            local = unquote(path)
            result[local] = (descriptor, DeletionVector.from_action(descriptor, location, data_file=local))
    return result


def _active_files(
    table: DeltaTable,
    partition_columns: Sequence[str],
    deletion_vectors: Mapping[str, tuple[DeletionVectorDescriptor, DeletionVector]],
    physical_names: Mapping[str, str],
) -> list[TableFile]:
    """The active files, with partition values and top-level min/max stats under logical column names (the log
    keys them by physical name in a column-mapped table)."""
    adds = pa.table(table.get_add_actions(flatten=True))
    columns = adds.column_names
    n = adds.num_rows
    logical = {physical: name for name, physical in physical_names.items()}

    def column(name: str) -> list[Any]:
        return adds.column(name).to_pylist() if name in columns else [None] * n

    def partition_column(name: str) -> list[Any]:
        physical = f"partition.{physical_names.get(name, name)}"
        return column(physical if physical in columns else f"partition.{name}")

    def stats(prefix: str) -> dict[str, list[Any]]:
        found = (c[len(prefix) :] for c in columns if c.startswith(prefix))
        return {logical.get(name, name): adds.column(prefix + name).to_pylist() for name in found}

    paths, sizes, records = column("path"), column("size_bytes"), column("num_records")
    parts = {c: partition_column(c) for c in partition_columns}
    mins, maxs = stats("min."), stats("max.")
    keys = tuple((c, physical_names[c]) for c in partition_columns if c in physical_names)
    files = []
    for i in range(n):
        descriptor, resolved = deletion_vectors.get(unquote(str(paths[i])), (None, None))
        files.append(
            TableFile(
                path=str(paths[i]),
                size=int(sizes[i] or 0),
                partition_values={c: v[i] for c, v in parts.items()},
                num_records=None if records[i] is None else int(records[i]),
                min_values={c: v[i] for c, v in mins.items() if v[i] is not None},
                max_values={c: v[i] for c, v in maxs.items() if v[i] is not None},
                deletion_vector=descriptor,
                deletion_vector_rows=resolved,
                partition_keys=keys,
            )
        )
    return files


# -- executors: read ---------------------------------------------------------------------------------------------


def read_rows(spark: SparkSession, snapshot: TableSnapshot, files: Sequence[TableFile]) -> DataFrame:
    """The rows of ``files`` (read on executors, deletion vectors applied) in the table schema, plus
    :data:`FILE_COLUMN` and :data:`ROW_COLUMN` (the row's index in its file, deleted rows counted, which identifies it
    and is what a deletion vector names). Without files: an empty frame of the same schema.

    Spark's Parquet scan reads them where the native path can (:func:`sparkonce.delta.read.native.file_rows`: a classic
    session, a store Spark reads; deletion vectors applied by an anti-join); else Python workers do."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [*snapshot.spark_schema().fields, StructField(FILE_COLUMN, StringType()), StructField(ROW_COLUMN, LongType())]
    )
    if not files:
        return spark.createDataFrame([], schema)
    native = file_rows(
        spark,
        snapshot.location,
        snapshot.table_version,
        [f.path for f in files],
        file_column=FILE_COLUMN,
        row_column=ROW_COLUMN,
    )
    if native is not None:  # Spark's Parquet scan reads them (sparkonce.delta.read.native)
        return native.select(*[native[f"`{f.name}`"].cast(f.dataType).alias(f.name) for f in schema.fields])
    data_files = [(f.path, f.data_file(snapshot.location)) for f in files]
    scan = snapshot.scan
    location = snapshot.location
    slices = max(1, min(len(files), spark.sparkContext.defaultParallelism))
    listing = spark.createDataFrame([(i,) for i in range(len(files))], "i int").repartition(slices)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _read_task(batches, data_files, scan, location)

    rows: DataFrame = listing.mapInArrow(read, schema)
    return rows


def _read_task(
    batches: Iterator[pa.RecordBatch],
    data_files: Sequence[tuple[str, DataFile]],
    scan: ScanSchema,
    location: TableLocation,
) -> Iterator[pa.RecordBatch]:
    """Executor side: the rows of this task's files, each tagged with its file and its row index in the file
    (deleted rows counted, as Spark's ``_metadata.row_index``: a deletion vector names rows by it)."""
    for listing in batches:
        for index in listing.column(0).to_pylist():
            relative, data_file = data_files[index]
            # the k-th row read is row k + (deleted rows before it): the i-th deleted row d_i comes before it
            # when the d_i - i rows kept before d_i are at most k
            vector = data_file.deletion_vector
            deleted = deleted_rows(vector).astype(np.int64) if vector is not None else np.zeros(0, np.int64)
            kept_before = deleted - np.arange(len(deleted), dtype=np.int64)
            position = 0
            for batch in read_files([data_file], scan, location):
                n = batch.num_rows
                read = np.arange(position, position + n, dtype=np.int64)
                arrays = [
                    *batch.columns,
                    pa.array([relative] * n, pa.string()),
                    pa.array(read + np.searchsorted(kept_before, read, side="right"), pa.int64()),
                ]
                position += n
                yield pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, FILE_COLUMN, ROW_COLUMN])


# -- executors: write --------------------------------------------------------------------------------------------


def write_rows(
    output: DataFrame,
    location: TableLocation,
    partition_by: Sequence[str],
    *,
    max_records_per_file: int | None = None,
    column_mapping: ColumnMapping | None = None,
    generated: GeneratedColumns | None = None,
    constraints: CheckConstraints | None = None,
    stats_columns: frozenset[str] | None = None,
) -> list[WrittenFile]:
    """Write ``output`` into new data files of the table at ``location`` (on executors, one or more files per
    task, partition directories as Delta lays them out); return them for the Delta commit. Nothing is visible
    before it. ``stats_columns``: the columns the files keep statistics for (:meth:`TableSnapshot.stats_columns`;
    None: every column)."""
    options = FileWriterOptions(
        location=location,
        partition_by=tuple(partition_by),
        max_records_per_file=max_records_per_file,
        column_mapping=column_mapping,
        generated=generated,
        constraints=constraints,
        stats_columns=stats_columns,
    )

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from write_task(batches, options)

    return written_files(output.mapInArrow(write, WRITTEN_FILES_DDL).collect())


def as_column(expression: str | Column) -> Column:
    """A SQL expression or Column as a Column."""
    import pyspark.sql.functions as F

    return F.expr(expression) if isinstance(expression, str) else expression


def sql_text(expression: str | Column | None) -> str:
    """An expression as Delta records it in ``operationParameters`` (SQL text)."""
    if expression is None:
        return "true"
    if isinstance(expression, str):
        return expression
    return str(expression).removeprefix("Column<'").removesuffix("'>")


# -- driver: commit ----------------------------------------------------------------------------------------------


def commit_rewrite(
    table: str | TableLocation,
    written: Sequence[WrittenFile],
    removed: Sequence[TableFile],
    *,
    data_schema: pa.Schema,
    operation: str,
    parameters: Mapping[str, Any],
    metrics: Mapping[str, Any],
    txn: BatchTxn | None = None,
    merge_schema: bool = False,
    data_change: bool = True,
    custom_metadata: Mapping[str, Any] | None = None,
    change_files: Sequence[WrittenFile] = (),
    read: ReadSet | None = None,
    identity: IdentityPlan | None = None,
    marked: MarkedRows | None = None,
) -> CommitResult:
    """One Delta commit of ``removed`` + ``written`` (+ ``change_files`` as ``cdc`` actions) (+ ``txn``),
    recording Delta's operation name, parameters and metrics in commitInfo's ``sparkonce`` object (delta-rs
    cannot write them as Delta's own fields). ``read``: what the rewrite read (:meth:`TableSnapshot.read_set`),
    for Delta's conflict check against the commits made since. ``identity``: the identity columns whose values
    the rewrite generated (a MERGE's inserts), whose high-water marks the commit moves. ``marked``: the files whose
    rows the operation marked deleted with deletion vectors (:func:`sparkonce.delta.ops.row_deletion.mark_deleted`):
    each is removed with its old deletion vector and, unless every row is gone, added again with the new one."""
    extra: dict[str, Any] = {"operationMetrics": dict(metrics)}
    if txn is not None:
        extra["batchId"] = txn.txn_version
    metadata = commit_metadata(operation, dict(parameters), None, **extra)
    metadata.update(custom_metadata or {})
    return commit_files(
        table,
        written,
        data_schema=data_schema,
        mode="append",
        txn=txn,
        merge_schema=merge_schema,
        custom_metadata=metadata,
        removes=[f.removed() for f in [*removed, *(marked.removed if marked is not None else ())]],
        data_change=data_change,
        change_files=change_files,
        read=read,
        identity=identity,
        readded=marked.readded if marked is not None else (),
        deletion_vector_files=marked.deletion_vector_files if marked is not None else (),
    )


__all__ = [
    "FILE_COLUMN",
    "MarkedRows",
    "as_column",
    "sql_text",
    "ROW_COLUMN",
    "files_by_partition_predicate",
    "partition_condition",
    "PartitionCondition",
    "TableFile",
    "TableSnapshot",
    "commit_rewrite",
    "open_snapshot",
    "read_rows",
    "write_rows",
    "write_task",
]


def files_by_partition_predicate(
    spark: SparkSession, snapshot: TableSnapshot, condition: str | Column
) -> list[TableFile] | None:
    """The files whose partition values satisfy ``condition``, evaluated by Spark over one row of partition
    values per file (the Delta log's metadata, never the data); None when the condition references other
    columns than the partition columns."""
    import pyspark.sql.functions as F
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import IntegerType, StructField, StructType

    if not snapshot.partition_columns:
        return None
    table_schema = snapshot.spark_schema()
    predicate = as_column(condition)
    try:
        referenced = _referenced_columns(spark.createDataFrame([], table_schema).where(predicate))
    except AnalysisException:  # not a condition on the table's columns: the rewrite's own read says so
        return None
    if referenced is not None and not referenced <= {c.lower() for c in snapshot.partition_columns}:
        return None  # asked of the analyzer, not by a failing analysis (PySpark logs each such error at ERROR)
    fields = {f.name: f for f in table_schema.fields}
    schema = StructType(
        [StructField("_sparkonce_index", IntegerType()), *(fields[c] for c in snapshot.partition_columns)]
    )
    rows = [(i, *(f.partition_values.get(c) for c in snapshot.partition_columns)) for i, f in enumerate(snapshot.files)]
    frame = spark.createDataFrame(rows, schema)
    try:
        chosen = frame.where(F.coalesce(predicate, F.lit(False))).select("_sparkonce_index").collect()
    except AnalysisException:
        return None
    return [snapshot.files[r[0]] for r in chosen]


def _referenced_columns(filtered: DataFrame) -> set[str] | None:
    """The (lower-cased) columns the condition of ``filtered`` (a ``where`` over a frame of the table's columns)
    references, from Spark's analyzed plan; None on Spark Connect (no plan to ask)."""
    jdf = getattr(filtered, "_jdf", None)
    if jdf is None:
        return None
    attributes = jdf.queryExecution().analyzed().references().toSeq()
    return {str(attributes.apply(i).name()).lower() for i in range(attributes.size())}


_INDEX = "_sparkonce_index"


@dataclass(frozen=True, eq=False)
class PartitionCondition:
    """The part of a rewrite's condition over partition columns only, as the partitions the rewrite read, files
    or not (a :class:`~sparkonce.delta.txn.conflicts.PartitionPredicate`): Spark evaluates it over partition values
    cast to the columns' types, as Delta's ``filterFileList`` does. Made by :func:`partition_condition`. Runs on
    the driver (one small Spark job per winning commit that added files)."""

    spark: SparkSession
    text: str
    """The condition, Spark SQL over the partition columns (Catalyst's SQL of the resolved conjuncts)."""
    fields: tuple[StructField, ...]
    """The partition columns, logical names and types."""
    physical: tuple[tuple[str, str], ...]
    """Logical -> physical partition column names where they differ (column mapping)."""

    def first_match(self, partitions: Sequence[Mapping[str, str | None]]) -> int | None:
        """The index of the first ``partitionValues`` map (as the log writes them) the condition selects."""
        import pyspark.sql.functions as F
        from pyspark.sql.types import IntegerType, StringType, StructField, StructType

        keys = dict(self.physical)
        rows = [
            (i, *(values.get(keys.get(f.name, f.name)) for f in self.fields)) for i, values in enumerate(partitions)
        ]
        strings = [StructField(f.name, StringType()) for f in self.fields]
        schema = StructType([StructField(_INDEX, IntegerType()), *strings])
        typed = self.spark.createDataFrame(rows, schema).select(
            _INDEX, *(F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in self.fields)
        )
        found = typed.where(F.coalesce(F.expr(self.text), F.lit(False))).agg(F.min(_INDEX)).collect()[0][0]
        return None if found is None else int(found)


def partition_condition(
    spark: SparkSession, snapshot: TableSnapshot, condition: str | Column | None
) -> PartitionCondition | None:
    """The partitions a rewrite with ``condition`` read, as Delta's read predicate: the AND of the condition's
    top-level conjuncts that name partition columns only (deterministic ones); None when there is none (the read
    predicate is then the whole table, Delta's ``true``), the table is not partitioned, or the session has no JVM
    to resolve the condition with (Spark Connect; the whole table, stricter than Delta, never looser). Runs on the
    driver."""
    import pyspark.sql.functions as F
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql.types import StructType

    if condition is None or not snapshot.partition_columns:
        return None
    schema = snapshot.spark_schema()
    partition_columns = {c.lower() for c in snapshot.partition_columns}
    try:
        resolved = spark.createDataFrame([], schema).where(as_column(condition))._jdf.queryExecution().analyzed()
        pending, kept = [resolved.condition()], []
        while pending:
            expression = pending.pop()
            if expression.getClass().getSimpleName() == "And":
                pending += [expression.right(), expression.left()]
                continue
            references = expression.references().toSeq()
            names = {str(references.apply(i).name()).lower() for i in range(references.size())}
            if names and names <= partition_columns and expression.deterministic():
                kept.append(str(expression.sql()))
    except (Py4JError, PySparkException, AttributeError):  # Spark Connect: no JVM to split the condition with
        return None
    if not kept:
        return None
    fields = tuple(f for f in schema.fields if f.name.lower() in partition_columns)
    text = " AND ".join(kept)
    frame = spark.createDataFrame([], StructType(list(fields)))
    try:
        frame.where(F.expr(text))
    except PySparkException:  # Catalyst's SQL of a conjunct Spark cannot parse back: the whole table
        return None
    physical = tuple((c, p) for c, p in snapshot.scan.physical_names.items() if c.lower() in partition_columns)
    return PartitionCondition(spark, text, fields, physical)
