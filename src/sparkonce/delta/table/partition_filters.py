"""Partition filters derived from generation expressions (Delta's ``OptimizablePartitionExpression``).

On a table partitioned by a generated column, ``eventDate DATE GENERATED ALWAYS AS (CAST(eventTime AS DATE))``, a
filter on the source column (``eventTime >= '2024-01-02 10:00'``) also bounds the partition column
(``eventDate >= 2024-01-02``), so a read skips the other partitions' files. The derived filters only ever drop
files that hold no matching row; Spark still evaluates every filter on the rows read.

Generators recognised (``c`` a column; anything else derives nothing):

* ``CAST(c AS DATE)``, ``to_date(c)``, ``year(c)``, ``date_format(c, p)`` with ``p`` made of ``yyyy`` then
  optionally ``MM``, ``dd``, ``HH`` in that order, separated by nothing or one of ``- / _ : T`` and space: monotone
  in ``c``, so ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=`` derive bounds;
* ``month(c)``, ``day(c)`` / ``dayofmonth(c)``: ``=`` and ``IN`` only;
* ``substring(c, 1, n)`` / ``substr(c, 1, n)`` of a string: monotone (a prefix).

A ``TIMESTAMP`` source: the partition value is computed in the writer's session time zone, which the reader does
not know, so the bounds are widened by 18 hours either side (the largest offset a time zone may have): one more
day partition at each end in the worst case, never a wrong answer. ``DATE`` and ``TIMESTAMP_NTZ`` sources are exact.

Runs on the driver (read planning).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from sparkonce.errors import SqlError

GENERATION_EXPRESSION_KEY = "delta.generationExpression"
_ZONE_SLACK = dt.timedelta(hours=18)
_PATTERN = re.compile(r"^yyyy(?:[-/_: T]?MM(?:[-/_: T]?dd(?:[-/_: T]?HH)?)?)?$")
_STRFTIME = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"))


@dataclass(frozen=True)
class DerivedPartition:
    """A partition column generated from one source column by a recognised function."""

    partition: str
    source: str
    function: str
    """``date``, ``year``, ``month``, ``day``, ``format`` or ``prefix``."""
    argument: str | int | None = None
    """The strftime pattern (``format``) or the prefix length (``prefix``)."""

    @property
    def monotone(self) -> bool:
        """Whether the function never decreases as its argument grows (then ranges derive bounds)."""
        return self.function not in ("month", "day")

    def apply(self, value: Any) -> Any:
        """The partition value for a source value (wall-clock time for datetimes)."""
        if self.function == "prefix":
            return str(value)[: int(self.argument or 0)]
        day = value.date() if isinstance(value, dt.datetime) else value
        if self.function == "date":
            return day
        if self.function == "year":
            return day.year
        if self.function == "month":
            return day.month
        if self.function == "day":
            return day.day
        return value.strftime(str(self.argument))

    def images(self, value: Any) -> tuple[Any, Any] | None:
        """The smallest and largest partition values rows with source ``value`` may have; None when the value is
        not of a type this generator reads (nothing is derived)."""
        if self.function == "prefix":
            return (self.apply(value), self.apply(value)) if isinstance(value, str) else None
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:  # TIMESTAMP_NTZ: the wall clock itself
                return self.apply(value), self.apply(value)
            utc = value.astimezone(dt.UTC).replace(tzinfo=None)
            try:
                return self.apply(utc - _ZONE_SLACK), self.apply(utc + _ZONE_SLACK)
            except OverflowError:
                return None
        if isinstance(value, dt.date):
            return self.apply(value), self.apply(value)
        return None

    def possible(self, value: Any) -> set[Any] | None:
        """Every partition value rows with source ``value`` may have (for ``=`` and ``IN``); None: unknown."""
        low_high = self.images(value)
        if low_high is None:
            return None
        if self.monotone or low_high[0] == low_high[1]:
            return None if low_high[0] != low_high[1] else {low_high[0]}
        # month/day of a TIMESTAMP in an unknown zone: the local date is one of the days around the UTC one.
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        first, last = (utc - _ZONE_SLACK).date(), (utc + _ZONE_SLACK).date()
        return {self.apply(first + dt.timedelta(days=i)) for i in range((last - first).days + 1)}


def derived_partitions(fields: Iterable[Mapping[str, Any]], partition_columns: Sequence[str]) -> list[DerivedPartition]:
    """The partition columns of a Delta schema (its JSON fields) generated by a recognised function of one column."""
    from sparkonce.sqltext.expression import Call, Cast, Column, Literal, parse_expression

    partitions = {c.lower() for c in partition_columns}
    found = []
    for field in fields:
        text = (field.get("metadata") or {}).get(GENERATION_EXPRESSION_KEY)
        if text is None or str(field["name"]).lower() not in partitions:
            continue
        try:
            tree = parse_expression(str(text))
        except SqlError:
            continue
        name = str(field["name"])
        rule: DerivedPartition | None = None
        if isinstance(tree, Cast) and isinstance(tree.operand, Column) and tree.type_name.upper() == "DATE":
            rule = DerivedPartition(name, tree.operand.name, "date")
        elif isinstance(tree, Call) and tree.args and isinstance(tree.args[0], Column):
            function, source, rest = tree.name.lower(), tree.args[0].name, tree.args[1:]
            simple = {"to_date": "date", "year": "year", "month": "month", "day": "day", "dayofmonth": "day"}
            if function in simple and not rest:
                rule = DerivedPartition(name, source, simple[function])
            elif function == "date_format" and len(rest) == 1 and isinstance(rest[0], Literal):
                pattern = str(rest[0].value)
                if _PATTERN.match(pattern):
                    for spark_token, python_token in _STRFTIME:
                        pattern = pattern.replace(spark_token, python_token)
                    rule = DerivedPartition(name, source, "format", pattern)
            elif function in ("substring", "substr") and len(rest) == 2 and all(isinstance(a, Literal) for a in rest):
                start, length = (a.value for a in rest if isinstance(a, Literal))
                if start == 1 and isinstance(length, int) and length > 0:
                    rule = DerivedPartition(name, source, "prefix", length)
        if rule is not None:
            found.append(rule)
    return found


def partition_tests(
    derived: Sequence[DerivedPartition], filters: Sequence[Filter]
) -> list[tuple[str, Callable[[Any], bool]]]:
    """``(partition column, test of its value)`` for every pushed filter on a recognised generator's source
    column: a file whose partition value fails a test holds no row the filter keeps."""
    by_source: dict[str, list[DerivedPartition]] = {}
    for rule in derived:
        by_source.setdefault(rule.source.lower(), []).append(rule)
    tests: list[tuple[str, Callable[[Any], bool]]] = []
    for flt in filters:
        attribute = tuple(getattr(flt, "attribute", ()))
        if len(attribute) != 1:
            continue
        for rule in by_source.get(str(attribute[0]).lower(), ()):
            test = _test(rule, flt)
            if test is not None:
                tests.append((rule.partition, test))
    return tests


def _test(rule: DerivedPartition, flt: Filter) -> Callable[[Any], bool] | None:
    values = list(flt.value) if isinstance(flt, In) else [getattr(flt, "value", None)]
    if isinstance(flt, (EqualTo, In)):
        allowed: list[tuple[Any, Any]] = []
        for value in values:
            if value is None:
                continue  # = NULL matches nothing
            if rule.monotone:
                images = rule.images(value)
                if images is None:
                    return None
                allowed.append(images)
            else:
                possible = rule.possible(value)
                if possible is None:
                    return None
                allowed += [(p, p) for p in possible]
        return lambda p: p is not None and any(_between(low, p, high) for low, high in allowed)
    if not rule.monotone or values[0] is None:
        return None
    images = rule.images(values[0])
    if images is None:
        return None
    if isinstance(flt, (GreaterThan, GreaterThanOrEqual)):
        return lambda p: p is not None and _between(images[0], p, None)
    if isinstance(flt, (LessThan, LessThanOrEqual)):
        return lambda p: p is not None and _between(None, p, images[1])
    return None


def _between(low: Any, value: Any, high: Any) -> bool:
    try:
        return (low is None or low <= value) and (high is None or value <= high)
    except TypeError:
        return True  # cannot compare: keep the file


__all__ = ["DerivedPartition", "derived_partitions", "partition_tests"]
