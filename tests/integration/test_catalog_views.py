"""Spark's catalog sees sparkonce's tables, and views over them keep working (issue: the catalog).

Each test names the row of the issue's table it checks. Tables by name are mirrored into Spark's session catalog
(:mod:`sparkonce.delta.spark_catalog`) and resolve to the native read, whose file index reads the Delta log at every
query: a view answers against the table's current state, as delta-spark's do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkonce.errors import SqlError
from sparkonce.sql.runner import DeltaSql
from tests.integration.conftest import later_driver

pytestmark = pytest.mark.spark


def _ids(spark: SparkSession, query: str) -> list[int]:
    return sorted(r[0] for r in spark.sql(query).collect())


@pytest.fixture
def events(spark: SparkSession, sql: DeltaSql) -> str:
    """``events``: ids 0..4, made with ``saveAsTable`` as the issue's user did."""
    spark.range(5).write.format("delta").saveAsTable("events")
    return "events"


def test_the_catalog_api_lists_and_describes_a_sparkonce_table(spark: SparkSession, events: str) -> None:
    """Rows: listTables, tableExists (both were empty / False)."""
    tables = [t for t in spark.catalog.listTables() if t.name == "events"]
    assert len(tables) == 1 and tables[0].isTemporary is False and tables[0].namespace == ["default"]
    assert spark.catalog.tableExists("events")
    assert spark.catalog.tableExists("default.events")
    assert spark.catalog.getTable("events").name == "events"
    assert [c.name for c in spark.catalog.listColumns("events")] == ["id"]
    assert not any(t.name.startswith("__sparkonce_") for t in spark.catalog.listTables())


def test_describe_show_columns_cache_refresh_and_drop(spark: SparkSession, events: str, sql: DeltaSql) -> None:
    """Rows: DESCRIBE TABLE and CACHE TABLE (both were TABLE_OR_VIEW_NOT_FOUND)."""
    described = {r.col_name: r.data_type for r in sql("DESCRIBE TABLE EXTENDED events").collect()}
    assert described["id"] == "bigint"
    assert described["Provider"] == "delta" and described["Type"] == "MANAGED"  # saveAsTable chose its place
    assert described["Location"].rstrip("/").endswith("warehouse/events")
    assert [r[0] for r in sql("SHOW COLUMNS IN events").collect()] == ["id"]
    sql("CACHE TABLE events")
    assert spark.catalog.isCached("events")
    assert _ids(spark, "SELECT id FROM events") == [0, 1, 2, 3, 4]
    sql("UNCACHE TABLE events")
    sql("REFRESH TABLE events")
    spark.catalog.refreshTable("events")
    assert _ids(spark, "SELECT id FROM events") == [0, 1, 2, 3, 4]
    sql("DROP TABLE events")
    assert not spark.catalog.tableExists("events")


