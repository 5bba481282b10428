"""Selective overwrites of a Delta table: Delta's ``replaceWhere`` and dynamic partition overwrite.

``df.write.format("delta").mode("overwrite").option("replaceWhere", "day >= '2024-01-02'").save(path)`` replaces
the rows matching the predicate with ``df``'s rows, in ONE Delta commit (operation ``WRITE``, parameter
``predicate``), as Delta's ``WriteIntoDelta`` does with ``spark.databricks.delta.replaceWhere.dataColumns.enabled``
(the default):

1. driver: the predicate is resolved against the table (a bad one fails naming the option, before any data
   moves); the rows it matches are deleted as a DELETE deletes them (:func:`sparkonce.delta.ops.dml.rewrite_rows`): a
   predicate over partition columns only removes whole files by their partition values (metadata only); one over
   data columns rewrites the files holding matching rows without them (executors read and write);
2. executors: ``df``'s rows are written as new files, each row checked against the predicate first (Delta's
   ``replaceWhere`` constraint, ``spark.databricks.delta.replaceWhere.constraintCheck.enabled``); a row that does
   not satisfy it fails the write with Delta's ``DELTA_REPLACE_WHERE_MISMATCH``, and nothing is committed (the
   files step 1 wrote are deleted);
3. driver: one commit of the removed files, the rewritten and the new files (and, when the table has the change
   data feed on and step 1 wrote change data, the deleted rows and the new rows as ``insert`` change rows, as Delta
   records them).

Dynamic partition overwrite (``partitionOverwriteMode=dynamic`` as an option, or the session's
``spark.sql.sources.partitionOverwriteMode``) writes ``df``'s rows and removes the table's files in the partitions
those rows went to (null partition values equal), nothing else; on a table that is not partitioned it is a plain
overwrite, as in Delta. ``replaceWhere`` with ``partitionOverwriteMode=dynamic`` both as options is refused
(``DELTA_REPLACE_WHERE_WITH_DYNAMIC_PARTITION_OVERWRITE``); the session's mode yields to a ``replaceWhere``.

Runs on the driver (the one that holds the SparkSession: the writer shim of :mod:`sparkonce.delta.patches`,
``DataFrameWriterV2`` and sparkonce's SQL call it); executors read and write every data file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.delta.log.table_view import current_table
from sparkonce.delta.ops.dml import rewrite_rows
from sparkonce.delta.ops.rewrite import TableSnapshot, open_snapshot
from sparkonce.delta.table.identity import fill_batches
from sparkonce.delta.table.options import PARTITION_OVERWRITE_MODE_OPTION, REPLACE_WHERE_OPTION, WriteOptions
from sparkonce.delta.txn.cleanup import remove_unreferenced_files
from sparkonce.delta.txn.commit import CommitResult
from sparkonce.delta.txn.conflicts import ReadSet, partition_key
from sparkonce.delta.write.cdf import CHANGE_DATA_DIR, CHANGE_TYPE_COLUMN, cdf_enabled
from sparkonce.delta.write.files import (
    WRITTEN_FILES_DDL,
    FileWriterOptions,
    TableFileWriter,
    WrittenFile,
    written_batch,
    written_files,
)
from sparkonce.delta.writer import DeltaBatchWriter
from sparkonce.errors import ConstraintViolationError, OptionError, analysis_error, unsupported_operation_error
from sparkonce.sqltext.lexer import tokenize

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

log = logging.getLogger(__name__)

PARTITION_OVERWRITE_MODE_CONF = "spark.sql.sources.partitionOverwriteMode"
DYNAMIC_OVERWRITE_ENABLED_CONF = "spark.databricks.delta.dynamicPartitionOverwrite.enabled"
DATA_COLUMNS_CONF = "spark.databricks.delta.replaceWhere.dataColumns.enabled"
CONSTRAINT_CHECK_CONF = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"
SESSION_CONFS = (
    PARTITION_OVERWRITE_MODE_CONF,
    DYNAMIC_OVERWRITE_ENABLED_CONF,
    DATA_COLUMNS_CONF,
    CONSTRAINT_CHECK_CONF,
)
"""The session settings a selective overwrite reads (:func:`session_settings`)."""
CHECK_COLUMN = "_sparkonce_replace_where"
"""The column the new rows carry to the writing tasks: the ``replaceWhere`` predicate's value on the row."""
MISMATCH = "DELTA_REPLACE_WHERE_MISMATCH"


