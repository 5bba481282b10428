"""Exactly-once PostgreSQL sink for ``foreachBatch``: staging load on executors, one database transaction on the driver.

For each micro-batch ``batch_id`` of an application ``app_id``:

1. (driver) If the ledger table holds ``(app_id, batch_id)`` the batch is already in the target: its leftover
   staging rows are deleted and nothing else happens. Otherwise the staging rows of ``(app_id, batch_id)`` left
   by a failed attempt are deleted.
2. (executors) Every partition of the batch is loaded into an UNLOGGED staging table with one ``COPY``, its rows
   tagged with ``app_id``, ``batch_id``, the partition and the row's position. A task deletes its partition's rows
   first, in the same database transaction as its ``COPY``, under an advisory lock: a retried or speculative task
   replaces the rows of the attempt before it instead of adding to them.
3. (driver) ONE database transaction: lock the ledger key, move the staging rows into the target (``INSERT ...
   SELECT``, or an upsert on the declared keys where the last row of the batch for a key wins), insert the
   ledger row, delete the staging rows, commit. The target's rows and the ledger row become visible together, or
   not at all.

For appends, ``commit_protocol="two-phase"`` skips the staging table: each task COPYs into the target and
PREPAREs its database transaction, the driver commits the ledger row naming them and then COMMIT PREPAREs each
(:mod:`~sparkonce.sinks.postgres.two_phase`).

A crash before step 3 commits leaves the ledger without the batch, so Spark's re-run of the batch loads and
moves it again; a crash after the commit leaves the ledger row, so the re-run is skipped. See ``docs/postgres.md``
for why this beats the delete-then-insert of a plain JDBC write.

Usage::

    sink = PostgresSink(PostgresSinkOptions(dsn="postgresql://app@db:5432/shop", table="readings",
                                            keys=("id",), checkpoint_dir="/ck/readings-pg"))
    sink.check()  # optional: fail fast (database unreachable, bad keys) before the query starts
    stream.writeStream.foreachBatch(sink).option("checkpointLocation", "/ck/readings-pg").start()

The package is split where the code runs: :mod:`~sparkonce.sinks.postgres.options` (parsed once, driver),
:mod:`~sparkonce.sinks.postgres.loader` (the staging ``COPY``; runs on executors),
:mod:`~sparkonce.sinks.postgres.sink` (the ledger check and the one database transaction; driver only),
:mod:`~sparkonce.sinks.postgres.two_phase` (the prepared-transaction loader and settling) and
:mod:`~sparkonce.sinks.postgres.sql` (the statements and the tables they need).
"""

from __future__ import annotations

from sparkonce.sinks.postgres.loader import StagingLoader
from sparkonce.sinks.postgres.options import PostgresSinkOptions
from sparkonce.sinks.postgres.sink import (
    CRASH_AFTER_COMMIT,
    CRASH_AFTER_STAGING,
    CRASH_INSIDE_TRANSACTION,
    BatchOutcome,
    PostgresSink,
)

__all__ = [
    "CRASH_AFTER_COMMIT",
    "CRASH_AFTER_STAGING",
    "CRASH_INSIDE_TRANSACTION",
    "BatchOutcome",
    "PostgresSink",
    "PostgresSinkOptions",
    "StagingLoader",
]
