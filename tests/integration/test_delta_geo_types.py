"""Geometry and geography columns (issue 41, upstream's ``test_create_table_geo_types``): a table created with them
logs Spark's types (``geometry(OGC:CRS84)``, ``geography(OGC:CRS84, SPHERICAL)``) and Delta's ``geospatial``
feature, as delta-spark does, behind Delta's preview switch, and reads back with those types; rows for them are
refused before any file is written (Delta stores them as Parquet GEOMETRY/GEOGRAPHY columns, which sparkonce's
writers do not write). delta-rs cannot open such a table (it does not know the types)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import SparkSession

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import UnsupportedFeatureError

pytestmark = pytest.mark.spark

GEO_CONFS = {"spark.sql.geospatial.enabled": "true", "spark.databricks.delta.geo.preview.enabled": "true"}


@pytest.fixture
def geo_session(spark: SparkSession) -> Iterator[SparkSession]:
    for key, value in GEO_CONFS.items():
        spark.conf.set(key, value)
    yield spark
    for key in GEO_CONFS:
        spark.conf.unset(key)


def test_a_table_with_geo_columns_logs_sparks_types_and_reads_back(geo_session: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql.types import GeographyType, GeometryType, LongType, StructField, StructType

    spark, table = geo_session, tmp_path / "t"
    created = (
        DeltaTable.create(spark)
        .location(str(table))
        .addColumn("id", "BIGINT")
        .addColumn("geom", dataType="geometry(4326)")
        .addColumn("geog", dataType="geography(4326)")
        .addColumn("any", dataType="geometry(0)")
        .execute()
    )
    actions = [json.loads(line) for line in (table / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    protocol = next(a["protocol"] for a in actions if "protocol" in a)
    assert protocol == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["geospatial"],
        "writerFeatures": ["appendOnly", "geospatial", "invariants"],
    }
    schema = json.loads(next(a["metaData"] for a in actions if "metaData" in a)["schemaString"])
    assert [f["type"] for f in schema["fields"]] == [
        "long",
        "geometry(OGC:CRS84)",
        "geography(OGC:CRS84, SPHERICAL)",
        "geometry(SRID:0)",
    ]
    want = StructType(
        [
            StructField("id", LongType()),
            StructField("geom", GeometryType(4326)),
            StructField("geog", GeographyType(4326)),
            StructField("any", GeometryType(0)),
        ]
    )
    assert created.toDF().schema == want
    assert DeltaTable.forPath(spark, str(table)).toDF().count() == 0
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    assert detail.tableFeatures == ["appendOnly", "geospatial", "invariants"]

    rows = spark.sql(
        "SELECT 1L AS id, ST_GeomFromWKB(X'0101000000000000000000F03F0000000000000040', 4326) AS geom, "
        "CAST(NULL AS GEOGRAPHY(4326)) AS geog, CAST(NULL AS GEOMETRY(0)) AS any"
    )
    refused = r"UnsupportedFeatureError: writing rows of geometry/geography column\(s\) \['geom', 'geog', 'any'\] into "
    with pytest.raises(AnalysisException, match=refused):  # the write's planning refuses, on the driver
        rows.write.format("delta").mode("append").save(str(table))
    assert sorted(p.name for p in (table / "_delta_log").iterdir() if p.suffix == ".json") == [f"{0:020d}.json"]
    assert [p for p in table.rglob("*.parquet")] == []
    fresh = tmp_path / "new"  # a table the write would create: its tasks refuse the rows before writing a file
    with pytest.raises(PythonException, match=refused):  # the executor's task refuses
        rows.write.format("delta").save(str(fresh))
    assert not (fresh / "_delta_log").exists() and list(fresh.rglob("*.parquet")) == []


def test_geo_columns_need_deltas_preview_switch(spark: SparkSession, tmp_path: Path) -> None:
    spark.conf.set("spark.sql.geospatial.enabled", "true")
    try:
        with pytest.raises(UnsupportedFeatureError, match=r"^\[DELTA_GEOSPATIAL_NOT_SUPPORTED\] Geospatial types"):
            DeltaTable.create(spark).location(str(tmp_path / "t")).addColumn("g", "geometry(4326)").execute()
    finally:
        spark.conf.unset("spark.sql.geospatial.enabled")
    assert not (tmp_path / "t" / "_delta_log").exists()
