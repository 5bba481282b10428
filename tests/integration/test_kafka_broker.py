"""The embedded broker service, the sample producer and their CLI commands, against real tansu processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import BrokerError
from sparkonce_local.services.broker import broker_status, list_topics, start_broker, stop_broker
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


@pytest.mark.s3
def test_broker_on_the_object_store_keeps_acknowledged_records_across_kills(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    from sparkonce_local.chaos.reconcile import read_topic
    from sparkonce_local.services.broker import create_topic, kill_broker, restart_broker
    from sparkonce_local.services.storage import restart_storage, start_storage, stop_storage

    store = start_storage(state_dir=tmp_path / "store")
    state = tmp_path / "broker"
    try:
        info = start_broker(state_dir=state, store=store, bucket="broker-log")
        assert info.storage_engine == "s3://broker-log/" and info.store_endpoint == store.endpoint
        assert "broker-log" in store.list_buckets()
        create_topic(info.bootstrap, "t", partitions=2)
        acknowledged: list[bytes] = []

        def produce(first: int, count: int) -> None:
            producer = Producer({"bootstrap.servers": info.bootstrap, "acks": "all", "log_level": 0})
            for i in range(first, first + count):
                producer.produce(
                    "t",
                    key=str(i % 7).encode(),
                    value=str(i).encode(),
                    on_delivery=lambda err, msg: acknowledged.append(msg.value()) if err is None else None,
                )
            assert producer.flush(30) == 0

        produce(0, 300)
        assert len(acknowledged) == 300
        # SIGKILL right after the acknowledgements: every acknowledged record is in the store.
        assert kill_broker(state_dir=state) == info.pid
        assert not broker_status(state_dir=state).running
        restarted = restart_broker(state_dir=state)
        assert restarted.port == info.port and restarted.storage_engine == info.storage_engine
        assert restarted.pid != info.pid
        before = read_topic(info.bootstrap, "t", timeout=60)
        assert _values(before) == sorted(acknowledged) and _contiguous(before)
        # Offsets continue after the restart: no offset reused, no hole.
        produce(300, 200)
        after = read_topic(info.bootstrap, "t", timeout=60)
        assert len(after) == 500 and _values(after) == sorted(acknowledged) and _contiguous(after)
        assert {k: v for k, v in after.items() if k in before} == before
        # A crash of the object store under a running broker: the broker keeps serving every record.
        restart_storage(state_dir=store.state_dir, crash=True)
        assert broker_status(state_dir=state).running
        produce(500, 100)
        again = read_topic(info.bootstrap, "t", timeout=60)
        assert len(again) == 600 and _values(again) == sorted(acknowledged) and _contiguous(again)
        # And the CLI restarts it the same way.
        done = CliRunner().invoke(cli, ["broker", "restart", "--crash", "--state-dir", str(state), "--json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.output)["broker"]["bootstrap"] == info.bootstrap
        assert read_topic(info.bootstrap, "t", timeout=60) == again
    finally:
        stop_broker(state_dir=state)
        stop_storage(state_dir=tmp_path / "store")


def test_restart_of_an_in_memory_broker_keeps_its_port_and_loses_its_topics(tmp_path: Path) -> None:
    from sparkonce_local.services.broker import create_topic, restart_broker

    state = tmp_path / "broker"
    info = start_broker(state_dir=state)
    try:
        create_topic(info.bootstrap, "gone", partitions=1)
        restarted = restart_broker(state_dir=state, crash=True)
        assert restarted.bootstrap == info.bootstrap and restarted.storage_engine == "memory://tansu/"
        assert "gone" not in list_topics(info.bootstrap)
    finally:
        stop_broker(state_dir=state)
    with pytest.raises(BrokerError, match="no broker was started"):
        restart_broker(state_dir=tmp_path / "never")


def test_sample_producer_is_idempotent_with_acks_all_by_default(broker: EmbeddedBroker) -> None:
    topic = broker.unique_topic("idempotent")
    # Idempotence is on unless turned off: librdkafka then refuses any acks but "all".
    with pytest.raises(BrokerError, match="acks"):
        produce_sensor_readings(broker.bootstrap, topic=topic, count=1, client_config={"acks": "1"})
    weaker = {"acks": "1", "enable.idempotence": "false"}
    assert produce_sensor_readings(broker.bootstrap, topic=topic, count=3, client_config=weaker).records == 3
