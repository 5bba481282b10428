"""Selective overwrites (Delta's ``replaceWhere`` and dynamic partition overwrite) on real Delta tables: the exact
rows after each, the one ``WRITE`` commit with its parameters, a row outside the predicate refused with nothing
committed, and delta-rs reading the result (:mod:`sparkonce.delta.overwrite`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from sparkonce.errors import OptionError, UnsupportedFeatureError

pytestmark = pytest.mark.spark

SCHEMA = "id long, value string, day int"
Row = tuple[Any, ...]


def _frame(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA).coalesce(1)


def _rows(spark: SparkSession, table: Path) -> list[Row]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).select("id", "value", "day").collect())


def _rs_rows(table: Path) -> list[Row]:
    rows = pa.table(RsTable(str(table)).to_pyarrow_table(columns=["id", "value", "day"])).to_pylist()
    return sorted((r["id"], r["value"], r["day"]) for r in rows)


def _actions(table: Path, table_version: int) -> list[dict[str, Any]]:
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _commit_info(table: Path, table_version: int) -> dict[str, Any]:
    return next(a["commitInfo"] for a in _actions(table, table_version) if "commitInfo" in a)


def _kinds(table: Path, table_version: int, kind: str) -> list[dict[str, Any]]:
    return [a[kind] for a in _actions(table, table_version) if kind in a]


def _data_files(table: Path) -> set[str]:
    return {str(p.relative_to(table)) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.fixture
def conf(spark: SparkSession) -> Iterator[dict[str, str]]:
    """Session settings a test sets, unset afterwards."""
    given: dict[str, str] = {}
    yield given
    for key in given:
        spark.conf.unset(key)


def _set(spark: SparkSession, conf: dict[str, str], key: str, value: str) -> None:
    conf[key] = value
    spark.conf.set(key, value)


INITIAL = [(1, "a", 1), (2, "b", 1), (3, "c", 2), (4, "d", 2), (5, "e", 3)]


@pytest.fixture
def by_day(spark: SparkSession, tmp_path: Path) -> Path:
    """A table partitioned by ``day`` (days 1..3), one file per day, at table version 0."""
    table = tmp_path / "by_day"
    _frame(spark, INITIAL).write.format("delta").partitionBy("day").save(str(table))
    return table


@pytest.fixture
def flat(spark: SparkSession, tmp_path: Path) -> Path:
    """The same rows, not partitioned, in two files (ids 1-2 and 3-5), at table version 1."""
    table = tmp_path / "flat"
    _frame(spark, INITIAL[:2]).write.format("delta").save(str(table))
    _frame(spark, INITIAL[2:]).write.format("delta").mode("append").save(str(table))
    return table


def test_replace_where_on_a_partition_column_removes_that_partitions_files_in_one_write_commit(
    spark: SparkSession, by_day: Path
) -> None:
    new = _frame(spark, [(30, "x", 2), (31, "y", 2)])
    new.write.format("delta").mode("overwrite").option("replaceWhere", "day = 2").save(str(by_day))

    expected = [(1, "a", 1), (2, "b", 1), (5, "e", 3), (30, "x", 2), (31, "y", 2)]
    assert _rows(spark, by_day) == expected
    assert _rs_rows(by_day) == expected
    assert RsTable(str(by_day)).version() == 1
    removed = _kinds(by_day, 1, "remove")
    assert [r["partitionValues"] for r in removed] == [{"day": "2"}]  # by partition values: no file rewritten
    assert [a["partitionValues"] for a in _kinds(by_day, 1, "add")] == [{"day": "2"}]
    info = _commit_info(by_day, 1)
    assert info["operation"] == "WRITE"
    # partitionBy: the columns this write gave (none), as Delta records them
    assert info["operationParameters"] == {"mode": "Overwrite", "partitionBy": "[]", "predicate": "day = 2"}
    assert info["isBlindAppend"] is False and info["readVersion"] == 0
    metrics = info["operationMetrics"]
    assert (metrics["numRemovedFiles"], metrics["numDeletedRows"], metrics["numCopiedRows"]) == ("1", "2", "0")
    assert (metrics["numFiles"], metrics["numOutputRows"]) == ("1", "2")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{by_day}`").where("version = 1").collect()[0]
    assert history.operation == "WRITE" and history.operationParameters["predicate"] == "day = 2"
    rs_history = RsTable(str(by_day)).history(1)[0]
    assert rs_history["operation"] == "WRITE" and rs_history["operationParameters"]["predicate"] == "day = 2"


def test_replace_where_on_data_columns_rewrites_only_the_files_holding_matching_rows(
    spark: SparkSession, flat: Path
) -> None:
    new = _frame(spark, [(4, "D", 9), (6, "F", 9)])
    new.write.format("delta").mode("overwrite").option("replaceWhere", "id >= 4").save(str(flat))

    expected = [(1, "a", 1), (2, "b", 1), (3, "c", 2), (4, "D", 9), (6, "F", 9)]
    assert _rows(spark, flat) == expected
    assert _rs_rows(flat) == expected
    first_file = {a["path"] for a in _kinds(flat, 0, "add")}
    assert {r["path"] for r in _kinds(flat, 2, "remove")} == {a["path"] for a in _kinds(flat, 1, "add")}
    assert first_file.isdisjoint(r["path"] for r in _kinds(flat, 2, "remove"))  # ids 1-2: not read, not touched
    info = _commit_info(flat, 2)
    assert info["operationParameters"] == {"mode": "Overwrite", "partitionBy": "[]", "predicate": "id >= 4"}
    metrics = info["operationMetrics"]
    assert (metrics["numDeletedRows"], metrics["numCopiedRows"], metrics["numRemovedFiles"]) == ("2", "1", "1")
    assert (metrics["numFiles"], metrics["numOutputRows"]) == ("2", "3")  # the copy of id 3, the new rows


def test_a_row_outside_the_predicate_is_refused_and_nothing_is_committed(spark: SparkSession, flat: Path) -> None:
    before = _data_files(flat)
    new = _frame(spark, [(4, "D", 9), (2, "B", 9)])
    with pytest.raises(AnalysisException, match=r"DELTA_REPLACE_WHERE_MISMATCH") as refused:
        new.write.format("delta").mode("overwrite").option("replaceWhere", "id >= 4").save(str(flat))
    message = str(refused.value)
    assert "Written data does not conform to partial table overwrite condition or constraint 'id >= 4'" in message
    assert " - id : 2" in message
    assert RsTable(str(flat)).version() == 1
    assert _rows(spark, flat) == sorted(INITIAL)
    assert _data_files(flat) == before  # the rewrite of ids 3-5 was deleted, the failed task deleted its own


def test_the_row_check_can_be_switched_off_as_in_delta(spark: SparkSession, flat: Path, conf: dict[str, str]) -> None:
    _set(spark, conf, "spark.databricks.delta.replaceWhere.constraintCheck.enabled", "false")
    new = _frame(spark, [(4, "D", 9), (2, "B", 9)])
    new.write.format("delta").mode("overwrite").option("replaceWhere", "id >= 4").save(str(flat))
    assert _rows(spark, flat) == [(1, "a", 1), (2, "B", 9), (2, "b", 1), (3, "c", 2), (4, "D", 9)]


def test_bad_predicates_and_option_combinations_fail_naming_the_option_before_any_data_moves(
    spark: SparkSession, by_day: Path, conf: dict[str, str]
) -> None:
    before = _data_files(by_day)
    new = _frame(spark, [(30, "x", 2)])

    def overwrite(**options: str) -> None:
        new.write.format("delta").mode("overwrite").options(**options).save(str(by_day))

    with pytest.raises(AnalysisException, match=r"DELTA_FAILED_RECOGNIZE_PREDICATE.*option replaceWhere"):
        overwrite(replaceWhere="nope = 2")
    with pytest.raises(AnalysisException, match=r"DELTA_FAILED_RECOGNIZE_PREDICATE.*option replaceWhere"):
        overwrite(replaceWhere="day = = 2")
    with pytest.raises(OptionError, match="replaceWhere"):
        overwrite(replaceWhere="  ")
    with pytest.raises(AnalysisException, match="DELTA_REPLACE_WHERE_WITH_DYNAMIC_PARTITION_OVERWRITE"):
        overwrite(replaceWhere="day = 2", partitionOverwriteMode="dynamic")
    with pytest.raises(AnalysisException, match="DELTA_OVERWRITE_SCHEMA_WITH_DYNAMIC_PARTITION_OVERWRITE"):
        overwrite(partitionOverwriteMode="dynamic", overwriteSchema="true")
    with pytest.raises(OptionError, match="partitionOverwriteMode"):
        overwrite(partitionOverwriteMode="sometimes")
    _set(spark, conf, "spark.databricks.delta.replaceWhere.dataColumns.enabled", "false")
    with pytest.raises(AnalysisException, match=r"DELTA_NON_PARTITION_COLUMN_REFERENCE.*'id'.*\[day\]"):
        overwrite(replaceWhere="day = 2 AND id > 3")
    _set(spark, conf, "spark.databricks.delta.dynamicPartitionOverwrite.enabled", "false")
    with pytest.raises(UnsupportedFeatureError, match="DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED"):
        overwrite(partitionOverwriteMode="dynamic")
    assert RsTable(str(by_day)).version() == 0
    assert _data_files(by_day) == before


@pytest.mark.parametrize("how", ["option", "session"])
def test_dynamic_partition_overwrite_replaces_the_partitions_written_to(
    spark: SparkSession, by_day: Path, conf: dict[str, str], how: str
) -> None:
    new = _frame(spark, [(30, "x", 2), (40, "y", 4)])
    writer = new.write.format("delta").mode("overwrite")
    if how == "option":
        writer = writer.option("partitionOverwriteMode", "dynamic")
    else:
        _set(spark, conf, "spark.sql.sources.partitionOverwriteMode", "dynamic")
    writer.save(str(by_day))

    expected = [(1, "a", 1), (2, "b", 1), (5, "e", 3), (30, "x", 2), (40, "y", 4)]
    assert _rows(spark, by_day) == expected
    assert _rs_rows(by_day) == expected
    assert [r["partitionValues"] for r in _kinds(by_day, 1, "remove")] == [{"day": "2"}]
    info = _commit_info(by_day, 1)
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {
        "mode": "Overwrite",
        "partitionBy": "[]",
        "isDynamicPartitionOverwrite": "true",
    }
    metrics = info["operationMetrics"]
    assert (metrics["numFiles"], metrics["numOutputRows"], metrics["numRemovedFiles"]) == ("2", "2", "1")


def test_dynamic_partition_overwrite_of_an_unpartitioned_table_overwrites_it(spark: SparkSession, flat: Path) -> None:
    new = _frame(spark, [(9, "z", 1)])
    new.write.format("delta").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(str(flat))
    assert _rows(spark, flat) == [(9, "z", 1)]
    assert len(_kinds(flat, 2, "remove")) == 2
    assert _commit_info(flat, 2)["operationParameters"]["isDynamicPartitionOverwrite"] == "true"


def test_replace_where_creates_a_missing_table_with_every_row_and_saveastable_takes_it(
    spark: SparkSession, tmp_path: Path, sql: Any
) -> None:
    table = tmp_path / "new"
    rows = [(1, "a", 1), (2, "b", 2)]
    _frame(spark, rows).write.format("delta").mode("overwrite").option("replaceWhere", "day = 1").save(str(table))
    assert _rows(spark, table) == rows  # Delta: no table to replace in, no check
    assert _commit_info(table, 0)["operationParameters"]["predicate"] == "day = 1"

    _frame(spark, rows).write.format("delta").saveAsTable("rw_events")
    replacement = _frame(spark, [(3, "c", 2)])
    replacement.write.format("delta").mode("overwrite").option("replaceWhere", "day = 2").saveAsTable("rw_events")
    assert sorted(tuple(r) for r in spark.table("rw_events").select("id", "value", "day").collect()) == [
        (1, "a", 1),
        (3, "c", 2),
    ]


@pytest.mark.parametrize("predicate", ["day = 2", "id >= 4"])
def test_replace_where_on_a_change_data_feed_table_records_the_deletes_and_inserts(
    spark: SparkSession, tmp_path: Path, predicate: str
) -> None:
    table = tmp_path / "cdf"
    writer = _frame(spark, INITIAL).write.format("delta").option("delta.enableChangeDataFeed", "true")
    writer.partitionBy("day").save(str(table))
    _frame(spark, [(4, "D", 2)]).write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(
        str(table)
    )
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(str(table))
        .select("id", "value", "day", "_change_type")
        .collect()
    )
    deleted = [(3, "c", 2), (4, "d", 2)] if predicate == "day = 2" else [(4, "d", 2), (5, "e", 3)]
    expected = sorted([(*r, "delete") for r in deleted] + [(4, "D", 2, "insert")])
    assert sorted(tuple(r) for r in changes) == expected
    rs = pa.table(RsTable(str(table)).load_cdf(starting_version=1, ending_version=1).read_all()).to_pylist()
    assert sorted((r["id"], r["value"], r["day"], r["_change_type"]) for r in rs) == expected
    cdc = _kinds(table, 1, "cdc")
    assert bool(cdc) is (predicate == "id >= 4")  # whole files removed: the removes are the deletes, as in Delta


def _table_rows(spark: SparkSession, name: str) -> list[Row]:
    return sorted(tuple(r) for r in spark.table(name).select("id", "value", "day").collect())


def _history(spark: SparkSession, name: str) -> Any:
    return spark.sql(f"DESCRIBE HISTORY {name}").orderBy("version").collect()[-1]


def test_writeto_overwrite_by_condition_and_overwrite_partitions(spark: SparkSession, sql: Any) -> None:
    import pyspark.sql.functions as F

    _frame(spark, INITIAL).writeTo("rw_v2").using("delta").partitionedBy("day").create()
    _frame(spark, [(30, "x", 2)]).writeTo("rw_v2").overwrite(F.col("day") == 2)
    assert _table_rows(spark, "rw_v2") == [(1, "a", 1), (2, "b", 1), (5, "e", 3), (30, "x", 2)]
    last = _history(spark, "rw_v2")
    assert (last.version, last.operation, last.operationParameters["predicate"]) == (1, "WRITE", "(day = 2)")

    _frame(spark, [(11, "k", 1)]).writeTo("rw_v2").overwrite(F.col("value") == "k")  # a string literal
    assert _table_rows(spark, "rw_v2") == [(1, "a", 1), (2, "b", 1), (5, "e", 3), (11, "k", 1), (30, "x", 2)]
    with pytest.raises(AnalysisException, match="DELTA_REPLACE_WHERE_MISMATCH"):
        _frame(spark, [(31, "y", 3)]).writeTo("rw_v2").overwrite(F.col("day") == 2)
    with pytest.raises(AnalysisException, match="DELTA_REPLACE_WHERE_IN_OVERWRITE"):
        _frame(spark, [(31, "y", 2)]).writeTo("rw_v2").option("replaceWhere", "day = 2").overwrite(F.col("day") == 2)
    assert _history(spark, "rw_v2").version == 2

    _frame(spark, [(40, "z", 3), (41, "w", 4)]).writeTo("rw_v2").overwritePartitions()
    expected = [(1, "a", 1), (2, "b", 1), (11, "k", 1), (30, "x", 2), (40, "z", 3), (41, "w", 4)]
    assert _table_rows(spark, "rw_v2") == expected
    last = _history(spark, "rw_v2")
    assert last.operation == "WRITE" and last.operationParameters["isDynamicPartitionOverwrite"] == "true"
    location = Path(spark.sql("DESCRIBE DETAIL rw_v2").collect()[0].location.removeprefix("file:"))
    assert _rs_rows(location) == expected

    _frame(spark, [(50, "v", 5)]).writeTo("rw_v2").overwrite(F.lit(True))  # Spark's truncate: every row
    assert _table_rows(spark, "rw_v2") == [(50, "v", 5)]


def test_sql_insert_replace_where_and_insert_overwrite_partition(
    spark: SparkSession, sql: Any, conf: dict[str, str]
) -> None:
    sql("CREATE TABLE rw_sql (id BIGINT, value STRING, day INT) USING delta PARTITIONED BY (day)")
    sql("INSERT INTO rw_sql VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 2), (5, 'e', 3)")
    sql("INSERT INTO rw_sql REPLACE WHERE day = 1 SELECT 10, 'j', 1")
    assert _table_rows(spark, "rw_sql") == [(3, "c", 2), (5, "e", 3), (10, "j", 1)]
    last = _history(spark, "rw_sql")
    assert last.operation == "WRITE" and last.operationParameters["predicate"] == "day = 1"
    with pytest.raises(AnalysisException, match="DELTA_REPLACE_WHERE_MISMATCH"):
        sql("INSERT INTO rw_sql REPLACE WHERE day = 1 VALUES (11, 'k', 2)")

    sql("INSERT OVERWRITE rw_sql PARTITION (day = 2) SELECT 20, 't'")
    assert _table_rows(spark, "rw_sql") == [(5, "e", 3), (10, "j", 1), (20, "t", 2)]
    assert _history(spark, "rw_sql").operationParameters["predicate"] == "`day` = 2"
    sql("INSERT INTO rw_sql PARTITION (day = 4) (value, id) VALUES ('f', 40)")
    assert _table_rows(spark, "rw_sql") == [(5, "e", 3), (10, "j", 1), (20, "t", 2), (40, "f", 4)]
    with pytest.raises(Exception, match=r"PARTITION: \['value'\] are not partition columns"):
        sql("INSERT OVERWRITE rw_sql PARTITION (value = 'x') SELECT 1, 1")

    _set(spark, conf, "spark.sql.sources.partitionOverwriteMode", "dynamic")
    sql("INSERT OVERWRITE rw_sql SELECT 50, 'g', 3")
    expected = [(10, "j", 1), (20, "t", 2), (40, "f", 4), (50, "g", 3)]
    assert _table_rows(spark, "rw_sql") == expected
    assert _history(spark, "rw_sql").operationParameters["isDynamicPartitionOverwrite"] == "true"
    location = Path(sql("DESCRIBE DETAIL rw_sql").collect()[0].location.removeprefix("file:"))
    assert _rs_rows(location) == expected


def _merge_insert(spark: SparkSession, table: Path, rows: list[Row]) -> None:
    """A MERGE inserting ``rows``: a winner that is not a blind append (``isBlindAppend`` false)."""
    from sparkonce.delta.tables import DeltaTable

    source = spark.createDataFrame(rows, SCHEMA)
    DeltaTable.forPath(spark, str(table)).alias("t").merge(
        source.alias("s"), "t.id = s.id"
    ).whenNotMatchedInsertAll().execute()


def _after_the_read(monkeypatch: pytest.MonkeyPatch, winner: Any) -> list[int]:
    """Run ``winner`` once, after the overwrite read the table (its rows matching the predicate deleted) and before
    it commits: the race forced, not timed."""
    from sparkonce.delta import overwrite

    original = overwrite.rewrite_rows
    ran: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not ran:
            ran.append(1)
            winner()
        return result

    monkeypatch.setattr(overwrite, "rewrite_rows", racing)
    return ran


def test_replace_where_of_an_empty_partition_loses_to_a_merge_adding_rows_there(
    spark: SparkSession, by_day: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delta's read predicate (ConflictChecker.checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn): the
    overwrite read partition ``day = 4`` although no file was there; a concurrent MERGE inserting into it
    conflicts. Under WriteSerializable a blind append there does not, nor a MERGE outside the predicate's
    partition conjuncts (``day = 4 AND id >= 40`` read partition 4 only)."""
    from sparkonce.errors import ConcurrentAppendError

    ran = _after_the_read(monkeypatch, lambda: _merge_insert(spark, by_day, [(44, "m", 4)]))
    with pytest.raises(ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\].*\(MERGE\).*'day': '4'"):
        _frame(spark, [(40, "x", 4)]).write.format("delta").mode("overwrite").option("replaceWhere", "day = 4").save(
            str(by_day)
        )
    assert ran == [1] and RsTable(str(by_day)).version() == 1  # the MERGE's commit: the overwrite made none
    assert _rs_rows(by_day) == sorted([*INITIAL, (44, "m", 4)])

    monkeypatch.undo()
    _after_the_read(monkeypatch, lambda: _merge_insert(spark, by_day, [(55, "n", 5)]))
    _frame(spark, [(41, "y", 4)]).write.format("delta").mode("overwrite").option(
        "replaceWhere", "day = 4 AND id >= 40"
    ).save(str(by_day))
    assert _rs_rows(by_day) == sorted([*INITIAL, (41, "y", 4), (55, "n", 5)])

    monkeypatch.undo()
    appended = _frame(spark, [(66, "p", 6)])
    _after_the_read(monkeypatch, lambda: appended.write.format("delta").mode("append").save(str(by_day)))
    _frame(spark, [(60, "z", 6)]).write.format("delta").mode("overwrite").option("replaceWhere", "day = 6").save(
        str(by_day)
    )
    assert RsTable(str(by_day)).version() == 5
    assert _rs_rows(by_day) == sorted([*INITIAL, (41, "y", 4), (55, "n", 5), (60, "z", 6), (66, "p", 6)])


