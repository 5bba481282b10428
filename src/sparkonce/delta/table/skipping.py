"""Data skipping: which files of a snapshot may hold rows a query's filters keep, judged on the ``add`` actions'
statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``), by Delta's rules.

A query's filters arrive as a small predicate tree (:class:`Predicate`, built from Spark's expressions by
:mod:`sparkonce.delta.read.native`). :func:`may_match` answers "can this file hold a row that satisfies the predicate?"
and errs on the side of yes: a file without statistics, a column without them, a type the statistics cannot
answer for, or a predicate part it does not understand (:class:`Unknown`) never drops a file. Spark still
evaluates every data filter on the rows read, so skipping only saves reads, it never decides a row.

Delta's rules kept here, each for a reason:

* timestamps in statistics are truncated to milliseconds (Delta's JVM writes them so): the maximum is widened by
  one millisecond before it is compared;
* floating-point statistics exclude NaN, and Spark orders NaN above every number: a ``>``/``>=`` test on a
  ``float``/``double`` column cannot use the maximum;
* statistics count only for the table's statistics columns (:func:`stats_columns`: ``delta.dataSkippingStatsColumns``,
  else the first ``delta.dataSkippingNumIndexedCols`` leaf columns): a file may carry statistics for other columns
  (written before the property changed), and Delta does not use them;
* a string statistic that may be truncated (Delta truncates to 32 characters, the maximum with a tie-breaker) is
  used only as a bound it still is: a truncated minimum is a lower bound; a maximum of 32 characters or more is no
  upper bound.

Pure Python, no Spark: runs on the driver while a scan is planned.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, TypeAlias

from sparkonce.delta.table.type_widening import type_changes
from sparkonce.errors import OptionError

__all__ = [
    "And",
    "Comparison",
    "FileStats",
    "InList",
    "IsNotNull",
    "IsNull",
    "Not",
    "Or",
    "Predicate",
    "StartsWith",
    "Unknown",
    "column_kinds",
    "conjunction",
    "may_match",
    "parse_stats",
    "stats_columns",
    "top_level_stats_columns",
]

Op: TypeAlias = Literal["=", "<=>", "<", "<=", ">", ">="]
ColumnKind: TypeAlias = Literal["int", "float", "decimal", "string", "date", "timestamp", "timestamp_ntz", "other"]


@dataclass(frozen=True)
class Comparison:
    """``column op value`` (the column always on the left; :func:`flip` turns ``value op column`` round)."""

    column: str
    op: Op
    value: Any


@dataclass(frozen=True)
class InList:
    """``column IN (values...)``."""

    column: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class IsNull:
    column: str


@dataclass(frozen=True)
class IsNotNull:
    column: str


@dataclass(frozen=True)
class StartsWith:
    """``startswith(column, prefix)`` and ``column LIKE 'prefix%'``."""

    column: str
    prefix: str


@dataclass(frozen=True)
class And:
    left: Predicate
    right: Predicate


@dataclass(frozen=True)
class Or:
    left: Predicate
    right: Predicate


@dataclass(frozen=True)
class Not:
    child: Predicate


@dataclass(frozen=True)
class Unknown:
    """A part of a filter data skipping does not understand: it may be true for any file."""

    what: str = ""


Predicate: TypeAlias = "Comparison | InList | IsNull | IsNotNull | StartsWith | And | Or | Not | Unknown"

_FLIPPED: dict[Op, Op] = {"=": "=", "<=>": "<=>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATED: dict[str, Op] = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def flip(op: Op) -> Op:
    """The operator of ``value op column`` written as ``column flip(op) value``."""
    return _FLIPPED[op]


def conjunction(predicates: Sequence[Predicate]) -> Predicate | None:
    """The AND of ``predicates`` (None for none)."""
    result: Predicate | None = None
    for predicate in predicates:
        result = predicate if result is None else And(result, predicate)
    return result


@dataclass(frozen=True)
class FileStats:
    """One file's statistics, keyed by the logical column names of the predicate."""

    num_records: int | None
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]
    null_counts: Mapping[str, int]


NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DEFAULT_NUM_INDEXED_COLS = 32
"""Delta's default ``delta.dataSkippingNumIndexedCols``: statistics for the first 32 leaf columns."""

_PHYSICAL_NAME = "delta.columnMapping.physicalName"


