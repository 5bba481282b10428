"""A real standalone Spark cluster (a master and two 1-core workers from the pyspark wheel, on loopback): its
lifecycle, a Delta write/read through sparkonce by executors in other processes, and the probe that refuses
executors that cannot import sparkonce before any data moves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce_local.chaos import run_driver
from sparkonce_local.services.cluster import ClusterInfo, cluster_status
from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


def test_two_workers_are_alive_and_status_shows_them(spark_cluster: ClusterInfo) -> None:
    status = cluster_status(state_dir=spark_cluster.state_dir)
    assert status.running and status.reachable
    assert status.alive_workers == 2
    assert [(w.cores, w.memory_mb) for w in status.workers] == [(1, 2048), (1, 2048)]
    shown = CliRunner().invoke(cli, ["cluster", "status", "--state-dir", str(spark_cluster.state_dir), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["alive_workers"] == 2


def test_delta_write_and_read_on_two_workers(spark_cluster: ClusterInfo, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = tmp_path / "table"
    args = ["-m", "tests.integration.drivers.cluster_delta", spark_cluster.master_url, str(table), "--rows", "20000"]
    run = run_driver(args, cwd=str(REPO), timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["executors"] == 2
    assert (result["count"], result["distinct"]) == (20000, 20000)
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["id"])["id"].to_pylist()
    assert sorted(ids) == list(range(20000))


def test_executors_without_sparkonce_are_refused_before_any_data_moves(
    spark_cluster: ClusterInfo, tmp_path: Path
) -> None:
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    table = tmp_path / "table"
    args = [
        "-m",
        "tests.integration.drivers.cluster_delta",
        spark_cluster.master_url,
        str(table),
        "--executor-python",
        str(bare / "bin" / "python"),
    ]
    run = run_driver(args, cwd=str(REPO), timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]  # the driver's ClusterError, uncaught: Python's exit status 1
    assert "cannot run sparkonce" in run.stderr and "No module named" in run.stderr, run.stderr[-3000:]
    assert str(bare / "bin" / "python") in run.stderr and "docs/cluster.md" in run.stderr
    assert not table.exists()
