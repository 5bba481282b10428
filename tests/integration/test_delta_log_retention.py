"""A long-lived table's log stays bounded: sparkonce's own commits write checkpoints at ``delta.checkpointInterval``
and then remove the log files older than ``delta.logRetentionDuration`` (Delta's rule); the table reads the same
in Spark and delta-rs afterwards, history lists what is left, and time travel to a removed version is Delta's
``DELTA_VERSION_NOT_FOUND`` error."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from sparkonce.errors import VersionNotFoundError

pytestmark = pytest.mark.spark

DAY = 86_400


def _log(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").iterdir() if p.name[:20].isdigit())


def test_old_log_files_go_at_the_next_checkpoint_and_the_table_reads_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = str(tmp_path / "t")
    spark.range(0, 1).write.format("delta").option("delta.checkpointInterval", "5").option(
        "delta.logRetentionDuration", "interval 2 days"
    ).save(table)
    for v in range(1, 7):
        spark.range(v, v + 1).write.format("delta").mode("append").save(table)
    assert _log(tmp_path / "t")[:1] == [f"{0:020d}.json"]
    assert f"{5:020d}.checkpoint.parquet" in _log(tmp_path / "t")  # the checkpoint came, nothing expired yet
    old = time.time() - 10 * DAY
    for p in (tmp_path / "t" / "_delta_log").iterdir():
        if p.name[:20].isdigit():  # table versions 0..6, one second apart as they were written
            when = old + int(p.name[:20])
            os.utime(p, (when, when))

    for v in range(7, 11):  # table version 10 is the next checkpoint: versions 0..4 go with it
        spark.range(v, v + 1).write.format("delta").mode("append").save(table)

    # Versions 0..6 expired; the checkpoint of 5 and its commits stay, so 7..9 can still be rebuilt (as delta-spark
    # keeps them: tests/integration/test_oracle_delta_tables.py).
    assert _log(tmp_path / "t") == [f"{5:020d}.checkpoint.parquet"] + [f"{v:020d}.json" for v in range(5, 10)] + [
        f"{10:020d}.checkpoint.parquet",
        f"{10:020d}.json",
    ]
    assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == list(range(11))
    assert sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist()) == list(range(11))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version", "operation").collect()
    assert [(r.version, r.operation) for r in history] == [(v, "WRITE") for v in range(10, 4, -1)]
    assert [h["version"] for h in DeltaTable(table).history()] == list(range(10, 4, -1))
    with pytest.raises(  # refused by load(), before any data moves (the native read path plans there)
        VersionNotFoundError,
        match=r"\[DELTA_VERSION_NOT_FOUND\] Cannot time travel Delta table to "
        r"version 3\. Available versions: \[5, 10\]\.",
    ):
        spark.read.format("delta").option("versionAsOf", "3").load(table).collect()
    with pytest.raises(  # beyond the latest: Delta's error too
        VersionNotFoundError,
        match=r"\[DELTA_VERSION_NOT_FOUND\] Cannot time travel Delta table to version 11\. Available versions: "
        r"\[5, 10\]\.",
    ):
        spark.read.format("delta").option("versionAsOf", "11").load(table).collect()


def test_the_session_part_size_makes_multi_part_checkpoints(spark: SparkSession, tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    spark.range(0, 4).repartition(4).write.format("delta").option("delta.checkpointInterval", "1").save(table)
    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "2")
    try:
        spark.range(4, 5).write.format("delta").mode("append").save(table)
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    # table version 1: protocol, metaData and an add per data file, at most 2 per part
    actions = 2 + len(DeltaTable(table).file_uris())
    count = (actions + 1) // 2
    parts = [n for n in _log(tmp_path / "t") if ".checkpoint." in n]
    assert parts == [f"{1:020d}.checkpoint.{i:010d}.{count:010d}.parquet" for i in range(1, count + 1)]
    assert count >= 3
    os.remove(tmp_path / "t" / "_delta_log" / f"{0:020d}.json")
    os.remove(tmp_path / "t" / "_delta_log" / f"{1:020d}.json")
    assert sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist()) == list(range(5))
    assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == list(range(5))
