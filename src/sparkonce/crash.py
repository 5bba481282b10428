"""Named crash points for proving exactly-once by killing a driver for real.

A test (or the quickstart) starts a driver process in its own session and sets::

    SPARKONCE_CRASH_AT=<point>[:<batch_id>][#<hit>]
    SPARKONCE_CRASH_PGID=<process group of the driver>
    SPARKONCE_CRASH_HITS_DIR=<an empty directory>      # with #<hit> only

and optionally ``SPARKONCE_CRASH_TARGET`` (see below).

When code running anywhere in that application (the driver's Python worker that commits, or an executor task)
reaches :func:`crash_point` with a matching name and batch id, it sends SIGKILL to the whole driver process group:
the Python driver and its JVM die at once, exactly as on a machine failure, and no checkpoint commit
(``commits/N``) can be written afterwards. Without those variables a crash point costs one dict lookup.

``#<hit>`` fires at the hit-th time the point is reached in any process of the run (the chaos harness uses it
to land a crash point at a random batch of any stage): every process reaching the point claims the next number by
creating a file in ``SPARKONCE_CRASH_HITS_DIR`` with ``O_EXCL``, and only the one that claims ``hit`` fires.

``SPARKONCE_CRASH_TARGET`` chooses what dies at the point:

``driver`` (default)
    the driver's process group, as above. ``SPARKONCE_CRASH_PGID`` must name it (:func:`sparkonce.spark.local_session`
    sets it): without it the point raises :class:`CrashPointError` instead of killing some other group.
``process``
    only the process that reaches the point, on every attempt: e.g. the driver-side Python process that runs the
    sink's ``commit()`` dies after its Delta commit landed while the driver JVM and Python driver live on (Spark then
    calls the sink's ``abort()`` in a new process and fails the query).
``task``
    only the Python worker running the task (an executor-side point), on the task's first attempt only, so
    Spark retries the task and the retry goes through.
``executor``
    the executor JVM that runs the task (and with it its Python workers), on the task's first attempt only.

``SPARKONCE_CRASH_ARM`` (with or without ``SPARKONCE_CRASH_AT``) names an arm file: a running application has no
point armed until :func:`arm` writes one into that file, and then the first process to reach it dies (target
``process``) and claims the arm, once.

``SPARKONCE_CRASH_RECORD`` (optional) names a file to which the point appends one JSON line just before it kills:
the point, the batch id, the target, the pid that reached it and the pid or group it kills
(:class:`CrashRecord`), so a test can check that what died is what the point says it killed.

On a cluster master, :func:`sparkonce.spark.local_session` forwards these variables to the executors
(``spark.executorEnv.*``).

Points used by sparkonce:

``before_offsets``
    a streaming source (Kafka or Delta) is asked for the end of the next batch: ``offsets/N`` is not written yet.
``after_offsets``
    a streaming source plans the ranges of a batch: ``offsets/N`` is written, no task of the batch has run.
``after_delta_commit``
    the streaming sink made the Delta commit for a batch, Spark has not yet written ``commits/N``; or a batch write
    made its Delta commit (batch id: its ``txnVersion``, none without a txn) and its commit step has not returned.
``mid_write``
    an executor task wrote part of its data file(s) for a batch; nothing is committed.
``mid_read``
    an executor task of the Kafka source read part of its offset range for a batch.
``kafka_client_read``
    the forked Kafka client of an executor task (:mod:`sparkonce.kafka.isolated`) sent a batch of its range to the
    task; reached in the child, so target ``process`` kills only the client, as a crash of librdkafka does.
``kafka_planner_confirm``
    the Kafka source's planner (on the driver) forked the child that confirms end offsets with a fetch
    (:meth:`sparkonce.kafka.planner.OffsetPlanner.latest`), before its fetch; target ``process`` kills only that
    child, as a crash of librdkafka does.
``between_fanout_tables``
    a fan-out sink committed the first table of a batch but not the next.
``after_pg_staging_load``
    the PostgreSQL sink's executors loaded the batch into the staging table (two-phase: into prepared transactions);
    no database transaction of the driver ran yet.
``inside_pg_transaction``
    the PostgreSQL sink moved the staging rows into the target (two-phase: wrote the ledger row) but has not
    committed the database transaction.
``after_pg_ledger_commit``
    the PostgreSQL sink's two-phase protocol committed the ledger row naming a batch's prepared transactions, and
    none of them yet.
``after_pg_commit``
    the PostgreSQL sink committed the database transaction of a batch, Spark has not yet written ``commits/N``.
``after_gold_merge``
    the gold stage made its merge Delta commit (removes + adds + txn), Spark has not yet written ``commits/N``.
``after_commits``
    a streaming source is told a batch is done (its ``commit``): Spark wrote ``commits/N`` of that batch.
``after_schema_log_write``
    a Delta stream with schema tracking appended a source's new metadata to its schema log (the batch ending at the
    change is committed) and has not yet stopped the query.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from typing import Literal, get_args

from sparkonce.errors import CrashPointError

CrashPoint = Literal[
    "before_offsets",
    "after_offsets",
    "after_delta_commit",
    "mid_write",
    "mid_read",
    "kafka_client_read",
    "kafka_planner_confirm",
    "between_fanout_tables",
    "after_pg_staging_load",
    "inside_pg_transaction",
    "after_pg_ledger_commit",
    "after_pg_commit",
    "after_gold_merge",
    "after_commits",
    "after_schema_log_write",
]
"""The named crash points (documented above)."""
CRASH_POINTS: tuple[CrashPoint, ...] = get_args(CrashPoint)

ENV_POINT = "SPARKONCE_CRASH_AT"
ENV_PGID = "SPARKONCE_CRASH_PGID"
ENV_TARGET = "SPARKONCE_CRASH_TARGET"
ENV_HITS_DIR = "SPARKONCE_CRASH_HITS_DIR"
ENV_RECORD = "SPARKONCE_CRASH_RECORD"
ENV_ARM = "SPARKONCE_CRASH_ARM"

CrashTarget = Literal["driver", "process", "task", "executor"]
"""What a crash point kills (documented above)."""
CRASH_TARGETS: tuple[CrashTarget, ...] = get_args(CrashTarget)


@dataclass(frozen=True)
class CrashRecord:
    """One fired crash point, as appended to ``SPARKONCE_CRASH_RECORD``."""

    point: str
    batch_id: int | None
    target: CrashTarget
    pid: int
    """The process that reached the point."""
    killed_pid: int | None
    """The process sent SIGKILL (``process``, ``task``: the same as ``pid``; ``executor``: the executor JVM)."""
    killed_pgid: int | None
    """The process group sent SIGKILL (``driver``)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> CrashRecord:
        data = json.loads(line)
        return cls(
            point=str(data["point"]),
            batch_id=data["batch_id"],
            target=data["target"],
            pid=int(data["pid"]),
            killed_pid=data["killed_pid"],
            killed_pgid=data["killed_pgid"],
        )


