"""A standalone Spark cluster on this machine for demos, tests and benchmarks: one master and N workers.

The master and the workers are Spark's own daemons (``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``) from the pyspark wheel, whose package folder is a Spark home. Everything binds to
127.0.0.1: the master on a free port, its web UI on another free port (its JSON at ``/json/`` is how this module
sees the workers), the workers and their UIs on ports the OS picks. Each worker is small (1 core, 2 GiB by
default) so two fit a 2-core machine next to the driver. Each daemon runs detached in its own process group;
executors and their Python workers are children of a worker and share its group, so stopping a worker's group
stops its executors too. The state lives in a directory (default ``./.sparkonce/cluster``)::

    cluster.json        master URL, ports, pids, worker sizes, start time
    master.log          the master's output
    worker-N.log        worker N's output
    worker-N/           worker N's work dir (executor logs: worker-N/<app id>/<executor id>/stderr)
    conf/               the SPARK_CONF_DIR of the daemons (spark-defaults.conf)

Everything here runs on the machine that starts the cluster (CLI, test session, benchmark).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkonce.errors import ClusterError
from sparkonce_local.services.daemon import Daemon, DaemonProcess, DaemonStatus
from sparkonce_local.services.process import LOOPBACK, alive, free_ports, log_tail

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".sparkonce") / "cluster"
DEFAULT_WORKER_CORES = 1
DEFAULT_WORKER_MEMORY = "2g"
_DAEMON_MEMORY = "512m"
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class WorkerProcess:
    """One worker daemon started by :func:`start_cluster`."""

    index: int
    pid: int
    cores: int
    memory: str
    work_dir: Path
    log_file: Path


@dataclass(frozen=True)
class ClusterInfo:
    """A running standalone cluster, as recorded in its state directory. Runs on the driver (local daemons)."""

    master_url: str
    """``spark://127.0.0.1:PORT``: pass it as ``--master`` to ``sparkonce run``."""
    master_pid: int
    master_port: int
    webui_port: int
    state_dir: Path
    log_file: Path
    workers: tuple[WorkerProcess, ...]
    spark_home: Path
    started_at: str

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"


@dataclass(frozen=True)
class WorkerState:
    """A worker as the master sees it."""

    worker_id: str
    state: str
    """``ALIVE``, ``DEAD``, ``DECOMMISSIONED`` ..."""
    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int


@dataclass(frozen=True)
class ClusterStatus(DaemonStatus[ClusterInfo]):
    """What ``sparkonce cluster status`` reports (``running``: the recorded master process is alive;
    ``reachable``: the master's web UI answered)."""

    workers: list[WorkerState]
    active_apps: list[str]

    @property
    def alive_workers(self) -> int:
        return sum(1 for worker in self.workers if worker.state == "ALIVE")


@dataclass(frozen=True)
class ClusterStopResult:
    """What ``sparkonce cluster stop`` did."""

    state_dir: Path
    was_running: bool
    pids: list[int]
    """The master's and the workers' pids that were alive."""
    forced: bool
    """True when a daemon did not exit on SIGTERM in time and was killed."""


def spark_home() -> Path:
    """The Spark home of the installed pyspark wheel (its package folder holds ``bin/spark-class`` and jars).

    Raises:
        ClusterError: pyspark is not installed or ships no ``bin/spark-class``.
    """
    try:
        import pyspark
    except ImportError as err:
        raise ClusterError("pyspark is not installed: it provides the master and worker daemons") from err
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"{home} has no bin/spark-class: this pyspark cannot run a standalone cluster")
    return home


