"""The PostgreSQL sink's two-phase commit (``commit_protocol="two-phase"``, append only).

Each executor task COPYs its partition of the batch straight into the target table and ends its database
transaction with ``PREPARE TRANSACTION`` under a global id naming the app, the batch, the driver's attempt, the
partition and the task attempt (:func:`prepared_id`). Nothing is visible yet. The driver then commits the ledger
row of the batch with the ids of the prepared transactions it chose (one per partition, from the tasks' results):
that commit is the decision. Only then does it ``COMMIT PREPARED`` each of them, and ``ROLLBACK PREPARED`` every
other prepared transaction of the batch (a task attempt that prepared and then died, a speculative loser).

:func:`settle` finishes whatever a crash interrupted, and runs before every batch: a prepared transaction whose
batch the ledger records, and whose id the ledger row names, is committed; any other one of this app is rolled
back (its batch was never decided, so Spark runs it again). The rows of a batch therefore reach the target exactly
once, and each prepared transaction is either committed or rolled back, never both, never left behind by the
next batch. The cost against the staging protocol: readers can see a batch's partitions become visible one
``COMMIT PREPARED`` after another (milliseconds apart), and the server needs ``max_prepared_transactions`` at
least the number of tasks of a batch (the same mechanism Flink's exactly-once JDBC sink uses, through XA).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

log = logging.getLogger(__name__)

_PREFIX = "sparkonce"


def app_tag(app_id: str) -> str:
    """The app's part of a prepared transaction id: 32 hex digits of SHA-256 (app ids can be long)."""
    return hashlib.sha256(app_id.encode()).hexdigest()[:32]


def prepared_id(app_id: str, batch_id: int, attempt: str, part: int, task_attempt: int) -> str:
    """``sparkonce:<app tag>:<batch_id>:<driver attempt>:<partition>:<task attempt>`` (at most ~90 of the 200
    characters PostgreSQL allows)."""
    return f"{_PREFIX}:{app_tag(app_id)}:{batch_id}:{attempt}:{part}:{task_attempt}"


def batch_of(gid: str) -> int | None:
    """The batch id in a prepared transaction id made by :func:`prepared_id` (None for any other id)."""
    parts = gid.split(":")
    if len(parts) != 6 or parts[0] != _PREFIX or not parts[2].isdigit():
        return None
    return int(parts[2])


@dataclass(frozen=True)
class PreparedLoader:
    """COPYs one partition of a batch into the target and PREPAREs the database transaction. Built on the driver;
    runs on executors (``mapInArrow``). Yields one row: the partition, its row count and the prepared id ("" when
    the partition was empty: nothing is prepared then).
    """

    dsn: str
    target: tuple[str, ...]
    columns: tuple[str, ...]
    app_id: str
    batch_id: int
    attempt: str
    """A fresh token per driver attempt of the batch: ids of a crashed attempt's tasks never collide."""
    connect_timeout: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import psycopg
        from psycopg import sql
        from pyspark import TaskContext

        from sparkonce.sinks.postgres.loader import copy_csv

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        task_attempt = context.taskAttemptId() if context is not None else 0
        gid = prepared_id(self.app_id, self.batch_id, self.attempt, part, task_attempt)
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
            sql.Identifier(*self.target), sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        )
        with psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout) as conn:
            with conn.cursor().copy(statement) as copy:
                rows = copy_csv(copy, batches)
            if rows:
                conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            else:
                conn.rollback()
                gid = ""
        yield pa.RecordBatch.from_arrays(
            [pa.array([part], pa.int32()), pa.array([rows], pa.int64()), pa.array([gid], pa.string())],
            ["part", "rows", "gid"],
        )


@dataclass(frozen=True)
class Settled:
    """What :func:`settle` did. Runs on the driver."""

    committed: tuple[str, ...]
    rolled_back: tuple[str, ...]


def pending(conn: Any, app_id: str) -> list[str]:
    """Ids of this app's prepared transactions in the connection's database. Runs on the driver."""
    rows = conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, %s) ORDER BY gid",
        (f"{_PREFIX}:{app_tag(app_id)}:",),
    ).fetchall()
    return [str(r[0]) for r in rows]


def settle(conn: Any, ledger: tuple[str, ...], app_id: str) -> Settled:
    """Commit the prepared transactions the ledger decided for, roll back every other one of ``app_id`` (on an
    autocommit connection; never inside a transaction block). Runs on the driver.
    """
    from psycopg import sql

    gids = pending(conn, app_id)
    if not gids:
        return Settled((), ())
    batches = sorted({b for g in gids if (b := batch_of(g)) is not None})
    chosen: set[str] = set()
    for _batch, names in conn.execute(
        sql.SQL("SELECT batch_id, prepared_xacts FROM {} WHERE app_id = %s AND batch_id = ANY(%s)").format(
            sql.Identifier(*ledger)
        ),
        (app_id, batches),
    ).fetchall():
        chosen.update(names or ())
    committed = [g for g in gids if g in chosen]
    rolled_back = [g for g in gids if g not in chosen]
    for gid in committed:
        finish(conn, gid, commit=True)
    for gid in rolled_back:
        finish(conn, gid, commit=False)
    if committed or rolled_back:
        log.info(
            "PostgreSQL sink: app %s: committed %d and rolled back %d prepared transactions left by an earlier attempt",
            app_id,
            len(committed),
            len(rolled_back),
        )
    return Settled(tuple(committed), tuple(rolled_back))


def finish(conn: Any, gid: str, *, commit: bool) -> bool:
    """``COMMIT PREPARED`` (or ``ROLLBACK PREPARED``) ``gid``; False when it was already finished by someone else."""
    import psycopg
    from psycopg import sql

    verb = "COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}"
    try:
        conn.execute(sql.SQL(verb).format(sql.Literal(gid)))
    except psycopg.errors.UndefinedObject:
        return False
    return True


__all__ = ["PreparedLoader", "Settled", "app_tag", "batch_of", "finish", "pending", "prepared_id", "settle"]
