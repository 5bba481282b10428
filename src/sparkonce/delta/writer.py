"""Batch writes: ``df.write.format("delta").mode(...).save(path)``.

The writer object is created on the driver (where options and the schema are checked before any data moves),
pickled to executors, whose ``write`` produces Parquet files, and back on the driver ``commit`` makes one Delta
commit of all files (with a ``txn`` when ``txnAppId``/``txnVersion`` are given).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sparkonce.delta.log.log_entry import WrittenFile, commit_metadata
from sparkonce.delta.log.table_view import current_table
from sparkonce.delta.ops.auto_compact import AutoCompactSettings, compact_after_commit
from sparkonce.delta.table import type_widening
from sparkonce.delta.table.clustering import check_columns, table_clustering
from sparkonce.delta.table.column_mapping import (
    ColumnMapping,
    configured_mode,
    mapping_mode,
    new_table_columns,
    replaced_columns,
    with_new_columns,
)
from sparkonce.delta.table.constraints import CheckConstraints
from sparkonce.delta.table.generated import GeneratedColumns, has_generation_expressions
from sparkonce.delta.table.identity import IdentityPlan, fill_batches, plan_identity
from sparkonce.delta.table.options import WriteOptions
from sparkonce.delta.table.properties import check_existing, new_table_protocol
from sparkonce.delta.table.schema import (
    arrow_schema_for_spark,
    cast_schema,
    delta_fields,
    delta_schema_string,
    has_geo_columns,
    reconcile,
    table_fields,
)
from sparkonce.delta.table.skipping import top_level_stats_columns
from sparkonce.delta.txn.cleanup import Cleanup, remove_unreferenced_files
from sparkonce.delta.txn.commit import (
    BatchTxn,
    CommitMode,
    CommitResult,
    RemovedFile,
    commit_files,
    committed_txn_version,
    refuse_undone_batch,
)
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import OptionError, SchemaMismatchError, SqlError, UnsupportedFeatureError

if TYPE_CHECKING:
    from sparkonce.delta.log.table_view import AnyTable
    from sparkonce.delta.txn.conflicts import ReadSet

log = logging.getLogger(__name__)


@dataclass
class DeltaFilesMessage(WriterCommitMessage):
    """Commit message of one write task: the data files it wrote (none visible until the Delta commit)."""

    files: list[WrittenFile] = field(default_factory=list)
    task_id: int = -1
    written_after: int = -1
    """The table version the driver read before the task wrote (:attr:`FileWriterOptions.written_after`)."""


def _task_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def write_task(file_options: FileWriterOptions, batches: Iterator[pa.RecordBatch]) -> DeltaFilesMessage:
    """Executor side of every Delta write: turn a task's Arrow batches into data files."""
    from sparkonce.crash import crash_point

    task_id = _task_id()
    batch_id = _batch_id_for_diagnostics()
    if file_options.identity:
        batches = fill_batches(file_options.identity, batches, task_id)
    with TableFileWriter(file_options, task_id=task_id) as writer:
        for index, batch in enumerate(batches):
            if batch.num_rows:
                writer.write(file_options.cast(batch))
            if index == 0:
                crash_point("mid_write", batch_id)
        files = writer.close()
    return DeltaFilesMessage(files=files, task_id=task_id, written_after=file_options.written_after)


def refuse_nested_geo(fields: list[dict[str, Any]], table: str) -> None:
    """Refuse a write of geometry or geography values inside a struct, array or map (driver side, before any file):
    sparkonce's writers turn top-level geometry and geography columns into Parquet's GEOMETRY / GEOGRAPHY columns
    (:func:`sparkonce.delta.write.files.geo_as_wkb`), not nested ones.

    Raises:
        UnsupportedFeatureError: naming the columns and the table; nothing is written.
    """
    nested = [str(f["name"]) for f in fields if not isinstance(f["type"], str) and has_geo_columns(json.dumps(f))]
    if nested:
        raise UnsupportedFeatureError(
            f"writing geometry/geography values nested in column(s) {nested} into {table}: sparkonce writes "
            "top-level geometry and geography columns only (Parquet GEOMETRY/GEOGRAPHY); nothing was written"
        )


