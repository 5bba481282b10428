"""The daemon manager shared by the broker, object store and cluster, on real child processes (no mocks)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkonce.errors import StorageError
from sparkonce_local.services.daemon import Daemon, DaemonProcess
from sparkonce_local.services.process import alive, kill

MARKER = "sparkonce-test-daemon"
IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)
OBEYS_SIGTERM = "import sys, time\nprint('ready', flush=True)\ntime.sleep(120)\n"


@dataclass(frozen=True)
class Info:
    pid: int
    address: str
    state_dir: Path


def _daemon(*, marker: bytes = MARKER.encode(), keep_info: bool = False) -> Daemon[Info]:
    return Daemon(
        name="object store",
        info_file="test.json",
        pid_file="test.pid",
        error=StorageError,
        encode=lambda info: {"pid": info.pid, "address": info.address},
        decode=lambda state, data: Info(pid=int(data["pid"]), address=str(data["address"]), state_dir=state),
        processes=lambda info: [DaemonProcess(info.pid, (marker,))],
        describe=lambda info: info.address,
        keep_info=keep_info,
    )


def _spawn(tmp_path: Path, code: str) -> subprocess.Popen[bytes]:
    """A child in its own session that says ``ready`` once its signal disposition is set."""
    log_file = tmp_path / "child.log"
    proc = Daemon.spawn([sys.executable, "-c", code, MARKER], log_file=log_file)
    deadline = time.monotonic() + 60
    while b"ready" not in log_file.read_bytes():
        assert proc.poll() is None, log_file.read_text()
        if time.monotonic() > deadline:
            kill(proc.pid)
            pytest.fail(f"the child did not say ready within 60 s: {log_file.read_text()!r}")
        time.sleep(0.02)
    return proc


@pytest.fixture
def children() -> Any:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if alive(proc.pid):
            kill(proc.pid)


def test_record_round_trips_through_the_state_files(tmp_path: Path) -> None:
    daemon = _daemon()
    info = Info(pid=4242, address="http://127.0.0.1:1", state_dir=tmp_path)
    daemon.write(tmp_path, info, extra={"secret": "kept"})
    assert daemon.read(tmp_path) == info
    assert (tmp_path / "test.pid").read_text() == "4242\n"
    assert (tmp_path / "test.json").stat().st_mode & 0o777 == 0o600
    assert daemon.read_raw(tmp_path) == {"pid": 4242, "address": "http://127.0.0.1:1", "secret": "kept"}


def test_forget_removes_the_info_file_unless_the_daemon_keeps_it(tmp_path: Path) -> None:
    info = Info(pid=1, address="a", state_dir=tmp_path)
    kept = _daemon(keep_info=True)
    kept.write(tmp_path, info)
    kept.forget(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.json"]
    dropped = _daemon()
    dropped.write(tmp_path, info)
    dropped.forget(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_no_state_files_is_no_record(tmp_path: Path) -> None:
    assert _daemon().probe(tmp_path) == (tmp_path.resolve(), None, False)


def test_an_unreadable_info_file_is_the_daemons_error(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text('{"pid": "not a number", "address": "a"}')
    with pytest.raises(StorageError, match=r"object store state file .*test\.json is unreadable"):
        _daemon().read(tmp_path)
    (tmp_path / "test.json").write_text("not json")
    with pytest.raises(StorageError, match="is unreadable"):
        _daemon().read(tmp_path)


def test_a_recorded_pid_running_another_program_is_not_the_daemon(tmp_path: Path, children: Any) -> None:
    other = _spawn(tmp_path, OBEYS_SIGTERM)
    children.append(other)
    daemon = _daemon(marker=b"tansu")
    daemon.write(tmp_path, Info(pid=other.pid, address="a", state_dir=tmp_path))

    assert daemon.probe(tmp_path)[2] is False
    daemon.refuse_if_running(tmp_path)  # a stale record does not block a start
    assert daemon.kill(tmp_path) is None
    stopped = daemon.stop(tmp_path, timeout=5.0)

    assert stopped.pids == [] and not stopped.forced
    assert stopped.result(other.pid).was_running is False
    assert alive(other.pid), "the other program must not be signalled"
    assert list(tmp_path.glob("test.*")) == []


def test_a_running_daemon_refuses_a_second_start(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, OBEYS_SIGTERM)
    children.append(proc)
    daemon = _daemon()
    daemon.write(tmp_path, Info(pid=proc.pid, address="http://127.0.0.1:9", state_dir=tmp_path))
    with pytest.raises(StorageError, match=rf"an object store already runs for .* \(pid {proc.pid}, http://"):
        daemon.refuse_if_running(tmp_path)


def test_stop_terminates_a_daemon_that_obeys_sigterm(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, OBEYS_SIGTERM)
    children.append(proc)
    daemon = _daemon()
    daemon.write(tmp_path, Info(pid=proc.pid, address="a", state_dir=tmp_path))

    stopped = daemon.stop(tmp_path, timeout=30.0)

    assert stopped.pids == [proc.pid] and stopped.forced is False
    assert not alive(proc.pid)
    assert list(tmp_path.glob("test.*")) == []


def test_stop_kills_a_daemon_that_ignores_sigterm(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, IGNORES_SIGTERM)
    children.append(proc)
    daemon = _daemon()
    daemon.write(tmp_path, Info(pid=proc.pid, address="a", state_dir=tmp_path))

    stopped = daemon.stop(tmp_path, timeout=0.5)

    assert stopped.pids == [proc.pid] and stopped.forced is True
    assert not alive(proc.pid)
    assert stopped.result(proc.pid).was_running is True


def test_kill_keeps_the_info_file_for_a_restart(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, IGNORES_SIGTERM)
    children.append(proc)
    daemon = _daemon()
    info = Info(pid=proc.pid, address="a", state_dir=tmp_path)
    daemon.write(tmp_path, info)

    assert daemon.kill(tmp_path) == proc.pid

    assert not alive(proc.pid)
    assert sorted(p.name for p in tmp_path.glob("test.*")) == ["test.json"]
    assert daemon.read(tmp_path) == info


def test_a_start_that_never_gets_ready_is_stopped_and_forgotten(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, OBEYS_SIGTERM)
    children.append(proc)
    daemon = _daemon()

    def never_ready() -> None:
        raise StorageError("not ready")

    with pytest.raises(StorageError, match="not ready"):
        daemon.launch(tmp_path, Info(pid=proc.pid, address="a", state_dir=tmp_path), ready=never_ready)

    assert not alive(proc.pid)
    assert list(tmp_path.glob("test.*")) == []


def test_a_stop_for_a_restart_keeps_the_info_file(tmp_path: Path, children: Any) -> None:
    proc = _spawn(tmp_path, OBEYS_SIGTERM)
    children.append(proc)
    daemon = _daemon()
    info = Info(pid=proc.pid, address="a", state_dir=tmp_path)
    daemon.write(tmp_path, info)

    stopped = daemon.stop(tmp_path, timeout=30.0, keep_info=True)

    assert stopped.pids == [proc.pid]
    assert daemon.read(tmp_path) == info
    assert not (tmp_path / "test.pid").exists()
