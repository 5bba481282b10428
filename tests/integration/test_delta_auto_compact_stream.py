"""Issue 25 item 3: compaction alongside running streams.

A stream (Delta source, one file per batch) appends into a table with auto compaction on: its sink makes an
OPTIMIZE commit (``auto: true``, ``dataChange=false``) whenever the table holds enough small files. Two streams
read that table while it is being compacted, restarted between rounds so their offsets straddle the OPTIMIZE
commits: a Delta->Delta stream and a change data feed stream. Each must deliver every row exactly once. Checked
with delta-rs, from the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

MIN_NUM_FILES = "spark.databricks.delta.autoCompact.minNumFiles"


@pytest.fixture
def min_num_files(spark: SparkSession) -> Iterator[None]:
    """Delta's threshold lowered to 3 small files for this test (the sink gets the session conf at start)."""
    spark.conf.set(MIN_NUM_FILES, "3")
    yield
    spark.conf.unset(MIN_NUM_FILES)


def _run(spark: SparkSession, source: Path, target: Path, ck: Path, **options: str) -> None:
    reader = spark.readStream.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = reader.load(str(source)).writeStream.format("delta").option("checkpointLocation", str(ck))
    if "maxFilesPerTrigger" in options:  # the compacted table: auto compaction on, the feed on
        writer = writer.option("delta.autoOptimize.autoCompact", "true").option("delta.enableChangeDataFeed", "true")
    query = writer.trigger(availableNow=True).start(str(target))
    query.awaitTermination()
    assert query.exception() is None


