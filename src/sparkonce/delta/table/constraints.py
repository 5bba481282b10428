"""Delta CHECK constraints (writer feature ``checkConstraints``): ``ALTER TABLE t ADD CONSTRAINT name CHECK (expr)``
stores ``delta.constraints.<name>`` = the expression's text in the table's ``metaData.configuration``; every write
fails, nothing committed, when a row's expression is false or null, with Delta's
``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES``.

The statements that add and drop constraints are ALTER TABLE commits (:func:`sparkonce.delta.ops.alter.add_constraint`,
:func:`~sparkonce.delta.ops.alter.drop_constraint`); this module is the evaluation half, below the commit. Executors
evaluate constraints over each Arrow batch with :mod:`sparkonce.delta.table.expressions` (the subset in
docs/generated-columns.md); a constraint outside it is refused when it is added, and a table holding one is refused at
the first write, before any data moves.

Runs on the driver (``CheckConstraints.apply`` on executors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.errors import ConstraintViolationError, SqlError, UnsupportedFeatureError
from sparkonce.sqltext.expression import Expr, columns_of, parse_expression

if TYPE_CHECKING:
    from sparkonce.delta.log.table_view import AnyTable

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
        from sparkonce.delta.table.schema import table_arrow_schema

        configuration = {str(k): str(v) for k, v in table.metadata().configuration.items() if v is not None}
        if not any(key.lower().startswith(PREFIX) for key in configuration):
            return None  # no schema needed (delta-rs does not know every type: geometry, geography)
        return cls.from_configuration(configuration, table_arrow_schema(table), shown=shown or table.table_uri)

    @classmethod
    def from_configuration(
        cls, configuration: Mapping[str, str], schema: pa.Schema, *, shown: str
    ) -> CheckConstraints | None:
        found = [
            parse_constraint(key[len(PREFIX) :], text, schema, shown)
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

        from sparkonce.delta.table.expressions import Evaluator

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


def parse_constraint(name: str, text: str, schema: pa.Schema, shown: str) -> CheckConstraint:
    """The constraint ``name`` of the table ``shown`` whose expression is ``text``, checked against the table's
    columns ``schema``. Runs on the driver.

    Raises:
        UnsupportedFeatureError: sparkonce cannot evaluate the expression (naming it).
        SqlError: the expression is not boolean (``DELTA_NON_BOOLEAN_CHECK_CONSTRAINT``).
    """
    from sparkonce.delta.table.expressions import check_expression

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
    "parse_constraint",
    "violation",
]
