"""Delta's statistics columns (``delta.dataSkippingNumIndexedCols`` / ``delta.dataSkippingStatsColumns``): which
columns the writers keep statistics for and data skipping may use; the size of Z-ordered files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sparkonce.delta.ops.optimize import zorder_file_rows
from sparkonce.delta.table.column_mapping import ColumnMapping
from sparkonce.delta.table.skipping import (
    Comparison,
    IsNull,
    column_kinds,
    may_match,
    parse_stats,
    stats_columns,
    top_level_stats_columns,
)
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import OptionError
from sparkonce.storage import table_location


def _field(name: str, kind: Any = "long", physical: str | None = None) -> dict[str, Any]:
    metadata = {"delta.columnMapping.physicalName": physical} if physical else {}
    return {"name": name, "type": kind, "nullable": True, "metadata": metadata}


def _struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


# a (1 leaf), s {x, t {y, z}} (3 leaves), arr (1 leaf: an array counts as one), p (partition), b (1 leaf)
FIELDS = [
    _field("a"),
    _field("s", _struct(_field("x"), _field("t", _struct(_field("y"), _field("z"))))),
    _field("arr", {"type": "array", "elementType": "long", "containsNull": True}),
    _field("p", "string"),
    _field("b", "string"),
]


def test_default_keeps_the_first_32_leaves() -> None:
    many = [_field(f"c{i}") for i in range(40)]
    chosen = stats_columns(many, [], {})
    assert chosen == {(f"c{i}",) for i in range(32)}


def test_num_indexed_cols_counts_leaves_in_schema_order_without_partition_columns() -> None:
    conf = {"delta.dataSkippingNumIndexedCols": "3"}
    assert stats_columns(FIELDS, ["p"], conf) == {("a",), ("s", "x"), ("s", "t", "y")}
    conf = {"delta.dataSkippingNumIndexedCols": "6"}
    # p is a partition column: b is the sixth leaf
    assert stats_columns(FIELDS, ["p"], conf) == {
        ("a",),
        ("s", "x"),
        ("s", "t", "y"),
        ("s", "t", "z"),
        ("arr",),
        ("b",),
    }
    assert stats_columns(FIELDS, ["p"], {"delta.dataskippingnumindexedcols": "0"}) == frozenset()


def test_minus_one_keeps_every_leaf() -> None:
    many = [_field(f"c{i}") for i in range(40)]
    assert len(stats_columns(many, [], {"delta.dataSkippingNumIndexedCols": "-1"})) == 40


@pytest.mark.parametrize("value", ["-2", "many", "1.5"])
def test_num_indexed_cols_below_minus_one_or_not_an_integer_is_refused(value: str) -> None:
    with pytest.raises(OptionError, match=r"delta\.dataSkippingNumIndexedCols"):
        stats_columns(FIELDS, [], {"delta.dataSkippingNumIndexedCols": value})


def test_stats_columns_list_overrides_the_count_and_takes_nested_names() -> None:
    conf = {"delta.dataSkippingNumIndexedCols": "1", "delta.dataSkippingStatsColumns": "B, s.T.z"}
    assert stats_columns(FIELDS, ["p"], conf) == {("b",), ("s", "t", "z")}
    # a struct named: every leaf under it
    conf = {"delta.dataSkippingStatsColumns": "s.t"}
    assert stats_columns(FIELDS, ["p"], conf) == {("s", "t", "y"), ("s", "t", "z")}
    # names the schema lacks are left out
    assert stats_columns(FIELDS, ["p"], {"delta.dataSkippingStatsColumns": "gone,a"}) == {("a",)}


def test_stats_columns_list_quotes_names_with_backticks() -> None:
    fields = [_field("a.b"), _field("c`d"), _field("a", _struct(_field("b")))]
    conf = {"delta.dataSkippingStatsColumns": "`a.b`, `c``d`"}
    assert stats_columns(fields, [], conf) == {("a.b",), ("c`d",)}
    assert stats_columns(fields, [], {"delta.dataSkippingStatsColumns": "a.b"}) == {("a", "b")}


@pytest.mark.parametrize("value", ["a,,b", "`a", "a.", "`a`b"])
def test_a_stats_columns_list_that_is_not_names_is_refused(value: str) -> None:
    with pytest.raises(OptionError, match=r"delta\.dataSkippingStatsColumns"):
        stats_columns(FIELDS, [], {"delta.dataSkippingStatsColumns": value})


def test_physical_paths_under_column_mapping() -> None:
    fields = [_field("a", physical="col-1"), _field("s", _struct(_field("x", physical="col-3")), physical="col-2")]
    conf = {"delta.dataSkippingNumIndexedCols": "2"}
    assert stats_columns(fields, [], conf, physical=True) == {("col-1",), ("col-2", "col-3")}
    assert top_level_stats_columns(fields, [], conf) == {"a"}


def test_skipping_ignores_statistics_of_a_column_that_is_not_a_statistics_column() -> None:
    fields = [_field("a"), _field("b")]
    raw = json.dumps(
        {"numRecords": 2, "minValues": {"a": 1, "b": 1}, "maxValues": {"a": 2, "b": 2}, "nullCount": {"a": 0, "b": 0}}
    )
    every = column_kinds(fields)
    stats = parse_stats(raw, {}, every)
    assert not may_match(Comparison("b", "=", 5), stats, every)
    assert not may_match(IsNull("b"), stats, every)
    indexed = column_kinds(fields, indexed=stats_columns(fields, [], {"delta.dataSkippingNumIndexedCols": "1"}))
    assert indexed == {"a": "int"}
    assert may_match(Comparison("b", "=", 5), stats, indexed)
    assert may_match(IsNull("b"), stats, indexed)
    assert not may_match(Comparison("a", "=", 5), stats, indexed)


def _written_stats(tmp_path: Path, options: FileWriterOptions, table: pa.Table) -> dict[str, Any]:
    with TableFileWriter(options) as writer:
        writer.write(table)
        (written,) = writer.close()
    return dict(json.loads(written.stats))


def test_the_writer_keeps_statistics_of_the_statistics_columns_only(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2], "b": ["x", "y"], "c": [3.0, None]})
    options = FileWriterOptions(location=table_location(str(tmp_path)), stats_columns=frozenset({"a", "c"}))
    stats = _written_stats(tmp_path, options, table)
    assert stats == {
        "numRecords": 2,
        "minValues": {"a": 1, "c": 3.0},
        "maxValues": {"a": 2, "c": 3.0},
        "nullCount": {"a": 0, "c": 1},
    }
    every = _written_stats(tmp_path, FileWriterOptions(location=table_location(str(tmp_path))), table)
    assert set(every["minValues"]) == {"a", "b", "c"}


def test_the_writer_names_statistics_columns_by_physical_name(tmp_path: Path) -> None:
    schema = json.dumps(
        _struct(
            {
                **_field("a", physical="col-a"),
                "metadata": {"delta.columnMapping.physicalName": "col-a", "delta.columnMapping.id": 1},
            },
            {
                **_field("b", physical="col-b"),
                "metadata": {"delta.columnMapping.physicalName": "col-b", "delta.columnMapping.id": 2},
            },
        )
    )
    options = FileWriterOptions(
        location=table_location(str(tmp_path)),
        column_mapping=ColumnMapping.from_schema("name", schema),
        stats_columns=frozenset({"b"}),
    )
    stats = _written_stats(tmp_path, options, pa.table({"a": [1, 2], "b": [5, 7]}))
    assert stats["minValues"] == {"col-b": 5} and stats["maxValues"] == {"col-b": 7}
    assert stats["nullCount"] == {"col-b": 0}


def test_zorder_files_are_sized_by_the_bytes_per_row_read() -> None:
    assert zorder_file_rows(16_000, 800_000, 100_000) == 2_000
    assert zorder_file_rows(10, 3_000, 1_000) == 4  # rounded up: never more files than the target size asks
    assert zorder_file_rows(16_000, 800_000, 1 << 30) is None  # fits in one file
    assert zorder_file_rows(16_000, 800_000, None) is None
