"""Partition filters derived from generation expressions (Delta's OptimizablePartitionExpression), on the read
planner's own objects: which generators are recognised, and which files a filter on the source column keeps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

from sparkonce.delta.read.reader import DataFile, prune
from sparkonce.delta.table.partition_filters import derived_partitions


def _field(name: str, expression: str | None = None) -> dict[str, Any]:
    metadata = {"delta.generationExpression": expression} if expression else {}
    return {"name": name, "type": "string", "nullable": True, "metadata": metadata}


def _files(column: str, values: list[Any]) -> list[DataFile]:
    return [DataFile(f"/t/{column}={v}/part.parquet", 1, {column: v}) for v in values]


def _kept(files: list[DataFile], column: str) -> list[Any]:
    return [f.partition_values[column] for f in files]


def test_recognised_generators_and_the_rest() -> None:
    fields = [
        _field("ts"),
        _field("day", "CAST(ts AS DATE)"),
        _field("y", "year(ts)"),
        _field("m", "month(ts)"),
        _field("ym", "date_format(ts, 'yyyy-MM')"),
        _field("odd", "date_format(ts, 'MM/yyyy')"),  # not monotone: ignored
        _field("p", "substr(code, 1, 2)"),
        _field("h", "hash(ts)"),  # not recognised
        _field("notpartition", "year(ts)"),
    ]
    rules = derived_partitions(fields, ["day", "y", "m", "ym", "odd", "p", "h"])
    assert [(r.partition, r.source, r.function, r.argument) for r in rules] == [
        ("day", "ts", "date", None),
        ("y", "ts", "year", None),
        ("m", "ts", "month", None),
        ("ym", "ts", "format", "%Y-%m"),
        ("p", "code", "prefix", 2),
    ]


def test_date_partitions_from_a_timestamp_filter_are_widened_for_the_unknown_zone() -> None:
    rules = derived_partitions([_field("ts"), _field("day", "CAST(ts AS DATE)")], ["day"])
    days = [dt.date(2024, 1, d) for d in range(1, 11)]
    files = _files("day", [*days, None])
    at = dt.datetime(2024, 1, 5, 12, 0, tzinfo=dt.UTC)  # Spark pushes TIMESTAMP values as UTC datetimes
    kept = _kept(prune(files, [GreaterThanOrEqual(("ts",), at)], ["day"], rules), "day")
    assert kept == days[3:]  # from 2024-01-04: 18 hours before noon UTC is the day before, in some zone
    kept = _kept(prune(files, [EqualTo(("ts",), at)], ["day"], rules), "day")
    assert kept == days[3:6]
    # TIMESTAMP_NTZ and DATE values are exact.
    kept = _kept(prune(files, [LessThan(("ts",), dt.datetime(2024, 1, 3, 1))], ["day"], rules), "day")
    assert kept == days[:3]
    kept = _kept(prune(files, [In(("ts",), (dt.date(2024, 1, 2), dt.date(2024, 1, 9)))], ["day"], rules), "day")
    assert kept == [days[1], days[8]]


def test_year_month_format_and_prefix() -> None:
    fields = [_field("d"), _field("y", "YEAR(d)"), _field("m", "month(d)"), _field("p", "substring(code, 1, 2)")]
    rules = derived_partitions([*fields, _field("code")], ["y", "m", "p"])
    years = _files("y", [2021, 2022, 2023, 2024])
    assert _kept(prune(years, [GreaterThanOrEqual(("d",), dt.date(2023, 6, 1))], ["y"], rules), "y") == [2023, 2024]
    months = _files("m", list(range(1, 13)))
    assert _kept(prune(months, [EqualTo(("d",), dt.date(2023, 6, 1))], ["m"], rules), "m") == [6]
    assert len(prune(months, [LessThan(("d",), dt.date(2023, 6, 1))], ["m"], rules)) == 12  # month: = and IN only
    at = dt.datetime(2023, 6, 1, 3, tzinfo=dt.UTC)
    assert _kept(prune(months, [EqualTo(("d",), at)], ["m"], rules), "m") == [5, 6]  # May 31 in some zone
    prefixes = _files("p", ["AA", "AB", "BA", "CC"])
    assert _kept(prune(prefixes, [GreaterThanOrEqual(("code",), "AB7")], ["p"], rules), "p") == ["AB", "BA", "CC"]
    assert _kept(prune(prefixes, [EqualTo(("CODE",), "BA-1")], ["p"], rules), "p") == ["BA"]