def session_settings(spark: SparkSession) -> dict[str, str]:
    """The session's settings of :data:`SESSION_CONFS` that are set. Runs on the driver."""
    found: dict[str, str] = {}
    for key in SESSION_CONFS:
        value = spark.conf.get(key, None)
        if value is not None:
            found[key] = str(value)
    return found


def _flag(settings: Mapping[str, str], key: str) -> bool:
    value = settings.get(key, "true").strip().lower()
    if value not in ("true", "false"):
        raise OptionError(key, value, "must be true or false")
    return value == "true"


@dataclass(frozen=True)
class SelectiveOverwrite:
    """What an overwrite replaces, from its options and the session's settings. Driver only."""

    replace_where: str | None
    """The ``replaceWhere`` predicate."""
    dynamic: bool
    """Dynamic partition overwrite asked for (the option, else the session's mode)."""
    data_columns: bool
    """``spark.databricks.delta.replaceWhere.dataColumns.enabled``: the predicate may name data columns."""
    check_rows: bool
    """``spark.databricks.delta.replaceWhere.constraintCheck.enabled``: every new row must satisfy the predicate."""

    @classmethod
    def of(cls, options: WriteOptions, settings: Mapping[str, str]) -> SelectiveOverwrite | None:
        """The selective overwrite ``options`` ask for, or None for a whole-table one.

        Raises:
            OptionError: a session setting that is not a boolean, or a partition overwrite mode Spark does not have.
            UnsupportedFeatureError: dynamic partition overwrite asked for while
                ``spark.databricks.delta.dynamicPartitionOverwrite.enabled`` is false (Delta's
                ``DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED``).
        """
        mode = options.partition_overwrite_mode
        if mode is None:
            raw = settings.get(PARTITION_OVERWRITE_MODE_CONF, "static").strip().lower()
            if raw not in ("static", "dynamic"):
                raise OptionError(PARTITION_OVERWRITE_MODE_CONF, raw, "must be static or dynamic")
            mode = "dynamic" if raw == "dynamic" else "static"
        dynamic = mode == "dynamic"
        if dynamic and not _flag(settings, DYNAMIC_OVERWRITE_ENABLED_CONF):
            raise unsupported_operation_error(
                "DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED",
                "Dynamic partition overwrite mode is specified by session config or write options, but it is "
                "disabled by `delta.dynamicPartitionOverwrite.enabled=false`.",
            )
        if options.replace_where is None and not dynamic:
            return None
        return cls(
            replace_where=options.replace_where,
            dynamic=dynamic,
            data_columns=_flag(settings, DATA_COLUMNS_CONF),
            check_rows=_flag(settings, CONSTRAINT_CHECK_CONF),
        )

    def parameters(self) -> dict[str, Any]:
        """What Delta adds to the ``WRITE`` parameters: ``predicate`` and ``isDynamicPartitionOverwrite``."""
        params: dict[str, Any] = {}
        if self.replace_where is not None:
            params["predicate"] = self.replace_where
        if self.dynamic:
            params["isDynamicPartitionOverwrite"] = True
        return params


