"""``sparkonce run``: a clean stop on SIGTERM after the current batch, and bad input refused before data moves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.pipeline.loader import load_pipeline
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.services.producer import produce_sensor_readings
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def _continuous(text: str) -> str:
    """The quickstart pipeline with processing-time triggers: it runs until it is told to stop."""
    return text.replace("trigger = { availableNow = true }", 'trigger = { processingTime = "1 second" }')


def _wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)  # polling interval, bounded by the deadline
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_sigterm_stops_every_stage_after_its_current_batch(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Runs with the live terminal display (a terminal is forced), which must show batch ids and partition lag."""
    topic = broker.unique_topic("run")
    produce_sensor_readings(broker.bootstrap, topic=topic, count=300, partitions=2, malformed_share=0.0, seed=5)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(_continuous(quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=50)))
    config = load_pipeline(pipeline)
    # Its output goes to files: the live display writes all the time, and a pipe nobody reads while the test
    # waits fills up (64 KiB) and blocks the run in its next write.
    out_file, err_file = tmp_path / "run.out", tmp_path / "run.err"
    with open(out_file, "wb") as out_handle, open(err_file, "wb") as err_handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkonce.cli.main", "run", str(pipeline)],
            cwd=str(REPO),
            stdout=out_handle,
            stderr=err_handle,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "TTY_COMPATIBLE": "1", "COLUMNS": "160"},
        )
    try:
        gold_commits = Path(config.gold.checkpoint) / "commits"
        _wait_for(lambda: gold_commits.is_dir() and any(gold_commits.iterdir()), 300, "a gold checkpoint commit")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = out_file.read_text(encoding="utf-8", errors="replace")
    err = err_file.read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, err[-3000:]
    assert "SIGTERM: stopping after the current batch" in out
    assert "sparkonce run" in out and "rows/s" in out
    assert re.search(r"lag 0:\d+, 1:\d+", out), out[-2000:]  # raw's lag per Kafka partition
    assert "quickstart: stopped" in out
    for stage in (config.raw, config.bronze, config.gold):
        ck = Path(stage.checkpoint)
        planned = {p.name for p in (ck / "offsets").iterdir() if p.name.isdigit()}
        committed = {p.name for p in (ck / "commits").iterdir() if p.name.isdigit()}
        assert planned == committed, f"{ck}: a batch was left planned but not committed by the stop"


def test_unreachable_broker_and_non_delta_table_refused_before_data_moves(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    dead = tmp_path / "dead" / "pipeline.toml"
    dead.parent.mkdir()
    dead.write_text(quickstart_pipeline("127.0.0.1:1", topic="nowhere"))
    result = runner.invoke(cli, ["run", str(dead), "--plain"])
    assert result.exit_code == 3, result.output
    assert "127.0.0.1:1" in result.output
    assert not (dead.parent / "tables").exists() and not (dead.parent / "checkpoints").exists()

    topic = broker.unique_topic("notdelta")
    broker.create_topic(topic, partitions=1)
    bad = tmp_path / "bad" / "pipeline.toml"
    bad.parent.mkdir()
    bad.write_text(quickstart_pipeline(broker.bootstrap, topic=topic))
    (bad.parent / "tables" / "raw").mkdir(parents=True)
    (bad.parent / "tables" / "raw" / "notes.txt").write_text("not a Delta table")
    result = runner.invoke(cli, ["run", str(bad), "--plain"])
    assert result.exit_code == 3, result.output  # a TableNotFoundError: something unreachable
    assert "not a Delta table" in result.output
    assert not (bad.parent / "tables" / "raw" / "_delta_log").exists()


def test_tables_named_in_the_pipeline_file_are_catalog_tables(spark, broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``table_name`` keys: the first run registers managed tables in the warehouse; a second run finds them and
    writes nothing twice; Spark reads them by name."""
    from deltalake import DeltaTable

    from sparkonce.delta.table.catalog import WAREHOUSE_CONF, DeltaCatalog

    topic = broker.unique_topic("named")
    produced = produce_sensor_readings(broker.bootstrap, topic=topic, count=120, partitions=2, seed=11)
    text = quickstart_pipeline(broker.bootstrap, topic=topic)
    for table, name in (("raw", "lake.raw"), ("bronze", "lake.bronze"), ("quarantine", "lake.bad"), ("gold", "gold")):
        key = "quarantine" if table == "quarantine" else "table"
        text = text.replace(f'{key} = "tables/{table}"', f'{key}_name = "{name}"')
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(text)
    warehouse = tmp_path / "spark-warehouse"
    try:
        first = CliRunner().invoke(cli, ["run", str(pipeline), "--plain"])
        assert first.exit_code == 0, first.output
        catalog = DeltaCatalog(str(warehouse))
        raw = catalog.get("lake", "raw")
        assert raw is not None and raw.managed and raw.location == str(warehouse / "lake.db" / "raw")
        assert {(t.database, t.name) for t in catalog.tables("lake") + catalog.tables("default")} == {
            ("lake", "raw"),
            ("lake", "bronze"),
            ("lake", "bad"),
            ("default", "gold"),
        }
        assert not (tmp_path / "tables").exists()
        raw_version = DeltaTable(raw.location).version()
        rows = DeltaTable(raw.location).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
        assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == produced.records

        second = CliRunner().invoke(cli, ["run", str(pipeline), "--plain"])  # nothing new on the topic
        assert second.exit_code == 0, second.output
        assert DeltaTable(raw.location).version() == raw_version

        spark.conf.set(WAREHOUSE_CONF, str(warehouse))
        assert spark.sql("SELECT count(*) FROM lake.raw").collect()[0][0] == produced.records
        counted = spark.sql("SELECT (SELECT count(*) FROM lake.bronze) + (SELECT count(*) FROM lake.bad)")
        assert counted.collect()[0][0] == produced.records
    finally:
        spark.conf.unset(WAREHOUSE_CONF)
