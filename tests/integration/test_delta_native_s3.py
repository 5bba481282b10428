"""The native read path on S3 (:mod:`sparkonce.delta.read.native`): a Delta table on ``s3://`` in the embedded object
store (SeaweedFS), read by Spark's own Parquet scan through Hadoop's S3A file system (the jars of
``sparkonce jars fetch s3a``), with the S3A settings taken from the table's storage options as the relation's
options: the session's Hadoop conf knows nothing of the store.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession

from sparkonce.delta.read.native import NATIVE_READS_CONF, is_native, last_scan, native_frame
from sparkonce.delta.table.options import ReadOptions
from sparkonce.jars import S3A
from sparkonce.storage import table_location
from tests.fixtures_storage import EmbeddedStore

pytestmark = [pytest.mark.spark, pytest.mark.s3]

PARTS = ("a", "b", "c")
APPENDS = 4
ROWS = 25
"""Each append writes one file per partition with ids ``[append * 100, append * 100 + 75)``."""


def _write(uri: str, storage: dict[str, str]) -> None:
    for append in range(APPENDS):
        ids = list(range(append * 100, append * 100 + ROWS * len(PARTS)))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "part": pa.array([PARTS[i % len(PARTS)] for i in ids]),
                "v": pa.array([i / 2 for i in ids], pa.float64()),
            }
        )
        write_deltalake(uri, table, partition_by=["part"], mode="append", storage_options=storage)


def _read(spark: SparkSession, uri: str, storage: dict[str, str]) -> DataFrame:
    return spark.read.format("delta").options(**{f"storage.{k}": v for k, v in storage.items()}).load(uri)


def _rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def _plan(frame: DataFrame) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


@pytest.fixture(scope="module")
def s3_table(object_store: EmbeddedStore) -> tuple[str, dict[str, str]]:
    uri = object_store.unique_uri("native-s3")
    storage = object_store.storage_options
    _write(uri, storage)
    return uri, storage


def test_an_s3_table_reads_through_spark_parquet_scan_over_s3a_like_the_python_source(
    spark: SparkSession, s3_table: tuple[str, dict[str, str]]
) -> None:
    assert S3A.resolved() is not None, "the S3A jars are part of the setup: `sparkonce jars fetch s3a`"
    uri, storage = s3_table
    bucket_and_key = uri.removeprefix("s3://")

    native = _read(spark, uri, storage)
    assert is_native(native)
    plan = _plan(native)
    assert "FileScan parquet" in plan and "BatchScan" not in plan, plan
    native_rows = _rows(native)
    spark.conf.set(NATIVE_READS_CONF, "false")
    try:
        python = _read(spark, uri, storage)
        assert not is_native(python) and "BatchScan delta" in _plan(python)
        python_rows = _rows(python)
    finally:
        spark.conf.unset(NATIVE_READS_CONF)
    assert native_rows == python_rows
    assert len(native_rows) == APPENDS * ROWS * len(PARTS)

    # The files are s3a:// URIs; the S3A settings came with the relation, not from the session's Hadoop conf.
    paths = {r.file_path for r in _read(spark, uri, storage).select("_metadata.file_path").distinct().collect()}
    assert len(paths) == APPENDS * len(PARTS)
    assert all(p.startswith(f"s3a://{bucket_and_key}/part=") for p in paths), paths
    hadoop = spark._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    assert not hadoop.get("fs.s3a.endpoint") and not hadoop.get("fs.s3a.access.key")


def test_partition_pruning_and_data_skipping_on_an_s3_table(
    spark: SparkSession, s3_table: tuple[str, dict[str, str]]
) -> None:
    uri, storage = s3_table
    location = table_location(uri, storage_options=storage)

    pruned = _read(spark, uri, storage).where("part = 'b'")
    assert sorted(r.id for r in pruned.select("id").collect()) == [
        i for a in range(APPENDS) for i in range(a * 100, a * 100 + ROWS * len(PARTS)) if i % len(PARTS) == 1
    ]
    scan = last_scan(location)
    assert scan is not None
    assert (scan.files_total, scan.files_after_partition_pruning, scan.files_read) == (12, 4, 4)

    # ids 200..274 are in append 2's files only: data skipping keeps one file per partition kept
    skipped = _read(spark, uri, storage).where("id >= 210 AND id < 220 AND part <> 'c'")
    assert sorted(r.id for r in skipped.select("id").collect()) == [
        i for i in range(210, 220) if PARTS[i % len(PARTS)] != "c"
    ]
    scan = last_scan(location)
    assert scan is not None
    assert (scan.files_total, scan.files_after_partition_pruning, scan.files_read) == (12, 8, 2)
    assert scan.files_skipped == 6


def test_a_table_on_another_object_store_stays_on_the_python_source(spark: SparkSession) -> None:
    """Spark has no Google Cloud Storage file system here: the native path declines before touching the store."""
    assert native_frame(spark, ReadOptions.parse({"path": "gs://lake/t"})) is None