def test_replace_where_on_a_generated_column_the_data_leaves_out(spark: SparkSession, tmp_path: Path) -> None:
    """Delta computes the generated column first, then checks the row against the predicate."""
    import datetime as dt

    from sparkonce.delta.tables import DeltaTable

    table = tmp_path / "generated"
    (
        DeltaTable.create(spark)
        .location(str(table))
        .addColumn("id", "BIGINT")
        .addColumn("ts", "TIMESTAMP_NTZ")
        .addColumn("day", "DATE", generatedAlwaysAs="CAST(ts AS DATE)")
        .partitionedBy("day")
        .execute()
    )
    schema = "id long, ts timestamp_ntz"
    noon = [dt.datetime(2024, 1, d, 12) for d in (1, 2, 3)]
    spark.createDataFrame([(1, noon[0]), (2, noon[1]), (3, noon[2])], schema).write.format("delta").mode("append").save(
        str(table)
    )
    spark.createDataFrame([(20, noon[1]), (21, noon[1])], schema).write.format("delta").mode("overwrite").option(
        "replaceWhere", "day = '2024-01-02'"
    ).save(str(table))
    rows = pa.table(RsTable(str(table)).to_pyarrow_table(columns=["id", "day"])).to_pylist()
    assert sorted((r["id"], r["day"].day) for r in rows) == [(1, 1), (3, 3), (20, 2), (21, 2)]
    assert _kinds(table, 2, "remove")[0]["partitionValues"] == {"day": "2024-01-02"}
    with pytest.raises(AnalysisException, match=r"(?s)DELTA_REPLACE_WHERE_MISMATCH.* - day : 2024-01-03"):
        spark.createDataFrame([(30, noon[2])], schema).write.format("delta").mode("overwrite").option(
            "replaceWhere", "day = '2024-01-02'"
        ).save(str(table))
    assert RsTable(str(table)).version() == 2


