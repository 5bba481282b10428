"""Delta CHECK constraints (writer feature ``checkConstraints``): ``ALTER TABLE t ADD CONSTRAINT name CHECK (expr)``
stores ``delta.constraints.<name>`` = the expression's text in the table's ``metaData.configuration``; every write
fails, nothing committed, when a row's expression is false or null, with Delta's
``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES``.

Adding a constraint checks the table's rows first (Spark counts the rows where it is false or null, as Delta does)
and fails with ``DELTA_NEW_CHECK_CONSTRAINT_VIOLATION``; ``DROP CONSTRAINT [IF EXISTS]`` removes it. Executors
evaluate constraints over each Arrow batch with :mod:`sparkonce.delta.expressions` (the subset in
docs/generated-columns.md); a constraint outside it is refused when it is added, and a table holding one is refused at
the first write, before any data moves.

Runs on the driver (``CheckConstraints.apply`` on executors).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce._types import TableVersion
from sparkonce.errors import ConcurrentWriteError, ConstraintViolationError, SqlError, UnsupportedFeatureError
from sparkonce.sqltext.expression import Expr, columns_of, parse_expression

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkonce.delta.table_view import AnyTable
    from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

PREFIX = "delta.constraints."
FEATURE = "checkConstraints"
MIN_WRITER_VERSION = 3
ASSUME_IF_EXISTS_CONF = "spark.databricks.delta.constraints.assumesDropIfExists.enabled"


@dataclass(frozen=True)
class CheckConstraint:
    name: str
    expression: str
    tree: Expr

    def shown(self) -> str:
        """The expression as Delta's messages show it (parenthesized)."""
        text = self.expression.strip()
        return text if text.startswith("(") and text.endswith(")") else f"({text})"


@dataclass(frozen=True)
class CheckConstraints:
    """The CHECK constraints of a table, checked on the driver; pickled to executors, which check the rows they
    write."""

    constraints: tuple[CheckConstraint, ...]
    table_schema: pa.Schema | None = None
    """The table's columns: a column the data lacks reads as null (as in Delta)."""

    @classmethod
    def of(cls, table: AnyTable, *, shown: str | None = None) -> CheckConstraints | None:
        """The table's constraints (None when it has none). Runs on the driver.

        Raises:
            UnsupportedFeatureError: a constraint sparkonce cannot evaluate (naming it).
        """
        from sparkonce.delta.schema import table_arrow_schema

        configuration = {str(k): str(v) for k, v in table.metadata().configuration.items() if v is not None}
        return cls.from_configuration(configuration, table_arrow_schema(table), shown=shown or table.table_uri)

    @classmethod
    def from_configuration(
        cls, configuration: Mapping[str, str], schema: pa.Schema, *, shown: str
    ) -> CheckConstraints | None:
        found = [
            _checked(key[len(PREFIX) :], text, schema, shown)
            for key, text in configuration.items()
            if key.lower().startswith(PREFIX)
        ]
        return cls(tuple(found), schema) if found else None

    def apply(self, batch: pa.Table) -> None:
        """Check every row of a batch about to be written. Runs on executors.

        Raises:
            ConstraintViolationError: a row for which a constraint is false or null (Delta's message).
        """
        import pyarrow.compute as pc

        from sparkonce.delta.expressions import Evaluator

        evaluator = Evaluator(batch, missing=self.table_schema)
        for constraint in self.constraints:
            result = evaluator.evaluate(constraint.tree)
            ok = pc.fill_null(result, False) if not pa.types.is_null(result.type) else None
            if ok is not None and pc.all(ok).as_py() in (True, None):
                continue
            row = 0 if ok is None else int(pc.index(ok, False).as_py())
            sources = {c.lower() for c in columns_of(constraint.tree)}
            names = sorted(n for n in batch.column_names if n.lower() in sources)
            raise violation(f"{constraint.name} {constraint.shown()}", {n: batch[n][row].as_py() for n in names})


def _checked(name: str, text: str, schema: pa.Schema, shown: str) -> CheckConstraint:
    from sparkonce.delta.expressions import check_expression

    try:
        tree = parse_expression(text)
        kind = check_expression(tree, schema)
    except (SqlError, UnsupportedFeatureError) as err:
        raise UnsupportedFeatureError(
            f"CHECK constraint {name} ({text}) of {shown}: {err}; sparkonce evaluates the subset of Spark SQL in "
            "docs/generated-columns.md; nothing was written"
        ) from err
    if not (pa.types.is_boolean(kind) or pa.types.is_null(kind)):
        raise SqlError(f"[DELTA_NON_BOOLEAN_CHECK_CONSTRAINT] CHECK constraint '{name}' ({text}) should be a boolean "
                       "expression.")  # fmt: skip
    return CheckConstraint(name, text, tree)


