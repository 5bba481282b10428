"""Fan-out: one micro-batch written to several Delta tables from ``foreachBatch``, each idempotent on its own.

A ``foreachBatch`` function that writes one batch to two tables is not exactly-once by itself: if the driver dies
after the Delta commit to the first table and before the checkpoint commit (``commits/N``), Spark re-runs batch N
on restart and the first table would get the rows twice. :class:`FanOutWriter` gives every table its own Delta
``txn``: app id ``f"{app_id}:{target.name}"`` and txn version ``batch_id``. On the re-run the first table's txn
already holds the batch, so its write is skipped, and the tables that the crash did not reach are written::

    writer = FanOutWriter(
        [FanOutTarget("/lake/events"), FanOutTarget("/lake/alerts", select=lambda df: df.where("value > 9"))],
        checkpoint_dir="/ck/fanout",  # the query's checkpoint: app_id = its query id (or pass app_id=...)
    )
    query = (
        stream.writeStream.foreachBatch(writer)
        .option("checkpointLocation", "/ck/fanout")
        .start()
    )

Executors write the data files; the driver makes one Delta commit per table (``df.write.format("delta")`` with
``txnAppId``/``txnVersion``). A batch read by two or more tables is persisted once and unpersisted afterwards.

**One pass** (:meth:`FanOutWriter.write_routed`): when each row belongs to exactly one table, named by a route
column of the batch, one Spark job reads the batch once and every task writes the files of every pending table
(:mod:`sparkonce.sinks.routing`); the driver then makes one Delta commit per table, each with its own txn, as
above. No persist and no second read of the batch; row counts come from the written files. The bronze stage is
built on it (route ``bronze`` / ``quarantine``)::

    writer = FanOutWriter(
        [FanOutTarget("/lake/good", columns={"id": "id"}), FanOutTarget("/lake/bad", columns={"raw": "value"})],
        app_id="my-app",
    )
    writer.write_routed(batch.withColumn("_route", F.when(ok, "good").otherwise("bad")), batch_id, route="_route")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sparkonce.errors import OptionError, SinkError, SparkonceError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

    from sparkonce.crash import CrashPoint
    from sparkonce.delta.log.log_entry import WrittenFile
    from sparkonce.delta.write.files import FileWriterOptions
    from sparkonce.sinks.routing import RoutedTable
    from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

CRASH_POINT: CrashPoint = "between_fanout_tables"

_RESERVED_OPTIONS = {"txnappid", "txnversion", "path"}


@dataclass(frozen=True)
class BatchValue:
    """A column of a one-pass write whose every row holds one value for the whole batch (the batch id, the time it
    was written), set by the tasks as they write the files (configuration; lives on the driver).

    A literal in the batch's projection would do the same, but Spark compiles a number or timestamp literal into
    the projection's generated code: a new value each batch means new code to compile and to warm up each batch.
    """

    value: object
    """The value, a Python value of :attr:`data_type` (``int`` for ``LongType``, an aware ``datetime`` for
    ``TimestampType``, ...), or None."""
    data_type: DataType


@dataclass(frozen=True)
class FanOutTarget:
    """One Delta table of a fan-out and how the batch is shaped for it (configuration; lives on the driver)."""

    path: str
    """The Delta table path (created by the first write when missing)."""
    name: str | None = None
    """A stable name, unique in the fan-out, used in the txn app id; the last path component when None.
    Changing it makes the table look unwritten to a re-run batch, as a new app id would."""
    select: Callable[[DataFrame], DataFrame] | None = None
    """Turns the batch into this table's rows (filter, projection); the whole batch when None."""
    partition_by: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    """Extra Delta write options (``mergeSchema``, ``userMetadata``, ...); txnAppId/txnVersion are set here.
    One-pass writes honour ``mergeSchema`` and ``userMetadata``."""
    columns: Mapping[str, str | BatchValue] | None = None
    """One-pass writes only: this table's columns, table column -> batch column (or a :class:`BatchValue`), in
    table order; every batch column but the route and observed ones when None."""

    @property
    def table_name(self) -> str:
        return self.name if self.name is not None else os.path.basename(self.path.rstrip("/"))

    def location(self) -> TableLocation:
        """The table, with the ``storage.<NAME>`` options among :attr:`options` (over the session's)."""
        from sparkonce.storage import storage_options_from, table_location

        return table_location(self.path, storage_options=storage_options_from(self.options))


