"""The raw kind: Kafka -> Delta streaming sink (``mergeSchema`` on). The sink's Delta commit carries
``txn(query id, batch id)``, so a batch re-run after a crash is skipped. Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.kinds.base import Kind
from sparkonce.pipeline.model import SOURCE, PipelineConfig, RawStage, Stage
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.streams import RAW_DDL, query_name, raw_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
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


__all__ = ["RawKind"]