def add_constraint(
    spark: SparkSession, table: str | TableLocation, name: str, expression: str, *, shown: str | None = None
) -> TableVersion:
    """``ALTER TABLE ... ADD CONSTRAINT name CHECK (expression)``: one ``ADD CONSTRAINT`` commit (the protocol
    upgraded to writer 3, or the ``checkConstraints`` feature); its table version.

    Raises:
        SqlError: a constraint of that name exists (``DELTA_CONSTRAINT_ALREADY_EXISTS``), rows of the table
            violate it (``DELTA_NEW_CHECK_CONSTRAINT_VIOLATION``), or it is not boolean.
        UnsupportedFeatureError: sparkonce cannot evaluate the expression.
        ConcurrentWriteError: the table changed while its rows were checked.
    """
    from sparkonce.delta.alter import commit_configuration
    from sparkonce.delta.commit import load_table
    from sparkonce.delta.schema import table_arrow_schema
    from sparkonce.storage import table_location

    location = table_location(table)
    shown = shown or str(table)
    key = PREFIX + name.lower()
    snapshot = load_table(location)
    checked_version = int(snapshot.version())
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    old = next((v for k, v in configuration.items() if k.lower() == key), None)
    if old is not None:
        raise SqlError(
            f"[DELTA_CONSTRAINT_ALREADY_EXISTS] Constraint '{name.lower()}' already exists. Please delete the old "
            f"constraint first.\nOld constraint:\n{old}"
        )
    _checked(name.lower(), expression, table_arrow_schema(snapshot), shown)
    rows = (
        spark.read.format("sparkonce.delta")
        .option("versionAsOf", checked_version)
        .load(location.uri)
        .where(f"NOT ({expression}) OR ({expression}) IS NULL")
        .count()
    )
    if rows:
        raise SqlError(
            f"[DELTA_NEW_CHECK_CONSTRAINT_VIOLATION] {rows} rows in {shown} violate the new CHECK constraint "
            f"({expression})"
        )

    def change(current: Any) -> dict[str, str]:
        if int(current.version()) != checked_version:
            raise ConcurrentWriteError(
                f"[DELTA_CONCURRENT_WRITE] ADD CONSTRAINT {name} on {shown}: the table changed (table_version "
                f"{current.version()}) while its rows at table_version {checked_version} were checked; run the "
                "statement again"
            )
        return {**configuration, key: expression}

    return commit_configuration(
        location, "ADD CONSTRAINT", {"name": name.lower(), "expr": expression}, change, feature=FEATURE,
        writer_version=MIN_WRITER_VERSION,
    )  # fmt: skip


def drop_constraint(
    spark: SparkSession, table: str | TableLocation, name: str, *, if_exists: bool, shown: str | None = None
) -> TableVersion | None:
    """``ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name``: one ``DROP CONSTRAINT`` commit; None when there was
    no such constraint and ``if_exists`` (Delta still commits nothing then).

    Raises:
        SqlError: no such constraint, without ``IF EXISTS`` (``DELTA_CONSTRAINT_DOES_NOT_EXIST``).
    """
    from sparkonce.delta.alter import commit_configuration
    from sparkonce.delta.commit import load_table
    from sparkonce.storage import table_location

    location = table_location(table)
    shown = shown or str(table)
    key = PREFIX + name.lower()
    configuration = {str(k): str(v) for k, v in load_table(location).metadata().configuration.items() if v is not None}
    old = next((v for k, v in configuration.items() if k.lower() == key), None)
    if old is None:
        assume = str(spark.conf.get(ASSUME_IF_EXISTS_CONF, "false")).lower() == "true"
        if if_exists or assume:
            return None
        raise SqlError(
            f"[DELTA_CONSTRAINT_DOES_NOT_EXIST] Cannot drop nonexistent constraint {name.lower()} from table {shown}. "
            "To avoid throwing an error, provide the parameter IF EXISTS or set the SQL session configuration "
            f"{ASSUME_IF_EXISTS_CONF} to true."
        )

    def change(current: Any) -> dict[str, str]:
        now = {str(k): str(v) for k, v in current.metadata().configuration.items() if v is not None}
        return {k: v for k, v in now.items() if k.lower() != key}

    return commit_configuration(location, "DROP CONSTRAINT", {"name": name.lower(), "expr": old}, change)


def violation(constraint: str, values: Mapping[str, Any]) -> ConstraintViolationError:
    """Delta's ``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES`` for the row ``values`` (column -> value) that fails
    ``constraint`` (its name and expression as Delta shows them); generated columns use it too."""
    lines = "\n".join(f" - {name} : {'null' if value is None else value}" for name, value in values.items())
    return ConstraintViolationError(
        f"[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint {constraint} violated by row with values:\n{lines}"
    )


__all__ = [
    "ASSUME_IF_EXISTS_CONF",
    "FEATURE",
    "PREFIX",
    "CheckConstraint",
    "CheckConstraints",
    "add_constraint",
    "drop_constraint",
    "violation",
]