def stats_columns(
    schema_fields: Sequence[Mapping[str, Any]],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str | None],
    *,
    physical: bool = False,
) -> frozenset[tuple[str, ...]]:
    """The leaf columns Delta keeps statistics for, each a path of names (logical names as the schema spells them,
    or physical names with ``physical``), by Delta's rules (``StatisticsCollection.getIndexedColumns``):

    * ``delta.dataSkippingStatsColumns`` (comma-separated, nested names dotted, backticks quote, matched without
      case) when set: those columns, every leaf of a struct it names; names the schema lacks are left out (Delta
      refuses them when the property is set);
    * else the first ``delta.dataSkippingNumIndexedCols`` (default 32; -1 for all) leaf columns in schema order,
      a struct counted by its leaves and an array or map as one.

    Partition columns are never counted (their values are in the log). Runs on the driver.

    Raises:
        OptionError: ``delta.dataSkippingNumIndexedCols`` is not an integer of at least -1, or
            ``delta.dataSkippingStatsColumns`` is not a list of column names.
    """
    conf = {k.lower(): v for k, v in configuration.items() if v is not None}
    partitions = {c.lower() for c in partition_columns}
    fields = [f for f in schema_fields if str(f["name"]).lower() not in partitions]
    leaves = _leaves(fields, (), ())
    listed = conf.get(STATS_COLUMNS.lower())
    if listed is not None:
        wanted = [tuple(part.lower() for part in name) for name in _column_list(listed)]
        return frozenset(
            path if physical else logical
            for logical, path in leaves
            if any(tuple(n.lower() for n in logical[: len(w)]) == w for w in wanted)
        )
    raw = conf.get(NUM_INDEXED_COLS.lower())
    try:
        count = DEFAULT_NUM_INDEXED_COLS if raw is None else int(str(raw).strip())
    except ValueError:
        count = -2
    if count < -1:
        raise OptionError(NUM_INDEXED_COLS, raw, "needs to be an integer larger than or equal to -1 (Delta's rule)")
    chosen = leaves if count == -1 else leaves[:count]
    return frozenset(path if physical else logical for logical, path in chosen)


def top_level_stats_columns(
    schema_fields: Sequence[Mapping[str, Any]],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str | None],
) -> frozenset[str]:
    """The logical names of the top-level columns that are statistics columns (:func:`stats_columns`): the ones
    sparkonce's writers keep statistics for. Runs on the driver.

    Raises:
        OptionError: as :func:`stats_columns`.
    """
    return frozenset(
        path[0] for path in stats_columns(schema_fields, partition_columns, configuration) if len(path) == 1
    )