def _batch_id_for_diagnostics() -> int | None:
    """The streaming batch id Spark puts in the task's local properties (crash points and logs only)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    return int(value) if value is not None else None


def collect_files(messages: list[WriterCommitMessage | None]) -> list[WrittenFile]:
    files: list[WrittenFile] = []
    for message in messages:
        if isinstance(message, DeltaFilesMessage):
            files.extend(message.files)
    return files


def written_after(messages: list[WriterCommitMessage | None]) -> int:
    """The oldest table version the tasks' writers read before writing (-1 when a task saw no table)."""
    versions = [m.written_after for m in messages if isinstance(m, DeltaFilesMessage)]
    return min(versions, default=-1)


def abort_write(
    file_options: FileWriterOptions, messages: list[WriterCommitMessage | None], *, purpose: str
) -> Cleanup:
    """The driver's clean-up when Spark aborts a Delta write: delete the tasks' files that no Delta commit names.

    Spark aborts also when the commit step failed after its Delta commit landed (the commit process died, the
    store lost its answer): those files are the table's, and stay. Runs on the driver.
    """
    return remove_unreferenced_files(
        file_options.location,
        (f.path for f in collect_files(messages)),
        written_after=written_after(messages),
        purpose=purpose,
    )


class DeltaBatchWriter(DataSourceArrowWriter):
    """Batch writer: created and committed on the driver, ``write`` runs on executors."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.options = options
        self.arrow_schema = arrow_schema_for_spark(schema)
        self.mode: CommitMode = "overwrite" if overwrite or options.save_mode == "overwrite" else "append"
        self.file_options = FileWriterOptions(
            location=options.location,
            partition_by=options.partition_by,
            max_records_per_file=options.max_records_per_file,
            compression=options.compression,
        )
        self.txn = (
            BatchTxn(options.txn_app_id, options.txn_version)
            if options.txn_app_id is not None and options.txn_version is not None
            else None
        )
        self.identity: IdentityPlan | None = None
        self.table_configuration: dict[str, str] = options.new_table_properties()
        """The table's properties (those of the table this write creates when there is none)."""
        self.skip_reason = self._plan()
        self.compaction = AutoCompactSettings.from_conf(dict(options.session_conf))
        self.auto_compact = self.compaction.enabled_for(self.table_configuration)
        """Delta's auto compaction after the commit (:mod:`sparkonce.delta.ops.auto_compact`)."""

    def _plan(self) -> str | None:
        """Decide on the driver, before any file is written, whether this write happens at all."""
        if self.options.overwrite_schema and self.mode != "overwrite":
            raise OptionError("overwriteSchema", "true", "needs mode overwrite (use mergeSchema to add columns)")
        check_partition_columns(self.options, self.arrow_schema)
        self.options.location.check_commit_safety()
        self.options.location.check_reachable(for_write=True)
        table = current_table(self.options.location)
        refuse_nested_geo(delta_fields(self.arrow_schema), self.options.path)
        if table is None:
            self.file_options.generated = check_new_table(self.options, self.arrow_schema)
            self.file_options.column_mapping = new_table_mapping(self.options, self.arrow_schema)
            self.file_options.stats_columns = top_level_stats_columns(
                delta_fields(self.arrow_schema), self.options.partition_by, self.table_configuration
            )
            return None
        check_clustering_unchanged(self.options)
        refuse_selective_overwrite(self.options, self.mode)
        if self.options.save_mode == "error":
            raise OptionError(
                "mode",
                "error",
                f"the Delta table {self.options.path} already exists (use append or overwrite)",
            )
        if self.options.save_mode == "ignore":
            return f"mode ignore: the table {self.options.path} already exists"
        self.file_options.written_after = table.version()
        self.table_configuration = {k: str(v) for k, v in table.metadata().configuration.items() if v is not None}
        if self.txn is not None:
            committed = committed_txn_version(table, self.txn)
            if committed is not None:
                refuse_undone_batch(self.options.location, table.version(), self.txn)
                return (
                    f"already completed: txn(app_id={self.txn.app_id}, txn_version={committed}) "
                    f">= {self.txn.txn_version}"
                )
        if self.mode == "overwrite" and self.options.overwrite_schema:
            mode = mapping_mode(table)
            if mode != "none":  # new ids and physical names, as the commit gives them (commit._schema_change)
                schema_string, _ = replaced_columns(
                    delta_schema_string(self.arrow_schema),
                    table_fields(table),
                    table.metadata().configuration,
                    table=str(self.options.location),
                )
                self.file_options.column_mapping = ColumnMapping.from_schema(mode, schema_string)
            self.file_options.stats_columns = top_level_stats_columns(
                delta_fields(self.arrow_schema),
                self.options.partition_by or table.metadata().partition_columns,
                self.table_configuration,
            )
            return None
        self.file_options.partition_by = check_target(table, self.options, self.arrow_schema)
        self._cast_to(files_schema(table, self.options, self.arrow_schema))
        self.file_options.column_mapping = target_mapping(table, self.options, self.arrow_schema)
        self.file_options.stats_columns = top_level_stats_columns(
            table_fields(table), self.file_options.partition_by, self.table_configuration
        )
        self.identity = plan_identity(
            table_fields(table), self.arrow_schema, table=self.options.path, tasks=self.options.identity_tasks
        )
        self.file_options.identity = self.identity.fills if self.identity is not None else ()
        self.file_options.generated = GeneratedColumns.of(table, shown=self.options.path)
        self.file_options.constraints = CheckConstraints.of(table, shown=self.options.path)
        return None

    def _cast_to(self, schema: pa.Schema) -> None:
        """Write files of ``schema`` (:func:`files_schema`) and commit them as such, when it differs from the data's."""
        if schema != self.arrow_schema:
            self.file_options.cast_schema = schema
            self.arrow_schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaFilesMessage:  # executor
        if self.skip_reason is not None:
            return DeltaFilesMessage(task_id=_task_id())
        return write_task(self.file_options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # driver
        if self.skip_reason is not None:
            log.info("Delta write to %s skipped, %s", self.options.path, self.skip_reason)
            return
        self.commit_written(collect_files(messages), written_after=written_after(messages))

    def write_parameters(self) -> dict[str, Any]:
        """Delta's ``WRITE`` parameters: the save mode's name, the partition columns the write gave (``[]`` for a
        write into a partitioned table that names none, as Delta records it; the first commit of a table records
        its own), the ``replaceWhere`` predicate and dynamic partition overwrite when given (the txn is its own
        action). Runs on the driver."""
        save_mode = self.options.save_mode or self.mode
        params: dict[str, Any] = {
            "mode": _SAVE_MODE_NAMES.get(save_mode, save_mode),
            "partitionBy": list(self.options.partition_by),
        }
        if self.options.replace_where is not None:
            params["predicate"] = self.options.replace_where
        if self.options.partition_overwrite_mode == "dynamic":
            params["isDynamicPartitionOverwrite"] = True
        return params

    def commit_written(
        self,
        files: list[WrittenFile],
        *,
        written_after: int,
        removes: list[RemovedFile] | None = None,
        change_files: list[WrittenFile] | None = None,
        read: ReadSet | None = None,
        parameters: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> CommitResult:
        """The Delta commit of ``files`` the executors wrote for this write: the whole overwrite or append, or, when
        ``removes`` is given, an overwrite of those files only (a selective overwrite,
        :mod:`sparkonce.delta.overwrite`, with its change data files, read set, parameters and metrics). Then
        auto compaction when the table asks for it. Runs on the driver."""
        extra: dict[str, Any] = {} if metrics is None else {"operationMetrics": metrics}
        result = commit_files(
            self.options.location,
            files,
            data_schema=self.arrow_schema,
            partition_by=self.file_options.partition_by,
            mode="append" if removes is not None else self.mode,
            txn=self.txn,
            merge_schema=self.options.merge_schema,
            overwrite_schema=self.options.overwrite_schema,
            custom_metadata=commit_metadata(
                "WRITE", parameters or self.write_parameters(), self.options.user_metadata, **extra
            ),
            written_after=written_after,
            new_table_properties=self.options.new_table_properties(),
            replace_configuration=(
                self.options.new_table_properties() if self.options.declared_properties is not None else None
            ),
            table_description=self.options.description,
            new_table_clustering=self.options.cluster_by,
            identity=self.identity,
            checkpoint_part_size=self.options.checkpoint_part_size,
            removes=removes or (),
            change_files=change_files or (),
            read=read,
        )
        from sparkonce.crash import crash_point

        crash_point("after_delta_commit", self.txn.txn_version if self.txn is not None else None)
        if self.auto_compact and not result.skipped:
            compact_after_commit(self.options.location, files, self.compaction)
        return result

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # driver
        abort_write(self.file_options, messages, purpose=f"aborted Delta write to {self.options.path}")


_SAVE_MODE_NAMES = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists", "ignore": "Ignore"}
"""Spark's ``SaveMode`` names, as Delta records them in ``commitInfo.operationParameters.mode``."""


def refuse_selective_overwrite(options: WriteOptions, mode: CommitMode) -> None:
    """An overwrite of an existing table with ``replaceWhere`` or ``partitionOverwriteMode=dynamic`` that reached
    the data source itself: the selective overwrite runs on the driver (:mod:`sparkonce.delta.overwrite`, through
    the writer shim that :func:`sparkonce.register` installs on classic PySpark), never as a whole-table overwrite.
    Runs on the driver.

    Raises:
        UnsupportedFeatureError: it did (e.g. on Spark Connect, which has no shim), naming the option.
    """
    if mode != "overwrite":
        return
    given = (
        ("replaceWhere", options.replace_where)
        if options.replace_where is not None
        else ("partitionOverwriteMode", "dynamic")
        if options.partition_overwrite_mode == "dynamic"
        else None
    )
    if given is not None:
        raise UnsupportedFeatureError(
            f"option {given[0]}={given[1]!r} on an overwrite of {options.path}: sparkonce runs selective overwrites "
            "on the driver through the DataFrameWriter shim of sparkonce.register(spark) (classic PySpark), and "
            "this write reached the Delta data source without it (Spark Connect?). Nothing was written; use "
            "DeltaTable.delete followed by an append, or a classic session"
        )


def check_partition_columns(options: WriteOptions, arrow_schema: pa.Schema) -> None:
    missing = [c for c in options.partition_by if c not in arrow_schema.names]
    if missing:
        raise OptionError("partitionBy", ",".join(options.partition_by), f"{missing} are not data columns")


def check_new_table(options: WriteOptions, arrow_schema: pa.Schema) -> GeneratedColumns | None:
    """Check, before any file is written, that the table this write will create can be created with its
    properties and generated columns; return those. Runs on the driver.

    Raises:
        UnsupportedFeatureError: a property asks every writer for what sparkonce does not do, or a generation
            expression sparkonce cannot evaluate.
        SqlError: a generation expression Delta refuses.
    """
    schema_string = delta_schema_string(arrow_schema)
    new_table_protocol(schema_string, options.new_table_properties())
    check_columns(
        options.cluster_by,
        delta_fields(arrow_schema),
        options.partition_by,
        table=options.path,
        configuration=options.new_table_properties(),
    )
    if not has_generation_expressions(schema_string):
        return None
    return GeneratedColumns.from_fields(json.loads(schema_string)["fields"], arrow_schema, shown=options.path)


def new_table_mapping(options: WriteOptions, arrow_schema: pa.Schema) -> ColumnMapping | None:
    """The column mapping of the table this write creates (None: not column-mapped), as its first Delta commit
    will record it (:func:`sparkonce.delta.table.column_mapping.new_table_columns`). Runs on the driver.

    Raises:
        UnsupportedFeatureError: a column mapping mode Delta does not have.
    """
    configuration = options.new_table_properties()
    schema_string, _ = new_table_columns(delta_schema_string(arrow_schema), configuration, table=str(options.location))
    return ColumnMapping.from_schema(configured_mode(configuration), schema_string)


def target_mapping(table: AnyTable, options: WriteOptions, arrow_schema: pa.Schema) -> ColumnMapping | None:
    """The column mapping the files of a write into the existing ``table`` use (None: not column-mapped): the
    table's, with the ids and physical names its commit will give the columns ``mergeSchema`` adds
    (:func:`sparkonce.delta.table.column_mapping.with_new_columns`). Runs on the driver."""
    mode = mapping_mode(table)
    if mode == "none":
        return None
    current = table_fields(table)
    added = reconcile(
        current,
        delta_fields(arrow_schema),
        merge_schema=options.merge_schema,
        table_id=str(table.metadata().id),
        table_path=options.path,
        type_widening=type_widening.enabled(table.metadata().configuration),
    )
    if not added:
        return ColumnMapping.of(table)
    fields, _ = with_new_columns(current, added, table.metadata().configuration, table=str(options.location))
    return ColumnMapping.from_schema(mode, json.dumps({"type": "struct", "fields": fields}))


def _merge_rules(table: AnyTable, options: WriteOptions, *, stream: bool) -> dict[str, bool]:
    """How a write's types merge with the table's (:func:`check_target`)."""
    enabled = type_widening.enabled(table.metadata().configuration)
    if stream:
        return {"type_widening": enabled and options.merge_schema, "implicit_casts": True}
    return {"type_widening": enabled, "implicit_casts": False}


def files_schema(table: AnyTable, options: WriteOptions, arrow_schema: pa.Schema, *, stream: bool = False) -> pa.Schema:
    """The Arrow schema of the files a write into ``table`` makes, after :func:`check_target`: the data's, with the
    types the table keeps (a narrower type into a wider or widened column; the sink's implicit casts) replaced by
    the table's, to which the executors cast each batch (:func:`write_task`). Runs on the driver."""
    rules = _merge_rules(table, options, stream=stream)
    return cast_schema(
        table_fields(table), arrow_schema, widening=rules["type_widening"], implicit=rules["implicit_casts"]
    )


def check_clustering_unchanged(options: WriteOptions) -> None:
    """A write to an existing table: clustering columns given must be the table's, unless the write replaces the
    table (``overwriteSchema``: the given clustering columns, or none, become the table's, as Delta's REPLACE
    does; :func:`sparkonce.delta.txn.commit.commit_files`). Runs on the driver.

    Raises:
        SqlError: other clustering columns (Delta's ``DELTA_CLUSTERING_COLUMNS_MISMATCH``), or a clustered table
            replaced by a partitioned one (``DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE``).
    """
    if not options.cluster_by and not options.overwrite_schema:
        return  # nothing to compare: spare the log replay
    have = table_clustering(options.location)
    if options.overwrite_schema:
        if have is not None and options.partition_by:
            raise SqlError(
                "[DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE] Replacing a clustered Delta table with a "
                "partitioned table is not allowed."
            )
        return
    if options.cluster_by and tuple(c.lower() for c in options.cluster_by) != tuple(c.lower() for c in have or ()):
        raise SqlError(
            "[DELTA_CLUSTERING_COLUMNS_MISMATCH] The provided clustering columns do not match the existing "
            f"table's.\n- provided: {list(options.cluster_by)}\n- existing: {list(have or ())} (at {options.path})"
        )


def check_target(
    table: AnyTable, options: WriteOptions, arrow_schema: pa.Schema, *, stream: bool = False
) -> tuple[str, ...]:
    """Check data against an existing table, before any file is written; return the partition columns.

    The types merge as Delta's writes merge them (:func:`sparkonce.delta.table.schema.reconcile`): a batch write
    with type widening on the table (a ``mergeSchema`` write then widens); the streaming sink (``stream``) with
    Delta's implicit casts to the table's types, and type widening only with ``mergeSchema``, as Delta's
    ``DeltaSink.getWriteSchema``. Runs on the driver.

    Raises:
        SchemaMismatchError: the schema does not fit (unless ``mergeSchema`` allows it) or ``partitionBy``
            names other columns than the table's.
    """
    reconcile(  # raises when the data does not fit
        table_fields(table),
        delta_fields(arrow_schema),
        merge_schema=options.merge_schema,
        table_id=str(table.metadata().id),
        table_path=options.path,
        **_merge_rules(table, options, stream=stream),
    )
    check_existing(dict(table.metadata().configuration), dict(options.table_properties), table=options.path)
    partitions = tuple(table.metadata().partition_columns)
    if options.partition_by and partitions != options.partition_by:
        raise SchemaMismatchError(
            f"partition columns {list(options.partition_by)} do not match the table's {list(partitions)} "
            f"at {options.path}"
        )
    return partitions


__all__ = [
    "DeltaBatchWriter",
    "DeltaFilesMessage",
    "abort_write",
    "check_new_table",
    "files_schema",
    "refuse_nested_geo",
    "refuse_selective_overwrite",
    "new_table_mapping",
    "target_mapping",
    "collect_files",
    "write_task",
    "written_after",
]
