"""The retention guard (issue 39): a stream paused while log cleanup and VACUUM run with zero retention on its source
table resumes exactly once, because it registered as a reader of the table; without the guard (its registration
forgotten, or ``vacuum(force=True)``) the same steps make the restarted stream fail, or, reading with
``spark.sql.files.ignoreMissingFiles``, lose rows (delta-io/delta#1728, #1945)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import StreamingQueryException

import sparkonce
from sparkonce.delta.txn.readers import forget_reader
from tests.integration.conftest import delta_ids, registered_reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

DAY = 86_400


def _append(spark: SparkSession, table: Path, first: int, rows: int = 10) -> None:
    spark.range(first, first + rows).repartition(1).write.format("delta").mode("append").save(str(table))


def _run(spark: SparkSession, source: Path, sink: Path, checkpoint: Path) -> str:
    """Stream ``source`` into ``sink`` until it has read everything there, then stop; the query id."""
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .start(str(sink))
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return str(query.id)


def _log_versions(table: Path) -> list[int]:
    return sorted({int(p.name[:20]) for p in (table / "_delta_log").iterdir() if p.name[:20].isdigit()})


@pytest.mark.parametrize("guard", ["registered", "forgotten", "vacuum-force"])
def test_a_paused_stream_and_zero_retention(spark: SparkSession, tmp_path: Path, guard: str) -> None:
    source, sink, checkpoint = tmp_path / "source", tmp_path / "sink", tmp_path / "checkpoint"
    spark.range(0, 10).repartition(1).write.format("delta").option("delta.checkpointInterval", "2").option(
        "delta.logRetentionDuration", "interval 0 days"
    ).option("delta.deletedFileRetentionDuration", "interval 0 hours").save(str(source))
    for first in (10, 20):
        _append(spark, source, first)  # table versions 1, 2 (a checkpoint)
    query_id = _run(spark, source, sink, checkpoint)
    reader = registered_reader(source, query_id, 2)  # batch 0 read the snapshot of table version 2
    assert reader.checkpoint_dir == str(checkpoint) and reader.source == "delta"

    # The query is stopped. Its source moves on: appends the stream has not read (versions 3..5), a compaction
    # that removes every file (6, dataChange=false), then, with the log dated 10 days back, appends whose
    # checkpoint at version 8 runs log cleanup, and a VACUUM with zero retention.
    for first in (30, 40, 50):
        _append(spark, source, first)
    compacted = sorted(p.name for p in source.glob("*.parquet"))  # the 3 files read, the 3 the stream reads next
    spark.sql(f"OPTIMIZE delta.`{source}`").collect()
    if guard == "forgotten":
        assert forget_reader(str(source), query_id)
    old = time.time() - 10 * DAY
    for p in (source / "_delta_log").iterdir():
        if p.name[:20].isdigit():
            os.utime(p, (old + int(p.name[:20]), old + int(p.name[:20])))
    for first in (60, 70):
        _append(spark, source, first)  # table versions 7, 8 (a checkpoint, then log cleanup)
    vacuumed = sparkonce.vacuum(
        str(source), retention_hours=0, enforce_retention_duration=False, dry_run=False, force=guard == "vacuum-force"
    )
    live = {p.name for p in source.glob("*.parquet")}

    if guard == "registered":
        assert _log_versions(source) == list(range(2, 9))  # from the checkpoint at or before version 2 on
        assert vacuumed.files == ()
        assert [(h.reader.query_id, h.reader.table_version) for h in vacuumed.held_back] == [(query_id, 2)]
        assert sorted(vacuumed.held_back[0].files) == compacted
        assert _run(spark, source, sink, checkpoint) == query_id
        assert delta_ids(sink) == list(range(80))  # every row once
        registered_reader(source, query_id, 3)  # the start of its last batch
        return

    if guard == "forgotten":  # log cleanup removed the commits the stream reads next
        # 7, 8 stayed (younger than midnight), then delta-rs's VACUUM START (9) checkpoints and cleans by the
        # retention alone, as Delta does; 10 is VACUUM END
        assert _log_versions(source) == [9, 10]
        # (Spark first asks the native source, a V1 source, for the last committed batch again: the snapshot of 2)
        with pytest.raises(
            StreamingQueryException,
            match=r"cannot rebuild the snapshot of table version 2 of .* that the stream started from: "
            r"\[DELTA_VERSION_NOT_FOUND\]",
        ):
            _run(spark, source, sink, checkpoint)
        assert delta_ids(sink) == list(range(30))
        return

    # vacuum(force=True): the commits are there, the files they add are not
    assert _log_versions(source) == list(range(2, 9))
    assert sorted(vacuumed.files) == compacted and vacuumed.held_back == ()
    assert not live & set(compacted)
    with pytest.raises(StreamingQueryException, match=r"FILE_NOT_EXIST|does not exist"):
        _run(spark, source, sink, checkpoint)
    assert delta_ids(sink) == list(range(30))
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        _run(spark, source, sink, checkpoint)
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")
    assert delta_ids(sink) == [*range(30), *range(60, 80)]  # rows 30..59 silently lost


def test_a_change_feed_stream_registers_through_the_python_source(spark: SparkSession, tmp_path: Path) -> None:
    """The change data feed is read by the Python data source (planning in a worker that knows no query): the
    registration comes from the driver's listener all the same."""
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    spark.range(0, 5).write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(source))
    seen: list[int] = []

    def run() -> str:
        query = (
            spark.readStream.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", "0")
            .load(str(source))
            .writeStream.foreachBatch(lambda batch, _: seen.append(batch.count()))
            .option("checkpointLocation", str(checkpoint))
            .queryName("feed")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return str(query.id)

    query_id = run()
    reader = registered_reader(source, query_id, 0)  # batch 0 started at startingVersion 0
    assert (reader.source, reader.query_name, sum(seen)) == ("cdf", "feed", 5)
    _append(spark, source, 5)  # table version 1
    _append(spark, source, 15)  # table version 2
    assert run() == query_id
    assert sum(seen) == 25
    registered_reader(source, query_id, 1)  # the start of its last batch (versions 1 and 2)
