"""The crash harness: run a driver program in its own process group and kill it with SIGKILL at a named point.

Used by the tests and the quickstart to prove exactly-once for real: the driver (Python + its JVM) dies at once at
the chosen :mod:`sparkonce.crash` point, is restarted on the same checkpoint, and the output is checked exactly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sparkonce.crash import ENV_PGID, ENV_POINT, ENV_TARGET


@dataclass(frozen=True)
class DriverRun:
    """How one driver process ended."""

    returncode: int
    killed: bool
    """True when the process died of SIGKILL (the crash point fired)."""
    stdout: str
    stderr: str


def run_driver(
    args: Sequence[str],
    *,
    crash_at: str | None = None,
    crash_target: Literal["driver", "task", "executor"] = "driver",
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    cwd: str | None = None,
) -> DriverRun:
    """Run ``python args...`` in a new session; with ``crash_at`` (``point`` or ``point:batch_id``) arm that crash.

    The child leads a new process group; :func:`sparkonce.spark.local_session` exports that group as
    ``SPARKONCE_CRASH_PGID`` before the JVM starts, so a crash point reached in any process of the application
    (Python driver, JVM, Python workers started by the JVM) kills the whole driver group. With ``crash_target``
    ``task`` or ``executor`` the point kills only the executor's Python worker or the executor JVM, once (the
    task's first attempt), and the driver goes on (see :mod:`sparkonce.crash`).
    """
    child_env = dict(os.environ if env is None else env)
    child_env.pop(ENV_POINT, None)
    child_env.pop(ENV_PGID, None)
    child_env.pop(ENV_TARGET, None)
    if crash_at:
        child_env[ENV_POINT] = crash_at
        child_env[ENV_TARGET] = crash_target
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
    return DriverRun(proc.returncode, proc.returncode == -signal.SIGKILL, out, err)


__all__ = ["DriverRun", "run_driver"]
