"""The delta-spark oracle's ``oracle_pause`` SQL function (tests/oracle/runner.py), without Spark: how a test holds
delta-spark between its read and its commit."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.oracle.runner import pause


def test_pause_says_it_waits_and_returns_true_once_let_go(tmp_path: Path) -> None:
    flag = str(tmp_path / "pause")
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(pause(flag, 1)))
    thread.start()
    deadline = time.monotonic() + 30
    while not Path(flag + ".waiting").exists():
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    assert answers == [] and thread.is_alive()
    Path(flag + ".go").touch()
    thread.join(timeout=30)
    assert answers == [True]


def test_pause_does_not_wait_once_let_go(tmp_path: Path) -> None:
    flag = str(tmp_path / "pause")
    Path(flag + ".go").touch()
    assert pause(flag, None) is True
    assert not Path(flag + ".waiting").exists()
