"""The raw kind: Kafka -> the raw Delta table, every record kept. Each batch's Delta commit carries
``txn(query id, batch id)``, so a batch re-run after a crash is skipped. Runs on the driver.

The tasks that read a batch's records write them into the raw table's files (:mod:`sparkonce.pipeline.raw_ingest`:
the records never cross into the JVM) and ``foreachBatch`` commits the files; with
``spark.sparkonce.pipeline.rawIngest=false``, and for a raw table on an object store, the stage is the Kafka
source into the Delta streaming sink (``mergeSchema`` on), the same commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.kinds.base import Kind
from sparkonce.pipeline.model import SOURCE, PipelineConfig, RawStage, Stage
from sparkonce.pipeline.raw_ingest import RAW_FILES_SOURCE, TABLE_OPTION, commit_raw_batch
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.streams import RAW_DDL, query_name, raw_frame, source_options, start_foreach_batch
from sparkonce.storage import table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType


class RawKind(Kind[RawStage]):
    """Kafka -> Delta, every record kept. Runs on the driver."""

    name = "raw"
    stage_class = RawStage

    def parse(self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> RawStage:
        key = f"stages.{name}"
        reader.known(data, key, {"table", "table_name", "checkpoint", "trigger", "input"})
        if data.get("input", SOURCE) != SOURCE:
            raise reader.fail(f"{key}.input", "a raw stage reads the Kafka source: input = 'source'")
        return RawStage(
            reader.path(data, "table", key), reader.path(data, "checkpoint", key), reader.trigger(data, key), name=name
        )

    def output_schemas(
        self, spark: SparkSession, config: PipelineConfig, stage: RawStage, *, downstream: bool = False
    ) -> dict[str, StructType]:
        return {stage.table: ddl_schema(spark, RAW_DDL)}

    def start(
        self, spark: SparkSession, config: PipelineConfig, stage: RawStage, options: dict[str, str]
    ) -> StreamingQuery:
        if raw_ingest_enabled(spark) and table_location(stage.table).is_local:
            return self._start_ingest(spark, config, stage)
        return (
            raw_frame(spark, config, stage.name)
            .writeStream.format("delta")
            .queryName(query_name(config, stage))
            .option("checkpointLocation", stage.checkpoint)
            .option("mergeSchema", "true")
            .trigger(**stage.trigger.spark_kwargs())
            .start(stage.table)
        )

    def txn_records(self, stage: RawStage, query_id: str) -> list[tuple[str, str]]:
        return [(stage.table, query_id)]

    def _start_ingest(self, spark: SparkSession, config: PipelineConfig, stage: RawStage) -> StreamingQuery:
        """The tasks write the records into the raw table's files; ``foreachBatch`` commits them."""
        import pyspark.sql.functions as F

        from sparkonce.checkpoint.query import read_query_id

        options = source_options(config, stage.name)
        options[TABLE_OPTION] = stage.table
        files = spark.readStream.format(RAW_FILES_SOURCE).options(**options).load()
        # The records each batch wrote, in the query's progress (``observedMetrics.raw.rows``): its rows are files.
        files = files.observe("raw", F.coalesce(F.sum("num_records"), F.lit(0)).alias("rows"))
        schema = ddl_schema(spark, RAW_DDL)
        app_ids: list[str] = []

        def process(batch: DataFrame, batch_id: int) -> None:
            if not app_ids:  # the query id, read from the checkpoint once
                app_ids.append(read_query_id(stage.checkpoint))
            commit_raw_batch(batch, batch_id, stage, app_id=app_ids[0], data_schema=schema)

        return start_foreach_batch(files, process, config, stage)


RAW_INGEST_CONF = "spark.sparkonce.pipeline.rawIngest"
"""``false``: the raw stage is the Kafka source into the Delta streaming sink (default ``true``: the tasks that
read the records write the raw table's files, :mod:`sparkonce.pipeline.raw_ingest`)."""


def raw_ingest_enabled(spark: SparkSession) -> bool:
    """True unless :data:`RAW_INGEST_CONF` is ``false``."""
    return str(spark.conf.get(RAW_INGEST_CONF, "true")).strip().lower() != "false"


__all__ = ["RAW_INGEST_CONF", "RawKind", "raw_ingest_enabled"]
