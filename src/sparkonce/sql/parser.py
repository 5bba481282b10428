"""Recognise a Delta statement in one SQL statement's tokens (:func:`parse_statement`).

Returns None for anything that is not one of Delta's statements: the statement goes to Spark (with its Delta table
references replaced, :mod:`sparkonce.sql.runner`). DML and DDL whose target is not a Delta table (e.g. ``INSERT
INTO`` a Spark catalog table) are recognised here and handed back by the runner once it knows the target.

Runs on the driver.
"""

from __future__ import annotations

from typing import Literal

from sparkonce.errors import SqlError
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
    MergeAction,
    MergeWhen,
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
    parse_assignments,
    parse_identifier_list,
    parse_properties,
    parse_table,
)
from sparkonce.sqltext.lexer import Token

_MERGE_CLAUSE_END = ("WHEN",)


def parse_statement(text: str, tokens: list[Token]) -> Statement | None:
    """The Delta statement ``tokens`` hold, or None when they hold something else (Spark's to run).

    Raises:
        SqlError: a Delta statement that is malformed or has a clause sparkonce does not implement.
    """
    c = Cursor(text, tokens)
    if c.take_word("DESCRIBE HISTORY", "DESC HISTORY"):
        table = parse_table(c)
        limit = None
        if c.take_word("LIMIT"):
            token = c.take()
            if token.kind != "number" or not token.value.isdigit():
                raise c.error("LIMIT takes a whole number")
            limit = int(token.value)
        c.expect_end()
        return DescribeHistory(table, limit)
    if c.take_word("DESCRIBE DETAIL", "DESC DETAIL"):
        table = parse_table(c)
        c.expect_end()
        return DescribeDetail(table)
    if c.at_word("DESCRIBE", "DESC"):
        return _describe_table(c)
    if c.take_word("VACUUM"):
        return _vacuum(c)
    if c.take_word("OPTIMIZE"):
        return _optimize(c)
    if c.take_word("RESTORE"):
        return _restore(c)
    if c.take_word("DELETE FROM"):
        table = parse_table(c)
        alias = parse_alias(c)
        where = c.span_until() if c.take_word("WHERE") else None
        c.expect_end()
        return Delete(table, alias, where)
    if c.at_word("UPDATE"):
        c.take()
        table = parse_table(c)
        alias = parse_alias(c)
        c.expect_word("SET")
        assignments = parse_assignments(c, ("WHERE",))
        where = c.span_until() if c.take_word("WHERE") else None
        c.expect_end()
        return Update(table, alias, assignments, where)
    if c.take_word("MERGE"):
        return _merge(c)
    if c.take_word("INSERT"):
        return _insert(c)
    if c.at_word("CREATE", "REPLACE"):
        return _create(c)
    if c.take_word("DROP TABLE"):
        if_exists = c.take_word("IF EXISTS")
        table = parse_table(c)
        c.take_word("PURGE")
        c.expect_end()
        return DropTable(table, if_exists)
    if c.take_word("SHOW TBLPROPERTIES"):
        table = parse_table(c)
        key = None
        if c.at_op("("):
            key = next(iter(parse_properties(c, values=False)))
        c.expect_end()
        return ShowTblProperties(table, key)
    if c.take_word("SHOW TABLES"):
        return _show_tables(c)
    if c.take_word("ALTER TABLE"):
        return _alter(c)
    if c.take_word("CONVERT TO DELTA"):
        return _convert(c)
    if c.take_word("GENERATE"):
        mode = c.take()
        if mode.value.lower() != "symlink_format_manifest":
            raise c.unsupported(f"GENERATE {mode.value}")
        c.expect_word("FOR TABLE")
        table = parse_table(c)
        c.expect_end()
        return GenerateManifest(table)
    return None


_NOT_A_TABLE = ("FUNCTION", "DATABASE", "SCHEMA", "NAMESPACE", "CATALOG", "QUERY", "PROCEDURE", "SELECT", "WITH",
                "VALUES", "FROM", "TABLE", "EXTENDED", "FORMATTED")  # fmt: skip


def _describe_table(c: Cursor) -> DescribeTable | None:
    """``DESCRIBE [TABLE] [EXTENDED | FORMATTED] t``, or None for Spark's other forms (a column, a partition, ``AS
    JSON``, time travel, a function, a database, a query), which stay Spark's."""
    c.take()
    c.take_word("TABLE")
    extended = c.take_word("EXTENDED", "FORMATTED")
    if c.done() or c.at_word(*_NOT_A_TABLE):
        return None
    try:
        table = parse_table(c)
    except SqlError:
        return None
    if not c.done() or table.table_version is not None or table.timestamp is not None:
        return None
    return DescribeTable(table, extended)


