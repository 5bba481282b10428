"""Delta's SQL statements, parsed from tokens into plain data (Delta's grammar, ``DeltaSqlBase.g4``, and the DML
and DDL of Spark's grammar that Delta implements).

Only the statement's shape is parsed here: its table, its clauses and keywords. Every expression, condition and
query inside it stays the user's text (``text[start:end]``) and is handed to Spark's own parser when the statement
runs (:mod:`sparkonce.sql.runner`). A clause sparkonce does not implement is an :class:`~sparkonce.errors.SqlError`
naming it, never ignored.

Runs on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sparkonce.sqltext.grammar import Assignment, Span, TableRef


@dataclass(frozen=True)
class DescribeHistory:
    table: TableRef
    limit: int | None


@dataclass(frozen=True)
class DescribeDetail:
    table: TableRef


@dataclass(frozen=True)
class DescribeTable:
    """``DESCRIBE [TABLE] [EXTENDED | FORMATTED] t``; Spark's other DESCRIBE forms are not parsed."""

    table: TableRef
    extended: bool


@dataclass(frozen=True)
class Vacuum:
    table: TableRef
    retain_hours: float | None
    dry_run: bool


@dataclass(frozen=True)
class Optimize:
    table: TableRef
    where: Span | None
    zorder_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Restore:
    table: TableRef
    table_version: int | None
    timestamp: str | None


@dataclass(frozen=True)
class Delete:
    table: TableRef
    alias: str | None
    where: Span | None


@dataclass(frozen=True)
class Update:
    table: TableRef
    alias: str | None
    assignments: tuple[Assignment, ...]
    where: Span | None


MergeWhen = Literal["matched", "notMatched", "notMatchedBySource"]


@dataclass(frozen=True)
class MergeAction:
    when: MergeWhen
    kind: Literal["update", "delete", "insert"]
    condition: Span | None
    assignments: tuple[Assignment, ...] | None
    """None: ``UPDATE SET *`` / ``INSERT *``."""


@dataclass(frozen=True)
class Merge:
    table: TableRef
    alias: str | None
    source_table: TableRef | None
    source_query: Span | None
    source_alias: str | None
    condition: Span
    actions: tuple[MergeAction, ...]
    schema_evolution: bool


@dataclass(frozen=True)
class Insert:
    table: TableRef
    overwrite: bool
    columns: tuple[str, ...] | None
    query: Span
    partition: tuple[tuple[str, Span | None], ...] = ()
    """``PARTITION (p = value, q)``: each partition column with its static value's text (None: its values come
    from the query)."""
    replace_where: Span | None = None
    """``INSERT INTO t REPLACE WHERE predicate query``: the predicate (Delta's ``replaceWhere``)."""


@dataclass(frozen=True)
class CreateTable:
    table: TableRef
    replace: bool
    if_not_exists: bool
    columns: Span | None
    """The column list's text (between the parentheses)."""
    partitioned_by: tuple[str, ...]
    location: str | None
    properties: dict[str, str] = field(default_factory=dict)
    query: Span | None = None
    must_exist: bool = False
    """``REPLACE TABLE`` (without ``CREATE OR``): the table must exist."""
    comment: str | None = None
    """``COMMENT 'text'``: the table's comment."""
    cluster_by: tuple[str, ...] = ()
    """``CLUSTER BY (a, b)``: the clustering columns."""


@dataclass(frozen=True)
class DropTable:
    table: TableRef
    if_exists: bool


@dataclass(frozen=True)
class ShowTblProperties:
    table: TableRef
    key: str | None


@dataclass(frozen=True)
class ShowTables:
    database: tuple[str, ...] | None
    """``FROM``/``IN`` name parts (None: the session's current database)."""
    pattern: str | None
    """The ``LIKE`` pattern: ``*`` any characters, ``|`` between alternatives, case-insensitive."""


@dataclass(frozen=True)
class AlterProperties:
    table: TableRef
    set: dict[str, str]
    unset: tuple[str, ...]
    if_exists: bool


