"""sparkonce.history: DESCRIBE HISTORY as a DataFrame, and seed 000's duplicate-epoch checks run on it as SQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import sparkonce.delta
from sparkonce.errors import OptionError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

# Seed 000, "Checking for duplicate epochs" and example 2, on a temp view instead of DESCRIBE HISTORY.
SAME_QUERY_DUPLICATES = """
SELECT operationParameters.txnVersion AS epoch_id, operationParameters.txnAppId AS query_id, count(*) AS n
FROM table_history
WHERE operation = 'STREAMING UPDATE'
GROUP BY operationParameters.txnVersion, operationParameters.txnAppId
HAVING count(*) > 1
"""
EPOCH_BY_MANY_QUERIES = """
SELECT operationParameters.txnVersion AS epoch,
       collect_set(operationParameters.txnAppId) AS query_ids,
       size(collect_set(operationParameters.txnAppId)) AS unique_query_count
FROM table_history
WHERE operation = 'STREAMING UPDATE'
GROUP BY operationParameters.txnVersion
HAVING size(collect_set(operationParameters.txnAppId)) > 1
"""


def _stream_once(spark: SparkSession, source: Path, target: Path, checkpoint: Path) -> str:
    """Stream every table version of ``source`` into ``target``, one batch per table version; return the query id."""
    query = (
        spark.readStream.format("delta")
        .option("startingVersion", 0)
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


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source"
    for v in range(2):
        write_deltalake(str(path), pa.table({"id": [v * 10 + i for i in range(10)]}), mode="append")
    return path


def _checks(spark: SparkSession, target: Path) -> tuple[int, list[tuple[str, int]]]:
    sparkonce.history(spark, target).createOrReplaceTempView("table_history")
    same_query = spark.sql(SAME_QUERY_DUPLICATES).count()
    many = [(r.epoch, r.unique_query_count) for r in spark.sql(EPOCH_BY_MANY_QUERIES).orderBy("epoch").collect()]
    return same_query, many


def test_healthy_stream_is_not_flagged(spark: SparkSession, source: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    query_id = _stream_once(spark, source, target, tmp_path / "ck")
    history = sparkonce.history(spark, target)
    assert history.columns == [  # Delta's DESCRIBE HISTORY columns, in Delta's order, then sparkonce's two
        "version",
        "timestamp",
        "userId",
        "userName",
        "operation",
        "operationParameters",
        "job",
        "notebook",
        "clusterId",
        "readVersion",
        "isolationLevel",
        "isBlindAppend",
        "operationMetrics",
        "userMetadata",
        "engineInfo",
        "txnAppId",
        "txnVersion",
    ]
    rows = history.collect()
    streaming = [r for r in rows if r.operation == "STREAMING UPDATE"]
    assert [r.txnVersion for r in streaming] == [1, 0]  # newest first
    assert all(r.txnAppId == query_id for r in streaming)
    params = streaming[0].operationParameters
    assert (params["queryId"], params["epochId"], params["txnAppId"], params["txnVersion"]) == (
        query_id,
        "1",
        query_id,
        "1",
    )
    assert params["outputMode"] == "Append"
    assert rows[0].version == max(r.version for r in rows) and rows[0].timestamp is not None
    assert _checks(spark, target) == (0, [])
    assert [r.version for r in sparkonce.history(spark, target, limit=1).collect()] == [rows[0].version]


def test_same_batch_ids_from_two_query_ids_are_flagged(spark: SparkSession, source: Path, tmp_path: Path) -> None:
    """The seed 000/004 failure: a lost checkpoint makes a new query id rewrite the same batch ids."""
    target = tmp_path / "target"
    first = _stream_once(spark, source, target, tmp_path / "ck")
    second = _stream_once(spark, source, target, tmp_path / "ck-recreated")
    assert first != second
    assert _checks(spark, target) == (0, [("0", 2), ("1", 2)])


def test_bad_arguments(spark: SparkSession, tmp_path: Path, source: Path) -> None:
    missing = re.escape(str(tmp_path / "nothing"))
    with pytest.raises(TableNotFoundError, match=f"^{missing} is not a Delta table: no _delta_log folder$"):
        sparkonce.history(spark, tmp_path / "nothing")
    with pytest.raises(OptionError, match="limit"):
        sparkonce.history(spark, source, limit=0)