def _show_tables(c: Cursor) -> ShowTables:
    """``SHOW TABLES [{FROM | IN} db] [[LIKE] 'pattern']``."""
    database = None
    if c.take_word("FROM", "IN"):
        parts = [c.take().value]
        while c.at_op("."):
            c.take()
            parts.append(c.take().value)
        database = tuple(parts)
    c.take_word("LIKE")
    pattern = None
    token = c.peek()
    if token is not None and token.kind == "string":
        pattern = c.take().value
    c.expect_end()
    return ShowTables(database, pattern)


def _convert(c: Cursor) -> ConvertToDelta:
    token = c.peek()
    if not (token is not None and token.is_word("PARQUET") and c.at_op(".", ahead=1)):
        raise c.unsupported("CONVERT TO DELTA of anything but parquet.`path`")
    c.pos += 2
    path = c.take()
    if path.kind != "quoted":
        raise c.error("expected parquet.`path`")
    collect_stats = not c.take_word("NO STATISTICS")
    partition_schema = None
    if c.take_word("PARTITIONED BY"):
        c.expect_op("(")
        partition_schema = c.span_until()
        c.expect_op(")")
    c.expect_end()
    return ConvertToDelta(path.value, partition_schema, collect_stats)


def _vacuum(c: Cursor) -> Vacuum:
    table = parse_table(c)
    if c.take_word("USING INVENTORY"):
        raise c.unsupported("VACUUM ... USING INVENTORY")
    retain = None
    if c.take_word("RETAIN"):
        token = c.take()
        if token.kind != "number":
            raise c.error("RETAIN takes a number of hours")
        retain = float(token.value.rstrip("DdFfLl"))
        c.expect_word("HOURS")
    dry_run = c.take_word("DRY RUN")
    c.expect_end()
    return Vacuum(table, retain, dry_run)


def _optimize(c: Cursor) -> Optimize:
    table = parse_table(c)
    where = c.span_until("ZORDER") if c.take_word("WHERE") else None
    zorder: tuple[str, ...] = ()
    if c.take_word("ZORDER BY"):
        if c.at_op("("):
            zorder = parse_identifier_list(c)
        else:
            names = [c.take().value]
            while c.at_op(","):
                c.take()
                names.append(c.take().value)
            zorder = tuple(names)
    c.expect_end()
    return Optimize(table, where, zorder)


def _restore(c: Cursor) -> Restore:
    c.take_word("TABLE")
    table = parse_table(c)
    if table.table_version is not None or table.timestamp is not None:  # RESTORE t VERSION AS OF 3 (no TO)
        c.expect_end()
        return Restore(
            type(table)(table.path, table.name, table.start, table.end), table.table_version, table.timestamp
        )
    c.take_word("TO")
    if c.take_word("VERSION AS OF"):
        token = c.take()
        if token.kind != "number" or not token.value.isdigit():
            raise c.error("VERSION AS OF takes a table version (a whole number)")
        c.expect_end()
        return Restore(table, int(token.value), None)
    c.expect_word("TIMESTAMP AS OF")
    token = c.take()
    if token.kind != "string":
        raise c.unsupported("RESTORE ... TIMESTAMP AS OF with an expression (give a timestamp string)")
    c.expect_end()
    return Restore(table, None, token.value)


def _merge(c: Cursor) -> Merge:
    schema_evolution = c.take_word("WITH SCHEMA EVOLUTION")
    c.expect_word("INTO")
    table = parse_table(c)
    alias = parse_alias(c)
    c.expect_word("USING")
    source_table = None
    source_query = None
    if c.at_op("("):
        c.take()
        source_query = c.span_until()
        c.expect_op(")")
    else:
        source_table = parse_table(c)
    source_alias = parse_alias(c)
    c.expect_word("ON")
    condition = c.span_until("WHEN")
    actions: list[MergeAction] = []
    while c.take_word("WHEN"):
        when: MergeWhen
        if c.take_word("MATCHED"):
            when = "matched"
        elif c.take_word("NOT MATCHED BY SOURCE"):
            when = "notMatchedBySource"
        else:
            c.expect_word("NOT MATCHED")
            c.take_word("BY TARGET")
            when = "notMatched"
        clause_condition = c.span_until("THEN") if c.take_word("AND") else None
        c.expect_word("THEN")
        actions.append(_merge_action(c, when, clause_condition))
    c.expect_end()
    if not actions:
        raise c.error("MERGE needs at least one WHEN clause")
    return Merge(table, alias, source_table, source_query, source_alias, condition, tuple(actions), schema_evolution)


