"""Spark's catalog sees sparkonce's tables on an object-store warehouse (issue: the catalog, item 5).

The warehouse is a prefix of the embedded S3 store (SeaweedFS); the endpoint and keys reach sparkonce through the
session's ``spark.sparkonce.storage.*`` settings only, and Spark reads the tables natively over S3A. A table made in
this session is seen, by the catalog API, views and SQL, from a session made by ``newSession()`` and from a second
driver process started later with the same warehouse and settings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkonce.delta.table.catalog import WAREHOUSE_CONF
from tests.fixtures_storage import EmbeddedStore
from tests.integration.conftest import later_driver

pytestmark = [pytest.mark.spark, pytest.mark.s3]

STORAGE_PREFIX = "spark.sparkonce.storage."


def _ids(spark: SparkSession, query: str) -> list[int]:
    return sorted(r[0] for r in spark.sql(query).collect())


@pytest.fixture
def warehouse(spark: SparkSession, object_store: EmbeddedStore) -> Iterator[str]:
    """An S3 warehouse for this test, with the store's options in the session's settings (unset afterwards)."""
    import sparkonce

    uri = object_store.unique_uri("warehouse")
    conf = {f"{STORAGE_PREFIX}{k}": v for k, v in object_store.storage_options.items()}
    conf[WAREHOUSE_CONF] = uri
    for key, value in conf.items():
        spark.conf.set(key, value)
    sparkonce.register(spark)
    try:
        yield uri
    finally:
        for name in ("s3_events", "s3_v2"):
            spark.sql(f"DROP TABLE IF EXISTS {name}")
        for key in conf:
            spark.conf.unset(key)
        sparkonce.register(spark)


def test_save_as_table_catalog_api_views_time_travel_and_writeto_on_an_s3_warehouse(
    spark: SparkSession, warehouse: str, object_store: EmbeddedStore
) -> None:
    spark.range(5).write.format("delta").saveAsTable("s3_events")
    assert [t.name for t in spark.catalog.listTables() if t.name == "s3_events"] == ["s3_events"]
    assert spark.catalog.tableExists("s3_events") and spark.catalog.tableExists("default.s3_events")
    assert [c.name for c in spark.catalog.listColumns("s3_events")] == ["id"]
    described = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE EXTENDED s3_events").collect()}
    assert described["Provider"] == "delta" and described["Location"].rstrip("/") == f"{warehouse}/s3_events"
    # Spark's entry carries the S3A settings its scan needs; where Spark shows them, it redacts the keys
    shown = spark.sql("SHOW CREATE TABLE s3_events").collect()[0][0]
    assert object_store.storage_options["AWS_SECRET_ACCESS_KEY"] not in shown and "*********" in shown

    spark.sql("CREATE OR REPLACE TEMP VIEW s3_view AS SELECT * FROM s3_events WHERE id > 2")
    assert _ids(spark, "SELECT id FROM s3_view") == [3, 4]
    spark.range(5, 7).write.format("delta").mode("append").saveAsTable("s3_events")
    assert _ids(spark, "SELECT id FROM s3_view") == [3, 4, 5, 6]  # the view reads the table as it is now

    assert _ids(spark, "SELECT id FROM s3_events VERSION AS OF 0") == [0, 1, 2, 3, 4]
    with pytest.raises(Exception, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        spark.sql("SELECT * FROM s3_events TIMESTAMP AS OF '2099-01-01'").collect()
    with pytest.raises(Exception, match="DELTA_VERSION_NOT_FOUND"):
        spark.sql("SELECT * FROM s3_events VERSION AS OF 7").collect()

    spark.range(4).selectExpr("id", "id % 2 AS p").writeTo("s3_v2").using("delta").partitionedBy("p").create()
    assert spark.catalog.tableExists("s3_v2")
    spark.range(4, 6).selectExpr("id", "id % 2 AS p").writeTo("s3_v2").append()
    spark.range(10, 11).selectExpr("id", "id % 2 AS p").writeTo("s3_v2").overwrite(F.col("p") == 0)
    assert _ids(spark, "SELECT id FROM s3_v2") == [1, 3, 5, 10]
    detail = spark.sql("DESCRIBE DETAIL s3_v2").collect()[0]
    assert detail.location.rstrip("/") == f"{warehouse}/s3_v2" and detail.partitionColumns == ["p"]
    spark.sql("CREATE OR REPLACE TEMP VIEW s3_v2_view AS SELECT * FROM s3_v2 WHERE p = 1")
    spark.range(11, 13).selectExpr("id", "id % 2 AS p").writeTo("s3_v2").overwritePartitions()
    assert _ids(spark, "SELECT id FROM s3_v2_view") == [11]


def test_a_table_made_in_one_session_is_seen_by_a_new_session_and_a_driver_started_later(
    spark: SparkSession, warehouse: str, object_store: EmbeddedStore
) -> None:
    spark.range(5).write.format("delta").saveAsTable("s3_events")

    other = spark.newSession()  # its own conf, temp views and session catalog; sparkonce registers it too
    assert other.conf.get(WAREHOUSE_CONF) == warehouse
    assert other.catalog.tableExists("s3_events")
    assert [t.name for t in other.catalog.listTables() if t.name == "s3_events"] == ["s3_events"]
    other.sql("CREATE OR REPLACE TEMP VIEW other_view AS SELECT * FROM s3_events WHERE id < 2")
    spark.range(-2, 0).write.format("delta").mode("append").saveAsTable("s3_events")  # written in the parent
    assert _ids(other, "SELECT id FROM other_view") == [-2, -1, 0, 1]
    other.range(20, 21).write.format("delta").mode("append").saveAsTable("s3_events")  # written in the child
    assert _ids(spark, "SELECT id FROM s3_events") == [-2, -1, 0, 1, 2, 3, 4, 20]
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("SELECT * FROM other_view")  # temporary views stay the child's, as in Spark

    conf = {f"{STORAGE_PREFIX}{k}": v for k, v in object_store.storage_options.items()}
    conf[WAREHOUSE_CONF] = warehouse
    seen = later_driver(conf, "s3_events")
    assert seen == {
        "tables": ["s3_events"],
        "exists": True,
        "before": [3, 4, 20],
        "after": [3, 4, 10, 11, 20],
        "provider": "delta",
        "location": f"{warehouse}/s3_events",
    }
    assert _ids(spark, "SELECT id FROM s3_events") == [-2, -1, 0, 1, 2, 3, 4, 10, 11, 20]