def read_crash_records(path: str) -> list[CrashRecord]:
    """The crash points fired into the record file ``path`` (none when it does not exist)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [CrashRecord.from_json(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def crash_point(name: CrashPoint, batch_id: int | None = None) -> None:
    """Kill what ``SPARKONCE_CRASH_TARGET`` names if the environment asks to crash at ``name`` (for ``batch_id``).

    Raises:
        CrashPointError: the point fires with target ``driver`` but ``SPARKONCE_CRASH_PGID`` is not set, or the
            target is not one of :data:`CRASH_TARGETS`.
    """
    if os.environ.get(ENV_ARM) and _claim_arm(name):
        _fire(name, batch_id, "process")
    wanted = os.environ.get(ENV_POINT)
    if not wanted:
        return
    spec, _, hit = wanted.partition("#")
    point, _, batch = spec.partition(":")
    if point != name:
        return
    if batch and (batch_id is None or int(batch) != batch_id):
        return
    if hit and _claim_hit() != int(hit):
        return
    _fire(name, batch_id, os.environ.get(ENV_TARGET, "driver"))


def _fire(name: str, batch_id: int | None, target: str) -> None:
    if target in ("task", "executor"):
        _crash_task(name, batch_id, executor=target == "executor")
        return
    if target == "process":
        _record(CrashRecord(name, batch_id, "process", os.getpid(), os.getpid(), None))
        os.kill(os.getpid(), signal.SIGKILL)
        return
    if target != "driver":
        raise CrashPointError(f"{ENV_TARGET}={target!r} is not one of {list(CRASH_TARGETS)} (crash point {name})")
    pgid_text = os.environ.get(ENV_PGID, "")
    if not pgid_text.isdigit() or int(pgid_text) <= 0:
        raise CrashPointError(
            f"crash point {name} (batch {batch_id}) is armed with target 'driver' but {ENV_PGID} does not name the "
            f"driver's process group ({pgid_text!r}): nothing was killed. Start the driver with "
            "sparkonce.spark.local_session() (which sets it), or set it, or choose another target"
        )
    pgid = int(pgid_text)
    _record(CrashRecord(name, batch_id, "driver", os.getpid(), None, pgid))
    try:
        os.killpg(pgid, signal.SIGKILL)
    finally:
        # Whatever happens to the driver, this process must not go on to finish the step.
        os.kill(os.getpid(), signal.SIGKILL)


def arm(arm_file: str, point: CrashPoint) -> None:
    """Arm ``point`` once, with target ``process``, in every process of a running application that has
    ``SPARKONCE_CRASH_ARM`` = ``arm_file``: the first process to reach it claims
    the arm (an atomic rename) and dies. The chaos harness uses it to land a fault in a driver that is running."""
    staged = f"{arm_file}.{os.getpid()}.tmp"
    with open(staged, "w", encoding="utf-8") as handle:
        handle.write(point)
    os.replace(staged, arm_file)


def disarm(arm_file: str) -> bool:
    """Take back an arm that no process claimed; False when one claimed it first (or none was set)."""
    try:
        os.unlink(arm_file)
    except FileNotFoundError:
        return False
    return True


def _claim_arm(name: str) -> bool:
    """True when ``name`` is armed in the arm file and this process claimed it (renamed it away) first."""
    arm_file = os.environ[ENV_ARM]
    try:
        with open(arm_file, encoding="utf-8") as handle:
            if handle.read().strip() != name:
                return False
        os.rename(arm_file, f"{arm_file}.fired.{os.getpid()}")
    except (FileNotFoundError, OSError):
        return False  # not armed, or another process claimed it first
    return True


def _record(record: CrashRecord) -> None:
    """Append ``record`` to ``SPARKONCE_CRASH_RECORD`` (one ``O_APPEND`` write, whole lines) when it is set."""
    path = os.environ.get(ENV_RECORD)
    if not path:
        return
    fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o644)
    try:
        os.write(fd, (record.to_json() + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _crash_task(name: str, batch_id: int | None, *, executor: bool) -> None:
    """SIGKILL this Python worker (and with ``executor`` the executor JVM above it) on a first task attempt."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() > 0:
        return
    jvm = _ancestor("java") if executor else None
    target: CrashTarget = "executor" if executor else "task"
    _record(CrashRecord(name, batch_id, target, os.getpid(), jvm if jvm is not None else os.getpid(), None))
    if jvm is not None:
        os.kill(jvm, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _ancestor(command: str) -> int | None:
    """The nearest ancestor process whose command name is ``command`` (Linux /proc), or None."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
        except OSError:
            return None
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name == command:
            return pid
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return None


def _claim_hit() -> int:
    """Claim the next hit number of this run (1, 2, ...) across processes; 0 without a hits directory."""
    folder = os.environ.get(ENV_HITS_DIR)
    if not folder:
        return 0
    number = 1
    while True:
        try:
            os.close(os.open(os.path.join(folder, str(number)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return number
        except FileExistsError:
            number += 1


__all__ = [
    "CRASH_POINTS",
    "CRASH_TARGETS",
    "ENV_ARM",
    "ENV_HITS_DIR",
    "ENV_PGID",
    "ENV_POINT",
    "ENV_RECORD",
    "ENV_TARGET",
    "CrashPoint",
    "CrashPointError",
    "CrashRecord",
    "CrashTarget",
    "arm",
    "crash_point",
    "disarm",
    "read_crash_records",
]
