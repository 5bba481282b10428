"""Rewrites (DELETE, UPDATE, MERGE, OPTIMIZE) of tables whose files carry deletion vectors written by Delta's JVM
connector (issue 12): a rewritten file is read with its deletion vector applied (no deleted row comes back), and
its ``remove`` carries that deletion vector, since Delta readers match an ``add`` and its ``remove`` on (path,
deletion vector); untouched files keep theirs. Each result is checked against delta-rs's own reading of the table
(its DataFusion scan applies deletion vectors) and against the rows the golden generator implies.

The fixture (delta-io/delta ``GoldenTables.scala``, "dv-partitioned-with-checkpoint"): rows
``(x % 10, x, "foo" + x % 5)`` for x in 0..49, partitioned by ``part``, then 15 DELETEs ``col1 = 2n`` (n = 0..14)
stored as deletion vectors: 35 rows, x not an even number below 30.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.log import DeltaLog
from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import UnsupportedFeatureError
from sparkonce.storage import table_location

pytestmark = pytest.mark.spark

Row = tuple[int, int, str]


def golden() -> list[Row]:
    return sorted((x % 10, x, f"foo{x % 5}") for x in range(50) if not (x % 2 == 0 and x < 30))


def copy_fixture(fixtures_dir: Path, tmp_path: Path, name: str = "dv-partitioned-with-checkpoint") -> Path:
    table = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-tables" / name, table)
    return table


def rs_rows(table: Path) -> list[Row]:
    """The table's rows as delta-rs reads them (deletion vectors applied by its DataFusion scan)."""
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", RsTable(str(table))).execute("select part, col1, col2 from t").read_all()
    data = result.to_pylist() if hasattr(result, "to_pylist") else _arro3_rows(result)
    return sorted((int(r["part"]), int(r["col1"]), str(r["col2"])) for r in data)


def _arro3_rows(result: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    rows: list[dict[str, Any]] = pa.table(result).to_pylist()
    return rows


def spark_rows(spark: SparkSession, table: Path) -> list[Row]:
    frame = spark.read.format("delta").load(str(table))
    return sorted((r["part"], r["col1"], r["col2"]) for r in frame.collect())


def active_dvs(table: Path) -> dict[str, Any]:
    """Active file path -> its deletion vector descriptor (None without one), from the log."""
    snapshot = DeltaLog(table_location(str(table))).snapshot(None)
    return {path: add.get("deletionVector") for path, add in snapshot.files.items()}


def last_commit(table: Path) -> list[dict[str, Any]]:
    log = table / "_delta_log"
    newest = max(p for p in log.iterdir() if p.name.endswith(".json") and p.name[:20].isdigit())
    return [json.loads(line) for line in newest.read_text().splitlines()]


def check_removes_carry_their_dvs(before: dict[str, Any], table: Path) -> set[str]:
    """Every ``remove`` of the newest commit names the deletion vector its file had; untouched files keep theirs.
    Returns the removed paths."""
    removes = [a["remove"] for a in last_commit(table) if "remove" in a]
    assert removes
    for remove in removes:
        assert remove.get("deletionVector") == before[remove["path"]], remove["path"]
    removed = {r["path"] for r in removes}
    after = active_dvs(table)
    for path, dv in before.items():
        if path not in removed:
            assert after[path] == dv, path
    assert not removed & set(after)
    return removed


def test_delete_on_a_deletion_vector_table(spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> None:
    table = copy_fixture(fixtures_dir, tmp_path)
    before = active_dvs(table)
    DeltaTable.forPath(spark, str(table)).delete("col1 % 3 = 0")
    expected = [r for r in golden() if r[1] % 3]
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    removed = check_removes_carry_their_dvs(before, table)
    assert any(before[p] is not None for p in removed)
    info = next(a["commitInfo"] for a in last_commit(table) if "commitInfo" in a)
    metrics = info["sparkonce"]["operationMetrics"]
    assert metrics["numDeletedRows"] == len(golden()) - len(expected)
    assert info["operation"] == "DELETE"


def test_update_on_a_deletion_vector_table(spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> None:
    table = copy_fixture(fixtures_dir, tmp_path)
    before = active_dvs(table)
    DeltaTable.forPath(spark, str(table)).update("part in (2, 4)", {"col2": "'bar'"})
    expected = sorted((p, x, "bar" if p in (2, 4) else s) for p, x, s in golden())
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    check_removes_carry_their_dvs(before, table)


def test_merge_on_a_deletion_vector_table_never_matches_deleted_rows(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path
) -> None:
    table = copy_fixture(fixtures_dir, tmp_path)
    before = active_dvs(table)
    # 0 and 2 are deleted (they must be inserted, not updated), 1 and 3 are live, 100 is new
    source = spark.createDataFrame(
        [(0, 0, "new0"), (2, 2, "new2"), (1, 1, "new1"), (3, 3, "new3"), (0, 100, "new100")],
        "part int, col1 int, col2 string",
    )
    (
        DeltaTable.forPath(spark, str(table))
        .alias("t")
        .merge(source.alias("s"), "t.col1 = s.col1")
        .whenMatchedUpdate(set={"col2": "s.col2"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected = sorted(
        [(p, x, f"new{x}" if x in (1, 3) else s) for p, x, s in golden()]
        + [(0, 0, "new0"), (2, 2, "new2"), (0, 100, "new100")]
    )
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    metrics = next(a["commitInfo"] for a in last_commit(table) if "commitInfo" in a)["sparkonce"]["operationMetrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (2, 3)
    check_removes_carry_their_dvs(before, table)


def test_optimize_purges_deleted_rows(spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> None:
    table = copy_fixture(fixtures_dir, tmp_path)
    before = active_dvs(table)
    with_dvs = {p for p, dv in before.items() if dv is not None}
    assert len(with_dvs) == 2  # part=6 and part=8: one file each, 1 of its 3 rows deleted
    DeltaTable.forPath(spark, str(table)).optimize().executeCompaction()
    assert rs_rows(table) == golden()
    assert spark_rows(spark, table) == golden()
    removed = check_removes_carry_their_dvs(before, table)
    # odd partitions: two small files packed into one; part=6 and part=8: alone, rewritten for their 33% deleted
    # rows; parts 0, 2, 4: one file without a deletion vector, left alone
    odd = {p for p in before if int(p.split("/")[0].removeprefix("part=")) % 2}
    assert removed == odd | with_dvs
    assert all(dv is None for dv in active_dvs(table).values())
    info = next(a["commitInfo"] for a in last_commit(table) if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE"
    assert info["sparkonce"]["operationMetrics"]["numDeletionVectorsRemoved"] == 2
    changes = [a.get("add", a.get("remove"))["dataChange"] for a in last_commit(table) if "add" in a or "remove" in a]
    assert changes and not any(changes)


def test_rewrites_of_a_column_mapped_table_are_refused_naming_the_feature(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path
) -> None:
    table = copy_fixture(fixtures_dir, tmp_path, "dv-with-columnmapping")
    log_files = sorted(p.name for p in (table / "_delta_log").iterdir())
    with pytest.raises(UnsupportedFeatureError, match=r"DELETE on .*dv-with-columnmapping.*column mapping \(name\)"):
        DeltaTable.forPath(spark, str(table)).delete("col1 = 1")
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == log_files