def start_cluster(
    *,
    state_dir: Path | str = DEFAULT_STATE_DIR,
    workers: int = 2,
    worker_cores: int = DEFAULT_WORKER_CORES,
    worker_memory: str = DEFAULT_WORKER_MEMORY,
    port: int | None = None,
    timeout: float = 300.0,
) -> ClusterInfo:
    """Start a master and ``workers`` workers on loopback; return once the master lists them all ALIVE.

    Args:
        state_dir: where the info file, logs, work dirs and daemon conf go; one cluster per directory.
        workers: how many workers.
        worker_cores: cores each worker offers to executors.
        worker_memory: memory each worker offers to executors (Spark's size syntax: ``2g``, ``1500m``).
        port: the master's port; a free one when None.
        timeout: seconds to wait for the master and every worker.

    Raises:
        ClusterError: a cluster already runs for ``state_dir``, a size is invalid, or a daemon exited or did not
            register in time (the message quotes the end of its log). Whatever was started is stopped again.
    """
    if workers < 1:
        raise ClusterError(f"--workers must be at least 1, got {workers}")
    if worker_cores < 1:
        raise ClusterError(f"worker cores must be at least 1, got {worker_cores}")
    state = Path(state_dir).resolve()
    DAEMON.refuse_if_running(state)
    home = spark_home()
    state.mkdir(parents=True, exist_ok=True)
    conf_dir = state / "conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        "# written by sparkonce: loopback-only daemons, no REST submission server\n"
        "spark.master.rest.enabled false\n"
        "spark.worker.cleanup.enabled false\n"
    )
    master_port, webui_port = free_ports(2)
    if port is not None:
        master_port = port
    master_url = f"spark://{LOOPBACK}:{master_port}"
    env = _daemon_env(home, conf_dir)
    master_log = state / "master.log"
    master = _spawn(
        home,
        [_MASTER_CLASS, "--host", LOOPBACK, "--port", str(master_port), "--webui-port", str(webui_port)],
        env=env,
        log_file=master_log,
        cwd=state,
    )
    started: list[int] = [master.pid]
    worker_procs: list[WorkerProcess] = []
    info = ClusterInfo(
        master_url=master_url,
        master_pid=master.pid,
        master_port=master_port,
        webui_port=webui_port,
        state_dir=state,
        log_file=master_log,
        workers=(),
        spark_home=home,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    try:
        DAEMON.write(state, info)
        deadline = time.monotonic() + timeout
        _wait(lambda: _master_json(webui_port) is not None, deadline, master, master_log, "the master")
        for index in range(1, workers + 1):
            work_dir = state / f"worker-{index}"
            work_dir.mkdir(exist_ok=True)
            worker_log = state / f"worker-{index}.log"
            proc = _spawn(
                home,
                [
                    _WORKER_CLASS,
                    "--host",
                    LOOPBACK,
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(worker_cores),
                    "--memory",
                    worker_memory,
                    "--work-dir",
                    str(work_dir),
                    master_url,
                ],
                env=env,
                log_file=worker_log,
                cwd=state,
            )
            started.append(proc.pid)
            worker_procs.append(
                WorkerProcess(
                    index=index,
                    pid=proc.pid,
                    cores=worker_cores,
                    memory=worker_memory,
                    work_dir=work_dir,
                    log_file=worker_log,
                )
            )
        info = ClusterInfo(**{**info.__dict__, "workers": tuple(worker_procs)})
        DAEMON.write(state, info)
        for worker in worker_procs:
            if not alive(worker.pid):
                raise ClusterError(
                    f"worker {worker.index} exited while starting; end of {worker.log_file}:\n"
                    f"{log_tail(worker.log_file)}"
                )
        _wait(
            lambda: _alive_workers(webui_port) >= workers,
            deadline,
            master,
            master_log,
            f"{workers} ALIVE worker(s) (worker logs: {state}/worker-N.log)",
        )
    except ClusterError:
        DAEMON.abort(state, started, timeout=10.0)
        raise
    log.info("started Spark cluster %s with %d worker(s) (state %s)", master_url, workers, state)
    return info


def stop_cluster(*, state_dir: Path | str = DEFAULT_STATE_DIR, timeout: float = 20.0) -> ClusterStopResult:
    """Stop the workers (and their executors), then the master; clear the info file.

    Stopping a cluster that is not running is not an error: the result says so.
    """
    stopped = DAEMON.stop(state_dir, timeout=timeout)
    if stopped.info is not None:
        log.info("stopped Spark cluster %s (pids %s)", stopped.info.master_url, stopped.pids)
    return ClusterStopResult(
        state_dir=stopped.state_dir, was_running=bool(stopped.pids), pids=stopped.pids, forced=stopped.forced
    )


def cluster_status(*, state_dir: Path | str = DEFAULT_STATE_DIR) -> ClusterStatus:
    """Report whether the cluster recorded in ``state_dir`` runs, and its workers and applications."""
    state, info, running = DAEMON.probe(state_dir)
    workers: list[WorkerState] = []
    apps: list[str] = []
    reachable = False
    if running and info is not None:
        answer = _master_json(info.webui_port)
        if answer is not None:
            reachable = True
            workers = [
                WorkerState(
                    worker_id=str(w.get("id")),
                    state=str(w.get("state")),
                    cores=int(w.get("cores", 0)),
                    cores_used=int(w.get("coresused", 0)),
                    memory_mb=int(w.get("memory", 0)),
                    memory_used_mb=int(w.get("memoryused", 0)),
                )
                for w in answer.get("workers", [])
            ]
            apps = [str(app.get("name")) for app in answer.get("activeapps", [])]
    return ClusterStatus(
        state_dir=state, running=running, reachable=reachable, info=info, workers=workers, active_apps=apps
    )


def executor_pids(info: ClusterInfo) -> list[int]:
    """Pids of the executor JVMs currently running on the cluster's workers (children of a worker daemon)."""
    workers = {worker.pid for worker in info.workers}
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if b"CoarseGrainedExecutorBackend" not in cmdline:
                continue
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent in workers:
            found.append(int(entry.name))
    return sorted(found)


def _daemon_env(home: Path, conf_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_DAEMON_MEMORY": _DAEMON_MEMORY,
        # Executors launched by the workers run Python workers with this interpreter unless the application
        # says otherwise (sparkonce's sessions set spark.pyspark.python to the driver's interpreter).
        "PYSPARK_PYTHON": sys.executable,
    }
    env.pop("SPARK_MASTER_HOST", None)
    env.pop("SPARK_WORKER_INSTANCES", None)
    return env


def _spawn(home: Path, args: list[str], *, env: dict[str, str], log_file: Path, cwd: Path) -> subprocess.Popen[bytes]:
    return DAEMON.spawn([str(home / "bin" / "spark-class"), *args], log_file=log_file, env=env, cwd=cwd)


def _wait(
    condition: Callable[[], bool], deadline: float, process: subprocess.Popen[bytes], log_file: Path, what: str
) -> None:
    while True:
        if process.poll() is not None:
            raise ClusterError(
                f"the Spark master exited with code {process.returncode} while waiting for {what}; "
                f"end of {log_file}:\n{log_tail(log_file)}"
            )
        if condition():
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}; end of {log_file}:\n{log_tail(log_file)}")
        time.sleep(0.25)


