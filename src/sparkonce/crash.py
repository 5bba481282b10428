"""Named crash points for proving exactly-once by killing a driver for real.

A test (or the quickstart) starts a driver process in its own session and sets::

    SPARKONCE_CRASH_AT=<point>[:<batch_id>]
    SPARKONCE_CRASH_PGID=<process group of the driver>

and optionally ``SPARKONCE_CRASH_TARGET`` (see below).

When code running anywhere in that application (the driver's Python worker that commits, or an executor task)
reaches :func:`crash_point` with a matching name and batch id, it sends SIGKILL to the whole driver process group:
the Python driver and its JVM die at once, exactly as on a machine failure, and no checkpoint commit
(``commits/N``) can be written afterwards. Without those variables a crash point costs one dict lookup.

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

``after_delta_commit``
    the streaming sink made the Delta commit for a batch, Spark has not yet written ``commits/N``.
``mid_write``
    an executor task wrote part of its data file(s) for a batch; nothing is committed.
``mid_read``
    an executor task of the Kafka source read part of its offset range for a batch.
``between_fanout_tables``
    a fan-out sink committed the first table of a batch but not the next.
``after_pg_staging_load``
    the PostgreSQL sink's executors loaded the batch into the staging table; no database transaction ran yet.
``inside_pg_transaction``
    the PostgreSQL sink moved the staging rows into the target but has not committed the database transaction.
``after_gold_merge``
    the gold stage made its merge Delta commit (removes + adds + txn), Spark has not yet written ``commits/N``.
"""

from __future__ import annotations

import os
import signal

ENV_POINT = "SPARKONCE_CRASH_AT"
ENV_PGID = "SPARKONCE_CRASH_PGID"
ENV_TARGET = "SPARKONCE_CRASH_TARGET"


def crash_point(name: str, batch_id: int | None = None) -> None:
    """Kill the driver process group if the environment asks to crash at ``name`` (for ``batch_id``)."""
    wanted = os.environ.get(ENV_POINT)
    if not wanted:
        return
    point, _, batch = wanted.partition(":")
    if point != name:
        return
    if batch and (batch_id is None or int(batch) != batch_id):
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


__all__ = ["ENV_PGID", "ENV_POINT", "ENV_TARGET", "crash_point"]
