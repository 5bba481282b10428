"""Driver processes: run one in its own process group, kill the group, find the Python workers of its JVM.

Used by the tests and the quickstart to prove exactly-once for real: the driver (Python + its JVM) dies at once at
the chosen :mod:`sparkonce.crash` point, is restarted on the same checkpoint, and the output is checked exactly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkonce.crash import ENV_PGID, ENV_POINT, ENV_RECORD, ENV_TARGET, CrashRecord, CrashTarget, read_crash_records


@dataclass(frozen=True)
class DriverRun:
    """How one driver process ended, and which crash points fired in it."""

    returncode: int
    pgid: int
    """The driver's process group (its pid: it leads a new session)."""
    stdout: str
    stderr: str
    crashes: tuple[CrashRecord, ...] = ()
    """The crash points that fired in any process of the run, in firing order."""

    @property
    def killed(self) -> bool:
        """True when the driver died of SIGKILL sent by a crash point to this driver's process group.

        A SIGKILL from anything else (a timeout, the OOM killer, a point that killed another group) is not this.
        """
        return killed_by_crash_point(self.returncode, self.pgid, self.crashes)

    def killed_processes(self, target: CrashTarget) -> list[CrashRecord]:
        """The crash points of ``target`` that fired and whose process is gone (it reached the point and died)."""
        return [c for c in self.crashes if c.target == target and c.killed_pid is not None and gone(c.killed_pid)]


def killed_by_crash_point(returncode: int | None, pgid: int, crashes: Sequence[CrashRecord]) -> bool:
    """True when a driver that led process group ``pgid`` died of SIGKILL that a ``driver`` crash point of
    ``crashes`` sent to that group (not of a SIGKILL from anywhere else)."""
    return returncode == -signal.SIGKILL and any(c.target == "driver" and c.killed_pgid == pgid for c in crashes)


def run_driver(
    args: Sequence[str],
    *,
    crash_at: str | None = None,
    crash_target: CrashTarget = "driver",
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    cwd: str | None = None,
) -> DriverRun:
    """Run ``python args...`` in a new session; with ``crash_at`` (``point`` or ``point:batch_id``) arm that crash.

    The child leads a new process group; :func:`sparkonce.spark.local_session` exports that group as
    ``SPARKONCE_CRASH_PGID`` before the JVM starts, so a crash point reached in any process of the application
    (Python driver, JVM, Python workers started by the JVM) kills the whole driver group. With ``crash_target``
    ``task`` or ``executor`` the point kills only the executor's Python worker or the executor JVM, once (the
    task's first attempt), and the driver goes on; ``process`` kills only the process that reaches the point (see
    :mod:`sparkonce.crash`). Every point that fires is recorded (:attr:`DriverRun.crashes`), so a test can check
    that what died is what the point says it killed (:attr:`DriverRun.killed`, :meth:`DriverRun.killed_processes`).
    """
    child_env = dict(os.environ if env is None else env)
    for name in (ENV_POINT, ENV_PGID, ENV_TARGET, ENV_RECORD):
        child_env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="sparkonce-crash-") as records:
        record_file = os.path.join(records, "crashes.jsonl")
        if crash_at:
            child_env[ENV_POINT] = crash_at
            child_env[ENV_TARGET] = crash_target
            child_env[ENV_RECORD] = record_file
        returncode, pgid, out, err = _run(args, child_env, timeout, cwd)
        crashes = tuple(read_crash_records(record_file))
    return DriverRun(returncode, pgid, out, err, crashes)


def _run(args: Sequence[str], child_env: dict[str, str], timeout: float, cwd: str | None) -> tuple[int, int, str, str]:
    child_env.setdefault("PYSPARK_PYTHON", sys.executable)
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=child_env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise
    finally:
        # A killed driver can leave Python workers behind in their own groups; they exit when the JVM's
        # sockets close. The driver's own group is gone or going either way.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, proc.pid, out, err


def kill_group(pgid: int) -> bool:
    """SIGKILL every process of the group ``pgid``; False when the group is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def python_workers(root_pid: int, *, busy: bool = False) -> list[int]:
    """The executor Python workers below ``root_pid`` (the driver): children forked by a ``pyspark.daemon``.

    Busiest first (most CPU time used in the last 50 ms), so the first one is most likely running a task; with
    ``busy``, only those that used CPU time in those 50 ms (running a task, not waiting idle for the next one).
    """
    import time

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(int(stat[1]), []).append(int(entry))
    below: list[int] = []
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            below.append(child)
            todo.append(child)
    # Only the daemon of executor workers (``pyspark.daemon pyspark.worker``): the JVM also runs daemons for the
    # driver-side planning of Python data sources, whose loss it does not recover from (it waits forever).
    forked = {pid for pid in below if _cmdline(pid).rstrip().endswith("pyspark.daemon pyspark.worker")}
    daemons = {pid for pid in forked if _parent(pid) not in forked}
    workers = [pid for pid in forked if _parent(pid) in daemons]
    before = {pid: _cpu(pid) for pid in workers}
    time.sleep(0.05)  # one CPU-time sample apart, to tell a busy worker from an idle one
    used = {pid: _cpu(pid) - before[pid] for pid in workers}
    return sorted((pid for pid in workers if used[pid] > 0 or not busy), key=lambda pid: -used[pid])


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (no such process, or a zombie waiting to be reaped)."""
    stat = _stat(pid)
    return stat is None or stat[0] == "Z"


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as file:
            return file.read().rpartition(")")[2].split()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    stat = _stat(pid)
    return int(stat[1]) if stat else None


def _cpu(pid: int) -> int:
    stat = _stat(pid)
    return int(stat[11]) + int(stat[12]) if stat else 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


__all__ = ["DriverRun", "gone", "kill_group", "killed_by_crash_point", "python_workers", "run_driver"]