def _master_json(webui_port: int) -> dict[str, Any] | None:
    connection = http.client.HTTPConnection(LOOPBACK, webui_port, timeout=5.0)
    try:
        connection.request("GET", "/json/")
        response = connection.getresponse()
        if response.status != 200:
            return None
        answer = json.loads(response.read())
        return answer if isinstance(answer, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        connection.close()


def _alive_workers(webui_port: int) -> int:
    answer = _master_json(webui_port) or {}
    return sum(1 for worker in answer.get("workers", []) if worker.get("state") == "ALIVE")


def _encode(info: ClusterInfo) -> dict[str, Any]:
    return {
        "master_url": info.master_url,
        "master_pid": info.master_pid,
        "master_port": info.master_port,
        "webui_port": info.webui_port,
        "workers": [
            {
                "index": w.index,
                "pid": w.pid,
                "cores": w.cores,
                "memory": w.memory,
                "work_dir": str(w.work_dir),
                "log_file": str(w.log_file),
            }
            for w in info.workers
        ],
        "spark_home": str(info.spark_home),
        "started_at": info.started_at,
    }


def _decode(state: Path, data: dict[str, Any]) -> ClusterInfo:
    return ClusterInfo(
        master_url=str(data["master_url"]),
        master_pid=int(data["master_pid"]),
        master_port=int(data["master_port"]),
        webui_port=int(data["webui_port"]),
        state_dir=state,
        log_file=state / "master.log",
        workers=tuple(
            WorkerProcess(
                index=int(w["index"]),
                pid=int(w["pid"]),
                cores=int(w["cores"]),
                memory=str(w["memory"]),
                work_dir=Path(w["work_dir"]),
                log_file=Path(w["log_file"]),
            )
            for w in data["workers"]
        ),
        spark_home=Path(data["spark_home"]),
        started_at=str(data["started_at"]),
    )


def _processes(info: ClusterInfo) -> list[DaemonProcess]:
    """The workers, then the master (stop order: the master is the main process)."""
    workers = [DaemonProcess(w.pid, (_WORKER_CLASS.encode(), b"spark-class")) for w in info.workers]
    return [*workers, DaemonProcess(info.master_pid, (_MASTER_CLASS.encode(), b"spark-class"))]


DAEMON: Daemon[ClusterInfo] = Daemon(
    name="cluster",
    info_file="cluster.json",
    pid_file=None,
    error=ClusterError,
    encode=_encode,
    decode=_decode,
    processes=_processes,
    describe=lambda info: info.master_url,
    group=True,
)
"""The cluster's record (``cluster.json``, no pid file: it has many processes) and the identity of its daemons;
each daemon's process group is signalled, so a worker's executors stop with it."""


__all__ = [
    "DEFAULT_STATE_DIR",
    "DEFAULT_WORKER_CORES",
    "DEFAULT_WORKER_MEMORY",
    "ClusterInfo",
    "ClusterStatus",
    "ClusterStopResult",
    "WorkerProcess",
    "WorkerState",
    "cluster_status",
    "executor_pids",
    "spark_home",
    "start_cluster",
    "stop_cluster",
]
