"""The doctor finds a query's tables by itself: the Delta sink and the sparkonce sources record their locations in
the checkpoint (``_sparkonce_tables/``), and ``sparkonce doctor CHECKPOINT`` without ``--table`` examines the sink.

Issue 39 item 5: before, a sink table missing a committed data file gave "No findings." without ``--table``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import DataFrame, SparkSession

from sparkonce.checkpoint.tables import TABLES_DIR, read_recorded_tables
from sparkonce.cli.main import cli
from sparkonce.delta.log.delta_log import DeltaLog
from tests.integration.conftest import write_input_files

pytestmark = pytest.mark.spark


def _sink_query(spark: SparkSession, tmp_path: Path) -> tuple[Path, Path]:
    write_input_files(tmp_path / "in", files=3, rows_per_file=5)
    query = (
        spark.readStream.format("json")
        .schema("id long, device string, value double")
        .option("maxFilesPerTrigger", 1)
        .load(str(tmp_path / "in"))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "events"))
    )
    query.awaitTermination()
    return tmp_path / "ck", tmp_path / "events"


def test_doctor_without_table_examines_the_recorded_sink(spark: SparkSession, tmp_path: Path) -> None:
    ck, events = _sink_query(spark, tmp_path)
    recorded, problems = read_recorded_tables(ck)
    assert problems == []
    assert [(t.role, t.format, t.location) for t in recorded] == [("sink", "delta", str(events))]

    healthy = CliRunner().invoke(cli, ["doctor", str(ck), "--json"])
    assert healthy.exit_code == 0, healthy.output
    data = json.loads(healthy.output)
    assert data["table_origin"] == "recorded"
    assert [t["table_path"] for t in data["tables"]] == [str(events)]
    assert data["tables"][0]["txn_version"] == 2
    assert data["findings"] == []

    # The case: a committed data file is gone. Without --table the doctor now finds it.
    snapshot = DeltaLog(events).snapshot()
    victim = sorted(snapshot.files)[0]
    (events / victim).unlink()
    damaged = CliRunner().invoke(cli, ["doctor", str(ck)])
    assert damaged.exit_code == 1, damaged.output
    assert "delta-missing-files" in damaged.output
    assert "(recorded in the checkpoint)" in damaged.output
    assert "No findings" not in damaged.output


def test_a_delta_source_is_recorded_and_a_query_without_a_known_sink_says_no_table_was_examined(
    spark: SparkSession, tmp_path: Path
) -> None:
    _, events = _sink_query(spark, tmp_path / "upstream")
    seen: list[int] = []

    def process(batch: DataFrame, batch_id: int) -> None:
        seen.append(batch.count())

    query = (
        spark.readStream.format("delta")
        .load(str(events))
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sum(seen) == 15
    recorded, _ = read_recorded_tables(tmp_path / "ck")
    assert [(t.role, t.location) for t in recorded] == [("source", str(events))]

    result = CliRunner().invoke(cli, ["doctor", str(tmp_path / "ck")])
    assert result.exit_code == 0, result.output
    assert "No findings" not in result.output
    assert "No table was examined" in result.output
    assert "--table TABLE" in result.output
    assert f"source:          {events}" in result.output

    (tmp_path / "ck" / TABLES_DIR / "sink-garbled.json").write_text('{"role": "sink"')
    garbled = CliRunner().invoke(cli, ["doctor", str(tmp_path / "ck"), "--json"])
    assert garbled.exit_code == 1, garbled.output
    codes = {f["code"] for f in json.loads(garbled.output)["findings"]}
    assert codes == {"tables-record-unreadable", "no-table-examined"}
