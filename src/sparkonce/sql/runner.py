"""Run SQL text with Delta's statements: :class:`DeltaSql` is ``spark.sql`` once :func:`sparkonce.register` ran.

Each statement of the text (split at top-level ``;``; comments and a trailing ``;`` are fine) is either

* one of Delta's statements on a Delta table (:func:`sparkonce.sql.parser.parse_statement`): run here through
  sparkonce's Delta operations, the same ones as :class:`sparkonce.DeltaTable`'s, and answered with Delta's
  result columns; or
* anything else: handed to Spark's own ``sql`` with its Delta table references replaced by temporary views of
  sparkonce reads (``delta.`path```, a name in :mod:`sparkonce.delta.table.catalog`, ``VERSION AS OF`` / ``TIMESTAMP AS
  OF`` / ``@v<n>``, and ``(DESCRIBE HISTORY t)`` as a subquery). The views are dropped once Spark has analysed the
  statement, so a name is read afresh by every statement.

Expressions, conditions and queries inside a statement are always Spark's to parse. When the text holds several
statements they run in order and the last one's DataFrame is returned.

Runs on the driver (the data work of every statement runs on executors).

Why one module of ~730 lines: the executor of every parsed Delta statement, one short method per statement kind over
the Delta API (:mod:`sparkonce.delta`); the dispatch over statement kinds is what the module is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkonce.delta.log.table_view import forget_table as forget_view
from sparkonce.delta.overwrite import PARTITION_OVERWRITE_MODE_CONF
from sparkonce.delta.read.native import is_native
from sparkonce.delta.spark_catalog import HELPER_VIEW_PREFIX, forget_stale, forget_table, sync_all, sync_table
from sparkonce.delta.table.catalog import CatalogTable, DeltaCatalog, find_table, table_key
from sparkonce.delta.table.options import METADATA_COLUMN_OPTION, REPLACE_WHERE_OPTION
from sparkonce.errors import SqlError
from sparkonce.sql.parser import parse_statement
from sparkonce.sql.statements import (
    AddColumns,
    AddConstraint,
    AlterClusterBy,
    AlterColumn,
    AlterOther,
    AlterProperties,
    ColumnDefinition,
    ConvertToDelta,
    CreateTable,
    Delete,
    DescribeDetail,
    DescribeHistory,
    DescribeTable,
    DropColumns,
    DropConstraint,
    DropFeature,
    DropTable,
    GenerateManifest,
    Insert,
    Merge,
    Optimize,
    RenameColumn,
    RenameTable,
    ReplaceColumns,
    Restore,
    SetLocation,
    ShowTables,
    ShowTblProperties,
    Statement,
    Update,
    Vacuum,
)
from sparkonce.sqltext.grammar import (
    Cursor,
    Span,
    TableRef,
    parse_alias,
    parse_table,
)
from sparkonce.sqltext.lexer import Token, split_statements, tokenize
from sparkonce.storage import table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

BYPASS_LOCATION_SCHEMA_CHECK_CONF = "spark.databricks.delta.alterLocation.bypassSchemaCheck"

FORMAT = "sparkonce.delta"
_FROM_LIST_END = frozenset(
    {"WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "WINDOW", "UNION", "EXCEPT", "INTERSECT", "MINUS", "SELECT",
     "CLUSTER", "DISTRIBUTE", "SORT", "OFFSET", "QUALIFY"}
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A resolved Delta table."""

    location: str
    catalog: CatalogTable | None
    shown: str


