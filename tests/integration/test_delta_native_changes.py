"""Issue 40: batch reads of the change data feed through Spark's Parquet scan (``sparkonce.delta.read.native_changes``)
give exactly the rows the Python data source gives, on Delta-JVM-written fixtures (change data files, deletion
vectors, in-commit timestamps), on sparkonce's own tables (partitioned, column-mapped, every kind of commit), and on a
table delta-spark writes live with deletion vectors, whose feed delta-spark reads itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from sparkonce.delta.read.native import NATIVE_READS_CONF, is_native
from sparkonce.delta.tables import DeltaTable
from tests.delta_helpers import comparable
from tests.fixtures_delta_oracle import DeltaOracle, spark_rows, table_ref

pytestmark = pytest.mark.spark

FIXTURES = ["cdf-table", "cdf-table-non-partitioned", "cdf-table-with-cdc-and-dvs", "cdc_ict_table"]


def _rows(frame: DataFrame) -> list[str]:
    return sorted(repr(tuple((k, comparable(v)) for k, v in r.items())) for r in frame.toArrow().to_pylist())


def _both(spark: SparkSession, read: Any) -> tuple[Any, Any]:
    """``read()`` with native reads on, then off: (result, result)."""
    answers = []
    for native in ("true", "false"):
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            answers.append(read())
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    return answers[0], answers[1]


def _feed(spark: SparkSession, table: Path, start: int = 0, **options: str) -> DataFrame:
    reader = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(table))


def _plan(frame: DataFrame) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


@pytest.mark.parametrize("name", FIXTURES)
def test_a_delta_jvm_table_s_feed_reads_alike_on_both_paths(
    spark: SparkSession, tmp_path: Path, fixtures_dir: Path, name: str
) -> None:
    table = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-rs-tables" / name, table)
    native, python = _both(spark, lambda: _rows(_feed(spark, table)))
    assert native == python and len(native) > 0
    plan = _plan(_feed(spark, table))
    assert re.search(r"FileScan parquet \[[^\]]*_change_type#", plan) and "BatchScan" not in plan
    # later ranges too: a range's first commit, a single commit
    for start, end in ((1, 3), (2, 2)):
        native, python = _both(spark, lambda s=start, e=end: _rows(_feed(spark, table, s, endingVersion=str(e))))
        assert native == python


def _every_kind_of_commit(spark: SparkSession, table: Path, mapping: str) -> None:
    """A partitioned table with the feed on: a create, an append, an UPDATE, a DELETE, a MERGE and a replaceWhere
    overwrite (table versions 0 to 5)."""
    first = spark.createDataFrame([(i, f"v{i}", i % 3) for i in range(30)], "id long, v string, p int")
    writer = first.repartition(2).write.format("delta").partitionBy("p").option("delta.enableChangeDataFeed", "true")
    if mapping != "none":
        writer = writer.option("delta.columnMapping.mode", mapping)
    writer.save(str(table))  # 0
    spark.createDataFrame([(i, f"v{i}", i % 3) for i in range(30, 40)], "id long, v string, p int").write.format(
        "delta"
    ).mode("append").save(str(table))  # 1: adds read as inserts
    dt = DeltaTable.forPath(spark, str(table))
    dt.update("id < 5", {"v": "'updated'"})  # 2: cdc files
    dt.delete("id >= 35")  # 3
    source = spark.createDataFrame([(1, "merged", 1), (100, "new", 1)], "id long, v string, p int")
    dt.alias("t").merge(source.alias("s"), "t.id = s.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    spark.createDataFrame([(7, "over", 0)], "id long, v string, p int").write.format("delta").mode("overwrite").option(
        "replaceWhere", "p = 0"
    ).save(str(table))  # 5


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_every_kind_of_commit_reads_alike_on_both_paths_with_pruning(
    spark: SparkSession, tmp_path: Path, mapping: str
) -> None:
    table = tmp_path / "t"
    _every_kind_of_commit(spark, table, mapping)
    native, python = _both(spark, lambda: _rows(_feed(spark, table)))
    assert native == python
    kinds = {r.split("'_change_type', ")[1].split(")")[0] for r in native}
    assert kinds == {"'insert'", "'delete'", "'update_preimage'", "'update_postimage'"}

    # one column and a filter on the table's columns: Spark reads only that column (and _change_type)
    pruned = _feed(spark, table, 1).select("v", "_change_type", "_commit_version").where("v = 'updated'")
    plan = _plan(pruned)
    assert "ReadSchema: struct<" in plan and "id" not in plan.split("ReadSchema: struct<")[1].split(">")[0]
    native, python = _both(
        spark,
        lambda: _rows(_feed(spark, table, 1).select("v", "_change_type", "_commit_version").where("v = 'updated'")),
    )
    assert native == python
    assert sum("update_postimage" in r and "_commit_version', 2)" in r for r in native) == 5  # ids 0..4


@pytest.mark.oracle
def test_a_feed_delta_spark_writes_with_deletion_vectors_reads_as_delta_spark_reads_it(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    table = tmp_path / "theirs"
    ref = table_ref(table)
    for statement in (
        f"CREATE TABLE {ref} (id BIGINT, v STRING) USING delta TBLPROPERTIES "
        "('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true')",
        f"INSERT INTO {ref} SELECT id, concat('v', id) FROM range(0, 40)",
        f"DELETE FROM {ref} WHERE id % 7 = 0",
        f"UPDATE {ref} SET v = 'updated' WHERE id % 5 = 1",
        f"MERGE INTO {ref} t USING (SELECT id, 'merged' AS v FROM range(30, 45)) s ON t.id = s.id "
        "WHEN MATCHED AND t.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        f"DELETE FROM {ref} WHERE id = 2",
    ):
        delta_oracle.sql(statement)
    # delta-spark deletes by deletion vector and writes no change data file for it: the feed of those commits is
    # the rows whose deletion state changed (the native path's per-entry row sets)
    commits = [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted((table / "_delta_log").glob("*.json"))
    ]
    assert any(
        any("deletionVector" in (a.get("add") or {}) for a in actions) and not any("cdc" in a for a in actions)
        for actions in commits
    )
    expected = [_no_timestamp(r) for r in delta_oracle.changes(table, 0)]
    assert {r["_change_type"] for r in expected} == {"insert", "delete", "update_preimage", "update_postimage"}
    native, python = _both(spark, lambda: [_no_timestamp(r) for r in spark_rows(_feed(spark, table))])
    assert native == expected
    assert python == expected


def _no_timestamp(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "_commit_timestamp"}


# -- the change data feed as a stream --------------------------------------------------------------------------------


def _stream_feed(spark: SparkSession, table: Path, **options: str) -> DataFrame:
    reader = spark.readStream.format("delta").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(table))


def _streamed(spark: SparkSession, table: Path, checkpoint: Path, name: str, **options: str) -> dict[str, Any]:
    """The feed of ``table`` streamed into a memory table with availableNow on the path the session's conf picks:
    its rows, the rows of each batch that had some, each batch's source offset, and whether the path was native."""
    frame = _stream_feed(spark, table, **options)
    query = (
        frame.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    offsets = [
        (checkpoint / "offsets" / str(n)).read_text(encoding="utf-8").splitlines()[-1]
        for n in sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    ]
    return {
        "native": is_native(frame),
        "rows": _rows(spark.sql(f"SELECT * FROM {name}")),
        "batches": [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0],
        "offsets": offsets,
        "description": query.recentProgress[-1]["sources"][0]["description"],
    }


def _streamed_both(spark: SparkSession, tmp_path: Path, table: Path, label: str, **options: str) -> tuple[Any, Any]:
    answers = []
    for native in ("true", "false"):
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            name = f"feed_{label}_{native}"
            answers.append(_streamed(spark, table, tmp_path / f"ck-{name}", name, **options))
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    return answers[0], answers[1]


@pytest.mark.parametrize("name", FIXTURES)
def test_a_delta_jvm_table_s_feed_streams_alike_on_both_paths(
    spark: SparkSession, tmp_path: Path, fixtures_dir: Path, name: str
) -> None:
    """The feed of each Delta-JVM-written fixture streamed from table version 0, one file per trigger: the native
    source and the Python source give the same rows, in the same batches, at the same offsets."""
    table = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-rs-tables" / name, table)
    label = re.sub(r"\W", "_", name)
    native, python = _streamed_both(spark, tmp_path, table, label, startingVersion="0", maxFilesPerTrigger="1")
    assert native["native"] is True and python["native"] is False
    assert native["rows"] and native["rows"] == python["rows"]
    assert native["offsets"] == python["offsets"]
    # each batch's count is the rows Spark's scan read (a deletion vector's deleted rows included), so it is only
    # compared where no file has one
    if name != "cdf-table-with-cdc-and-dvs":
        assert native["batches"] == python["batches"]
    assert native["description"].startswith("DeltaSource[")


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_every_kind_of_commit_streams_alike_on_both_paths(spark: SparkSession, tmp_path: Path, mapping: str) -> None:
    """sparkonce's own partitioned table (column-mapped too), every kind of commit: streamed from its snapshot (the
    first table version read as inserts) and from table version 1 with a byte limit, on both paths alike, and a
    checkpoint the native source wrote is resumed by the Python source after more commits."""
    table = tmp_path / "t"
    _every_kind_of_commit(spark, table, mapping)
    native, python = _streamed_both(spark, tmp_path, table, f"snapshot_{mapping}")
    assert native["native"] is True
    assert native["rows"] == python["rows"] and native["offsets"] == python["offsets"]
    assert {r.split("'_change_type', ")[1].split(")")[0] for r in native["rows"]} == {"'insert'"}
    native, python = _streamed_both(
        spark, tmp_path, table, f"changes_{mapping}", startingVersion="1", maxBytesPerTrigger="1"
    )
    assert native["rows"] == python["rows"] and native["offsets"] == python["offsets"]
    assert native["batches"] == python["batches"] and len(native["batches"]) > 3
    kinds = {r.split("'_change_type', ")[1].split(")")[0] for r in native["rows"]}
    assert kinds == {"'insert'", "'delete'", "'update_preimage'", "'update_postimage'"}
    assert native["rows"] == _rows(_feed(spark, table, 1))  # the batch read of the same range

    # a checkpoint the native source wrote, resumed by the Python source after one more commit: each change row
    # once in the Delta sink
    checkpoint, out = tmp_path / "ck-resumed", tmp_path / "out"
    for native_path in (True, False):
        spark.conf.set(NATIVE_READS_CONF, str(native_path).lower())
        try:
            frame = _stream_feed(spark, table, startingVersion="1")
            assert is_native(frame) is native_path
            query = (
                frame.writeStream.format("delta")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start(str(out))
            )
            query.awaitTermination(300)
            assert query.exception() is None
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
        if native_path:
            DeltaTable.forPath(spark, str(table)).update("id = 31", {"v": "'late'"})
    assert _rows(spark.read.format("delta").load(str(out))) == _rows(_feed(spark, table, 1))
    assert len(_rows(_feed(spark, table, 6))) == 2