@dataclass(frozen=True)
class ColumnDefinition:
    """One column of ``ADD COLUMNS`` / ``REPLACE COLUMNS``: its path (a nested field's parents first), the text of
    its definition after the name (Spark's DDL: ``TYPE [NOT NULL] [COMMENT '...']``) and its position."""

    path: tuple[str, ...]
    definition: Span
    position: tuple[Literal["first", "after"], str] | None = None


@dataclass(frozen=True)
class AddColumns:
    table: TableRef
    columns: tuple[ColumnDefinition, ...]


@dataclass(frozen=True)
class ReplaceColumns:
    """``ALTER TABLE t REPLACE COLUMNS (...)``."""

    table: TableRef
    columns: tuple[ColumnDefinition, ...]


@dataclass(frozen=True)
class RenameColumn:
    """``ALTER TABLE t RENAME COLUMN a.b TO c``."""

    table: TableRef
    path: tuple[str, ...]
    new_name: str


@dataclass(frozen=True)
class DropColumns:
    """``ALTER TABLE t DROP COLUMN[S] [IF EXISTS] a, b.c``."""

    table: TableRef
    paths: tuple[tuple[str, ...], ...]
    if_exists: bool


@dataclass(frozen=True)
class AlterColumn:
    """``ALTER TABLE t ALTER|CHANGE [COLUMN] c ...``: ``TYPE t``, ``COMMENT 's'``, ``SET|DROP NOT NULL``,
    ``FIRST``, ``AFTER x``, or Hive's ``CHANGE c c TYPE [COMMENT 's'] [FIRST|AFTER x]``."""

    table: TableRef
    path: tuple[str, ...]
    data_type: Span | None = None
    comment: str | None = None
    nullable: bool | None = None
    position: tuple[Literal["first", "after"], str] | None = None


@dataclass(frozen=True)
class GenerateManifest:
    table: TableRef


@dataclass(frozen=True)
class ConvertToDelta:
    path: str
    partition_schema: Span | None
    collect_stats: bool


@dataclass(frozen=True)
class DropFeature:
    table: TableRef
    feature: str
    truncate_history: bool


@dataclass(frozen=True)
class AlterClusterBy:
    """``ALTER TABLE t CLUSTER BY (a, b)``; ``CLUSTER BY NONE``: no columns."""

    table: TableRef
    columns: tuple[str, ...]


@dataclass(frozen=True)
class AddConstraint:
    """``ALTER TABLE t ADD CONSTRAINT name CHECK (expr)``."""

    table: TableRef
    name: str
    expression: Span


@dataclass(frozen=True)
class DropConstraint:
    """``ALTER TABLE t DROP CONSTRAINT [IF EXISTS] name``."""

    table: TableRef
    name: str
    if_exists: bool


@dataclass(frozen=True)
class RenameTable:
    """``ALTER TABLE t RENAME TO new_name``."""

    table: TableRef
    new_name: tuple[str, ...]


@dataclass(frozen=True)
class SetLocation:
    """``ALTER TABLE t SET LOCATION 'path'``."""

    table: TableRef
    location: str


@dataclass(frozen=True)
class AlterOther:
    """Another ``ALTER TABLE`` form: Spark's for its own tables, not supported on a Delta table."""

    table: TableRef
    clause: str


Statement = (
    DescribeHistory
    | DescribeDetail
    | DescribeTable
    | Vacuum
    | Optimize
    | Restore
    | Delete
    | Update
    | Merge
    | Insert
    | CreateTable
    | DropTable
    | ShowTables
    | ShowTblProperties
    | AlterProperties
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
    | GenerateManifest
    | ConvertToDelta
)


__all__ = [
    "AddColumns",
    "AlterColumn",
    "ColumnDefinition",
    "DropColumns",
    "RenameColumn",
    "RenameTable",
    "ReplaceColumns",
    "AlterClusterBy",
    "AlterOther",
    "AlterProperties",
    "ConvertToDelta",
    "CreateTable",
    "Delete",
    "DescribeDetail",
    "DescribeHistory",
    "DropFeature",
    "AddConstraint",
    "DropConstraint",
    "DropTable",
    "GenerateManifest",
    "Insert",
    "Merge",
    "MergeAction",
    "Optimize",
    "Restore",
    "SetLocation",
    "ShowTables",
    "ShowTblProperties",
    "Statement",
    "Update",
    "Vacuum",
]
