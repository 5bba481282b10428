"""Process plumbing shared by the embedded services: free loopback ports, stopping by pid, log tails.

Everything here runs on the machine that starts the services (CLI, test session, benchmark), never on Spark
executors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that is free right now."""
    return free_ports(1, host=host)[0]


def free_ports(count: int, *, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct TCP ports on ``host`` that are free right now (all held open while choosing)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_open(port: int, *, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    """True when ``pid`` runs; reaps it first when it is an exited child of this process (no zombies)."""
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runs(pid: int, marker: bytes) -> bool:
    """True when ``pid`` is alive and its command line contains ``marker`` (guards against a recycled pid)."""
    if not alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (macOS): trust the pid file
    return marker in cmdline


def terminate(pid: int, *, timeout: float, group: bool = False) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL; return True when it had to be killed.

    With ``group`` the signals go to the process group ``pid`` leads (a service started in its own session
    with children of its own).
    """

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    send(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return False
        time.sleep(0.05)
    send(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def kill(pid: int, *, timeout: float = 5.0) -> None:
    """SIGKILL ``pid`` (a crash, no clean-up) and wait up to ``timeout`` seconds until it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def executable(path: Path) -> bool:
    """True when ``path`` is a file this process may execute."""
    return path.is_file() and os.access(path, os.X_OK)


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, or "" when it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


__all__ = [
    "LOOPBACK",
    "alive",
    "executable",
    "free_port",
    "free_ports",
    "kill",
    "log_tail",
    "port_open",
    "runs",
    "terminate",
]
