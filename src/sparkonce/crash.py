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
    the driver's process group, as above.
``task``
    only the Python worker running the task (an executor-side point), on the task's first attempt only, so
    Spark retries the task and the retry goes through.
``executor``
    the executor JVM that runs the task (and with it its Python workers), on the task's first attempt only.

On a cluster master, :func:`sparkonce.spark.local_session` forwards these variables to the executors
(``spark.executorEnv.*``).

Points used by sparkonce:

``before_offsets``
    a streaming source (Kafka or Delta) is asked for the end of the next batch: ``offsets/N`` is not written yet.
``after_offsets``
    a streaming source plans the ranges of a batch: ``offsets/N`` is written, no task of the batch has run.
``after_delta_commit``
    the streaming sink made the Delta commit for a batch, Spark has not yet written ``commits/N``.
``mid_write``
    an executor task wrote part of its data file(s) for a batch; nothing is committed.
``mid_read``
    an executor task of the Kafka source read part of its offset range for a batch.
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
"""

from __future__ import annotations

import os
import signal
from typing import Literal, get_args

CrashPoint = Literal[
    "before_offsets",
    "after_offsets",
    "after_delta_commit",
    "mid_write",
    "mid_read",
    "between_fanout_tables",
    "after_pg_staging_load",
    "inside_pg_transaction",
    "after_pg_ledger_commit",
    "after_pg_commit",
    "after_gold_merge",
    "after_commits",
]
"""The named crash points (documented above)."""
CRASH_POINTS: tuple[CrashPoint, ...] = get_args(CrashPoint)

ENV_POINT = "SPARKONCE_CRASH_AT"
ENV_PGID = "SPARKONCE_CRASH_PGID"
ENV_TARGET = "SPARKONCE_CRASH_TARGET"
ENV_HITS_DIR = "SPARKONCE_CRASH_HITS_DIR"


def crash_point(name: CrashPoint, batch_id: int | None = None) -> None:
    """Kill the driver process group if the environment asks to crash at ``name`` (for ``batch_id``)."""
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
    target = os.environ.get(ENV_TARGET, "driver")
    if target in ("task", "executor"):
        _crash_task(executor=target == "executor")
        return
    pgid = int(os.environ.get(ENV_PGID, "0")) or os.getpgrp()
    try:
        os.killpg(pgid, signal.SIGKILL)
    finally:
        # Whatever happens to the driver, this process must not go on to finish the step.
        os.kill(os.getpid(), signal.SIGKILL)


def _crash_task(*, executor: bool) -> None:
    """SIGKILL this Python worker (and with ``executor`` the executor JVM above it) on a first task attempt."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() > 0:
        return
    if executor:
        jvm = _ancestor("java")
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


__all__ = ["CRASH_POINTS", "ENV_HITS_DIR", "ENV_PGID", "ENV_POINT", "ENV_TARGET", "CrashPoint", "crash_point"]
