"""Delta generated columns (writer feature ``generatedColumns``): a column whose value is a SQL expression of the
row's other columns, stored as the field's metadata ``delta.generationExpression``.

As Delta does, on every write (batch, streaming, UPDATE, MERGE): a generated column missing from the data is
computed from the row; a given value must equal the expression, null-safe (``<=>``), or the write fails with Delta's
``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES`` and nothing is committed. The driver reads the table's generated columns
(:meth:`GeneratedColumns.of`) and checks each expression before any data moves; executors compute and check them
over each Arrow batch (:meth:`GeneratedColumns.apply`) with :mod:`sparkonce.delta.table.expressions`.

A column is generated only when the protocol supports the feature (writer version 4 to 6, or
``generatedColumns`` among the writer features of version 7), as Delta reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.delta.table.constraints import violation
from sparkonce.errors import SqlError, UnsupportedFeatureError
from sparkonce.sqltext.expression import Expr, columns_of, parse_expression

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from sparkonce.delta.log.table_view import AnyTable

GENERATION_EXPRESSION_KEY = "delta.generationExpression"
FEATURE = "generatedColumns"
MIN_WRITER_VERSION = 4


@dataclass(frozen=True)
class GeneratedColumn:
    """One generated column: its name, its expression (text and tree) and its Arrow type."""

    name: str
    expression: str
    tree: Expr
    arrow_type: pa.DataType

    @property
    def sources(self) -> frozenset[str]:
        """The (lower-case) names of the columns the expression reads."""
        return frozenset(c.lower() for c in columns_of(self.tree))

    def constraint_sql(self) -> str:
        """Delta's constraint text for the column (``(d <=> <expression>)``), as its error message shows it."""
        return f"({self.name} <=> {self.expression})"


@dataclass(frozen=True)
class GeneratedColumns:
    """The generated columns of a table, checked on the driver; pickled to executors, which apply them to the rows
    they write."""

    columns: tuple[GeneratedColumn, ...]
    table_schema: pa.Schema | None = None
    """The table's columns: a source column the data lacks reads as null (as in Delta)."""

    @classmethod
    def of(cls, table: AnyTable, *, shown: str | None = None) -> GeneratedColumns | None:
        """The generated columns of a delta-rs table (None when it has none). Runs on the driver.

        Raises:
            UnsupportedFeatureError: an expression outside what sparkonce evaluates (naming the column).
        """
        from sparkonce.delta.table.schema import table_arrow_schema

        protocol = table.protocol()
        if not supports_generated_columns(protocol.min_writer_version, protocol.writer_features or ()):
            return None
        fields = json.loads(table.schema().to_json())["fields"]
        return cls.from_fields(fields, table_arrow_schema(table), shown=shown or table.table_uri)

    @classmethod
    def from_fields(
        cls, fields: Iterable[Mapping[str, Any]], arrow_schema: pa.Schema, *, shown: str
    ) -> GeneratedColumns | None:
        """The generated columns of Delta's JSON fields (None when there are none), each expression checked as
        Delta checks it at creation: it reads existing columns that are not generated, and its type is the
        column's. Runs on the driver.

        Raises:
            UnsupportedFeatureError: an expression outside what sparkonce evaluates.
            SqlError: an expression that is not valid for a generated column (Delta's error names).
        """
        from sparkonce.delta.table.expressions import check_expression

        fields = list(fields)
        found: list[GeneratedColumn] = []
        for field in fields:
            text = (field.get("metadata") or {}).get(GENERATION_EXPRESSION_KEY)
            if text is None:
                continue
            name = str(field["name"])
            try:
                tree = parse_expression(str(text))
            except SqlError as err:
                raise UnsupportedFeatureError(
                    f"generated column {name} of {shown}: sparkonce cannot evaluate {text!r} ({err}); nothing was "
                    "written"
                ) from err
            found.append(GeneratedColumn(name, str(text), tree, arrow_schema.field(name).type))
        if not found:
            return None
        generated = {c.name.lower() for c in found}
        known = {str(f["name"]).lower() for f in fields}
        for column in found:
            if not column.sources <= known or column.sources & generated:
                raise SqlError(
                    "[DELTA_INVALID_GENERATED_COLUMN_REFERENCES] A generated column cannot use a non-existent column "
                    f"or another generated column (column {column.name} of {shown}: {column.expression})"
                )
            source_schema = pa.schema([f for f in arrow_schema if f.name.lower() not in generated])
            try:
                kind = check_expression(column.tree, source_schema)
            except UnsupportedFeatureError as err:
                raise UnsupportedFeatureError(
                    f"generated column {column.name} of {shown} ({column.expression}): {err}; sparkonce evaluates "
                    "the subset of Spark SQL in docs/generated-columns.md; nothing was written"
                ) from err
            if not pa.types.is_null(kind) and not _same_type(kind, column.arrow_type):
                raise SqlError(
                    f"[DELTA_GENERATED_COLUMNS_EXPR_TYPE_MISMATCH] The expression type of the generated column "
                    f"{column.name} is {_spark_type(kind)}, but the column type is {_spark_type(column.arrow_type)}"
                )
        return cls(tuple(found), arrow_schema)

    def names(self) -> frozenset[str]:
        return frozenset(c.name.lower() for c in self.columns)

    def apply(self, batch: pa.Table) -> pa.Table:
        """The rows to write: missing generated columns computed, given ones checked. Runs on executors.

        Raises:
            ConstraintViolationError: a row's given value differs from its expression (Delta's message).
            ExpressionError: the expression fails on a row as Spark's ANSI mode fails it.
        """
        from sparkonce.delta.table.expressions import Evaluator

        evaluator = Evaluator(batch, missing=self.table_schema)
        present = {name.lower(): i for i, name in enumerate(batch.column_names)}
        for column in self.columns:
            value = evaluator.evaluate(column.tree)
            if value.type != column.arrow_type:
                value = _cast(value, column.arrow_type)
            index = present.get(column.name.lower())
            if index is None:
                batch = batch.append_column(pa.field(column.name, column.arrow_type), value)
                continue
            given = batch.column(index).combine_chunks()
            if given.type != column.arrow_type:
                given = _cast(given, column.arrow_type)
            _check_equal(column, given, value, batch)
        return batch


