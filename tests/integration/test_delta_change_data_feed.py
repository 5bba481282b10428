"""The change data feed (issue 24): what sparkonce's commits write is read back identically by sparkonce and by
delta-rs's ``load_cdf``; tables delta-rs changed read identically too; bad ranges fail with Delta's errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from sparkonce.delta.ops.merge import merge_latest
from sparkonce.delta.table.catalog import WAREHOUSE_CONF
from sparkonce.delta.tables import DeltaTable
from sparkonce.delta.txn.commit import BatchTxn
from sparkonce.errors import SqlError
from tests.delta_helpers import delta_rs_changes

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}
DEFAULT_CDF = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"
Row = tuple[Any, ...]


def _changes(spark: SparkSession, table: Path, start: int, end: int | None = None) -> list[Row]:
    reader = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
    if end is not None:
        reader = reader.option("endingVersion", end)
    frame = reader.load(str(table))
    return sorted(tuple(r) for r in frame.collect())


def _load_cdf(table: Path, start: int, end: int) -> list[Row]:
    # delta-rs: _commit_version is a uint64 and _commit_timestamp a naive timestamp[ms]; sparkonce gives Spark's
    # long and timestamp (session time zone UTC in the tests).
    return sorted(tuple(r.values()) for r in delta_rs_changes(table, start, end))


def _cdc_actions(table: Path, table_version: int) -> list[dict[str, Any]]:
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return [json.loads(line)["cdc"] for line in lines if '"cdc"' in line[:10]]


@pytest.mark.parametrize("partitioned", [False, True])
def test_every_change_kind_sparkonce_writes_is_read_identically_by_sparkonce_and_delta_rs(
    spark: SparkSession, tmp_path: Path, partitioned: bool
) -> None:
    table = tmp_path / "t"
    schema = "id long, name string, part int"
    writer = spark.createDataFrame([(i, f"v{i}", i % 2) for i in range(6)], schema).write.format("delta")
    writer = writer.option("delta.enableChangeDataFeed", "true")
    (writer.partitionBy("part") if partitioned else writer).save(str(table))  # 0: insert
    spark.createDataFrame([(10, "x", 0)], schema).write.format("delta").mode("append").save(str(table))  # 1
    dt = DeltaTable.forPath(spark, str(table))
    dt.update("id = 1", {"name": "'one'"})  # 2
    dt.delete("id = 2")  # 3
    source = spark.createDataFrame([(3, "three", 1), (20, "new", 0), (4, None, 0)], schema)
    (
        dt.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.name IS NULL")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )  # 4
    dt.delete("part = 1")  # 5: whole files (partitioned) or a rewrite
    spark.createDataFrame([(7, "seven", 1)], schema).write.format("delta").mode("overwrite").save(str(table))  # 6

    assert RsTable(str(table)).version() == 6
    assert _cdc_actions(table, 0) == [] and _cdc_actions(table, 1) == [] and _cdc_actions(table, 6) == []
    assert all(a["path"].startswith("_change_data/") and a["dataChange"] is False for a in _cdc_actions(table, 2))
    assert bool(_cdc_actions(table, 5)) is not partitioned  # a partition predicate removes whole files
    expected = [
        *[(i, f"v{i}", i % 2, "insert", 0) for i in range(6)],
        (10, "x", 0, "insert", 1),
        (1, "v1", 1, "update_preimage", 2),
        (1, "one", 1, "update_postimage", 2),
        (2, "v2", 0, "delete", 3),
        (3, "v3", 1, "update_preimage", 4),
        (3, "three", 1, "update_postimage", 4),
        (4, "v4", 0, "delete", 4),
        (20, "new", 0, "insert", 4),
        (1, "one", 1, "delete", 5),
        (3, "three", 1, "delete", 5),
        (5, "v5", 1, "delete", 5),
        *[(i, n, 0, "delete", 6) for i, n in [(0, "v0"), (10, "x"), (20, "new")]],
        (7, "seven", 1, "insert", 6),
    ]
    mine = _changes(spark, table, 0, 6)
    assert sorted(r[:5] for r in mine) == sorted(expected)
    assert mine == _load_cdf(table, 0, 6)  # timestamps included
    assert _changes(spark, table, 2, 4) == _load_cdf(table, 2, 4)
    assert _changes(spark, table, 4) == _load_cdf(table, 4, 6)  # no endingVersion: the latest
    frame = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(str(table))
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields][-3:] == [
        ("_change_type", "string"),
        ("_commit_version", "bigint"),
        ("_commit_timestamp", "timestamp"),
    ]


def test_the_session_default_turns_the_feed_on_and_timestamps_bound_the_range(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    spark.conf.set(DEFAULT_CDF, "true")
    try:
        spark.range(3).write.format("delta").save(str(table))
    finally:
        spark.conf.unset(DEFAULT_CDF)
    DeltaTable.forPath(spark, str(table)).update("id = 0", {"id": "100"})
    DeltaTable.forPath(spark, str(table)).delete("id = 1")
    assert RsTable(str(table)).metadata().configuration == CDF
    history = {r.version: r.timestamp for r in DeltaTable.forPath(spark, str(table)).history().collect()}
    by_time = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingTimestamp", history[1].isoformat())
        .option("endingTimestamp", history[2].isoformat())
        .load(str(table))
    )
    assert sorted(tuple(r) for r in by_time.collect()) == _changes(spark, table, 1, 2) == _load_cdf(table, 1, 2)
    assert sorted((r[0], r[1]) for r in by_time.collect()) == [
        (0, "update_preimage"),
        (1, "delete"),
        (100, "update_postimage"),
    ]


def test_tables_delta_rs_changed_read_as_delta_rs_reads_them(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array(range(8), pa.int64()), "v": [f"a{i}" for i in range(8)]})
    write_deltalake(str(table), data, configuration=CDF)  # 0
    rs = RsTable(str(table))
    rs.update(updates={"v": "'upd'"}, predicate="id < 2")  # 1
    rs.delete("id = 5")  # 2
    source = pa.table({"id": pa.array([3, 30], pa.int64()), "v": ["m3", "m30"]})
    (
        rs.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )  # 3
    write_deltalake(str(table), pa.table({"id": pa.array([40], pa.int64()), "v": ["n"]}), mode="append")  # 4
    assert _changes(spark, table, 0, 4) == _load_cdf(table, 0, 4)
    assert ("m3", "update_postimage", 3) in {(r[1], r[2], r[3]) for r in _changes(spark, table, 3, 3)}


def test_a_range_before_the_feed_was_on_is_refused_even_at_a_version_without_metadata(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    spark.range(3).write.format("delta").save(str(table))  # 0
    spark.range(3, 5).write.format("delta").mode("append").save(str(table))  # 1: no metaData action
    RsTable(str(table)).alter.set_table_properties(CDF)  # 2
    DeltaTable.forPath(spark, str(table)).delete("id = 4")  # 3
    with pytest.raises(AnalysisException, match=r"(?s)DELTA_MISSING_CHANGE_DATA.*\[1 , 3\].*version \[1\]"):
        _changes(spark, table, 1, 3)
    assert _changes(spark, table, 2, 3) == _load_cdf(table, 2, 3)
    assert [r[:2] for r in _changes(spark, table, 2, 3)] == [(4, "delete")]
    RsTable(str(table)).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})  # 4
    with pytest.raises(AnalysisException, match=r"(?s)DELTA_MISSING_CHANGE_DATA.*\[2 , 4\].*version \[4\]"):
        _changes(spark, table, 2, 4)


def test_bad_ranges_fail_with_deltas_errors_naming_the_option_and_versions(spark: SparkSession, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    spark.range(3).write.format("delta").save(str(plain))
    with pytest.raises(AnalysisException, match=r"(?s)'startingVersion'.*DELTA_MISSING_CHANGE_DATA.*plain"):
        _changes(spark, plain, 0)
    table = tmp_path / "t"
    spark.range(3).write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(table))
    spark.range(3, 6).write.format("delta").mode("append").save(str(table))
    with pytest.raises(AnalysisException, match=r"(?s)'endingVersion' = 0.*DELTA_INVALID_CDC_RANGE.*start 1 to end 0"):
        _changes(spark, table, 1, 0)
    with pytest.raises(
        AnalysisException, match=r"(?s)DELTA_CDC_START_VERSION_AFTER_LATEST.*Start version 5 .*latest table version 1"
    ):
        _changes(spark, table, 5)
    with pytest.raises(AnalysisException, match=r"DELTA_NO_START_FOR_CDC_READ"):
        spark.read.format("delta").option("readChangeFeed", "true").load(str(table)).collect()
    with pytest.raises(AnalysisException, match=r"(?s)'startingTimestamp'.*DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        spark.read.format("delta").option("readChangeFeed", "true").option(
            "startingTimestamp", "2999-01-01 00:00:00"
        ).load(str(table)).collect()
    with pytest.raises(AnalysisException, match=r"(?s)'endingTimestamp'.*DELTA_TIMESTAMP_EARLIER_THAN_COMMIT"):
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).option(
            "endingTimestamp", "2000-01-01"
        ).load(str(table)).collect()
    assert _changes(spark, table, 1, 99) == _load_cdf(table, 1, 1)  # an end beyond the latest: the latest


def test_changes_whose_files_were_vacuumed_are_refused_naming_the_file_and_table_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    spark.range(4).write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(table))  # 0
    DeltaTable.forPath(spark, str(table)).delete()  # 1: removes the file, no rewrite
    RsTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(AnalysisException, match=r"(?s)DELTA_FILE_NOT_FOUND_DETAILED.*table version 1 .*VACUUM"):
        _changes(spark, table, 1)


def _multiset_diff(a: list[Row], b: list[Row]) -> list[Row]:
    left = list(a)
    for row in b:
        if row in left:
            left.remove(row)
    return left


def test_deletion_vector_deletes_of_a_column_mapped_table_read_as_the_rows_each_commit_deleted(
    spark: SparkSession, tmp_path: Path, fixtures_dir: Path
) -> None:
    """Delta's own fixture (DELETEs by deletion vector, column mapping by name, partitioned), with the change data
    feed turned on in its first commit: each commit's rows are exactly the rows its table version lost."""
    table = tmp_path / "t"
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-with-columnmapping", table)
    first = table / "_delta_log" / f"{0:020d}.json"
    on = '"configuration":{"delta.enableChangeDataFeed":"true",'
    first.write_text(first.read_text().replace('"configuration":{', on))
    log = table / "_delta_log"
    for checkpoint in [*log.glob("*.checkpoint.parquet"), log / "_last_checkpoint"]:
        checkpoint.unlink()  # its metaData predates the edit: replay the JSON commits

    def rows(table_version: int) -> list[Row]:
        frame = spark.read.format("delta").option("versionAsOf", table_version).load(str(table))
        return sorted(tuple(r) for r in frame.collect())

    expected: list[Row] = [(*r, "insert", 0) for r in rows(0)]
    for table_version in range(1, 16):
        before, after = rows(table_version - 1), rows(table_version)
        expected += [(*r, "delete", table_version) for r in _multiset_diff(before, after)]
        expected += [(*r, "insert", table_version) for r in _multiset_diff(after, before)]
    got = [r[:-1] for r in _changes(spark, table, 0, 15)]
    assert got == sorted(expected)
    assert sum(1 for r in got if r[-2] == "delete") == len(rows(0)) - len(rows(15)) == 15  # one per DELETE


