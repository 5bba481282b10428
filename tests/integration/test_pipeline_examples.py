"""The worked examples of docs/pipeline.md (``examples/pipelines/``), run as shipped against a real broker, Spark,
Delta and PostgreSQL, with exact contents. Only the broker address and topic are changed in the copied files."""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.replay import plan_replay, replay_stage
from sparkonce.pipeline.run import run_pipeline
from sparkonce.pipeline.verify import verify_pipeline
from tests.conftest import REPO
from tests.delta_helpers import delta_rows

pytestmark = [pytest.mark.spark, pytest.mark.broker]

EXAMPLES = REPO / "examples" / "pipelines"


def _copy(name: str, tmp_path: Path, bootstrap: str, topic: str, old_topic: str) -> Path:
    target = tmp_path / name
    shutil.copytree(EXAMPLES / name, target)
    pipeline = target / "pipeline.toml"
    text = pipeline.read_text().replace("127.0.0.1:9092", bootstrap).replace(f'"{old_topic}"', f'"{topic}"')
    pipeline.write_text(text)
    return pipeline


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    from sparkonce_local.services.broker import create_topic

    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for index, value in enumerate(values):
        producer.produce(topic, value, partition=index % 2)
    assert producer.flush(30) == 0


def test_enrichment_example(spark, broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    topic = broker.unique_topic("device-events")
    pipeline = _copy("enrichment", tmp_path, broker.bootstrap, topic, "device_events")
    known = {f"sensor-{i:03d}": (f"site-{i % 2}", f"T{i % 3}") for i in range(6)}
    write_deltalake(
        str(pipeline.parent / "dimensions" / "devices"),
        pa.table(
            {
                "device_id": list(known),
                "site": [s for s, _ in known.values()],
                "model": [m for _, m in known.values()],
            }
        ),
    )
    rng = random.Random(7)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events: list[dict[str, Any] | None] = []
    for i in range(200):
        if i % 25 == 0:
            events.append(None)  # not JSON
            continue
        device = f"sensor-{rng.randrange(8):03d}"  # sensor-006 and -007 are not in the dimension
        events.append(
            {
                "device": {"id": device, "firmware": f"1.{i % 4}"},
                "reading": {"time": (start + timedelta(seconds=i)).isoformat(), "value": i / 4, "unit": "C"},
                "tags": ["a"] * (i % 3),
            }
        )
    _produce(broker.bootstrap, topic, [b"{oops" if e is None else json.dumps(e).encode() for e in events])

    result = run_pipeline(load_pipeline(pipeline), spark=spark, poll_seconds=0.2)
    assert not result.stopped

    expected = {
        (i % 2, i // 2): e
        for i, e in enumerate(events)  # (partition, offset) of record i
        if e is not None
    }
    rows = delta_rows(pipeline.parent / "tables" / "events")
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(expected)
    for row in rows:
        event = expected[(row["partition"], row["offset"])]
        assert row["device_id"] == event["device"]["id"]
        assert row["firmware"] == event["device"]["firmware"]
        assert row["value"] == event["reading"]["value"]
        assert row["tag_count"] == len(event["tags"])
        assert (row["site"], row["model"]) == known.get(row["device_id"], (None, None))
    unknown = delta_rows(pipeline.parent / "tables" / "unknown_devices")
    assert sorted((r["partition"], r["offset"]) for r in unknown) == sorted(
        k for k, e in expected.items() if e["device"]["id"] not in known
    )
    assert unknown

    # Replay of the transform stage: rebuilt from the raw table as of its first batch; nothing reads it downstream.
    config = load_pipeline(pipeline)
    with pytest.raises(PipelineConfigError, match=r"stages\.raw: replay rebuilds a stage from its input table"):
        plan_replay(config, "raw", "1")
    plan = plan_replay(config, "events", "1")
    assert plan.downstream == () and plan.targets == config.stage("events").tables
    replayed = replay_stage(spark, config, plan)
    raw_v1 = DeltaTable(str(pipeline.parent / "tables" / "raw"), version=1).to_pyarrow_table().to_pylist()
    first = {(r["partition"], r["offset"]) for r in raw_v1 if (r["partition"], r["offset"]) in expected}
    assert sorted((r["partition"], r["offset"]) for r in delta_rows(pipeline.parent / "tables" / "events")) == sorted(
        first
    )
    assert replayed.rows[plan.targets[1]] == sum(1 for k in first if expected[k]["device"]["id"] not in known)


def test_device_minutes_example(spark, broker, postgres, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sparkonce_local.services.producer import produce_sensor_readings

    topic = broker.unique_topic("device-minutes")
    pipeline = _copy("device_minutes", tmp_path, broker.bootstrap, topic, "sensor_readings_raw")
    produce_sensor_readings(broker.bootstrap, topic=topic, count=600, partitions=2, malformed_share=0.05, seed=9)
    monkeypatch.setenv("DEVICE_MINUTES_PG_DSN", postgres.dsn)

    config = load_pipeline(pipeline)
    result = run_pipeline(config, spark=spark, poll_seconds=0.2)
    assert not result.stopped
    postgres.execute((pipeline.parent / "view.sql").read_text())

    assert config.bronze is not None
    oracle: dict[tuple[str, datetime], list[float]] = defaultdict(list)
    for row in delta_rows(Path(config.bronze.table)):
        minute = row["reading_time"].replace(second=0, microsecond=0)
        oracle[(row["device_id"], minute)].append(row["value"])
    assert sum(len(v) for v in oracle.values()) > 500
    view = postgres.fetch("SELECT device_id, minute, readings, value_avg, value_min, value_max FROM device_minutes")
    got = {(d, m.astimezone(UTC).replace(tzinfo=None)): (int(n), avg, lo, hi) for d, m, n, avg, lo, hi in view}
    want = {
        (d, m.replace(tzinfo=None) if m.tzinfo is None else m.astimezone(UTC).replace(tzinfo=None)): (
            len(v),
            sum(v) / len(v),
            min(v),
            max(v),
        )
        for (d, m), v in oracle.items()
    }
    assert set(got) == set(want)
    for key, (n, avg, lo, hi) in want.items():
        assert got[key][0] == n
        assert got[key][1] == pytest.approx(avg)
        assert (got[key][2], got[key][3]) == (lo, hi)

    # The pipeline's verify: every committed batch of every stage recorded exactly once (Delta txns, the ledger).
    report = verify_pipeline(config)
    assert report.ok, report
    checked = {(t.stage, t.target) for t in report.targets}
    assert ("per_minute", "postgresql:device_minute_partials") in checked
    assert ("bronze", config.bronze.quarantine) in checked
    pg = next(t for t in report.targets if t.stage == "per_minute")
    assert pg.committed_batches > 0 and pg.row_difference == 0
    # ... and it notices a lost batch and rows nobody recorded.
    postgres.execute("DELETE FROM sparkonce_ledger WHERE app_id = %s AND batch_id = 0", (pg.record_id,))
    postgres.execute("INSERT INTO device_minute_partials SELECT * FROM device_minute_partials LIMIT 1")
    broken = next(t for t in verify_pipeline(config).targets if t.stage == "per_minute")
    assert broken.missing == (0,) and broken.row_difference is not None and broken.row_difference > 1
    plan = plan_replay(config, "bronze", "1")
    assert plan.downstream == ("per_minute",)
    with pytest.raises(PipelineConfigError, match=r"stages\.per_minute: replay rebuilds"):
        plan_replay(config, "per_minute", "1")
    checked_cli = CliRunner().invoke(cli, ["check", str(pipeline)])
    assert checked_cli.exit_code == 1, checked_cli.output
    assert "FINDING: stage per_minute -> postgresql:device_minute_partials" in checked_cli.output
    assert "ok: stage bronze" in checked_cli.output
