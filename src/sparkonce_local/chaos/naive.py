"""The naive sinks common guides warn about, kept here to show the chaos harness catches their duplicates.

Never use these: each one writes a batch and lets Spark write ``commits/N`` afterwards, with nothing that
recognises a batch written before a crash, so a crash in between writes the batch twice on restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkonce.crash import crash_point

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.types import DataType


@dataclass(frozen=True)
class NaiveDeltaAppend:
    """``foreachBatch`` appending to a Delta table without ``txnAppId``/``txnVersion``. Runs on the driver."""

    table: str

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.write.format("delta").mode("append").save(self.table)
        crash_point("after_delta_commit", batch_id)


@dataclass(frozen=True)
class NaivePostgresAppend:
    """``foreachBatch`` inserting each partition with psycopg in its own database transaction, no ledger: exactly
    as naive as ``batch.write.mode("append").jdbc(...)`` (one transaction per partition, nothing records which
    batch was written). Runs on the driver; the inserts run on executors."""

    dsn: str
    table: str

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        import psycopg

        columns = [(f.name, _pg_type(f.dataType)) for f in batch.schema.fields]
        with psycopg.connect(self.dsn) as conn:
            ddl = ", ".join(f'"{name}" {kind}' for name, kind in columns)
            conn.execute(f'CREATE TABLE IF NOT EXISTS "{self.table}" ({ddl})')
        batch.foreachPartition(_PartitionInsert(self.dsn, self.table, tuple(n for n, _ in columns)))
        crash_point("after_pg_commit", batch_id)


@dataclass(frozen=True)
class _PartitionInsert:
    """Inserts one partition's rows and commits. Runs on executors."""

    dsn: str
    table: str
    columns: tuple[str, ...]

    def __call__(self, rows: Iterator[Row]) -> None:
        import psycopg

        names = ", ".join(f'"{c}"' for c in self.columns)
        marks = ", ".join("%s" for _ in self.columns)
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cursor:
            cursor.executemany(
                f'INSERT INTO "{self.table}" ({names}) VALUES ({marks})',
                [tuple(row[c] for c in self.columns) for row in rows],
            )


def _pg_type(data_type: DataType) -> str:
    name = data_type.typeName()
    return {
        "integer": "integer",
        "long": "bigint",
        "short": "smallint",
        "double": "double precision",
        "float": "real",
        "boolean": "boolean",
        "timestamp": "timestamptz",
        "timestamp_ntz": "timestamp",
        "date": "date",
    }.get(name, "text")


def file_sink_crash_passthrough(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` identity for the file-sink baseline. Runs on executors.

    With one executor core, tasks run one after the other: when the task of partition 1 starts, partition 0's
    parquet file is complete in the sink's folder but not yet in ``_spark_metadata``. The ``mid_write`` crash
    point fires there: the window where a folder glob sees a file the file sink never committed.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.partitionId() >= 1:
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        crash_point("mid_write", int(batch_id) if batch_id is not None else None)
    yield from batches


__all__ = ["NaiveDeltaAppend", "NaivePostgresAppend", "file_sink_crash_passthrough"]
