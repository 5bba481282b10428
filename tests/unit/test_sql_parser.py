"""Delta's SQL statements recognised from their tokens (no Spark): statements as users paste them, each clause
kind, and the errors that name the clause."""

from __future__ import annotations

import pytest

from sparkonce.errors import SqlError
from sparkonce.sql.parser import parse_statement
from sparkonce.sql.statements import (
    AddColumns,
    AlterClusterBy,
    AlterColumn,
    AlterOther,
    AlterProperties,
    ConvertToDelta,
    CreateTable,
    Delete,
    DescribeDetail,
    DescribeHistory,
    DescribeTable,
    DropColumns,
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
from sparkonce.sqltext.lexer import split_statements, tokenize


def parse(text: str) -> Statement | None:
    return parse_statement(text, tokenize(text))


def span(text: str, s: object) -> str:
    return text[s.start : s.end]  # type: ignore[attr-defined]


def test_tokens_keep_offsets_and_decode_strings_and_names() -> None:
    text = "SELECT `a``b`, 'it''s', \"x\\ty\", r'\\d', 1.5e-3, 10L -- note\n/* a /* nested */ one */ FROM t"
    tokens = tokenize(text)
    assert [(t.kind, t.value) for t in tokens] == [
        ("word", "SELECT"),
        ("quoted", "a`b"),
        ("op", ","),
        ("string", "it"),
        ("string", "s"),
        ("op", ","),
        ("string", "x\ty"),
        ("op", ","),
        ("string", "\\d"),
        ("op", ","),
        ("number", "1.5e-3"),
        ("op", ","),
        ("number", "10L"),
        ("word", "FROM"),
        ("word", "t"),
    ]
    assert all(text[t.start : t.end].strip() for t in tokens)
    assert text[tokens[1].start : tokens[1].end] == "`a``b`"


@pytest.mark.parametrize(
    ("text", "problem"),
    [("SELECT 'open", "unterminated string"), ("SELECT `x", "back-quoted"), ("SELECT /* x", "comment")],
)
def test_unterminated_text_is_named(text: str, problem: str) -> None:
    with pytest.raises(SqlError, match=problem):
        tokenize(text)


def test_statements_split_at_top_level_semicolons_only() -> None:
    text = "-- Check transaction details\nDESCRIBE HISTORY t;\n\nSELECT ';' AS s; -- trailing\n;"
    assert [text[a:b] for a, b in split_statements(text)] == ["DESCRIBE HISTORY t", "SELECT ';' AS s"]
    assert split_statements("-- only a comment\n") == []


def test_describe_history_and_detail() -> None:
    stmt = parse("describe history delta.`/data/events` LIMIT 5")
    assert isinstance(stmt, DescribeHistory) and stmt.limit == 5
    assert (stmt.table.path, stmt.table.name) == ("/data/events", None)
    stmt = parse("DESC HISTORY db.your_streaming_table")
    assert isinstance(stmt, DescribeHistory) and stmt.table.name == ("db", "your_streaming_table")
    stmt = parse("DESCRIBE DETAIL '/data/events'")
    assert isinstance(stmt, DescribeDetail) and stmt.table.path == "/data/events"
    with pytest.raises(SqlError, match="LIMIT takes a whole number"):
        parse("DESCRIBE HISTORY t LIMIT x")


def test_time_travel_forms() -> None:
    for text, version, timestamp in [
        ("DESCRIBE DETAIL t VERSION AS OF 3", 3, None),
        ("DESCRIBE DETAIL t FOR SYSTEM_VERSION AS OF 3", 3, None),
        ("DESCRIBE DETAIL t TIMESTAMP AS OF '2026-01-02'", None, "2026-01-02"),
        ("DESCRIBE DETAIL t@v7", 7, None),
        ("DESCRIBE DETAIL delta.`/p@v7`", 7, None),
        ("DESCRIBE DETAIL delta.`/p@20260102030405006`", None, "2026-01-02 03:04:05.006"),
    ]:
        stmt = parse(text)
        assert isinstance(stmt, DescribeDetail)
        assert (stmt.table.table_version, stmt.table.timestamp) == (version, timestamp), text
    with pytest.raises(SqlError, match="time travel suffix"):
        parse("DESCRIBE DETAIL delta.`/p@x1`")


def test_maintenance_statements() -> None:
    stmt = parse("VACUUM t RETAIN 200 HOURS DRY RUN")
    assert stmt == Vacuum(stmt.table, 200.0, True)  # type: ignore[union-attr]
    stmt = parse("VACUUM delta.`/p`")
    assert isinstance(stmt, Vacuum) and (stmt.retain_hours, stmt.dry_run) == (None, False)
    text = "OPTIMIZE t WHERE date >= '2026-01-01' AND p = (1)"
    stmt = parse(text)
    assert isinstance(stmt, Optimize) and span(text, stmt.where) == "date >= '2026-01-01' AND p = (1)"
    stmt = parse("OPTIMIZE t WHERE p = 1 ZORDER BY (a, b)")
    assert isinstance(stmt, Optimize) and stmt.zorder_by == ("a", "b") and stmt.where is not None
    stmt = parse("OPTIMIZE t ZORDER BY a, `b c`")
    assert isinstance(stmt, Optimize) and stmt.zorder_by == ("a", "b c")
    for text, version, timestamp in [
        ("RESTORE TABLE t TO VERSION AS OF 2", 2, None),
        ("RESTORE t VERSION AS OF 2", 2, None),
        ("RESTORE delta.`/p` TO TIMESTAMP AS OF '2026-01-01 00:00:00'", None, "2026-01-01 00:00:00"),
    ]:
        stmt = parse(text)
        assert isinstance(stmt, Restore) and (stmt.table_version, stmt.timestamp) == (version, timestamp), text


def test_delete_and_update() -> None:
    text = "DELETE FROM events AS e WHERE e.id IN (1, 2)"
    stmt = parse(text)
    assert isinstance(stmt, Delete) and stmt.alias == "e" and span(text, stmt.where) == "e.id IN (1, 2)"
    stmt = parse("DELETE FROM events")
    assert isinstance(stmt, Delete) and stmt.where is None and stmt.alias is None
    text = "UPDATE events t SET t.v = concat(v, ','), n = n + 1 WHERE id = 3"
    stmt = parse(text)
    assert isinstance(stmt, Update) and stmt.alias == "t"
    assert [(a.column, span(text, a.value)) for a in stmt.assignments] == [("v", "concat(v, ',')"), ("n", "n + 1")]
    assert span(text, stmt.where) == "id = 3"
    with pytest.raises(SqlError, match="nested field"):
        parse("UPDATE t SET t.s.f = 1")


def test_merge_with_every_clause_kind() -> None:
    text = """MERGE WITH SCHEMA EVOLUTION INTO target t
    USING (SELECT * FROM updates WHERE ok) s
    ON t.id = s.id
    WHEN MATCHED AND s.op = 'd' THEN DELETE
    WHEN MATCHED THEN UPDATE SET *
    WHEN NOT MATCHED BY TARGET AND s.v > 0 THEN INSERT (id, v) VALUES (s.id, s.v * 2)
    WHEN NOT MATCHED THEN INSERT *
    WHEN NOT MATCHED BY SOURCE AND t.v < 0 THEN UPDATE SET v = 0
    WHEN NOT MATCHED BY SOURCE THEN DELETE"""
    stmt = parse(text)
    assert isinstance(stmt, Merge)
    assert stmt.schema_evolution and stmt.alias == "t" and stmt.source_alias == "s"
    assert stmt.source_query is not None and span(text, stmt.source_query) == "SELECT * FROM updates WHERE ok"
    assert span(text, stmt.condition) == "t.id = s.id"
    shown = [
        (
            a.when,
            a.kind,
            span(text, a.condition) if a.condition else None,
            None if a.assignments is None else [(x.column, span(text, x.value)) for x in a.assignments],
        )
        for a in stmt.actions
    ]
    assert shown == [
        ("matched", "delete", "s.op = 'd'", None),
        ("matched", "update", None, None),
        ("notMatched", "insert", "s.v > 0", [("id", "s.id"), ("v", "s.v * 2")]),
        ("notMatched", "insert", None, None),
        ("notMatchedBySource", "update", "t.v < 0", [("v", "0")]),
        ("notMatchedBySource", "delete", None, None),
    ]
    stmt = parse("MERGE INTO delta.`/p` USING db.src ON id = sid WHEN MATCHED THEN DELETE")
    assert isinstance(stmt, Merge) and stmt.source_table is not None and stmt.source_table.name == ("db", "src")
    with pytest.raises(SqlError, match="at least one WHEN"):
        parse("MERGE INTO t USING s ON t.id = s.id")
    with pytest.raises(SqlError, match="2 column"):
        parse("MERGE INTO t USING s ON a = b WHEN NOT MATCHED THEN INSERT (a, b) VALUES (1)")
    with pytest.raises(SqlError, match="UPDATE SET \\*"):
        parse("MERGE INTO t USING s ON a = b WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *")


def test_insert_forms() -> None:
    text = "INSERT INTO TABLE t (a, b) SELECT x, y FROM s"
    stmt = parse(text)
    assert isinstance(stmt, Insert) and not stmt.overwrite and stmt.columns == ("a", "b")
    assert span(text, stmt.query) == "SELECT x, y FROM s"
    text = "INSERT OVERWRITE delta.`/p` VALUES (1, 'a'), (2, 'b')"
    stmt = parse(text)
    assert isinstance(stmt, Insert) and stmt.overwrite and stmt.columns is None
    assert span(text, stmt.query) == "VALUES (1, 'a'), (2, 'b')"
    text = "INSERT INTO t (SELECT 1)"
    stmt = parse(text)
    assert isinstance(stmt, Insert) and stmt.columns is None and span(text, stmt.query) == "(SELECT 1)"
    text = "INSERT INTO t REPLACE WHERE a >= 1 AND (b = 'x') SELECT * FROM s"
    stmt = parse(text)
    assert isinstance(stmt, Insert) and not stmt.overwrite and stmt.replace_where is not None
    assert span(text, stmt.replace_where) == "a >= 1 AND (b = 'x')" and span(text, stmt.query) == "SELECT * FROM s"
    text = "INSERT OVERWRITE TABLE t PARTITION (p = 'a', q) (x) VALUES (1, 2)"
    stmt = parse(text)
    assert isinstance(stmt, Insert) and stmt.overwrite and stmt.columns == ("x",)
    assert [(name, value and span(text, value)) for name, value in stmt.partition] == [("p", "'a'"), ("q", None)]
    for problem, text in [
        ("REPLACE WHERE goes with INSERT INTO", "INSERT OVERWRITE t REPLACE WHERE a = 1 SELECT 1"),
        ("BY NAME", "INSERT INTO t BY NAME SELECT 1"),
    ]:
        with pytest.raises(SqlError, match=problem):
            parse(text)


def test_create_table_forms() -> None:
    text = """CREATE TABLE IF NOT EXISTS db.events (id BIGINT NOT NULL, day STRING) USING DELTA
    PARTITIONED BY (day) LOCATION '/data/events'
    TBLPROPERTIES ('delta.appendOnly' = 'true', delta.checkpointInterval = 5)"""
    stmt = parse(text)
    assert isinstance(stmt, CreateTable) and stmt.if_not_exists and not stmt.replace
    assert stmt.columns is not None and span(text, stmt.columns) == "id BIGINT NOT NULL, day STRING"
    assert (stmt.partitioned_by, stmt.location) == (("day",), "/data/events")
    assert stmt.properties == {"delta.appendOnly": "true", "delta.checkpointInterval": "5"}
    text = "CREATE OR REPLACE TABLE t USING delta AS SELECT * FROM s"
    stmt = parse(text)
    assert isinstance(stmt, CreateTable) and stmt.replace and stmt.query is not None
    assert span(text, stmt.query) == "SELECT * FROM s"
    stmt = parse("CREATE TABLE delta.`/p` (a INT)")
    assert isinstance(stmt, CreateTable) and stmt.table.path == "/p"
    assert parse("CREATE TABLE t (a INT) USING parquet") is None  # Spark's
    assert parse("CREATE TABLE t (a INT)") is None  # no provider: Spark's default source
    assert parse("CREATE VIEW v AS SELECT 1") is None
    stmt = parse("CREATE TABLE t (a INT) USING delta COMMENT 'it\\'s a table'")
    assert isinstance(stmt, CreateTable) and stmt.comment == "it's a table"
    assert parse("CREATE TABLE t (a INT) COMMENT 'x' USING parquet") is None  # Spark's
    stmt = parse("CREATE TABLE t (a INT, b STRING) USING delta CLUSTER BY (a, b)")
    assert isinstance(stmt, CreateTable) and stmt.cluster_by == ("a", "b")
    assert parse("CREATE TABLE t (a INT) USING parquet CLUSTER BY (a)") is None  # Spark's
    with pytest.raises(SqlError, match=r"CREATE TABLE \.\.\. CLUSTERED is not supported"):
        parse("CREATE TABLE t (a INT) USING delta CLUSTERED BY (a) INTO 4 BUCKETS")
    stmt = parse("ALTER TABLE t CLUSTER BY (b, a)")
    assert isinstance(stmt, AlterClusterBy) and stmt.columns == ("b", "a")
    stmt = parse("ALTER TABLE t CLUSTER BY NONE")
    assert isinstance(stmt, AlterClusterBy) and stmt.columns == ()
    with pytest.raises(SqlError, match="COMMENT takes a string"):
        parse("CREATE TABLE t (a INT) USING delta COMMENT x")
    with pytest.raises(SqlError, match="needs columns"):
        parse("CREATE TABLE t USING delta")


def test_other_statements() -> None:
    stmt = parse("DROP TABLE IF EXISTS db.t")
    assert isinstance(stmt, DropTable) and stmt.if_exists and stmt.table.name == ("db", "t")
    stmt = parse("SHOW TBLPROPERTIES t ('delta.appendOnly')")
    assert isinstance(stmt, ShowTblProperties) and stmt.key == "delta.appendOnly"
    stmt = parse("ALTER TABLE t SET TBLPROPERTIES ('delta.enableChangeDataFeed' = true, 'team' = 'data')")
    assert isinstance(stmt, AlterProperties) and stmt.set == {"delta.enableChangeDataFeed": "true", "team": "data"}
    stmt = parse("ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('team')")
    assert isinstance(stmt, AlterProperties) and stmt.unset == ("team",) and stmt.if_exists
    stmt = parse("ALTER TABLE t ADD PARTITION (p = 1)")
    assert isinstance(stmt, AlterOther) and stmt.clause == "ALTER TABLE ... ADD PARTITION"
    text = "ALTER TABLE t ADD COLUMNS (a INT COMMENT 'x, y', b ARRAY<STRING> FIRST, s.c STRUCT<p: INT, q: INT> AFTER b)"
    stmt = parse(text)
    assert isinstance(stmt, AddColumns)
    assert [(c.path, span(text, c.definition), c.position) for c in stmt.columns] == [
        (("a",), "INT COMMENT 'x, y'", None),
        (("b",), "ARRAY<STRING>", ("first", "")),
        (("s", "c"), "STRUCT<p: INT, q: INT>", ("after", "b")),
    ]
    text = "ALTER TABLE t ADD COLUMN c DECIMAL(10, 2)"
    stmt = parse(text)
    assert isinstance(stmt, AddColumns) and [span(text, c.definition) for c in stmt.columns] == ["DECIMAL(10, 2)"]
    stmt = parse("ALTER TABLE t RENAME COLUMN s.`a b` TO c")
    assert isinstance(stmt, RenameColumn) and stmt.path == ("s", "a b") and stmt.new_name == "c"
    stmt = parse("ALTER TABLE t DROP COLUMNS IF EXISTS (a, s.b)")
    assert isinstance(stmt, DropColumns) and stmt.paths == (("a",), ("s", "b")) and stmt.if_exists
    stmt = parse("ALTER TABLE t DROP COLUMN a")
    assert isinstance(stmt, DropColumns) and stmt.paths == (("a",),) and not stmt.if_exists
    stmt = parse("ALTER TABLE t ALTER COLUMN a DROP NOT NULL")
    assert isinstance(stmt, AlterColumn) and stmt.path == ("a",) and stmt.nullable is True
    stmt = parse("ALTER TABLE t ALTER COLUMN a.b AFTER c")
    assert isinstance(stmt, AlterColumn) and stmt.path == ("a", "b") and stmt.position == ("after", "c")
    text = "ALTER TABLE t CHANGE COLUMN a a BIGINT COMMENT 'n' FIRST"
    stmt = parse(text)
    assert isinstance(stmt, AlterColumn) and stmt.data_type is not None and span(text, stmt.data_type) == "BIGINT"
    assert stmt.comment == "n" and stmt.position == ("first", "")
    with pytest.raises(SqlError, match="Renaming column is not supported in Hive-style ALTER COLUMN"):
        parse("ALTER TABLE t CHANGE COLUMN a b BIGINT")
    text = "ALTER TABLE t REPLACE COLUMNS (a INT, b STRING)"
    stmt = parse(text)
    assert isinstance(stmt, ReplaceColumns) and [c.path for c in stmt.columns] == [("a",), ("b",)]
    text = "CONVERT TO DELTA parquet.`/p` NO STATISTICS PARTITIONED BY (day STRING, h INT)"
    stmt = parse(text)
    assert isinstance(stmt, ConvertToDelta) and stmt.path == "/p" and not stmt.collect_stats
    assert stmt.partition_schema is not None and span(text, stmt.partition_schema) == "day STRING, h INT"
    with pytest.raises(SqlError, match="CONVERT TO DELTA of anything but parquet"):
        parse("CONVERT TO DELTA db.t")
    stmt = parse("GENERATE symlink_format_manifest FOR TABLE delta.`/p`")
    assert isinstance(stmt, GenerateManifest) and stmt.table.path == "/p"
    with pytest.raises(SqlError, match="GENERATE other_mode"):
        parse("GENERATE other_mode FOR TABLE t")
    for text in ["SELECT * FROM t", "SHOW DATABASES", "CREATE TEMP VIEW v AS SELECT 1"]:
        assert parse(text) is None, text


def test_describe_table_and_the_describe_forms_left_to_spark() -> None:
    """``DESCRIBE [TABLE] [EXTENDED | FORMATTED] t`` is parsed (the runner answers it for a Delta table); a column,
    a partition, ``AS JSON``, time travel, a function, a database or a query stay Spark's."""
    for text, name, extended in [
        ("DESCRIBE TABLE t", ("t",), False),
        ("desc db.t", ("db", "t"), False),
        ("DESCRIBE TABLE EXTENDED t", ("t",), True),
        ("DESC FORMATTED spark_catalog.db.t", ("spark_catalog", "db", "t"), True),
    ]:
        stmt = parse(text)
        assert isinstance(stmt, DescribeTable) and stmt.table.name == name and stmt.extended is extended, text
    stmt = parse("DESCRIBE TABLE delta.`/p`")
    assert isinstance(stmt, DescribeTable) and stmt.table.path == "/p"
    for text in [
        "DESCRIBE TABLE t a",
        "DESCRIBE TABLE t PARTITION (p = 1)",
        "DESCRIBE TABLE EXTENDED t AS JSON",
        "DESCRIBE t VERSION AS OF 1",
        "DESCRIBE FUNCTION f",
        "DESCRIBE DATABASE EXTENDED db",
        "DESCRIBE QUERY SELECT 1",
        "DESCRIBE SELECT 1",
        "DESCRIBE",
    ]:
        assert parse(text) is None, text
    assert parse("SHOW TABLES") == ShowTables(None, None)
    assert parse("show tables in spark_catalog.`my db` like 'a*|b'") == ShowTables(("spark_catalog", "my db"), "a*|b")
    assert parse("SHOW TABLES FROM lake 'x*'") == ShowTables(("lake",), "x*")
    with pytest.raises(SqlError, match="unexpected text"):
        parse("SHOW TABLES IN lake LIKE 'x' extra")


def test_errors_quote_the_statement() -> None:
    with pytest.raises(SqlError, match=r"expected INTO .* in: MERGE t USING"):
        parse("MERGE t USING s ON a = b WHEN MATCHED THEN DELETE")


def test_alter_table_rename_to_and_set_location() -> None:
    stmt = parse("ALTER TABLE db.t RENAME TO db2.`t 2`")
    assert isinstance(stmt, RenameTable) and stmt.table.name == ("db", "t") and stmt.new_name == ("db2", "t 2")
    stmt = parse("ALTER TABLE t SET LOCATION '/data/t2'")
    assert isinstance(stmt, SetLocation) and stmt.table.name == ("t",) and stmt.location == "/data/t2"
    with pytest.raises(SqlError, match="RENAME TO takes a table name"):
        parse("ALTER TABLE t RENAME TO '/data/t2'")
    with pytest.raises(SqlError, match="SET LOCATION takes a string"):
        parse("ALTER TABLE t SET LOCATION t2")
