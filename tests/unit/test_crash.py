"""Crash points kill exactly what they say, record it, and refuse to fire when they cannot (no Spark needed)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkonce.crash import (
    ENV_PGID,
    ENV_POINT,
    ENV_RECORD,
    ENV_TARGET,
    CrashPointError,
    crash_point,
    read_crash_records,
)
from sparkonce_local.chaos import run_driver

# A child that reaches the after_delta_commit point for batch 3 and prints what happened after it.
CHILD = [
    "-c",
    "import os, sys; from sparkonce.crash import crash_point; "
    "crash_point('after_delta_commit', 3); print('survived', os.getpid()); sys.stdout.flush()",
]


@pytest.mark.parametrize(
    "armed",
    [None, "after_delta_commit:4", "mid_write:3", "mid_write"],
    ids=["unarmed", "another-batch", "another-point-same-batch", "another-point-any-batch"],
)
def test_unarmed_and_unmatched_points_do_nothing(tmp_path: Path, armed: str | None) -> None:
    """The child reaches ``after_delta_commit`` for batch 3 with target ``process`` (which would kill it) and a
    record file: a point that is not armed, or armed for another batch or point, lets it run on and records
    nothing."""
    record = tmp_path / "crashes.jsonl"
    env = {"PATH": "/usr/bin:/bin", ENV_TARGET: "process", ENV_RECORD: str(record)}
    if armed is not None:
        env[ENV_POINT] = armed
    proc = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("survived ")
    assert read_crash_records(str(record)) == [] and not record.exists()


def test_driver_target_without_a_process_group_refuses_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_POINT, "after_delta_commit:3")
    monkeypatch.setenv(ENV_TARGET, "driver")
    monkeypatch.delenv(ENV_PGID, raising=False)
    with pytest.raises(CrashPointError, match=r"after_delta_commit .*SPARKONCE_CRASH_PGID.*nothing was killed"):
        crash_point("after_delta_commit", 3)


def test_unknown_target_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_POINT, "after_delta_commit")
    monkeypatch.setenv(ENV_TARGET, "machine")
    with pytest.raises(CrashPointError, match=r"'machine' is not one of"):
        crash_point("after_delta_commit", 3)


def test_process_target_kills_only_the_process_and_records_it(tmp_path: Path) -> None:
    record = tmp_path / "crashes.jsonl"
    env = {"PATH": "/usr/bin:/bin", ENV_POINT: "after_delta_commit:3", ENV_TARGET: "process", ENV_RECORD: str(record)}
    proc = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert "survived" not in proc.stdout
    (fired,) = read_crash_records(str(record))
    assert (fired.point, fired.batch_id, fired.target) == ("after_delta_commit", 3, "process")
    assert fired.killed_pid == fired.pid and fired.killed_pgid is None


def test_run_driver_tells_a_crash_point_kill_from_any_other_sigkill() -> None:
    fired = run_driver(CHILD, crash_at="after_delta_commit:3", crash_target="process", timeout=60)
    assert fired.returncode == -signal.SIGKILL
    assert not fired.killed  # the process target killed the driver's own process, not its group via a driver point
    (record,) = fired.killed_processes("process")
    assert record.pid == fired.pgid  # the child is the one that reached the point

    self_killed = run_driver(["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=60)
    assert self_killed.returncode == -signal.SIGKILL and self_killed.crashes == ()
    assert not self_killed.killed

    unarmed = run_driver(CHILD, timeout=60)
    assert unarmed.returncode == 0 and "survived" in unarmed.stdout and unarmed.crashes == ()


def test_run_driver_driver_target_kills_the_group(tmp_path: Path) -> None:
    # The child exports its own group as a local session would, then reaches the point.
    script = (
        "import os; os.environ['SPARKONCE_CRASH_PGID'] = str(os.getpgrp()); "
        "from sparkonce.crash import crash_point; crash_point('after_delta_commit', 3); print('survived')"
    )
    run = run_driver(["-c", script], crash_at="after_delta_commit:3", timeout=60)
    assert run.killed, run.stderr
    (record,) = run.crashes
    assert record.killed_pgid == run.pgid and record.target == "driver"


def test_an_armed_point_fires_once_in_a_running_application(tmp_path: Path) -> None:
    """The chaos harness arms a point in a running driver: the first process to reach it claims it and dies."""
    from sparkonce.crash import ENV_ARM, arm, disarm

    arm_file = tmp_path / "arm"
    record = tmp_path / "crashes.jsonl"
    env = {"PATH": "/usr/bin:/bin", ENV_ARM: str(arm_file), ENV_RECORD: str(record)}
    unarmed = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert unarmed.returncode == 0 and "survived" in unarmed.stdout

    arm(str(arm_file), "mid_write")  # another point: this child passes it
    other = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert other.returncode == 0 and arm_file.exists()

    arm(str(arm_file), "after_delta_commit")
    fired = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert fired.returncode == -signal.SIGKILL and not arm_file.exists()
    (claimed,) = read_crash_records(str(record))
    assert (claimed.point, claimed.target, claimed.batch_id) == ("after_delta_commit", "process", 3)
    again = subprocess.run([sys.executable, *CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0  # claimed once: the next process passes
    assert not disarm(str(arm_file))