def _merge_action(c: Cursor, when: MergeWhen, condition: Span | None) -> MergeAction:
    if when != "notMatched" and c.take_word("DELETE"):
        return MergeAction(when, "delete", condition, None)
    if when != "notMatched" and c.take_word("UPDATE SET"):
        if c.at_op("*"):
            if when == "notMatchedBySource":
                raise c.error("WHEN NOT MATCHED BY SOURCE cannot UPDATE SET * (no source row)")
            c.take()
            return MergeAction(when, "update", condition, None)
        return MergeAction(when, "update", condition, parse_assignments(c, _MERGE_CLAUSE_END))
    if when == "notMatched" and c.take_word("INSERT"):
        if c.at_op("*"):
            c.take()
            return MergeAction(when, "insert", condition, None)
        columns = parse_identifier_list(c)
        c.expect_word("VALUES")
        c.expect_op("(")
        values: list[Span] = []
        while True:
            values.append(c.span_until(","))
            if c.at_op(","):
                c.take()
                continue
            break
        c.expect_op(")")
        if len(values) != len(columns):
            raise c.error(f"INSERT names {len(columns)} column(s) but gives {len(values)} value(s)")
        from sparkonce.sqltext.grammar import Assignment

        return MergeAction(when, "insert", condition, tuple(Assignment(k, v) for k, v in zip(columns, values)))
    expected = "INSERT" if when == "notMatched" else "UPDATE SET or DELETE"
    raise c.error(f"expected {expected} after THEN")


def _insert(c: Cursor) -> Insert:
    overwrite = c.take_word("OVERWRITE")
    if not overwrite:
        c.expect_word("INTO")
    c.take_word("TABLE")
    table = parse_table(c)
    partition = _partition_spec(c) if c.take_word("PARTITION") else ()
    replace_where = None
    if c.take_word("REPLACE WHERE"):
        if overwrite or partition:
            raise c.error("REPLACE WHERE goes with INSERT INTO t, without PARTITION")
        replace_where = c.span_until(*_QUERY_STARTS)
    if c.take_word("BY NAME"):
        raise c.unsupported("INSERT ... BY NAME")
    columns = None
    if c.at_op("(") and not c.at_word(*_QUERY_STARTS, ahead=1):
        columns = parse_identifier_list(c)
    query = c.span_until()
    c.expect_end()
    return Insert(table, overwrite, columns, query, partition, replace_where)


_QUERY_STARTS = ("SELECT", "VALUES", "WITH", "FROM", "TABLE")


def _partition_spec(c: Cursor) -> tuple[tuple[str, Span | None], ...]:
    """``(p = value, q, ...)`` after ``PARTITION``: each column with its static value (None: from the query)."""
    c.expect_op("(")
    spec: list[tuple[str, Span | None]] = []
    while True:
        name = c.take().value
        value = None
        if c.at_op("="):
            c.take()
            value = c.span_until(",")
        spec.append((name, value))
        if c.at_op(","):
            c.take()
            continue
        c.expect_op(")")
        return tuple(spec)


