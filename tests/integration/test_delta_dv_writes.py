"""sparkonce's own DELETE, UPDATE and MERGE write deletion vectors on a table with ``delta.enableDeletionVectors``
(issue 37): the matched rows of a touched file are marked deleted by a new deletion vector (the union with the old
one) in a ``deletion_vector_<uuid>.bin`` file, the file is removed with its old deletion vector and added again
with the new one, and no untouched row is copied. Each table is read back through sparkonce's native path, its
Python path (``spark.sparkonce.nativeReads=false``) and delta-rs; delta-spark reads the same kind of table in
``test_oracle_delta_tables.py`` (scenario ``dml_with_deletion_vectors_and_change_feed``) and in
``test_delta_spark_reads_sparkonce_deletion_vectors`` below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.ops.vacuum import vacuum
from sparkonce.delta.read.native import NATIVE_READS_CONF
from sparkonce.delta.table.deletion_vectors import DeletionVector, deleted_rows, dv_relative_path
from sparkonce.storage import table_location
from tests.integration.conftest import operation_metrics

pytestmark = pytest.mark.spark

Row = tuple[int, str, int]
ROWS: list[Row] = [(i, f"v{i}", i % 2) for i in range(40)]
DV_METRICS = {"numDeletionVectorsAdded", "numDeletionVectorsRemoved", "numDeletionVectorsUpdated"}


def make_table(spark: SparkSession, path: Path, *, deletion_vectors: bool = True, change_feed: bool = False) -> None:
    """A table of :data:`ROWS` in two files (ids 0-19, 20-39), written by sparkonce."""
    properties = [f"'delta.enableDeletionVectors' = '{str(deletion_vectors).lower()}'"]
    if change_feed:
        properties.append("'delta.enableChangeDataFeed' = 'true'")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING, p INT) USING delta TBLPROPERTIES ({', '.join(properties)})"
    )
    for start in (0, 20):
        frame = spark.createDataFrame([r for r in ROWS if start <= r[0] < start + 20], "id long, v string, p int")
        frame.coalesce(1).write.format("delta").mode("append").save(str(path))


def read_all(spark: SparkSession, path: Path) -> dict[str, list[Row]]:
    """The table's rows through each reader: sparkonce native, sparkonce Python, delta-rs."""
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    found = {}
    for native in ("true", "false"):
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            rows = spark.read.format("delta").load(str(path)).collect()
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
        found[f"sparkonce nativeReads={native}"] = sorted((r["id"], r["v"], r["p"]) for r in rows)
    import pyarrow as pa

    result = QueryBuilder().register("t", RsTable(str(path))).execute("select id, v, p from t").read_all()
    found["delta-rs"] = sorted((r["id"], r["v"], r["p"]) for r in pa.table(result).to_pylist())
    return found


def check_rows(spark: SparkSession, path: Path, expected: list[Row]) -> None:
    for reader, rows in read_all(spark, path).items():
        assert rows == sorted(expected), reader


def commit(path: Path, table_version: int | None = None) -> list[dict[str, Any]]:
    delta_log = DeltaLog(table_location(str(path)))
    return delta_log.read_actions(delta_log.latest_version() if table_version is None else table_version)


def info_of(actions: list[dict[str, Any]]) -> dict[str, Any]:
    return next(a["commitInfo"] for a in actions if "commitInfo" in a)


def active(path: Path) -> dict[str, dict[str, Any]]:
    return dict(DeltaLog(table_location(str(path))).snapshot(None).files)


def dv_rows(path: Path, add: dict[str, Any]) -> list[int]:
    vector = DeletionVector.from_action(add["deletionVector"], str(path), data_file=add["path"])
    return [int(r) for r in deleted_rows(vector)]


def ids_of_file(path: Path, add: dict[str, Any]) -> list[int]:
    import pyarrow.parquet as pq

    return [int(i) for i in pq.read_table(path / add["path"], columns=["id"]).column("id").to_pylist()]


