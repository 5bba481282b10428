"""How ``sparkonce run`` reads its queries' progress: only the updates it has not seen, each converted once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sparkonce.pipeline.run import _new_progress, _progress_marker

pytestmark = [pytest.mark.spark]


def test_only_the_progress_after_the_last_seen_is_read(spark: SparkSession, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):
        (source / f"{i}.json").write_text(f'{{"a": {i}}}\n')
    query = (
        spark.readStream.schema("a int")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    everything = [json.loads(p.json) for p in query.recentProgress]  # PySpark's way: every update, converted
    assert [p["batchId"] for p in everything] == [0, 1, 2]

    assert _new_progress(query, None) == everything
    assert _new_progress(query, _progress_marker(everything[0])) == everything[1:]
    assert _new_progress(query, _progress_marker(everything[2])) == []