def _create(c: Cursor) -> CreateTable | None:
    replace = must_exist = False
    if c.take_word("CREATE OR REPLACE TABLE"):
        replace = True
    elif c.take_word("REPLACE TABLE"):
        replace = must_exist = True
    elif not c.take_word("CREATE TABLE"):
        return None  # CREATE VIEW, CREATE EXTERNAL TABLE, ...: Spark's
    if_not_exists = c.take_word("IF NOT EXISTS")
    table = parse_table(c)
    columns = None
    if c.at_op("("):
        c.take()
        columns = c.span_until()
        c.expect_op(")")
    provider = None
    partitioned: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    location = None
    properties: dict[str, str] = {}
    query = None
    comment = None
    while not c.done():
        if c.take_word("USING"):
            provider = c.take().value.lower()
        elif c.take_word("PARTITIONED BY"):
            partitioned = parse_identifier_list(c)
        elif provider in (None, "delta") and c.take_word("CLUSTER BY"):
            cluster_by = parse_identifier_list(c)
        elif c.take_word("LOCATION"):
            token = c.take()
            if token.kind != "string":
                raise c.error("LOCATION takes a string")
            location = token.value
        elif c.take_word("TBLPROPERTIES"):
            properties = parse_properties(c)
        elif c.at_word("COMMENT") and provider in (None, "delta"):
            c.take()
            token = c.take()
            if token.kind != "string":
                raise c.error("COMMENT takes a string")
            comment = token.value
        elif c.take_word("AS") or c.at_word("SELECT", "WITH", "FROM", "VALUES"):
            query = c.span_until()
        elif c.at_word("CLUSTER", "COMMENT", "OPTIONS", "STORED", "ROW", "SKEWED", "CLUSTERED", "DEFAULT"):
            if provider not in (None, "delta"):
                return None
            raise c.unsupported(f"CREATE TABLE ... {c.take().value.upper()}")
        else:
            raise c.error("unexpected clause in CREATE TABLE")
    if provider != "delta" and table.path is None:
        return None  # a table of another format: Spark's
    if replace and if_not_exists:
        raise c.error("OR REPLACE and IF NOT EXISTS cannot both be given")
    if columns is None and query is None and location is None and table.path is None:
        raise c.error("CREATE TABLE needs columns, AS SELECT or the LOCATION of an existing table")
    if table.table_version is not None or table.timestamp is not None:
        raise c.error("CREATE TABLE cannot take a table version")
    return CreateTable(
        table,
        replace,
        if_not_exists,
        columns,
        partitioned,
        location,
        properties,
        query,
        must_exist,
        comment,
        cluster_by,
    )


def _column_path(c: Cursor) -> tuple[str, ...]:
    """A column, or a nested field as ``a.b.c``."""
    token = c.take()
    if token.kind not in ("word", "quoted"):
        raise c.error("expected a column name")
    parts = [token.value]
    while c.at_op("."):
        c.take()
        parts.append(c.take().value)
    return tuple(parts)


def _position(c: Cursor) -> tuple[Literal["first", "after"], str] | None:
    if c.take_word("FIRST"):
        return ("first", "")
    if c.take_word("AFTER"):
        return ("after", c.take().value)
    return None


def _column_definitions(c: Cursor) -> tuple[ColumnDefinition, ...]:
    """``(a INT COMMENT 'x' FIRST, s.b STRING AFTER a)``, parenthesized or not."""
    wrapped = c.at_op("(")
    if wrapped:
        c.take()
    out = []
    while True:
        path = _column_path(c)
        out.append(ColumnDefinition(path, _definition(c), _position(c)))
        if c.at_op(","):
            c.take()
            continue
        break
    if wrapped:
        c.expect_op(")")
    c.expect_end()
    return tuple(out)


def _definition(c: Cursor) -> Span:
    """A column's type and options, up to the next column, ``FIRST``/``AFTER`` or the closing parenthesis (commas
    inside ``STRUCT<...>``, ``DECIMAL(p, s)`` and strings belong to it)."""
    start = c.offset
    depth = 0
    while not c.done():
        token = c.peek()
        assert token is not None
        if depth == 0 and (token.is_op(",", ")") or token.is_word("FIRST", "AFTER")):
            break
        if token.is_op("(", "[", "<"):
            depth += 1
        elif token.is_op(")", "]", ">"):
            depth -= 1
        c.pos += 1
    if c.offset == start:
        raise c.error("expected a column type")
    return Span(start, c.tokens[c.pos - 1].end)


def _alter_column(c: Cursor, table: TableRef, hive: bool) -> AlterColumn:
    path = _column_path(c)
    if c.take_word("TYPE"):
        data_type = c.span_until()
        c.expect_end()
        return AlterColumn(table, path, data_type=data_type)
    if c.take_word("COMMENT"):
        text = c.take()
        if text.kind != "string":
            raise c.error("COMMENT takes a string")
        c.expect_end()
        return AlterColumn(table, path, comment=text.value)
    if c.take_word("SET NOT NULL"):
        c.expect_end()
        return AlterColumn(table, path, nullable=False)
    if c.take_word("DROP NOT NULL"):
        c.expect_end()
        return AlterColumn(table, path, nullable=True)
    if c.at_word("FIRST", "AFTER"):
        position = _position(c)
        c.expect_end()
        return AlterColumn(table, path, position=position)
    if not hive or c.done():
        raise c.error("ALTER COLUMN takes TYPE, COMMENT, SET NOT NULL, DROP NOT NULL, FIRST or AFTER")
    new_name = c.take().value  # Hive's CHANGE COLUMN a a TYPE [COMMENT 's'] [FIRST | AFTER b]
    if new_name.lower() != path[-1].lower():
        raise SqlError(
            "[UNSUPPORTED_FEATURE.HIVE_STYLE_CHANGE_COLUMN] Renaming column is not supported in Hive-style ALTER "
            f"COLUMN, please run RENAME COLUMN instead. In: {c.text}"
        )
    data_type = c.span_until("COMMENT", "FIRST", "AFTER")
    comment = None
    if c.take_word("COMMENT"):
        token = c.take()
        if token.kind != "string":
            raise c.error("COMMENT takes a string")
        comment = token.value
    position = _position(c)
    c.expect_end()
    return AlterColumn(table, path, data_type=data_type, comment=comment, position=position)


