"""``doctor --kafka`` and ``verify --kafka`` against the embedded broker (no Spark)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import BrokerError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.kafka.watermarks import fetch_watermarks, list_partitions
from sparkonce.ops.doctor import diagnose
from sparkonce_local.services.broker import free_port
from tests.fixtures_broker import EmbeddedBroker, numbered
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

pytestmark = [pytest.mark.broker]


@pytest.fixture
def topic(broker: EmbeddedBroker) -> str:
    """Two partitions with 10 records each, one record per batch (the broker's latest offset is exact then)."""
    name = broker.create_topic(partitions=2)
    for partition in (0, 1):
        broker.produce(name, numbered(10), partition=partition, linger_ms=0, batch_num_messages=1)
    return name


def test_watermarks_and_partitions(broker: EmbeddedBroker, topic: str) -> None:
    assert list_partitions(broker.bootstrap, topic) == [0, 1]
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert fetch_watermarks(broker.bootstrap, [tp0, tp1]) == {tp0: (0, 10), tp1: (0, 10)}


def test_doctor_kafka_offsets_beyond_latest(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> None:
    # batch N ends at offset (N+1)*5 in partition 0: batch 2 ends at 15 > 10 records in the topic.
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3), topic=topic, per_batch=5)
    report = diagnose(cp, kafka_bootstrap=broker.bootstrap)
    (state,) = report.kafka
    assert (state.topic, state.partition, state.next_start_offset, state.earliest, state.latest) == (
        topic,
        0,
        15,
        0,
        10,
    )
    assert [f.code for f in report.findings] == ["no-table-examined", "kafka-offsets-ahead"]  # no --table given
    healthy = make_checkpoint(tmp_path / "cp2", planned=range(2), committed=range(2), topic=topic, per_batch=5)
    result = CliRunner().invoke(cli, ["doctor", str(healthy), "--kafka", broker.bootstrap, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kafka"][0]["next_start_offset"] == 10


def test_verify_against_topic(broker: EmbeddedBroker, topic: str, tmp_path: Path) -> None:
    table = tmp_path / "raw"
    stream_commit(table, "q", 0, raw_rows(topic, 0, range(10)))
    stream_commit(table, "q", 1, raw_rows(topic, 1, range(6)))
    stream_commit(table, "q", 2, raw_rows(topic, 1, range(4, 6)))  # a replayed tail
    result = CliRunner().invoke(
        cli, ["verify", "--table", str(table), "--kafka", broker.bootstrap, "--topic", topic, "--json"]
    )
    assert result.exit_code == 1, result.output
    p0, p1 = json.loads(result.output)["partitions"]
    assert (p0["missing_offsets"], p0["duplicated_offsets"]) == (0, 0)
    assert (p1["missing_offsets"], p1["missing_ranges"], p1["duplicated_offsets"]) == (4, [[6, 10]], 2)
    assert p1["duplicates"][0]["table_versions"] == [1, 2]


def test_unreachable_broker(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerError, match=rf"^cannot list earliest offset of t-0 on {re.escape(dead)}: "):
        fetch_watermarks(dead, [TopicPartition("t", 0)], timeout_s=1.0)