def _ids(table: Path) -> list[int]:
    return sorted(RsTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _log(table: Path) -> list[list[dict[str, Any]]]:
    return [
        [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        for commit in sorted((table / "_delta_log").glob("*.json"))
    ]


def test_compaction_during_delta_and_change_feed_streams_loses_and_duplicates_nothing(
    spark: SparkSession, tmp_path: Path, min_num_files: None
) -> None:
    import pyarrow as pa

    source, compacted = tmp_path / "source", tmp_path / "compacted"
    copy, changes = tmp_path / "copy", tmp_path / "changes"
    expected: list[int] = []
    for round_ in range(2):
        for i in range(3):  # three small files: three batches of the compacting stream
            ids = list(range(100 * round_ + 10 * i, 100 * round_ + 10 * i + 5))
            write_deltalake(str(source), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
            expected += ids
        _run(spark, source, compacted, tmp_path / "ck", maxFilesPerTrigger="1")
        _run(spark, compacted, copy, tmp_path / "ck-copy", startingVersion="0")
        _run(spark, compacted, changes, tmp_path / "ck-changes", startingVersion="0", readChangeFeed="true")
        assert _ids(copy) == sorted(expected)  # exactly once, after every round

    assert _ids(compacted) == sorted(expected)
    change_rows = RsTable(str(changes)).to_pyarrow_table(columns=["id", "_change_type"]).to_pylist()
    assert sorted(r["id"] for r in change_rows) == sorted(expected)
    assert {r["_change_type"] for r in change_rows} == {"insert"}

    commits = _log(compacted)
    infos = [c[0]["commitInfo"] for c in commits]
    optimizes = [c for c, info in zip(commits, infos, strict=True) if info["operation"] == "OPTIMIZE"]
    # 3 small files pass the threshold: after batch 2 (0-based), and after batch 4 (the compacted file + 2)
    assert [i["operation"] for i in infos] == ["STREAMING UPDATE"] * 3 + ["OPTIMIZE"] + ["STREAMING UPDATE"] * 2 + [
        "OPTIMIZE",
        "STREAMING UPDATE",
    ]
    for commit in optimizes:
        assert commit[0]["commitInfo"]["operationParameters"]["auto"] == "true"  # a string, as Delta writes it
        files = [a.get("add") or a.get("remove") for a in commit if "add" in a or "remove" in a]
        assert files and all(f["dataChange"] is False for f in files)
        assert sum(1 for a in commit if "add" in a) == 1 and sum(1 for a in commit if "remove" in a) >= 3
    assert len(RsTable(str(compacted)).file_uris()) == 2  # the second compaction's file and batch 5's


def test_scheduled_compaction_of_a_stage_table_while_its_query_runs(spark: SparkSession, tmp_path: Path) -> None:
    """A pipeline stage's ``optimize = { every_batches = 2 }``, polled as ``sparkonce run`` polls it, against a
    real query writing the stage's table: compactions at batches 1 and 3, rows unchanged."""
    import pyarrow as pa

    from sparkonce.pipeline.compaction import ScheduledCompaction
    from sparkonce.pipeline.loader import parse_pipeline
    from sparkonce_local.demo_pipeline import quickstart_pipeline

    text = quickstart_pipeline("127.0.0.1:9092").replace(
        'checkpoint = "checkpoints/raw"\n', 'checkpoint = "checkpoints/raw"\noptimize = { every_batches = 2 }\n'
    )
    config = parse_pipeline(text, tmp_path / "p.toml")
    source, table = tmp_path / "source", Path(config.raw.table)
    scheduled = ScheduledCompaction.of(spark, config, config.stages[:1])
    for batches in (2, 4):  # two runs of the query, two batches each, polled after each as the run loop does
        for i in range(batches - 2, batches):
            ids = pa.array(range(10 * i, 10 * i + 5), pa.int64())
            write_deltalake(str(source), pa.table({"id": ids}), mode="append")
        query = (
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", "1")
            .load(str(source))
            .writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(str(table))
        )
        query.awaitTermination()
        assert query.lastProgress["batchId"] == batches - 1
        scheduled.poll({"raw": query})
        scheduled.wait()
    assert scheduled.compactions("raw") == 2
    operations = [c[0]["commitInfo"]["operation"] for c in _log(table)]
    assert operations == ["STREAMING UPDATE"] * 2 + ["OPTIMIZE"] + ["STREAMING UPDATE"] * 2 + ["OPTIMIZE"]
    assert _ids(table) == sorted(i for k in range(4) for i in range(10 * k, 10 * k + 5))
    assert len(RsTable(str(table)).file_uris()) == 1


def test_batch_appends_are_auto_compacted_by_the_session_conf(
    spark: SparkSession, tmp_path: Path, min_num_files: None
) -> None:
    """``spark.databricks.delta.autoCompact.enabled`` (no table property): the third one-file append of the
    partition is followed by the OPTIMIZE commit; the other partition's two files stay."""
    table = tmp_path / "t"
    spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    try:
        for i, part in enumerate(["a", "b", "a", "b", "a"]):
            frame = spark.createDataFrame([(i, part)], "id long, part string").coalesce(1)
            frame.write.format("delta").mode("append").partitionBy("part").save(str(table))
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.enabled")
    operations = [c[0]["commitInfo"]["operation"] for c in _log(table)]
    assert operations == ["WRITE"] * 5 + ["OPTIMIZE"]
    optimize = _log(table)[-1]
    assert {a["remove"]["partitionValues"]["part"] for a in optimize if "remove" in a} == {"a"}
    assert _ids(table) == [0, 1, 2, 3, 4]
    assert len(RsTable(str(table)).file_uris()) == 3


@pytest.mark.broker
def test_sparkonce_run_compacts_a_stage_on_its_schedule(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``sparkonce run --stage raw`` with ``optimize = { every_batches = 2 }``: four batches of 50 records, an
    OPTIMIZE commit (``auto: false``, ``dataChange=false``) made by the run, every record once in the table."""
    from click.testing import CliRunner

    from sparkonce.cli.main import cli
    from sparkonce_local.demo_pipeline import quickstart_pipeline
    from sparkonce_local.services.producer import produce_sensor_readings

    topic = broker.unique_topic("optimize")
    produced = produce_sensor_readings(broker.bootstrap, topic=topic, count=200, partitions=1, seed=3)
    text = quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=50).replace(
        'checkpoint = "checkpoints/raw"\n', 'checkpoint = "checkpoints/raw"\noptimize = { every_batches = 2 }\n'
    )
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(text)
    ran = CliRunner().invoke(cli, ["run", str(pipeline), "--stage", "raw", "--plain"])
    assert ran.exit_code == 0, ran.output
    table = tmp_path / "tables" / "raw"
    commits = _log(table)
    operations = [c[0]["commitInfo"]["operation"] for c in commits]
    assert operations.count("STREAMING UPDATE") == 4 and "OPTIMIZE" in operations
    for commit in (c for c in commits if c[0]["commitInfo"]["operation"] == "OPTIMIZE"):
        assert commit[0]["commitInfo"]["operationParameters"]["auto"] == "false"  # a string, as Delta writes it
        assert all(
            (a.get("add") or a.get("remove"))["dataChange"] is False for a in commit[1:] if set(a) & {"add", "remove"}
        )
    rows = RsTable(str(table)).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == produced.records
