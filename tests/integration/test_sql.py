"""Delta's SQL through ``spark.sql`` on real tables: the articles' statements verbatim on a table written by
sparkonce's streaming sink, every statement kind checked afterwards with delta-rs (rows, log actions, protocol),
and bad input (unknown tables, unsupported clauses, name clashes) refused before anything is written."""

# ruff: noqa: W291  (the articles' statements keep their trailing spaces: they are run verbatim)
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import AnalysisException

from sparkonce.delta.table.catalog import CATALOG_DIR
from sparkonce.errors import OptionError, SqlError, UnsupportedFeatureError
from sparkonce.sql import DeltaSql
from tests.delta_helpers import commit_times

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

# Seed 000, "Step 3" and "Step 4", verbatim but for the table name.
STEP_3_HISTORY = """-- Check transaction details
DESCRIBE HISTORY your_streaming_table;
"""
STEP_3_MARKERS = """-- Look for streaming write markers
SELECT 
  version,
  operation,
  operationParameters,
  operationMetrics
FROM (DESCRIBE HISTORY your_streaming_table)
WHERE operation = 'STREAMING UPDATE'
"""
STEP_4_DUPLICATE_EPOCHS = """
SELECT 
  operationParameters.txnVersion as epoch_id,
  operationParameters.txnAppId as query_id,
  count(*) as occurrence_count
FROM (DESCRIBE HISTORY your_streaming_table)
WHERE operation = 'STREAMING UPDATE'
GROUP BY operationParameters.txnVersion, operationParameters.txnAppId
HAVING count(*) > 1
"""
LAST_EPOCH = """
        SELECT max(operationParameters.txnVersion) as max_epoch
        FROM (DESCRIBE HISTORY delta.`{table_path}`)
        WHERE operation = 'STREAMING UPDATE'
    """
SAME_EPOCH_OTHER_QUERY = """
SELECT 
  operationParameters.txnVersion as epoch,
  collect_set(operationParameters.txnAppId) as query_ids
FROM (DESCRIBE HISTORY your_streaming_table)
WHERE operation = 'STREAMING UPDATE'
GROUP BY operationParameters.txnVersion
HAVING size(collect_set(operationParameters.txnAppId)) > 1
"""


def _stream(spark: SparkSession, source: Path, target: Path, checkpoint: Path) -> str:
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return str(query.id)


def _ids(path: Path, *, version: int | None = None) -> list[int]:
    return sorted(DeltaTable(str(path), version=version).to_pyarrow_table().column("id").to_pylist())


def _operations(path: Path) -> list[str]:
    """Operation names newest first, as delta-rs reads them (another engine's view of the history)."""
    return [h["operation"] for h in DeltaTable(str(path)).history()]


@pytest.fixture
def streamed(spark: SparkSession, tmp_path: Path) -> tuple[Path, Path, str]:
    """A source table of two versions streamed by sparkonce into ``events`` (two batches); the query id."""
    source = tmp_path / "source"
    for v in range(2):
        write_deltalake(str(source), pa.table({"id": [v * 10 + i for i in range(10)]}), mode="append")
    target = tmp_path / "events"
    return source, target, _stream(spark, source, target, tmp_path / "ck")


