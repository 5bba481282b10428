"""Issue 24: Delta-JVM-written tables with change data files read as delta-rs's ``load_cdf`` reads them.

The fixtures (tests/fixtures/delta-rs-tables, copied from delta-rs's test data, see tests/fixtures/SOURCES.md) were
written by Delta Lake 3.0.0 on Spark 3.5 (``cdf-table``, partitioned; ``cdf-table-non-partitioned``), Delta Lake
4.3.1 with in-commit timestamps (``cdc_ict_table``) and Databricks Runtime 16 with deletion vectors
(``cdf-table-with-cdc-and-dvs``): UPDATEs, DELETEs and MERGEs with ``_change_data/`` files. The batch feed from
table version 0 must equal ``load_cdf`` row for row (every column, ``_commit_version`` a long and
``_commit_timestamp`` a timestamp), and a feed stream over the table (``maxFilesPerTrigger`` 3: change data
commits whole, appends split) must deliver the same rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, TimestampType

from tests.delta_helpers import delta_rs_changes

pytestmark = pytest.mark.spark

TABLES = ["cdf-table", "cdf-table-non-partitioned", "cdf-table-with-cdc-and-dvs", "cdc_ict_table"]
Row = tuple[tuple[str, Any], ...]


def _load_cdf(table: Path) -> list[Row]:
    return sorted(tuple(sorted(r.items())) for r in delta_rs_changes(table, 0))


def _rows(frame: Any) -> list[Row]:
    return sorted(tuple(sorted(r.asDict().items())) for r in frame.collect())


@pytest.mark.parametrize("name", TABLES)
def test_a_delta_jvm_table_reads_and_streams_as_delta_rs_reads_it(
    spark: SparkSession, tmp_path: Path, fixtures_dir: Path, name: str
) -> None:
    table = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-rs-tables" / name, table)
    expected = _load_cdf(table)
    assert {dict(r)["_change_type"] for r in expected} >= {"insert", "update_preimage", "update_postimage", "delete"}

    batch = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(str(table))
    types = {f.name: f.dataType for f in batch.schema.fields}
    assert (types["_change_type"], types["_commit_version"], types["_commit_timestamp"]) == (
        StringType(),
        LongType(),
        TimestampType(),
    )
    assert _rows(batch) == expected

    query_name = "feed_" + name.replace("-", "_")
    query = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .option("maxFilesPerTrigger", 3)
        .load(str(table))
        .writeStream.format("memory")
        .queryName(query_name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert _rows(spark.table(query_name)) == expected
    spark.catalog.dropTempView(query_name)
