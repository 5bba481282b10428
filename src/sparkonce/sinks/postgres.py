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

A crash before step 3 commits leaves the ledger without the batch, so Spark's re-run of the batch loads and
moves it again; a crash after the commit leaves the ledger row, so the re-run is skipped. See ``docs/postgres.md``
for why this beats the delete-then-insert of a plain JDBC write.

Usage::

    sink = PostgresSink(PostgresSinkOptions(dsn="postgresql://app@db:5432/shop", table="readings",
                                            keys=("id",), checkpoint_dir="/ck/readings-pg"))
    sink.check()  # optional: fail fast (database unreachable, bad keys) before the query starts
    stream.writeStream.foreachBatch(sink).option("checkpointLocation", "/ck/readings-pg").start()
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from sparkonce.errors import OptionError, SinkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

CRASH_INSIDE_TRANSACTION = "inside_pg_transaction"
"""Crash point: target rows, ledger row and staging delete done; the database transaction is not committed."""
CRASH_AFTER_STAGING = "after_pg_staging_load"
"""Crash point: every partition of the batch is in the staging table; the database transaction has not begun."""

APP_COLUMN = "_sparkonce_app_id"
BATCH_COLUMN = "_sparkonce_batch_id"
PART_COLUMN = "_sparkonce_part"
ROW_COLUMN = "_sparkonce_row"
_TAG_COLUMNS = (APP_COLUMN, BATCH_COLUMN, PART_COLUMN, ROW_COLUMN)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_MAX_IDENTIFIER = 63
_STAGING_SUFFIX = "_sparkonce_staging"


def _table_name(option: str, value: object) -> tuple[str, ...]:
    """Split ``[schema.]table`` into its parts, refusing anything that is not a plain identifier."""
    if not isinstance(value, str) or not value.strip():
        raise OptionError(option, value, "must be a table name like 'readings' or 'analytics.readings'")
    parts = tuple(value.split("."))
    if len(parts) > 2 or not all(_NAME.match(p) and len(p) <= _MAX_IDENTIFIER for p in parts):
        raise OptionError(option, value, "must be [schema.]table of letters, digits and _ (at most 63 characters each)")
    return parts


