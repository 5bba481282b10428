"""Real DELETE / MERGE / OPTIMIZE racing on one table, with Delta's conflict rules deciding (issue 26 item 4).

The race is forced, not timed: the "winner" runs to completion between the loser's read of the table and its
commit (a hook around the loser's ``commit_rewrite``, sparkonce's own function). Results are read by delta-rs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.ops import dml, optimize
from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import ConcurrentAppendError, ConcurrentDeleteReadError
from tests.delta_helpers import delta_rows

pytestmark = pytest.mark.spark

SCHEMA = "id long, part string"


def _table(spark: SparkSession, tmp_path: Path) -> str:
    table = str(tmp_path / "t")
    rows = [(i, "a" if i % 2 else "b") for i in range(8)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").partitionBy("part").save(table)
    return table


def _before_commit(monkeypatch: pytest.MonkeyPatch, module: Any, winner: Callable[[], None]) -> list[int]:
    """Run ``winner`` once, just before ``module``'s rewrite commits (after it read the table)."""
    original = module.commit_rewrite
    ran: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not ran:
            ran.append(1)
            winner()
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "commit_rewrite", racing)
    return ran


def _insert_by_merge(spark: SparkSession, table: str, rows: list[tuple[int, str]]) -> None:
    source = spark.createDataFrame(rows, SCHEMA)
    DeltaTable.forPath(spark, table).alias("t").merge(
        source.alias("s"), "t.id = s.id"
    ).whenNotMatchedInsertAll().execute()


def _ids(table: str) -> list[int]:
    return sorted(r["id"] for r in delta_rows(table, ["id"]))


def _latest(table: str) -> int:
    from deltalake import DeltaTable as RsTable

    return int(RsTable(table).version())


def test_delete_loses_to_a_merge_inserting_into_its_partition(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(spark, tmp_path)
    ran = _before_commit(monkeypatch, dml, lambda: _insert_by_merge(spark, table, [(101, "a")]))
    with pytest.raises(ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\].*\(MERGE\).*'part': 'a'"):
        DeltaTable.forPath(spark, table).delete("part = 'a'")
    assert ran == [1]
    assert _latest(table) == 1  # the MERGE's commit is the newest: the DELETE committed nothing
    assert _ids(table) == [0, 1, 2, 3, 4, 5, 6, 7, 101]


def test_delete_and_a_merge_into_another_partition_both_commit(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(spark, tmp_path)
    _before_commit(monkeypatch, dml, lambda: _insert_by_merge(spark, table, [(100, "b")]))
    DeltaTable.forPath(spark, table).delete("part = 'a'")
    assert _latest(table) == 2
    assert _ids(table) == [0, 2, 4, 6, 100]


def test_optimize_loses_to_a_delete_of_a_file_it_compacts_not_to_an_append(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(spark, tmp_path)
    spark.createDataFrame([(8, "a"), (9, "b")], SCHEMA).write.format("delta").mode("append").save(table)
    _before_commit(
        monkeypatch,
        optimize,
        lambda: spark.createDataFrame([(10, "a")], SCHEMA).write.format("delta").mode("append").save(table),
    )
    DeltaTable.forPath(spark, table).optimize().executeCompaction()
    assert _latest(table) == 3 and _ids(table) == list(range(11))
    spark.createDataFrame([(11, "a")], SCHEMA).write.format("delta").mode("append").save(table)
    monkeypatch.undo()
    _before_commit(monkeypatch, optimize, lambda: DeltaTable.forPath(spark, table).delete("part = 'a'"))
    with pytest.raises(ConcurrentDeleteReadError, match=r"^\[DELTA_CONCURRENT_DELETE_READ\]"):
        DeltaTable.forPath(spark, table).optimize().executeCompaction()
    assert _latest(table) == 5
    assert _ids(table) == [0, 2, 4, 6, 9]  # no row the DELETE removed came back