@dataclass(frozen=True)
class TargetOutcome:
    """What happened to one table for one batch."""

    name: str
    path: str
    txn_app_id: str
    status: Literal["written", "skipped"]
    table_version: int | None
    """The table version after the write (or the current one when skipped); None if unknown."""
    rows: int | None = None
    """Rows the Delta commit added (one-pass writes; 0 when skipped); None when not known."""


@dataclass(frozen=True)
class FanOutResult:
    """What :meth:`FanOutWriter.write_batch` did for one batch."""

    batch_id: int
    app_id: str
    targets: tuple[TargetOutcome, ...]

    @property
    def written(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.targets if t.status == "written")

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.targets if t.status == "skipped")

    def rows(self, name: str) -> int:
        """Rows the batch added to table ``name`` (0 when skipped or unknown)."""
        return next((t.rows or 0 for t in self.targets if t.name == name), 0)


@dataclass(frozen=True)
class StagedBatch:
    """The files a one-pass write left for the pending tables of one batch, not committed yet. Runs on the driver."""

    batch_id: int
    tables: tuple[RoutedTable, ...]
    """The pending tables, in the fan-out's order."""
    files: Mapping[str, tuple[WrittenFile, ...]]
    """Table name -> the files the tasks wrote for it."""
    skipped: tuple[str, ...]
    """Tables that already hold the batch (their rows were dropped by the tasks)."""
    observed: Mapping[str, frozenset[str]]
    """Observed column -> the distinct values the tasks saw (only when some table was pending)."""


