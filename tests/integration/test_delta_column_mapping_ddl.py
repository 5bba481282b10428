"""Column mapping made by sparkonce, and the column DDL Delta runs on it (issue 41 item 3).

Each test checks the Delta log as Delta writes it (protocol, ids, physical names, ``maxColumnId``, the operation),
the data files (columns named by physical name, stats and partition values keyed by it), and reads the table back
through sparkonce and through delta-rs (its DataFusion reader, which resolves column mapping).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from sparkonce.errors import SqlError, UnsupportedFeatureError
from sparkonce.sql import DeltaSql

pytestmark = pytest.mark.spark

PHYSICAL = re.compile(r"^col-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DDL = "id long, v string, s struct<p:string, q:int>"


def _entries(table: Path) -> list[list[dict[str, Any]]]:
    log = table / "_delta_log"
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted(log.glob("*.json"))
    ]


def _last(table: Path, kind: str) -> dict[str, Any]:
    """The newest action of ``kind`` in the log (protocol, metaData)."""
    found = [a[kind] for entry in _entries(table) for a in entry if kind in a]
    return dict(found[-1])


def _fields(table: Path) -> list[dict[str, Any]]:
    return list(json.loads(_last(table, "metaData")["schemaString"])["fields"])


def _physical(fields: list[dict[str, Any]]) -> dict[str, str]:
    return {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}


def _operation(table: Path) -> dict[str, Any]:
    return dict(_entries(table)[-1][0]["commitInfo"])


def _adds(table: Path) -> list[dict[str, Any]]:
    return [a["add"] for entry in _entries(table) for a in entry if "add" in a]


def _spark_rows(spark: SparkSession, table: Path) -> list[dict[str, Any]]:
    return sorted(spark.read.format("delta").load(str(table)).toArrow().to_pylist(), key=lambda r: r["id"])


def _delta_rs_rows(table: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, QueryBuilder

    result = QueryBuilder().register("t", DeltaTable(str(table))).execute("select * from t").read_all()
    return sorted(pa.table(result).to_pylist(), key=lambda r: r["id"])


def _check_files(table: Path) -> None:
    """Every data file names its columns by physical name (the table's, or a dropped column's), sits in a random
    two-letter folder, and its add keys stats and partition values by physical name."""
    fields = _fields(table)
    physical = set(_physical(fields).values())
    partitions = {_physical(fields)[c] for c in _last(table, "metaData")["partitionColumns"]}
    for add in _adds(table):
        folder, _ = add["path"].split("/")
        assert len(folder) == 2 and folder.isalnum()
        columns = pq.read_schema(table / add["path"]).names
        assert columns and all(PHYSICAL.match(c) or c in physical for c in columns), columns
        assert set(add["partitionValues"]) == partitions
        stats = json.loads(add["stats"])
        assert set(stats["nullCount"]) <= set(columns)


def _new_table(spark: SparkSession, sql: DeltaSql, table: Path, surface: str, mode: str) -> None:
    rows = [(1, "a", ("x", 10)), (2, "b", ("y", 20))]
    if surface == "sql":
        sql(
            f"CREATE TABLE delta.`{table}` (id BIGINT, v STRING, s STRUCT<p: STRING, q: INT>) USING delta "
            f"PARTITIONED BY (v) TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')"
        )
        spark.createDataFrame(rows, DDL).write.format("delta").mode("append").save(str(table))
    elif surface == "builder":
        from sparkonce.delta.tables import DeltaTable

        DeltaTable.create(spark).location(str(table)).addColumns(spark.createDataFrame([], DDL).schema).partitionedBy(
            "v"
        ).property("delta.columnMapping.mode", mode).execute()
        spark.createDataFrame(rows, DDL).write.format("delta").mode("append").save(str(table))
    elif surface == "option":
        writer = spark.createDataFrame(rows, DDL).write.format("delta").partitionBy("v")
        writer.option("delta.columnMapping.mode", mode).save(str(table))
    else:
        key = "spark.databricks.delta.properties.defaults.columnMapping.mode"
        spark.conf.set(key, mode)
        try:
            spark.createDataFrame(rows, DDL).write.format("delta").partitionBy("v").save(str(table))
        finally:
            spark.conf.unset(key)


@pytest.mark.parametrize(
    ("surface", "mode"), [("sql", "name"), ("sql", "id"), ("builder", "name"), ("option", "id"), ("session", "name")]
)
def test_a_new_table_gets_ids_physical_names_and_the_protocol(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, surface: str, mode: str
) -> None:
    table = tmp_path / "t"
    _new_table(spark, sql, table, surface, mode)
    assert _last(table, "protocol") == {"minReaderVersion": 2, "minWriterVersion": 5}
    metadata = _last(table, "metaData")
    assert metadata["configuration"]["delta.columnMapping.mode"] == mode
    assert metadata["configuration"]["delta.columnMapping.maxColumnId"] == "5"
    fields = _fields(table)
    nested = fields[2]["type"]["fields"]
    # Delta's order: a field, then its children.
    assert [f["metadata"]["delta.columnMapping.id"] for f in [*fields, *nested]] == [1, 2, 3, 4, 5]
    names = [f["metadata"]["delta.columnMapping.physicalName"] for f in [*fields, *nested]]
    assert all(PHYSICAL.match(n) for n in names) and len(set(names)) == 5
    _check_files(table)
    expected = [
        {"id": 1, "v": "a", "s": {"p": "x", "q": 10}},
        {"id": 2, "v": "b", "s": {"p": "y", "q": 20}},
    ]
    assert _spark_rows(spark, table) == expected
    assert _delta_rs_rows(table) == expected


def test_the_sink_creates_a_column_mapped_table(spark: SparkSession, tmp_path: Path) -> None:
    source, table = tmp_path / "source", tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1)), (2, "b", ("y", 2))], DDL).write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .option("delta.columnMapping.mode", "name")
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert _last(table, "protocol") == {"minReaderVersion": 2, "minWriterVersion": 5}
    assert all(PHYSICAL.match(p) for p in _physical(_fields(table)).values())
    _check_files(table)
    assert (
        _delta_rs_rows(table)
        == _spark_rows(spark, table)
        == sorted(spark.read.format("delta").load(str(source)).toArrow().to_pylist(), key=lambda r: r["id"])
    )


def test_rewrites_and_change_data_write_physical_names(spark: SparkSession, tmp_path: Path) -> None:
    from sparkonce.delta.tables import DeltaTable

    table = tmp_path / "t"
    writer = spark.createDataFrame([(i, "ab"[i % 2], ("x", i)) for i in range(6)], DDL).write.format("delta")
    writer.option("delta.columnMapping.mode", "name").option("delta.enableChangeDataFeed", "true").partitionBy(
        "v"
    ).save(str(table))
    assert _last(table, "protocol") == {"minReaderVersion": 2, "minWriterVersion": 5}
    delta = DeltaTable.forPath(spark, str(table))
    delta.update("id = 1", {"id": "100"})
    delta.delete("id = 2")
    source = spark.createDataFrame([(3, "b", ("m", 33)), (7, "b", ("n", 7))], DDL)
    delta.alias("t").merge(source.alias("u"), "t.id = u.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    delta.optimize().executeCompaction()
    _check_files(table)
    change_files = [a["cdc"]["path"] for entry in _entries(table) for a in entry if "cdc" in a]
    assert change_files
    physical = set(_physical(_fields(table)).values())
    for path in change_files:
        assert set(pq.read_schema(table / path).names) - {"_change_type"} <= physical
    expected = _spark_rows(spark, table)
    assert [r["id"] for r in expected] == [0, 3, 4, 5, 7, 100]
    assert _delta_rs_rows(table) == expected
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(str(table))
    assert sorted(r["id"] for r in changes.where("_change_type = 'delete'").collect()) == [2]


def test_overwrite_schema_gives_the_new_columns_new_ids_and_names(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).save(str(table))
    old = set(_physical(_fields(table)).values())
    spark.createDataFrame([(2, 2.5)], "id long, w double").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(str(table))
    fields = _fields(table)
    assert [(f["name"], f["metadata"]["delta.columnMapping.id"]) for f in fields] == [("id", 6), ("w", 7)]
    assert not old & set(_physical(fields).values())  # as Delta: new physical names, never the replaced ones
    assert _last(table, "metaData")["configuration"]["delta.columnMapping.maxColumnId"] == "7"
    _check_files(table)
    assert _spark_rows(spark, table) == _delta_rs_rows(table) == [{"id": 2, "w": 2.5}]


def test_merge_schema_evolution_gives_new_columns_ids_and_physical_names(spark: SparkSession, tmp_path: Path) -> None:
    from sparkonce.delta.tables import DeltaTable

    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1)), (2, "b", ("y", 2))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).save(str(table))
    source = spark.createDataFrame([(2, "b", ("z", 3), "two"), (3, "c", ("w", 4), "three")], f"{DDL}, extra string")
    delta = DeltaTable.forPath(spark, str(table)).alias("t").merge(source.alias("u"), "t.id = u.id")
    delta.withSchemaEvolution().whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    extra = _fields(table)[3]
    assert (extra["name"], extra["metadata"]["delta.columnMapping.id"]) == ("extra", 6)
    assert PHYSICAL.match(extra["metadata"]["delta.columnMapping.physicalName"])
    assert _last(table, "metaData")["configuration"]["delta.columnMapping.maxColumnId"] == "6"
    _check_files(table)
    expected = [
        {"id": 1, "v": "a", "s": {"p": "x", "q": 1}, "extra": None},
        {"id": 2, "v": "b", "s": {"p": "z", "q": 3}, "extra": "two"},
        {"id": 3, "v": "c", "s": {"p": "w", "q": 4}, "extra": "three"},
    ]
    assert _spark_rows(spark, table) == _delta_rs_rows(table) == expected


def test_set_tblproperties_turns_column_mapping_on(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    plain, featured = tmp_path / "plain", tmp_path / "featured"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").save(str(plain))
    sql(f"ALTER TABLE delta.`{plain}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    assert _last(plain, "protocol") == {"minReaderVersion": 2, "minWriterVersion": 5}
    fields = _fields(plain)
    # The files name their columns by the logical names already: those become the physical names.
    assert _physical(fields) == {"id": "id", "v": "v", "s": "s"}
    assert fields[2]["type"]["fields"][0]["metadata"] == {
        "delta.columnMapping.id": 4,
        "delta.columnMapping.physicalName": "p",
    }
    assert _last(plain, "metaData")["configuration"]["delta.columnMapping.maxColumnId"] == "5"
    assert _operation(plain)["operation"] == "SET TBLPROPERTIES"
    assert _delta_rs_rows(plain) == [{"id": 1, "v": "a", "s": {"p": "x", "q": 1}}]

    writer = spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta")
    writer.option("delta.enableDeletionVectors", "true").save(str(featured))
    sql(f"ALTER TABLE delta.`{featured}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    protocol = _last(featured, "protocol")
    assert protocol["minReaderVersion"] == 3 and protocol["minWriterVersion"] == 7
    assert "columnMapping" in protocol["readerFeatures"] and "columnMapping" in protocol["writerFeatures"]

    for mode in ("id", "none"):
        version = len(_entries(plain))
        with pytest.raises(
            UnsupportedFeatureError,
            match=rf"DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE\] Changing column mapping mode from 'name' to "
            rf"'{mode}' is not supported",
        ):
            sql(f"ALTER TABLE delta.`{plain}` SET TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')")
        assert len(_entries(plain)) == version
    fresh = tmp_path / "fresh"
    spark.range(1).write.format("delta").save(str(fresh))
    with pytest.raises(UnsupportedFeatureError, match=r"Changing column mapping mode from 'none' to 'id'"):
        sql(f"ALTER TABLE delta.`{fresh}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'id')")
    assert len(_entries(fresh)) == 1


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("RENAME COLUMN id TO ident", r"\[DELTA_UNSUPPORTED_RENAME_COLUMN\] Column rename is not supported"),
        ("DROP COLUMN v", r"\[DELTA_UNSUPPORTED_DROP_COLUMN\] DROP COLUMN is not supported"),
    ],
)
def test_rename_and_drop_need_column_mapping(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, statement: str, error: str
) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").save(str(table))
    with pytest.raises(SqlError, match=rf"(?s){error}.*'delta.columnMapping.mode' = 'name'.*protocol \(2, 5\)"):
        sql(f"ALTER TABLE delta.`{table}` {statement}")
    assert len(_entries(table)) == 1


def test_rename_columns_keeps_the_data_where_it_is(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).partitionBy("v").save(str(table))
    before = _physical(_fields(table))
    nested_before = _physical(_fields(table)[2]["type"]["fields"])
    sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN id TO ident")
    info = _operation(table)
    assert info["operation"] == "RENAME COLUMN"
    assert info["operationParameters"] == {"oldColumnPath": "id", "newColumnPath": "ident"}
    sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN s.p TO pp")
    assert _operation(table)["operationParameters"] == {"oldColumnPath": "s.p", "newColumnPath": "s.pp"}
    sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN v TO w")
    metadata = _last(table, "metaData")
    assert metadata["partitionColumns"] == ["w"]
    assert _physical(_fields(table)) == {"ident": before["id"], "w": before["v"], "s": before["s"]}
    assert _physical(_fields(table)[2]["type"]["fields"]) == {"pp": nested_before["p"], "q": nested_before["q"]}
    with pytest.raises(SqlError, match=r"\[FIELD_ALREADY_EXISTS\] Cannot rename column, because w already exists"):
        sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN ident TO w")
    with pytest.raises(SqlError, match=r"\[UNRESOLVED_COLUMN.WITH_SUGGESTION\].*`nope`"):
        sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN nope TO other")
    spark.createDataFrame([(2, "b", ("y", 2))], "ident long, w string, s struct<pp:string, q:int>").write.format(
        "delta"
    ).mode("append").save(str(table))
    _check_files(table)
    expected = [
        {"ident": 1, "w": "a", "s": {"pp": "x", "q": 1}},
        {"ident": 2, "w": "b", "s": {"pp": "y", "q": 2}},
    ]
    assert sorted(spark.read.format("delta").load(str(table)).toArrow().to_pylist(), key=str) == sorted(
        expected, key=str
    )
    from deltalake import DeltaTable, QueryBuilder

    rs = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute("select * from t").read_all())
    assert sorted(rs.to_pylist(), key=str) == sorted(expected, key=str)


def test_drop_columns(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).partitionBy("v").save(str(table))
    q_physical = _physical(_fields(table)[2]["type"]["fields"])["q"]
    with pytest.raises(SqlError, match=r"\[DELTA_UNSUPPORTED_DROP_PARTITION_COLUMN\] Dropping partition columns \(v\)"):
        sql(f"ALTER TABLE delta.`{table}` DROP COLUMN v")
    sql(f"ALTER TABLE delta.`{table}` DROP COLUMNS (s.q)")
    assert _operation(table)["operationParameters"] == {"columns": '["s.q"]'}
    with pytest.raises(SqlError, match=r"\[DELTA_DROP_COLUMN_ON_SINGLE_FIELD_SCHEMA\]"):
        sql(f"ALTER TABLE delta.`{table}` DROP COLUMN s.p")
    sql(f"ALTER TABLE delta.`{table}` DROP COLUMN IF EXISTS nope")
    assert _operation(table)["operation"] == "DROP COLUMNS"  # nothing was committed for IF EXISTS
    sql(f"ALTER TABLE delta.`{table}` ADD COLUMNS (q INT)")
    fields = _fields(table)
    assert [f["name"] for f in fields] == ["id", "v", "s", "q"]
    assert fields[3]["metadata"]["delta.columnMapping.id"] == 6  # ids are never given out twice
    assert fields[3]["metadata"]["delta.columnMapping.physicalName"] != q_physical
    assert _last(table, "metaData")["configuration"]["delta.columnMapping.maxColumnId"] == "6"
    spark.createDataFrame([(2, "b", ("y",), 5)], "id long, v string, s struct<p:string>, q int").write.format(
        "delta"
    ).mode("append").save(str(table))
    _check_files(table)
    expected = [{"id": 1, "v": "a", "s": {"p": "x"}, "q": None}, {"id": 2, "v": "b", "s": {"p": "y"}, "q": 5}]
    assert _spark_rows(spark, table) == expected
    assert _delta_rs_rows(table) == expected


def test_alter_change_replace_and_positions(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).save(str(table))
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN id COMMENT 'the key'")
    assert _fields(table)[0]["metadata"]["comment"] == "the key"
    assert _operation(table)["operation"] == "CHANGE COLUMN"
    with pytest.raises(SqlError, match=r"DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.*from STRING to STRING NOT NULL"):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v SET NOT NULL")
    with pytest.raises(SqlError, match=r"DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.*from BIGINT to STRING"):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN id TYPE STRING")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v FIRST")
    assert [f["name"] for f in _fields(table)] == ["v", "id", "s"]
    sql(f"ALTER TABLE delta.`{table}` CHANGE COLUMN v v STRING AFTER id")
    assert [f["name"] for f in _fields(table)] == ["id", "v", "s"]
    assert json.loads(_operation(table)["operationParameters"]["column"])["name"] == "v"
    assert _operation(table)["operationParameters"]["position"] == "AFTER id"
    sql(f"ALTER TABLE delta.`{table}` ADD COLUMNS (a INT FIRST, s.r STRING AFTER p)")
    fields = _fields(table)
    assert [f["name"] for f in fields] == ["a", "id", "v", "s"]
    assert [f["name"] for f in fields[3]["type"]["fields"]] == ["p", "r", "q"]
    assert [
        fields[0]["metadata"]["delta.columnMapping.id"],
        fields[3]["type"]["fields"][1]["metadata"]["delta.columnMapping.id"],
    ] == [6, 7]
    sql(f"ALTER TABLE delta.`{table}` REPLACE COLUMNS (id BIGINT, v STRING COMMENT 'letter', s STRUCT<p: STRING>)")
    fields = _fields(table)
    assert [f["name"] for f in fields] == ["id", "v", "s"]
    assert fields[1]["metadata"]["comment"] == "letter"
    assert _operation(table)["operation"] == "REPLACE COLUMNS"
    spark.createDataFrame([(2, "b", ("y",))], "id long, v string, s struct<p:string>").write.format("delta").mode(
        "append"
    ).save(str(table))
    _check_files(table)
    expected = [{"id": 1, "v": "a", "s": {"p": "x"}}, {"id": 2, "v": "b", "s": {"p": "y"}}]
    assert _spark_rows(spark, table) == expected
    assert _delta_rs_rows(table) == expected


@pytest.mark.parametrize("statement", ["RENAME COLUMN v TO w", "DROP COLUMN v", "RENAME COLUMN s.p TO pp"])
def test_a_stream_stops_after_a_rename_or_drop(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, statement: str
) -> None:
    """A running stream from a column-mapped table (no schema tracking) meets the rename or drop in the table
    version it reads next and stops with Delta's error; the rows before it were delivered."""
    source = tmp_path / "source"
    spark.createDataFrame([(1, "a", ("x", 1))], DDL).write.format("delta").option(
        "delta.columnMapping.mode", "name"
    ).save(str(source))
    name = "cm_stream_" + re.sub(r"\W", "_", statement).lower()
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while spark.table(name).count() < 1:
            assert time.monotonic() < deadline, "the stream delivered nothing"
            assert query.isActive, query.exception()
            time.sleep(0.2)
        sql(f"ALTER TABLE delta.`{source}` {statement}")
        spark.read.format("delta").load(str(source)).write.format("delta").mode("append").save(str(source))
        with pytest.raises(
            StreamingQueryException,
            match=r"DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE_USE_SCHEMA_LOG\] Streaming read is not supported on "
            r"tables with read-incompatible schema changes",
        ):
            query.awaitTermination(120)
        assert [r["id"] for r in spark.table(name).collect()] == [1]
    finally:
        query.stop()