class DeltaSql:
    """``spark.sql`` with Delta's statements and tables (see the module's documentation). Runs on the driver.

    Args:
        spark: The session.
        spark_sql: Spark's own ``sql`` method of that session, which receives everything that is not Delta's.
    """

    serves_delta_catalog = True
    """Delta tables by name resolve in sparkonce's catalog in sessions whose ``spark.sql`` this is
    (:func:`sparkonce.delta.table.catalog.serves_catalog`)."""

    def __init__(self, spark: SparkSession, spark_sql: Callable[..., DataFrame]) -> None:
        self.spark = spark
        self.spark_sql = spark_sql

    def __call__(self, sqlQuery: str, args: Any = None, **kwargs: Any) -> DataFrame:
        """Run ``sqlQuery``; positional ``args`` and keyword arguments are Spark's (parameters, DataFrames) and send
        the text to Spark untouched."""
        if args is not None or kwargs:
            return self.spark_sql(sqlQuery, args, **kwargs)
        spans = split_statements(sqlQuery)
        if not spans:
            return self.spark_sql(sqlQuery)
        result: DataFrame | None = None
        for start, end in spans:
            result = self.statement(sqlQuery[start:end])
        assert result is not None
        return result

    # -- one statement -------------------------------------------------------------------------------------------

    def statement(self, text: str) -> DataFrame:
        """Run one statement (no ``;``)."""
        tokens = tokenize(text)
        parsed = parse_statement(text, tokens)
        if parsed is not None:
            done = self._run(text, parsed)
            if done is not None:
                return done
        return self.query(text)

    def query(self, text: str) -> DataFrame:
        """Spark's ``sql`` on ``text`` with its Delta table references replaced by temporary views."""
        rewritten, views = self._rewrite(text)
        try:
            return self._spark_sql_of(rewritten)
        finally:
            if getattr(self.spark, "_jvm", None) is not None:  # classic: the plan is analysed; Connect re-resolves
                for view in views:
                    self.spark.catalog.dropTempView(view)

    def _spark_sql_of(self, rewritten: str) -> DataFrame:
        """Spark's ``sql`` on a rewritten statement; a persistent view over one of sparkonce's read views is refused
        in sparkonce's words (Spark's names the internal view).

        Raises:
            SqlError: ``INVALID_TEMP_OBJ_REFERENCE`` for a persistent view over a Delta table by path or a time
                travel read.
        """
        from pyspark.errors import AnalysisException

        try:
            return self.spark_sql(rewritten)
        except AnalysisException as err:
            if "INVALID_TEMP_OBJ_REFERENCE" not in str(err) or HELPER_VIEW_PREFIX not in str(err):
                raise
            raise SqlError(
                "[INVALID_TEMP_OBJ_REFERENCE] A persistent view cannot read a Delta table by path (delta.`...`) or "
                "at a table version (VERSION/TIMESTAMP AS OF) in sparkonce: register the table by name (CREATE "
                "TABLE name USING delta LOCATION '...') and select from the name, or make the view TEMPORARY."
            ) from None

    def _run(self, text: str, stmt: Statement) -> DataFrame | None:
        """Run a Delta statement; None when its target is not a Delta table (Spark's statement then)."""
        if isinstance(stmt, DescribeHistory):
            from sparkonce.delta.read.history import history

            return history(self.spark, self.require(stmt.table).location, limit=stmt.limit)
        if isinstance(stmt, DescribeDetail):
            return self._detail(self.require(stmt.table))
        if isinstance(stmt, Vacuum):
            return self._vacuum(self.require(stmt.table), stmt)
        if isinstance(stmt, Optimize):
            from sparkonce.delta.tables import DeltaOptimizeBuilder

            target = self.require(stmt.table)
            where = text[stmt.where.start : stmt.where.end] if stmt.where else None
            builder = DeltaOptimizeBuilder(self.spark, target.location, where)
            return builder.executeZOrderBy(*stmt.zorder_by) if stmt.zorder_by else builder.executeCompaction()
        if isinstance(stmt, Restore):
            from sparkonce.delta.tables import DeltaTable

            table = DeltaTable(self.spark, self.require(stmt.table).location)
            if stmt.table_version is not None:
                return table.restoreToVersion(stmt.table_version)
            assert stmt.timestamp is not None
            return table.restoreToTimestamp(stmt.timestamp)
        if isinstance(stmt, CreateTable):
            return self._create(text, stmt)
        if isinstance(stmt, DropTable):
            return self._drop(stmt)
        if isinstance(stmt, ConvertToDelta):
            return self._convert(text, stmt)
        if isinstance(stmt, ShowTables):
            return self._show_tables(text, stmt)
        resolved = self.resolve(stmt.table)
        if resolved is None:
            if stmt.table.path is not None:
                raise SqlError(f"[DELTA_MISSING_DELTA_TABLE] {stmt.table.path} is not a Delta table.")
            return None  # a table of Spark's catalog: Spark's statement
        target = resolved
        self._no_time_travel(stmt.table, type(stmt).__name__)
        if isinstance(stmt, Delete):
            return self._delete(text, target, stmt)
        if isinstance(stmt, Update):
            return self._update(text, target, stmt)
        if isinstance(stmt, Merge):
            return self._merge(text, target, stmt)
        if isinstance(stmt, Insert):
            return self._insert(text, target, stmt)
        if isinstance(stmt, ShowTblProperties):
            return self._show_properties(target, stmt.key)
        if isinstance(stmt, DescribeTable):
            return self._describe_table(target, stmt.extended)
        if isinstance(stmt, AlterProperties):
            from sparkonce.delta.ops.alter import alter_properties

            alter_properties(target.location, set=stmt.set, unset=stmt.unset, if_exists=stmt.if_exists)
            return self._empty()
        if isinstance(stmt, AddColumns | ReplaceColumns | RenameColumn | DropColumns | AlterColumn):
            self._alter_columns(text, target, stmt)
            return self._empty()
        if isinstance(stmt, GenerateManifest):
            from sparkonce.delta.ops.manifest import generate_symlink_manifest

            generate_symlink_manifest(target.location)
            return self._empty()
        if isinstance(stmt, DropFeature):
            from sparkonce.delta.ops.alter import drop_feature

            drop_feature(target.location, stmt.feature, truncate_history=stmt.truncate_history, spark=self.spark)
            return self._empty()
        if isinstance(stmt, AlterClusterBy):
            from sparkonce.delta.ops.alter import alter_clustering

            alter_clustering(target.location, stmt.columns)
            return self._empty()
        if isinstance(stmt, AddConstraint):
            from sparkonce.delta.ops.alter import add_constraint

            add_constraint(
                self.spark, target.location, stmt.name, _text(text, stmt.expression).strip(), shown=target.shown
            )
            return self._empty()
        if isinstance(stmt, DropConstraint):
            from sparkonce.delta.ops.alter import drop_constraint

            drop_constraint(self.spark, target.location, stmt.name, if_exists=stmt.if_exists, shown=target.shown)
            return self._empty()
        if isinstance(stmt, RenameTable):
            return self._rename(target, stmt)
        if isinstance(stmt, SetLocation):
            return self._set_location(target, stmt)
        if isinstance(stmt, AlterOther):
            raise SqlError(f"{stmt.clause} is not supported by sparkonce's Delta SQL on {target.shown}")
        raise AssertionError(stmt)

    def _alter_columns(
        self, text: str, target: Target, stmt: AddColumns | ReplaceColumns | RenameColumn | DropColumns | AlterColumn
    ) -> None:
        """The column statements (:mod:`sparkonce.delta.ops.alter_columns`); column types are read by Spark's DDL
        parser."""
        from sparkonce.delta.ops import alter_columns

        if isinstance(stmt, AddColumns):
            columns = [alter_columns.NewColumn(c.path[:-1], self._field(text, c), c.position) for c in stmt.columns]
            alter_columns.add_columns(target.location, columns)
        elif isinstance(stmt, ReplaceColumns):
            nested = [c for c in stmt.columns if len(c.path) > 1]
            if nested:
                raise SqlError(f"REPLACE COLUMNS takes top-level columns, not {'.'.join(nested[0].path)}")
            alter_columns.replace_columns(target.location, [self._field(text, c) for c in stmt.columns])
        elif isinstance(stmt, RenameColumn):
            alter_columns.rename_column(target.location, stmt.path, stmt.new_name)
        elif isinstance(stmt, DropColumns):
            alter_columns.drop_columns(target.location, stmt.paths, if_exists=stmt.if_exists)
        else:
            data_type = None
            if stmt.data_type is not None:
                probe = ColumnDefinition(("x",), stmt.data_type)
                data_type = self._field(text, probe)["type"]
            change = alter_columns.ColumnChange(
                comment=stmt.comment, nullable=stmt.nullable, data_type=data_type, position=stmt.position
            )
            alter_columns.change_column(target.location, stmt.path, change)

    def _field(self, text: str, column: ColumnDefinition) -> dict[str, Any]:
        """The schema JSON field of a column definition, as Spark's DDL parser reads it."""
        name = column.path[-1].replace("`", "``")
        ddl = f"`{name}` {_text(text, column.definition)}"
        try:
            fields = self.spark.createDataFrame([], ddl).schema.jsonValue()["fields"]
        except Exception as err:
            raise SqlError(f"column definition {ddl!r}: {err}") from err
        return dict(fields[0])

    # -- tables ----------------------------------------------------------------------------------------------

    def resolve(self, ref: TableRef) -> Target | None:
        """The Delta table ``ref`` names: a path (checked to hold a table only when used), or a name in sparkonce's
        catalog; None for a name sparkonce's catalog does not hold."""
        if ref.path is not None:
            from sparkonce.delta.txn.commit import table_exists

            return Target(ref.path, None, ref.shown) if table_exists(ref.path) else None
        assert ref.name is not None
        entry = find_table(self.spark, ref.name)
        return Target(entry.location, entry, ref.shown) if entry is not None else None

    def require(self, ref: TableRef) -> Target:
        """:meth:`resolve`, or an error in Delta's words.

        Raises:
            SqlError: not a Delta table, or no such table.
        """
        target = self.resolve(ref)
        if target is not None:
            return target
        if ref.path is not None:
            raise SqlError(f"[DELTA_MISSING_DELTA_TABLE] {ref.path} is not a Delta table.")
        raise SqlError(
            f"[TABLE_OR_VIEW_NOT_FOUND] The table or view `{'`.`'.join(ref.name or ())}` cannot be found "
            "among sparkonce's Delta tables (create it with CREATE TABLE ... USING delta, or name it by path: "
            "delta.`/path`)."
        )

    def _view(self, target: Target, ref: TableRef, *, metadata: bool = False) -> tuple[str, bool]:
        """A temporary view of the table ``ref`` names, and whether it may outlive the statement.

        A native read (:mod:`sparkonce.delta.read.native`) re-reads the log at every query (or reads its pinned table
        version), so its view keeps one name per table, version and ``_metadata`` choice and stays: a view the user
        makes over the statement keeps working. A Python data source read holds the snapshot it planned, so its
        view is dropped after the statement.
        """
        reader = self.spark.read.format(FORMAT)
        if metadata:
            reader = reader.option(METADATA_COLUMN_OPTION, "true")
        if ref.table_version is not None:
            reader = reader.option("versionAsOf", str(ref.table_version))
        if ref.timestamp is not None:
            reader = reader.option("timestampAsOf", ref.timestamp)
        frame = reader.load(target.location)
        if not is_native(frame):
            return self._temp_view(frame), False
        key = "|".join((target.location, str(ref.table_version), str(ref.timestamp), str(metadata)))
        name = f"{HELPER_VIEW_PREFIX}{hashlib.sha1(key.encode()).hexdigest()[:16]}"
        frame.createOrReplaceTempView(name)
        return name, True

    def _temp_view(self, frame: DataFrame) -> str:
        name = f"{HELPER_VIEW_PREFIX}{uuid.uuid4().hex[:16]}"
        frame.createOrReplaceTempView(name)
        return name

    def _rewrite(self, text: str) -> tuple[str, list[str]]:
        """``text`` with each Delta table it reads replaced by a temporary view; the views made."""
        tokens = tokenize(text)
        metadata = any(t.kind in ("word", "quoted") and t.value.lower() == "_metadata" for t in tokens)
        pieces: list[str] = []
        views: list[str] = []
        last = 0
        depth = 0
        from_lists: set[int] = set()
        expect_table = False
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if expect_table:
                expect_table = False
                replaced = self._replace_at(text, tokens, i, views, metadata)
                if replaced is not None:
                    start, end, replacement, i = replaced
                    pieces += [text[last:start], replacement]
                    last = end
                    continue
            if token.is_op("("):
                depth += 1
            elif token.is_op(")"):
                from_lists.discard(depth)
                depth -= 1
            elif token.is_word("FROM", "JOIN"):
                expect_table = True
                if token.is_word("FROM"):
                    from_lists.add(depth)
            elif token.is_op(",") and depth in from_lists:
                expect_table = True
            elif token.kind == "word" and token.value.upper() in _FROM_LIST_END:
                from_lists.discard(depth)
            i += 1
        pieces.append(text[last:])
        return "".join(pieces), views

    def _replace_at(
        self, text: str, tokens: list[Token], i: int, views: list[str], metadata: bool
    ) -> tuple[int, int, str, int] | None:
        """A replacement for the table reference at ``tokens[i]``: (start, end, text, next token index)."""
        token = tokens[i]
        if (
            token.is_op("(")
            and i + 2 < len(tokens)
            and tokens[i + 1].is_word("DESCRIBE", "DESC")
            and tokens[i + 2].is_word("HISTORY")
        ):
            close = _matching(tokens, i)
            inner = text[tokens[i + 1].start : tokens[close - 1].end]
            stmt = parse_statement(inner, tokenize(inner))
            assert isinstance(stmt, DescribeHistory)
            from sparkonce.delta.read.history import history

            view = self._temp_view(history(self.spark, self.require(stmt.table).location, limit=stmt.limit))
            views.append(view)
            return token.start, tokens[close].end, view, close + 1
        if token.is_word("TABLE_CHANGES", "TABLE_CHANGES_BY_PATH") and i + 1 < len(tokens) and tokens[i + 1].is_op("("):
            close = _matching(tokens, i + 1)
            view = self._table_changes(token, tokens[i + 2 : close])
            views.append(view)
            return token.start, tokens[close].end, view, close + 1
        if token.kind not in ("word", "quoted"):
            return None
        cursor = Cursor(text, tokens, i)
        try:
            ref = parse_table(cursor)
        except SqlError:
            return None
        if ref.name is not None and ref.name[0].lower() == "delta" and ref.path is None and len(ref.name) == 2:
            return None
        target = self.resolve(ref)
        if target is None:
            if ref.path is not None:
                raise SqlError(f"[DELTA_MISSING_DELTA_TABLE] {ref.path} is not a Delta table.")
            key = table_key(self.spark, ref.name) if ref.name is not None else None
            if key is not None:
                forget_stale(self.spark, *key)
            return None
        if (
            target.catalog is not None
            and ref.table_version is None
            and ref.timestamp is None
            and not metadata
            and sync_table(self.spark, target.catalog)
        ):
            return None  # Spark's catalog resolves the name to sparkonce's read (sparkonce.delta.spark_catalog)
        view, fresh = self._view(target, ref, metadata=metadata)
        if not fresh:
            views.append(view)
        after = Cursor(text, tokens, cursor.pos)
        has_alias = parse_alias(after) is not None
        replacement = view if has_alias or ref.name is None else f"{view} AS `{ref.name[-1]}`"
        return ref.start, ref.end, replacement, cursor.pos

    def _table_changes(self, function: Token, arguments: list[Token]) -> str:
        """A view of Delta's ``table_changes('table', start[, end])`` / ``table_changes_by_path('path', ...)``: the
        table's change data feed, a bound being a table version (number) or a timestamp (string)."""
        name = function.value.lower()
        values = [t for t in arguments if not t.is_op(",")]
        if (
            len(values) not in (2, 3)
            or len(arguments) != 2 * len(values) - 1
            or values[0].kind != "string"
            or any(t.kind not in ("string", "number") for t in values[1:])
        ):
            raise SqlError(
                f"{name}: expected {name}('<table>', <start version or 'timestamp'>[, <end version or 'timestamp'>])"
            )
        if name == "table_changes_by_path":
            ref = TableRef(values[0].value, None, 0, 0)
        else:
            table_text = values[0].value
            ref = parse_table(Cursor(table_text, tokenize(table_text), 0))
        target = self.require(ref)
        reader = self.spark.read.format(FORMAT).option("readChangeFeed", "true")
        for bound, token in zip(("starting", "ending"), values[1:]):
            if token.kind == "number":
                reader = reader.option(f"{bound}Version", token.value)
            else:
                reader = reader.option(f"{bound}Timestamp", token.value)
        return self._temp_view(reader.load(target.location))

    # -- statements ------------------------------------------------------------------------------------------

    def _detail(self, target: Target) -> DataFrame:
        from pyspark.sql import functions as F

        from sparkonce.delta.tables import DeltaTable

        frame = DeltaTable(self.spark, target.location).detail()
        if target.catalog is not None:
            frame = frame.withColumn("name", F.lit(target.catalog.qualified_name))
        return frame

    def _describe_table(self, target: Target, extended: bool) -> DataFrame:
        """``DESCRIBE TABLE [EXTENDED]`` as delta-spark answers it (Spark's rows for its V2 table, checked against
        delta-spark 4.4 by the oracle): the columns in the table's order, the partition columns, and with EXTENDED
        the table's catalog, namespace, name, type (sparkonce's managed flag; MANAGED for a table by path, as
        delta-spark says), comment, location, provider and properties (a clustered table's ``clusteringColumns``
        among them)."""
        from sparkonce.delta.tables import DeltaTable

        schema = self.spark.read.format(FORMAT).load(target.location).schema
        detail = DeltaTable(self.spark, target.location).detail().collect()[0]
        fields = {f.name.lower(): f for f in schema.fields}
        rows: list[tuple[str, str, str | None]] = [
            (f.name, f.dataType.simpleString(), f.metadata.get("comment")) for f in schema.fields
        ]
        if detail.partitionColumns:
            rows += [("# Partition Information", "", ""), ("# col_name", "data_type", "comment")]
            for name in detail.partitionColumns:
                field = fields[name.lower()]
                rows.append((field.name, field.dataType.simpleString(), field.metadata.get("comment")))
        if not extended:
            return self._describe_frame(rows)
        entry = target.catalog
        namespace, table = (entry.database, entry.name) if entry is not None else ("delta", target.location)
        rows += [("", "", ""), ("# Detailed Table Information", "", ""), ("Catalog", "spark_catalog", "")]
        rows += [("Namespace", namespace, ""), ("Database", namespace, ""), ("Table", table, "")]
        rows.append(("Type", "EXTERNAL" if entry is not None and not entry.managed else "MANAGED", ""))
        if detail.description:
            rows.append(("Comment", str(detail.description), ""))
        rows.append(("Location", str(detail.location) if entry is not None else target.location, ""))
        rows.append(("Provider", "delta", ""))
        if entry is not None and entry.managed:
            rows.append(("Is_managed_location", "true", ""))
        properties = _table_properties(target.location)
        if detail.clusteringColumns:
            paths = [c.split(".") for c in detail.clusteringColumns]
            properties["clusteringColumns"] = json.dumps(paths, separators=(",", ":"))
        rows.append(("Table Properties", "[" + ",".join(f"{k}={v}" for k, v in sorted(properties.items())) + "]", ""))
        return self._describe_frame(rows)

    def _describe_frame(self, rows: list[tuple[str, str, str | None]]) -> DataFrame:
        return self.spark.createDataFrame(rows, "col_name STRING, data_type STRING, comment STRING")

    def _vacuum(self, target: Target, stmt: Vacuum) -> DataFrame:
        from sparkonce.delta.ops.vacuum import vacuum
        from sparkonce.delta.tables import RETENTION_CHECK_CONF

        enforce = str(self.spark.conf.get(RETENTION_CHECK_CONF, "true")).lower() != "false"
        result = vacuum(
            target.location, retention_hours=stmt.retain_hours, dry_run=stmt.dry_run, enforce_retention_duration=enforce
        )
        root = target.location.rstrip("/")
        rows = [(f"{root}/{f}",) for f in result.files] if stmt.dry_run else [(root,)]
        return self.spark.createDataFrame(rows, "path STRING")

    def _delete(self, text: str, target: Target, stmt: Delete) -> DataFrame:
        from sparkonce.delta.ops.dml import delete_rows
        from sparkonce.delta.tables import dml_txn

        where = self._unqualified(text, stmt.where, stmt.table, stmt.alias)
        result = delete_rows(self.spark, target.location, where, txn=dml_txn(self.spark))
        return self.spark.createDataFrame([(result.rows_changed,)], "num_affected_rows BIGINT")

    def _update(self, text: str, target: Target, stmt: Update) -> DataFrame:
        from sparkonce.delta.ops.dml import update_rows
        from sparkonce.delta.tables import dml_txn

        where = self._unqualified(text, stmt.where, stmt.table, stmt.alias)
        assignments: dict[str, str] = {}
        for a in stmt.assignments:
            value = self._unqualified(text, a.value, stmt.table, stmt.alias)
            assert value is not None
            assignments[a.column] = value
        result = update_rows(self.spark, target.location, where, assignments, txn=dml_txn(self.spark))
        return self.spark.createDataFrame([(result.rows_changed,)], "num_affected_rows BIGINT")

    def _merge(self, text: str, target: Target, stmt: Merge) -> DataFrame:
        from sparkonce.delta.ops.merge import MergeClause, merge_into
        from sparkonce.delta.tables import AUTO_MERGE_CONF, MERGE_SCHEMA, dml_txn

        if stmt.source_query is not None:
            source = self.query(_text(text, stmt.source_query))
            source_alias = stmt.source_alias
        else:
            assert stmt.source_table is not None
            source = self._table_frame(stmt.source_table)
            default = stmt.source_table.name[-1] if stmt.source_table.name else None
            source_alias = stmt.source_alias or default
        if source_alias:
            source = source.alias(source_alias)
        target_alias = stmt.alias or (stmt.table.name[-1] if stmt.table.name else None)
        clauses = [
            MergeClause(
                a.when,
                a.kind,
                _text(text, a.condition) if a.condition else None,
                {x.column: _text(text, x.value) for x in a.assignments} if a.assignments is not None else None,
            )
            for a in stmt.actions
        ]
        auto_merge = str(self.spark.conf.get(AUTO_MERGE_CONF, "false")).lower() == "true"
        result = merge_into(
            source,
            target.location,
            _text(text, stmt.condition),
            clauses,
            target_alias=target_alias,
            txn=dml_txn(self.spark),
            schema_evolution=stmt.schema_evolution or auto_merge,
        )
        counts = (result.rows_updated, result.rows_deleted, result.rows_inserted)
        return self.spark.createDataFrame([(sum(counts), *counts)], MERGE_SCHEMA)

    def _insert(self, text: str, target: Target, stmt: Insert) -> DataFrame:
        from pyspark.sql import functions as F

        from sparkonce.delta.log.table_view import existing_table
        from sparkonce.delta.table.identity import ALLOW_EXPLICIT_INSERT, TASKS_OPTION
        from sparkonce.delta.table.identity import START as IDENTITY_START

        frame = self.query(_text(text, stmt.query))
        from sparkonce.delta.ops.create import spark_schema

        delta_table = existing_table(target.location)
        table_schema = spark_schema(delta_table)
        from sparkonce.delta.table.generated import GENERATION_EXPRESSION_KEY

        static = self._static_partitions(text, target, stmt, tuple(delta_table.metadata().partition_columns))
        names = [f.name for f in table_schema.fields if f.name.lower() not in static]
        generated = {f.name.lower() for f in table_schema.fields if GENERATION_EXPRESSION_KEY in f.metadata}
        plain = [n for n in names if n.lower() not in generated]
        given = list(stmt.columns) if stmt.columns is not None else names
        if static and any(c.lower() in static for c in given):
            raise SqlError(f"INSERT INTO {target.shown}: a column list names a column PARTITION gives a value")
        if stmt.columns is None and generated and len(frame.columns) == len(plain):
            given = plain  # as Delta: generated columns may be left out, the writers compute them
        unknown = [c for c in given if c.lower() not in {n.lower() for n in names}]
        if unknown:
            raise SqlError(f"INSERT INTO {target.shown}: column(s) {unknown} are not columns of the table {names}")
        if len(frame.columns) != len(given):
            more = "TOO_MANY_DATA_COLUMNS" if len(frame.columns) > len(given) else "NOT_ENOUGH_DATA_COLUMNS"
            raise SqlError(
                f"[INSERT_COLUMN_ARITY_MISMATCH.{more}] Cannot write to {target.shown}: the table's columns "
                f"{given} vs the data's {frame.columns}."
            )
        # By position, as Delta: the query's own names may repeat (`SELECT id, CAST(id AS STRING)` names both `id`).
        frame = frame.toDF(*given)
        by_name = {g.lower(): F.col(f"`{g}`") for g in given}
        by_name.update({key: F.expr(value) for key, value in static.items()})
        identity = [f for f in table_schema.fields if IDENTITY_START in f.metadata]
        always = [f.name for f in identity if not f.metadata.get(ALLOW_EXPLICIT_INSERT) and f.name.lower() in by_name]
        if always:
            raise SqlError(
                "[DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED] Providing values for GENERATED ALWAYS AS "
                f"IDENTITY column {always[0]} is not supported."
            )
        identity_missing = {f.name.lower() for f in identity} - set(by_name)  # the writes generate them
        frame = frame.select(
            *[
                by_name.get(f.name.lower(), F.lit(None)).cast(f.dataType).alias(f.name)
                for f in table_schema.fields
                if f.name.lower() in by_name
                or (f.name.lower() not in generated and f.name.lower() not in identity_missing)
            ]
        )
        predicate = self._replaced_rows(text, stmt, static, len(delta_table.metadata().partition_columns))
        writer = frame.write.format(FORMAT).mode("overwrite" if stmt.overwrite or predicate else "append")
        if predicate is not None:
            writer = writer.option(REPLACE_WHERE_OPTION, predicate)
        if identity_missing:
            writer = writer.option(TASKS_OPTION, str(frame.rdd.getNumPartitions()))
        for key, value in self._txn_options().items():
            writer = writer.option(key, value)
        writer.save(target.location)
        return self._empty()

    @staticmethod
    def _static_partitions(text: str, target: Target, stmt: Insert, partitions: tuple[str, ...]) -> dict[str, str]:
        """``PARTITION (p = value, ...)``: each static partition column (lower case) -> its value's text.

        Raises:
            SqlError: the clause names a column that is not a partition column of the table.
        """
        known = {p.lower(): p for p in partitions}
        unknown = [name for name, _ in stmt.partition if name.lower() not in known]
        if unknown:
            raise SqlError(
                f"INSERT INTO {target.shown} PARTITION: {unknown} are not partition columns of the table "
                f"({list(partitions)})"
            )
        return {name.lower(): _text(text, value) for name, value in stmt.partition if value is not None}

    def _replaced_rows(self, text: str, stmt: Insert, static: Mapping[str, str], partitions: int) -> str | None:
        """The ``replaceWhere`` of an INSERT: its ``REPLACE WHERE``, or an ``INSERT OVERWRITE``'s static partition
        values (``p = value AND ...``), as Spark turns them into an overwrite by filter; with the session's dynamic
        partition overwrite and partition columns left to the query, none (the overwrite is dynamic)."""
        if stmt.replace_where is not None:
            return _text(text, stmt.replace_where)
        if not stmt.overwrite or not static:
            return None
        dynamic = str(self.spark.conf.get(PARTITION_OVERWRITE_MODE_CONF, "static")).strip().lower() == "dynamic"
        if dynamic and len(static) < partitions:
            return None
        return " AND ".join(f"`{name}` = {value}" for name, value in static.items())

    def _create(self, text: str, stmt: CreateTable) -> DataFrame:
        from sparkonce.delta.ops.create import CreateMode, CreateRequest, create_table

        if stmt.query is not None and stmt.columns is not None:
            raise SqlError("CREATE TABLE ... AS SELECT takes its columns from the query: drop the column list")
        if stmt.table.path is not None and stmt.location is not None:
            raise SqlError(f"CREATE TABLE {stmt.table.shown}: a table named by its path takes no LOCATION")
        mode: CreateMode = "create"
        if stmt.must_exist:
            mode = "replace"
        elif stmt.replace:
            mode = "createOrReplace"
        elif stmt.if_not_exists:
            mode = "createIfNotExists"
        create_table(
            self.spark,
            CreateRequest(
                mode=mode,
                name=stmt.table.name,
                location=stmt.table.path if stmt.table.path is not None else stmt.location,
                schema=self._column_schema(_text(text, stmt.columns)) if stmt.columns else None,
                query=self.query(_text(text, stmt.query)) if stmt.query is not None else None,
                partitioned_by=stmt.partitioned_by,
                properties=stmt.properties,
                comment=stmt.comment,
                shown=stmt.table.shown,
                cluster_by=stmt.cluster_by,
            ),
        )
        if stmt.table.name is not None:
            entry = find_table(self.spark, stmt.table.name)
            if entry is not None:
                sync_table(self.spark, entry)
        return self._empty()

    def _column_schema(self, columns: str) -> StructType:
        """A CREATE TABLE column list as Spark's schema; ``GENERATED ALWAYS AS (expr)`` becomes the column's
        ``delta.generationExpression`` metadata and ``GENERATED ... AS IDENTITY (...)`` its ``delta.identity.*``
        metadata, as Delta stores them."""
        from pyspark.sql.types import StructField, StructType

        from sparkonce.delta.table.generated import GENERATION_EXPRESSION_KEY
        from sparkonce.delta.table.identity import split_identity_clauses
        from sparkonce.sqltext.expression import split_generated_columns

        without_identity, identity = split_identity_clauses(columns)
        ddl, generated = split_generated_columns(without_identity)
        schema = self.spark.createDataFrame([], ddl).schema
        extra: dict[str, dict[str, Any]] = {k.lower(): dict(v) for k, v in identity.items()}
        for name, expression in generated.items():
            extra.setdefault(name.lower(), {})[GENERATION_EXPRESSION_KEY] = expression
        if not extra:
            return schema
        return StructType(
            [
                StructField(f.name, f.dataType, f.nullable, {**f.metadata, **extra.get(f.name.lower(), {})})
                for f in schema.fields
            ]
        )

    def _convert(self, text: str, stmt: ConvertToDelta) -> DataFrame:
        from sparkonce.delta.ops.create import convert_parquet

        schema = None
        if stmt.partition_schema is not None:
            schema = self.spark.createDataFrame([], _text(text, stmt.partition_schema)).schema
        convert_parquet(stmt.path, partition_schema=schema, collect_stats=stmt.collect_stats)
        return self._empty()

    def _rename(self, target: Target, stmt: RenameTable) -> DataFrame:
        """``ALTER TABLE t RENAME TO new``: sparkonce's catalog renames the entry (a managed table's files move
        with it, :meth:`DeltaCatalog.rename`), Spark's catalog follows."""
        if target.catalog is None:
            raise SqlError(f"ALTER TABLE {target.shown} RENAME TO: a table named by its path has no name to change")
        key = table_key(self.spark, stmt.new_name)
        if key is None:
            raise SqlError(f"RENAME TO {'.'.join(stmt.new_name)}: sparkonce's catalog holds names db.t only")
        renamed = DeltaCatalog.of(self.spark).rename(target.catalog, *key)
        forget_table(self.spark, target.catalog.database, target.catalog.name)
        forget_view(target.catalog.location)
        sync_table(self.spark, renamed)
        return self._empty()

    def _set_location(self, target: Target, stmt: SetLocation) -> DataFrame:
        """``ALTER TABLE t SET LOCATION 'path'``: the name points at the Delta table at ``path``, whose schema and
        partitioning must be the table's (Delta's check; ``spark.databricks.delta.alterLocation.bypassSchemaCheck``
        skips it)."""
        from sparkonce.delta.log.table_view import current_table

        if target.catalog is None:
            raise SqlError(f"ALTER TABLE {target.shown} SET LOCATION: a table named by its path has no location to set")
        new = current_table(stmt.location)
        if new is None:
            raise SqlError(f"[DELTA_MISSING_DELTA_TABLE] {stmt.location} is not a Delta table.")
        bypass = str(self.spark.conf.get(BYPASS_LOCATION_SCHEMA_CHECK_CONF, "false")).lower() == "true"
        old = current_table(target.location)
        if old is not None and not bypass:
            before = (_plain_fields(old.schema_fields()), old.metadata().partition_columns)
            after = (_plain_fields(new.schema_fields()), new.metadata().partition_columns)
            if before != after:
                raise SqlError(
                    "[DELTA_SET_LOCATION_SCHEMA_MISMATCH] The schema of the new Delta location is different than "
                    f"the current table schema. original schema: {before} destination schema: {after} (table "
                    f"{target.shown}, location {stmt.location}). If this is an intended change, you may turn this "
                    f"check off by running: SET {BYPASS_LOCATION_SCHEMA_CHECK_CONF} = true"
                )
        relocated = DeltaCatalog.of(self.spark).relocate(target.catalog, stmt.location)
        sync_table(self.spark, relocated)
        return self._empty()

    def _drop(self, stmt: DropTable) -> DataFrame | None:
        if stmt.table.path is not None:
            raise SqlError(f"DROP TABLE takes a table name, not a path ({stmt.table.shown})")
        target = self.resolve(stmt.table)
        if target is None:
            return None  # Spark's own table (or an error in Spark's words)
        assert target.catalog is not None
        DeltaCatalog.of(self.spark).remove(target.catalog)
        forget_table(self.spark, target.catalog.database, target.catalog.name)
        if target.catalog.managed:
            log.info("DROP TABLE %s: deleting the managed table's files at %s", target.shown, target.location)
            table_location(target.location).delete_tree()
        return self._empty()

    def _show_tables(self, text: str, stmt: ShowTables) -> DataFrame:
        """Spark's ``SHOW TABLES`` (its tables and temporary views) with the Delta tables of sparkonce's catalog in
        that database added, in Spark's columns and order (by name, temporary views last)."""
        from pyspark.errors import AnalysisException

        from sparkonce.delta.table.catalog import DeltaCatalog, table_key

        key = table_key(self.spark, [*(stmt.database or ()), "_"])  # "_": any table of that database
        ours = DeltaCatalog.of(self.spark).tables(key[0]) if key is not None else []
        ours = [t for t in ours if _show_pattern_matches(stmt.pattern, t.name)]
        try:
            spark_rows = [tuple(r) for r in self.spark_sql(text).collect()]  # names only: a few rows
        except AnalysisException as err:
            if not ours or "SCHEMA_NOT_FOUND" not in str(err):
                raise
            spark_rows = []  # a database only sparkonce's catalog has
        spark_rows = [r for r in spark_rows if not str(r[1]).startswith(HELPER_VIEW_PREFIX)]
        known = {(str(r[0]).lower(), str(r[1]).lower()) for r in spark_rows}
        rows = spark_rows + [(t.database, t.name, False) for t in ours if (t.database, t.name) not in known]
        rows.sort(key=lambda r: (bool(r[2]), str(r[1]).lower()))
        return self.spark.createDataFrame(rows, "namespace STRING, tableName STRING, isTemporary BOOLEAN")

    def _show_properties(self, target: Target, key: str | None) -> DataFrame:
        rows = _table_properties(target.location)
        if key is not None:
            found = next((k for k in rows if k.lower() == key.lower()), None)
            value = rows[found] if found else f"Table {target.shown} does not have property: {key}"
            return self.spark.createDataFrame([(key, value)], "key STRING, value STRING")
        return self.spark.createDataFrame(sorted(rows.items()), "key STRING, value STRING")

    # -- helpers ---------------------------------------------------------------------------------------------

    def _table_frame(self, ref: TableRef) -> DataFrame:
        target = self.resolve(ref)
        if target is not None:
            return self.spark.read.format(FORMAT).load(target.location)
        if ref.path is not None:
            raise SqlError(f"[DELTA_MISSING_DELTA_TABLE] {ref.path} is not a Delta table.")
        assert ref.name is not None
        return self.spark.table(".".join(f"`{p}`" for p in ref.name))

    def _unqualified(self, text: str, span: Span | None, table: TableRef, alias: str | None) -> str | None:
        """The expression at ``span`` with ``alias.`` / ``table.`` qualifiers removed (DELETE and UPDATE evaluate
        their expressions on the table's rows, which carry no qualifier)."""
        if span is None:
            return None
        qualifiers = {q.lower() for q in (alias, table.name[-1] if table.name else None) if q}
        piece = text[span.start : span.end]
        tokens = tokenize(piece)
        out: list[str] = []
        last = 0
        for i, token in enumerate(tokens[:-1]):
            previous_dot = i > 0 and tokens[i - 1].is_op(".")
            qualifier = token.kind in ("word", "quoted") and token.value.lower() in qualifiers
            if qualifier and tokens[i + 1].is_op(".") and not previous_dot:
                out.append(piece[last : token.start])
                last = tokens[i + 1].end
        out.append(piece[last:])
        return "".join(out)

    def _txn_options(self) -> dict[str, str]:
        from sparkonce.delta.tables import dml_txn

        txn = dml_txn(self.spark)
        return {} if txn is None else {"txnAppId": txn.app_id, "txnVersion": str(txn.txn_version)}

    def _no_time_travel(self, ref: TableRef, statement: str) -> None:
        if ref.table_version is not None or ref.timestamp is not None:
            raise SqlError(f"{statement} on {ref.shown}: a statement that writes cannot take a table version")

    def _empty(self) -> DataFrame:
        from pyspark.sql.types import StructType

        return self.spark.createDataFrame([], StructType([]))


