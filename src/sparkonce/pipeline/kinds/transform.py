"""The transform kind: Delta stream of its input (or the Kafka source) -> ``foreachBatch``: the stage's
transformation (Python or SQL), each output table written once per batch with txn app id
``f"{query id}:{table name}"`` and txn version = the batch id. Runs on the driver; the transformation and the
files' writes run on executors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.checkpoint.query import read_query_id
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.kinds.base import Kind
from sparkonce.pipeline.model import PipelineConfig, Stage, TransformStage
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.streams import input_schema, stage_source, start_foreach_batch
from sparkonce.pipeline.transforms import BoundTransform, check_transform
from sparkonce.sinks.fanout import FanOutResult, FanOutTarget, FanOutWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType


def plan_transform(
    spark: SparkSession, config: PipelineConfig, stage: TransformStage
) -> tuple[BoundTransform, StructType]:
    """Resolve the stage's transformation and analyse it (and each table's ``where``) on an empty input frame.

    Raises:
        PipelineConfigError: module not found, not callable, wrong signature, or the SQL / plan / ``where`` does
            not analyse against the input's schema; the message names the stage key.
    """
    bound = stage.transform.resolve()
    schema = check_transform(bound, spark, input_schema(spark, config, stage))
    empty = spark.createDataFrame([], schema)
    for index, output in enumerate(stage.outputs):
        if output.where is None:
            continue
        try:
            empty.where(output.where).schema  # noqa: B018 - analysis only
        except Exception as err:
            raise PipelineConfigError(
                f"stages.{stage.name}.tables[{index}].where: {output.where!r} does not apply to the stage's output "
                f"({schema.simpleString()[:300]}): {str(err).strip().splitlines()[0] if str(err).strip() else err}"
            ) from err
    return bound, schema


def transform_writer(stage: TransformStage, app_id: str) -> FanOutWriter:
    """The fan-out of a transform stage: one target per output table, each with its own txn."""
    options = {"mergeSchema": "true"} if stage.merge_schema else {}
    targets = [
        FanOutTarget(
            output.path,
            name=output.name,
            select=_where(output.where) if output.where is not None else None,
            options=options,
        )
        for output in stage.outputs
    ]
    return FanOutWriter(targets, app_id=app_id)


def _where(condition: str) -> Callable[[DataFrame], DataFrame]:
    def select(frame: DataFrame) -> DataFrame:
        return frame.where(condition)

    return select


def write_transform_batch(
    batch: DataFrame, batch_id: int, stage: TransformStage, bound: BoundTransform, *, app_id: str
) -> FanOutResult:
    """Apply the stage's transformation to one input batch and write each output table exactly once.

    Txn app id ``f"{app_id}:{table name}"`` (app id: the stage's query id), txn version ``batch_id``.
    """
    return transform_writer(stage, app_id).write_batch(bound.apply(batch, batch_id), batch_id)


class TransformKind(Kind[TransformStage]):
    """Input batches through a user transformation into one or more Delta tables. Runs on the driver."""

    name = "transform"
    stage_class = TransformStage

    def parse(
        self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]
    ) -> TransformStage:
        key = f"stages.{name}"
        reader.known(
            data,
            key,
            {
                "input",
                "table",
                "table_name",
                "tables",
                "checkpoint",
                "trigger",
                "transform",
                "sql",
                "merge_schema",
                "max_files_per_trigger",
            },
        )
        if ("transform" in data) == ("sql" in data):
            raise reader.fail(key, 'give exactly one of transform = "module:function" and sql = "SELECT ... {input}"')
        transform = reader.optional_transform(data, key)
        assert transform is not None
        return TransformStage(
            name=name,
            input=reader.input(data, key, None),
            checkpoint=reader.path(data, "checkpoint", key),
            trigger=reader.trigger(data, key),
            outputs=reader.outputs(data, key),
            transform=transform,
            merge_schema=reader.boolean(data, "merge_schema", key, default=False),
            max_files_per_trigger=reader.integer(data, "max_files_per_trigger", key),
        )

    def places(self, stage: TransformStage) -> list[tuple[str, str]]:
        first = [(f"stages.{stage.name}.table", stage.table)]
        return first + [(f"stages.{stage.name}.tables[{i}]", t) for i, t in enumerate(stage.tables[1:], 1)]

    def output_schemas(
        self, spark: SparkSession, config: PipelineConfig, stage: TransformStage, *, downstream: bool = False
    ) -> dict[str, StructType]:
        _, schema = plan_transform(spark, config, stage)
        return dict.fromkeys(stage.tables, schema)

    def check(self, spark: SparkSession, config: PipelineConfig, stage: TransformStage) -> None:
        plan_transform(spark, config, stage)

    def start(
        self, spark: SparkSession, config: PipelineConfig, stage: TransformStage, options: dict[str, str]
    ) -> StreamingQuery:
        bound, _ = plan_transform(spark, config, stage)
        source = stage_source(spark, config, stage, options)
        app_ids: list[str] = []

        def process(batch: DataFrame, batch_id: int) -> None:
            if not app_ids:
                app_ids.append(read_query_id(stage.checkpoint))
            write_transform_batch(batch, batch_id, stage, bound, app_id=app_ids[0])

        return start_foreach_batch(source, process, config, stage)

    def txn_records(self, stage: TransformStage, query_id: str) -> list[tuple[str, str]]:
        return [(o.path, f"{query_id}:{o.name}") for o in stage.outputs]

    def replayable(self, stage: TransformStage) -> bool:
        return True

    def replay_outputs(
        self, spark: SparkSession, config: PipelineConfig, stage: TransformStage, source: DataFrame
    ) -> list[tuple[str, DataFrame]]:
        # The whole input, as of the table version, is one batch (batch_id 0 for (df, batch_id) functions).
        bound, _ = plan_transform(spark, config, stage)
        frame = bound.apply(source, 0)
        return [(o.path, frame.where(o.where) if o.where is not None else frame) for o in stage.outputs]


__all__ = ["TransformKind", "plan_transform", "transform_writer", "write_transform_batch"]