def overwrite_selectively(
    spark: SparkSession, df: DataFrame, options: Mapping[str, str], settings: Mapping[str, str]
) -> CommitResult | None:
    """``df`` written to the Delta table of ``options`` (``path``, ``replaceWhere``, ``partitionOverwriteMode``,
    and every other write option) in mode overwrite, replacing what the options select (module docstring); a
    whole-table overwrite when they select nothing. ``settings``: the session's (:func:`session_settings`).
    Returns the commit, or None when the write was skipped (its ``txnAppId``/``txnVersion`` already in the table).
    Runs on the driver; executors write.

    Raises:
        SqlError: a ``replaceWhere`` that does not resolve against the table (``DELTA_FAILED_RECOGNIZE_PREDICATE``),
            names a data column while ``...replaceWhere.dataColumns.enabled`` is false
            (``DELTA_NON_PARTITION_COLUMN_REFERENCE``), or a new row outside it (``DELTA_REPLACE_WHERE_MISMATCH``);
            ``replaceWhere`` beside the ``partitionOverwriteMode=dynamic`` option, or dynamic partition overwrite
            with ``overwriteSchema`` (Delta's error classes). Nothing is committed.
        OptionError, SchemaMismatchError, CommitConflictError: as any write (:class:`DeltaBatchWriter`).
    """
    given = WriteOptions.parse(options)
    selective = SelectiveOverwrite.of(given, settings)
    table = current_table(given.location)
    partitioned = table is not None and bool(table.metadata().partition_columns)
    if given.replace_where is not None and given.partition_overwrite_mode == "dynamic" and partitioned:
        raise analysis_error(
            "DELTA_REPLACE_WHERE_WITH_DYNAMIC_PARTITION_OVERWRITE",
            "A 'replaceWhere' expression and 'partitionOverwriteMode'='dynamic' cannot both be set in the "
            "DataFrameWriter options.",
        )
    replace_where = selective.replace_where if selective is not None else None
    dynamic = selective is not None and selective.dynamic and replace_where is None and partitioned
    if dynamic and given.overwrite_schema:
        raise analysis_error(
            "DELTA_OVERWRITE_SCHEMA_WITH_DYNAMIC_PARTITION_OVERWRITE",
            "'overwriteSchema' cannot be used in dynamic partition overwrite mode.",
        )
    planned = dataclasses.replace(
        given,
        replace_where=None,
        partition_overwrite_mode=None,
        save_mode="overwrite",
        overwrite_schema=given.overwrite_schema and replace_where is None,  # Delta ignores it beside replaceWhere
    )
    writer = DeltaBatchWriter(planned, df.schema, overwrite=True)
    if writer.skip_reason is not None:
        log.info("Delta write to %s skipped, %s", given.path, writer.skip_reason)
        return None
    parameters = {**writer.write_parameters(), **(selective.parameters() if selective is not None else {})}
    if table is None or (replace_where is None and not dynamic):  # a new table, or an unpartitioned one
        files = write_new_rows(df, writer.file_options)
        return writer.commit_written(files, written_after=writer.file_options.written_after, parameters=parameters)
    snapshot = open_snapshot(given.location, operation="WRITE")
    if dynamic:
        return _overwrite_partitions(df, writer, snapshot, parameters)
    assert replace_where is not None and selective is not None
    return _replace_where(spark, df, writer, snapshot, selective, replace_where, parameters)


