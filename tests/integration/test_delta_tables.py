"""``sparkonce.delta.tables.DeltaTable``: delta-spark's API, each operation checked against delta-rs's reading of
the same table (exact rows), the commit it made (operation, metrics) and the files it rewrote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import OptionError, SchemaMismatchError, TableNotFoundError
from tests.integration.conftest import operation_metrics


def _rows(table: Path, *columns: str) -> list[tuple]:
    """The table's rows read by delta-rs (independent of sparkonce's reader), sorted."""
    from deltalake import DeltaTable as RsTable

    data = RsTable(str(table)).to_pyarrow_table().to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in data)


def _commit(table: Path, table_version: int) -> dict:
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _info(table: Path, table_version: int) -> dict:
    """The commit's ``commitInfo``, its metrics as numbers."""
    info = next(a["commitInfo"] for a in _commit(table, table_version) if "commitInfo" in a)
    return {**info, "operationMetrics": operation_metrics(info)}


def _latest(table: Path) -> int:
    from deltalake import DeltaTable as RsTable

    return int(RsTable(str(table)).version())


def _make(spark, table: Path, rows: list[tuple], schema: str, files: int, partition_by: str | None = None) -> None:  # type: ignore[no-untyped-def]
    frame = spark.createDataFrame(rows, schema)
    key = schema.split()[0]
    writer = frame.repartitionByRange(files, key).write.format("delta").mode("append")
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.save(str(table))


