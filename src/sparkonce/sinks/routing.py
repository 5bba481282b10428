"""Executor side of a one-pass fan-out: each task splits its rows by a route column and writes every table's files.

:meth:`sparkonce.sinks.fanout.FanOutWriter.stage_routed` runs :class:`RoutedFileWriter` through ``mapInArrow``:
one Spark job reads the batch once, and each task writes the Parquet files of every pending table. Nothing written
here is visible: the driver's Delta commit per table (with that table's txn) adds the files. The task returns one
small row per file written (the ``add`` action's fields as JSON) and one per observed value, never data rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass

import pyarrow as pa

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.write.files import FileWriterOptions

RESULT_DDL = "kind STRING, target STRING, payload STRING"
"""Rows a task returns: ``("file", table name, WrittenFile JSON)`` or ``("observed", column, value)``."""


@dataclass(frozen=True)
class RoutedTable:
    """One table of a one-pass fan-out, as a task needs it (pickled to executors)."""

    name: str
    """The value of the route column that sends a row to this table."""
    file_options: FileWriterOptions
    columns: tuple[tuple[str, str | pa.Scalar], ...]
    """(table column, batch column) pairs, in the table's column order; a scalar in place of the batch column
    fills every row with it (a :class:`~sparkonce.sinks.fanout.BatchValue`)."""
    arrow_schema: pa.Schema
    """The schema of the files (table columns, partition columns included)."""


@dataclass(frozen=True)
class RoutedFileWriter:
    """Writes one task's rows into the files of each routed table. Runs on executors (built on the driver).

    The ``mapInArrow`` function: called once per task with the task's Arrow batches.
    """

    tables: tuple[RoutedTable, ...]
    route: str
    observe: tuple[str, ...]
    """Array-of-string columns whose distinct values the task reports (e.g. JSON keys no schema declares)."""
    batch_id: int | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from sparkonce.crash import crash_point
        from sparkonce.delta.write.files import TableFileWriter

        task_id = _task_id()
        observed: dict[str, set[str]] = {c: set() for c in self.observe}
        with ExitStack() as stack:  # every writer aborts (deletes what it wrote) when the task fails
            writers = {
                t.name: stack.enter_context(TableFileWriter(t.file_options, task_id=task_id)) for t in self.tables
            }
            for index, batch in enumerate(batches):
                if batch.num_rows == 0:
                    continue
                route = batch.column(self.route)
                for table in self.tables:
                    rows = batch.filter(pc.equal(route, pa.scalar(table.name, route.type)))
                    if rows.num_rows:
                        projected = pa.Table.from_arrays(
                            [
                                rows.column(source) if isinstance(source, str) else pa.repeat(source, rows.num_rows)
                                for _, source in table.columns
                            ],
                            names=[target for target, _ in table.columns],
                        )
                        writers[table.name].write(projected.cast(table.arrow_schema))
                for column in self.observe:
                    values = pc.unique(pc.list_flatten(batch.column(column))).drop_null()
                    observed[column].update(str(v) for v in values.to_pylist())
                if index == 0:
                    crash_point("mid_write", self.batch_id)
            written = {name: writer.close() for name, writer in writers.items()}
        kinds: list[str] = []
        targets: list[str] = []
        payloads: list[str] = []
        for name, files in written.items():
            for file in files:
                kinds.append("file")
                targets.append(name)
                payloads.append(json.dumps(asdict(file), separators=(",", ":")))
        for column, values in observed.items():
            for value in sorted(values):
                kinds.append("observed")
                targets.append(column)
                payloads.append(value)
        yield pa.RecordBatch.from_arrays(
            [pa.array(kinds, pa.string()), pa.array(targets, pa.string()), pa.array(payloads, pa.string())],
            names=["kind", "target", "payload"],
        )


def written_file(payload: str) -> WrittenFile:
    """The :class:`WrittenFile` a task reported as JSON. Runs on the driver."""
    return WrittenFile(**json.loads(payload))


def _task_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


__all__ = ["RESULT_DDL", "RoutedFileWriter", "RoutedTable", "written_file"]
