"""Spark SQL scalar expressions as trees (no Spark): precedence, the forms generated columns and CHECK constraints
use, what is refused, ``GENERATED ALWAYS AS`` taken out of a column list, and ``ADD / DROP CONSTRAINT``."""

from __future__ import annotations

import pytest

from sparkonce.errors import SqlError
from sparkonce.sql.parser import parse_statement
from sparkonce.sql.statements import AddConstraint, DropConstraint
from sparkonce.sqltext.expression import (
    Binary,
    Call,
    Case,
    Cast,
    Column,
    In,
    IsNull,
    Literal,
    Unary,
    columns_of,
    parse_expression,
    split_generated_columns,
)
from sparkonce.sqltext.lexer import tokenize


def test_precedence_follows_spark() -> None:
    assert parse_expression("a + b * 2 > 3 AND NOT c OR d IS NULL") == Binary(
        "OR",
        Binary(
            "AND",
            Binary(">", Binary("+", Column("a"), Binary("*", Column("b"), Literal(2, "int"))), Literal(3, "int")),
            Unary("NOT", Column("c")),
        ),
        IsNull(Column("d"), False),
    )


def test_the_forms_generated_columns_use() -> None:
    assert parse_expression("CAST(`event time` AS DATE)") == Cast(Column("event time"), "DATE")
    assert parse_expression("date_format(ts, 'yyyy-MM')") == Call(
        "DATE_FORMAT", (Column("ts"), Literal("yyyy-MM", "string"))
    )
    assert parse_expression("SUBSTRING(s FROM 2 FOR 3)") == Call(
        "SUBSTRING", (Column("s"), Literal(2, "int"), Literal(3, "int"))
    )
    assert parse_expression("CASE WHEN x > 0 THEN 'p' ELSE 'n' END") == Case(
        None, ((Binary(">", Column("x"), Literal(0, "int")), Literal("p", "string")),), Literal("n", "string")
    )
    assert parse_expression("id NOT IN (1, 2)") == In(Column("id"), (Literal(1, "int"), Literal(2, "int")), True)
    assert parse_expression("-5") == Literal(-5, "int")
    assert parse_expression("1.5") == Literal("1.5", "decimal")
    assert parse_expression("1.5D") == Literal(1.5, "double")
    assert parse_expression("3000000000") == Literal(3000000000, "bigint")
    assert parse_expression("CAST(x AS DECIMAL(10, 2))") == Cast(Column("x"), "DECIMAL(10,2)")
    assert columns_of(parse_expression("concat(a, b, lower(a))")) == {"a", "b"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("(SELECT max(x) FROM t)", "a subquery is not supported"),
        ("x IN (SELECT y FROM t)", "a subquery is not supported"),
        ("sum(x) OVER (PARTITION BY y)", "window and aggregate clauses are not supported"),
        ("t.x + 1", "qualified column names"),
        ("x::int", "unsupported operator"),
        ("DATE '2024-01-01'", "DATE literals are not supported"),
        ("a +", "ends too early"),
        ("a b", "unexpected"),
    ],
)
def test_what_is_not_an_expression_of_the_subset_is_an_error(text: str, problem: str) -> None:
    with pytest.raises(SqlError, match=problem):
        parse_expression(text)


def test_generated_always_as_is_taken_out_of_a_column_list() -> None:
    ddl, generated = split_generated_columns(
        "id BIGINT, ts TIMESTAMP, day DATE GENERATED ALWAYS AS (CAST(ts AS DATE)) COMMENT 'd', "
        "`m s` STRING GENERATED ALWAYS AS (date_format(ts, 'yyyy-MM')), s STRUCT<a: INT, b: INT>"
    )
    assert ddl == "id BIGINT, ts TIMESTAMP, day DATE  COMMENT 'd', `m s` STRING , s STRUCT<a: INT, b: INT>"
    assert generated == {"day": "CAST(ts AS DATE)", "m s": "date_format(ts, 'yyyy-MM')"}


def test_add_and_drop_constraint_statements() -> None:
    text = "ALTER TABLE delta.`/p` ADD CONSTRAINT positive CHECK (amount > 0 AND (id IS NOT NULL))"
    stmt = parse_statement(text, tokenize(text))
    assert isinstance(stmt, AddConstraint)
    assert (stmt.table.path, stmt.name, text[stmt.expression.start : stmt.expression.end]) == (
        "/p",
        "positive",
        "amount > 0 AND (id IS NOT NULL)",
    )
    text = "ALTER TABLE db.t DROP CONSTRAINT IF EXISTS positive"
    assert parse_statement(text, tokenize(text)) == DropConstraint(
        parse_statement(text, tokenize(text)).table,  # type: ignore[union-attr]
        "positive",
        True,
    )
    text = "ALTER TABLE db.t ADD CONSTRAINT pk PRIMARY KEY (id)"
    with pytest.raises(SqlError, match="ADD CONSTRAINT other than CHECK is not supported"):
        parse_statement(text, tokenize(text))
