"""The whole pipeline (Kafka -> raw -> bronze + quarantine -> gold) on a 2-worker standalone cluster, with an
executor's Python worker or executor JVM killed mid-batch, and with the driver SIGKILLed and restarted: exact
contents in every table.

The driver is ``sparkonce run PIPELINE --master spark://...`` in its own process group; executors are other
JVMs started by the cluster's workers. Tables are on local disk, which every process of this one-machine cluster
sees.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal

import pytest

from sparkonce.ops.chaos import run_driver
from sparkonce.pipeline.config import load_pipeline
from sparkonce.pipeline.defaults import quickstart_pipeline
from sparkonce.pipeline.quickstart import check_pipeline_tables
from sparkonce.services.cluster import ClusterInfo
from sparkonce.services.producer import produce_sensor_readings
from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]

RECORDS = 400


def _pipeline(broker, tmp_path: Path) -> tuple[Path, int, int]:  # type: ignore[no-untyped-def]
    topic = broker.unique_topic("cluster")
    produced = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=RECORDS, partitions=2, malformed_share=0.05, seed=7
    )
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=100))
    return pipeline, produced.malformed, produced.devices


def _assert_exact(pipeline: Path, bootstrap: str, malformed: int, devices: int) -> None:
    checks = check_pipeline_tables(pipeline, bootstrap)
    counts = {t.table: t.rows for t in checks["tables"]}
    assert counts["raw"] == RECORDS
    assert checks["raw_duplicated_offsets"] == 0 and checks["raw_missing_offsets"] == 0
    assert counts["bronze"] + counts["quarantine"] == RECORDS
    assert counts["quarantine"] == malformed
    assert checks["bronze_quarantine_duplicated"] == 0 and checks["bronze_quarantine_missing"] == 0
    assert checks["gold_mismatches"] == 0
    assert counts["gold"] == devices


def _executor_dirs(cluster: ClusterInfo, since: float) -> list[Path]:
    """Executor work dirs (worker-N/<app>/<executor id>) of applications started after ``since``."""
    return [
        executor
        for worker in cluster.workers
        for app in worker.work_dir.glob("app-*")
        if app.stat().st_mtime >= since
        for executor in app.iterdir()
        if executor.is_dir()
    ]


@pytest.mark.parametrize("target", ["task", "executor"])
def test_executor_side_kill_mid_batch_is_retried_exactly_once(  # type: ignore[no-untyped-def]
    broker, spark_cluster: ClusterInfo, tmp_path: Path, target: Literal["task", "executor"]
) -> None:
    pipeline, malformed, devices = _pipeline(broker, tmp_path)
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--master", spark_cluster.master_url]
    started = time.time() - 1
    run = run_driver(args, crash_at="mid_write:1", crash_target=target, cwd=str(REPO), timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    executors = _executor_dirs(spark_cluster, started)
    if target == "executor":
        # Each killed executor JVM was replaced by a new one: more executors than the 2 the run started with.
        assert len(executors) > 2, executors
    else:
        logs = "".join((e / "stderr").read_text(errors="replace") for e in executors if (e / "stderr").exists())
        assert "Python worker exited unexpectedly" in logs or "crashed" in logs, logs[-3000:]
    _assert_exact(pipeline, broker.bootstrap, malformed, devices)


def test_driver_sigkill_after_raw_commit_then_restart(  # type: ignore[no-untyped-def]
    broker, spark_cluster: ClusterInfo, tmp_path: Path
) -> None:
    pipeline, malformed, devices = _pipeline(broker, tmp_path)
    config = load_pipeline(pipeline)
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--master", spark_cluster.master_url]

    crashed = run_driver(args, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=1500)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = Path(config.raw.checkpoint)
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    query_id = json.loads((ck / "metadata").read_text())["id"]
    log = sorted((Path(config.raw.table) / "_delta_log").glob("*.json"))[-1].read_text()
    assert f'"appId":"{query_id}","version":1' in log.replace(" ", "")

    restarted = run_driver(args, cwd=str(REPO), timeout=1500)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _assert_exact(pipeline, broker.bootstrap, malformed, devices)
