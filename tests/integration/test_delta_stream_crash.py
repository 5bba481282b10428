"""Exactly-once of the Delta streaming sink, proven by killing the driver (SIGKILL) at named points.

Each test runs a real driver process (Python + JVM) in its own process group, kills it at a crash point, checks
the on-disk state the crash left behind, restarts it on the same checkpoint and checks the table row by row.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sparkonce_local.chaos import DriverRun, run_driver
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns
from tests.integration.conftest import delta_ids, write_input_files

pytestmark = [pytest.mark.spark, pytest.mark.crash]

DRIVER = ["-m", "sparkonce.ops.stream_files"]


def _run(tmp_path: Path, *extra: str, crash_at: str | None = None) -> DriverRun:
    args = [*DRIVER, str(tmp_path / "input"), str(tmp_path / "table"), str(tmp_path / "ck"), *extra]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=300)


def _delta_commits(table: Path) -> list[dict]:
    commits = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        commits.append({"table_version": int(path.stem), "actions": actions})
    return commits


@pytest.mark.sampled(keep=1)
@pytest.mark.parametrize("partition_by", [None, "device"], ids=["unpartitioned", "partitioned"])
def test_crash_after_delta_commit_before_checkpoint_commit(tmp_path: Path, partition_by: str | None) -> None:
    expected = write_input_files(tmp_path / "input", files=4, rows_per_file=50)
    extra = ["--partition-by", partition_by] if partition_by else []

    crashed = _run(tmp_path, *extra, crash_at="after_delta_commit:1")
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    # The crash left batch 1 planned but not committed in the checkpoint, and committed in the table.
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    query_id = checkpoint_query_id(ck)
    assert delta_txns(tmp_path / "table")[-1] == (query_id, 1)
    assert delta_ids(tmp_path / "table") == expected[:100]

    finished = _run(tmp_path, *extra)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "DONE" in finished.stdout
    ids = delta_ids(tmp_path / "table")
    assert [i for i, n in Counter(ids).items() if n > 1] == []  # no duplicate
    assert ids == expected  # no loss
    # Batch 1 was replayed by Spark but skipped by the sink: one txn per batch id, all with the same app id.
    assert delta_txns(tmp_path / "table") == [(query_id, b) for b in range(4)]
    assert (ck / "commits" / "3").exists()


def test_crash_mid_write_in_executors(tmp_path: Path) -> None:
    expected = write_input_files(tmp_path / "input", files=3, rows_per_file=40)

    crashed = _run(tmp_path, crash_at="mid_write:2")
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    assert (ck / "offsets" / "2").exists() and not (ck / "commits" / "2").exists()
    assert [v for _, v in delta_txns(tmp_path / "table")] == [0, 1]
    assert delta_ids(tmp_path / "table") == expected[:80]

    finished = _run(tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert delta_ids(tmp_path / "table") == expected
    assert [v for _, v in delta_txns(tmp_path / "table")] == [0, 1, 2]


def test_restart_after_clean_finish_writes_nothing(tmp_path: Path) -> None:
    expected = write_input_files(tmp_path / "input", files=2, rows_per_file=10)
    assert _run(tmp_path).returncode == 0
    versions_before = len(_delta_commits(tmp_path / "table"))
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(_delta_commits(tmp_path / "table")) == versions_before
    assert delta_ids(tmp_path / "table") == expected


def test_deleted_checkpoint_duplicates_and_history_shows_two_app_ids(tmp_path: Path) -> None:
    """The failure mode of seeds 000/004: a recreated checkpoint gets a new query id, so txn cannot help."""
    import shutil

    expected = write_input_files(tmp_path / "input", files=2, rows_per_file=10)
    assert _run(tmp_path).returncode == 0
    shutil.rmtree(tmp_path / "ck")
    assert _run(tmp_path).returncode == 0
    assert delta_ids(tmp_path / "table") == sorted(expected * 2)
    app_ids = {app for app, _ in delta_txns(tmp_path / "table")}
    assert len(app_ids) == 2
