"""The embedded broker service, the sample producer and their CLI commands, against real Kafka broker processes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import BrokerError, JarsError
from sparkonce.jars import JARS_HOME_ENV
from sparkonce_local.services.broker import broker_status, list_topics, restart_broker, start_broker, stop_broker
from sparkonce_local.services.producer import produce_sensor_readings
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


def _values(records: dict[tuple[int, int], bytes | None]) -> list[bytes]:
    return sorted(v for v in records.values() if v is not None)


def _contiguous(records: dict[tuple[int, int], bytes | None]) -> bool:
    """Every partition's offsets run 0..n-1 without a hole."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset in records:
        by_partition.setdefault(partition, []).append(offset)
    return all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values())


def test_acknowledged_records_survive_sigkills_under_a_running_producer(tmp_path: Path) -> None:
    import threading

    from confluent_kafka import Producer

    from sparkonce_local.chaos.reconcile import read_topic
    from sparkonce_local.services.broker import create_topic, kill_broker

    state = tmp_path / "broker"
    info = start_broker(state_dir=state)
    acknowledged: list[bytes] = []
    refused: list[str] = []
    stop = threading.Event()

    def on_delivery(err: object, msg: Any) -> None:
        if err is None:
            acknowledged.append(msg.value())
        else:
            refused.append(str(err))

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": info.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "log_level": 0,
            }
        )
        index = 0
        while not stop.is_set():
            producer.produce("t", key=str(index % 7).encode(), value=str(index).encode(), on_delivery=on_delivery)
            producer.poll(0.002)
            index += 1
        assert producer.flush(150) == 0

    try:
        create_topic(info.bootstrap, "t", partitions=2)
        writer = threading.Thread(target=produce, name="producer")
        writer.start()
        try:
            for _ in range(2):
                # SIGKILL while the producer runs (some records acknowledged since the last restart, some in flight).
                _wait_for_more(acknowledged, 100)
                assert kill_broker(state_dir=state) is not None
                assert not broker_status(state_dir=state).running
                restarted = restart_broker(state_dir=state)
                assert restarted.port == info.port and restarted.pid != info.pid
        finally:
            _wait_for_more(acknowledged, 100)
            stop.set()
            writer.join(200)
        assert not writer.is_alive() and not refused, refused[:3]
        records = read_topic(info.bootstrap, "t", timeout=60)
        # Every acknowledged record is there exactly once (idempotence: no retried batch twice); offsets have no hole.
        assert _values(records) == sorted(acknowledged) and _contiguous(records)
        # A clean stop keeps the data directory: started again on it, the broker serves the same records.
        assert stop_broker(state_dir=state).was_running
        again = start_broker(state_dir=state)
        assert read_topic(again.bootstrap, "t", timeout=60) == records
        # And the CLI restarts it the same way.
        done = CliRunner().invoke(cli, ["broker", "restart", "--crash", "--state-dir", str(state), "--json"])
        assert done.exit_code == 0, done.output
        assert read_topic(json.loads(done.output)["broker"]["bootstrap"], "t", timeout=60) == records
    finally:
        stop.set()
        stop_broker(state_dir=state)
    with pytest.raises(BrokerError, match="no broker was started"):
        restart_broker(state_dir=tmp_path / "never")


def _wait_for_more(acknowledged: list[bytes], more: int, *, timeout: float = 120.0) -> None:
    """Poll until ``more`` records beyond those acknowledged now are acknowledged."""
    wanted = len(acknowledged) + more
    deadline = time.monotonic() + timeout
    while len(acknowledged) < wanted:
        assert time.monotonic() < deadline, f"{len(acknowledged)} of {wanted} acknowledged after {timeout:.0f}s"
        time.sleep(0.05)


def test_a_broker_without_its_jars_names_the_command_that_fetches_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JARS_HOME_ENV, str(tmp_path / "jars"))
    with pytest.raises(JarsError, match=r"run `sparkonce jars fetch kafka`"):
        start_broker(state_dir=tmp_path / "broker")
    result = CliRunner().invoke(cli, ["broker", "start", "--state-dir", str(tmp_path / "broker")])
    assert result.exit_code == 3 and "sparkonce jars fetch kafka" in result.output
    status = CliRunner().invoke(cli, ["jars", "status", "kafka"])
    assert status.exit_code == 3 and "not fetched" in status.output
    assert not (tmp_path / "broker" / "broker.pid").exists()


def test_sample_producer_is_idempotent_with_acks_all_by_default(broker: EmbeddedBroker) -> None:
    topic = broker.unique_topic("idempotent")
    # Idempotence is on unless turned off: librdkafka then refuses any acks but "all".
    with pytest.raises(BrokerError, match="acks"):
        produce_sensor_readings(broker.bootstrap, topic=topic, count=1, client_config={"acks": "1"})
    weaker = {"acks": "1", "enable.idempotence": "false"}
    assert produce_sensor_readings(broker.bootstrap, topic=topic, count=3, client_config=weaker).records == 3
