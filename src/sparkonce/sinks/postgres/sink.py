"""Driver side of the PostgreSQL sink: the ledger check, the executors' staging load, ONE database transaction."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from sparkonce.errors import OptionError, SinkError
from sparkonce.retries import call_with_retries
from sparkonce.sinks.postgres import sql as pgsql
from sparkonce.sinks.postgres import two_phase
from sparkonce.sinks.postgres.loader import StagingLoader
from sparkonce.sinks.postgres.options import PostgresSinkOptions, table_parts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from sparkonce.crash import CrashPoint

log = logging.getLogger(__name__)

CONNECT_ATTEMPTS = 4
"""Connection attempts of the driver side of the sink before PostgreSQL counts as unreachable."""
CONNECT_BACKOFF_SECONDS = 0.5
"""The pause after the first failed connection attempt; it doubles after each next one (0.5, 1, 2 s)."""

CRASH_INSIDE_TRANSACTION: CrashPoint = "inside_pg_transaction"
"""Crash point: target rows, ledger row and staging delete done; the database transaction is not committed."""
CRASH_AFTER_STAGING: CrashPoint = "after_pg_staging_load"
"""Crash point: every partition of the batch is in the staging table; the database transaction has not begun."""
CRASH_AFTER_COMMIT: CrashPoint = "after_pg_commit"
"""Crash point: the database transaction of the batch is committed; Spark has not written ``commits/N``."""
CRASH_AFTER_LEDGER: CrashPoint = "after_pg_ledger_commit"
"""Crash point (two-phase): the ledger row naming the batch's prepared transactions is committed, none of them is."""


@dataclass(frozen=True)
class BatchOutcome:
    """What :meth:`PostgresSink.write_batch` did for one batch (a result on the driver)."""

    app_id: str
    batch_id: int
    status: Literal["committed", "skipped"]
    staged_rows: int
    """Rows loaded by the executors: into the staging table, or into prepared transactions (0 when skipped)."""
    target_rows: int
    """Rows inserted or updated in the target by the database transaction (0 when skipped)."""
    load_seconds: float = 0.0
    """Wall time of the executors' load (the Spark job)."""
    commit_seconds: float = 0.0
    """Wall time of the driver's commit after the load (the database transaction; two-phase: the ledger row and
    the COMMIT PREPARED statements)."""


