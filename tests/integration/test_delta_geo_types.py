"""Geometry and geography columns (issue 41, upstream's ``test_create_table_geo_types``): a table created with them
logs Spark's types (``geometry(OGC:CRS84)``, ``geography(OGC:CRS84, SPHERICAL)``) and Delta's ``geospatial``
feature, as delta-spark does, behind Delta's preview switch, and reads back with those types; rows for them are
refused before any file is written (Delta stores them as Parquet GEOMETRY/GEOGRAPHY columns, which sparkonce's
writers do not write). delta-rs cannot open such a table (it does not know the types)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import UnsupportedFeatureError
from tests.fixtures_delta_oracle import DeltaOracle, table_ref

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
        f"SELECT 1L AS id, ST_GeomFromWKB({POINT}, 4326) AS geom, ST_GeogFromWKB({POINT}) AS geog, "
        f"ST_GeomFromWKB({LINE}, 0) AS any UNION ALL SELECT 2L, NULL, NULL, NULL"
    ).coalesce(1)
    rows.write.format("delta").mode("append").save(str(table))
    _check_written(spark, table, version=1)
    fresh = tmp_path / "new"  # a table the write creates
    rows.write.format("delta").save(str(fresh))
    _check_written(spark, fresh, version=0)


POINT = "X'0101000000000000000000F03F0000000000000040'"
"""WKB of POINT (1 2)."""
LINE = "X'010200000002000000000000000000000000000000000000000000000000000840000000000000F03F'"
"""WKB of LINESTRING (0 0, 3 1)."""


def _check_written(spark: SparkSession, table: Path, *, version: int) -> None:
    """The rows' file holds Parquet GEOMETRY / GEOGRAPHY columns of the columns' CRS, as Spark writes them; its
    ``add`` has no statistics of them (pyarrow writes no Parquet statistics for these columns; delta-spark records
    their null counts); the rows read back natively."""
    actions = [json.loads(line) for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]
    (add,) = [a["add"] for a in actions if "add" in a]
    stats = json.loads(add["stats"])
    assert (stats["nullCount"], stats["minValues"], stats["maxValues"]) == ({"id": 0}, {"id": 1}, {"id": 2})
    parquet = pq.ParquetFile(table / add["path"]).metadata.schema
    logical = [str(parquet.column(i).logical_type) for i in range(1, 4)]
    assert logical == [
        "Geometry(crs=)",  # pyarrow writes Parquet's default CRS, OGC:CRS84, as the empty CRS
        "Geography(crs=, algorithm=spherical)",
        "Geometry(crs=SRID:0)",
    ]
    read = (
        spark.read.format("delta")
        .load(str(table))
        .selectExpr(
            "id",
            "hex(ST_AsBinary(geom)) AS geom",
            "ST_Srid(geom) AS s1",
            "hex(ST_AsBinary(geog)) AS geog",
            "ST_Srid(geog) AS s2",
            "hex(ST_AsBinary(any)) AS any",
            "ST_Srid(any) AS s3",
        )
    )
    assert sorted((r.asDict() for r in read.collect()), key=lambda r: r["id"]) == [
        {"id": 1, "geom": POINT[2:-1], "s1": 4326, "geog": POINT[2:-1], "s2": 4326, "any": LINE[2:-1], "s3": 0},
        {"id": 2, "geom": None, "s1": None, "geog": None, "s2": None, "any": None, "s3": None},
    ]


@pytest.mark.oracle
def test_delta_spark_reads_the_geo_rows_sparkonce_wrote(
    geo_session: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    spark, table = geo_session, tmp_path / "t"
    spark.sql(
        f"SELECT 1L AS id, ST_GeomFromWKB({POINT}, 4326) AS geom, ST_GeogFromWKB({POINT}) AS geog "
        "UNION ALL SELECT 2L, NULL, NULL"
    ).write.format("delta").save(str(table))
    theirs = delta_oracle.sql(
        f"SELECT id, hex(ST_AsBinary(geom)) AS geom, ST_Srid(geom) AS s1, hex(ST_AsBinary(geog)) AS geog, "
        f"ST_Srid(geog) AS s2 FROM {table_ref(table)} ORDER BY id",
        conf=GEO_CONFS,
    )
    assert theirs == [
        {"id": 1, "geom": POINT[2:-1], "s1": 4326, "geog": POINT[2:-1], "s2": 4326},
        {"id": 2, "geom": None, "s1": None, "geog": None, "s2": None},
    ]


def test_geo_columns_need_deltas_preview_switch(spark: SparkSession, tmp_path: Path) -> None:
    spark.conf.set("spark.sql.geospatial.enabled", "true")
    try:
        with pytest.raises(UnsupportedFeatureError, match=r"^\[DELTA_GEOSPATIAL_NOT_SUPPORTED\] Geospatial types"):
            DeltaTable.create(spark).location(str(tmp_path / "t")).addColumn("g", "geometry(4326)").execute()
    finally:
        spark.conf.unset("spark.sql.geospatial.enabled")
    assert not (tmp_path / "t" / "_delta_log").exists()


def test_the_streaming_sink_writes_geo_rows(geo_session: SparkSession, tmp_path: Path) -> None:
    """The sink's files hold the geometry column as Parquet GEOMETRY too; the rows read back natively."""
    spark, table, source = geo_session, tmp_path / "t", tmp_path / "source"
    DeltaTable.create(spark).location(str(table)).addColumn("id", "BIGINT").addColumn(
        "geom", dataType="geometry(4326)"
    ).execute()
    spark.range(3).write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .selectExpr("id", f"CASE WHEN id = 2 THEN NULL ELSE ST_GeomFromWKB({POINT}, 4326) END AS geom")
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert query.exception() is None
    adds = [
        json.loads(line)["add"]
        for path in sorted((table / "_delta_log").glob("*.json"))
        for line in path.read_text().splitlines()
        if '"add"' in line
    ]
    assert adds
    for add in adds:
        assert str(pq.ParquetFile(table / add["path"]).metadata.schema.column(1).logical_type) == "Geometry(crs=)"
    read = spark.read.format("delta").load(str(table)).selectExpr("id", "hex(ST_AsBinary(geom)) AS g", "ST_Srid(geom)")
    assert sorted(tuple(r) for r in read.collect()) == [(0, POINT[2:-1], 4326), (1, POINT[2:-1], 4326), (2, None, None)]