def _replace_where(
    spark: SparkSession,
    df: DataFrame,
    writer: DeltaBatchWriter,
    snapshot: TableSnapshot,
    selective: SelectiveOverwrite,
    predicate: str,
    parameters: dict[str, Any],
) -> CommitResult:
    """The rows of ``snapshot`` matching ``predicate`` deleted, ``df``'s rows (each checked) added: one commit."""
    columns = _resolve(spark, snapshot, predicate, writer.options.path)
    if not selective.data_columns:
        others = [c for c in columns if c.lower() not in {p.lower() for p in snapshot.partition_columns}]
        if others:
            raise analysis_error(
                "DELTA_NON_PARTITION_COLUMN_REFERENCE",
                f"Predicate references non-partition column '{others[0]}'. Only the partition columns may be "
                f"referenced: [{', '.join(snapshot.partition_columns)}]",
            )
    generated = _generated_left_out(df, snapshot, columns)
    checked = _checked(df, predicate, writer.options.path, generated) if selective.check_rows and columns else None
    deleted = rewrite_rows(spark, snapshot, predicate, None)
    written_after = min(writer.file_options.written_after, snapshot.table_version)
    shown = _shown_columns([*df.columns, *(c.name for c in generated)], columns)
    try:
        files = write_new_rows(
            checked if checked is not None else df,
            writer.file_options,
            check=_Check(predicate, shown) if checked is not None else None,
            change_data=cdf_enabled(snapshot.configuration) and bool(deleted.change_files),
        )
    except Exception as err:
        remove_unreferenced_files(
            snapshot.location,
            (f.path for f in [*deleted.written, *deleted.change_files]),
            written_after=written_after,
            purpose=f"failed replaceWhere overwrite of {writer.options.path}",
        )
        mismatch = _mismatch(err)
        if mismatch is None:
            raise
        raise mismatch from err
    added = [f for f in files if not f.path.startswith(f"{CHANGE_DATA_DIR}/")]
    changes = [f for f in files if f.path.startswith(f"{CHANGE_DATA_DIR}/")]
    rewritten = [*added, *deleted.written]
    metrics = {
        "numFiles": len(rewritten),
        "numOutputBytes": sum(f.size for f in rewritten),
        "numOutputRows": sum(f.num_records for f in rewritten),
        "numCopiedRows": deleted.copied,
        "numRemovedFiles": len(deleted.removed),
        "numRemovedBytes": sum(f.size for f in deleted.removed),
        "numDeletedRows": deleted.changed,
        "numAddedChangeFiles": len(changes) + len(deleted.change_files),
    }
    return writer.commit_written(
        rewritten,
        written_after=written_after,
        removes=[f.removed() for f in deleted.removed],
        change_files=[*deleted.change_files, *changes],
        read=deleted.read,
        parameters=parameters,
        metrics=metrics,
    )


def _overwrite_partitions(
    df: DataFrame, writer: DeltaBatchWriter, snapshot: TableSnapshot, parameters: dict[str, Any]
) -> CommitResult:
    """``df``'s rows added and the table's files in the partitions they went to removed: one commit."""
    written_after = min(writer.file_options.written_after, snapshot.table_version)
    files = write_new_rows(df, writer.file_options)
    partitions = {partition_key(f.partition_values) for f in files}
    removed = [f for f in snapshot.files if partition_key(f.removed().partition_values) in partitions]
    read = ReadSet(
        snapshot.table_version,
        frozenset(partitions | {partition_key(f.removed().partition_values) for f in removed}),
        frozenset(f.path for f in removed),
    )
    metrics = {
        "numFiles": len(files),
        "numOutputBytes": sum(f.size for f in files),
        "numOutputRows": sum(f.num_records for f in files),
        "numRemovedFiles": len(removed),
        "numRemovedBytes": sum(f.size for f in removed),
    }
    return writer.commit_written(
        files,
        written_after=written_after,
        removes=[f.removed() for f in removed],
        read=read,
        parameters=parameters,
        metrics=metrics,
    )


def _resolve(spark: SparkSession, snapshot: TableSnapshot, predicate: str, shown: str) -> list[str]:
    """The table columns ``predicate`` names, after Spark resolved it against the table's schema.

    Raises:
        SqlError: it does not parse or resolve (``DELTA_FAILED_RECOGNIZE_PREDICATE``, naming the option).
    """
    import pyspark.sql.functions as F
    from pyspark.errors import AnalysisException

    schema = snapshot.spark_schema()
    try:
        spark.createDataFrame([], schema).where(F.expr(predicate))
    except AnalysisException as err:
        raise analysis_error(
            "DELTA_FAILED_RECOGNIZE_PREDICATE",
            f"Cannot recognize the predicate '{predicate}' (option {REPLACE_WHERE_OPTION} of the overwrite of "
            f"{shown}): {_first_line(err)}",
        ) from err
    return _named_columns(predicate, [f.name for f in schema.fields])


def _named_columns(predicate: str, columns: Sequence[str]) -> list[str]:
    """The ``columns`` the predicate's text names (identifiers, back-quoted or not, any case)."""
    words = {t.value.lower() for t in tokenize(predicate) if t.kind in ("word", "quoted")}
    return [c for c in columns if c.lower() in words]


def _shown_columns(data_columns: Sequence[str], named: Sequence[str]) -> tuple[str, ...]:
    """The data columns a mismatch message shows: those the predicate names (Delta shows its references)."""
    wanted = {c.lower() for c in named}
    return tuple(c for c in data_columns if c.lower() in wanted) or tuple(data_columns)


