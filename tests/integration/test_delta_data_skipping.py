"""Data skipping on the native read path with Delta's statistics columns, and what OPTIMIZE ZORDER BY and liquid
clustering buy it: a point lookup on a table whose files each hold keys from the whole range reads every file;
after Z-ordering (or clustering) by the key it reads one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.read.native import last_scan
from sparkonce.delta.tables import MAX_FILE_SIZE_CONF
from sparkonce.sql import DeltaSql

pytestmark = pytest.mark.spark

ROWS = 16_000
FILES = 8


def _write_spread_keys(spark: SparkSession, path: Path) -> None:
    """``FILES`` files, each with keys from the whole range: key = pos * 7919 mod ROWS (a permutation)."""
    frame = spark.range(0, ROWS, 1, FILES).selectExpr(
        f"CAST((id * 7919) % {ROWS} AS BIGINT) AS key", "CAST(id AS STRING) AS payload"
    )
    frame.write.format("delta").mode("append").save(str(path))


def _payload(key: int) -> str:
    """The payload (the position) of ``key``."""
    return str(key * pow(7919, -1, ROWS) % ROWS)


def _lookup(spark: SparkSession, path: Path, condition: str) -> tuple[list[Any], int, int]:
    """The rows of ``condition`` and the (files read, files in the table) of that scan."""
    rows = [tuple(r) for r in spark.read.format("delta").load(str(path)).where(condition).collect()]
    scan = last_scan(str(path))
    assert scan is not None
    return sorted(rows), scan.files_read, scan.files_total


def _adds(path: Path) -> list[dict[str, Any]]:
    return list(DeltaLog(str(path)).snapshot().files.values())


def _optimize(spark: SparkSession, sql: DeltaSql, statement: str, path: Path) -> None:
    """``statement`` with a target file size of an eighth of the table: Z-ordered rows go into about 8 files."""
    size = sum(int(a["size"]) for a in _adds(path))
    spark.conf.set(MAX_FILE_SIZE_CONF, str(size // FILES))
    try:
        sql(statement)
    finally:
        spark.conf.unset(MAX_FILE_SIZE_CONF)


def test_zorder_makes_a_point_lookup_read_one_file(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "zordered"
    _write_spread_keys(spark, path)
    expected = [(12345, _payload(12345))]
    assert _lookup(spark, path, "key = 12345") == (expected, FILES, FILES)

    _optimize(spark, sql, f"OPTIMIZE delta.`{path}` ZORDER BY (key)", path)
    rows, read, total = _lookup(spark, path, "key = 12345")
    assert rows == expected
    assert total >= FILES // 2  # the Z-ordered rows went into several files, each a range of keys
    assert read == 1
    rows, read, _ = _lookup(spark, path, "key >= 15990")
    assert [r[0] for r in rows] == list(range(15990, ROWS)) and read == 1


def test_clustering_makes_a_point_lookup_read_one_file(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "clustered"
    sql(f"CREATE TABLE delta.`{path}` (key BIGINT, payload STRING) USING delta CLUSTER BY (key)")
    _write_spread_keys(spark, path)
    assert _lookup(spark, path, "key = 777")[1:] == (FILES, FILES)

    _optimize(spark, sql, f"OPTIMIZE delta.`{path}`", path)
    assert {a.get("clusteringProvider") for a in _adds(path)} == {"liquid"}
    rows, read, total = _lookup(spark, path, "key = 777")
    assert rows == [(777, _payload(777))]
    assert total >= FILES // 2
    assert read == 1


def _stats(path: Path) -> list[dict[str, Any]]:
    return [json.loads(a["stats"]) for a in _adds(path)]


def test_num_indexed_cols_limits_the_statistics_written_and_used(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    path = tmp_path / "indexed"
    sql(
        f"CREATE TABLE delta.`{path}` (a BIGINT, s STRUCT<x: BIGINT, y: BIGINT>, b BIGINT, c BIGINT) USING delta "
        "TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '3')"
    )
    # a, s.x, s.y are the 3 indexed leaves: b and c keep no statistics
    frame = spark.range(0, 400, 1, 4).selectExpr("id AS a", "named_struct('x', id, 'y', id) AS s", "id AS b", "id AS c")
    frame.write.format("delta").mode("append").save(str(path))
    for stats in _stats(path):
        assert set(stats["minValues"]) == set(stats["maxValues"]) == {"a"}  # sparkonce keeps no nested statistics
        assert set(stats["nullCount"]) == {"a"}
    assert _lookup(spark, path, "a = 5")[1:] == (1, 4)
    assert _lookup(spark, path, "b = 5")[1:] == (4, 4)

    # Files written before the property changed carry statistics for every column: Delta uses only the indexed ones.
    sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '-1')")
    frame.write.format("delta").mode("overwrite").save(str(path))
    assert all(set(s["minValues"]) == {"a", "b", "c"} for s in _stats(path))
    assert _lookup(spark, path, "c = 5")[1:] == (1, 4)
    sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '1')")
    assert _lookup(spark, path, "c = 5")[1:] == (4, 4)
    assert _lookup(spark, path, "a = 5")[1:] == (1, 4)


def test_stats_columns_override_the_count(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "listed"
    sql(
        f"CREATE TABLE delta.`{path}` (a BIGINT, b BIGINT, day STRING) USING delta PARTITIONED BY (day) "
        "TBLPROPERTIES ('delta.dataSkippingStatsColumns' = 'b', 'delta.dataSkippingNumIndexedCols' = '1')"
    )
    frame = spark.range(0, 400, 1, 4).selectExpr("id AS a", "id AS b", "'d' AS day")
    frame.write.format("delta").mode("append").save(str(path))
    assert all(set(s["minValues"]) == {"b"} for s in _stats(path))
    assert _lookup(spark, path, "b = 5")[1:] == (1, 4)
    assert _lookup(spark, path, "a = 5")[1:] == (4, 4)
