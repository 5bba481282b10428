"""The pipeline killed with SIGKILL between the bronze and quarantine commits, then right after a gold merge commit.

One pipeline, three driver runs of ``sparkonce run`` (real broker, real Spark, real Delta), each in its own process
group (:func:`sparkonce_local.chaos.run_driver`):

1. crash at ``between_fanout_tables:1``: bronze batch 1 made its bronze Delta commit, not its quarantine one;
2. restart, crash at ``after_gold_merge:1``: bronze batch 1 is re-run (bronze skipped by its txn, quarantine
   written), then gold batch 1 makes its merge commit and dies before ``commits/1``;
3. restart to the end.

Then exact contents everywhere, against an oracle computed in Python from the raw records: raw holds every offset
of the topic once, bronze + quarantine hold every raw record once (each on the side the oracle puts it), gold holds
exactly the latest valid record per device, and each table's Delta log holds one txn per (app id, batch id) of its
stage's committed batches. Chained in one test because every driver start costs ~10 s plus the work on 2 cores.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.model import PipelineConfig
from sparkonce_local.chaos import DriverRun, run_driver
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.services.producer import produce_sensor_readings
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_commits, checkpoint_query_id, delta_rows, delta_txns

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]

RECORDS = 300
Record = tuple[str, int, int]
"""(topic, partition, offset) of one Kafka record."""


def _pipeline_text(bootstrap: str, topic: str) -> str:
    """The demo pipeline with small batches everywhere, so bronze and gold both run several batches."""
    text = quickstart_pipeline(bootstrap, topic=topic, max_offsets_per_trigger=100)
    text = text.replace('drift = "fail"\n', 'drift = "fail"\nmax_files_per_trigger = 1\n', 1)
    return text.replace('merge = "latest"\n', 'merge = "latest"\nmax_files_per_trigger = 1\n', 1)


def _run(pipeline: Path, crash_at: str | None = None, *, stages: tuple[str, ...] = ()) -> DriverRun:
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", *(f"--stage={s}" for s in stages)]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=600)


def _planned_not_committed(checkpoint: str, batch_id: int) -> bool:
    ck = Path(checkpoint)
    return (ck / "offsets" / str(batch_id)).exists() and not (ck / "commits" / str(batch_id)).exists()


def _valid(value: str | None) -> dict[str, Any] | None:
    """The oracle of bronze's rules for the producer's records: the parsed reading, or None (quarantined)."""
    try:
        reading = json.loads(value or "")
    except json.JSONDecodeError:
        return None
    if not isinstance(reading, dict) or any(reading.get(f) is None for f in ("device_id", "reading_time", "value")):
        return None
    if not isinstance(reading["value"], int | float):
        return None
    return reading


def _check_exact_contents(config: PipelineConfig, topic: str, produced: int) -> None:
    assert config.bronze is not None and config.gold is not None
    raw = delta_rows(config.raw.table, ["value", "topic", "partition", "offset"])
    raw_records = [(r["topic"], r["partition"], r["offset"]) for r in raw]
    assert len(raw_records) == len(set(raw_records)) == produced
    ends = Counter(p for _, p, _ in raw_records)
    assert set(raw_records) == {(topic, p, o) for p, n in ends.items() for o in range(n)}, "gap in raw offsets"

    parsed = {(r["topic"], r["partition"], r["offset"]): _valid(r["value"]) for r in raw}
    bronze = delta_rows(config.bronze.table)
    quarantine = delta_rows(config.bronze.quarantine)
    bronze_records = [(r["_topic"], r["_partition"], r["_offset"]) for r in bronze]
    quarantine_records = [(r["topic"], r["partition"], r["offset"]) for r in quarantine]
    assert len(bronze_records) == len(set(bronze_records)), "duplicate in bronze"
    assert len(quarantine_records) == len(set(quarantine_records)), "duplicate in quarantine"
    assert set(bronze_records) == {k for k, v in parsed.items() if v is not None}
    assert set(quarantine_records) == {k for k, v in parsed.items() if v is None}
    assert quarantine_records and all(r["reason"] for r in quarantine)

    latest: dict[str, tuple[datetime, int, Record]] = {}
    for row in bronze:
        candidate = (row["reading_time"], row["_offset"], (row["_topic"], row["_partition"], row["_offset"]))
        if row["device_id"] not in latest or candidate[:2] > latest[row["device_id"]][:2]:
            latest[row["device_id"]] = candidate
    gold = delta_rows(config.gold.table)
    assert sorted(r["device_id"] for r in gold) == sorted(latest)
    for row in gold:
        assert (row["_topic"], row["_partition"], row["_offset"]) == latest[row["device_id"]][2], row["device_id"]
        reading = parsed[(row["_topic"], row["_partition"], row["_offset"])]
        assert reading is not None and row["value"] == pytest.approx(reading["value"])


def _check_one_txn_per_batch(config: PipelineConfig) -> None:
    assert config.bronze is not None and config.gold is not None
    # Bronze and quarantine are one fan-out: txn app id f"{query id}:{table name in the fan-out}".
    owners = [
        (config.raw.table, config.raw.checkpoint, ""),
        (config.bronze.table, config.bronze.checkpoint, ":bronze"),
        (config.bronze.quarantine, config.bronze.checkpoint, ":quarantine"),
        (config.gold.table, config.gold.checkpoint, ""),
    ]
    for table, checkpoint, suffix in owners:
        txns = delta_txns(table)
        assert len(txns) == len(set(txns)), f"{table}: a (app id, batch id) committed twice: {Counter(txns)}"
        app_id = checkpoint_query_id(checkpoint) + suffix
        assert {a for a, _ in txns} == {app_id}, table
        assert {v for _, v in txns} == checkpoint_commits(checkpoint), table


def test_crash_between_fanout_tables_then_after_gold_merge(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = broker.unique_topic("crash-points")
    produced = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=RECORDS, partitions=2, malformed_share=0.1, seed=11
    )
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(_pipeline_text(broker.bootstrap, topic))
    config = load_pipeline(pipeline)
    assert config.bronze is not None and config.gold is not None

    # 1. Bronze batch 1: bronze committed (txn version 1), quarantine not, and no commits/1.
    crashed = _run(pipeline, "between_fanout_tables:1")
    assert crashed.killed, crashed.stderr[-3000:]
    assert _planned_not_committed(config.bronze.checkpoint, 1)
    bronze_app = checkpoint_query_id(config.bronze.checkpoint)
    assert max(v for a, v in delta_txns(config.bronze.table) if a == f"{bronze_app}:bronze") == 1
    assert max(v for a, v in delta_txns(config.bronze.quarantine) if a == f"{bronze_app}:quarantine") == 0
    assert not Path(config.gold.checkpoint, "commits").exists(), "gold ran before bronze finished"

    # 2. Bronze batch 1 re-run, then gold batch 1 merged (txn version 1) and killed before commits/1.
    crashed = _run(pipeline, "after_gold_merge:1")
    assert crashed.killed, crashed.stderr[-3000:]
    assert 1 in checkpoint_commits(config.bronze.checkpoint)
    assert _planned_not_committed(config.gold.checkpoint, 1)
    gold_app = checkpoint_query_id(config.gold.checkpoint)
    assert max(v for a, v in delta_txns(config.gold.table) if a == gold_app) == 1

    # 3. To the end: gold batch 1 is skipped by its txn, the rest runs.
    restarted = _run(pipeline)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert len(checkpoint_commits(config.gold.checkpoint)) > 2
    _check_exact_contents(config, topic, produced.records)
    _check_one_txn_per_batch(config)


def test_bronze_and_gold_killed_in_batch_zero_restart_after_their_input_grew(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 13: Spark re-runs an uncommitted batch 0 with fresh initial offsets; the input table grew meanwhile."""
    topic = broker.unique_topic("batch-zero")
    produced = 0

    def produce(seed: int) -> None:
        nonlocal produced
        result = produce_sensor_readings(
            broker.bootstrap, topic=topic, count=RECORDS, partitions=2, malformed_share=0.1, seed=seed
        )
        produced += result.records

    produce(21)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(_pipeline_text(broker.bootstrap, topic))
    config = load_pipeline(pipeline)
    assert config.bronze is not None and config.gold is not None

    # 1. Bronze batch 0 (one file of raw's initial snapshot): bronze committed, quarantine not, no commits/0.
    crashed = _run(pipeline, "between_fanout_tables:0")
    assert crashed.killed, crashed.stderr[-3000:]
    assert _planned_not_committed(config.bronze.checkpoint, 0)
    raw_versions = len(list((Path(config.raw.table) / "_delta_log").glob("*.json")))
    produce(22)
    assert _run(pipeline, stages=("raw",)).returncode == 0  # raw grows before bronze restarts
    assert len(list((Path(config.raw.table) / "_delta_log").glob("*.json"))) > raw_versions

    # 2. Bronze re-runs batch 0 and goes on; gold batch 0 merges and is killed before commits/0.
    crashed = _run(pipeline, "after_gold_merge:0")
    assert crashed.killed, crashed.stderr[-3000:]
    assert 0 in checkpoint_commits(config.bronze.checkpoint)
    assert _planned_not_committed(config.gold.checkpoint, 0)
    produce(23)
    assert _run(pipeline, stages=("raw", "bronze")).returncode == 0  # bronze grows before gold restarts

    # 3. To the end.
    restarted = _run(pipeline)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _check_exact_contents(config, topic, produced)
    _check_one_txn_per_batch(config)
