"""The PostgreSQL sink's SQL: the staging tag columns, the tables it creates and checks, the move statement.

Functions here run statements on a connection they are given, or build them; they never commit. Runs on the
driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkonce.errors import OptionError, SinkError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

APP_COLUMN = "_sparkonce_app_id"
BATCH_COLUMN = "_sparkonce_batch_id"
PART_COLUMN = "_sparkonce_part"
ROW_COLUMN = "_sparkonce_row"
TAG_COLUMNS = (APP_COLUMN, BATCH_COLUMN, PART_COLUMN, ROW_COLUMN)


@dataclass(frozen=True)
class Column:
    """A column of the batch and its type in the target table."""

    name: str
    pg_type: str


def ensure_ledger(conn: Any, ledger: tuple[str, ...], *, prepared_xacts: bool = False) -> None:
    """Create the ledger of committed batches when missing: primary key ``(app_id, batch_id)``.

    ``prepared_xacts`` (the two-phase protocol): make sure the ledger has the column naming a batch's prepared
    transactions (added to a ledger made before it existed).
    """
    from psycopg import sql

    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (app_id text NOT NULL, batch_id bigint NOT NULL, "
            "target_table text NOT NULL, staged_rows bigint NOT NULL, target_rows bigint NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), prepared_xacts text[], PRIMARY KEY (app_id, batch_id))"
        ).format(sql.Identifier(*ledger))
    )
    if prepared_xacts and "prepared_xacts" not in table_columns(conn, ".".join(ledger)):
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS prepared_xacts text[]").format(sql.Identifier(*ledger))
        )


def create_target(conn: Any, table: tuple[str, ...], schema: StructType, keys: tuple[str, ...]) -> None:
    """Create the target table from the batch's schema, with the upsert keys as primary key."""
    from psycopg import sql

    columns = [
        sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.name, f.dataType))) for f in schema.fields
    ]
    if keys:
        columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in keys)))
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(sql.Identifier(*table), sql.SQL(", ").join(columns))
    )


def ensure_staging(conn: Any, staging: tuple[str, ...], columns: tuple[Column, ...]) -> None:
    """Create the UNLOGGED staging table for ``columns`` plus the tag columns, or check the one there.

    Raises:
        SinkError: the staging table there has other columns.
    """
    from psycopg import sql

    wanted = {c.name: c.pg_type for c in columns}
    wanted.update({APP_COLUMN: "text", BATCH_COLUMN: "bigint", PART_COLUMN: "integer", ROW_COLUMN: "bigint"})
    name = ".".join(staging)
    existing = table_columns(conn, name)
    if existing:
        if existing != wanted:
            raise SinkError(
                f"staging table {name} has columns {existing}, the batch needs {wanted}: "
                "drop it (it only holds rows of unfinished batches) and re-run"
            )
        return
    definition = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in wanted.items())
    # No index: the table only holds rows of unfinished batches, and maintaining one doubles the load time.
    conn.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})").format(sql.Identifier(*staging), definition))


def in_ledger(conn: Any, ledger: tuple[str, ...], app_id: str, batch_id: int, *, lock: bool = False) -> bool:
    """Whether the ledger holds ``(app_id, batch_id)``; with ``lock``, lock that row (inside a transaction)."""
    from psycopg import sql

    statement = "SELECT 1 FROM {} WHERE app_id = %s AND batch_id = %s" + (" FOR UPDATE" if lock else "")
    row = conn.execute(sql.SQL(statement).format(sql.Identifier(*ledger)), (app_id, batch_id)).fetchone()
    return row is not None


def insert_ledger(
    conn: Any,
    ledger: tuple[str, ...],
    app_id: str,
    batch_id: int,
    table: str,
    staged: int,
    moved: int,
    prepared: tuple[str, ...] | None = None,
) -> None:
    """Insert the ledger row of a batch; ``prepared``: the ids of its prepared transactions (two-phase)."""
    from psycopg import sql

    if prepared is None:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (app_id, batch_id, target_table, staged_rows, target_rows) VALUES (%s, %s, %s, %s, %s)"
            ).format(sql.Identifier(*ledger)),
            (app_id, batch_id, table, staged, moved),
        )
        return
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (app_id, batch_id, target_table, staged_rows, target_rows, prepared_xacts) "
            "VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(sql.Identifier(*ledger)),
        (app_id, batch_id, table, staged, moved, list(prepared)),
    )