def _leaves(
    fields: Sequence[Mapping[str, Any]], logical: tuple[str, ...], physical: tuple[str, ...]
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(logical path, physical path) of every leaf under ``fields``, in schema order (a struct's leaves in place of
    the struct; an array or map is one leaf)."""
    out: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for field in fields:
        name = str(field["name"])
        names = (*logical, name)
        physicals = (*physical, str((field.get("metadata") or {}).get(_PHYSICAL_NAME, name)))
        kind = field.get("type")
        if isinstance(kind, dict) and kind.get("type") == "struct":
            out.extend(_leaves(kind.get("fields") or [], names, physicals))
        else:
            out.append((names, physicals))
    return out


def _column_list(text: str) -> list[tuple[str, ...]]:
    """``a, b.c, `d.e`.f`` as [(a,), (b, c), (d.e, f)] (backticks quote a name, a doubled backtick is one)."""
    names: list[tuple[str, ...]] = []
    parts: list[str] = []
    current: list[str] = []
    quoted = False  # the current part was quoted
    i = 0

    def bad(problem: str) -> OptionError:
        return OptionError(STATS_COLUMNS, text, f"must be a comma-separated list of column names: {problem}")

    while i <= len(text):
        c = text[i] if i < len(text) else ","
        if c == "`":
            end = i + 1
            while True:
                end = text.find("`", end)
                if end < 0:
                    raise bad("a backtick is not closed")
                if text[end + 1 : end + 2] == "`":
                    end += 2
                    continue
                break
            if "".join(current).strip():
                raise bad(f"a quoted name follows other text near position {i}")
            current = [text[i + 1 : end].replace("``", "`")]
            quoted = True
            i = end + 1
            continue
        if c in ".,":
            part = "".join(current)
            if not quoted:
                part = part.strip()
            if not part:
                if c == "," and not parts and i >= len(text) and not names:
                    return names  # an empty list
                raise bad(f"an empty name near position {i}")
            parts.append(part)
            current, quoted = [], False
            if c == ",":
                names.append(tuple(parts))
                parts = []
        elif quoted:
            if not c.isspace():
                raise bad(f"text follows a quoted name near position {i}")
        else:
            current.append(c)
        i += 1
    return names


def column_kinds(
    schema_fields: Sequence[Mapping[str, Any]], *, indexed: frozenset[tuple[str, ...]] | None = None
) -> dict[str, ColumnKind]:
    """Logical top-level column name -> how its statistics compare, from ``schemaString``'s fields; with
    ``indexed`` (logical paths, :func:`stats_columns`) only the columns in it: :func:`may_match` uses no statistics
    of a column left out."""
    kinds: dict[str, ColumnKind] = {}
    for field in schema_fields:
        name = str(field["name"])
        if indexed is None or (name,) in indexed:
            kinds[name] = _kind(field.get("type"))
            if any(c.get("fromType") == "float" for c in type_changes(field)):
                # a float widened to double: the old files' statistics are the float's shortest decimal text, not
                # the double their values read as (1.1 for 1.100000023841858), so they bound nothing
                kinds[name] = "other"
    return kinds


def _kind(delta_type: Any) -> ColumnKind:
    if not isinstance(delta_type, str):
        return "other"
    if delta_type in ("byte", "short", "integer", "long"):
        return "int"
    if delta_type in ("float", "double"):
        return "float"
    if delta_type.startswith("decimal"):
        return "decimal"
    if delta_type == "string":
        return "string"
    if delta_type == "date":
        return "date"
    if delta_type == "timestamp":
        return "timestamp"
    if delta_type == "timestamp_ntz":
        return "timestamp_ntz"
    return "other"


def parse_stats(raw: Any, physical_names: Mapping[str, str], kinds: Mapping[str, ColumnKind]) -> FileStats | None:
    """An ``add``'s ``stats`` (the JSON text, or the parsed object of a checkpoint's ``stats_parsed``) as
    :class:`FileStats` keyed by logical names (``physical_names``: logical -> physical, for column mapping); None
    when the file has no statistics or they cannot be read (the file is then never skipped)."""
    if raw is None or raw == "":
        return None
    try:
        data = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    mins = data.get("minValues") or {}
    maxs = data.get("maxValues") or {}
    nulls = data.get("nullCount") or {}
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    null_counts: dict[str, int] = {}
    for logical, kind in kinds.items():
        physical = physical_names.get(logical, logical)
        if physical in mins:
            value = _typed(mins[physical], kind, upper=False)
            if value is not None:
                min_values[logical] = value
        if physical in maxs:
            value = _typed(maxs[physical], kind, upper=True)
            if value is not None:
                max_values[logical] = value
        count = nulls.get(physical)
        if isinstance(count, int) and not isinstance(count, bool):
            null_counts[logical] = count
    num_records = data.get("numRecords")
    return FileStats(
        num_records if isinstance(num_records, int) and not isinstance(num_records, bool) else None,
        min_values,
        max_values,
        null_counts,
    )


_STRING_TRUNCATION = 32
"""Delta truncates string statistics to this many characters."""


def _typed(value: Any, kind: ColumnKind, *, upper: bool) -> Any:
    """A statistic as the Python value filters compare with, or None where it bounds nothing."""
    try:
        if kind == "int":
            return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if kind == "float":
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if kind == "decimal":
            return Decimal(str(value)) if isinstance(value, int | float | str) else None
        if kind == "string":
            if not isinstance(value, str):
                return None
            return None if upper and len(value) >= _STRING_TRUNCATION else value
        if kind == "date":
            return dt.date.fromisoformat(str(value)[:10])
        if kind in ("timestamp", "timestamp_ntz"):
            text = str(value).replace("Z", "+00:00")
            when = dt.datetime.fromisoformat(text)
            if kind == "timestamp":
                when = when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)
            else:
                when = when.replace(tzinfo=None)
            return when + dt.timedelta(milliseconds=1) if upper else when
    except (ValueError, ArithmeticError, TypeError):
        return None
    return None


def may_match(predicate: Predicate, stats: FileStats | None, kinds: Mapping[str, ColumnKind]) -> bool:
    """False only when the statistics prove no row of the file satisfies ``predicate``; only the statistics of the
    columns in ``kinds`` count."""
    if stats is None:
        return True
    return _may(predicate, _only(stats, kinds), kinds)


def _only(stats: FileStats, kinds: Mapping[str, ColumnKind]) -> FileStats:
    """``stats`` without the columns outside ``kinds`` (a column that is not a statistics column)."""
    if (
        all(c in kinds for c in stats.null_counts)
        and all(c in kinds for c in stats.min_values)
        and all(c in kinds for c in stats.max_values)
    ):
        return stats
    return FileStats(
        stats.num_records,
        {c: v for c, v in stats.min_values.items() if c in kinds},
        {c: v for c, v in stats.max_values.items() if c in kinds},
        {c: v for c, v in stats.null_counts.items() if c in kinds},
    )


def _may(p: Predicate, s: FileStats, kinds: Mapping[str, ColumnKind]) -> bool:
    if isinstance(p, And):
        return _may(p.left, s, kinds) and _may(p.right, s, kinds)
    if isinstance(p, Or):
        return _may(p.left, s, kinds) or _may(p.right, s, kinds)
    if isinstance(p, Not):
        return _may_not(p.child, s, kinds)
    if isinstance(p, IsNull):
        count = s.null_counts.get(p.column)
        return count is None or count > 0
    if isinstance(p, IsNotNull):
        return not _all_null(p.column, s)
    if isinstance(p, Comparison):
        return _may_compare(p.column, p.op, p.value, s, kinds)
    if isinstance(p, InList):
        return any(_may_compare(p.column, "=", v, s, kinds) for v in p.values)
    if isinstance(p, StartsWith):
        return _may_start(p.column, p.prefix, s, kinds)
    return True


def _may_not(p: Predicate, s: FileStats, kinds: Mapping[str, ColumnKind]) -> bool:
    """May a row satisfy NOT ``p``? (NOT pushed down: De Morgan, negated comparisons.)"""
    if isinstance(p, Not):
        return _may(p.child, s, kinds)
    if isinstance(p, And):
        return _may_not(p.left, s, kinds) or _may_not(p.right, s, kinds)
    if isinstance(p, Or):
        return _may_not(p.left, s, kinds) and _may_not(p.right, s, kinds)
    if isinstance(p, IsNull):
        return not _all_null(p.column, s)
    if isinstance(p, IsNotNull):
        count = s.null_counts.get(p.column)
        return count is None or count > 0
    if isinstance(p, Comparison) and p.op in _NEGATED:
        return _may_compare(p.column, _NEGATED[p.op], p.value, s, kinds)
    if isinstance(p, Comparison) and p.op in ("=", "<=>") and p.value is not None:
        # NOT (c = v) fails only on rows whose value is v (a null row fails it too: NOT null is null); NOT (c <=> v)
        # holds for nulls
        lo, hi = s.min_values.get(p.column), s.max_values.get(p.column)
        try:
            only_v = lo is not None and hi is not None and lo == hi == p.value
        except TypeError:
            return True
        return not (only_v and (p.op == "=" or _no_nulls(p.column, s)))
    return True


def _all_null(column: str, s: FileStats) -> bool:
    count = s.null_counts.get(column)
    return count is not None and s.num_records is not None and count >= s.num_records


def _no_nulls(column: str, s: FileStats) -> bool:
    return s.null_counts.get(column) == 0


def _may_compare(column: str, op: Op, value: Any, s: FileStats, kinds: Mapping[str, ColumnKind]) -> bool:
    if value is None:
        return op == "<=>" and s.null_counts.get(column, 1) > 0
    if _all_null(column, s):
        return False  # a comparison with null is never true
    kind = kinds.get(column, "other")
    if kind == "other":
        return True
    lo = s.min_values.get(column)
    hi = s.max_values.get(column)
    if kind == "float":
        if isinstance(value, float) and value != value:
            return True  # NaN: the statistics leave NaN out
        if op in (">", ">="):
            hi = None  # NaN rows satisfy it and are not in the maximum
    try:
        if op in ("=", "<=>"):
            return (lo is None or lo <= value) and (hi is None or value <= hi)
        if op == "<":
            return lo is None or lo < value
        if op == "<=":
            return lo is None or lo <= value
        if op == ">":
            return hi is None or hi > value
        if op == ">=":
            return hi is None or hi >= value
    except TypeError:
        return True
    return True


def _may_start(column: str, prefix: str, s: FileStats, kinds: Mapping[str, ColumnKind]) -> bool:
    if kinds.get(column) != "string" or _all_null(column, s):
        return not _all_null(column, s)
    lo, hi = s.min_values.get(column), s.max_values.get(column)
    if lo is not None and lo[: len(prefix)] > prefix:
        return False
    return not (hi is not None and hi[: len(prefix)] < prefix)