def test_the_articles_statements_run_verbatim(
    spark: SparkSession, sql: DeltaSql, streamed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    source, target, query_id = streamed
    sql(f"CREATE TABLE your_streaming_table USING delta LOCATION '{target}'")

    history = sql(STEP_3_HISTORY).collect()
    assert [(r.version, r.operation) for r in history] == [(1, "STREAMING UPDATE"), (0, "STREAMING UPDATE")]
    assert history[0].operationParameters["epochId"] == "1" and history[0].operationParameters["queryId"] == query_id
    markers = sql(STEP_3_MARKERS).collect()
    assert [r.version for r in markers] == [1, 0]
    assert markers[0].operationMetrics["numOutputRows"] == "10"
    assert sql(STEP_4_DUPLICATE_EPOCHS).collect() == []
    assert sql(LAST_EPOCH.format(table_path=target)).collect()[0]["max_epoch"] == "1"
    assert sql(SAME_EPOCH_OTHER_QUERY).collect() == []
    # delta-rs, another engine, sees the same operations and parameters
    assert _operations(target) == ["STREAMING UPDATE", "STREAMING UPDATE"]
    assert [h["operationParameters"]["epochId"] for h in DeltaTable(str(target)).history()] == ["1", "0"]

    # The articles' failure: the checkpoint is lost and a new query writes the same epochs again.
    second = _stream(spark, source, target, tmp_path / "ck-recreated")
    found = {r.epoch: sorted(r.query_ids) for r in sql(SAME_EPOCH_OTHER_QUERY).collect()}
    assert found == {"0": sorted([query_id, second]), "1": sorted([query_id, second])}
    assert sql(STEP_4_DUPLICATE_EPOCHS).collect() == []  # each query id wrote each epoch once
    assert len(_ids(target)) == 40  # the duplicates the query found are real
    assert sql("SELECT count(*) AS n, count(DISTINCT id) AS d FROM your_streaming_table").collect()[0] == (40, 20)


def test_select_by_path_and_name_with_time_travel(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1, 2], "v": ["a", "b"]}))
    write_deltalake(str(path), pa.table({"id": [3], "v": ["c"]}), mode="append")
    write_deltalake(str(tmp_path / "other"), pa.table({"id": [2, 3], "w": ["x", "y"]}))
    timestamp = commit_times(path)[0]  # version 0's commit time, milliseconds since the epoch
    sql(f"CREATE TABLE t USING delta LOCATION '{path}'")

    def ids(query: str) -> list[int]:
        return sorted(r[0] for r in sql(query).collect())

    assert ids(f"SELECT id FROM delta.`{path}`") == [1, 2, 3]
    assert ids(f"SELECT id FROM delta.`{path}` VERSION AS OF 0") == [1, 2]
    assert ids(f"SELECT id FROM delta.`{path}@v0`") == [1, 2]
    assert ids("SELECT id FROM t@v0") == [1, 2]
    assert ids("SELECT id FROM t FOR SYSTEM_VERSION AS OF 1") == [1, 2, 3]
    when = spark.createDataFrame([(timestamp,)], "ms BIGINT").selectExpr("CAST(timestamp_millis(ms) AS STRING)")
    assert ids(f"SELECT id FROM t TIMESTAMP AS OF '{when.collect()[0][0]}'") == [1, 2]
    assert ids("SELECT t.id FROM t WHERE t.v <> 'a'") == [2, 3]  # columns qualified by the table's name
    joined = f"SELECT a.id FROM t a JOIN delta.`{tmp_path / 'other'}` AS o ON a.id = o.id, default.t c WHERE c.id = 1"
    assert ids(joined) == [2, 3]
    assert ids("WITH x AS (SELECT id FROM spark_catalog.default.t) SELECT id FROM x WHERE id IN (SELECT 3)") == [3]
    assert ids("SELECT 1 AS one") == [1]  # Spark's own statements go through untouched
    assert [v.name for v in spark.catalog.listTables() if v.name.startswith("__sparkonce")] == []


def test_dml_statements(sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1, 2, 3, 4], "v": [10, 20, 30, 40]}))
    sql(f"CREATE TABLE t USING delta LOCATION '{path}'")
    assert sql("DELETE FROM t AS x WHERE x.id = 4").collect()[0].num_affected_rows == 1
    assert sql("UPDATE t SET v = v + 1, t.id = t.id WHERE id >= 2").collect()[0].num_affected_rows == 2
    merged = sql(
        """MERGE INTO t USING (SELECT * FROM VALUES (1, 100, 'u'), (2, 0, 'd'), (5, 500, 'i'), (6, -1, 'i')
                              AS s(id, v, op)) s
           ON t.id = s.id
           WHEN MATCHED AND s.op = 'd' THEN DELETE
           WHEN MATCHED THEN UPDATE SET *
           WHEN NOT MATCHED AND s.v < 0 THEN INSERT (id, v) VALUES (s.id, 0)
           WHEN NOT MATCHED THEN INSERT *
           WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = -t.v;"""
    ).collect()[0]
    assert (merged.num_updated_rows, merged.num_deleted_rows, merged.num_inserted_rows) == (2, 1, 2)
    rows = DeltaTable(str(path)).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["v"]) for r in rows] == [(1, 100), (3, -31), (5, 500), (6, 0)]
    sql(f"MERGE INTO delta.`{path}` AS t USING t AS s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE")
    assert _operations(path)[:4] == ["MERGE", "MERGE", "UPDATE", "DELETE"]
    history = DeltaTable(str(path)).history()
    assert history[2]["operationParameters"]["predicate"] == '["id >= 2"]'  # the UPDATE, as written