@dataclass(frozen=True)
class PostgresSinkOptions:
    """Options of :class:`PostgresSink`, checked once when built (driver).

    Build it with keywords, or from a string map (a pipeline file, ``.option(...)`` style) with
    :meth:`from_mapping`. Every invalid value raises :class:`~sparkonce.errors.OptionError` naming the option.
    """

    dsn: str
    """libpq connection string or URI of the database."""
    table: str
    """Target table, ``table`` or ``schema.table``. Created from the batch's schema when missing and
    ``create_table`` is true."""
    keys: tuple[str, ...] = ()
    """Upsert keys: with keys, a row whose keys already exist replaces it (the target needs a unique index on
    exactly these columns, made as the primary key when sparkonce creates the table); without, rows are
    appended."""
    app_id: str | None = None
    """The ledger's application id. Give it, or ``checkpoint_dir``."""
    checkpoint_dir: str | None = None
    """The query's checkpoint location: the app id is then ``f"{query id}:{table}"`` (query id from its
    ``metadata`` file, stable across restarts on the same checkpoint)."""
    staging_table: str | None = None
    """UNLOGGED staging table; ``f"{table}_sparkonce_staging"`` when None. Created when missing."""
    ledger_table: str = "sparkonce_ledger"
    """Ledger of committed batches, primary key ``(app_id, batch_id)``. Created when missing."""
    create_table: bool = True
    connect_timeout: int = 10
    """Seconds to wait for a connection before the database counts as unreachable."""

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str) or not self.dsn.strip():
            raise OptionError("dsn", self.dsn, "is required (a libpq connection string or postgresql:// URI)")
        try:
            from psycopg.conninfo import conninfo_to_dict

            conninfo_to_dict(self.dsn)
        except Exception as err:
            raise OptionError("dsn", _redact(self.dsn), f"is not a valid connection string: {err}") from err
        _table_name("table", self.table)
        if self.staging_table is not None:
            _table_name("staging_table", self.staging_table)
            if self.staging_table == self.table:
                raise OptionError("staging_table", self.staging_table, "must differ from the target table")
        _table_name("ledger_table", self.ledger_table)
        if self.ledger_table in (self.table, self.staging_name):
            raise OptionError("ledger_table", self.ledger_table, "must differ from the target and staging tables")
        if self.staging_table is None and len(self.table.split(".")[-1]) + len(_STAGING_SUFFIX) > _MAX_IDENTIFIER:
            raise OptionError("staging_table", None, f"the default name for {self.table!r} is too long; give one")
        if not isinstance(self.keys, tuple):
            raise OptionError("keys", self.keys, "must be a tuple of column names")
        for key in self.keys:
            if not isinstance(key, str) or not key or key.startswith("_sparkonce_"):
                raise OptionError("keys", self.keys, f"{key!r} is not a usable column name")
        if len(set(self.keys)) != len(self.keys):
            raise OptionError("keys", self.keys, "repeats a column")
        if (self.app_id is None) == (self.checkpoint_dir is None):
            raise OptionError(
                "app_id", self.app_id, "give exactly one of app_id and checkpoint_dir (the query id is read from it)"
            )
        if self.app_id is not None and not self.app_id.strip():
            raise OptionError("app_id", self.app_id, "must not be empty")
        if not isinstance(self.connect_timeout, int) or self.connect_timeout < 1:
            raise OptionError("connect_timeout", self.connect_timeout, "must be a whole number of seconds >= 1")

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> PostgresSinkOptions:
        """Parse string options: ``dsn``, ``table``, ``keys`` (comma separated), ``appId``, ``checkpointLocation``,
        ``stagingTable``, ``ledgerTable``, ``createTable`` (true/false), ``connectTimeout`` (seconds); keys are
        case-insensitive. Unknown keys are refused.
        """
        from sparkonce.options import get_bool, get_int, get_str, require_str

        known = {
            "dsn",
            "table",
            "keys",
            "appid",
            "checkpointlocation",
            "stagingtable",
            "ledgertable",
            "createtable",
            "connecttimeout",
        }
        unknown = sorted(k for k in options if k.lower() not in known)
        if unknown:
            raise OptionError(unknown[0], options[unknown[0]], f"is not a PostgreSQL sink option ({sorted(known)})")
        raw_keys = get_str(options, "keys")
        keys = tuple(k.strip() for k in raw_keys.split(",")) if raw_keys is not None else ()
        if any(not k for k in keys):
            raise OptionError("keys", raw_keys, "has an empty column name")
        timeout = get_int(options, "connectTimeout", 10, minimum=1)
        return cls(
            dsn=require_str(options, "dsn"),
            table=require_str(options, "table"),
            keys=keys,
            app_id=get_str(options, "appId"),
            checkpoint_dir=get_str(options, "checkpointLocation"),
            staging_table=get_str(options, "stagingTable"),
            ledger_table=get_str(options, "ledgerTable", "sparkonce_ledger") or "sparkonce_ledger",
            create_table=get_bool(options, "createTable", True),
            connect_timeout=timeout if timeout is not None else 10,
        )

    @property
    def staging_name(self) -> str:
        return self.staging_table if self.staging_table is not None else f"{self.table}{_STAGING_SUFFIX}"

    @property
    def address(self) -> str:
        """``host:port`` of the database, for messages (never the password)."""
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.dsn)
        host = str(params.get("host") or params.get("hostaddr") or "localhost")
        return f"{host}:{params.get('port') or 5432}"


@dataclass(frozen=True)
class BatchOutcome:
    """What :meth:`PostgresSink.write_batch` did for one batch."""

    app_id: str
    batch_id: int
    status: Literal["committed", "skipped"]
    staged_rows: int
    """Rows loaded into the staging table by the executors (0 when skipped)."""
    target_rows: int
    """Rows inserted or updated in the target by the database transaction (0 when skipped)."""


@dataclass(frozen=True)
class _Column:
    name: str
    pg_type: str


@dataclass(frozen=True)
class StagingLoader:
    """Loads one partition of a batch into the staging table. Built on the driver, called on executors.

    Pickled to executors with the batch's identity; the psycopg connection is opened inside :meth:`__call__`.
    """

    dsn: str
    staging: tuple[str, ...]
    columns: tuple[str, ...]
    app_id: str
    batch_id: int
    connect_timeout: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Delete this partition's rows of an earlier attempt and COPY its rows, in one database transaction."""
        import psycopg
        import pyarrow.csv as pacsv
        from psycopg import sql
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        staging = sql.Identifier(*self.staging)
        copy_columns = sql.SQL(", ").join(sql.Identifier(c) for c in (*self.columns, *_TAG_COLUMNS))
        rows = 0
        with (
            psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout) as conn,
            conn.transaction(),
        ):
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                (f"{self.app_id}|{self.batch_id}", part),
            )
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s AND {} = %s").format(
                    staging, sql.Identifier(APP_COLUMN), sql.Identifier(BATCH_COLUMN), sql.Identifier(PART_COLUMN)
                ),
                (self.app_id, self.batch_id, part),
            )
            statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(staging, copy_columns)
            with conn.cursor().copy(statement) as copy:
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    tagged = _tag(batch, self.app_id, self.batch_id, part, rows)
                    buffer = io.BytesIO()
                    pacsv.write_csv(tagged, buffer, pacsv.WriteOptions(include_header=False))
                    copy.write(buffer.getbuffer())
                    rows += batch.num_rows
        yield pa.RecordBatch.from_arrays([pa.array([part], pa.int32()), pa.array([rows], pa.int64())], ["part", "rows"])


