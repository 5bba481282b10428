"""The whole pipeline, killed with SIGKILL inside a raw batch and restarted: exact contents in every table.

The driver is ``sparkonce run`` in its own process group (real broker, real Spark, real Delta).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.pipeline.loader import load_pipeline
from sparkonce_local.chaos import run_driver
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.quickstart import check_pipeline_tables
from sparkonce_local.services.producer import produce_sensor_readings
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]


def test_crash_after_raw_delta_commit_before_checkpoint_commit(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = broker.unique_topic("pipeline")
    produced = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=400, partitions=2, malformed_share=0.05, seed=3
    )
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=100))
    config = load_pipeline(pipeline)
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain"]

    crashed = run_driver(args, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=600)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = Path(config.raw.checkpoint)
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    assert delta_txns(config.raw.table)[-1] == (checkpoint_query_id(ck), 1)  # batch 1 committed before the kill

    restarted = run_driver(args, cwd=str(REPO), timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    checks = check_pipeline_tables(pipeline, broker.bootstrap)
    counts = {t.table: t.rows for t in checks["tables"]}  # type: ignore[attr-defined]
    assert counts["raw"] == 400
    assert counts["bronze"] + counts["quarantine"] == 400
    assert counts["quarantine"] == produced.malformed
    assert checks["raw_duplicated_offsets"] == 0 and checks["raw_missing_offsets"] == 0
    assert checks["bronze_quarantine_duplicated"] == 0 and checks["bronze_quarantine_missing"] == 0
    assert checks["gold_mismatches"] == 0
    assert counts["gold"] == produced.devices
