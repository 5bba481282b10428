"""The embedded Kafka broker for demos and tests: Apache Kafka's own broker (KRaft, one node), run from Maven jars.

The broker is ``java -cp <jars> kafka.Kafka server.properties``, with the jars of :data:`sparkonce.jars.KAFKA`
(``org.apache.kafka:kafka_2.13``; ``sparkonce jars fetch kafka``, which ``scripts/setup.sh`` runs). One node is
broker and controller (``process.roles=broker,controller``), listening on loopback only: the client listener on
the broker's port, the controller listener on a second free port. Its state directory (default
``./.sparkonce/broker``) holds::

    broker.pid         the broker's process id
    broker.json        bootstrap address, both ports, the advertised address and the start time; kept by a kill
                       so :func:`restart_broker` starts it again on the same ports and data
    broker.log         the broker's stdout and stderr (warnings and errors, its start and log recovery)
    server.properties  the configuration it runs with (written at each start)
    data/              Kafka's log directory (KRaft metadata and every topic), formatted once with a new cluster id

The data directory stays across restarts and stops: a broker started again on it serves every topic and every
record it had. What a kill keeps: Kafka acknowledges a produce request (``acks=all``; one replica, so every
in-sync replica is this one) once the records are written to its log files, i.e. in the operating system's page
cache; it does not fsync them first (``log.flush.*`` left at Kafka's defaults). A SIGKILL of the broker leaves the
page cache to the kernel, which writes it out, so every acknowledged record is there after a restart (Kafka's log
recovery truncates only a torn tail that was never acknowledged). A crash of the machine (power, kernel) can lose
what was acknowledged but not yet written back to disk (seconds, the kernel's writeback interval); only
``log.flush.interval.messages=1`` would close that, at a large cost per produce.

Everything here runs on the machine that starts the broker (CLI or test session), never on Spark executors.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkonce.errors import BrokerError
from sparkonce.jars import KAFKA
from sparkonce.kafka.topics import admin_config, list_topics
from sparkonce_local.services.daemon import Daemon, DaemonProcess, DaemonStatus, DaemonStopResult
from sparkonce_local.services.process import LOOPBACK, free_port, log_tail

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(".sparkonce") / "broker"
JAVA_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError")
"""The broker JVM's options: a 512 MB heap and no parallel GC or C2 compiler threads (a 2-core machine shared with
Spark drivers; the JVM starts in about half the CPU time, see :data:`sparkonce.spark.QUICK_START_JAVA_OPTIONS`)."""
MAIN_CLASS = "kafka.Kafka"
_STORAGE_TOOL = "kafka.tools.StorageTool"
_NODE_ID = 1
_LOG_FILE = "broker.log"
_CONFIG_FILE = "server.properties"
_DATA_DIR = "data"


@dataclass(frozen=True)
class BrokerInfo:
    """A running embedded broker, as recorded in its state directory."""

    pid: int
    bootstrap: str
    """``host:port`` to use as ``kafka.bootstrap.servers``."""
    port: int
    """The client listener's port on loopback."""
    controller_port: int
    """The KRaft controller listener's port on loopback."""
    state_dir: Path
    log_file: Path
    data_dir: Path
    """Kafka's log directory (``log.dirs``)."""
    started_at: str
    advertised: str | None = None
    """``host:port`` the broker advertises to clients instead of its own (a fault proxy in front of it); then
    :attr:`bootstrap` is that address too."""


@dataclass(frozen=True)
class BrokerStatus(DaemonStatus[BrokerInfo]):
    """What ``sparkonce broker status`` reports (``running``: the recorded process is a Kafka broker;
    ``reachable``: it answered a metadata request)."""

    topics: dict[str, int]
    """Topic name -> partition count (empty when unreachable)."""


StopResult = DaemonStopResult
"""What ``sparkonce broker stop`` did."""