def ledger_rows(conn: Any, ledger: tuple[str, ...], app_id: str) -> list[tuple[int, int]]:
    """``(batch_id, target_rows)`` of every batch the ledger records for ``app_id`` (empty without a ledger)."""
    from psycopg import sql

    if not table_columns(conn, ".".join(ledger)):
        return []
    rows = conn.execute(
        sql.SQL("SELECT batch_id, target_rows FROM {} WHERE app_id = %s ORDER BY batch_id").format(
            sql.Identifier(*ledger)
        ),
        (app_id,),
    ).fetchall()
    return [(int(b), int(n)) for b, n in rows]


def count_rows(conn: Any, table: tuple[str, ...]) -> int:
    """Rows of ``table`` (0 when it does not exist)."""
    from psycopg import sql

    if not table_columns(conn, ".".join(table)):
        return 0
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(*table))).fetchone()
    return int(row[0])


def delete_staging(conn: Any, staging: tuple[str, ...], app_id: str, batch_id: int) -> int:
    """Delete the staging rows of ``(app_id, batch_id)``; returns how many."""
    from psycopg import sql

    deleted = conn.execute(
        sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(
            sql.Identifier(*staging), sql.Identifier(APP_COLUMN), sql.Identifier(BATCH_COLUMN)
        ),
        (app_id, batch_id),
    ).rowcount
    return int(deleted)


def move_statement(
    target: tuple[str, ...], staging: tuple[str, ...], columns: tuple[Column, ...], keys: tuple[str, ...]
) -> Any:
    """``INSERT ... SELECT`` of one batch's staging rows into the target (parameters: app id, batch id).

    With ``keys``, an upsert where the last row of the batch for a key wins (partitions and rows in the batch's
    order).
    """
    from psycopg import sql

    target_id, staging_id = sql.Identifier(*target), sql.Identifier(*staging)
    names = [c.name for c in columns]
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    where = sql.SQL("{} = %s AND {} = %s").format(sql.Identifier(APP_COLUMN), sql.Identifier(BATCH_COLUMN))
    if not keys:
        return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {}").format(
            target_id, cols, cols, staging_id, where
        )
    key_list = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    others = [n for n in names if n not in keys]
    action: sql.Composable = sql.SQL("DO NOTHING")
    if others:
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(n), sql.Identifier(n)) for n in others
        )
        action = sql.SQL("DO UPDATE SET {}").format(assignments)
    return sql.SQL(
        "INSERT INTO {} ({}) SELECT DISTINCT ON ({}) {} FROM {} WHERE {} ORDER BY {}, {} DESC, {} DESC "
        "ON CONFLICT ({}) {}"
    ).format(
        target_id,
        cols,
        key_list,
        cols,
        staging_id,
        where,
        key_list,
        sql.Identifier(PART_COLUMN),
        sql.Identifier(ROW_COLUMN),
        key_list,
        action,
    )


def max_prepared_transactions(conn: Any) -> int:
    """The server's ``max_prepared_transactions`` (0, the default, turns prepared transactions off)."""
    return int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])


def table_columns(conn: Any, table: str) -> dict[str, str]:
    """Column name -> SQL type of ``table`` (empty when it does not exist)."""
    row = conn.execute("SELECT to_regclass(%s)::oid", (qualified(table),)).fetchone()
    if row is None or row[0] is None:
        return {}
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (row[0],),
    ).fetchall()
    return {str(name): str(pg_type) for name, pg_type in rows}


def check_unique_index(conn: Any, table: str, keys: tuple[str, ...]) -> None:
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
        (qualified(table),),
    ).fetchall()
    if not any(sorted(r[0]) == sorted(keys) for r in rows):
        raise OptionError(
            "keys",
            ",".join(keys),
            f"the target table {table} has no unique index on exactly these columns (needed for the upsert)",
        )


def qualified(table: str) -> str:
    return ".".join(f'"{part}"' for part in table.split("."))


def pg_type(name: str, data_type: DataType) -> str:
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


__all__ = [
    "APP_COLUMN",
    "BATCH_COLUMN",
    "PART_COLUMN",
    "ROW_COLUMN",
    "TAG_COLUMNS",
    "Column",
    "check_unique_index",
    "count_rows",
    "create_target",
    "delete_staging",
    "ensure_ledger",
    "ensure_staging",
    "in_ledger",
    "insert_ledger",
    "ledger_rows",
    "max_prepared_transactions",
    "move_statement",
    "pg_type",
    "qualified",
    "table_columns",
]