def test_insert_create_and_drop(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    sql(
        """CREATE TABLE events (id BIGINT, day STRING) USING delta PARTITIONED BY (day)
           COMMENT 'one row per event' TBLPROPERTIES ('delta.checkpointInterval' = '3')"""
    )
    managed = warehouse / "events"
    assert DeltaTable(str(managed)).metadata().partition_columns == ["day"]
    assert DeltaTable(str(managed)).metadata().description == "one row per event"
    assert DeltaTable(str(managed)).metadata().configuration == {"delta.checkpointInterval": "3"}
    sql("INSERT INTO events VALUES (1, 'a'), (2, 'b')")
    sql("INSERT INTO TABLE events (day, id) SELECT 'c', 3")
    sql("INSERT INTO events (id) VALUES (4)")
    assert sorted(map(tuple, sql("SELECT id, day FROM events").collect()), key=lambda r: r[0]) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, None),
    ]
    assert (managed / "_delta_log" / "00000000000000000003.checkpoint.parquet").is_file()
    sql("INSERT OVERWRITE events SELECT id * 10, day FROM events WHERE id < 3")
    assert _ids(managed) == [10, 20]
    assert _operations(managed)[0] == "WRITE"
    assert DeltaTable(str(managed)).history()[0]["operationParameters"]["mode"] == "Overwrite"

    sql("CREATE TABLE copy USING delta AS SELECT id FROM events WHERE id = 10")
    assert _ids(warehouse / "copy") == [10]
    sql("CREATE TABLE IF NOT EXISTS copy USING delta AS SELECT 1 AS id")  # exists: nothing happens
    sql("CREATE OR REPLACE TABLE copy USING delta AS SELECT id, 'x' AS s FROM events")
    assert sorted(map(tuple, sql("SELECT id, s FROM copy").collect())) == [(10, "x"), (20, "x")]
    external = tmp_path / "external"
    sql(f"CREATE TABLE ext (id BIGINT) USING delta LOCATION '{external}'")
    entries = sorted(p.name for p in (warehouse / CATALOG_DIR / "default").iterdir())
    assert entries == ["copy.json", "events.json", "ext.json"]
    assert json.loads((warehouse / CATALOG_DIR / "default" / "ext.json").read_text()) == {
        "location": str(external),
        "managed": False,
    }
    # The catalog is files: another session (here: a new DeltaSql of the same session's conf) sees the tables.
    assert DeltaSql(spark, sql.spark_sql)("SELECT count(*) FROM copy").collect()[0][0] == 2

    def shown(statement: str) -> list[tuple[str, str, bool]]:
        return [tuple(r) for r in sql(statement).collect() if not r.isTemporary]  # type: ignore[misc]

    assert shown("SHOW TABLES") == [("default", "copy", False), ("default", "events", False), ("default", "ext", False)]
    assert shown("SHOW TABLES FROM default LIKE 'E*|nothing'") == [
        ("default", "events", False),
        ("default", "ext", False),
    ]
    sql("CREATE TABLE lake.t (id BIGINT) USING delta")  # a database Spark's own catalog does not have
    assert shown("SHOW TABLES IN lake") == [("lake", "t", False)]
    assert shown("SHOW TABLES IN spark_catalog.lake 't'") == [("lake", "t", False)]
    with pytest.raises(AnalysisException, match="SCHEMA_NOT_FOUND"):
        sql("SHOW TABLES IN nowhere")

    sql("DROP TABLE copy")
    assert not (warehouse / "copy").exists()  # managed: its files go with it
    sql("DROP TABLE ext")
    assert (external / "_delta_log" / "00000000000000000000.json").is_file()  # external: only the name goes
    sql("DROP TABLE IF EXISTS ext")
    with pytest.raises(
        AnalysisException, match=r"\[TABLE_OR_VIEW_NOT_FOUND\] The table or view `copy` cannot be found"
    ):
        sql("SELECT * FROM copy")


