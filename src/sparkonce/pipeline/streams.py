"""What every stage kind's streaming query is built from: the Kafka source in the raw table's shape, the Delta
stream of an input table, a ``foreachBatch`` query on the stage's checkpoint, the schema of a stage's input, and
its tables created empty before any query starts. Runs on the driver.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from sparkonce.checkpoint.tables import RecordedTable, record_tables
from sparkonce.delta.log.log_entry import commit_metadata
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.table.schema import arrow_schema_for_spark, spark_schema, table_arrow_schema
from sparkonce.delta.txn.commit import commit_files, load_table, table_exists
from sparkonce.errors import TableNotFoundError
from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.kinds.base import kind_of
from sparkonce.pipeline.model import SOURCE, PipelineConfig, PostgresStage, Stage, TransformStage
from sparkonce.storage import table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

RAW_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP, "
    "arrival_time TIMESTAMP"
)
"""The raw table's columns: the shape of the Kafka records every stage reading the source sees."""


def query_name(config: PipelineConfig, stage: Stage) -> str:
    """The stage's streaming query name, ``f"{pipeline}.{stage}"``."""
    return f"{config.name}.{stage.name}"


def source_options(config: PipelineConfig, stage_name: str | None = None) -> dict[str, str]:
    """The Kafka source's options; a stage's batches commit their end offsets to its consumer group
    (:meth:`PipelineConfig.consumer_group`, for lag tools)."""
    options = config.source.spark_options()
    if stage_name is not None:
        options["kafka.group.id"] = config.consumer_group(stage_name)
    return options


def raw_frame(spark: SparkSession, config: PipelineConfig, stage_name: str | None = None) -> DataFrame:
    """The Kafka stream in the raw table's shape (options: :func:`source_options`)."""
    import pyspark.sql.functions as F

    options = source_options(config, stage_name)
    stream = spark.readStream.format("sparkonce.kafka").options(**options).load()
    return stream.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.current_timestamp().alias("arrival_time"),
    )


def input_schema(spark: SparkSession, config: PipelineConfig, stage: Stage) -> StructType:
    """The schema of the batches a stage reads: the Kafka records in the raw shape, or its input table's."""
    if stage.input == SOURCE:
        return ddl_schema(spark, RAW_DDL)
    upstream = config.stage(stage.input)
    table = upstream.tables[0]
    if table_exists(table):
        return spark_schema(table_arrow_schema(existing_table(table)))
    return kind_of(upstream).output_schemas(spark, config, upstream, downstream=True)[table]


def stage_source(
    spark: SparkSession, config: PipelineConfig, stage: TransformStage | PostgresStage, options: dict[str, str]
) -> DataFrame:
    """The stream a user stage reads: the Kafka records (raw shape), or its input's Delta table."""
    if stage.input == SOURCE:
        return raw_frame(spark, config, stage.name)
    options["skipChangeCommits"] = "true"  # a replayed (overwritten) input does not stop the stage
    if stage.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
    return spark.readStream.format("delta").options(**options).load(config.input_table(stage))


def start_foreach_batch(
    source: DataFrame, process: Callable[[DataFrame, int], None], config: PipelineConfig, stage: Stage
) -> StreamingQuery:
    """Start a stage whose batches are written by ``process`` (bronze, gold) on the stage's own checkpoint.

    The stage's Delta tables are recorded in its checkpoint as the query's sinks (``doctor`` examines them without
    ``--table``); its sources are recorded by ``start()`` itself.
    """
    record_tables(stage.checkpoint, [RecordedTable("sink", "delta", table_location(t).uri) for t in stage.tables])
    return (
        source.writeStream.foreachBatch(process)
        .queryName(query_name(config, stage))
        .option("checkpointLocation", stage.checkpoint)
        .trigger(**stage.trigger.spark_kwargs())
        .start()
    )


def ensure_table(path: str, schema: StructType, *, partition_by: Sequence[str] = ()) -> None:
    """Create an empty Delta table at ``path`` unless one is there: a ``CREATE TABLE`` commit of table version 0
    through sparkonce's commit engine (a writer that created the table first wins; this call then does nothing).

    Raises:
        TableNotFoundError: ``path`` holds files but no Delta log.
    """
    location = table_location(path)
    if table_exists(location):
        return
    if not location.is_local:
        location.check_commit_safety()
        location.check_reachable(for_write=True)  # refuses a prefix holding something else
    elif os.path.isfile(path) or (os.path.isdir(path) and os.listdir(path)):
        raise TableNotFoundError(
            f"{path} holds something that is not a Delta table (no _delta_log): refusing to write into it"
        )
    parameters = {"isManaged": "false", "partitionBy": list(partition_by), "properties": {}}
    done = commit_files(
        location,
        [],
        data_schema=arrow_schema_for_spark(schema),
        partition_by=tuple(partition_by),
        custom_metadata=commit_metadata("CREATE TABLE", parameters, None, operationMetrics={}),
        create_only=True,
    )
    if not done.skipped:
        log.info("created the empty Delta table %s", path)


def table_rows(table: str) -> int:
    """Rows of a Delta table, from the ``numRecords`` stats of its active files."""
    import pyarrow.compute as pc

    actions = pa.table(load_table(table).get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


__all__ = [
    "RAW_DDL",
    "ensure_table",
    "input_schema",
    "query_name",
    "raw_frame",
    "source_options",
    "stage_source",
    "start_foreach_batch",
    "table_rows",
]