@pytest.mark.parametrize("native", ["true", "false"])
def test_delete_marks_rows_deleted_without_copying(spark: SparkSession, tmp_path: Path, native: str) -> None:
    """DELETE of some rows of both files: each file is removed (no deletion vector yet) and added again, same path,
    size and numRecords, with a deletion vector of exactly its deleted row indexes; no data file is written."""
    path = tmp_path / "t"
    make_table(spark, path)
    before = active(path)
    spark.conf.set(NATIVE_READS_CONF, native)  # the DELETE's own scan: Spark's Parquet reader or Python's
    try:
        spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    finally:
        spark.conf.unset(NATIVE_READS_CONF)
    expected = [r for r in ROWS if r[0] % 7]
    check_rows(spark, path, expected)

    actions = commit(path)
    removes = [a["remove"] for a in actions if "remove" in a]
    adds = [a["add"] for a in actions if "add" in a]
    assert sorted(r["path"] for r in removes) == sorted(a["path"] for a in adds) == sorted(before)
    assert all(r.get("deletionVector") is None and r["dataChange"] for r in removes)
    for add in adds:
        old = before[add["path"]]
        assert (add["size"], add["partitionValues"], add["dataChange"]) == (old["size"], old["partitionValues"], True)
        stats, old_stats = json.loads(add["stats"]), json.loads(old["stats"])
        assert stats["numRecords"] == old_stats["numRecords"] == 20
        assert stats["tightBounds"] is False and stats["minValues"] == old_stats["minValues"]
        ids = ids_of_file(path, add)
        assert dv_rows(path, add) == [i for i, x in enumerate(ids) if x % 7 == 0]
        descriptor = add["deletionVector"]
        assert descriptor["storageType"] == "u" and len(descriptor["pathOrInlineDv"]) == 20
        assert (path / str(dv_relative_path(descriptor))).read_bytes()[:1] == b"\x01"
    assert not [p for p in os.listdir(path) if p.endswith(".parquet") and p not in before]

    info = info_of(actions)
    metrics = operation_metrics(info)
    assert info["operation"] == "DELETE"
    assert set(metrics) >= DV_METRICS
    deleted = len(ROWS) - len(expected)
    assert (metrics["numDeletedRows"], metrics["numCopiedRows"], metrics["numAddedFiles"]) == (deleted, 0, 0)
    assert (metrics["numRemovedFiles"], metrics["numDeletionVectorsAdded"], metrics["numDeletionVectorsUpdated"]) == (
        0,
        2,
        0,
    )


def test_a_second_delete_unions_the_deletion_vectors_and_a_file_losing_every_row_is_removed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A second DELETE on a file with a deletion vector writes a new one holding the old and the new deletes
    (``numDeletionVectorsUpdated``); a file all of whose rows are then deleted is only removed, with its deletion
    vector, and no deletion vector is written for it. VACUUM then deletes the replaced deletion vector files and
    keeps the live ones and every data file still in the table."""
    path = tmp_path / "t"
    make_table(spark, path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    first = active(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0 OR id >= 20")
    expected = [r for r in ROWS if r[0] % 7 and r[0] % 5 and r[0] < 20]
    check_rows(spark, path, expected)
    actions = commit(path)
    removes = {a["remove"]["path"]: a["remove"] for a in actions if "remove" in a}
    adds = {a["add"]["path"]: a["add"] for a in actions if "add" in a}
    assert set(removes) == set(first) and len(adds) == 1
    for p, remove in removes.items():
        assert remove["deletionVector"] == first[p]["deletionVector"]
    (kept,) = adds.values()
    ids = ids_of_file(path, kept)
    assert dv_rows(path, kept) == [i for i, x in enumerate(ids) if x % 7 == 0 or x % 5 == 0]
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numDeletionVectorsAdded"], metrics["numDeletionVectorsRemoved"]) == (1, 2)
    assert (metrics["numDeletionVectorsUpdated"], metrics["numRemovedFiles"]) == (1, 1)
    assert metrics["numDeletedRows"] == len([r for r in ROWS if r[0] % 7]) - len(expected)

    retention = "'delta.deletedFileRetentionDuration' = 'interval 0 hours'"
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({retention})")
    live_dv = str(dv_relative_path(kept["deletionVector"]))
    old_dvs = {str(dv_relative_path(a["deletionVector"])) for a in first.values()} - {live_dv}
    result = vacuum(str(path), retention_hours=0, dry_run=False)
    gone = {p for p in first if p not in adds}
    assert set(result.files) == old_dvs | gone
    assert (path / live_dv).exists() and (path / kept["path"]).exists()
    check_rows(spark, path, expected)


def test_delete_without_deletion_vectors_enabled_rewrites_files(spark: SparkSession, tmp_path: Path) -> None:
    """``delta.enableDeletionVectors`` false: the DELETE rewrites the touched file as before (copying its rows)."""
    path = tmp_path / "t"
    make_table(spark, path, deletion_vectors=False)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    check_rows(spark, path, [r for r in ROWS if r[0] != 3])
    actions = commit(path)
    assert not any((a.get("add") or {}).get("deletionVector") for a in actions)
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"], metrics["numCopiedRows"]) == (1, 1, 19)