class FanOutWriter:
    """A ``foreachBatch`` function writing each batch to several Delta tables, exactly once per table.

    Runs on the driver (Spark calls ``foreachBatch`` functions there); the per-table writes run their tasks on
    executors and make their Delta commit on the driver.

    Args:
        targets: the tables, written in this order.
        app_id: the base of the txn app ids. Give it, or give ``checkpoint_dir``.
        checkpoint_dir: the query's checkpoint location; the base app id is then the query id recorded in its
            ``metadata`` file (stable across restarts on the same checkpoint), read at the first batch.

    Raises:
        OptionError: no targets, duplicate table names, both or neither of ``app_id`` / ``checkpoint_dir``,
            or reserved write options.
    """

    def __init__(
        self,
        targets: Sequence[FanOutTarget],
        *,
        app_id: str | None = None,
        checkpoint_dir: str | None = None,
    ) -> None:
        if not targets:
            raise OptionError("targets", [], "a fan-out needs at least one target table")
        names = [t.table_name for t in targets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise OptionError("targets", names, f"table names must be unique (give name=...): {duplicates} repeat")
        for target in targets:
            if not target.table_name:
                raise OptionError("targets", target.path, "cannot derive a table name from the path; give name=")
            reserved = sorted(k for k in target.options if k.lower() in _RESERVED_OPTIONS)
            if reserved:
                raise OptionError(f"targets[{target.table_name}].options", reserved, "are set by the fan-out")
        if (app_id is None) == (checkpoint_dir is None):
            raise OptionError(
                "app_id", app_id, "give exactly one of app_id and checkpoint_dir (the query id is read from it)"
            )
        if app_id is not None and not app_id.strip():
            raise OptionError("app_id", app_id, "must not be empty")
        self.targets = tuple(targets)
        self._app_id = app_id
        self.checkpoint_dir = checkpoint_dir

    @property
    def app_id(self) -> str:
        """The base txn app id: the one given, or the query id from the checkpoint metadata."""
        if self._app_id is None:
            from sparkonce.checkpoint.query import read_query_id

            assert self.checkpoint_dir is not None
            self._app_id = read_query_id(self.checkpoint_dir)
        return self._app_id

    def txn_app_id(self, target: FanOutTarget) -> str:
        """The Delta txn app id of ``target``: ``f"{app_id}:{table name}"``."""
        return f"{self.app_id}:{target.table_name}"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry point. Runs on the driver."""
        self.write_batch(batch_df, batch_id)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> FanOutResult:
        """Write ``batch_df`` to every target not yet holding ``batch_id``. Runs on the driver.

        Raises:
            SinkError: a table write failed; the message names the table, app id and batch id. Tables written
                before it keep the batch, and the re-run of the batch skips them.
        """
        if batch_id < 0:
            raise OptionError("batch_id", batch_id, "must be a non-negative micro-batch id")
        pending: list[FanOutTarget] = []
        outcomes: dict[str, TargetOutcome] = {}
        for target in self.targets:
            if self._already_written(target, batch_id):
                outcomes[target.table_name] = self._outcome(target, "skipped")
            else:
                pending.append(target)
        persisted = len(pending) > 1
        if persisted:
            batch_df.persist()
        try:
            for index, target in enumerate(pending):
                if index > 0:
                    crash_point_between_tables(batch_id)
                outcomes[target.table_name] = self._write(target, batch_df, batch_id)
        finally:
            if persisted:
                batch_df.unpersist()
        return FanOutResult(
            batch_id=batch_id,
            app_id=self.app_id,
            targets=tuple(outcomes[t.table_name] for t in self.targets),
        )

    # -- one pass ---------------------------------------------------------------------------------------------------

    def write_routed(self, batch_df: DataFrame, batch_id: int, *, route: str) -> FanOutResult:
        """Write each row of ``batch_df`` to the table its ``route`` column names, in one Spark job. Runs on the driver.

        Raises:
            OptionError: the route column or a target's column is not in the batch.
            SinkError: a task or a table's Delta commit failed (tables committed before it keep the batch).
        """
        return self.commit_staged(self.stage_routed(batch_df, batch_id, route=route))

    def stage_routed(
        self, batch_df: DataFrame, batch_id: int, *, route: str, observe: Sequence[str] = ()
    ) -> StagedBatch:
        """Write the files of every table not yet holding ``batch_id`` in one Spark job; commit nothing.
        Runs on the driver.

        ``observe`` names array-of-string columns whose distinct values come back in :attr:`StagedBatch.observed`
        from the same job (the bronze stage finds undeclared JSON fields this way). Follow with
        :meth:`commit_staged` or :meth:`discard`.

        Raises:
            OptionError: the route column or a target's column is not in the batch.
            SinkError: a task failed (the files it wrote are deleted; other tasks' files stay unreferenced).
        """
        from sparkonce.delta.table.schema import arrow_schema_for_spark
        from sparkonce.sinks.routing import RESULT_DDL, RoutedFileWriter, RoutedTable, written_file

        if batch_id < 0:
            raise OptionError("batch_id", batch_id, "must be a non-negative micro-batch id")
        schema = batch_df.schema
        names = schema.fieldNames()
        for column in (route, *observe):
            if column not in names:
                raise OptionError("route" if column == route else "observe", column, f"is not a column of {names}")
        pending = [t for t in self.targets if not self._already_written(t, batch_id)]
        skipped = tuple(t.table_name for t in self.targets if t not in pending)
        tables: list[RoutedTable] = []
        by_name = {f.name: f for f in schema.fields}
        for target in pending:
            columns = (
                dict(target.columns)
                if target.columns is not None
                else {n: n for n in names if n != route and n not in observe}
            )
            missing = sorted(c for c in columns.values() if isinstance(c, str) and c not in by_name)
            if missing:
                raise OptionError(f"targets[{target.table_name}].columns", missing, f"are not columns of {names}")
            from pyspark.sql.types import StructField, StructType

            fields = [
                StructField(t, s.data_type, True)
                if isinstance(s, BatchValue)
                else StructField(t, by_name[s].dataType, by_name[s].nullable)
                for t, s in columns.items()
            ]
            arrow_schema = arrow_schema_for_spark(StructType(fields))
            tables.append(
                RoutedTable(
                    name=target.table_name,
                    file_options=self._file_options(target),
                    columns=tuple(
                        (t, _batch_value(s, arrow_schema.field(t).type, f"targets[{target.table_name}].columns.{t}"))
                        if isinstance(s, BatchValue)
                        else (t, s)
                        for t, s in columns.items()
                    ),
                    arrow_schema=arrow_schema,
                )
            )
        if not tables:
            return StagedBatch(batch_id, (), {}, skipped, {})
        function = RoutedFileWriter(tuple(tables), route, tuple(observe), batch_id)
        try:
            rows = batch_df.mapInArrow(function, RESULT_DDL).collect()
        except SparkonceError:
            raise
        except Exception as err:
            raise SinkError(
                f"one-pass fan-out of batch {batch_id} (app id {self.app_id}) to "
                f"{[t.name for t in tables]} failed: {_first_line(err)}"
            ) from err
        files: dict[str, list[WrittenFile]] = {t.name: [] for t in tables}
        observed: dict[str, set[str]] = {c: set() for c in observe}
        for row in rows:
            if row["kind"] == "file":
                files[row["target"]].append(written_file(row["payload"]))
            else:
                observed[row["target"]].add(row["payload"])
        return StagedBatch(
            batch_id,
            tuple(tables),
            {n: tuple(f) for n, f in files.items()},
            skipped,
            {c: frozenset(v) for c, v in observed.items()},
        )

    def commit_staged(self, staged: StagedBatch) -> FanOutResult:
        """One Delta commit per pending table, each with its txn, in order. Runs on the driver.

        Raises:
            SinkError: a commit failed; tables committed before it keep the batch, the files of the tables after it
                are deleted, and the re-run of the batch writes those tables.
            SchemaMismatchError: a table's schema does not take the rows (no ``mergeSchema``).
        """
        from sparkonce.delta.log.log_entry import commit_metadata
        from sparkonce.delta.table.properties import table_properties
        from sparkonce.delta.txn.commit import BatchTxn, commit_files

        outcomes = {name: self._outcome(self._target(name), "skipped", rows=0) for name in staged.skipped}
        for index, table in enumerate(staged.tables):
            target = self._target(table.name)
            if index > 0:
                crash_point_between_tables(staged.batch_id)
            txn = BatchTxn(self.txn_app_id(target), staged.batch_id)
            options = {k.lower(): v for k, v in target.options.items()}
            try:
                result = commit_files(
                    target.location(),
                    staged.files[table.name],
                    data_schema=table.arrow_schema,
                    partition_by=table.file_options.partition_by,
                    txn=txn,
                    merge_schema=options.get("mergeschema", "false").lower() == "true",
                    custom_metadata=commit_metadata(
                        "WRITE",
                        {"mode": "Append", "partitionBy": list(table.file_options.partition_by)},
                        options.get("usermetadata"),
                    ),
                    written_after=table.file_options.written_after,
                    new_table_properties=table_properties(target.options),
                )
            except BaseException as err:
                self.discard(StagedBatch(staged.batch_id, staged.tables[index:], staged.files, (), {}))
                if isinstance(err, SparkonceError) or not isinstance(err, Exception):
                    raise
                raise SinkError(
                    f"fan-out commit of batch {staged.batch_id} (txn app id {txn.app_id}) to table {table.name} "
                    f"at {target.path} failed: {_first_line(err)}"
                ) from err
            status: Literal["written", "skipped"] = "skipped" if result.skipped else "written"
            outcomes[table.name] = TargetOutcome(
                name=table.name,
                path=target.path,
                txn_app_id=txn.app_id,
                status=status,
                table_version=result.table_version,
                rows=result.rows_added,
            )
            log.info(
                "fan-out batch %d of app %s: table %s (%s) %s, %d row(s), table version %s",
                staged.batch_id,
                self.app_id,
                table.name,
                target.path,
                status,
                result.rows_added,
                result.table_version,
            )
        return FanOutResult(
            batch_id=staged.batch_id,
            app_id=self.app_id,
            targets=tuple(outcomes[t.table_name] for t in self.targets if t.table_name in outcomes),
        )

    def discard(self, staged: StagedBatch) -> None:
        """Delete the files of a staged batch that no Delta commit references. Runs on the driver.

        After a failed commit its files may be the table's all the same (the commit landed and then failed): those
        stay (:func:`sparkonce.delta.txn.cleanup.remove_unreferenced_files`).
        """
        from sparkonce.delta.txn.cleanup import remove_unreferenced_files

        for table in staged.tables:
            remove_unreferenced_files(
                table.file_options.location,
                (f.path for f in staged.files.get(table.name, ())),
                written_after=table.file_options.written_after,
                purpose=f"fan-out batch {staged.batch_id}: discarded files of table {table.name}",
            )

    def _already_written(self, target: FanOutTarget, batch_id: int) -> bool:
        if _committed_version(target.location(), self.txn_app_id(target), batch_id) is None:
            return False
        log.info(
            "fan-out batch %d of app %s: table %s (%s) already holds it, skipped",
            batch_id,
            self.app_id,
            target.table_name,
            target.path,
        )
        return True

    def _file_options(self, target: FanOutTarget) -> FileWriterOptions:
        """How executors write the target's files: its partition columns and, for an existing column-mapped table,
        its column mapping."""
        from sparkonce.delta.log.table_view import current_table
        from sparkonce.delta.table.column_mapping import ColumnMapping
        from sparkonce.delta.table.constraints import CheckConstraints
        from sparkonce.delta.table.generated import GeneratedColumns
        from sparkonce.delta.write.files import FileWriterOptions

        location = target.location()
        table = current_table(location)  # the snapshot this process keeps, brought up to date
        if table is None:
            return FileWriterOptions(location=location, partition_by=tuple(target.partition_by))
        return FileWriterOptions(
            location=location,
            partition_by=tuple(target.partition_by or table.metadata().partition_columns),
            column_mapping=ColumnMapping.of(table),
            generated=GeneratedColumns.of(table, shown=target.table_name),
            constraints=CheckConstraints.of(table, shown=target.table_name),
            written_after=table.version(),
        )

    def _target(self, name: str) -> FanOutTarget:
        return next(t for t in self.targets if t.table_name == name)

    # -- one job per table -------------------------------------------------------------------------------------

    def _write(self, target: FanOutTarget, batch_df: DataFrame, batch_id: int) -> TargetOutcome:
        txn_app_id = self.txn_app_id(target)
        frame = target.select(batch_df) if target.select is not None else batch_df
        writer = frame.write.format("delta").mode("append")
        for key, value in target.options.items():
            writer = writer.option(key, value)
        writer = writer.option("txnAppId", txn_app_id).option("txnVersion", str(batch_id))
        if target.partition_by:
            writer = writer.partitionBy(*target.partition_by)
        try:
            writer.save(target.path)
        except SparkonceError:
            raise
        except Exception as err:
            raise SinkError(
                f"fan-out write of batch {batch_id} (txn app id {txn_app_id}) to table {target.table_name} "
                f"at {target.path} failed: {_first_line(err)}"
            ) from err
        outcome = self._outcome(target, "written")
        log.info(
            "fan-out batch %d of app %s: Delta commit to table %s (%s), table version %s",
            batch_id,
            self.app_id,
            target.table_name,
            target.path,
            outcome.table_version,
        )
        return outcome

    def _outcome(
        self, target: FanOutTarget, status: Literal["written", "skipped"], *, rows: int | None = None
    ) -> TargetOutcome:
        return TargetOutcome(
            name=target.table_name,
            path=target.path,
            txn_app_id=self.txn_app_id(target),
            status=status,
            table_version=_table_version(target.location()),
            rows=rows,
        )


def crash_point_between_tables(batch_id: int) -> None:
    """The ``between_fanout_tables`` crash point: one table of the batch is committed, the next is not."""
    from sparkonce.crash import crash_point

    crash_point(CRASH_POINT, batch_id)


def _committed_version(location: TableLocation, txn_app_id: str, batch_id: int) -> int | None:
    """The table's txn version for ``txn_app_id`` when it is ``>= batch_id`` (already written), else None."""
    from sparkonce.delta.txn.commit import BatchTxn, table_committed_txn_version

    return table_committed_txn_version(location, BatchTxn(txn_app_id, batch_id))


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else repr(err)


def _table_version(location: TableLocation) -> int | None:
    from sparkonce.delta.log.table_view import current_table

    table = current_table(location)
    return None if table is None else table.version()


def _batch_value(value: BatchValue, arrow_type: pa.DataType, option: str) -> pa.Scalar:
    """A :class:`BatchValue` as the Arrow scalar the tasks fill its column with. Runs on the driver.

    Raises:
        OptionError: the value is not of its type.
    """
    import pyarrow as pa

    try:
        return pa.scalar(value.value, arrow_type)
    except (pa.ArrowException, TypeError, ValueError) as err:
        raise OptionError(option, value.value, f"is not a {value.data_type.simpleString()}: {err}") from err


__all__ = ["CRASH_POINT", "BatchValue", "FanOutResult", "FanOutTarget", "FanOutWriter", "StagedBatch", "TargetOutcome"]
