"""Reading the real Delta-JVM-written tables of tests/fixtures/delta-tables: the same rows as delta-rs.

A table using a feature that sparkonce cannot honour must fail with an error naming the feature, never return
wrong rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from tests.delta_helpers import comparable

pytestmark = pytest.mark.spark

READABLE = [
    "delta-0.1.0",
    "delta-0.2.0",
    "basic-with-inserts-deletes-checkpoint",
    "basic-with-inserts-overwrite-restore",
    "multi-part-checkpoint",
    "data-reader-partition-values",
]


def _canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(tuple((k, comparable(v)) for k, v in sorted(r.items()))) for r in rows)


def _spark_rows(spark: SparkSession, path: Path, **options: str) -> list[dict[str, Any]]:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    # toArrow, not collect: a map with array keys cannot become a Python dict (a PySpark Row limitation)
    return list(reader.load(str(path)).toArrow().to_pylist())


def _rs_rows(path: Path, table_version: int | None = None) -> list[dict[str, Any]]:
    return list(pa.table(DeltaTable(str(path), version=table_version).to_pyarrow_table()).to_pylist())


@pytest.mark.parametrize("name", READABLE)
def test_fixture_table_latest_matches_delta_rs(spark: SparkSession, fixtures_dir: Path, name: str) -> None:
    path = fixtures_dir / "delta-tables" / name
    expected = _rs_rows(path)
    got = _spark_rows(spark, path)
    assert len(got) == len(expected)
    assert _canon(got) == _canon(expected)


@pytest.mark.parametrize(
    "name", ["delta-0.2.0", "basic-with-inserts-deletes-checkpoint", "basic-with-inserts-overwrite-restore"]
)
def test_fixture_table_every_version_matches_delta_rs(spark: SparkSession, fixtures_dir: Path, name: str) -> None:
    path = fixtures_dir / "delta-tables" / name
    for table_version in range(DeltaTable(str(path)).version() + 1):
        got = _spark_rows(spark, path, versionAsOf=str(table_version))
        assert _canon(got) == _canon(_rs_rows(path, table_version)), f"table version {table_version}"


def test_streaming_written_fixture_has_its_txn(fixtures_dir: Path) -> None:
    table = DeltaTable(str(fixtures_dir / "delta-tables" / "delta-0.2.0"))
    assert table.transaction_version("e4a20b59-dd0e-4c50-b074-e8ae4786df30") == 0


def test_log_only_fixture_refuses_with_missing_files(spark: SparkSession, fixtures_dir: Path) -> None:
    """The 'checkpoint' golden table has fake AddFile paths and no data files: the error names the file."""
    path = fixtures_dir / "delta-tables" / "checkpoint"
    with pytest.raises(Py4JJavaError) as missing:  # Spark's own Parquet scan reads the files (native read path)
        spark.read.format("delta").load(str(path)).collect()
    assert re.search(
        r"FAILED_READ_FILE\.FILE_NOT_EXIST\] .*/delta-tables/checkpoint/\d+\. File does not exist",
        str(missing.value.java_exception.toString()),
    )


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_reads_logical_names_and_keeps_nulls(spark: SparkSession, fixtures_dir: Path, mode: str) -> None:
    """Physical ``col-<uuid>`` names (nested too) map back to logical names; a null nested value stays null.

    delta-rs 1.6.6 returns every value of these tables as null, so the reference here is the pattern Delta's
    golden-table generator writes (``generateCMIcebegCompatTableHelper``): row ``i`` (0..4) holds ``i`` in every
    numeric column and derived nested values, and a sixth row is null in every column.
    """
    path = fixtures_dir / "delta-tables" / f"table-with-columnmapping-mode-{mode}"
    rows = _spark_rows(spark, path)
    assert len(rows) == 6
    checked = []
    for row in rows:
        i = row["LongType"]
        if i is None:
            assert all(value is None for value in row.values()), row  # maps, arrays, structs: null, not empty
            continue
        assert row["IntegerType"] == row["ShortType"] == row["ByteType"] == i
        assert row["nested_struct"] == {"aa": str(i), "ac": {"aca": i}}
        assert row["map_of_prims"] == [(i, i + 1), (i + 2, i + 3)]
        assert row["map_of_rows"] == [(i + 1, {"ab": i * 20})]
        assert row["array_of_prims"] == [i, i + 1]
        assert row["array_of_structs"] == [{"ab": i}, {"ab": i}]
        assert row["struct_of_arrays_maps_of_structs"] == {"aa": [i, i + 1], "ab": [([i, i + 1], {"aca": i + 2})]}
        assert row["map_of_arrays"] == [(i, [i, None, i + 1]), (i + 1, [])]
        checked.append(i)
    assert sorted(checked) == [0, 1, 2, 3, 4]