def _tag(batch: pa.RecordBatch, app_id: str, batch_id: int, part: int, first_row: int) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = [
        *batch.columns,
        pa.repeat(pa.scalar(app_id, pa.string()), n),
        pa.repeat(pa.scalar(batch_id, pa.int64()), n),
        pa.repeat(pa.scalar(part, pa.int32()), n),
        pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, *_TAG_COLUMNS])


class PostgresSink:
    """A ``foreachBatch`` function writing each batch to a PostgreSQL table exactly once.

    Runs on the driver (Spark calls ``foreachBatch`` functions there), which only runs the SQL that checks the
    ledger and moves staging rows; the rows themselves go from executors to the staging table (see
    :class:`StagingLoader`) and never through the driver.
    """

    def __init__(self, options: PostgresSinkOptions) -> None:
        self.options = options
        self._app_id = options.app_id
        self._prepared_for: tuple[str, ...] | None = None
        self._columns: tuple[_Column, ...] = ()

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> PostgresSink:
        return cls(PostgresSinkOptions.from_mapping(options))

    @property
    def app_id(self) -> str:
        """The ledger's application id: the one given, or ``f"{query id}:{table}"`` from the checkpoint."""
        if self._app_id is None:
            from sparkonce.delta.sink import read_query_id

            assert self.options.checkpoint_dir is not None
            self._app_id = f"{read_query_id(self.options.checkpoint_dir)}:{self.options.table}"
        return self._app_id

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry point (driver)."""
        self.write_batch(batch_df, batch_id)

    def check(self, schema: StructType | None = None) -> None:
        """Connect, create the ledger (and, given the batch ``schema``, the target and staging tables) if missing,
        and check the upsert keys: every problem is raised here, before any data moves (driver).

        Raises:
            SinkError: the database is unreachable (the message names host:port) or refused a statement.
            OptionError: a key is not a column, or no unique index covers the keys.
        """
        with self._connect() as conn, self._sql_errors("checking the tables"):
            self._ensure_ledger(conn)
            if schema is not None:
                self._prepare(conn, schema)
            elif self.options.keys and _table_columns(conn, self.options.table):
                _check_unique_index(conn, self.options.table, self.options.keys)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> BatchOutcome:
        """Write ``batch_df`` as batch ``batch_id`` unless the ledger already holds it (driver).

        Raises:
            SinkError: the database is unreachable, a staging load failed, or the database transaction failed;
                nothing of the batch is in the target then, and re-running the batch is safe.
        """
        from sparkonce.crash import crash_point

        if batch_id < 0:
            raise OptionError("batch_id", batch_id, "must be a non-negative micro-batch id")
        app_id = self.app_id
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
        staged = self._load_staging(batch_df, app_id, batch_id)
        crash_point(CRASH_AFTER_STAGING, batch_id)
        with self._connect() as conn:
            return self._commit(conn, app_id, batch_id, staged)

    # -- driver: the database transaction ------------------------------------------------------------------------

    def _commit(self, conn: Any, app_id: str, batch_id: int, staged: int) -> BatchOutcome:
        import psycopg
        from psycopg import sql

        from sparkonce.crash import crash_point

        staging = sql.Identifier(*_table_name("staging_table", self.options.staging_name))
        ledger = sql.Identifier(*_table_name("ledger_table", self.options.ledger_table))
        target = sql.Identifier(*_table_name("table", self.options.table))
        try:
            with conn.transaction():
                locked = conn.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE app_id = %s AND batch_id = %s FOR UPDATE").format(ledger),
                    (app_id, batch_id),
                ).fetchone()
                if locked is not None:
                    self._delete_staging(conn, app_id, batch_id)
                    skipped = True
                else:
                    skipped = False
                    moved = conn.execute(self._move_statement(target, staging), (app_id, batch_id)).rowcount
                    if not self.options.keys and moved != staged:
                        # Raised inside the database transaction: it rolls back, nothing of the batch is kept.
                        raise SinkError(
                            f"batch {batch_id} of app {app_id}: the executors staged {staged} rows but the staging "
                            f"table {self.options.staging_name} holds {moved}: another writer loads the same batch; "
                            "nothing was committed"
                        )
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (app_id, batch_id, target_table, staged_rows, target_rows) "
                            "VALUES (%s, %s, %s, %s, %s)"
                        ).format(ledger),
                        (app_id, batch_id, self.options.table, staged, moved),
                    )
                    self._delete_staging(conn, app_id, batch_id)
                    crash_point(CRASH_INSIDE_TRANSACTION, batch_id)
        except psycopg.errors.UniqueViolation as err:
            if err.diag.table_name != _table_name("ledger_table", self.options.ledger_table)[-1]:
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
        log.info(
            "PostgreSQL sink: committed batch %d of app %s: %d staged rows, %d target rows in %s",
            batch_id,
            app_id,
            staged,
            moved,
            self.options.table,
        )
        return BatchOutcome(app_id, batch_id, "committed", staged, moved)

    def _move_statement(self, target: Any, staging: Any) -> Any:
        from psycopg import sql

        names = [c.name for c in self._columns]
        cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        where = sql.SQL("{} = %s AND {} = %s").format(sql.Identifier(APP_COLUMN), sql.Identifier(BATCH_COLUMN))
        if not self.options.keys:
            return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {}").format(target, cols, cols, staging, where)
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.options.keys)
        others = [n for n in names if n not in self.options.keys]
        action: sql.Composable = sql.SQL("DO NOTHING")
        if others:
            assignments = sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(n), sql.Identifier(n)) for n in others
            )
            action = sql.SQL("DO UPDATE SET {}").format(assignments)
        # The last row of the batch for a key wins: partitions and rows in the batch's order.
        return sql.SQL(
            "INSERT INTO {} ({}) SELECT DISTINCT ON ({}) {} FROM {} WHERE {} ORDER BY {}, {} DESC, {} DESC "
            "ON CONFLICT ({}) {}"
        ).format(
            target,
            cols,
            keys,
            cols,
            staging,
            where,
            keys,
            sql.Identifier(PART_COLUMN),
            sql.Identifier(ROW_COLUMN),
            keys,
            action,
        )

    # -- driver: executors load the staging table ----------------------------------------------------------------

    def _load_staging(self, batch_df: DataFrame, app_id: str, batch_id: int) -> int:
        names = tuple(c.name for c in self._columns)
        loader = StagingLoader(
            dsn=self.options.dsn,
            staging=_table_name("staging_table", self.options.staging_name),
            columns=names,
            app_id=app_id,
            batch_id=batch_id,
            connect_timeout=self.options.connect_timeout,
        )
        try:
            counts = batch_df.mapInArrow(loader, "part int, rows long").collect()
        except Exception as err:
            raise SinkError(
                f"loading batch {batch_id} of app {app_id} into the staging table {self.options.staging_name} at "
                f"{self.options.address} failed: {_first_line(err)}"
            ) from err
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

    # -- driver: tables --------------------------------------------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.options.dsn, autocommit=True, connect_timeout=self.options.connect_timeout)
        except psycopg.OperationalError as err:
            raise SinkError(f"PostgreSQL at {self.options.address} is unreachable: {_first_line(err)}") from err

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
            existing = _table_columns(conn, self.options.table)
            if not existing:
                if not self.options.create_table:
                    raise SinkError(
                        f"target table {self.options.table} does not exist at {self.options.address} "
                        "(createTable is off)"
                    )
                self._create_target(conn, schema)
                existing = _table_columns(conn, self.options.table)
            missing = [n for n in names if n not in existing]
            if missing:
                raise SinkError(
                    f"target table {self.options.table} has no column(s) {missing} for the batch "
                    f"(its columns: {list(existing)})"
                )
            self._columns = tuple(_Column(n, existing[n]) for n in names)
            missing_keys = [k for k in self.options.keys if k not in names]
            if missing_keys:
                raise OptionError("keys", self.options.keys, f"{missing_keys} are not columns of the batch")
            if self.options.keys:
                _check_unique_index(conn, self.options.table, self.options.keys)
            self._ensure_staging(conn)
        self._prepared_for = names

    def _ensure_ledger(self, conn: Any) -> None:
        from psycopg import sql

        ledger = sql.Identifier(*_table_name("ledger_table", self.options.ledger_table))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (app_id text NOT NULL, batch_id bigint NOT NULL, "
                "target_table text NOT NULL, staged_rows bigint NOT NULL, target_rows bigint NOT NULL, "
                "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (app_id, batch_id))"
            ).format(ledger)
        )

    def _create_target(self, conn: Any, schema: StructType) -> None:
        from psycopg import sql

        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.name, f.dataType)))
            for f in schema.fields
        ]
        if self.options.keys:
            columns.append(
                sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in self.options.keys))
            )
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                sql.Identifier(*_table_name("table", self.options.table)), sql.SQL(", ").join(columns)
            )
        )
        log.info("PostgreSQL sink: created target table %s at %s", self.options.table, self.options.address)

    def _ensure_staging(self, conn: Any) -> None:
        from psycopg import sql

        wanted = {c.name: c.pg_type for c in self._columns}
        wanted.update({APP_COLUMN: "text", BATCH_COLUMN: "bigint", PART_COLUMN: "integer", ROW_COLUMN: "bigint"})
        existing = _table_columns(conn, self.options.staging_name)
        if existing:
            if existing != wanted:
                raise SinkError(
                    f"staging table {self.options.staging_name} has columns {existing}, the batch needs {wanted}: "
                    "drop it (it only holds rows of unfinished batches) and re-run"
                )
            return
        staging = _table_name("staging_table", self.options.staging_name)
        columns = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in wanted.items())
        # No index: the table only holds rows of unfinished batches, and maintaining one doubles the load time.
        conn.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})").format(sql.Identifier(*staging), columns))

    def _in_ledger(self, conn: Any, app_id: str, batch_id: int) -> bool:
        from psycopg import sql

        ledger = sql.Identifier(*_table_name("ledger_table", self.options.ledger_table))
        row = conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE app_id = %s AND batch_id = %s").format(ledger), (app_id, batch_id)
        ).fetchone()
        return row is not None

    def _delete_staging(self, conn: Any, app_id: str, batch_id: int) -> int:
        from psycopg import sql

        staging = sql.Identifier(*_table_name("staging_table", self.options.staging_name))
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(
                staging, sql.Identifier(APP_COLUMN), sql.Identifier(BATCH_COLUMN)
            ),
            (app_id, batch_id),
        ).rowcount
        return int(deleted)


# -- helpers --------------------------------------------------------------------------------------------------------


def _table_columns(conn: Any, table: str) -> dict[str, str]:
    """Column name -> SQL type of ``table`` (empty when it does not exist)."""
    row = conn.execute("SELECT to_regclass(%s)::oid", (_qualified(table),)).fetchone()
    if row is None or row[0] is None:
        return {}
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (row[0],),
    ).fetchall()
    return {str(name): str(pg_type) for name, pg_type in rows}


def _check_unique_index(conn: Any, table: str, keys: tuple[str, ...]) -> None:
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
        (_qualified(table),),
    ).fetchall()
    if not any(sorted(r[0]) == sorted(keys) for r in rows):
        raise OptionError(
            "keys",
            ",".join(keys),
            f"the target table {table} has no unique index on exactly these columns (needed for the upsert)",
        )


def _qualified(table: str) -> str:
    return ".".join(f'"{part}"' for part in table.split("."))


def _pg_type(name: str, data_type: DataType) -> str:
    from pyspark.sql import types as t

    simple: dict[type[Any], str] = {
        t.LongType: "bigint",
        t.IntegerType: "integer",
        t.ShortType: "smallint",
        t.ByteType: "smallint",
        t.DoubleType: "double precision",
        t.FloatType: "real",
        t.StringType: "text",
        t.BooleanType: "boolean",
        t.TimestampType: "timestamptz",
        t.TimestampNTZType: "timestamp",
        t.DateType: "date",
    }
    for spark_type, pg in simple.items():
        if isinstance(data_type, spark_type):
            return pg
    if isinstance(data_type, t.DecimalType):
        return f"numeric({data_type.precision}, {data_type.scale})"
    raise SinkError(
        f"column {name!r} has type {data_type.simpleString()}, which the PostgreSQL sink cannot create; "
        "create the target table yourself or cast the column"
    )


_PYTHON_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Violation)\b: .+")


def _first_line(err: BaseException) -> str:
    """The message of ``err`` in one line; for a Python worker error wrapped by Spark, the worker's own error."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    worker = [line for line in text.splitlines() if _PYTHON_ERROR_LINE.match(line.strip())]
    return worker[-1].strip() if worker else text.splitlines()[0]


def _redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (for messages)."""
    dsn = re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


__all__ = [
    "CRASH_AFTER_STAGING",
    "CRASH_INSIDE_TRANSACTION",
    "BatchOutcome",
    "PostgresSink",
    "PostgresSinkOptions",
    "StagingLoader",
]
