"""Issue 24 item 4: a merge stage fed by its input table's change data feed (``input_mode = "changes"``).

Silver is changed the way users change tables (appends, UPDATE, DELETE, MERGE, an overwrite); after every run of
the gold stage alone (its input is silver, so no broker is needed) gold holds exactly silver's rows, and
``verify`` finds every committed batch recorded once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable as RsTable
from pyspark.sql import SparkSession

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.loader import parse_pipeline
from sparkonce.pipeline.run import run_pipeline
from sparkonce.pipeline.verify import verify_pipeline
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import delta_txns

pytestmark = pytest.mark.spark

SCHEMA = "device_id string, value double"

PIPELINE = """
name = "cdf"

[source]
bootstrap_servers = "127.0.0.1:1"
topic = "t"

[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
trigger = { availableNow = true }

[stages.bronze]
table = "tables/bronze"
checkpoint = "checkpoints/bronze"
quarantine = "tables/quarantine"
schema = "device_id STRING, value DOUBLE"
required = ["device_id", "value"]
trigger = { availableNow = true }

[stages.silver]
kind = "merge"
input = "bronze"
table = "tables/silver"
checkpoint = "checkpoints/silver"
keys = ["device_id"]
order_by = "value"
trigger = { availableNow = true }

[stages.gold]
kind = "merge"
input = "silver"
input_mode = "changes"
table = "tables/gold"
checkpoint = "checkpoints/gold"
keys = ["device_id"]
trigger = { availableNow = true }
"""


def _rows(table: Path) -> list[tuple[str, float]]:
    return sorted((r["device_id"], r["value"]) for r in RsTable(str(table)).to_pyarrow_table().to_pylist())


def test_gold_fed_by_silver_changes_mirrors_silver_after_every_run(spark: SparkSession, tmp_path: Path) -> None:
    config = parse_pipeline(PIPELINE, tmp_path / "pipeline.toml")
    silver, gold = tmp_path / "tables" / "silver", tmp_path / "tables" / "gold"
    # Silver exists before gold first runs, without the change data feed: the stage turns it on.
    spark.createDataFrame([(f"d{i}", float(i)) for i in range(10)], SCHEMA).write.format("delta").save(str(silver))

    def run_gold() -> None:
        result = run_pipeline(config, stages=["gold"], spark=spark)
        assert not result.stopped
        assert _rows(gold) == _rows(silver)
        report = verify_pipeline(config, stages=("gold",))
        assert report.ok and [t.committed_batches > 0 for t in report.targets] == [True]
        # verify compared gold with silver at the table version the newest batch read the feed through
        assert [(t.state_differences, t.input_table_version) for t in report.targets] == [
            (0, RsTable(str(silver)).version())
        ]

    run_gold()  # the snapshot, as inserts
    assert RsTable(str(silver)).metadata().configuration.get("delta.enableChangeDataFeed") == "true"

    table = DeltaTable.forPath(spark, str(silver))
    spark.createDataFrame([("d20", 20.0), ("d21", 21.0)], SCHEMA).write.format("delta").mode("append").save(str(silver))
    table.update("device_id = 'd1'", {"value": "100.0"})
    table.delete("device_id IN ('d2', 'd20')")
    run_gold()

    source = spark.createDataFrame([("d3", -1.0), ("d4", 44.0), ("d30", 30.0), ("d2", 2.5)], SCHEMA)
    (
        table.alias("t")
        .merge(source.alias("s"), "t.device_id = s.device_id")
        .whenMatchedDelete("s.value < 0")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    table.update("device_id = 'd4'", {"value": "45.0"})  # two changes of one key in one gold batch
    table.delete("device_id = 'd30'")  # inserted then deleted within one batch
    run_gold()

    # An overwrite: every row deleted and rewritten in one commit (a key kept, one changed, the rest gone).
    spark.createDataFrame([("d1", 100.0), ("d5", 55.0), ("d40", 40.0)], SCHEMA).write.format("delta").mode(
        "overwrite"
    ).save(str(silver))
    run_gold()
    assert _rows(gold) == [("d1", 100.0), ("d40", 40.0), ("d5", 55.0)]

    run_gold()  # nothing new: no batch, gold unchanged

    RsTable(str(gold)).delete("device_id = 'd40'")  # not through the stage: gold no longer mirrors silver
    (found,) = verify_pipeline(config, stages=("gold",)).targets
    assert (found.ok, found.state_differences, found.missing, found.duplicated) == (False, 1, (), ())


def test_changes_from_the_kafka_source_or_with_clauses_are_refused_on_load(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"stages\.gold\.merge"):
        parse_pipeline(PIPELINE + 'merge = "clauses"\ninsert = true\n', tmp_path / "p.toml")
    bad = PIPELINE.replace('input = "silver"', 'input = "source"')
    with pytest.raises(PipelineConfigError, match=r"stages\.gold\.input_mode"):
        parse_pipeline(bad, tmp_path / "p.toml")
    with pytest.raises(PipelineConfigError, match=r"stages\.gold\.input_mode.*'upserts'"):
        parse_pipeline(PIPELINE.replace('"changes"', '"upserts"'), tmp_path / "p.toml")


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", ["after_gold_merge:0"])
def test_gold_killed_mid_run_restarts_and_mirrors_silver(spark: SparkSession, tmp_path: Path, crash_at: str) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.replace("[stages.gold]\n", "[stages.gold]\nmax_files_per_trigger = 1\n"))
    silver, gold = tmp_path / "tables" / "silver", tmp_path / "tables" / "gold"
    spark.createDataFrame([(f"d{i}", float(i)) for i in range(10)], SCHEMA).write.format("delta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(str(silver))
    table = DeltaTable.forPath(spark, str(silver))
    table.update("device_id = 'd1'", {"value": "100.0"})
    table.delete("device_id = 'd2'")
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--stage=gold"]

    crashed = run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=600)
    assert crashed.killed, crashed.stderr[-3000:]
    table.delete("device_id = 'd3'")  # silver keeps changing while gold is down
    table.update("device_id = 'd1'", {"value": "101.0"})

    finished = run_driver(args, cwd=str(REPO), timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert _rows(gold) == _rows(silver)
    ck = tmp_path / "checkpoints" / "gold"
    batches = sorted(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    assert [v for _, v in delta_txns(gold)] == batches
    assert verify_pipeline(parse_pipeline(pipeline.read_text(), pipeline), stages=("gold",)).ok