@dataclass(frozen=True)
class _Generated:
    """A generated column of the table, as Spark computes it for the ``replaceWhere`` check (driver only)."""

    name: str
    expression: str
    data_type: DataType


def _generated_left_out(df: DataFrame, snapshot: TableSnapshot, named: Sequence[str]) -> list[_Generated]:
    """The table's generated columns the predicate names (``named``) and ``df`` leaves out: the write computes
    them, and Delta checks the ``replaceWhere`` constraint on the row with them."""
    if snapshot.generated is None:
        return []
    present = {c.lower() for c in df.columns}
    wanted = {c.lower() for c in named}
    types = {f.name.lower(): f.dataType for f in snapshot.spark_schema().fields}
    return [
        _Generated(c.name, c.expression, types[c.name.lower()])
        for c in snapshot.generated.columns
        if c.name.lower() in wanted and c.name.lower() not in present
    ]


def _checked(df: DataFrame, predicate: str, shown: str, generated: Sequence[_Generated] = ()) -> DataFrame:
    """``df`` with :data:`CHECK_COLUMN`: the predicate on each new row (null counts as false, as a CHECK), the
    ``generated`` columns (left out of ``df``) computed by Spark for it first, as Delta computes generated columns
    before it checks the row (the written files get them from the writing tasks, as on every write).

    Raises:
        SqlError: the predicate does not resolve against ``df``'s columns (naming the option).
    """
    import pyspark.sql.functions as F
    from pyspark.errors import AnalysisException

    try:
        full = df
        for column in generated:
            full = full.withColumn(column.name, F.expr(column.expression).cast(column.data_type))
        return full.select(
            *[F.col(f"`{c}`") for c in df.columns], F.coalesce(F.expr(predicate), F.lit(False)).alias(CHECK_COLUMN)
        )
    except AnalysisException as err:
        raise analysis_error(
            "DELTA_FAILED_RECOGNIZE_PREDICATE",
            f"Cannot recognize the predicate '{predicate}' (option {REPLACE_WHERE_OPTION} of the overwrite of "
            f"{shown}) on the rows written: {_first_line(err)}",
        ) from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _mismatch(err: BaseException) -> Exception | None:
    """Delta's ``DELTA_REPLACE_WHERE_MISMATCH`` for a write job that failed on a row outside the predicate (the
    task's message, from the Python worker's traceback), else None."""
    text = str(err)
    marker = f"[{MISMATCH}] "
    start = text.find(marker)
    if start < 0:
        return None
    lines = text[start + len(marker) :].splitlines()
    kept = lines[:2] + [line for line in lines[2:] if line.startswith(" - ")]
    return analysis_error(MISMATCH, "\n".join(kept).rstrip())


@dataclass(frozen=True)
class _Check:
    """The ``replaceWhere`` check the writing tasks make on each new row (pickled to executors)."""

    predicate: str
    shown_columns: tuple[str, ...]

    def apply(self, table: pa.Table) -> pa.Table:
        """``table`` without :data:`CHECK_COLUMN`, once every row passed. Runs on executors.

        Raises:
            ConstraintViolationError: a row does not (``DELTA_REPLACE_WHERE_MISMATCH``, with its values).
        """
        import pyarrow.compute as pc

        passed = table.column(CHECK_COLUMN)
        if not pc.all(passed).as_py():
            row = pc.index(passed, False).as_py()
            values = "\n".join(
                f" - {c} : {'null' if (v := table.column(c)[row].as_py()) is None else v}" for c in self.shown_columns
            )
            raise ConstraintViolationError(
                f"[{MISMATCH}] Written data does not conform to partial table overwrite condition or constraint "
                f"'{self.predicate}'.\nCHECK constraint EXPRESSION({self.predicate}) ({self.predicate}) violated "
                f"by row with values:\n{values}"
            )
        return table.drop_columns([CHECK_COLUMN])