def test_merge_builder_clauses_rewrite_only_touched_files(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _make(spark, table, [(i, f"v{i}", 1) for i in range(100)], "id long, name string, n long", files=10)
    before = _latest(table)
    holding = _files_holding(table, [5, 7, 55])  # what the key stats say; 200 and 201 are beyond every file
    source = spark.createDataFrame(
        [(5, "five", 10), (7, "seven", 0), (55, "x", 3), (200, "new", 1), (201, "skip", -1)],
        "id long, name string, n long",
    )
    out = (
        DeltaTable.forPath(spark, str(table))
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.n = 0")
        .whenMatchedUpdate(set={"name": "s.name", "n": "t.n + s.n"})
        .whenNotMatchedInsertAll("s.n > 0")
        .execute()
        .collect()[0]
    )
    assert (out.num_updated_rows, out.num_deleted_rows, out.num_inserted_rows, out.num_affected_rows) == (2, 1, 1, 4)
    expected = {(i, f"v{i}", 1) for i in range(100)} - {(5, "v5", 1), (7, "v7", 1), (55, "v55", 1)}
    expected |= {(5, "five", 11), (55, "x", 4), (200, "new", 1)}
    assert _rows(table, "id", "name", "n") == sorted(expected)

    version = _latest(table)
    assert version == before + 1
    info = _info(table, version)
    assert info["operation"] == "MERGE"
    metrics = info["operationMetrics"]
    assert metrics["numTargetFilesRemoved"] == metrics["numCandidateFiles"] == len(holding) < 10
    assert metrics["numTargetFilesBefore"] == 10 and metrics["numSourceRows"] == 5
    assert metrics["numTargetRowsCopied"] == sum(holding.values()) - 3
    assert json.loads(info["operationParameters"]["matchedPredicates"]) == [
        {"actionType": "delete", "predicate": "s.n = 0"},
        {"actionType": "update"},
    ]
    history = DeltaTable.forPath(spark, str(table)).history(1).collect()[0]
    assert history.operation == "MERGE" and history.operationMetrics["numTargetRowsUpdated"] == "2"


@pytest.mark.parametrize("keys_on", ["driver", "executors"])
def test_merge_candidates_by_statistics_for_a_small_source_and_by_an_executor_join_past_it(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys_on: str
) -> None:
    """A small source's keys pick the candidate files by the log's statistics on the driver; past
    ``KEYS_ON_DRIVER`` source rows the keys stay on executors, joined with the files' key columns, and only files
    that hold a key are read. Same merge, same rows either way."""
    import sparkonce.delta.ops.merge as merge_module

    if keys_on == "executors":
        monkeypatch.setattr(merge_module, "KEYS_ON_DRIVER", 2)
    table = tmp_path / "t"
    _make(spark, table, [(i, "old") for i in range(0, 200, 2)], "id long, name string", files=10)  # 20 ids each
    # 1, 3 and 41 fall inside the id ranges of files 0 and 2 but are in no file; 120 is in file 6; 300 and the
    # null id are in none (a null key matches nothing)
    source = spark.createDataFrame(
        [(1, "a"), (3, "b"), (41, "c"), (120, "d"), (300, "e"), (None, "f")], "id long, name string"
    )
    DeltaTable.forPath(spark, str(table)).alias("t").merge(
        source.alias("s"), "t.id = s.id"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    expected = [(i, "d" if i == 120 else "old") for i in range(0, 200, 2)]
    expected += [(1, "a"), (3, "b"), (41, "c"), (300, "e")]
    from deltalake import DeltaTable as RsTable

    rows = [(r["id"], r["name"]) for r in RsTable(str(table)).to_pyarrow_table().to_pylist()]
    assert sorted(r for r in rows if r[0] is not None) == sorted(expected)
    assert [r for r in rows if r[0] is None] == [(None, "f")]
    metrics = _info(table, _latest(table))["operationMetrics"]
    assert metrics["numSourceRows"] == 6 and metrics["numTargetFilesBefore"] == 10
    assert metrics["numCandidateFiles"] == (3 if keys_on == "driver" else 1)
    assert metrics["numTargetFilesRemoved"] == 1
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 5)


def test_merge_not_matched_by_source_and_columns(spark, tmp_path: Path) -> None:
    import pyspark.sql.functions as F

    table = tmp_path / "t"
    _make(spark, table, [(i, "old", 0) for i in range(10)], "id long, name string, n long", files=2)
    source = spark.createDataFrame([(1, "one"), (2, "two"), (11, "eleven")], "id long, name string")
    (
        DeltaTable.forPath(spark, str(table))
        .alias("t")
        .merge(source.alias("s"), F.expr("t.id = s.id"))
        .whenMatchedUpdate(set={"name": F.col("s.name")})
        .whenNotMatchedInsert(values={"id": "s.id", "name": F.upper(F.col("s.name"))})
        .whenNotMatchedBySourceDelete("t.id >= 8")
        .whenNotMatchedBySourceUpdate(set={"n": F.lit(9)})
        .execute()
    )
    expected = [(0, "old", 9), (1, "one", 0), (2, "two", 0)] + [(i, "old", 9) for i in range(3, 8)]
    assert _rows(table, "id", "name", "n") == sorted([*expected, (11, "ELEVEN", None)])


def test_merge_refuses_two_source_rows_on_one_target_row(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _make(spark, table, [(1, "a", 0)], "id long, name string, n long", files=1)
    before = _latest(table)
    source = spark.createDataFrame([(1, "x", 1), (1, "y", 2)], "id long, name string, n long")
    with pytest.raises(SchemaMismatchError, match="multiple source rows matched"):
        DeltaTable.forPath(spark, str(table)).alias("t").merge(
            source.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().execute()
    assert _latest(table) == before


def test_merge_is_idempotent_with_delta_txn_confs(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _make(spark, table, [(1, "a", 1)], "id long, name string, n long", files=1)
    source = spark.createDataFrame([(1, "a", 1), (2, "b", 1)], "id long, name string, n long")

    def upsert() -> None:
        DeltaTable.forPath(spark, str(table)).alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdate(
            set={"n": "t.n + s.n"}
        ).whenNotMatchedInsertAll().execute()

    spark.conf.set("spark.databricks.delta.write.txnAppId", "app")
    spark.conf.set("spark.databricks.delta.write.txnVersion", "3")
    try:
        upsert()
        version = _latest(table)
        upsert()  # a replay of batch 3: skipped by the txn
        assert _latest(table) == version
        txns = [a["txn"] for a in _commit(table, version) if "txn" in a]
        assert [(t["appId"], t["version"]) for t in txns] == [("app", 3)]
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
        with pytest.raises(OptionError, match="txnVersion"):
            upsert()
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
    assert _rows(table, "id", "n") == [(1, 2), (2, 1)]


def test_delete_and_update_on_a_partitioned_table(spark, tmp_path: Path) -> None:
    import pyspark.sql.functions as F

    table = tmp_path / "t"
    rows = [(i, f"d{i % 3}", i) for i in range(30)]
    _make(spark, table, rows, "id long, day string, v long", files=3, partition_by="day")
    dt = DeltaTable.forPath(spark, str(table))
    files_before = len(_active(table))

    dt.delete("day = 'd0'")  # partition predicate: whole files removed, nothing read or written
    info = _info(table, _latest(table))
    assert info["operation"] == "DELETE"
    assert info["operationMetrics"]["numAddedFiles"] == 0 and info["operationMetrics"]["numDeletedRows"] == 10
    assert files_before - len(_active(table)) == info["operationMetrics"]["numRemovedFiles"]

    dt.delete(F.col("v") > 25)
    dt.update("id % 2 = 1", {"v": "v * 100"})
    dt.update(set={"day": F.lit("d1")}, condition=F.col("id") == 2)
    expected = []
    for i, day, v in rows:
        if day == "d0" or v > 25:
            continue
        expected.append((i, "d1" if i == 2 else day, v * 100 if i % 2 else v))
    assert _rows(table, "id", "day", "v") == sorted(expected)
    names = [r.operation for r in dt.history().collect()]
    assert names[:4] == ["UPDATE", "UPDATE", "DELETE", "DELETE"]
    with pytest.raises(SchemaMismatchError, match="nope"):
        dt.update(set={"nope": "1"})


def _files_holding(table: Path, ids: list[int]) -> dict[str, int]:
    """Files (and their row counts) whose id min/max stats cover one of ``ids``."""
    from deltalake import DeltaTable as RsTable

    adds = pa.table(RsTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    return {a["path"]: a["num_records"] for a in adds if any(a["min.id"] <= i <= a["max.id"] for i in ids)}


def _active(table: Path) -> list[str]:
    from deltalake import DeltaTable as RsTable

    return list(RsTable(str(table)).file_uris())


def test_optimize_compacts_small_files_without_data_change(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    for i in range(6):
        spark.createDataFrame([(i, "a" if i % 2 else "b")], "id long, p string").write.format("delta").mode(
            "append"
        ).partitionBy("p").save(str(table))
    dt = DeltaTable.forPath(spark, str(table))
    with pytest.raises(
        AnalysisException, match=re.escape("Predicate references non-partition column 'id'. Only the partition columns")
    ):
        dt.optimize().where("id > 1").executeCompaction()

    result = dt.optimize().where("p = 'a'").executeCompaction().collect()[0]
    assert (result.metrics.numFilesRemoved, result.metrics.numFilesAdded) == (3, 1)
    version = _latest(table)
    actions = _commit(table, version)
    changes = [a.get("add", a.get("remove"))["dataChange"] for a in actions if "add" in a or "remove" in a]
    assert changes == [False] * 4
    assert _info(table, version)["operation"] == "OPTIMIZE"
    dt.optimize().executeCompaction()
    assert len(_active(table)) == 2
    assert _rows(table, "id", "p") == [(i, "a" if i % 2 else "b") for i in range(6)]
    nothing = dt.optimize().executeCompaction().collect()[0]
    assert nothing.metrics.numFilesRemoved == 0 and _latest(table) == version + 1


def test_restore_detail_vacuum_and_lookups(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _make(spark, table, [(1, "a", 1)], "id long, name string, n long", files=1)
    v1 = _latest(table)

    # A commit's time for time travel is its log file's modification time (Delta's rule without in-commit
    # timestamps, which delta-rs follows), a little after the commitInfo timestamp.
    stamp = (table / "_delta_log" / f"{v1:020d}.json").stat().st_mtime
    dt = DeltaTable.forPath(spark, str(table))
    dt.delete()
    assert _rows(table, "id") == []
    metrics = dt.restoreToVersion(v1).collect()[0]
    assert (metrics.num_restored_files, metrics.num_of_files_after_restore) == (1, 1)
    assert _rows(table, "id", "name", "n") == [(1, "a", 1)]
    assert dt.history(1).collect()[0].operation == "RESTORE"
    dt.delete("id = 1")
    import datetime as dt_mod

    when = dt_mod.datetime.fromtimestamp(stamp, dt_mod.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    dt.restoreToTimestamp(when)
    assert _rows(table, "id", "name", "n") == [(1, "a", 1)]

    detail = dt.detail().collect()[0]
    assert (detail.format, detail.numFiles, detail.location) == ("delta", 1, f"file:{table}")
    assert DeltaTable.isDeltaTable(spark, str(table)) and not DeltaTable.isDeltaTable(spark, str(tmp_path))
    with pytest.raises(TableNotFoundError, match="is not a Delta table"):
        DeltaTable.forPath(spark, str(tmp_path / "nothing"))
    assert sorted(r.id for r in dt.alias("x").toDF().where("x.id = 1").collect()) == [1]
    dt.update(set={"n": "n + 1"})  # the only data file is rewritten: the old one becomes a vacuum candidate
    with pytest.raises(OptionError, match="retention"):
        dt.vacuum(0)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        deleted = dt.vacuum(0).collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert len(deleted) == 1 and len(_active(table)) == 1
    assert not Path(deleted[0].path.removeprefix("file:")).exists()
    assert _rows(table, "id", "name", "n") == [(1, "a", 2)]