def test_table_changes_in_sql_by_name_and_by_path(spark: SparkSession, tmp_path: Path) -> None:
    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "warehouse"))
    try:
        spark.sql(
            "CREATE TABLE cdf_t (id BIGINT, v STRING) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )  # 0
        spark.sql("INSERT INTO cdf_t VALUES (1, 'a'), (2, 'b')")  # 1
        spark.sql("UPDATE cdf_t SET v = 'c' WHERE id = 2")  # 2
        spark.sql("DELETE FROM cdf_t WHERE id = 1")  # 3
        rows = spark.sql(
            "SELECT id, v, _change_type, _commit_version FROM table_changes('cdf_t', 2, 3) ORDER BY _commit_version, v"
        ).collect()
        assert [tuple(r) for r in rows] == [
            (2, "b", "update_preimage", 2),
            (2, "c", "update_postimage", 2),
            (1, "a", "delete", 3),
        ]
        location = DeltaTable.forName(spark, "cdf_t").detail().collect()[0].location
        path = location.removeprefix("file:")
        by_path = spark.sql(f"SELECT * FROM table_changes_by_path('{path}', 1) WHERE _change_type = 'insert'")
        assert sorted(tuple(r)[:3] for r in by_path.collect()) == [(1, "a", "insert"), (2, "b", "insert")]
        assert sorted(tuple(r) for r in by_path.collect()) == [
            r for r in _load_cdf(Path(path), 1, 3) if r[2] == "insert"
        ]
        with pytest.raises(SqlError, match=r"table_changes: expected table_changes\('<table>'"):
            spark.sql("SELECT * FROM table_changes(cdf_t, 1)")
    finally:
        spark.sql("DROP TABLE IF EXISTS cdf_t")
        spark.conf.unset(WAREHOUSE_CONF)


def test_the_docs_silver_to_gold_example_applies_silvers_changes_to_gold(spark: SparkSession, tmp_path: Path) -> None:
    silver, gold = tmp_path / "silver", tmp_path / "gold"
    schema = "order_id long, amount long, status string"
    rows = [(1, 10, "new"), (2, 20, "new"), (3, 30, "new")]
    spark.createDataFrame(rows, schema).write.format("delta").option("delta.enableChangeDataFeed", "true").save(
        str(silver)
    )  # 0
    spark.createDataFrame(rows, schema).write.format("delta").save(str(gold))
    DeltaTable.forPath(spark, str(silver)).update("order_id = 1", {"status": "'paid'"})  # 1
    DeltaTable.forPath(spark, str(silver)).delete("order_id = 2")  # 2
    spark.createDataFrame([(4, 40, "new")], schema).write.format("delta").mode("append").save(str(silver))  # 3
    DeltaTable.forPath(spark, str(silver)).update("order_id = 4", {"amount": "41"})  # 4

    last = 0  # as in docs/change-data-feed.md
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", last + 1)
        .load(str(silver))
        .where("_change_type != 'update_preimage'")
    )
    latest = changes.selectExpr("*", "row_number() OVER (PARTITION BY order_id ORDER BY _commit_version DESC) AS n")
    latest = latest.where("n = 1").drop("n")
    (
        DeltaTable.forPath(spark, str(gold))
        .alias("g")
        .merge(latest.alias("c"), "g.order_id = c.order_id")
        .whenMatchedDelete("c._change_type = 'delete'")
        .whenMatchedUpdate(set={"amount": "c.amount", "status": "c.status"})
        .whenNotMatchedInsert(
            "c._change_type != 'delete'", values={"order_id": "c.order_id", "amount": "c.amount", "status": "c.status"}
        )
        .execute()
    )
    read = spark.read.format("delta")
    assert sorted(tuple(r) for r in read.load(str(gold)).collect()) == sorted(
        tuple(r) for r in read.load(str(silver)).collect()
    )
    assert sorted(tuple(r) for r in read.load(str(gold)).collect()) == [(1, 10, "paid"), (3, 30, "new"), (4, 41, "new")]


def test_the_gold_stages_merge_writes_the_change_data_once_per_batch(spark: SparkSession, tmp_path: Path) -> None:
    gold = tmp_path / "gold"
    schema = "k long, ts long, v string"
    spark.createDataFrame([(1, 1, "a"), (2, 1, "b")], schema).write.format("delta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(str(gold))  # 0
    batch = spark.createDataFrame([(1, 2, "a2"), (3, 1, "c"), (2, 0, "old")], schema)
    for _ in range(2):  # a replayed batch is skipped: no second commit, no second change
        merge_latest(batch, str(gold), keys=["k"], order_by=["ts"], txn=BatchTxn("gold-app", 7))
    assert RsTable(str(gold)).version() == 1
    assert [r[:4] for r in _changes(spark, gold, 1)] == [
        (1, 1, "a", "update_preimage"),
        (1, 2, "a2", "update_postimage"),
        (3, 1, "c", "insert"),
    ]
    assert _changes(spark, gold, 0) == _load_cdf(gold, 0, 1)
