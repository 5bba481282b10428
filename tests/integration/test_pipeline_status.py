"""``sparkonce run --metrics-file`` and ``sparkonce status`` on a real pipeline: Prometheus metrics after the
batches commit, then the stopped pipeline's batches and lag (Kafka records and Delta table versions and bytes
left to read), checked against what was produced and what the Delta log holds (read by delta-rs)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.pipeline.loader import load_pipeline
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.services.producer import produce_sensor_readings
from tests.fixtures_broker import numbered
from tests.integration.test_kafka_group_offsets import committed_offsets
from tests.unit.test_pipeline_metrics import parse_exposition

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def _added_bytes(table: str, after: int) -> int:
    """Bytes of the data files an append-only table gained after table version ``after`` (delta-rs)."""
    from deltalake import DeltaTable

    def sizes(version: int | None) -> dict[str, int]:
        dt = DeltaTable(table) if version is None else DeltaTable(table, version=version)
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
        return dict(zip(actions["path"], actions["size_bytes"]))

    before, now = sizes(after), sizes(None)
    return sum(size for path, size in now.items() if path not in before)


def test_metrics_file_after_a_run_and_status_of_the_stopped_pipeline(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from deltalake import DeltaTable

    topic = broker.unique_topic("status")
    produced = produce_sensor_readings(broker.bootstrap, topic=topic, count=300, partitions=2, seed=7)
    assert produced.records == 300
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline(broker.bootstrap, topic=topic))
    config = load_pipeline(pipeline)
    assert config.bronze is not None and config.gold is not None
    metrics = tmp_path / "sparkonce.prom"
    runner = CliRunner()

    # 1. every stage drains the topic (availableNow): one batch each, 300 rows each
    first = runner.invoke(cli, ["run", str(pipeline), "--plain", "--metrics-file", str(metrics)])
    assert first.exit_code == 0, first.output
    samples = parse_exposition(metrics.read_text(encoding="utf-8"))
    committed = committed_offsets(broker.bootstrap, "sparkonce-quickstart-raw")
    # the raw stage committed the topic's ends to its group (the group name is the pipeline's: other tests' topics
    # on the shared broker may be in it too)
    assert sum(offset for (name, _), offset in committed.items() if name == topic) == 300
    for stage in ("raw", "bronze", "gold"):
        labels = (("pipeline", "quickstart"), ("stage", stage))
        assert samples[("sparkonce_stage_input_rows_total", labels)] == 300
        assert samples[("sparkonce_stage_last_batch_id", labels)] == 0
        assert samples[("sparkonce_stage_up", labels)] == 0  # the run has finished
    for partition in ("0", "1"):
        labels = tuple(  # prometheus_client writes labels sorted by name
            sorted(
                (
                    ("pipeline", "quickstart"),
                    ("stage", "raw"),
                    ("consumergroup", "sparkonce-quickstart-raw"),
                    ("topic", topic),
                    ("partition", partition),
                )
            )
        )
        assert samples[("kafka_consumergroup_lag", labels)] == 0
        # the raw stage committed its position to that group: what Kafka's lag tools read
        assert samples[("kafka_consumergroup_current_offset", labels)] == committed[(topic, int(partition))]
    for stage in ("bronze", "gold"):
        labels = (("pipeline", "quickstart"), ("stage", stage))
        assert samples[("sparkonce_delta_versions_behind", labels)] == 0
        assert samples[("sparkonce_delta_bytes_behind", labels)] == 0
    raw_read_by_bronze = DeltaTable(config.raw.table).version()

    # 2. 40 more records, only raw runs: bronze is behind by raw's new table version
    broker.produce(topic, numbered(40), partitions=2)
    second = runner.invoke(cli, ["run", str(pipeline), "--plain", "--stage", "raw"])
    assert second.exit_code == 0, second.output
    raw_latest = DeltaTable(config.raw.table).version()
    assert raw_latest == raw_read_by_bronze + 1

    # 3. 25 more records nobody reads: 15 in partition 0, 10 in partition 1
    broker.produce(topic, numbered(15, start=100), partition=0)
    broker.produce(topic, numbered(10, start=200), partition=1)
    status = runner.invoke(cli, ["status", str(pipeline), "--json"])
    assert status.exit_code == 0, status.output
    report = json.loads(status.output)
    assert report["schema_version"] == 1 and report["ok"] is True and report["running"] is False
    stages = {s["stage"]: s for s in report["stages"]}
    raw, bronze, gold = stages["raw"], stages["bronze"], stages["gold"]
    assert (raw["state"], raw["last_planned"], raw["last_committed"]) == ("stopped", 1, 1)
    assert [(p["partition"], p["lag"]) for p in raw["partition_lag"]] == [(0, 15), (1, 10)]
    assert raw["records_behind"] == 25
    assert (bronze["state"], bronze["last_planned"], bronze["last_committed"]) == ("stopped", 0, 0)
    assert bronze["delta_lag"] == {
        "latest_table_version": raw_latest,
        "versions_behind": 1,
        "bytes_behind": _added_bytes(config.raw.table, raw_read_by_bronze),
    }
    assert bronze["delta_lag"]["bytes_behind"] > 0
    assert gold["delta_lag"] == {
        "latest_table_version": DeltaTable(config.bronze.table).version(),
        "versions_behind": 0,
        "bytes_behind": 0,
    }
    assert all(s["findings"] == [] and s["last_commit_at"] is not None for s in stages.values())
    # where each stage's tables stand (its kind's describe): table version, newest batch recorded by its txn
    assert [(o["target"], o["table_version"], o["last_recorded_batch"]) for o in raw["outputs"]] == [
        (config.raw.table, raw_latest, 1)
    ]
    bronze_out = {o["target"]: o for o in bronze["outputs"]}
    assert bronze_out[config.bronze.table]["table_version"] == DeltaTable(config.bronze.table).version()
    assert bronze_out[config.bronze.table]["last_recorded_batch"] == 0
    assert [(o["target"], o["last_recorded_batch"]) for o in gold["outputs"]] == [(config.gold.table, 0)]

    # 4. a planned batch never committed while stopped is a finding: exit 1, naming the batch
    (Path(config.gold.checkpoint) / "commits" / "0").unlink()
    broken = runner.invoke(cli, ["status", str(pipeline)])
    assert broken.exit_code == 1, broken.output
    assert "stage gold: batch 0 was planned but never committed" in broken.output


def test_a_running_pipeline_serves_metrics_reports_running_and_refuses_a_second_run(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``sparkonce run --metrics-port`` in its own process: /metrics while it runs, ``status`` names its pid, a
    second ``run`` of its stages is refused before it starts; after SIGTERM, ``status`` says stopped."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.conftest import REPO

    topic = broker.unique_topic("live")
    produce_sensor_readings(broker.bootstrap, topic=topic, count=120, partitions=2, seed=3)
    pipeline = tmp_path / "pipeline.toml"
    text = quickstart_pipeline(broker.bootstrap, topic=topic)
    pipeline.write_text(text.replace("trigger = { availableNow = true }", 'trigger = { processingTime = "1 second" }'))
    config = load_pipeline(pipeline)
    with socket.socket() as probe:  # a free port for the endpoint
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Its output goes to files: a pipe nobody reads while the test polls fills up (64 KiB of Spark's warnings on a
    # loaded machine) and blocks the run in its next write.
    out_file, err_file = tmp_path / "run.out", tmp_path / "run.err"
    with open(out_file, "wb") as out, open(err_file, "wb") as err_out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--metrics-port", str(port)],
            cwd=str(REPO),
            stdout=out,
            stderr=err_out,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )

    def stderr_tail() -> str:
        return err_file.read_text(encoding="utf-8", errors="replace")[-3000:]

    try:
        deadline = time.monotonic() + 300
        samples: dict = {}  # type: ignore[type-arg]
        raw = (("pipeline", "quickstart"), ("stage", "raw"))
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    body = response.read().decode("utf-8")
                samples = parse_exposition(body) if body else {}  # empty until the first progress
            except OSError:
                samples = {}
            if samples.get(("sparkonce_stage_input_rows_total", raw)) == 120:
                break
            time.sleep(0.5)  # polling interval, bounded by the deadline
        assert proc.poll() is None, f"the run exited {proc.returncode}: {stderr_tail()}"
        assert samples.get(("sparkonce_stage_input_rows_total", raw)) == 120, (samples, stderr_tail())
        assert samples[("sparkonce_stage_up", raw)] == 1

        runner = CliRunner()
        live = runner.invoke(cli, ["status", str(pipeline), "--json"])
        assert live.exit_code == 0, live.output
        report = json.loads(live.output)
        assert report["running"] is True
        assert {(s["stage"], s["state"], s["run_pid"]) for s in report["stages"]} == {
            (name, "running", proc.pid) for name in ("raw", "bronze", "gold")
        }
        second = runner.invoke(cli, ["run", str(pipeline), "--plain", "--stage", "raw"])
        assert second.exit_code == 3, second.output
        assert f"in use by a running sparkonce run (pid {proc.pid} on" in second.output

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        assert proc.returncode == 0, stderr_tail()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    after = runner.invoke(cli, ["status", str(pipeline), "--json"])
    assert after.exit_code == 0, after.output
    stopped = json.loads(after.output)
    assert stopped["running"] is False
    assert {s["state"] for s in stopped["stages"]} == {"stopped"}
    assert sum(p["lag"] for p in stopped["stages"][0]["partition_lag"]) == 0
    assert Path(config.raw.checkpoint, "_sparkonce_run.lock").exists()
