"""Executor side of the PostgreSQL sink: each task COPYs its partition of the batch into the staging table."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sparkonce.sinks.postgres.sql import APP_COLUMN, BATCH_COLUMN, PART_COLUMN, TAG_COLUMNS


@dataclass(frozen=True)
class StagingLoader:
    """Loads one partition of a batch into the staging table. Runs on executors (built on the driver).

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
        from psycopg import sql
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        staging = sql.Identifier(*self.staging)
        copy_columns = sql.SQL(", ").join(sql.Identifier(c) for c in (*self.columns, *TAG_COLUMNS))
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
                rows = copy_csv(
                    copy, batches, lambda batch, first: _tag(batch, self.app_id, self.batch_id, part, first)
                )
        yield pa.RecordBatch.from_arrays([pa.array([part], pa.int32()), pa.array([rows], pa.int64())], ["part", "rows"])


def copy_csv(
    copy: Any,
    batches: Iterable[pa.RecordBatch],
    prepare: Callable[[pa.RecordBatch, int], pa.RecordBatch] | None = None,
) -> int:
    """Write ``batches`` into a psycopg ``COPY ... FROM STDIN (FORMAT csv)`` as CSV; returns the rows.
    Runs on executors.

    ``prepare(batch, rows_before)`` turns each non-empty batch into what is sent (e.g. the staging tags).
    """
    import pyarrow.csv as pacsv

    options = pacsv.WriteOptions(include_header=False)
    rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        buffer = io.BytesIO()
        pacsv.write_csv(prepare(batch, rows) if prepare is not None else batch, buffer, options)
        copy.write(buffer.getbuffer())
        rows += batch.num_rows
    return rows


def _tag(batch: pa.RecordBatch, app_id: str, batch_id: int, part: int, first_row: int) -> pa.RecordBatch:
    n = batch.num_rows
    arrays = [
        *batch.columns,
        pa.repeat(pa.scalar(app_id, pa.string()), n),
        pa.repeat(pa.scalar(batch_id, pa.int64()), n),
        pa.repeat(pa.scalar(part, pa.int32()), n),
        pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, *TAG_COLUMNS])


__all__ = ["StagingLoader", "copy_csv"]