def test_columns_that_constraints_generated_columns_or_clustering_use_are_kept(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    checked, generated, clustered = tmp_path / "checked", tmp_path / "generated", tmp_path / "clustered"
    for table in (checked, generated, clustered):
        extra = "CLUSTER BY (id)" if table == clustered else ""
        day = ", day BIGINT GENERATED ALWAYS AS (id * 2)" if table == generated else ""
        check = ", 'delta.constraints.id_pos' = 'id > 0'" if table == checked else ""
        sql(
            f"CREATE TABLE delta.`{table}` (id BIGINT, v STRING{day}) USING delta {extra} "
            f"TBLPROPERTIES ('delta.columnMapping.mode' = 'name'{check})"
        )
    with pytest.raises(
        SqlError, match=r"(?s)\[DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE\] Cannot alter column id.*id_pos"
    ):
        sql(f"ALTER TABLE delta.`{checked}` RENAME COLUMN id TO ident")
    with pytest.raises(SqlError, match=r"DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE"):
        sql(f"ALTER TABLE delta.`{checked}` DROP COLUMN id")
    with pytest.raises(SqlError, match=r"(?s)\[DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE\].*day"):
        sql(f"ALTER TABLE delta.`{generated}` RENAME COLUMN id TO ident")
    with pytest.raises(
        SqlError, match=r"\[DELTA_UNSUPPORTED_DROP_CLUSTERING_COLUMN\] Dropping clustering columns \(id\)"
    ):
        sql(f"ALTER TABLE delta.`{clustered}` DROP COLUMN id")
    sql(f"ALTER TABLE delta.`{checked}` RENAME COLUMN v TO w")  # a column nothing uses
    assert [f["name"] for f in _fields(checked)] == ["id", "w"]
    assert [len(_entries(t)) for t in (checked, generated, clustered)] == [2, 1, 1]