def _alter(
    c: Cursor,
) -> (
    AlterProperties
    | AddColumns
    | ReplaceColumns
    | RenameColumn
    | DropColumns
    | AlterColumn
    | DropFeature
    | AlterClusterBy
    | AddConstraint
    | DropConstraint
    | RenameTable
    | SetLocation
    | AlterOther
):
    table = parse_table(c)
    if c.take_word("RENAME TO"):
        renamed = parse_table(c)
        if renamed.name is None or renamed.table_version is not None or renamed.timestamp is not None:
            raise c.error("RENAME TO takes a table name")
        c.expect_end()
        return RenameTable(table, renamed.name)
    if c.take_word("SET LOCATION"):
        token = c.take()
        if token.kind != "string":
            raise c.error("SET LOCATION takes a string")
        c.expect_end()
        return SetLocation(table, token.value)
    if c.take_word("SET TBLPROPERTIES"):
        properties = parse_properties(c)
        c.expect_end()
        return AlterProperties(table, properties, (), False)
    if c.take_word("UNSET TBLPROPERTIES"):
        if_exists = c.take_word("IF EXISTS")
        keys = tuple(parse_properties(c, values=False))
        c.expect_end()
        return AlterProperties(table, {}, keys, if_exists)
    if c.take_word("ADD COLUMNS", "ADD COLUMN"):
        return AddColumns(table, _column_definitions(c))
    if c.take_word("REPLACE COLUMNS"):
        return ReplaceColumns(table, _column_definitions(c))
    if c.take_word("RENAME COLUMN"):
        path = _column_path(c)
        c.expect_word("TO")
        new_name = c.take()
        if new_name.kind not in ("word", "quoted"):
            raise c.error("RENAME COLUMN ... TO takes a column name")
        c.expect_end()
        return RenameColumn(table, path, new_name.value)
    if c.take_word("DROP COLUMNS", "DROP COLUMN"):
        if_exists = c.take_word("IF EXISTS")
        wrapped = c.at_op("(")
        if wrapped:
            c.take()
        paths = [_column_path(c)]
        while c.at_op(","):
            c.take()
            paths.append(_column_path(c))
        if wrapped:
            c.expect_op(")")
        c.expect_end()
        return DropColumns(table, tuple(paths), if_exists)
    if c.at_word("ALTER", "CHANGE"):
        hive = c.take().is_word("CHANGE")
        c.take_word("COLUMN")
        return _alter_column(c, table, hive)
    if c.take_word("CLUSTER BY"):
        clustering: tuple[str, ...] = () if c.take_word("NONE") else parse_identifier_list(c)
        c.expect_end()
        return AlterClusterBy(table, clustering)
    if c.take_word("DROP FEATURE"):
        feature = c.take()
        if feature.kind not in ("word", "quoted", "string"):
            raise c.error("DROP FEATURE takes a feature name")
        truncate = c.take_word("TRUNCATE HISTORY")
        c.expect_end()
        return DropFeature(table, feature.value, truncate)
    if c.take_word("ADD CONSTRAINT"):
        name = c.take()
        if name.kind not in ("word", "quoted"):
            raise c.error("ADD CONSTRAINT takes a constraint name")
        if not c.take_word("CHECK"):
            raise c.unsupported("ADD CONSTRAINT other than CHECK")
        c.expect_op("(")
        expression = c.span_until()
        c.expect_op(")")
        c.expect_end()
        return AddConstraint(table, name.value, expression)
    if c.take_word("DROP CONSTRAINT"):
        if_exists = c.take_word("IF EXISTS")
        name = c.take()
        if name.kind not in ("word", "quoted"):
            raise c.error("DROP CONSTRAINT takes a constraint name")
        c.expect_end()
        return DropConstraint(table, name.value, if_exists)
    clause = " ".join(t.value.upper() for t in c.tokens[c.pos : c.pos + 2]) or "(nothing)"
    return AlterOther(table, f"ALTER TABLE ... {clause}")


__all__ = ["parse_statement"]