def server_properties(*, port: int, controller_port: int, advertised: str, data_dir: Path) -> dict[str, str]:
    """The broker's configuration: one KRaft node on loopback, internal topics of one partition and one replica.

    ``auto.create.topics.enable`` is off: a topic is made by CreateTopics (``sparkonce broker start --topic``,
    :func:`create_topic`, the sample producer), so a deleted topic stays deleted while a producer still writes to
    it (Kafka's default would recreate it at the producer's next metadata request). The flush settings are Kafka's
    defaults (see the module docstring for what a kill and a machine crash keep).
    """
    return {
        "process.roles": "broker,controller",
        "node.id": str(_NODE_ID),
        "controller.quorum.voters": f"{_NODE_ID}@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{advertised}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A restarted node registers anew only once the controller fenced its previous incarnation: Kafka's
        # default session of 9 s made each restart after a kill wait that long.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    }


def start_broker(
    *,
    state_dir: Path | str = DEFAULT_STATE_DIR,
    port: int | None = None,
    advertise: str | None = None,
    timeout: float = 60.0,
) -> BrokerInfo:
    """Start a detached Kafka broker on loopback and wait until it answers metadata requests.

    Its data directory (``state_dir/data``) is formatted with a new cluster id the first time and reused after:
    a broker started again on a state directory serves every topic and record it had.

    Args:
        state_dir: where the pid, info, log and configuration files and the data directory go; one broker per
            directory.
        port: the client port to listen on; a free one when None.
        advertise: ``host:port`` to advertise to clients instead of the broker's own address (a TCP fault proxy
            in front of it, already listening: a Kafka client connects to the addresses of the Metadata response,
            so only an advertised proxy sees every connection); it is then the bootstrap address too.
        timeout: seconds to wait for the broker to become ready.

    Returns:
        The running broker.

    Raises:
        BrokerError: a broker already runs for ``state_dir``, Java is missing, or the broker did not become ready
            in time.
        JarsError: Kafka's jars are not fetched (the message names ``sparkonce jars fetch kafka``).
    """
    state = Path(state_dir).resolve()
    return _start(state, port=port, controller_port=None, advertise=advertise, timeout=timeout)


def _start(
    state: Path, *, port: int | None, controller_port: int | None, advertise: str | None, timeout: float
) -> BrokerInfo:
    DAEMON.refuse_if_running(state)
    classpath = f"{KAFKA.require()}/*"
    state.mkdir(parents=True, exist_ok=True)
    chosen = port if port is not None else free_port()
    controller = controller_port if controller_port is not None else _other_free_port(chosen)
    bootstrap = advertise or f"{LOOPBACK}:{chosen}"
    data = state / _DATA_DIR
    config = state / _CONFIG_FILE
    config.write_text(
        "".join(
            f"{key}={value}\n"
            for key, value in server_properties(
                port=chosen, controller_port=controller, advertised=bootstrap, data_dir=data
            ).items()
        )
    )
    log_path = state / _LOG_FILE
    java = _java()
    if not (data / "meta.properties").is_file():
        _format(java, classpath, config, log_path)
    proc = DAEMON.spawn([java, *_jvm_options(), "-cp", classpath, MAIN_CLASS, str(config)], log_file=log_path)
    info = BrokerInfo(
        pid=proc.pid,
        bootstrap=bootstrap,
        port=chosen,
        controller_port=controller,
        state_dir=state,
        log_file=log_path,
        data_dir=data,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        advertised=advertise,
    )
    DAEMON.launch(state, info, ready=lambda: _ready(info, proc, timeout))
    log.info("started Kafka broker pid %d on %s (state %s)", proc.pid, bootstrap, state)
    return info


def _ready(info: BrokerInfo, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the just started broker answers; a failure carries the end of its log (a port taken, ...)."""
    try:
        wait_until_ready(info.bootstrap, timeout=timeout, process=process)
    except BrokerError as err:
        raise BrokerError(f"{err}; the end of {info.log_file}:\n{log_tail(info.log_file)}") from err


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else "java"
    if java_home and not Path(java).is_file():
        raise BrokerError(f"JAVA_HOME={java_home} has no bin/java; the Kafka broker needs Java 17 or newer")
    return java


def _jvm_options() -> list[str]:
    return [*JAVA_OPTIONS, f"-Dlog4j2.configurationFile={KAFKA.resources / 'log4j2.properties'}"]


def _cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, URL-safe base64 without padding. Like Kafka's ``Uuid.randomUuid``,
    never one that starts with ``-``: the storage tool's argument parser would take it for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format(java: str, classpath: str, config: Path, log_path: Path) -> None:
    """Format the data directory of ``config`` for KRaft with a new cluster id (Kafka's ``kafka-storage format``)."""
    cluster_id = _cluster_id()
    with open(log_path, "ab") as out:
        done = subprocess.run(
            [java, *_jvm_options(), "-cp", classpath, _STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=300,
        )
    if done.returncode != 0:
        raise BrokerError(
            f"formatting the broker's data directory with {config} failed (exit {done.returncode}):\n"
            f"{log_tail(log_path)}"
        )


_CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@dataclass(frozen=True)
class GroupPartition:
    """One row of ``kafka-consumer-groups.sh --describe --group G``: a partition's committed offset, its log end
    offset and the lag between them (None where the tool prints ``-``)."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None


def describe_group(bootstrap: str, group: str, *, timeout: float = 120.0) -> list[GroupPartition]:
    """What Kafka's own ``kafka-consumer-groups.sh --bootstrap-server B --describe --group G`` shows: the script's
    class (``ConsumerGroupCommand``, in the ``kafka-tools`` jar of :data:`sparkonce.jars.KAFKA`) run with the same
    arguments, its table parsed. An unknown group gives no rows. Runs on the machine that runs the broker's tools.

    Raises:
        BrokerError: the tool failed (its output in the message) or did not finish in ``timeout`` seconds.
        JarsError: Kafka's jars are not fetched.
    """
    command = [
        _java(),
        *_jvm_options(),
        "-cp",
        f"{KAFKA.require()}/*",
        _CONSUMER_GROUP_COMMAND,
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--group",
        group,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise BrokerError(f"kafka-consumer-groups --describe --group {group} did not finish in {timeout:.0f}s") from err
    output = done.stdout + done.stderr
    if "does not exist" in output:
        return []
    if done.returncode != 0:
        raise BrokerError(
            f"kafka-consumer-groups --describe --group {group} failed (exit {done.returncode}):\n{output}"
        )
    rows = []
    header: list[str] | None = None
    for line in done.stdout.splitlines():
        cells = line.split()
        if cells[:2] == ["GROUP", "TOPIC"]:
            header = cells
            continue
        if header is None or len(cells) < 6 or cells[0] != group:
            continue
        row = dict(zip(header, cells, strict=False))

        def number(column: str, row: dict[str, str] = row) -> int | None:
            value = row.get(column, "-")
            return None if value == "-" else int(value)

        rows.append(
            GroupPartition(
                row["TOPIC"], int(row["PARTITION"]), number("CURRENT-OFFSET"), number("LOG-END-OFFSET"), number("LAG")
            )
        )
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def _other_free_port(taken: int) -> int:
    while True:
        port = free_port()
        if port != taken:
            return port


def kill_broker(*, state_dir: Path | str = DEFAULT_STATE_DIR) -> int | None:
    """SIGKILL the broker of ``state_dir`` (a crash: no clean-up) and wait until it is gone.

    Its info file and data directory are kept, so :func:`restart_broker` starts it again on the same ports and data.

    Returns:
        The killed pid, or None when no broker was running.
    """
    pid = DAEMON.kill(state_dir)
    if pid is not None:
        log.info("killed Kafka broker pid %d (state %s)", pid, Path(state_dir).resolve())
    return pid


def restart_broker(
    *, state_dir: Path | str = DEFAULT_STATE_DIR, crash: bool = False, timeout: float = 60.0
) -> BrokerInfo:
    """Stop (or SIGKILL with ``crash``) the broker of ``state_dir`` and start it on the same ports and data.

    A broker that is not running (e.g. after :func:`kill_broker`) is just started again. The restarted broker
    serves every topic and every acknowledged record it had (see the module docstring).

    Raises:
        BrokerError: no broker was ever started for ``state_dir``, or the restart failed.
    """
    state = Path(state_dir).resolve()
    info = DAEMON.read(state)
    if info is None:
        raise BrokerError(f"no broker was started for {state}: run `sparkonce broker start` first")
    if crash:
        kill_broker(state_dir=state)
    else:
        DAEMON.stop(state, timeout=30.0, keep_info=True)
    return _start(
        state, port=info.port, controller_port=info.controller_port, advertise=info.advertised, timeout=timeout
    )


def wait_until_ready(bootstrap: str, *, timeout: float = 60.0, process: subprocess.Popen[bytes] | None = None) -> None:
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
        time.sleep(0.1)


def stop_broker(*, state_dir: Path | str = DEFAULT_STATE_DIR, timeout: float = 30.0) -> StopResult:
    """Stop the broker of ``state_dir`` (SIGTERM: Kafka's controlled shutdown; SIGKILL after ``timeout``).

    Its data directory stays (``sparkonce broker start`` on the same state directory serves it again); delete the
    state directory to drop it. Stopping a broker that is not running is not an error: the result says so.
    """
    stopped = DAEMON.stop(state_dir, timeout=timeout)
    if stopped.pids:
        log.info("stopped Kafka broker pid %d (%s)", stopped.pids[-1], "killed" if stopped.forced else "terminated")
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
        "controller_port": info.controller_port,
        "started_at": info.started_at,
        "advertised": info.advertised,
    }


def _decode(state: Path, data: dict[str, Any]) -> BrokerInfo:
    return BrokerInfo(
        pid=int(data["pid"]),
        bootstrap=str(data["bootstrap"]),
        port=int(data["port"]),
        controller_port=int(data["controller_port"]),
        state_dir=state,
        log_file=state / _LOG_FILE,
        data_dir=state / _DATA_DIR,
        started_at=str(data["started_at"]),
        advertised=data.get("advertised"),
    )


DAEMON: Daemon[BrokerInfo] = Daemon(
    name="broker",
    info_file="broker.json",
    pid_file="broker.pid",
    error=BrokerError,
    encode=_encode,
    decode=_decode,
    processes=lambda info: [DaemonProcess(info.pid, (MAIN_CLASS.encode(),))],
    describe=lambda info: info.bootstrap,
)
"""The embedded broker's record (``broker.pid``, ``broker.json``; the info file goes on stop) and identity."""


__all__ = [
    "DEFAULT_STATE_DIR",
    "JAVA_OPTIONS",
    "BrokerInfo",
    "BrokerStatus",
    "GroupPartition",
    "StopResult",
    "broker_status",
    "create_topic",
    "delete_topic",
    "describe_group",
    "free_port",
    "kill_broker",
    "list_topics",
    "restart_broker",
    "server_properties",
    "start_broker",
    "stop_broker",
    "wait_until_ready",
]
