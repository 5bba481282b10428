"""sparkonce's own DELETE, UPDATE and MERGE write deletion vectors on a table with ``delta.enableDeletionVectors``
(issue 37): the matched rows of a touched file are marked deleted by a new deletion vector (the union with the old
one) in a ``deletion_vector_<uuid>.bin`` file, the file is removed with its old deletion vector and added again
with the new one, and no untouched row is copied. Each DML runs with native reads on (its scan is Spark's Parquet
scan, row indexes from ``_metadata.row_index``) or off (``spark.sparkonce.nativeReads=false``: Python workers count
the rows); each table is read back by sparkonce with native reads on and off (a batch read of a table with deletion
vectors goes through the Python source either way, its change feed through Spark's scan when on) and by delta-rs;
delta-spark reads the same kind of table at every table version in ``test_oracle_delta_tables.py`` (scenario
``dml_with_deletion_vectors_and_change_feed``: rows, history metric names, the change feed, and no row copied by
either engine).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.ops.row_deletion import PERSISTENT_CONF
from sparkonce.delta.ops.vacuum import vacuum
from sparkonce.delta.read.native import NATIVE_READS_CONF
from sparkonce.delta.table.deletion_vectors import DeletionVector, deleted_rows, dv_relative_path
from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import ConcurrentAppendError
from sparkonce.storage import TableLocation, table_location
from tests.integration.conftest import operation_metrics

pytestmark = pytest.mark.spark

Row = tuple[int, str, int]
ROWS: list[Row] = [(i, f"v{i}", i % 2) for i in range(40)]
DV_METRICS = {"numDeletionVectorsAdded", "numDeletionVectorsRemoved", "numDeletionVectorsUpdated"}


def make_table(
    spark: SparkSession,
    path: Path,
    *,
    deletion_vectors: bool = True,
    change_feed: bool = False,
    checkpoint_interval: int | None = None,
) -> None:
    """A table of :data:`ROWS` in two files (ids 0-19, 20-39), written by sparkonce."""
    properties = [f"'delta.enableDeletionVectors' = '{str(deletion_vectors).lower()}'"]
    if change_feed:
        properties.append("'delta.enableChangeDataFeed' = 'true'")
    if checkpoint_interval is not None:
        properties.append(f"'delta.checkpointInterval' = '{checkpoint_interval}'")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING, p INT) USING delta TBLPROPERTIES ({', '.join(properties)})"
    )
    for start in (0, 20):
        frame = spark.createDataFrame([r for r in ROWS if start <= r[0] < start + 20], "id long, v string, p int")
        frame.coalesce(1).write.format("delta").mode("append").save(str(path))


def read_all(spark: SparkSession, path: Path) -> dict[str, list[Row]]:
    """The table's rows through each reader: sparkonce with native reads on and off, delta-rs."""
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
    (``numDeletionVectorsUpdated``; its scan on Python workers, which count the rows the old one deletes in the
    row indexes); a file all of whose rows are then deleted is only removed, with its deletion
    vector, and no deletion vector is written for it. A checkpoint after each second commit holds the deletion
    vectors (active and tombstoned) every reader then starts from. VACUUM then deletes the replaced deletion vector
    files and keeps the live ones and every data file still in the table."""
    path = tmp_path / "t"
    make_table(spark, path, checkpoint_interval=2)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    first = active(path)
    spark.conf.set(NATIVE_READS_CONF, "false")  # Python workers give the row indexes of files with a DV
    try:
        spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0 OR id >= 20")
    finally:
        spark.conf.unset(NATIVE_READS_CONF)
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
    assert (
        path / "_delta_log" / f"{DeltaLog(table_location(str(path))).latest_version():020d}.checkpoint.parquet"
    ).exists()
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


@pytest.mark.parametrize("turned_off", ["table property", "session setting"])
def test_delete_without_deletion_vectors_enabled_rewrites_files(
    spark: SparkSession, tmp_path: Path, turned_off: str
) -> None:
    """``delta.enableDeletionVectors`` false, or Delta's ``spark.databricks.delta.delete.deletionVectors.persistent``
    false: the DELETE rewrites the touched file as before (copying its rows)."""
    path = tmp_path / "t"
    make_table(spark, path, deletion_vectors=turned_off == "session setting")
    setting = PERSISTENT_CONF.format(operation="delete")
    spark.conf.set(setting, str(turned_off == "table property").lower())
    try:
        spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    finally:
        spark.conf.unset(setting)
    check_rows(spark, path, [r for r in ROWS if r[0] != 3])
    actions = commit(path)
    assert not any((a.get("add") or {}).get("deletionVector") for a in actions)
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"], metrics["numCopiedRows"]) == (1, 1, 19)
    assert (metrics["numDeletionVectorsAdded"], metrics["numDeletionVectorsRemoved"]) == (0, 0)


def changes(spark: SparkSession, path: Path, table_version: int) -> dict[str, list[tuple[int, str, str]]]:
    """The change data feed of one table version through sparkonce (both paths) and delta-rs: (id, v, type)."""
    from deltalake import DeltaTable as RsTable

    found = {}
    for native in ("true", "false"):
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            frame = (
                spark.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", table_version)
                .option("endingVersion", table_version)
                .load(str(path))
            )
            rows = frame.collect()
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
        found[f"sparkonce nativeReads={native}"] = sorted((r["id"], r["v"], r["_change_type"]) for r in rows)
    import pyarrow as pa

    reader = RsTable(str(path)).load_cdf(starting_version=table_version, ending_version=table_version)
    rs_rows = pa.table(reader.read_all()).to_pylist()
    found["delta-rs"] = sorted((r["id"], r["v"], r["_change_type"]) for r in rs_rows)
    return found


def test_update_writes_only_the_updated_rows_and_the_change_feed_stays_right(
    spark: SparkSession, tmp_path: Path
) -> None:
    """UPDATE on a table with deletion vectors and the change data feed: the matched rows are marked deleted in their
    files and only the updated rows are written, into one new file; the change feed of the UPDATE (and of a DELETE
    before it) holds exactly the changed rows, read by sparkonce and delta-rs."""
    path = tmp_path / "t"
    make_table(spark, path, change_feed=True)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id IN (1, 22)")
    deleted_at = DeltaLog(table_location(str(path))).latest_version()
    before = active(path)
    spark.sql(f"UPDATE delta.`{path}` SET v = concat('u', v) WHERE id % 4 = 0")
    updated = [r for r in ROWS if r[0] % 4 == 0]
    expected = [(i, f"u{v}" if i % 4 == 0 else v, p) for i, v, p in ROWS if i not in (1, 22)]
    check_rows(spark, path, expected)

    actions = commit(path)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    readded = [a for a in adds if a["path"] in before]
    (new,) = [a for a in adds if a["path"] not in before]
    assert sorted(r["path"] for r in removes) == sorted(a["path"] for a in readded) == sorted(before)
    for add in readded:
        ids = ids_of_file(path, add)
        assert dv_rows(path, add) == [i for i, x in enumerate(ids) if x % 4 == 0 or x in (1, 22)]
    assert json.loads(new["stats"])["numRecords"] == len(updated)  # no untouched row copied
    assert "deletionVector" not in new
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numUpdatedRows"], metrics["numCopiedRows"]) == (len(updated), 0)
    assert (metrics["numAddedFiles"], metrics["numRemovedFiles"]) == (1, 0)
    assert (metrics["numDeletionVectorsAdded"], metrics["numDeletionVectorsUpdated"]) == (2, 2)
    assert set(metrics) >= DV_METRICS

    update_at = DeltaLog(table_location(str(path))).latest_version()
    feed = sorted(
        [(i, v, "update_preimage") for i, v, _ in updated] + [(i, f"u{v}", "update_postimage") for i, v, _ in updated]
    )
    for reader, rows in changes(spark, path, update_at).items():
        assert rows == sorted(feed), reader
    for reader, rows in changes(spark, path, deleted_at).items():
        assert rows == [(1, "v1", "delete"), (22, "v22", "delete")], reader


def test_merge_marks_updated_and_deleted_rows_and_writes_only_new_rows(spark: SparkSession, tmp_path: Path) -> None:
    """MERGE with update, delete and insert clauses on a table with deletion vectors and the change data feed: the
    updated and deleted target rows are marked deleted in their files, one new file holds the updated and inserted
    rows only; a second MERGE deleting every row of a file removes it whole (its deletion vector with it)."""
    path = tmp_path / "t"
    make_table(spark, path, change_feed=True)
    before = active(path)
    source = spark.createDataFrame(
        [(0, "m0", "u"), (21, "m21", "u"), (5, None, "d"), (100, "m100", "u")], "id long, v string, op string"
    )
    source.createOrReplaceTempView("dv_merge_source")
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING dv_merge_source s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (s.id, s.v, 0)"
    )
    after_merge = [(i, {0: "m0", 21: "m21"}.get(i, v), p) for i, v, p in ROWS if i != 5] + [(100, "m100", 0)]
    check_rows(spark, path, after_merge)
    actions = commit(path)
    adds = [a["add"] for a in actions if "add" in a]
    readded = {a["path"]: a for a in adds if a["path"] in before}
    (new,) = [a for a in adds if a["path"] not in before]
    assert set(readded) == set(before) == {a["remove"]["path"] for a in actions if "remove" in a}
    assert sorted(x for a in readded.values() for x in dv_rows(path, a)) == [0, 1, 5]  # ids 0, 5; 21 is row 1
    assert json.loads(new["stats"])["numRecords"] == 3  # two updated rows, one inserted: nothing copied
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsDeleted"], metrics["numTargetRowsInserted"]) == (
        2,
        1,
        1,
    )
    assert (metrics["numTargetRowsCopied"], metrics["numTargetFilesAdded"], metrics["numTargetFilesRemoved"]) == (
        0,
        1,
        0,
    )
    assert (metrics["numTargetDeletionVectorsAdded"], metrics["numTargetDeletionVectorsUpdated"]) == (2, 0)
    merged_at = DeltaLog(table_location(str(path))).latest_version()
    feed = [
        (0, "v0", "update_preimage"),
        (0, "m0", "update_postimage"),
        (5, "v5", "delete"),
        (21, "v21", "update_preimage"),
        (21, "m21", "update_postimage"),
        (100, "m100", "insert"),
    ]
    for reader, rows in changes(spark, path, merged_at).items():
        assert rows == sorted(feed), reader

    second = [p for p, a in readded.items() if 21 in ids_of_file(path, a)]
    spark.createDataFrame([(i,) for i in range(20, 40)], "id long").createOrReplaceTempView("dv_merge_all")
    spark.sql(f"MERGE INTO delta.`{path}` t USING dv_merge_all s ON t.id = s.id WHEN MATCHED THEN DELETE")
    check_rows(spark, path, [r for r in after_merge if not 20 <= r[0] < 40])
    actions = commit(path)
    # the old file's every live row goes (removed whole, with its deletion vector); the MERGE's new file loses 21
    assert sorted(a["remove"]["path"] for a in actions if "remove" in a) == sorted([*second, new["path"]])
    (again,) = [a["add"] for a in actions if "add" in a]
    assert again["path"] == new["path"] and dv_rows(path, again) == [ids_of_file(path, new).index(21)]
    metrics = operation_metrics(info_of(actions))
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetDeletionVectorsRemoved"]) == (1, 1)
    assert (metrics["numTargetDeletionVectorsAdded"], metrics["numTargetRowsDeleted"]) == (1, 20)


def test_a_concurrent_deletion_vector_update_of_the_same_file_is_a_conflict(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another DELETE marks a row of the same file deleted and commits first (just before this DELETE's log file is
    put): this DELETE, which read the whole table, stops with DELTA_CONCURRENT_APPEND (the winner's ``add`` of the
    file with its new deletion vector is a data change in what it read; Delta's ConflictChecker checks added files
    before removed ones, so delta-spark fails the same way), its deletion vector file is deleted, the winner's
    commit stands."""
    path = tmp_path / "t"
    make_table(spark, path)
    original = TableLocation.put_if_absent
    raced: list[int] = []

    def racing(self: TableLocation, relative: str, data: bytes) -> bool:
        if not raced and relative.startswith("_delta_log/") and relative.endswith(".json"):
            raced.append(int(relative.removeprefix("_delta_log/").removesuffix(".json")))
            DeltaTable.forPath(spark, str(path)).delete("id = 2")  # the winner, in the same file
        return original(self, relative, data)

    monkeypatch.setattr(TableLocation, "put_if_absent", racing)
    with pytest.raises(ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\]"):
        DeltaTable.forPath(spark, str(path)).delete("id = 3")
    monkeypatch.undo()
    assert raced and DeltaLog(table_location(str(path))).latest_version() == raced[0]
    assert info_of(commit(path))["operation"] == "DELETE"
    check_rows(spark, path, [r for r in ROWS if r[0] != 2])
    referenced = {str(dv_relative_path(a["deletionVector"])) for a in active(path).values() if a.get("deletionVector")}
    assert {p for p in os.listdir(path) if p.startswith("deletion_vector_")} == referenced
