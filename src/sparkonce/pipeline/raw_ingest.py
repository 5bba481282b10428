"""The raw stage's ingest: Kafka records written into the raw table's Parquet files by the tasks that read them.

The raw stage copies every Kafka record into the raw Delta table unchanged (key and value as strings, its topic,
partition, offset and timestamp, and when the pipeline took it). Through Spark's Kafka-like source and the Delta
sink each record would cross between Python and the JVM twice: the Python reader hands Arrow batches to the JVM,
the JVM hands them to the Python writer. :class:`RawFilesDataSource` (``sparkonce.pipeline.raw_files``) is the
Kafka source with its planning unchanged (offsets, ``maxOffsetsPerTrigger``, data-loss checks, consumer group
commits: :class:`sparkonce.kafka.source.KafkaStreamReader`) whose tasks write the records they read straight into
the raw table's files (:class:`sparkonce.delta.write.files.TableFileWriter`); a task returns one row per file it
wrote (its ``add`` action's fields), never a record. The stage's ``foreachBatch`` then commits the batch's files
with ``txn(query id, batch id)`` (:func:`commit_raw_batch`), the commit the Delta sink makes.

Exactly once, as with the sink: the batch's offsets are in the checkpoint before its tasks run; a batch re-run after
a crash reads the same offsets and writes new files, and its commit finds the txn in the table and is skipped (the
new files are deleted). Files of a task attempt that failed or lost to another attempt are never named by a commit:
the driver commits only the files the batch's result rows name. The records never pass through the driver.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from sparkonce.delta.write.files import WRITTEN_FILES_DDL, FileWriterOptions, write_task, written_files
from sparkonce.errors import OptionError
from sparkonce.kafka.reader import current_batch_id, kafka_schema
from sparkonce.kafka.source import KafkaDataSource, KafkaInputPartition, KafkaStreamReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from sparkonce.delta.txn.commit import CommitResult
    from sparkonce.kafka.options import KafkaOptions
    from sparkonce.pipeline.model import RawStage

log = logging.getLogger(__name__)

RAW_FILES_SOURCE = "sparkonce.pipeline.raw_files"
TABLE_OPTION = "rawTable"
"""The option naming the raw table (a path or URI) the tasks write into."""


class RawFilesPartition(KafkaInputPartition):
    """One task's offset range, how to write its files and the batch's arrival time. Built on the driver."""

    def __init__(self, planned: KafkaInputPartition, file_options: FileWriterOptions, arrival_us: int) -> None:
        super().__init__(planned.range, open_end=planned.open_end)
        self.file_options = file_options
        self.arrival_us = arrival_us


class RawFilesDataSource(KafkaDataSource):
    """``sparkonce.pipeline.raw_files``: the ``sparkonce.kafka`` options plus ``rawTable``; streaming only. Created
    on the driver at ``load()``; its rows are the files its tasks wrote
    (:data:`sparkonce.delta.write.files.WRITTEN_FILES_DDL`)."""

    def __init__(self, options: dict[str, str]) -> None:
        given = {k: v for k, v in options.items() if k.lower() != TABLE_OPTION.lower()}
        table = next((v for k, v in options.items() if k.lower() == TABLE_OPTION.lower()), None)
        if not table:
            raise OptionError(TABLE_OPTION, table, "is required: the raw Delta table the tasks write into")
        super().__init__(given)
        self.table = table

    @classmethod
    def name(cls) -> str:
        return RAW_FILES_SOURCE

    def schema(self) -> str:
        return WRITTEN_FILES_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        raise OptionError("format", RAW_FILES_SOURCE, "is a streaming source (the pipeline's raw stage)")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self.kafka_options.check_mode("stream")
        return RawFilesStreamReader(self.kafka_options, self.table)


class RawFilesStreamReader(KafkaStreamReader):
    """The Kafka stream's planning, unchanged; each task writes its records into the raw table's files.
    ``partitions`` runs on the driver, ``read`` on executors."""

    def __init__(self, options: KafkaOptions, table: str) -> None:
        super().__init__(options, kafka_schema(include_headers=False))
        self.table = table

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The batch's ranges (the Kafka source's plan), each with the raw table's writer options and the batch's
        arrival time. Runs on the driver."""
        planned = super().partitions(start, end)
        if not planned:
            return planned
        file_options = raw_file_options(self.table)
        arrival_us = time.time_ns() // 1000
        return [RawFilesPartition(p, file_options, arrival_us) for p in planned if isinstance(p, KafkaInputPartition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range and write its records into the raw table's files; one row per file
        (:func:`sparkonce.delta.write.files.write_task`). Runs on executors."""
        from sparkonce.crash import crash_point

        assert isinstance(partition, RawFilesPartition)
        kafka_batches = super().read(partition)

        def records() -> Iterator[pa.RecordBatch]:
            for index, batch in enumerate(kafka_batches):
                if batch.num_rows:
                    yield raw_records(batch, partition.arrival_us)
                if index == 0:
                    crash_point("mid_write", current_batch_id())

        return write_task(records(), partition.file_options)


def raw_records(batch: pa.RecordBatch, arrival_us: int) -> pa.RecordBatch:
    """A batch of the Kafka source's schema in the raw table's shape (:data:`sparkonce.pipeline.streams.RAW_DDL`):
    key and value as strings (their bytes as they are, as Spark's cast keeps them), the record's timestamp, the
    batch's arrival time. Runs on executors."""
    timestamp = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [
            batch.column("key").view(pa.string()),
            batch.column("value").view(pa.string()),
            batch.column("topic").cast(pa.string()),
            batch.column("partition").cast(pa.int32()),
            batch.column("offset").cast(pa.int64()),
            batch.column("timestamp").cast(timestamp),
            pa.array([arrival_us] * batch.num_rows, pa.int64()).cast(timestamp),
        ],
        names=["key", "value", "topic", "partition", "offset", "kafka_timestamp", "arrival_time"],
    )


def raw_file_options(table: str) -> FileWriterOptions:
    """How tasks write the raw table's files: its partition columns and statistics columns, and the table version
    read before any file is written. Runs on the driver."""
    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.delta.table.schema import table_fields
    from sparkonce.delta.table.skipping import top_level_stats_columns
    from sparkonce.storage import table_location

    location = table_location(table)
    snapshot = existing_table(location)
    partition_by = tuple(snapshot.metadata().partition_columns)
    configuration = {k: str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    return FileWriterOptions(
        location=location,
        partition_by=partition_by,
        stats_columns=frozenset(top_level_stats_columns(table_fields(snapshot), partition_by, configuration)),
        written_after=int(snapshot.version()),
    )


def commit_raw_batch(
    batch: DataFrame, batch_id: int, stage: RawStage, *, app_id: str, data_schema: StructType
) -> CommitResult:
    """Run the batch's tasks (they write its files) and commit the files to the raw table exactly once: one Delta
    commit with ``txn(app_id, batch_id)``, ``STREAMING UPDATE`` and the batch's ``offsets/N``, as the Delta sink's.
    Runs on the driver.

    A batch whose txn is in the table already (a re-run after a crash) commits nothing and its new files are
    deleted (:func:`sparkonce.delta.txn.commit.commit_files`).
    """
    from sparkonce._types import BatchId
    from sparkonce.crash import crash_point
    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.delta.sink import streaming_update_metadata
    from sparkonce.delta.table.schema import arrow_schema_for_spark
    from sparkonce.delta.txn.commit import BatchTxn, commit_files
    from sparkonce.storage import table_location

    location = table_location(stage.table)
    snapshot = existing_table(location)
    written_after = int(snapshot.version())  # read before the tasks run: a commit naming their files is later
    files = written_files(batch.collect())
    metadata = streaming_update_metadata(
        stage.checkpoint, app_id, BatchId(batch_id), output_mode="Append", user_metadata=None
    )
    result = commit_files(  # a batch already in the table commits nothing; its new files are deleted
        location,
        files,
        data_schema=arrow_schema_for_spark(data_schema),
        partition_by=tuple(snapshot.metadata().partition_columns),
        txn=BatchTxn(app_id, batch_id),
        custom_metadata=metadata,
        snapshot=snapshot,
        written_after=written_after,
    )
    if result.skipped:
        log.info("raw batch %s (app_id %s) was already in %s: skipped", batch_id, app_id, stage.table)
    crash_point("after_delta_commit", batch_id)
    return result


__all__ = [
    "RAW_FILES_SOURCE",
    "TABLE_OPTION",
    "RawFilesDataSource",
    "RawFilesPartition",
    "RawFilesStreamReader",
    "commit_raw_batch",
    "raw_file_options",
    "raw_records",
]
