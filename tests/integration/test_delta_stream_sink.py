"""The Delta streaming sink in-process: output modes, seed 000's inspection steps, commit metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from tests.integration.conftest import write_input_files

pytestmark = pytest.mark.spark

SCHEMA = "id long, device string, value double"


def _stream(spark: SparkSession, inputs: Path):  # type: ignore[no-untyped-def]
    return spark.readStream.format("json").schema(SCHEMA).option("maxFilesPerTrigger", 1).load(str(inputs))


def test_seed_000_example_1_and_inspection(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 000, example 1 with a file source, then its steps 1-4: query id, metadata, history, duplicate check."""
    write_input_files(tmp_path / "in", files=3, rows_per_file=5)
    query = (
        _stream(spark, tmp_path / "in")
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "events"))
    )
    query.awaitTermination()
    metadata_df = spark.read.json(str(tmp_path / "ck" / "metadata"))
    assert metadata_df.select("id").first()[0] == query.id

    from sparkonce import history

    history(spark, str(tmp_path / "events")).createOrReplaceTempView("table_history")
    streaming = spark.sql(
        "SELECT version, operationParameters.queryId AS q, operationParameters.epochId AS e, "
        "operationParameters.outputMode AS m FROM table_history WHERE operation = 'STREAMING UPDATE' ORDER BY version"
    ).collect()
    assert [(r.q, r.e, r.m) for r in streaming] == [(query.id, str(b), "Append") for b in range(3)]
    duplicates = spark.sql(
        "SELECT operationParameters.txnVersion AS epoch_id, operationParameters.txnAppId AS query_id, count(*) AS n "
        "FROM table_history WHERE operation = 'STREAMING UPDATE' "
        "GROUP BY operationParameters.txnVersion, operationParameters.txnAppId HAVING count(*) > 1"
    )
    assert duplicates.count() == 0
    entry = next(e for e in DeltaLog(tmp_path / "events").history() if e.batch_id == 2)
    offsets_log = entry.commit_info["sparkonce"]["offsetsLog"]
    assert offsets_log == (tmp_path / "ck" / "offsets" / "2").read_text()


def test_complete_mode_replaces_the_table_each_batch(spark: SparkSession, tmp_path: Path) -> None:
    write_input_files(tmp_path / "in", files=2, rows_per_file=8)
    counts = _stream(spark, tmp_path / "in").groupBy("device").count()

    def run() -> dict[str, int]:
        query = (
            counts.writeStream.format("delta")
            .outputMode("complete")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "agg"))
        )
        query.awaitTermination()
        return {r.device: r["count"] for r in spark.read.format("delta").load(str(tmp_path / "agg")).collect()}

    assert run() == {f"dev-{d}": 4 for d in range(4)}
    write_input_files(tmp_path / "in", files=1, rows_per_file=8, start=16)
    assert run() == {f"dev-{d}": 6 for d in range(4)}
    modes = {
        e.operation_parameters.get("outputMode") for e in DeltaLog(tmp_path / "agg").history() if e.batch_id is not None
    }
    assert modes == {"Complete"}


def test_update_mode_is_refused_as_delta_does(spark: SparkSession, tmp_path: Path) -> None:
    write_input_files(tmp_path / "in", files=1, rows_per_file=2)
    counts = _stream(spark, tmp_path / "in").groupBy("device").count()
    query = (
        counts.writeStream.format("delta")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "agg"))
    )
    with pytest.raises(StreamingQueryException, match="does not support Update mode"):
        query.awaitTermination()


def test_missing_checkpoint_location_and_stream_txn_options_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    write_input_files(tmp_path / "in", files=1, rows_per_file=2)
    spark.conf.unset("spark.sql.streaming.checkpointLocation")
    with pytest.raises(AnalysisException, match="checkpointLocation must be specified"):
        query = _stream(spark, tmp_path / "in").writeStream.format("delta").start(str(tmp_path / "t"))
        query.awaitTermination()
    with pytest.raises(StreamingQueryException, match=r"OptionError: option 'txnAppId' = 'x': is for batch writes"):
        query = (
            _stream(spark, tmp_path / "in")
            .writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "ck2"))
            .option("txnAppId", "x")
            .option("txnVersion", "1")
            .trigger(availableNow=True)
            .start(str(tmp_path / "t"))
        )
        query.awaitTermination()
    assert not (tmp_path / "t" / "_delta_log").exists()


def test_stream_partition_by_reaches_the_sink(spark: SparkSession, tmp_path: Path) -> None:
    write_input_files(tmp_path / "in", files=2, rows_per_file=8)
    query = (
        _stream(spark, tmp_path / "in")
        .writeStream.format("delta")
        .partitionBy("device")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "t"))
    )
    query.awaitTermination()
    assert sorted(p.name for p in (tmp_path / "t").iterdir() if p.name.startswith("device=")) == [
        f"device=dev-{d}" for d in range(4)
    ]
    actions = [json.loads(line) for line in (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    metadata = next(a["metaData"] for a in actions if "metaData" in a)
    assert metadata["partitionColumns"] == ["device"]
    assert any("add" in a for a in actions)  # table version 0 holds the first batch