def _table_properties(location: str) -> dict[str, str]:
    """Delta's table properties as ``SHOW TBLPROPERTIES`` and ``DESCRIBE TABLE EXTENDED`` show them: the
    configuration, the protocol versions and ``delta.feature.<name> = supported``."""
    from sparkonce.delta.log.table_view import existing_table

    table = existing_table(location)
    protocol = table.protocol()
    rows = {str(k): str(v) for k, v in table.metadata().configuration.items() if v is not None}
    rows["delta.minReaderVersion"] = str(protocol.min_reader_version)
    rows["delta.minWriterVersion"] = str(protocol.min_writer_version)
    for feature in sorted(set(protocol.reader_features or []) | set(protocol.writer_features or [])):
        rows[f"delta.feature.{feature}"] = "supported"
    return rows


def _plain_fields(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A schema's fields without column mapping's metadata (ids and physical names differ between two tables)."""
    return [
        {
            **f,
            "metadata": {k: v for k, v in (f.get("metadata") or {}).items() if not k.startswith("delta.columnMapping")},
        }
        for f in fields
    ]


def _text(text: str, span: Span) -> str:
    return text[span.start : span.end]


def _matching(tokens: list[Token], open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(tokens)):
        if tokens[i].is_op("("):
            depth += 1
        elif tokens[i].is_op(")"):
            depth -= 1
            if depth == 0:
                return i
    raise SqlError("unbalanced parentheses around DESCRIBE HISTORY")


def install(spark: SparkSession) -> None:
    """Make ``spark.sql`` a :class:`DeltaSql` of ``spark`` (once; :func:`sparkonce.register` calls it)."""
    if isinstance(getattr(spark, "sql", None), DeltaSql):
        return
    spark.sql = DeltaSql(spark, spark.sql)  # type: ignore[method-assign]
    sync_all(spark)


def run_sql(spark: SparkSession, text: str) -> DataFrame:
    """Run ``text`` as :class:`DeltaSql` would, without installing it on ``spark``."""
    current = spark.sql
    return (current if isinstance(current, DeltaSql) else DeltaSql(spark, current))(text)


def _show_pattern_matches(pattern: str | None, name: str) -> bool:
    """``SHOW TABLES LIKE`` as Spark matches it: alternatives split by ``|``, ``*`` any characters, the rest a
    regular expression, case-insensitive; an alternative that is not a valid expression matches nothing."""
    if pattern is None:
        return True
    for alternative in pattern.strip().split("|"):
        try:
            if re.fullmatch(alternative.strip().replace("*", ".*"), name, flags=re.IGNORECASE):
                return True
        except re.error:
            continue
    return False


__all__ = ["DeltaSql", "Target", "install", "run_sql"]