_CONNECT_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
import sparkonce
table = sys.argv[1]
spark = SparkSession.builder.remote("local[1]").getOrCreate()
sparkonce.register(spark)
spark.createDataFrame([(1, "a", 1), (2, "b", 2)], "id long, value string, day int").write.format("delta").mode(
    "append"
).option("partitionBy", "day").save(table)
spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
try:
    spark.createDataFrame([(3, "c", 1)], "id long, value string, day int").write.format("delta").mode(
        "overwrite"
    ).save(table)
    error = None
except Exception as err:
    error = str(err)
rows = sorted(tuple(r) for r in spark.read.format("delta").load(table).select("id", "day").collect())
print(json.dumps({"error": error, "rows": rows}))
spark.stop()
"""


def test_on_spark_connect_the_sessions_dynamic_mode_refuses_the_overwrite_not_replaces_the_table(
    tmp_path: Path,
) -> None:
    """Spark Connect: the data source cannot read the session's settings, and an overwrite in the session's dynamic
    mode replaced the whole table; the session's mode now reaches the write as its option, and the overwrite is
    refused naming it (a selective overwrite needs the classic driver), nothing written."""
    import os
    import subprocess
    import sys

    table = str(tmp_path / "connect")
    env = {**os.environ, "SPARKONCE_JVM": "quick-start", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", _CONNECT_DRIVER, table],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "option partitionOverwriteMode='dynamic' on an overwrite of" in seen["error"]
    assert seen["rows"] == [[1, 1], [2, 2]]
    assert _rs_rows(tmp_path / "connect") == [(1, "a", 1), (2, "b", 2)]