def supports_generated_columns(min_writer_version: int, writer_features: Iterable[str]) -> bool:
    """Whether a protocol makes columns with a generation expression generated columns."""
    if min_writer_version >= 7:
        return FEATURE in set(writer_features)
    return min_writer_version >= MIN_WRITER_VERSION


def has_generation_expressions(schema_string: str) -> bool:
    """Whether a ``schemaString`` has a field with ``delta.generationExpression``."""
    return f'"{GENERATION_EXPRESSION_KEY}"' in schema_string


def check_new_table_columns(schema_string: str, arrow_schema: pa.Schema, *, shown: str) -> None:
    """Check the generated columns of a table about to be created (before anything is written). Runs on the driver.

    Raises:
        UnsupportedFeatureError: an expression outside what sparkonce evaluates.
        SqlError: an expression Delta refuses.
    """
    if has_generation_expressions(schema_string):
        GeneratedColumns.from_fields(json.loads(schema_string)["fields"], arrow_schema, shown=shown)


def check_spark_schema(schema: StructType, *, shown: str) -> None:
    """Check the generated columns of a table to create with a Spark schema (builders, ``CREATE TABLE``), on the
    driver before anything is written.

    Raises:
        UnsupportedFeatureError: an expression outside what sparkonce evaluates.
        SqlError: an expression Delta refuses.
    """
    from sparkonce.delta.table.schema import arrow_schema_for_spark, delta_schema_string

    arrow_schema = arrow_schema_for_spark(schema)
    check_new_table_columns(delta_schema_string(arrow_schema), arrow_schema, shown=shown)


def regenerate(frame: DataFrame, column: GeneratedColumn, when: Column) -> DataFrame:
    """``frame`` (a statement's new rows) with ``column`` recomputed by Spark where ``when`` holds: the rows an
    UPDATE or MERGE changes a source of the column without assigning the column itself, and the rows a MERGE
    inserts without it, as Delta does. Runs on the driver (Spark plans the expression)."""
    import pyspark.sql.functions as F

    kind = frame.schema[column.name].dataType
    return frame.withColumn(
        column.name, F.when(when, F.expr(column.expression).cast(kind)).otherwise(F.col(column.name))
    )


def _same_type(left: pa.DataType, right: pa.DataType) -> bool:
    if pa.types.is_timestamp(left) and pa.types.is_timestamp(right):
        return (left.tz is None) == (right.tz is None)
    if pa.types.is_string(left) or pa.types.is_large_string(left):
        return bool(pa.types.is_string(right) or pa.types.is_large_string(right))
    return bool(left == right)


def _spark_type(kind: pa.DataType) -> str:
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
             pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING", pa.large_string(): "STRING",
             pa.bool_(): "BOOLEAN", pa.date32(): "DATE"}  # fmt: skip
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP" if kind.tz is not None else "TIMESTAMP_NTZ"
    return names.get(kind, str(kind).upper())


def _cast(value: pa.Array, kind: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(value.type) and pa.types.is_timestamp(kind):
        return value.cast(pa.timestamp(kind.unit, kind.tz), safe=False)
    return value.cast(kind)


def _check_equal(column: GeneratedColumn, given: pa.Array, expected: pa.Array, batch: pa.Table) -> None:
    import pyarrow.compute as pc

    equal = pc.equal(given, expected)
    both_null = pc.and_(pc.is_null(given), pc.is_null(expected))
    ok = pc.if_else(pc.is_null(equal), both_null, equal)
    if pc.all(ok).as_py() in (True, None):
        return
    row = int(pc.index(ok, False).as_py())
    names = sorted({column.name, *(n for n in batch.column_names if n.lower() in column.sources)})
    by_lower = {n.lower(): n for n in batch.column_names}
    values: dict[str, Any] = {}
    for name in names:
        source = by_lower.get(name.lower())
        values[name] = given[row].as_py() if source is None or name == column.name else batch[source][row].as_py()
    raise violation(f"Generated Column {column.constraint_sql()}", values)


__all__ = [
    "FEATURE",
    "GENERATION_EXPRESSION_KEY",
    "GeneratedColumn",
    "GeneratedColumns",
    "check_new_table_columns",
    "check_spark_schema",
    "has_generation_expressions",
    "regenerate",
    "supports_generated_columns",
]