def write_new_rows(
    df: DataFrame,
    file_options: FileWriterOptions,
    *,
    check: _Check | None = None,
    change_data: bool = False,
) -> list[WrittenFile]:
    """Write ``df``'s rows into new data files (on executors) as the batch writer would (identity values, generated
    columns, CHECK constraints, column mapping, statistics), checking each against ``check`` first; with
    ``change_data`` also as ``insert`` change rows under ``_change_data/``. Returns every file written (change data
    files by their folder); nothing is visible before a Delta commit names them. Runs on the driver."""
    changes = (
        FileWriterOptions(
            location=file_options.location,
            partition_by=file_options.partition_by,
            file_prefix="cdc",
            directory=CHANGE_DATA_DIR,
            column_mapping=file_options.column_mapping,
        )
        if change_data
        else None
    )

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _write_task(batches, file_options, check, changes)

    return written_files(df.mapInArrow(write, WRITTEN_FILES_DDL).collect())


def _write_task(
    batches: Iterator[pa.RecordBatch],
    options: FileWriterOptions,
    check: _Check | None,
    changes: FileWriterOptions | None,
) -> Iterator[pa.RecordBatch]:
    """Executor side of :func:`write_new_rows`: one task's rows into data files (and change data files)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task_id = context.partitionId() if context is not None else 0
    if options.identity:
        batches = fill_batches(options.identity, batches, task_id)
    plain = dataclasses.replace(options, generated=None, constraints=None, identity=())
    with contextlib.ExitStack() as stack:
        data = stack.enter_context(TableFileWriter(plain, task_id=task_id))
        change = stack.enter_context(TableFileWriter(changes, task_id=task_id)) if changes is not None else None
        for batch in batches:
            if not batch.num_rows:
                continue
            table = pa.Table.from_batches([batch])
            if options.generated is not None:  # first, as Delta: the check shows a generated column's value
                table = options.generated.apply(table)
            if check is not None:
                table = check.apply(table)
            if options.constraints is not None:
                options.constraints.apply(table)
            data.write(table)
            if change is not None:
                change.write(table.append_column(CHANGE_TYPE_COLUMN, pa.array(["insert"] * table.num_rows)))
        files = data.close() + (change.close() if change is not None else [])
    if files:
        yield written_batch(files)


def condition_text(df: DataFrame, condition: Column | str) -> str:
    """A condition (``DataFrameWriterV2.overwrite``'s Column) as the SQL text of a ``replaceWhere``: Catalyst's SQL
    of it resolved against ``df``'s columns (``(day = 2)``, ``(value = 'k')``); PySpark's own text of a Column is
    not SQL (``=(day, 2)``). Reads Spark's analyzed plan, an internal API: should its shape change, the Column's
    text is taken and a predicate Spark cannot parse fails naming the option. Runs on the driver."""
    from py4j.protocol import Py4JError

    from sparkonce.delta.ops.rewrite import sql_text

    if isinstance(condition, str):
        return condition
    try:
        return str(df.where(condition)._jdf.queryExecution().analyzed().condition().sql())
    except Py4JError:
        return sql_text(condition)


def wants_selective_overwrite(options: Mapping[str, str], settings: Mapping[str, str]) -> bool:
    """True when an overwrite with these write options goes through :func:`overwrite_selectively`: a
    ``replaceWhere`` or a ``partitionOverwriteMode`` option (checked there, before any data moves), or dynamic
    partition overwrite by the session's mode. Runs on the driver."""
    from sparkonce.options import lookup

    if lookup(options, REPLACE_WHERE_OPTION) is not None or lookup(options, PARTITION_OVERWRITE_MODE_OPTION):
        return True
    return settings.get(PARTITION_OVERWRITE_MODE_CONF, "").strip().lower() == "dynamic"


__all__ = [
    "CONSTRAINT_CHECK_CONF",
    "DATA_COLUMNS_CONF",
    "DYNAMIC_OVERWRITE_ENABLED_CONF",
    "PARTITION_OVERWRITE_MODE_CONF",
    "SESSION_CONFS",
    "SelectiveOverwrite",
    "condition_text",
    "overwrite_selectively",
    "session_settings",
    "wants_selective_overwrite",
    "write_new_rows",
]
