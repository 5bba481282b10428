"""Named crash points for proving exactly-once by killing a driver for real.

A test (or the quickstart) starts a driver process in its own session and sets::

    SPARKONCE_CRASH_AT=<point>[:<batch_id>]
    SPARKONCE_CRASH_PGID=<process group of the driver>

When code running anywhere in that application (the driver's Python worker that commits, or an executor task)
reaches :func:`crash_point` with a matching name and batch id, it sends SIGKILL to the whole driver process group:
the Python driver and its JVM die at once, exactly as on a machine failure, and no checkpoint commit
(``commits/N``) can be written afterwards. Without those variables a crash point costs one dict lookup.

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
    pgid = int(os.environ.get(ENV_PGID, "0")) or os.getpgrp()
    try:
        os.killpg(pgid, signal.SIGKILL)
    finally:
        # Whatever happens to the driver, this process must not go on to finish the step.
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["ENV_PGID", "ENV_POINT", "crash_point"]