class PostgresSink:
    """A ``foreachBatch`` function writing each batch to a PostgreSQL table exactly once. Runs on the driver.

    Runs on the driver (Spark calls ``foreachBatch`` functions there), which only runs the SQL that checks the
    ledger and moves staging rows; the rows themselves go from executors to the staging table (see
    :class:`StagingLoader`) and never through the driver.
    """

    def __init__(self, options: PostgresSinkOptions) -> None:
        self.options = options
        self._app_id = options.app_id
        self._prepared_for: tuple[str, ...] | None = None
        self._columns: tuple[pgsql.Column, ...] = ()

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> PostgresSink:
        return cls(PostgresSinkOptions.from_mapping(options))

    @property
    def app_id(self) -> str:
        """The ledger's application id: the one given, or ``f"{query id}:{table}"`` from the checkpoint."""
        if self._app_id is None:
            from sparkonce.checkpoint.query import read_query_id

            assert self.options.checkpoint_dir is not None
            self._app_id = f"{read_query_id(self.options.checkpoint_dir)}:{self.options.table}"
        return self._app_id

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry point. Runs on the driver."""
        self.write_batch(batch_df, batch_id)

    def check(self, schema: StructType | None = None) -> None:
        """Connect, create the ledger (and, given the batch ``schema``, the target and staging tables) if missing,
        and check the upsert keys: every problem is raised here, before any data moves. Runs on the driver.

        Raises:
            SinkError: the database is unreachable (the message names host:port) or refused a statement.
            OptionError: a key is not a column, no unique index covers the keys, or the two-phase protocol on a
                server without prepared transactions.
        """
        with self._connect() as conn, self._sql_errors("checking the tables"):
            self._ensure_ledger(conn)
            if schema is not None:
                self._prepare(conn, schema)
            elif self.options.keys and pgsql.table_columns(conn, self.options.table):
                pgsql.check_unique_index(conn, self.options.table, self.options.keys)

    def settle(self) -> two_phase.Settled:
        """Finish this app's prepared transactions (two-phase protocol) left by a crash: commit those the ledger
        names, roll back the others. Every batch does this first; call it for a query abandoned after a crash.
        Runs on the driver.

        Raises:
            SinkError: the database is unreachable or refused a statement.
        """
        with self._connect() as conn, self._sql_errors("settling prepared transactions"):
            if not pgsql.table_columns(conn, self.options.ledger_table):
                return two_phase.Settled((), ())
            self._ensure_ledger(conn)
            return two_phase.settle(conn, self._ledger, self.app_id)

    def ledger_rows(self) -> list[tuple[int, int]]:
        """``(batch_id, target_rows)`` of every batch the ledger records for this sink's app id. Runs on the driver.

        Raises:
            SinkError: the database is unreachable or refused the query.
        """
        with self._connect() as conn, self._sql_errors("reading the ledger"):
            return pgsql.ledger_rows(conn, self._ledger, self.app_id)

    def target_rows(self) -> int:
        """Rows in the target table now (0 when it does not exist). Runs on the driver.

        Raises:
            SinkError: the database is unreachable or refused the query.
        """
        with self._connect() as conn, self._sql_errors("counting the target's rows"):
            return pgsql.count_rows(conn, self._target)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> BatchOutcome:
        """Write ``batch_df`` as batch ``batch_id`` unless the ledger already holds it. Runs on the driver.

        Raises:
            SinkError: the database is unreachable, a staging load failed, or the database transaction failed;
                nothing of the batch is in the target then, and re-running the batch is safe.
        """
        from sparkonce.crash import crash_point

        if batch_id < 0:
            raise OptionError("batch_id", batch_id, "must be a non-negative micro-batch id")
        app_id = self.app_id
        if self.options.commit_protocol == "two-phase":
            return self._write_two_phase(batch_df, app_id, batch_id)
        with self._connect() as conn, self._sql_errors(f"preparing batch {batch_id} of app {app_id}"):
            self._prepare(conn, batch_df.schema)
            if self._in_ledger(conn, app_id, batch_id):
                deleted = self._delete_staging(conn, app_id, batch_id)
                log.info(
                    "PostgreSQL sink: batch %d of app %s is in the ledger %s: skipped (%d leftover staging rows "
                    "deleted)",
                    batch_id,
                    app_id,
                    self.options.ledger_table,
                    deleted,
                )
                return BatchOutcome(app_id, batch_id, "skipped", 0, 0)
            cleared = self._delete_staging(conn, app_id, batch_id)
            if cleared:
                log.info(
                    "PostgreSQL sink: batch %d of app %s: deleted %d staging rows of a failed attempt",
                    batch_id,
                    app_id,
                    cleared,
                )
        started = time.perf_counter()
        staged = self._load_staging(batch_df, app_id, batch_id)
        loaded = time.perf_counter()
        crash_point(CRASH_AFTER_STAGING, batch_id)
        with self._connect() as conn:
            outcome = self._commit(conn, app_id, batch_id, staged)
        return replace(outcome, load_seconds=loaded - started, commit_seconds=time.perf_counter() - loaded)

    # -- driver: the database transaction ------------------------------------------------------------------------

    def _commit(self, conn: Any, app_id: str, batch_id: int, staged: int) -> BatchOutcome:
        import psycopg

        from sparkonce.crash import crash_point

        try:
            with conn.transaction():
                if pgsql.in_ledger(conn, self._ledger, app_id, batch_id, lock=True):
                    self._delete_staging(conn, app_id, batch_id)
                    skipped = True
                else:
                    skipped = False
                    move = pgsql.move_statement(self._target, self._staging, self._columns, self.options.keys)
                    moved = conn.execute(move, (app_id, batch_id)).rowcount
                    if not self.options.keys and moved != staged:
                        # Raised inside the database transaction: it rolls back, nothing of the batch is kept.
                        raise SinkError(
                            f"batch {batch_id} of app {app_id}: the executors staged {staged} rows but the staging "
                            f"table {self.options.staging_name} holds {moved}: another writer loads the same batch; "
                            "nothing was committed"
                        )
                    pgsql.insert_ledger(conn, self._ledger, app_id, batch_id, self.options.table, staged, moved)
                    self._delete_staging(conn, app_id, batch_id)
                    crash_point(CRASH_INSIDE_TRANSACTION, batch_id)
        except psycopg.errors.UniqueViolation as err:
            if err.diag.table_name != self._ledger[-1]:
                raise SinkError(
                    f"batch {batch_id} of app {app_id}: the move into {self.options.table} hit a duplicate key: "
                    f"{_first_line(err)}"
                ) from err
            # Another writer committed the same (app_id, batch_id) between our check and our insert; our
            # database transaction rolled back, the target holds that writer's rows exactly once.
            log.warning("PostgreSQL sink: batch %d of app %s was committed concurrently: skipped", batch_id, app_id)
            return BatchOutcome(app_id, batch_id, "skipped", staged, 0)
        except psycopg.Error as err:
            raise SinkError(
                f"database transaction of batch {batch_id} of app {app_id} into {self.options.table} at "
                f"{self.options.address} failed (rolled back): {_first_line(err)}"
            ) from err
        if skipped:
            log.info("PostgreSQL sink: batch %d of app %s is in the ledger: skipped", batch_id, app_id)
            return BatchOutcome(app_id, batch_id, "skipped", staged, 0)
        crash_point(CRASH_AFTER_COMMIT, batch_id)
        log.info(
            "PostgreSQL sink: committed batch %d of app %s: %d staged rows, %d target rows in %s",
            batch_id,
            app_id,
            staged,
            moved,
            self.options.table,
        )
        return BatchOutcome(app_id, batch_id, "committed", staged, moved)

    # -- driver: the two-phase protocol (append only) -------------------------------------------------------------

    def _write_two_phase(self, batch_df: DataFrame, app_id: str, batch_id: int) -> BatchOutcome:
        """Executors COPY into the target and PREPARE; the ledger row names the prepared transactions (the
        decision); then each is committed. See :mod:`sparkonce.sinks.postgres.two_phase`."""
        import uuid

        import psycopg

        from sparkonce.crash import crash_point

        with self._connect() as conn, self._sql_errors(f"preparing batch {batch_id} of app {app_id}"):
            self._prepare(conn, batch_df.schema)
            two_phase.settle(conn, self._ledger, app_id)
            if self._in_ledger(conn, app_id, batch_id):
                log.info("PostgreSQL sink: batch %d of app %s is in the ledger: skipped", batch_id, app_id)
                return BatchOutcome(app_id, batch_id, "skipped", 0, 0)
        loader = two_phase.PreparedLoader(
            dsn=self.options.dsn,
            target=self._target,
            columns=tuple(c.name for c in self._columns),
            app_id=app_id,
            batch_id=batch_id,
            attempt=uuid.uuid4().hex[:8],
            connect_timeout=self.options.connect_timeout,
        )
        started = time.perf_counter()
        into = f"target table {self.options.table}"
        results = self._run_loader(batch_df, loader, "part int, rows long, gid string", app_id, batch_id, into)
        loaded = time.perf_counter()
        prepared = tuple(sorted(str(r["gid"]) for r in results if r["gid"]))
        staged = sum(int(r["rows"]) for r in results)
        crash_point(CRASH_AFTER_STAGING, batch_id)
        with self._connect() as conn, self._sql_errors(f"committing batch {batch_id} of app {app_id}"):
            try:
                with conn.transaction():
                    skipped = pgsql.in_ledger(conn, self._ledger, app_id, batch_id, lock=True)
                    if not skipped:
                        pgsql.insert_ledger(
                            conn, self._ledger, app_id, batch_id, self.options.table, staged, staged, prepared
                        )
                        crash_point(CRASH_INSIDE_TRANSACTION, batch_id)
            except psycopg.errors.UniqueViolation as err:
                if err.diag.table_name != self._ledger[-1]:
                    raise
                skipped = True  # another writer recorded the batch between our check and our insert
            if not skipped:
                crash_point(CRASH_AFTER_LEDGER, batch_id)
            # The decision is in the ledger: commit what it names, roll back the rest (ours too when skipped).
            two_phase.settle(conn, self._ledger, app_id)
        timing = {"load_seconds": loaded - started, "commit_seconds": time.perf_counter() - loaded}
        if skipped:
            log.warning("PostgreSQL sink: batch %d of app %s was committed concurrently: skipped", batch_id, app_id)
            return BatchOutcome(app_id, batch_id, "skipped", staged, 0, **timing)
        crash_point(CRASH_AFTER_COMMIT, batch_id)
        log.info(
            "PostgreSQL sink: committed batch %d of app %s: %d rows in %d prepared transactions into %s",
            batch_id,
            app_id,
            staged,
            len(prepared),
            self.options.table,
        )
        return BatchOutcome(app_id, batch_id, "committed", staged, staged, **timing)

    # -- driver: executors load the staging table ----------------------------------------------------------------

    def _load_staging(self, batch_df: DataFrame, app_id: str, batch_id: int) -> int:
        names = tuple(c.name for c in self._columns)
        loader = StagingLoader(
            dsn=self.options.dsn,
            staging=self._staging,
            columns=names,
            app_id=app_id,
            batch_id=batch_id,
            connect_timeout=self.options.connect_timeout,
        )
        into = f"staging table {self.options.staging_name}"
        counts = self._run_loader(batch_df, loader, "part int, rows long", app_id, batch_id, into)
        staged = sum(int(row["rows"]) for row in counts)
        log.info(
            "PostgreSQL sink: batch %d of app %s: %d rows staged by %d tasks in %s",
            batch_id,
            app_id,
            staged,
            len(counts),
            self.options.staging_name,
        )
        return staged

    def _run_loader(
        self, batch_df: DataFrame, loader: Any, schema: str, app_id: str, batch_id: int, into: str
    ) -> list[Any]:
        """Run ``loader`` on the executors over ``batch_df``; only its one row per task comes back. ``into`` names
        the table for the error message."""
        try:
            return list(batch_df.mapInArrow(loader, schema).collect())
        except Exception as err:
            raise SinkError(
                f"loading batch {batch_id} of app {app_id} into the {into} at {self.options.address} "
                f"failed: {_first_line(err)}"
            ) from err

    # -- driver: tables --------------------------------------------------------------------------------------------

    def _connect(self) -> Any:
        """A new autocommit connection; a failed attempt (refused, reset, timed out) is tried again, at most
        :data:`CONNECT_ATTEMPTS` times in all with doubling pauses (:data:`CONNECT_BACKOFF_SECONDS` first): opening
        a connection sends nothing a retry could repeat."""
        import psycopg

        try:
            connection: Any = call_with_retries(
                lambda: psycopg.connect(
                    self.options.dsn, autocommit=True, connect_timeout=self.options.connect_timeout
                ),
                logger=log,
                kind="postgres_connect",
                retry_on=psycopg.OperationalError,
                attempts=CONNECT_ATTEMPTS,
                pause=lambda attempt: CONNECT_BACKOFF_SECONDS * 2 ** (attempt - 1),
                message=lambda attempt, err, pause: (
                    f"PostgreSQL at {self.options.address}: connection attempt {attempt} of {CONNECT_ATTEMPTS} "
                    f"failed ({_first_line(err)}); again in {pause:.1f}s"
                ),
            )
        except psycopg.OperationalError as err:
            raise SinkError(
                f"PostgreSQL at {self.options.address} is unreachable after {CONNECT_ATTEMPTS} attempts: "
                f"{_first_line(err)}"
            ) from err
        return connection

    @contextlib.contextmanager
    def _sql_errors(self, doing: str) -> Iterator[None]:
        """Turn a database error into a SinkError naming what was being done and where."""
        import psycopg

        try:
            yield
        except psycopg.Error as err:
            raise SinkError(f"PostgreSQL at {self.options.address}: {doing} failed: {_first_line(err)}") from err

    def _prepare(self, conn: Any, schema: StructType) -> None:
        """Create or check target, staging and ledger tables for the batch's columns (once per schema)."""
        names = tuple(schema.fieldNames())
        if self._prepared_for == names:
            return
        tagged = [n for n in names if n.startswith("_sparkonce_")]
        if tagged:
            raise SinkError(f"the batch has columns reserved for the staging table: {tagged}")
        self._ensure_ledger(conn)
        with conn.transaction():
            existing = pgsql.table_columns(conn, self.options.table)
            if not existing:
                if not self.options.create_table:
                    raise SinkError(
                        f"target table {self.options.table} does not exist at {self.options.address} "
                        "(createTable is off)"
                    )
                self._create_target(conn, schema)
                existing = pgsql.table_columns(conn, self.options.table)
            missing = [n for n in names if n not in existing]
            if missing:
                raise SinkError(
                    f"target table {self.options.table} has no column(s) {missing} for the batch "
                    f"(its columns: {list(existing)})"
                )
            self._columns = tuple(pgsql.Column(n, existing[n]) for n in names)
            missing_keys = [k for k in self.options.keys if k not in names]
            if missing_keys:
                raise OptionError("keys", self.options.keys, f"{missing_keys} are not columns of the batch")
            if self.options.keys:
                pgsql.check_unique_index(conn, self.options.table, self.options.keys)
            if self.options.commit_protocol == "staging":
                self._ensure_staging(conn)
        self._prepared_for = names

    # -- table names -----------------------------------------------------------------------------------------------

    @property
    def _target(self) -> tuple[str, ...]:
        return table_parts("table", self.options.table)

    @property
    def _staging(self) -> tuple[str, ...]:
        return table_parts("staging_table", self.options.staging_name)

    @property
    def _ledger(self) -> tuple[str, ...]:
        return table_parts("ledger_table", self.options.ledger_table)

    def _ensure_ledger(self, conn: Any) -> None:
        """Create the ledger when missing; for the two-phase protocol, check the server allows prepared
        transactions first."""
        two = self.options.commit_protocol == "two-phase"
        if two and pgsql.max_prepared_transactions(conn) < 1:
            raise OptionError(
                "commit_protocol",
                "two-phase",
                f"the server at {self.options.address} has max_prepared_transactions = 0 (prepared transactions "
                "off); set it to at least the number of tasks of a batch and restart the server, or use the "
                "staging protocol",
            )
        pgsql.ensure_ledger(conn, self._ledger, prepared_xacts=two)

    def _create_target(self, conn: Any, schema: StructType) -> None:
        pgsql.create_target(conn, self._target, schema, self.options.keys)
        log.info("PostgreSQL sink: created target table %s at %s", self.options.table, self.options.address)

    def _ensure_staging(self, conn: Any) -> None:
        pgsql.ensure_staging(conn, self._staging, self._columns)

    def _in_ledger(self, conn: Any, app_id: str, batch_id: int) -> bool:
        return pgsql.in_ledger(conn, self._ledger, app_id, batch_id)

    def _delete_staging(self, conn: Any, app_id: str, batch_id: int) -> int:
        return pgsql.delete_staging(conn, self._staging, app_id, batch_id)


_PYTHON_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Violation)\b: .+")


def _first_line(err: BaseException) -> str:
    """The message of ``err`` in one line; for a Python worker error wrapped by Spark, the worker's own error."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    worker = [line for line in text.splitlines() if _PYTHON_ERROR_LINE.match(line.strip())]
    return worker[-1].strip() if worker else text.splitlines()[0]


__all__ = [
    "CRASH_AFTER_COMMIT",
    "CRASH_AFTER_LEDGER",
    "CRASH_AFTER_STAGING",
    "CRASH_INSIDE_TRANSACTION",
    "BatchOutcome",
    "PostgresSink",
]
