"""The whole pipeline (Kafka -> raw -> bronze + quarantine -> gold) on a 2-worker standalone cluster, with an
executor's Python worker or executor JVM killed mid-batch, and with the driver SIGKILLed and restarted: exact
contents in every table.

The driver is ``sparkonce run PIPELINE --master spark://...`` in its own process group; executors are other
JVMs started by the cluster's workers. In the executor-kill tests the tables are on local disk, which every
process of this one-machine cluster sees; in the driver-kill test they are on the embedded S3 store (SeaweedFS),
reached through the pipeline file's ``[storage]`` table only: executors write their Parquet files straight to the
store, the driver commits, and checkpoints stay on the driver's disk.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import pytest

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.storage import table_location
from sparkonce_local.chaos import run_driver
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.quickstart import check_pipeline_tables
from sparkonce_local.services.cluster import ClusterInfo
from sparkonce_local.services.producer import produce_sensor_readings
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id
from tests.fixtures_storage import EmbeddedStore

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]

RECORDS = 400


def _pipeline(  # type: ignore[no-untyped-def]
    broker, tmp_path: Path, store: EmbeddedStore | None = None
) -> tuple[Path, int, int]:
    """The quickstart pipeline on a fresh topic; with ``store``, every table on it (options in ``[storage]``)."""
    topic = broker.unique_topic("cluster")
    produced = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=RECORDS, partitions=2, malformed_share=0.05, seed=7
    )
    text = quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=100)
    if store is not None:
        lake = store.unique_uri("cluster")
        text = text.replace('"tables/', f'"{lake}/')
        text += "\n[storage]\n" + "".join(f'{name} = "{value}"\n' for name, value in store.storage_options.items())
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(text)
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


@pytest.mark.sampled(keep=1)
@pytest.mark.parametrize("target", ["task", "executor"])
def test_executor_side_kill_mid_batch_is_retried_exactly_once(  # type: ignore[no-untyped-def]
    broker, spark_cluster: ClusterInfo, tmp_path: Path, target: Literal["task", "executor"]
) -> None:
    pipeline, malformed, devices = _pipeline(broker, tmp_path)
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--master", spark_cluster.master_url]
    started = time.time() - 1
    run = run_driver(args, crash_at="mid_write:1", crash_target=target, cwd=str(REPO), timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    # The point fired in batch 1's tasks, and what each firing killed (the worker, or its executor JVM) is gone.
    killed = run.killed_processes(target)
    assert killed, run.crashes
    assert {(c.point, c.batch_id) for c in killed} == {("mid_write", 1)}
    assert len(killed) == len(run.crashes)
    if target == "executor":
        assert all(c.killed_pid != c.pid for c in killed)  # the JVM above the worker, not the worker
        # Each killed executor JVM was replaced by one new one, besides the 2 the run started with.
        assert len(_executor_dirs(spark_cluster, started)) == 2 + len({c.killed_pid for c in killed})
    else:
        assert all(c.killed_pid == c.pid for c in killed)  # the Python worker itself
        assert len(_executor_dirs(spark_cluster, started)) == 2  # its executor JVM lived on
    _assert_exact(pipeline, broker.bootstrap, malformed, devices)


@pytest.mark.s3
def test_driver_sigkill_after_raw_commit_then_restart_with_tables_on_s3(  # type: ignore[no-untyped-def]
    broker, spark_cluster: ClusterInfo, object_store: EmbeddedStore, tmp_path: Path
) -> None:
    pipeline, malformed, devices = _pipeline(broker, tmp_path, object_store)
    config = load_pipeline(pipeline)
    assert config.raw.table.startswith("s3://")
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain", "--master", spark_cluster.master_url]

    crashed = run_driver(args, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=1500)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = Path(config.raw.checkpoint)
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    query_id = checkpoint_query_id(ck)
    raw_log = DeltaLog(table_location(config.raw.table, storage_options=object_store.storage_options))
    newest = raw_log.commit_entry(raw_log.latest_version())
    assert (newest.query_id, newest.batch_id) == (query_id, 1)  # the Delta commit of batch 1 is on the store

    restarted = run_driver(args, cwd=str(REPO), timeout=1500)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _assert_exact(pipeline, broker.bootstrap, malformed, devices)