def test_properties(sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    sql(f"CREATE TABLE t USING delta LOCATION '{path}'")
    sql("ALTER TABLE t SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 60 days', 'team' = 'data')")
    assert DeltaTable(str(path)).metadata().configuration == {
        "delta.logRetentionDuration": "interval 60 days",
        "team": "data",
    }
    shown = dict(map(tuple, sql("SHOW TBLPROPERTIES t").collect()))
    assert shown == {
        "delta.logRetentionDuration": "interval 60 days",
        "delta.minReaderVersion": "1",
        "delta.minWriterVersion": "2",
        "team": "data",
    }
    assert sql("SHOW TBLPROPERTIES t ('team')").collect()[0].value == "data"
    assert "does not have property" in sql("SHOW TBLPROPERTIES t ('nope')").collect()[0].value
    sql("ALTER TABLE t SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    protocol = DeltaTable(str(path)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 4)
    sql("ALTER TABLE t UNSET TBLPROPERTIES ('team')")
    sql("ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('team')")
    assert "team" not in DeltaTable(str(path)).metadata().configuration
    assert _operations(path) == ["UNSET TBLPROPERTIES"] * 2 + ["SET TBLPROPERTIES"] * 2 + ["WRITE"]
    with pytest.raises(OptionError, match="DELTA_UNSET_NON_EXISTENT_PROPERTY"):
        sql("ALTER TABLE t UNSET TBLPROPERTIES ('team')")
    with pytest.raises(OptionError, match=r"Unknown configuration was specified: delta\.nonsense"):
        sql("ALTER TABLE t SET TBLPROPERTIES ('delta.nonsense' = '1')")
    with pytest.raises(UnsupportedFeatureError, match="row tracking"):
        sql("ALTER TABLE t SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    assert len(DeltaTable(str(path)).history()) == 5  # the refused statements wrote nothing


def test_maintenance_statements(sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(path), pa.table({"id": [i], "p": ["x" if i else "y"]}), mode="append", partition_by=["p"])
    optimized = sql(f"OPTIMIZE delta.`{path}` WHERE p = 'x'").collect()[0]
    assert (optimized.metrics.numFilesAdded, optimized.metrics.numFilesRemoved) == (1, 2)
    assert sql(f"DESCRIBE DETAIL '{path}'").collect()[0].numFiles == 2
    restored = sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 1").collect()[0]
    assert restored.num_of_files_after_restore == 2
    assert _ids(path) == [0, 1]
    assert _operations(path)[:2] == ["RESTORE", "OPTIMIZE"]
    assert sql(f"VACUUM delta.`{path}` RETAIN 200 HOURS DRY RUN").collect() == []
    assert [r.path for r in sql(f"VACUUM delta.`{path}`").collect()] == [str(path)]
    assert [r.version for r in sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 2").collect()] == [4, 3]


def test_bad_input_is_refused_before_anything_is_written(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    sql(f"CREATE TABLE t USING delta LOCATION '{path}'")
    with pytest.raises(SqlError, match=r"TABLE_OR_VIEW_NOT_FOUND.*`nope`"):
        sql("DESCRIBE HISTORY nope")
    with pytest.raises(SqlError, match="DELTA_MISSING_DELTA_TABLE"):
        sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'missing'}`")
    with pytest.raises(SqlError, match="DELTA_MISSING_DELTA_TABLE"):
        sql(f"SELECT * FROM delta.`{tmp_path / 'missing'}`")
    with pytest.raises(OptionError, match="is not a column"):
        sql("OPTIMIZE t ZORDER BY (nope)")
    with pytest.raises(SqlError, match="a table named by its path has no name to change"):
        sql(f"ALTER TABLE delta.`{path}` RENAME TO u")
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        sql(f"CREATE TABLE t USING delta LOCATION '{path}'")
    with pytest.raises(SqlError, match="INSERT_COLUMN_ARITY_MISMATCH"):
        sql("INSERT INTO t VALUES (1, 2)")
    with pytest.raises(SqlError, match="cannot take a table version"):
        sql("DELETE FROM t@v0")
    spark.sql("DROP TABLE IF EXISTS spark_owned")
    spark.sql("CREATE TABLE spark_owned (id INT) USING parquet")  # Spark's own table and statements
    try:
        spark.sql("INSERT INTO spark_owned VALUES (7)")
        assert spark.sql("SELECT id FROM spark_owned").collect()[0].id == 7
        with pytest.raises(SqlError, match=r"TABLE_OR_VIEW_ALREADY_EXISTS.*Spark's catalog"):
            sql("CREATE TABLE spark_owned (id INT) USING delta")
    finally:
        spark.sql("DROP TABLE spark_owned")
    assert len(DeltaTable(str(path)).history()) == 1
    assert os.listdir(tmp_path / "warehouse" / CATALOG_DIR / "default") == ["t.json"]


def test_tables_by_name_in_the_python_apis(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    from sparkonce import DeltaTable as SparkonceDeltaTable
    from sparkonce.errors import TableNotFoundError

    warehouse = tmp_path / "warehouse"
    spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, p STRING").write.format("delta").partitionBy(
        "p"
    ).saveAsTable("people")
    assert DeltaTable(str(warehouse / "people")).metadata().partition_columns == ["p"]
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        spark.range(1).write.format("delta").saveAsTable("people")
    spark.createDataFrame([(3, "c")], "id BIGINT, p STRING").write.format("delta").mode("append").saveAsTable(
        "default.people"
    )
    spark.range(1).write.format("delta").mode("ignore").saveAsTable("people")  # exists: nothing written
    assert sorted(r.id for r in spark.table("people").collect()) == [1, 2, 3]
    assert sorted(r.id for r in spark.read.table("spark_catalog.default.people").collect()) == [1, 2, 3]
    assert sorted(r.id for r in spark.read.option("versionAsOf", 0).table("people").collect()) == [1, 2]

    external = tmp_path / "ext"
    spark.range(2).write.format("delta").option("path", str(external)).saveAsTable("ext")
    assert _ids(external) == [0, 1]

    query = (
        spark.readStream.table("people")
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .toTable("people_copy")
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert _ids(warehouse / "people_copy") == [1, 2, 3]
    assert _operations(warehouse / "people_copy") == ["STREAMING UPDATE"]  # the snapshot, as one batch

    table = SparkonceDeltaTable.forName(spark, "people_copy")
    table.delete("id = 2")
    assert sorted(r.id for r in table.toDF().collect()) == [1, 3]
    with pytest.raises(TableNotFoundError, match="`nope` is not a Delta table"):
        SparkonceDeltaTable.forName(spark, "nope")
    with pytest.raises(TypeError, match="tableOrViewName"):
        SparkonceDeltaTable.forName(spark, 1)  # type: ignore[arg-type]
    spark.range(3).createOrReplaceTempView("plain_view")  # names sparkonce does not hold stay Spark's
    try:
        assert spark.table("plain_view").count() == 3
    finally:
        spark.catalog.dropTempView("plain_view")


def test_add_columns_manifests_and_convert(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1, 2], "p": ["x", None]}), partition_by=["p"])
    sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note STRING COMMENT 'why', score DOUBLE)")
    fields = json.loads(DeltaTable(str(path)).schema().to_json())["fields"]
    assert [(f["name"], f["type"], f["nullable"]) for f in fields] == [
        ("id", "long", True),
        ("p", "string", True),
        ("note", "string", True),
        ("score", "double", True),
    ]
    assert fields[2]["metadata"] == {"comment": "why"}
    assert _operations(path)[0] == "ADD COLUMNS"
    sql(f"INSERT INTO delta.`{path}` VALUES (3, 'x', 'new', 1.5)")
    rows = DeltaTable(str(path)).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["note"], r["score"]) for r in rows] == [(1, None, None), (2, None, None), (3, "new", 1.5)]
    with pytest.raises(SqlError, match="FIELD_ALREADY_EXISTS"):
        sql(f"ALTER TABLE delta.`{path}` ADD COLUMN ID INT")
    with pytest.raises(OptionError, match=r"DELTA_OPERATION_NOT_ALLOWED.*`NOT NULL in ALTER TABLE ADD COLUMNS`"):
        sql(f"ALTER TABLE delta.`{path}` ADD COLUMN other INT NOT NULL")

    sql(f"GENERATE symlink_format_manifest FOR TABLE delta.`{path}`")
    manifests = sorted((path / "_symlink_format_manifest").rglob("manifest"))
    assert [m.parent.name for m in manifests] == ["p=__HIVE_DEFAULT_PARTITION__", "p=x"]
    listed = sorted(line for m in manifests for line in m.read_text().splitlines())
    assert listed == sorted(DeltaTable(str(path)).file_uris())
    sql(f"DELETE FROM delta.`{path}` WHERE p IS NULL")
    sql(f"GENERATE symlink_format_manifest FOR TABLE delta.`{path}`")
    assert [m.parent.name for m in (path / "_symlink_format_manifest").rglob("manifest")] == ["p=x"]
    typed = tmp_path / "typed"  # partition folders named by the log's strings, as Delta names them
    write_deltalake(str(typed), pa.table({"id": [1], "flag": [True], "name": ["a b"]}), partition_by=["flag", "name"])
    sql(f"GENERATE symlink_format_manifest FOR TABLE delta.`{typed}`")
    (manifest,) = (typed / "_symlink_format_manifest").rglob("manifest")
    assert manifest.parent.relative_to(typed / "_symlink_format_manifest").as_posix() == "flag=true/name=a b"
    (listed_file,) = manifest.read_text().splitlines()
    assert [listed_file] == DeltaTable(str(typed)).file_uris() and Path(listed_file).is_file()

    parquet = tmp_path / "plain"
    for day in ("d1", "d2"):
        (parquet / f"day={day}").mkdir(parents=True)
        pq.write_table(pa.table({"id": [1 if day == "d1" else 2]}), parquet / f"day={day}" / "part-0.parquet")
    sql(f"CONVERT TO DELTA parquet.`{parquet}` PARTITIONED BY (day STRING)")
    converted = DeltaTable(str(parquet))
    assert converted.metadata().partition_columns == ["day"]
    assert sorted(map(tuple, sql(f"SELECT id, day FROM delta.`{parquet}`").collect())) == [(1, "d1"), (2, "d2")]
    sql(f"CONVERT TO DELTA parquet.`{parquet}`")  # already a Delta table: nothing happens
    assert len(converted.history()) == 1


def test_table_builders(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    from sparkonce import DeltaTable as SparkonceDeltaTable

    table = (
        SparkonceDeltaTable.create(spark)
        .tableName("built")
        .addColumn("id", "BIGINT", nullable=False)
        .addColumn("day", StringType(), comment="the day")
        .partitionedBy("day")
        .property("delta.checkpointInterval", "5")
        .comment("days and ids")
        .execute()
    )
    built = tmp_path / "warehouse" / "built"
    metadata = DeltaTable(str(built)).metadata()
    assert (metadata.partition_columns, metadata.configuration) == (["day"], {"delta.checkpointInterval": "5"})
    assert metadata.description == "days and ids"
    assert table.detail().select("description").collect()[0][0] == "days and ids"
    fields = json.loads(DeltaTable(str(built)).schema().to_json())["fields"]
    assert [(f["name"], f["type"], f["nullable"], f["metadata"]) for f in fields] == [
        ("id", "long", False, {}),
        ("day", "string", True, {"comment": "the day"}),
    ]
    assert table.toDF().count() == 0
    SparkonceDeltaTable.createIfNotExists(spark).tableName("built").addColumn("x", "INT").execute()  # exists: kept
    assert len(DeltaTable(str(built)).history()) == 1
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        SparkonceDeltaTable.create(spark).tableName("built").addColumn("x", "INT").execute()
    schema = StructType([StructField("k", StringType()), StructField("v", IntegerType())])
    SparkonceDeltaTable.createOrReplace(spark).tableName("built").addColumns(schema).comment("k and v").execute()
    assert [f["name"] for f in json.loads(DeltaTable(str(built)).schema().to_json())["fields"]] == ["k", "v"]
    assert DeltaTable(str(built)).metadata().description == "k and v"
    assert DeltaTable(str(built)).history()[0]["operationParameters"]["mode"] == "Overwrite"
    with pytest.raises(AnalysisException, match=r"TABLE_OR_VIEW_NOT_FOUND.*`default`\.`missing` cannot be found"):
        SparkonceDeltaTable.replace(spark).tableName("missing").addColumns(schema).execute()
    with pytest.raises(AnalysisException, match="DELTA_CANNOT_REPLACE_MISSING_TABLE"):
        SparkonceDeltaTable.replace(spark).location(str(tmp_path / "nowhere")).addColumns(schema).execute()
    path_only = tmp_path / "by-path"
    SparkonceDeltaTable.create(spark).location(str(path_only)).addColumns(list(schema.fields)).execute()
    assert DeltaTable(str(path_only)).version() == 0
    assert not (tmp_path / "warehouse" / "_sparkonce_catalog" / "default" / "by-path.json").exists()

    # Argument types are checked as delta-spark checks them, before anything is written.
    builder = SparkonceDeltaTable.create(spark)
    with pytest.raises(TypeError, match=re.escape("Identifier must be str. Found 1 with type <class 'int'>")):
        builder.tableName(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Column data type must be str or DataType"):
        builder.addColumn("a", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Column nullable must be bool"):
        builder.addColumn("a", "INT", nullable="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Partitioning column must be str"):
        builder.partitionedBy("a", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Key and value of property must be string"):
        builder.property("delta.appendOnly", True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Schema must be StructType or a list of StructField"):
        builder.addColumns("a INT")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Table comment must be str"):
        builder.comment(3)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="Table name or location has to be specified"):
        SparkonceDeltaTable.create(spark).addColumn("a", "INT").execute()
    with pytest.raises(UnsupportedFeatureError, match=r"generated column g .*function MD5"):
        SparkonceDeltaTable.create(spark).tableName("gen").addColumn("a", "INT").addColumn(
            "g", "INT", generatedAlwaysAs="md5(CAST(a AS STRING))"
        ).execute()
    with pytest.raises(OptionError, match="Unknown configuration was specified"):
        SparkonceDeltaTable.create(spark).tableName("bad").addColumn("a", "INT").property("delta.nope", "1").execute()
    assert not (tmp_path / "warehouse" / "gen").exists() and not (tmp_path / "warehouse" / "bad").exists()


def test_delta_table_parity_methods(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from sparkonce import DeltaTable as SparkonceDeltaTable

    plain = tmp_path / "plain"
    (plain / "day=d1").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2]}), plain / "day=d1" / "part-0.parquet")
    table = SparkonceDeltaTable.convertToDelta(spark, f"parquet.`{plain}`", "day STRING")
    assert DeltaTable(str(plain)).metadata().partition_columns == ["day"]
    assert _operations(plain) == ["CONVERT"]
    with pytest.raises(OptionError, match=re.escape("parquet.`/path`")):
        SparkonceDeltaTable.convertToDelta(spark, str(plain))

    table.generate("symlink_format_manifest")
    manifest = plain / "_symlink_format_manifest" / "day=d1" / "manifest"
    assert manifest.read_text().splitlines() == DeltaTable(str(plain)).file_uris()
    with pytest.raises(OptionError, match="symlink_format_manifest"):
        table.generate("other")

    table.upgradeTableProtocol(1, 4)
    protocol = DeltaTable(str(plain)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 4)
    with pytest.raises(ValueError, match="The readerVersion needs to be an integer"):
        table.upgradeTableProtocol("1", 4)  # type: ignore[arg-type]
    table.upgradeTableProtocol(1, 2)  # lower than the table's: a no-op, as in Delta (never a downgrade)
    protocol = DeltaTable(str(plain)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 4)

    # merge: target-qualified set/values keys, and the session's autoMerge conf
    updates = spark.createDataFrame([(1, "d1", "x"), (3, "d1", "y")], "id BIGINT, day STRING, extra STRING")
    table.alias("t").merge(updates.alias("s"), "t.id = s.id").whenMatchedUpdate(
        set={"t.id": "s.id + 100"}
    ).whenNotMatchedInsert(values={"t.id": "s.id", "t.day": "s.day"}).execute()
    assert _ids(plain) == [2, 3, 101]
    spark.conf.set("spark.databricks.delta.schema.autoMerge.enabled", "true")
    try:
        table.alias("t").merge(updates.alias("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    finally:
        spark.conf.unset("spark.databricks.delta.schema.autoMerge.enabled")
    rows = DeltaTable(str(plain)).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["extra"]) for r in rows] == [(1, "x"), (2, None), (3, None), (101, None)]


# Seed 000, "Step 1", verbatim but for the table name.
FILES_WITH_DUPLICATES = """
SELECT 
  _metadata.file_path,
  _metadata.file_name,
  _metadata.file_modification_time,
  count(*) as row_count
FROM delta_table
GROUP BY _metadata.file_path, _metadata.file_name, _metadata.file_modification_time
HAVING count(*) > 1
"""


def test_metadata_column(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1, 2, 3]}))
    write_deltalake(str(path), pa.table({"id": [4]}), mode="append")
    sql(f"CREATE TABLE delta_table USING delta LOCATION '{path}'")
    found = sql(FILES_WITH_DUPLICATES).collect()
    adds = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    big = next(a for a in adds if a["num_records"] == 3)
    assert [(r.file_path, r.file_name, r.row_count) for r in found] == [(f"file:{path}/{big['path']}", big["path"], 3)]
    assert int(found[0].file_modification_time.timestamp() * 1000) == big["modification_time"]
    assert sql("SELECT * FROM delta_table").columns == ["id"]  # no _metadata unless a statement names it

    frame = spark.read.format("delta").option("metadataColumn", "true").load(str(path))
    assert frame.columns == ["id", "_metadata"]
    rows = frame.select("id", "_metadata.row_index", "_metadata.file_size").orderBy("id").collect()
    assert [(r.id, r.row_index) for r in rows] == [(1, 0), (2, 1), (3, 2), (4, 0)]
    assert rows[0].file_size == big["size_bytes"]
    sql("DELETE FROM delta_table WHERE id = 2")  # a rewrite: row indexes are those of the new file
    rows = sql("SELECT id, _metadata.row_index AS i FROM delta_table ORDER BY id").collect()
    assert [(r.id, r.i) for r in rows] == [(1, 0), (3, 1), (4, 0)]


def test_delta_table_arguments_are_checked_as_delta_spark_checks_them(spark: SparkSession, tmp_path: Path) -> None:
    from sparkonce import DeltaTable as SparkonceDeltaTable

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    table = SparkonceDeltaTable.forName(spark, f"delta.`{path}`")  # a path in delta-spark's name form
    source = spark.createDataFrame([(1,)], "id BIGINT")
    cases: list[tuple[type[Exception], str, object]] = [
        (TypeError, "'condition' must be a Spark SQL Column or a string", lambda: table.delete(5)),
        (ValueError, "'set' cannot be None", lambda: table.update("id = 1")),
        (TypeError, "'set' must be a dict", lambda: table.update("id = 1", [("id", "2")])),
        (TypeError, "Keys of dict in 'set' must contain only strings", lambda: table.update(set={1: "2"})),
        (TypeError, "Values of dict in 'set' must contain only Spark SQL Columns", lambda: table.update(set={"id": 2})),
        (ValueError, "'source' in merge cannot be None", lambda: table.merge(None, "id = id")),
        (TypeError, "Type of 'source' in merge must be DataFrame", lambda: table.merge([1], "id = id")),
        (ValueError, "'condition' in merge cannot be None", lambda: table.merge(source, None)),
        (
            ValueError,
            "'values' in whenNotMatchedInsert cannot be None",
            lambda: table.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsert(),
        ),
        (ValueError, "version needs to be an int", lambda: table.restoreToVersion("0")),
        (ValueError, "timestamp needs to be a string", lambda: table.restoreToTimestamp(0)),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=re.escape(message)):
            call()  # type: ignore[operator]
    assert len(DeltaTable(str(path)).history()) == 1  # nothing was committed


def test_table_features(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    from sparkonce import DeltaTable as SparkonceDeltaTable

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    table = SparkonceDeltaTable.forPath(spark, str(path))
    table.addFeatureSupport("deletionVectors")
    protocol = DeltaTable(str(path)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == ["deletionVectors"]
    assert sorted(protocol.writer_features or []) == ["appendOnly", "deletionVectors", "invariants"]
    sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')")
    protocol = DeltaTable(str(path)).protocol()
    assert sorted(protocol.reader_features or []) == ["deletionVectors", "timestampNtz"]
    assert dict(map(tuple, sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()))["delta.feature.timestampNtz"] == (
        "supported"
    )
    sql(f"INSERT INTO delta.`{path}` VALUES (2)")  # still writable by sparkonce
    assert sorted(r.id for r in sql(f"SELECT id FROM delta.`{path}`").collect()) == [1, 2]
    with pytest.raises(UnsupportedFeatureError, match="rowTracking"):
        table.addFeatureSupport("rowTracking")
    with pytest.raises(OptionError, match=r"DELTA_UNSUPPORTED_FEATURES_IN_CONFIG.*delta\.feature\.nope"):
        table.addFeatureSupport("nope")
    with pytest.raises(UnsupportedFeatureError, match=r"DROP FEATURE deletionVectors .* a reader-writer feature"):
        table.dropFeatureSupport("deletionVectors")
    with pytest.raises(UnsupportedFeatureError, match="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE"):
        table.dropFeatureSupport("appendOnly")
    with pytest.raises(OptionError, match="DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT"):
        sql(f"ALTER TABLE delta.`{path}` DROP FEATURE inCommitTimestamp")
    with pytest.raises(ValueError, match="featureName needs to be a string"):
        table.dropFeatureSupport(7)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="DROP FEATURE"):
        sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('delta.feature.deletionVectors')")
    assert len(DeltaTable(str(path)).history()) == 4  # the refused ones wrote nothing

    checked = tmp_path / "checked"  # a writer feature Delta can drop, once nothing uses it
    write_deltalake(str(checked), pa.table({"id": [1]}))
    DeltaTable(str(checked)).alter.add_constraint({"positive": "id > 0"})
    assert DeltaTable(str(checked)).protocol().min_writer_version == 3
    with pytest.raises(UnsupportedFeatureError, match=r"dropped first: delta\.constraints\.positive"):
        SparkonceDeltaTable.forPath(spark, str(checked)).dropFeatureSupport("checkConstraints")
    DeltaTable(str(checked)).alter.drop_constraint("positive")
    sql(f"ALTER TABLE delta.`{checked}` DROP FEATURE checkConstraints")
    protocol = DeltaTable(str(checked)).protocol()  # appendOnly + invariants remain: legacy writer 2
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert (protocol.reader_features, protocol.writer_features) == (None, None)
    newest = DeltaTable(str(checked)).history(1)[0]
    assert (newest["operation"], newest["operationParameters"]) == (
        "DROP FEATURE",
        {"featureName": "checkConstraints", "truncateHistory": "false"},
    )
    sql(f"INSERT INTO delta.`{checked}` VALUES (-1)")  # no constraint any more
    assert sorted(r.id for r in sql(f"SELECT id FROM delta.`{checked}`").collect()) == [-1, 1]


def test_optimize_zorder_by(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    """Z-ordering puts rows close in every column close in the file: each quarter of the file's rows covers about
    a quadrant of the (x, y) square, where the written order covered all of it."""
    import random

    import pyarrow.parquet as pq

    from sparkonce import DeltaTable as SparkonceDeltaTable

    rng = random.Random(7)
    path = tmp_path / "t"
    points = [(i, rng.random(), rng.random()) for i in range(4000)]
    for part in range(4):
        chunk = points[part * 1000 : (part + 1) * 1000]
        write_deltalake(
            str(path),
            pa.table({"id": [p[0] for p in chunk], "x": [p[1] for p in chunk], "y": [p[2] for p in chunk]}),
            mode="append",
        )

    def quarter_areas(table: pa.Table) -> list[float]:
        rows = table.to_pylist()
        areas = []
        for q in range(4):
            part = rows[q * len(rows) // 4 : (q + 1) * len(rows) // 4]
            xs, ys = [r["x"] for r in part], [r["y"] for r in part]
            areas.append((max(xs) - min(xs)) * (max(ys) - min(ys)))
        return areas

    before = pa.concat_tables(
        [pq.read_table(u.removeprefix("file://")) for u in sorted(DeltaTable(str(path)).file_uris())]
    )
    assert min(quarter_areas(before)) > 0.9  # written in random order: every quarter spans the square
    result = sql(f"OPTIMIZE delta.`{path}` ZORDER BY (x, y)").collect()[0]
    assert (result.metrics.numFilesRemoved, result.metrics.numFilesAdded) == (4, 1)
    (uri,) = DeltaTable(str(path)).file_uris()
    after = pq.read_table(uri.removeprefix("file://"))
    assert sorted(after.column("id").to_pylist()) == list(range(4000))  # the same rows
    assert max(quarter_areas(after)) < 0.35  # each quarter of the file is about one quadrant
    history = DeltaTable(str(path)).history()[0]
    assert (history["operation"], history["operationParameters"]["zOrderBy"]) == ("OPTIMIZE", '["x","y"]')
    log = json.loads((path / "_delta_log" / "00000000000000000004.json").read_text().splitlines()[-1])
    assert log["add"]["dataChange"] is False

    table = SparkonceDeltaTable.forPath(spark, str(path))
    with pytest.raises(TypeError, match="Z-order column must be str"):
        table.optimize().executeZOrderBy("x", 1)  # type: ignore[arg-type]
    partitioned = tmp_path / "p"
    write_deltalake(str(partitioned), pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    with pytest.raises(AnalysisException, match=r"DELTA_ZORDERING_ON_PARTITION_COLUMN.*p is a partition column"):
        SparkonceDeltaTable.forPath(spark, str(partitioned)).optimize().executeZOrderBy("p")
