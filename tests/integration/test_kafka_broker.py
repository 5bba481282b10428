"""The embedded broker service, the sample producer and their CLI commands, against real tansu processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import BrokerError
from sparkonce.services.broker import broker_status, list_topics, start_broker, stop_broker
from sparkonce.services.producer import produce_sensor_readings
from tests.fixtures_broker import EmbeddedBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.broker]


def test_start_status_stop(tmp_path: Path) -> None:
    state = tmp_path / "broker"
    info = start_broker(state_dir=state)
    try:
        assert info.bootstrap.startswith("127.0.0.1:")  # loopback only
        assert (state / "broker.pid").read_text().strip() == str(info.pid)
        assert (state / "broker.log").is_file()
        status = broker_status(state_dir=state)
        assert status.running and status.reachable and status.info == info
        with pytest.raises(BrokerError, match="already runs"):
            start_broker(state_dir=state)
    finally:
        stopped = stop_broker(state_dir=state)
    assert stopped.was_running and stopped.pid == info.pid and not stopped.forced
    assert not (state / "broker.pid").exists()
    after = broker_status(state_dir=state)
    assert not after.running and not after.reachable
    assert not stop_broker(state_dir=state).was_running
    with pytest.raises(BrokerError, match="unreachable"):
        list_topics(info.bootstrap, timeout=1.0)


def test_cli_broker_and_produce(tmp_path: Path) -> None:
    runner = CliRunner()
    state = str(tmp_path / "broker")
    started = runner.invoke(cli, ["broker", "start", "--state-dir", state, "--topic", "readings:2", "--json"])
    assert started.exit_code == 0, started.output
    try:
        bootstrap = json.loads(started.output)["broker"]["bootstrap"]
        status = runner.invoke(cli, ["broker", "status", "--state-dir", state])
        assert status.exit_code == 0 and bootstrap in status.output and "readings (2 partitions)" in status.output
        args = ["--topic", "readings", "--count", "200", "--malformed", "0.25", "--seed", "7", "--json"]
        produced = runner.invoke(cli, ["produce", "--state-dir", state, *args])
        assert produced.exit_code == 0, produced.output
        result = json.loads(produced.output)
        assert result["records"] == 200 and result["partitions"] == 2 and 20 < result["malformed"] < 80
        assert list_topics(bootstrap)["readings"] == 2
    finally:
        stopped = runner.invoke(cli, ["broker", "stop", "--state-dir", state])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    down = runner.invoke(cli, ["broker", "status", "--state-dir", state])
    assert down.exit_code == 3 and "no broker running" in down.output
    orphan = runner.invoke(cli, ["produce", "--state-dir", state])
    assert orphan.exit_code == 3 and "sparkonce broker start" in orphan.output


def test_cli_rejects_bad_topic_spec(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["broker", "start", "--state-dir", str(tmp_path), "--topic", "x:zero"])
    assert result.exit_code == 2 and "PARTITIONS" in result.output
    assert broker_status(state_dir=tmp_path).info is None


@pytest.mark.spark
def test_sensor_readings_read_back_through_the_source(spark: SparkSession, broker: EmbeddedBroker) -> None:
    topic = broker.unique_topic("sensors")
    result = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=500, partitions=3, malformed_share=0.2, seed=3, devices=5
    )
    assert result.records == 500 and result.partitions == 3
    df = (
        spark.read.format("sparkonce.kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr(
            "cast(key as string) as key",
            "from_json(cast(value as string), 'device_id string, reading_time timestamp, value double') as r",
        )
    )
    rows = df.collect()
    assert len(rows) == 500
    good = [row for row in rows if row.r is not None and None not in (row.r.device_id, row.r.reading_time, row.r.value)]
    assert len(good) == 500 - result.malformed
    assert {row.r.device_id for row in good} <= {f"sensor-{i:03d}" for i in range(5)}
    assert all(row.key == row.r.device_id for row in good)  # keyed by device id