def test_a_temp_view_over_a_name_answers_with_the_tables_current_state(
    spark: SparkSession, events: str, sql: DeltaSql
) -> None:
    """Row: CREATE OR REPLACE TEMP VIEW over a name, queried later (failed with TABLE_OR_VIEW_NOT_FOUND)."""
    sql("CREATE OR REPLACE TEMP VIEW v AS SELECT * FROM events WHERE id > 1")
    assert _ids(spark, "SELECT id FROM v") == [2, 3, 4]
    assert spark.sql("SELECT count(*) FROM v").collect()[0][0] == 3
    spark.range(5, 7).write.format("delta").mode("append").saveAsTable("events")
    assert _ids(spark, "SELECT id FROM v") == [2, 3, 4, 5, 6]
    sql("MERGE INTO events t USING (SELECT 2 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert _ids(spark, "SELECT id FROM v") == [3, 4, 5, 6]
    spark.range(10, 12).write.format("delta").mode("overwrite").saveAsTable("events")
    assert _ids(spark, "SELECT id FROM v") == [10, 11]
    sql("ALTER TABLE events ADD COLUMNS (note STRING)")  # a schema change: the view keeps its own columns
    sql("INSERT INTO events VALUES (12, 'n')")
    assert _ids(spark, "SELECT id FROM v") == [10, 11, 12]
    assert spark.table("v").columns == ["id"]


def test_views_over_paths_joins_and_dataframes_keep_working(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    left, right = str(tmp_path / "left"), str(tmp_path / "right")
    spark.range(4).selectExpr("id", "id * 10 AS v").write.format("delta").save(left)
    spark.range(2, 6).selectExpr("id", "'r' AS w").write.format("delta").save(right)
    sql(f"CREATE OR REPLACE TEMP VIEW by_path AS SELECT * FROM delta.`{left}`")
    sql(
        f"CREATE OR REPLACE TEMP VIEW joined AS SELECT l.id, l.v, r.w FROM delta.`{left}` l "
        f"JOIN delta.`{right}` r ON l.id = r.id"
    )
    spark.read.format("delta").load(right).createOrReplaceTempView("by_frame")
    spark.range(4, 6).selectExpr("id", "id * 10 AS v").write.format("delta").mode("append").save(left)
    spark.range(6, 7).selectExpr("id", "'r' AS w").write.format("delta").mode("append").save(right)
    assert _ids(spark, "SELECT id FROM by_path") == [0, 1, 2, 3, 4, 5]
    assert _ids(spark, "SELECT id FROM joined") == [2, 3, 4, 5]
    assert _ids(spark, "SELECT id FROM by_frame") == [2, 3, 4, 5, 6]


def test_a_persistent_view_over_a_name_works_and_over_a_path_is_refused_at_creation(
    spark: SparkSession, events: str, sql: DeltaSql, tmp_path: Path
) -> None:
    sql("CREATE OR REPLACE VIEW kept AS SELECT id FROM events WHERE id < 3")
    spark.range(-1, 0).write.format("delta").mode("append").saveAsTable("events")
    assert _ids(spark, "SELECT id FROM kept") == [-1, 0, 1, 2]
    path = str(tmp_path / "p")
    spark.range(2).write.format("delta").save(path)
    with pytest.raises(
        SqlError, match=r"\[INVALID_TEMP_OBJ_REFERENCE\] A persistent view cannot read a Delta table by"
    ):
        sql(f"CREATE VIEW over_path AS SELECT * FROM delta.`{path}`")  # refused when made, never later
    sql("DROP VIEW kept")


def test_a_global_temp_view_over_a_name(spark: SparkSession, events: str, sql: DeltaSql) -> None:
    sql("CREATE OR REPLACE GLOBAL TEMP VIEW shared_events AS SELECT * FROM events WHERE id >= 3")
    spark.range(7, 8).write.format("delta").mode("append").saveAsTable("events")
    assert _ids(spark, "SELECT id FROM global_temp.shared_events") == [3, 4, 7]


def test_named_databases(spark: SparkSession, sql: DeltaSql) -> None:
    sql("CREATE DATABASE IF NOT EXISTS sales")
    sql("CREATE TABLE sales.orders (id BIGINT, region STRING) USING delta PARTITIONED BY (region)")
    sql("INSERT INTO sales.orders VALUES (1, 'eu'), (2, 'us')")
    assert spark.catalog.tableExists("sales.orders")
    assert [t.name for t in spark.catalog.listTables("sales") if not t.isTemporary] == ["orders"]
    sql("USE sales")
    try:
        assert _ids(spark, "SELECT id FROM orders WHERE region = 'us'") == [2]
        sql("CREATE OR REPLACE TEMP VIEW eu AS SELECT * FROM orders WHERE region = 'eu'")
        sql("INSERT INTO orders VALUES (3, 'eu')")
        assert _ids(spark, "SELECT id FROM eu") == [1, 3]
    finally:
        sql("USE default")
    sql("DROP TABLE sales.orders")
    assert not spark.catalog.tableExists("sales.orders")


def test_a_table_made_in_one_session_is_seen_by_a_session_started_later(
    spark: SparkSession, events: str, sql: DeltaSql, tmp_path: Path
) -> None:
    """Item 5: a second driver process, started after the table was made, sees it through the catalog API, views
    and SQL (sparkonce's catalog is mirrored into each session's catalog when sparkonce registers)."""
    warehouse = tmp_path / "warehouse"
    seen = later_driver({"spark.sparkonce.warehouse.dir": str(warehouse)}, "events")
    assert seen == {
        "tables": ["events"],
        "exists": True,
        "before": [3, 4],
        "after": [3, 4, 10, 11],
        "provider": "delta",
        "location": f"file:{warehouse / 'events'}",
    }
    assert _ids(spark, "SELECT id FROM events") == [0, 1, 2, 3, 4, 10, 11]


def test_dataframe_writer_v2_creates_replaces_and_appends(spark: SparkSession, sql: DeltaSql) -> None:
    """Row: writeTo(...).using("delta").create() (failed with "option 'path' is required")."""
    spark.range(3).selectExpr("id", "id % 2 AS p").writeTo("e3").using("delta").partitionedBy("p").tableProperty(
        "team", "a"
    ).create()
    assert spark.catalog.tableExists("e3")
    assert _ids(spark, "SELECT id FROM e3") == [0, 1, 2]
    detail = sql("DESCRIBE DETAIL e3").collect()[0]
    assert detail.partitionColumns == ["p"] and detail.properties["team"] == "a"
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        spark.range(1).selectExpr("id", "id AS p").writeTo("e3").using("delta").create()
    spark.range(3, 5).selectExpr("id", "id % 2 AS p").writeTo("e3").append()  # no provider: the catalog's table
    assert _ids(spark, "SELECT id FROM e3") == [0, 1, 2, 3, 4]
    spark.range(7, 8).selectExpr("id", "id % 2 AS p").writeTo("e3").using("delta").createOrReplace()
    assert _ids(spark, "SELECT id FROM e3") == [7]
    spark.range(8, 9).selectExpr("id", "id % 2 AS p").writeTo("e3").using("delta").replace()
    assert _ids(spark, "SELECT id FROM e3") == [8]
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.range(1).writeTo("missing_v2").append()
    spark.range(9, 10).selectExpr("id", "id % 2 AS p").writeTo("e3").overwrite(F.col("id") > 0)  # replaceWhere
    assert _ids(spark, "SELECT id FROM e3") == [9]


def test_time_travel_past_the_latest_commit_is_refused(spark: SparkSession, events: str, sql: DeltaSql) -> None:
    """Row: TIMESTAMP AS OF '2099-01-01' (answered with the latest version; Delta refuses). Item 4: the other edges
    with Delta's error classes: a timestamp before the earliest commit, a version that does not exist."""
    with pytest.raises(Exception, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        sql("SELECT * FROM events TIMESTAMP AS OF '2099-01-01'").collect()
    with pytest.raises(Exception, match="DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION"):
        sql("SELECT * FROM events TIMESTAMP AS OF '1999-01-01'").collect()
    with pytest.raises(Exception, match="DELTA_VERSION_NOT_FOUND"):
        sql("SELECT * FROM events VERSION AS OF 5").collect()
    assert _ids(spark, "SELECT id FROM events VERSION AS OF 0") == [0, 1, 2, 3, 4]


def test_describe_table_gives_delta_sparks_rows(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    """Delta's test_ddls: DESCRIBE TABLE of a partitioned table ends with its partition columns. The rows are
    delta-spark 4.4's (Spark's for its V2 table: the table's own column order, then the partitioning; EXTENDED adds
    the catalog, namespace, name, type, comment, location, provider and properties), compared with the oracle's."""
    sql("CREATE TABLE part (a BIGINT, b STRING NOT NULL COMMENT 'bee') USING delta PARTITIONED BY (a) COMMENT 'p'")
    partitioning = [
        ("a", "bigint", None),
        ("b", "string", "bee"),
        ("# Partition Information", "", ""),
        ("# col_name", "data_type", "comment"),
        ("a", "bigint", None),
    ]
    assert [tuple(r) for r in sql("DESCRIBE TABLE part").collect()] == partitioning
    location = f"file:{tmp_path / 'warehouse' / 'part'}"
    assert [tuple(r) for r in sql("DESC FORMATTED part").collect()] == [
        *partitioning,
        ("", "", ""),
        ("# Detailed Table Information", "", ""),
        ("Catalog", "spark_catalog", ""),
        ("Namespace", "default", ""),
        ("Database", "default", ""),
        ("Table", "part", ""),
        ("Type", "MANAGED", ""),
        ("Comment", "p", ""),
        ("Location", location, ""),
        ("Provider", "delta", ""),
        ("Is_managed_location", "true", ""),
        ("Table Properties", "[delta.minReaderVersion=1,delta.minWriterVersion=2]", ""),
    ]
    assert [f.name for f in spark.sql("SELECT * FROM part").schema.fields] == ["a", "b"]
    assert [tuple(r) for r in sql("DESCRIBE TABLE part b").collect()] == [  # Spark's answer, as delta-spark's
        ("col_name", "b"),
        ("data_type", "string"),
        ("comment", "bee"),
    ]

    outside = str(tmp_path / "outside")
    spark.range(2).write.format("delta").save(outside)
    sql(f"CREATE TABLE ext USING delta LOCATION '{outside}'")
    rows = {r.col_name: r.data_type for r in sql("DESCRIBE TABLE EXTENDED ext").collect()}
    assert (rows["Type"], rows["Location"], "Is_managed_location" in rows) == ("EXTERNAL", f"file:{outside}", False)
    by_path = [tuple(r) for r in sql(f"DESCRIBE TABLE EXTENDED delta.`{outside}`").collect()]
    assert by_path[3:9] == [  # as delta-spark names a table by path
        ("Catalog", "spark_catalog", ""),
        ("Namespace", "delta", ""),
        ("Database", "delta", ""),
        ("Table", outside, ""),
        ("Type", "MANAGED", ""),
        ("Location", outside, ""),
    ]
    sql("CREATE TABLE clustered (a BIGINT, b STRING) USING delta CLUSTER BY (b)")
    properties = {r.col_name: r.data_type for r in sql("DESCRIBE TABLE EXTENDED clustered").collect()}
    assert properties["Table Properties"].startswith('[clusteringColumns=[["b"]],delta.feature.appendOnly=supported,')


def test_rename_to_moves_a_managed_table_and_keeps_an_external_one_in_place(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """Delta's test_ddls: ALTER TABLE t RENAME TO t2 (was refused)."""
    warehouse = tmp_path / "warehouse"
    spark.range(3).write.format("delta").saveAsTable("events")
    sql("CREATE TABLE taken (id BIGINT) USING delta")
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        sql("ALTER TABLE events RENAME TO taken")
    assert _ids(spark, "SELECT id FROM events") == [0, 1, 2]

    sql("ALTER TABLE events RENAME TO events2")
    assert _ids(spark, "SELECT id FROM events2") == [0, 1, 2]
    assert (warehouse / "events2" / "_delta_log").is_dir() and not (warehouse / "events").exists()
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("SELECT * FROM events")
    assert not spark.catalog.tableExists("events") and spark.catalog.tableExists("events2")
    spark.range(2).write.format("delta").saveAsTable("events")  # the old name is free again, at its own place
    assert _ids(spark, "SELECT id FROM events") == [0, 1]

    outside = tmp_path / "outside"
    spark.range(4).write.format("delta").save(str(outside))
    sql(f"CREATE TABLE ext USING delta LOCATION '{outside}'")
    sql("ALTER TABLE ext RENAME TO ext2")
    assert _ids(spark, "SELECT id FROM ext2") == [0, 1, 2, 3]
    assert (outside / "_delta_log").is_dir()
    assert sql("DESCRIBE DETAIL ext2").collect()[0].location.rstrip("/").endswith("outside")


def test_set_location_points_a_name_at_a_table_of_the_same_schema(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """Delta's test_ddls: ALTER TABLE t SET LOCATION (was refused); Delta's schema check."""
    sql("CREATE TABLE t (b STRING, a BIGINT) USING delta")
    other = tmp_path / "other"
    spark.createDataFrame([("x", 1)], "b STRING, a BIGINT").write.format("delta").save(str(other))
    different = tmp_path / "different"
    spark.createDataFrame([(1,)], "a BIGINT").write.format("delta").save(str(different))
    with pytest.raises(SqlError, match="DELTA_SET_LOCATION_SCHEMA_MISMATCH"):
        sql(f"ALTER TABLE t SET LOCATION '{different}'")
    with pytest.raises(SqlError, match="DELTA_MISSING_DELTA_TABLE"):
        sql(f"ALTER TABLE t SET LOCATION '{tmp_path / 'missing'}'")
    assert spark.sql("SELECT count(*) FROM t").collect()[0][0] == 0

    sql(f"ALTER TABLE t SET LOCATION '{other}'")
    assert [tuple(r) for r in spark.sql("SELECT * FROM t").collect()] == [("x", 1)]
    sql("DROP TABLE t")  # the table is external now: its files stay
    assert (other / "_delta_log").is_dir()

    sql(f"CREATE TABLE u USING delta LOCATION '{other}'")
    spark.conf.set("spark.databricks.delta.alterLocation.bypassSchemaCheck", "true")
    try:
        sql(f"ALTER TABLE u SET LOCATION '{different}'")
    finally:
        spark.conf.unset("spark.databricks.delta.alterLocation.bypassSchemaCheck")
    assert _ids(spark, "SELECT a FROM u") == [1]
