"""How a ``local_session`` cuts the Arrow batches Spark hands to Python workers: by rows alone
(``sparkonce.spark.ARROW_MAX_BYTES_PER_BATCH``), so Spark does not ask every vector for its size after each row."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from sparkonce.spark import ARROW_MAX_BYTES_PER_BATCH

pytestmark = [pytest.mark.spark]


def test_a_local_sessions_arrow_batches_are_cut_by_rows_alone(spark: SparkSession) -> None:
    key, value = ARROW_MAX_BYTES_PER_BATCH
    assert spark.conf.get(key) == value == str(2**31 - 1)  # the largest value Spark accepts: no per-row size check
    rows_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    assert spark.conf.get(rows_key) == "10000"

    def sizes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counts = [b.num_rows for b in batches]
        yield pa.RecordBatch.from_pydict({"rows": pa.array(counts, pa.int64())})

    # Rows of 10 KB: 10,000 of them (100 MB) are over Spark's own 64 MB default, and still make one batch.
    frame = spark.range(0, 25_000, numPartitions=1).selectExpr("id", "repeat('x', 10000) AS payload")
    counts = [r["rows"] for r in frame.mapInArrow(sizes, "rows long").collect()]
    assert counts == [10_000, 10_000, 5_000]
