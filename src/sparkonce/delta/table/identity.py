"""Identity columns (Delta's "Identity Columns"): ``id BIGINT GENERATED ALWAYS | BY DEFAULT AS IDENTITY (START WITH
s INCREMENT BY t)`` and delta-spark's ``addColumn(..., generatedAlwaysAs=IdentityGenerator(s, t))`` /
``generatedByDefaultAs=IdentityGenerator(...)``.

An identity column is a ``long`` column whose schema metadata holds ``delta.identity.start``, ``.step``,
``.allowExplicitInsert`` and, once values were written, ``.highWaterMark`` (the largest value in the column for a
positive step, the smallest for a negative one). The table needs writer version 6 or the ``identityColumns``
feature.

Writes (``df.write``, the streaming sink, ``INSERT INTO``): the driver plans each identity column the data lacks
(:func:`plan_identity`, with the high-water mark it read); executors fill it without coordination (:func:`fill_batches`)
with Delta's rule when the number of tasks ``n`` is known: task ``p`` writes ``base + step * (p + i * n)`` for its
``i``-th row, ``base`` being ``highWaterMark + step`` (or ``start`` on a table without values yet). A Python data source
task cannot see ``n``: sparkonce's own writes (``INSERT INTO``) pass it (:data:`TASKS_OPTION`, the query's partition
count; a task numbered beyond it fails the write); a plain ``df.write`` or a streaming batch, without it, gives each
task its own block, ``base + step * (p * 2**33 + i)`` (Spark's ``monotonically_increasing_id`` layout: one task writes
``start, start + step, ...``; more tasks leave gaps). Both give values of the form ``start + k * step`` beyond the high-
water mark, unique across tasks. A retried task writes the same values again (only committed files count), and a
streaming batch that is replayed after its commit is skipped by its ``txn``. The commit
(:meth:`IdentityPlan.updated_fields`) moves the ``highWaterMark`` of each column it generated to the extreme value
written (rounded to the column's sequence) in a ``metaData`` action; explicit values of a ``BY DEFAULT`` column never
move it (Delta tracks only the columns it generated, ``trackHighWaterMarks``); a concurrent commit that moved a
high-water mark of a generated column since the plan is a conflict (the values may overlap), and nothing is
committed.

``GENERATED ALWAYS`` refuses values in the data (Delta's ``DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED``);
``BY DEFAULT`` keeps them. ``DELETE``, ``UPDATE`` (which may not assign an identity column, Delta's
``DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``: :func:`check_not_updated`), ``OPTIMIZE`` and metadata-only ``ALTER
TABLE`` commits keep every value. ``MERGE`` (:mod:`sparkonce.delta.ops.merge`) generates the values of the rows its
``WHEN NOT MATCHED THEN INSERT`` clauses insert without one, numbering them densely in its Spark plan, and moves the
high-water marks of the columns it generated (:meth:`IdentityPlan.tracking`), as Delta's ``PreprocessTableMerge``
does. ``RESTORE`` that would take a high-water mark back stays refused
(:func:`sparkonce.delta.log.log_entry.check_writable`).

Runs on the driver (planning, commit) and on executors (:func:`fill_batches`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkonce.errors import CommitConflictError, MetadataChangedError, SqlError

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
ALLOW_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"

TASKS_OPTION = "__identity_tasks"
"""The write option with the number of tasks of the write (the query's partition count), for Delta's rule."""

TASK_BITS = 33
"""Each task's values are the ``2**33`` steps from ``base + step * task * 2**33`` (Spark's
``monotonically_increasing_id`` layout)."""

REWRITES_KEEPING_VALUES = frozenset({"OPTIMIZE", "DELETE", "UPDATE"})
"""Operations on an identity table that write no new rows (they keep every row's value): allowed without a plan
(``UPDATE`` may not assign an identity column: :func:`check_not_updated`)."""

IDENTITY_WRITING_REWRITES = frozenset({"MERGE"})
"""Rewrites that generate identity values themselves and commit with an :class:`IdentityPlan`."""

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class IdentityGenerator:
    """delta-spark's ``IdentityGenerator``: the ``start`` and ``step`` of an identity column (``step`` not 0)."""

    start: int = 1
    step: int = 1


def column_metadata(start: int, step: int, *, allow_explicit_insert: bool) -> dict[str, Any]:
    """The schema metadata of a new identity column (no high-water mark yet), as Delta writes it.

    Raises:
        ValueError: ``step`` is 0 (delta-spark's message).
    """
    if step == 0:
        raise ValueError("Column identity generation requires step to be non-zero.")
    for value in (start, step):
        if type(value) is not int or not _LONG_MIN <= value <= _LONG_MAX:
            raise TypeError(f"IdentityGenerator start and step must be int (a BIGINT). Found {value!r}")
    return {START: start, STEP: step, ALLOW_EXPLICIT_INSERT: allow_explicit_insert}


@dataclass(frozen=True)
class IdentityColumn:
    """One identity column of a table's schema."""

    name: str
    physical_name: str
    start: int
    step: int
    allow_explicit_insert: bool
    high_water_mark: int | None

    @property
    def base(self) -> int:
        """The first value the next write generates."""
        return self.start if self.high_water_mark is None else self.high_water_mark + self.step


def identity_columns(fields: Sequence[Mapping[str, Any]]) -> list[IdentityColumn]:
    """The identity columns among a Delta schema's top-level fields (its JSON)."""
    from sparkonce.delta.table.column_mapping import PHYSICAL_NAME_KEY

    out = []
    for f in fields:
        metadata = f.get("metadata") or {}
        if START not in metadata:
            continue
        hwm = metadata.get(HIGH_WATER_MARK)
        out.append(
            IdentityColumn(
                name=str(f["name"]),
                physical_name=str(metadata.get(PHYSICAL_NAME_KEY, f["name"])),
                start=int(metadata[START]),
                step=int(metadata[STEP]),
                allow_explicit_insert=bool(metadata.get(ALLOW_EXPLICIT_INSERT, False)),
                high_water_mark=int(hwm) if hwm is not None else None,
            )
        )
    return out


def explicit_insert_error(column: str) -> SqlError:
    """Delta's error for values given to a ``GENERATED ALWAYS AS IDENTITY`` column."""
    return SqlError(
        "[DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED] Providing values for GENERATED ALWAYS AS IDENTITY "
        f"column {column} is not supported."
    )


def check_not_updated(columns: Sequence[IdentityColumn], assigned: Iterable[str]) -> None:
    """Refuse an ``UPDATE SET`` (or ``MERGE ... UPDATE SET``, ``UPDATE SET *``) that assigns an identity column,
    ``GENERATED ALWAYS`` or ``BY DEFAULT``, as Delta does (names matched ignoring case). Runs on the driver.

    Raises:
        SqlError: Delta's ``DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``, naming the column as assigned.
    """
    names = {c.name.lower() for c in columns}
    for name in assigned:
        if name.lower() in names:
            raise SqlError(
                f"[DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED] UPDATE on IDENTITY column {name} is not supported."
            )


def check_new_columns(fields: Sequence[Mapping[str, Any]], partition_by: Sequence[str], *, table: str) -> None:
    """Check the identity columns of a table to create (Delta's rules: BIGINT only, step not 0, not a partition
    column, not also a generated column).

    Raises:
        SqlError: with Delta's error class.
    """
    for f in fields:
        metadata = f.get("metadata") or {}
        if START not in metadata:
            continue
        if f.get("type") != "long":
            raise SqlError(
                f"[DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE] DataType {f.get('type')} is not supported for "
                f"IDENTITY columns (column {f['name']} of {table})."
            )
        if int(metadata.get(STEP, 0)) == 0:
            raise SqlError("[DELTA_IDENTITY_COLUMNS_ILLEGAL_STEP] IDENTITY column step cannot be 0.")
        if "delta.generationExpression" in metadata:
            raise SqlError(
                "[DELTA_IDENTITY_COLUMNS_WITH_GENERATED_EXPRESSION] IDENTITY column cannot be specified with a "
                "generated column expression."
            )
        if f["name"] in partition_by:
            raise SqlError(
                f"[DELTA_IDENTITY_COLUMNS_PARTITION_NOT_SUPPORTED] PARTITIONED BY IDENTITY column {f['name']} is not "
                "supported."
            )


@dataclass(frozen=True)
class IdentityFill:
    """One identity column an executor fills (pickled to executors)."""

    name: str
    base: int
    step: int
    tasks: int | None = None
    """The write's number of tasks (Delta's stride), or None (a block per task)."""


@dataclass(frozen=True)
class IdentityPlan:
    """What a write does to the table's identity columns: the ones it fills, and the high-water marks it read."""

    fills: tuple[IdentityFill, ...]
    columns: tuple[IdentityColumn, ...]

    @staticmethod
    def tracking(columns: Iterable[IdentityColumn]) -> IdentityPlan:
        """The plan of a write whose Spark plan generated ``columns``' values itself (a MERGE's inserts): the
        commit moves their high-water marks from the files' statistics, as for a write the tasks filled. Other
        identity columns of the table keep their marks (Delta tracks only the columns it generated)."""
        return IdentityPlan((), tuple(columns))

    def updated_fields(
        self, fields: list[dict[str, Any]], files: Sequence[Any], *, table: str
    ) -> list[dict[str, Any]] | None:
        """The schema fields with the high-water marks this commit's ``files`` move; None when none moves.

        ``fields``: the table's schema as the commit attempt read it. Runs on the driver.

        Raises:
            MetadataChangedError: a concurrent commit moved a high-water mark since the plan (the values this write
                generated may be taken).
        """
        now = {c.name: c for c in identity_columns(fields)}
        changed = False
        out = [dict(f) for f in fields]
        for column in self.columns:
            current = now.get(column.name)
            if current is None or current.high_water_mark != column.high_water_mark:
                raise MetadataChangedError(  # Delta: both commits change the metadata (the marks)
                    f"[DELTA_METADATA_CHANGED] identity column {column.name} of {table}: a concurrent commit moved "
                    "its high-water mark "
                    f"({column.high_water_mark} when this write planned, "
                    f"{current.high_water_mark if current else 'no column'} now); nothing was committed, run the "
                    "write again"
                )
            candidate = _extreme(column, files)
            if candidate is None:
                continue
            new = _valid_high_water_mark(column, candidate)
            if new is None or new == column.high_water_mark:
                continue
            for f in out:
                if f["name"] == column.name:
                    f["metadata"] = {**(f.get("metadata") or {}), HIGH_WATER_MARK: new}
            changed = True
        return out if changed else None


def plan_identity(
    fields: Sequence[Mapping[str, Any]], data_schema: pa.Schema, *, table: str, tasks: int | None = None
) -> IdentityPlan | None:
    """Plan a write of ``data_schema`` into a table with schema ``fields``; None when the table has no identity
    column. Runs on the driver, before any data moves.

    Raises:
        SqlError: data for a ``GENERATED ALWAYS`` column (Delta's error), or an identity column's data not BIGINT.
    """
    columns = identity_columns(fields)
    if not columns:
        return None
    given = {n.lower(): n for n in data_schema.names}
    fills = []
    for column in columns:
        name = given.get(column.name.lower())
        if name is None:
            fills.append(IdentityFill(column.name, column.base, column.step, tasks))
            continue
        if not column.allow_explicit_insert:
            raise explicit_insert_error(column.name)
        if not pa.types.is_int64(data_schema.field(name).type):
            raise SqlError(
                f"{table}: values for identity column {column.name} must be BIGINT, not {data_schema.field(name).type}"
            )
    # Delta tracks the high-water marks of the columns it generated only (``trackHighWaterMarks``): explicit values
    # of a BY DEFAULT column never move the mark (``ALTER TABLE ... SYNC IDENTITY`` is how Delta users do that).
    filled = {fill.name for fill in fills}
    return IdentityPlan(tuple(fills), tuple(c for c in columns if c.name in filled))


def fill_batches(
    fills: Sequence[IdentityFill], batches: Iterator[pa.RecordBatch], task: int
) -> Iterator[pa.RecordBatch]:
    """The task's batches with the planned identity columns appended. Runs on executors.

    Raises:
        SqlError: a value would leave BIGINT's range, or the task has more than ``2**33`` rows.
    """
    written = 0
    for batch in batches:
        rows = batch.num_rows
        if written + rows > 2**TASK_BITS:
            raise SqlError(f"identity columns: task {task} writes more than 2**{TASK_BITS} rows")
        arrays = list(batch.columns)
        names = list(batch.schema.names)
        for fill in fills:
            if fill.tasks is not None:  # Delta's rule: the tasks' values interleave
                if task >= fill.tasks:
                    raise SqlError(
                        f"identity column {fill.name}: task {task} of a write planned with {fill.tasks} task(s)"
                    )
                stride = fill.step * fill.tasks
                first = fill.base + fill.step * task + stride * written
            else:
                stride = fill.step
                first = fill.base + fill.step * ((task << TASK_BITS) + written)
            last = first + stride * max(rows - 1, 0)
            if not (_LONG_MIN <= first <= _LONG_MAX and _LONG_MIN <= last <= _LONG_MAX):
                raise SqlError(f"identity column {fill.name}: generated values overflow BIGINT (task {task})")
            arrays.append(pa.array(range(first, last + stride, stride) if rows else [], pa.int64()))
            names.append(fill.name)
        written += rows
        yield pa.RecordBatch.from_arrays(arrays, names=names)


def split_identity_clauses(ddl: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Column definitions (``CREATE TABLE``'s text between the parentheses) without their ``GENERATED ALWAYS | BY
    DEFAULT AS IDENTITY [(START WITH s INCREMENT BY t)]`` clauses, and each identity column's schema metadata
    (:func:`column_metadata`). Spark's DDL parser does not take those clauses; other text stays as it is.

    Raises:
        SqlError: a malformed identity clause, or step 0.
    """
    from sparkonce.sqltext.lexer import tokenize

    tokens = tokenize(ddl)
    found: dict[str, dict[str, Any]] = {}
    cuts: list[tuple[int, int]] = []
    depth = 0
    column: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.kind == "op" and token.value in ("(", "<"):
            depth += 1
        elif token.kind == "op" and token.value in (")", ">"):
            depth -= 1
        elif token.kind == "op" and token.value == "," and depth == 0:
            column = None
            i += 1
            continue
        if depth == 0 and column is None and token.kind in ("word", "quoted"):
            column = token.value
        elif depth == 0 and token.is_word("GENERATED") and column is not None:
            end, metadata = _identity_clause(tokens, i, column)
            if metadata is not None:
                found[column] = metadata
                cuts.append((token.start, tokens[end - 1].end))
                i = end
                continue
        i += 1
    out = ddl
    for start, end in reversed(cuts):
        out = out[:start] + out[end:]
    return out, found


def _identity_clause(tokens: list[Any], i: int, column: str) -> tuple[int, dict[str, Any] | None]:
    """The end (token index) and metadata of the identity clause at ``tokens[i]`` (``GENERATED``); None when it is
    a generated column's ``GENERATED ALWAYS AS (expr)``."""

    def word(at: int, *words: str) -> bool:
        return at < len(tokens) and tokens[at].is_word(*words)

    j = i + 1
    if word(j, "ALWAYS"):
        allow, j = False, j + 1
    elif word(j, "BY") and word(j + 1, "DEFAULT"):
        allow, j = True, j + 2
    else:
        raise SqlError(f"column {column}: GENERATED takes ALWAYS or BY DEFAULT")
    if not word(j, "AS"):
        raise SqlError(f"column {column}: expected AS after GENERATED {'BY DEFAULT' if allow else 'ALWAYS'}")
    if not word(j + 1, "IDENTITY"):
        return i + 1, None  # GENERATED ALWAYS AS (expression): a generated column, not ours
    j += 2
    start, step = 1, 1
    if j < len(tokens) and tokens[j].kind == "op" and tokens[j].value == "(":
        j += 1
        while not (j < len(tokens) and tokens[j].kind == "op" and tokens[j].value == ")"):
            if word(j, "START") and word(j + 1, "WITH"):
                start, j = _number(tokens, j + 2, column)
            elif word(j, "INCREMENT") and word(j + 1, "BY"):
                step, j = _number(tokens, j + 2, column)
            else:
                raise SqlError(f"column {column}: IDENTITY takes (START WITH n INCREMENT BY m)")
        j += 1
    if step == 0:
        raise SqlError("[DELTA_IDENTITY_COLUMNS_ILLEGAL_STEP] IDENTITY column step cannot be 0.")
    return j, column_metadata(start, step, allow_explicit_insert=allow)


def _number(tokens: list[Any], j: int, column: str) -> tuple[int, int]:
    sign = 1
    if j < len(tokens) and tokens[j].kind == "op" and tokens[j].value in ("-", "+"):
        sign = -1 if tokens[j].value == "-" else 1
        j += 1
    if j >= len(tokens) or tokens[j].kind != "number":
        raise SqlError(f"column {column}: IDENTITY's START WITH and INCREMENT BY take whole numbers")
    try:
        return sign * int(tokens[j].value.rstrip("Ll")), j + 1
    except ValueError:
        raise SqlError(f"column {column}: {tokens[j].value} is not a whole number") from None


def _extreme(column: IdentityColumn, files: Sequence[Any]) -> int | None:
    """The largest (positive step) or smallest value of the column in the written files, from their statistics."""
    values = []
    for f in files:
        stats = json.loads(f.stats or "{}")
        if not stats.get("numRecords"):
            continue
        key = "maxValues" if column.step > 0 else "minValues"
        value = (stats.get(key) or {}).get(column.physical_name)
        if value is not None:
            values.append(int(value))
        elif (stats.get("nullCount") or {}).get(column.physical_name) != stats.get("numRecords"):
            raise CommitConflictError(
                f"identity column {column.name}: the file {f.path} has no statistics for it, so its high-water mark "
                "cannot be moved; nothing was committed"
            )
    if not values:
        return None
    return max(values) if column.step > 0 else min(values)


def _valid_high_water_mark(column: IdentityColumn, candidate: int) -> int | None:
    """Delta's rule: the candidate rounded up (in the step's direction) onto ``start + k * step``, never below the
    current mark; None when the candidate lies before ``start`` (nothing to record)."""
    forward = column.step > 0
    if (candidate < column.start) if forward else (candidate > column.start):
        return None
    offset = candidate - column.start
    rounded = candidate if offset % column.step == 0 else column.start + column.step * (offset // column.step + 1)
    if column.high_water_mark is None:
        return rounded
    return max(rounded, column.high_water_mark) if forward else min(rounded, column.high_water_mark)


__all__ = [
    "ALLOW_EXPLICIT_INSERT",
    "HIGH_WATER_MARK",
    "IDENTITY_WRITING_REWRITES",
    "REWRITES_KEEPING_VALUES",
    "START",
    "STEP",
    "TASKS_OPTION",
    "IdentityColumn",
    "IdentityFill",
    "IdentityGenerator",
    "IdentityPlan",
    "check_new_columns",
    "check_not_updated",
    "explicit_insert_error",
    "column_metadata",
    "fill_batches",
    "identity_columns",
    "plan_identity",
    "split_identity_clauses",
]
