"""``maxCatchUpDelay``: a native Delta stream holds its next batch back while the table's writer in this process
catches up (``sparkonce.delta.read.pacing``), for at most the delay; and the pipeline's report of a stage catching
up (``sparkonce.pipeline.catch_up.stopped_short``) from real progress of Kafka-like and Delta sources."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from sparkonce.delta.read.pacing import forget_writer, report_writer, writer_catching_up
from sparkonce.pipeline.catch_up import stopped_short

pytestmark = [pytest.mark.spark]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)  # polling interval, bounded by the deadline
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _append(spark: SparkSession, table: Path, start: int, end: int) -> None:
    spark.range(start, end).write.format("delta").mode("append").save(str(table))


def _collecting(
    spark: SparkSession, table: Path, checkpoint: Path, **options: str
) -> tuple[StreamingQuery, list[list[int]]]:
    """A ``"0 seconds"`` Delta stream of ``table`` whose batches' ids are collected, sorted, one list a batch."""
    batches: list[list[int]] = []

    def record(frame: DataFrame, batch_id: int) -> None:
        batches.append(sorted(r["id"] for r in frame.collect()))

    query = (
        spark.readStream.format("delta")
        .options(**options)
        .load(str(table))
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    return query, batches


def test_a_stream_holds_its_batch_while_the_writer_catches_up(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _append(spark, table, 0, 10)
    query, batches = _collecting(spark, table, tmp_path / "ck", maxCatchUpDelay="1 hour")
    try:
        _wait_for(lambda: len(batches) == 1, "the first batch")  # the first batch is never held
        assert batches == [list(range(10))]
        report_writer(str(table), catching_up=True)
        assert writer_catching_up(table.as_uri())  # one table, however it is named
        for i in range(3):
            _append(spark, table, 10 + 5 * i, 15 + 5 * i)
        time.sleep(2.0)  # many triggers of a "0 seconds" query: each holds
        assert batches == [list(range(10))]
        report_writer(str(table), catching_up=False)
        _wait_for(lambda: len(batches) == 2, "the held batch")
        assert batches[1] == list(range(10, 25))  # one batch took the three commits
        _append(spark, table, 25, 26)  # the writer has caught up: no hold
        _wait_for(lambda: len(batches) == 3, "the next batch")
        assert batches[2] == [25]
    finally:
        query.stop()
        forget_writer(str(table))


def test_the_delay_bounds_a_hold_and_available_now_never_holds(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _append(spark, table, 0, 3)
    report_writer(str(table), catching_up=True)
    try:
        query, batches = _collecting(spark, table, tmp_path / "ck", maxCatchUpDelay="1 second")
        try:
            _wait_for(lambda: len(batches) == 1, "the first batch")
            _append(spark, table, 3, 5)
            _wait_for(lambda: len(batches) == 2, "a batch once the delay is over")  # the writer still catches up
            assert batches == [[0, 1, 2], [3, 4]]
        finally:
            query.stop()

        rows: list[int] = []
        held = (
            spark.readStream.format("delta")
            .option("maxCatchUpDelay", "1 hour")
            .option("maxFilesPerTrigger", 1)
            .load(str(table))
            .writeStream.foreachBatch(lambda frame, _: rows.extend(r["id"] for r in frame.collect()))
            .option("checkpointLocation", str(tmp_path / "ck-now"))
            .trigger(availableNow=True)
            .start()
        )
        assert held.awaitTermination(120)  # an availableNow query reads everything without waiting
        assert sorted(rows) == [0, 1, 2, 3, 4]
    finally:
        forget_writer(str(table))


def test_a_batch_its_read_limit_fills_is_never_held(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.range(0, 2).coalesce(1).write.format("delta").save(str(table))
    query, batches = _collecting(spark, table, tmp_path / "ck", maxCatchUpDelay="1 hour", maxFilesPerTrigger="1")
    try:
        _wait_for(lambda: len(batches) == 1, "the first batch")
        report_writer(str(table), catching_up=True)
        for start in (2, 4):  # two commits of one file each
            spark.range(start, start + 2).coalesce(1).write.format("delta").mode("append").save(str(table))
        _wait_for(lambda: len(batches) == 2, "the batch the read limit fills")  # one file, another one waiting
        assert batches[1] == [2, 3]
        time.sleep(1.5)  # the last file reaches the latest table version: that batch is held
        assert len(batches) == 2
        report_writer(str(table), catching_up=False)
        _wait_for(lambda: len(batches) == 3, "the held batch")
        assert batches[2] == [4, 5]
    finally:
        query.stop()
        forget_writer(str(table))


def test_a_stage_stopped_short_when_its_source_had_more(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    for i in range(3):  # table versions 0, 1, 2: one file each
        spark.range(3 * i, 3 * i + 3).coalesce(1).write.format("delta").mode("append").save(str(table))
    query = (
        spark.readStream.format("delta")
        .option("startingVersion", 0)
        .option("maxFilesPerTrigger", 1)
        .load(str(table))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    sources = [p["sources"][0] for p in (json.loads(p.json) for p in query.recentProgress) if p["numInputRows"]]
    short = [stopped_short(json.dumps(s["endOffset"]), json.dumps(s["latestOffset"])) for s in sources]
    assert short == [True, True, False]  # versions 1 and 2 were left for later batches; version 2 was the last

    kafka_end = '{"t":{"0":100,"1":100}}'
    assert stopped_short(kafka_end, '{"t":{"1":250,"0":200}}')
    assert not stopped_short(kafka_end, '{"t":{"1":100,"0":100}}')  # the same offsets in another key order
    assert not stopped_short(kafka_end, None)  # a source that does not report its latest offset
