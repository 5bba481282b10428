"""Each stage kind as a streaming query, and the per-batch logic they share with ``replay``. Runs on the driver.

* **raw**: ``sparkonce.kafka`` -> Delta streaming sink (``mergeSchema`` on). The sink's Delta commit carries
  ``txn(query id, batch id)``, so a batch re-run after a crash is skipped.
* **bronze**: Delta stream of raw -> ``foreachBatch``: parse the JSON value with the declared schema; rows that
  parse go to bronze, rows that fail go to quarantine with the reason. One Spark job per batch parses, classifies
  and writes both tables' files (a one-pass fan-out, :mod:`sparkonce.sinks.fanout`); each table then gets its own
  Delta commit with txn app id ``f"{bronze query id}:{bronze|quarantine}"`` and txn version = the batch id, so
  each is written exactly once even when a crash falls between the two.
* **merge** (the built-in gold): Delta stream of its input (``skipChangeCommits``: a replayed input does not stop
  it) -> ``foreachBatch`` :func:`sparkonce.delta.merge.merge_latest` with ``txn(merge query id, batch id)``.
* **transform**: Delta stream of its input -> ``foreachBatch``: the stage's transform, each output table written
  once per batch with txn app id ``f"{query id}:{table name}"`` and txn version = the batch id.
* **postgres**: Delta stream of its input -> ``foreachBatch``: the optional transform, then the PostgreSQL sink.

Every query's checkpoint is claimed first (:mod:`sparkonce.pipeline.owner`); every table is created empty with its
schema before any query starts, so a downstream stage can start before upstream data arrives, and a path holding
something that is not a Delta table fails before any data moves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sparkonce.checkpoint.query import read_query_id
from sparkonce.crash import crash_point
from sparkonce.delta.commit import BatchTxn, load_table, table_exists
from sparkonce.delta.merge import MergeClause, MergeResult, latest_per_key, merge_into, merge_latest
from sparkonce.delta.schema import arrow_schema_for_spark, spark_schema, table_arrow_schema
from sparkonce.errors import PipelineConfigError, SchemaMismatchError, TableNotFoundError
from sparkonce.pipeline.config import (
    LINEAGE_COLUMNS,
    SOURCE,
    BronzeStage,
    MergeStage,
    PipelineConfig,
    PostgresStage,
    RawStage,
    Stage,
    TransformStage,
)
from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.owner import claim_checkpoint
from sparkonce.pipeline.transforms import BoundTransform, check_transform
from sparkonce.sinks.fanout import FanOutResult, FanOutTarget, FanOutWriter
from sparkonce.storage import table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructField, StructType

    from sparkonce.sinks.postgres import PostgresSink

log = logging.getLogger(__name__)

RAW_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP, "
    "arrival_time TIMESTAMP"
)
LINEAGE_DDL = "_topic STRING, _partition INT, _offset BIGINT, _kafka_timestamp TIMESTAMP"
QUARANTINE_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP, "
    "reason STRING, batch_id BIGINT, quarantined_at TIMESTAMP"
)
_CORRUPT = "_sparkonce_corrupt"
_EXTRA = "_sparkonce_extra"
ROUTE_COLUMN = "_sparkonce_route"
BRONZE = "bronze"
"""The bronze table's name in the bronze stage's fan-out (txn app id ``f"{query id}:bronze"``)."""
QUARANTINE = "quarantine"
"""The quarantine table's name in the bronze stage's fan-out (txn app id ``f"{query id}:quarantine"``)."""


@dataclass(frozen=True)
class BronzeBatchResult:
    """What one bronze batch wrote."""

    batch_id: int
    bronze_rows: int
    quarantined_rows: int
    added_columns: tuple[str, ...]


def query_name(config: PipelineConfig, stage: Stage) -> str:
    return f"{config.name}.{stage.name}"


def start_stage(spark: SparkSession, config: PipelineConfig, stage: Stage) -> StreamingQuery:
    """Claim the stage's checkpoint, create its tables when missing, and start its streaming query.

    Raises:
        CheckpointError: the checkpoint belongs to another stage or pipeline, or was moved.
        TableNotFoundError: a table path holds something that is not a Delta table.
    """
    owner = claim_checkpoint(config.path, stage.name, stage.checkpoint)
    prepare_tables(spark, config, stage)
    if isinstance(stage, RawStage):
        return _start_raw(spark, config, stage)
    options: dict[str, str] = {}
    if owner.starting_version is not None:
        options["startingVersion"] = str(owner.starting_version)
    if isinstance(stage, BronzeStage):
        return _start_bronze(spark, config, stage, options)
    if isinstance(stage, TransformStage):
        return _start_transform(spark, config, stage, options)
    if isinstance(stage, PostgresStage):
        return _start_postgres(spark, config, stage, options)
    return _start_merge(spark, config, stage, options)


def waiting_for(config: PipelineConfig, stage: Stage) -> int | None:
    """The input table version a replayed stage waits for before it can start streaming (None: ready).

    After ``replay`` a fresh checkpoint starts from ``starting_version`` (the replayed table version + 1); until
    the input table has that version there is nothing to stream, and Delta refuses a start beyond the latest.
    """
    from sparkonce.pipeline.owner import read_owner

    input_table = config.input_table(stage)
    owner = read_owner(stage.checkpoint)
    if input_table is None or owner is None or owner.starting_version is None:
        return None
    if os.path.exists(os.path.join(stage.checkpoint, "offsets")):
        return None
    latest = int(load_table(input_table).version())
    return owner.starting_version if latest < owner.starting_version else None


def prepare_tables(spark: SparkSession, config: PipelineConfig, stage: Stage) -> None:
    """Create the tables a stage reads and writes when missing (empty, with their schema).

    Raises:
        PipelineConfigError: a transformation does not resolve or does not apply to its input's schema.
        TableNotFoundError: a table path holds something that is not a Delta table.
    """
    if stage.input != SOURCE:
        upstream = config.stage(stage.input)
        ensure_table(
            upstream.tables[0],
            output_schemas(spark, config, upstream, downstream=True)[upstream.tables[0]],
            partition_by=upstream.partition_by if isinstance(upstream, MergeStage) else (),
        )
    partition_by = stage.partition_by if isinstance(stage, MergeStage) else ()
    for table, schema in output_schemas(spark, config, stage).items():
        ensure_table(table, schema, partition_by=partition_by)


def output_schemas(
    spark: SparkSession, config: PipelineConfig, stage: Stage, *, downstream: bool = False
) -> dict[str, StructType]:
    """The schema of each Delta table the stage creates before it starts.

    A merge stage's table is created by its first merge (none here), unless it is partitioned, or ``downstream``:
    a stage reading it needs it to exist, with the merge input's schema.
    """
    if isinstance(stage, RawStage):
        return {stage.table: ddl_schema(spark, RAW_DDL)}
    if isinstance(stage, BronzeStage):
        return {stage.table: bronze_schema(spark, stage), stage.quarantine: ddl_schema(spark, QUARANTINE_DDL)}
    if isinstance(stage, TransformStage):
        _, schema = plan_transform(spark, config, stage)
        return dict.fromkeys(stage.tables, schema)
    if isinstance(stage, MergeStage) and (downstream or stage.partition_by):
        return {stage.table: input_schema(spark, config, stage)}
    return {}


def input_schema(spark: SparkSession, config: PipelineConfig, stage: Stage) -> StructType:
    """The schema of the batches a stage reads: the Kafka records in the raw shape, or its input table's."""
    if stage.input == SOURCE:
        return ddl_schema(spark, RAW_DDL)
    upstream = config.stage(stage.input)
    table = upstream.tables[0]
    if table_exists(table):
        return spark_schema(table_arrow_schema(load_table(table)))
    return output_schemas(spark, config, upstream, downstream=True)[table]


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


def check_stages(spark: SparkSession, config: PipelineConfig, stages: Sequence[Stage]) -> None:
    """Every load-time check that needs Spark, for ``stages``, before any of them starts (no data moves).

    Raises:
        PipelineConfigError: a transformation of a stage does not resolve or analyse, or a merge stage's keys,
            order columns or clauses do not fit its input's schema.
    """
    for stage in stages:
        if isinstance(stage, TransformStage):
            plan_transform(spark, config, stage)
        elif isinstance(stage, MergeStage):
            check_merge(spark, config, stage)
        elif isinstance(stage, PostgresStage):
            postgres_sink(spark, config, stage).check()


def check_merge(spark: SparkSession, config: PipelineConfig, stage: MergeStage) -> None:
    """Analyse a merge stage's keys, order and partition columns and its clauses on an empty input frame.

    Raises:
        PipelineConfigError: naming the key and Spark's reason.
    """
    import pyspark.sql.functions as F

    schema = input_schema(spark, config, stage)
    for key, names in (("keys", stage.keys), ("order_by", stage.order_by), ("partition_by", stage.partition_by)):
        unknown = [n for n in names if n not in schema.names]
        if unknown:
            raise PipelineConfigError(
                f"stages.{stage.name}.{key}: {unknown} are not columns of the input {stage.input!r} {schema.names}"
            )
    empty = spark.createDataFrame([], schema)
    pair = empty.select(F.struct(*schema.names).alias("source"), F.struct(*schema.names).alias("target"))
    for clause in ("delete", "update", "insert"):
        text = getattr(stage, clause)
        if text is None:
            continue
        try:
            pair.where(text).schema  # noqa: B018 - analysis only
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            raise PipelineConfigError(
                f"stages.{stage.name}.{clause}: {text!r} does not analyse over source.<column> / target.<column> "
                f"of {schema.names}: {first}"
            ) from err


def _clauses(stage: MergeStage) -> list[MergeClause]:
    """Delta MERGE's order: a matched key is deleted or updated (first clause that holds), a new key inserted."""
    clauses = []
    if stage.delete is not None:
        clauses.append(MergeClause("matched", "delete", stage.delete))
    if stage.update is not None:
        clauses.append(MergeClause("matched", "update", stage.update))
    if stage.insert is not None:
        clauses.append(MergeClause("notMatched", "insert", stage.insert))
    return clauses


def ensure_table(path: str, schema: StructType, *, partition_by: Sequence[str] = ()) -> None:
    """Create an empty Delta table at ``path`` unless one is there.

    Raises:
        TableNotFoundError: ``path`` holds files but no Delta log.
    """
    from deltalake import DeltaTable

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
    DeltaTable.create(
        location.uri,
        schema=arrow_schema_for_spark(schema),
        partition_by=list(partition_by) or None,
        mode="ignore",
        storage_options=location.options() or None,
    )
    log.info("created the empty Delta table %s", path)


def bronze_schema(spark: SparkSession, stage: BronzeStage) -> StructType:
    """The declared payload fields followed by the lineage columns."""
    return ddl_schema(spark, f"{stage.schema}, {LINEAGE_DDL}")


# -- raw ---------------------------------------------------------------------------------------------------------


def raw_frame(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """The Kafka stream in the raw table's shape."""
    import pyspark.sql.functions as F

    stream = spark.readStream.format("sparkonce.kafka").options(**config.source.spark_options()).load()
    return stream.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.current_timestamp().alias("arrival_time"),
    )


def _start_raw(spark: SparkSession, config: PipelineConfig, stage: RawStage) -> StreamingQuery:
    return (
        raw_frame(spark, config)
        .writeStream.format("delta")
        .queryName(query_name(config, stage))
        .option("checkpointLocation", stage.checkpoint)
        .option("mergeSchema", "true")
        .trigger(**stage.trigger.spark_kwargs())
        .start(stage.table)
    )


# -- bronze ------------------------------------------------------------------------------------------------------


def _start_bronze(
    spark: SparkSession, config: PipelineConfig, stage: BronzeStage, options: dict[str, str]
) -> StreamingQuery:
    if stage.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
    source = spark.readStream.format("delta").options(**options).load(config.input_table(stage))
    app_ids: list[str] = []

    def process(batch: DataFrame, batch_id: int) -> None:
        if not app_ids:  # the query id, read from the checkpoint once
            app_ids.append(read_query_id(stage.checkpoint))
        write_bronze_batch(batch, batch_id, stage, app_id=app_ids[0])

    return _start_foreach_batch(source, process, config, stage)


def _start_foreach_batch(
    source: DataFrame, process: Callable[[DataFrame, int], None], config: PipelineConfig, stage: Stage
) -> StreamingQuery:
    """Start a stage whose batches are written by ``process`` (bronze, gold) on the stage's own checkpoint."""
    return (
        source.writeStream.foreachBatch(process)
        .queryName(query_name(config, stage))
        .option("checkpointLocation", stage.checkpoint)
        .trigger(**stage.trigger.spark_kwargs())
        .start()
    )


def write_bronze_batch(
    batch: DataFrame, batch_id: int, stage: BronzeStage, *, app_id: str | None = None
) -> BronzeBatchResult:
    """Parse one raw batch and write bronze and quarantine, each exactly once for ``batch_id``, in one pass.

    One Spark job parses, classifies and writes the files of both tables (a one-pass fan-out,
    :meth:`~sparkonce.sinks.fanout.FanOutWriter.stage_routed`) and reports the JSON fields no schema declares in
    the same pass; then the driver makes one Delta commit per table, txn app id ``f"{app_id}:bronze"`` and
    ``f"{app_id}:quarantine"`` (app id: the bronze query id), txn version ``batch_id``. Only when undeclared fields
    appear under ``drift = "add"`` are the files discarded and the batch written again with the inferred fields.

    Raises:
        SchemaMismatchError: undeclared fields under ``drift = "fail"`` (nothing of the batch is committed).
    """
    app_id = app_id or read_query_id(stage.checkpoint)
    spark = batch.sparkSession
    fields = payload_fields(spark, stage)
    writer = bronze_writer(stage, fields, app_id)
    staged = writer.stage_routed(
        routed_frame(batch, stage, fields, batch_id=batch_id), batch_id, route=ROUTE_COLUMN, observe=(_EXTRA,)
    )
    added: tuple[str, ...] = ()
    found = sorted(staged.observed.get(_EXTRA, ()))
    if found:
        writer.discard(staged)
        if stage.drift == "fail":
            raise _drift_error(found, batch_id)
        new_fields = _infer_fields(spark, batch, found)
        added = tuple(f.name for f in new_fields)
        fields = [*fields, *new_fields]
        writer = bronze_writer(stage, fields, app_id)
        staged = writer.stage_routed(
            routed_frame(batch, stage, fields, batch_id=batch_id), batch_id, route=ROUTE_COLUMN
        )
    result = writer.commit_staged(staged)
    bronze_rows, quarantined_rows = result.rows(BRONZE), result.rows(QUARANTINE)
    log.info(
        "bronze batch %s (app_id %s): %d row(s) to %s, %d quarantined to %s%s%s",
        batch_id,
        app_id,
        bronze_rows,
        stage.table,
        quarantined_rows,
        stage.quarantine,
        f", added column(s) {list(added)}" if added else "",
        f", already written to {list(result.skipped)}" if result.skipped else "",
    )
    return BronzeBatchResult(batch_id, bronze_rows, quarantined_rows, added)


def bronze_writer(stage: BronzeStage, fields: Sequence[StructField], app_id: str) -> FanOutWriter:
    """The one-pass fan-out of a bronze batch: rows routed ``bronze`` and ``quarantine`` (see :func:`routed_frame`)."""
    return FanOutWriter(
        [
            FanOutTarget(
                stage.table,
                name=BRONZE,
                columns=_bronze_columns(fields),
                options={"mergeSchema": "true"} if stage.drift == "add" else {},
            ),
            FanOutTarget(stage.quarantine, name=QUARANTINE, columns=_QUARANTINE_COLUMNS),
        ],
        app_id=app_id,
    )


def routed_frame(
    raw: DataFrame, stage: BronzeStage, fields: Sequence[StructField], *, batch_id: int | None
) -> DataFrame:
    """Raw rows parsed and classified in one projection: the route (``bronze`` / ``quarantine``), the typed payload
    fields (``_b_<name>``), the quarantine columns, and the JSON keys no field declares (for drift detection).
    """
    import pyspark.sql.functions as F

    known = [f.name for f in fields]
    keys = F.json_object_keys(F.col("value"))
    well_formed = F.col("value").isNotNull() & keys.isNotNull()
    extra = F.array_except(keys, F.array(*[F.lit(n) for n in known]))
    parsed = _classify(raw, stage, list(fields))
    return parsed.select(
        F.when(F.col("_reason").isNull(), F.lit(BRONZE)).otherwise(F.lit(QUARANTINE)).alias(ROUTE_COLUMN),
        *[F.col(f"_p.{f.name}").alias(f"_b_{f.name}") for f in fields],
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        F.col("_reason").alias("_q_reason"),
        F.lit(batch_id).cast("bigint").alias("_q_batch_id"),
        F.current_timestamp().alias("_q_quarantined_at"),
        F.when(well_formed, extra).alias(_EXTRA),
    )


def parse_raw(
    raw: DataFrame, stage: BronzeStage, *, batch_id: int | None = None
) -> tuple[DataFrame, DataFrame, tuple[str, ...]]:
    """Split raw rows into parsed bronze rows and quarantined rows with a reason; apply the drift policy.

    For whole-table rebuilds (``replay``): the streaming stage writes through :func:`write_bronze_batch` in one pass.

    Returns:
        (bronze rows, quarantine rows, columns added to the payload schema by ``drift = "add"``).

    Raises:
        SchemaMismatchError: well-formed records carry fields the schema does not declare and the drift policy
            is ``fail``.
    """
    import pyspark.sql.functions as F

    spark = raw.sparkSession
    fields = payload_fields(spark, stage)
    frame = routed_frame(raw, stage, fields, batch_id=batch_id)
    found = frame.select(F.array_distinct(F.flatten(F.collect_list(_EXTRA))).alias("new")).collect()[0]["new"]
    new_fields: list[StructField] = []
    if found:
        if stage.drift == "fail":
            raise _drift_error(sorted(found), batch_id)
        new_fields = _infer_fields(spark, raw, sorted(found))
        fields = [*fields, *new_fields]
        frame = routed_frame(raw, stage, fields, batch_id=batch_id)

    def side(route: str, columns: Mapping[str, str]) -> DataFrame:
        rows = frame.where(F.col(ROUTE_COLUMN) == route)
        return rows.select(*[F.col(source).alias(target) for target, source in columns.items()])

    good = side(BRONZE, _bronze_columns(fields))
    bad = side(QUARANTINE, _QUARANTINE_COLUMNS)
    return good, bad, tuple(f.name for f in new_fields)


def _bronze_columns(fields: Sequence[StructField]) -> dict[str, str]:
    columns = {f.name: f"_b_{f.name}" for f in fields}
    columns.update({"_topic": "topic", "_partition": "partition", "_offset": "offset"})
    columns["_kafka_timestamp"] = "kafka_timestamp"
    return columns


_QUARANTINE_COLUMNS = {
    "key": "key",
    "value": "value",
    "topic": "topic",
    "partition": "partition",
    "offset": "offset",
    "kafka_timestamp": "kafka_timestamp",
    "reason": "_q_reason",
    "batch_id": "_q_batch_id",
    "quarantined_at": "_q_quarantined_at",
}


def _drift_error(names: Sequence[str], batch_id: int | None) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"stages.bronze: record(s) of batch {batch_id} carry field(s) {list(names)} that the schema does not "
        f'declare (drift = "fail"); declare them in stages.bronze.schema or set drift = "add"'
    )


def payload_fields(spark: SparkSession, stage: BronzeStage) -> list[StructField]:
    """The declared fields plus the columns drift added to the bronze table earlier."""
    declared = ddl_schema(spark, stage.schema)
    if not table_exists(stage.table):
        return list(declared.fields)
    table_schema = spark_schema(table_arrow_schema(load_table(stage.table)))
    names = set(declared.names) | set(LINEAGE_COLUMNS)
    return [*declared.fields, *(f for f in table_schema.fields if f.name not in names)]


def _infer_fields(spark: SparkSession, raw: DataFrame, names: list[str]) -> list[StructField]:
    """Spark's JSON schema inference for the new top-level fields (drift = "add")."""
    import pyspark.sql.functions as F

    well_formed = raw.where(F.col("value").isNotNull() & F.json_object_keys(F.col("value")).isNotNull())
    inferred = spark.read.json(well_formed.select("value").rdd.map(lambda row: row[0])).schema
    by_name = {f.name: f for f in inferred.fields}
    return [by_name[n] for n in names if n in by_name]


def _classify(raw: DataFrame, stage: BronzeStage, fields: list[StructField]) -> DataFrame:
    """Add ``_p`` (the typed parse) and ``_reason`` (null when the row is good) to the raw rows."""
    import pyspark.sql.functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    typed = StructType([*fields, StructField(_CORRUPT, StringType())])
    text = StructType([*(StructField(f.name, StringType()) for f in fields), StructField(_CORRUPT, StringType())])
    corrupt = F.col(f"_p.{_CORRUPT}").isNotNull()
    # The all-strings parse only explains a wrong type: evaluated for corrupt rows alone.
    frame = raw.withColumn("_p", F.from_json("value", typed, options)).withColumn(
        "_s", F.when(corrupt, F.from_json("value", text, options))
    )
    wrong = [
        F.when(
            F.col(f"_s.{f.name}").isNotNull() & F.col(f"_p.{f.name}").isNull(),
            F.concat(
                F.lit(f"{f.name}="),
                F.substring(F.col(f"_s.{f.name}"), 1, 80),
                F.lit(f" is not {f.dataType.simpleString().upper()}"),
            ),
        )
        for f in fields
    ]
    missing = [F.when(F.col(f"_p.{name}").isNull(), F.lit(name)) for name in stage.required]
    reason = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(F.json_object_keys("value").isNull(), F.lit("malformed JSON: not a JSON object"))
        .when(corrupt, F.concat(F.lit("wrong type: "), F.concat_ws("; ", *wrong)))
    )
    if missing:
        reason = reason.when(
            F.concat_ws(", ", *missing) != "",
            F.concat(F.lit("missing required field(s): "), F.concat_ws(", ", *missing)),
        )
    return frame.withColumn("_reason", reason)


# -- gold --------------------------------------------------------------------------------------------------------


def _start_merge(
    spark: SparkSession, config: PipelineConfig, stage: MergeStage, options: dict[str, str]
) -> StreamingQuery:
    options["skipChangeCommits"] = "true"
    if stage.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
    source = spark.readStream.format("delta").options(**options).load(config.input_table(stage))

    def process(batch: DataFrame, batch_id: int) -> None:
        write_merge_batch(batch, batch_id, stage)

    return _start_foreach_batch(source, process, config, stage)


def write_merge_batch(batch: DataFrame, batch_id: int, stage: MergeStage, *, app_id: str | None = None) -> MergeResult:
    """Merge one bronze batch into gold, exactly once for ``(app_id, batch_id)`` (app id: the gold query id)."""
    app_id = app_id or read_query_id(stage.checkpoint)
    if stage.merge == "clauses":
        condition = " AND ".join(f"target.`{k}` = source.`{k}`" for k in stage.keys)
        result = merge_into(
            latest_per_key(batch, stage.keys, stage.order_by).alias("source"),
            stage.table,
            condition,
            _clauses(stage),
            target_alias="target",
            keys=[(k, k) for k in stage.keys],
            txn=BatchTxn(app_id, batch_id),
            schema_evolution=stage.drift == "add",
            target_file_rows=stage.target_file_rows,
            parameters={"keys": list(stage.keys), "orderBy": list(stage.order_by)},
            create_from_source=True,
        )
    else:
        result = merge_latest(
            batch,
            stage.table,
            keys=stage.keys,
            order_by=stage.order_by,
            txn=BatchTxn(app_id, batch_id),
            merge_schema=stage.drift == "add",
            target_file_rows=stage.target_file_rows,
        )
    crash_point("after_gold_merge", batch_id)
    return result


# -- postgres ----------------------------------------------------------------------------------------------------


def postgres_sink(spark: SparkSession, config: PipelineConfig, stage: PostgresStage) -> PostgresSink:
    """The stage's sink (ledger app id ``f"{query id}:{table}"``); resolves the DSN and the transformation.

    Raises:
        PipelineConfigError: the DSN's environment variable is unset, or the transformation does not resolve or
            analyse.
        OptionError: an invalid DSN or table name.
    """
    from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions

    if stage.transform is not None:
        check_transform(stage.transform.resolve(), spark, input_schema(spark, config, stage))
    return PostgresSink(
        PostgresSinkOptions(
            dsn=stage.resolved_dsn(),
            table=stage.pg_table,
            keys=stage.keys,
            checkpoint_dir=stage.checkpoint,
            ledger_table=stage.ledger_table,
            commit_protocol=stage.commit_protocol,
        )
    )


def _start_postgres(
    spark: SparkSession, config: PipelineConfig, stage: PostgresStage, options: dict[str, str]
) -> StreamingQuery:
    sink = postgres_sink(spark, config, stage)
    bound = stage.transform.resolve() if stage.transform is not None else None
    schema = input_schema(spark, config, stage)
    if bound is not None:
        schema = check_transform(bound, spark, schema)
    sink.check(schema)  # target, staging and ledger tables exist before the first batch
    source = _stage_source(spark, config, stage, options)

    def process(batch: DataFrame, batch_id: int) -> None:
        sink.write_batch(bound.apply(batch, batch_id) if bound is not None else batch, batch_id)

    return _start_foreach_batch(source, process, config, stage)


def _stage_source(
    spark: SparkSession, config: PipelineConfig, stage: TransformStage | PostgresStage, options: dict[str, str]
) -> DataFrame:
    """The stream a user stage reads: the Kafka records (raw shape), or its input's Delta table."""
    if stage.input == SOURCE:
        return raw_frame(spark, config)
    options["skipChangeCommits"] = "true"  # a replayed (overwritten) input does not stop the stage
    if stage.max_files_per_trigger is not None:
        options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
    return spark.readStream.format("delta").options(**options).load(config.input_table(stage))


# -- transform ---------------------------------------------------------------------------------------------------


def _start_transform(
    spark: SparkSession, config: PipelineConfig, stage: TransformStage, options: dict[str, str]
) -> StreamingQuery:
    bound, _ = plan_transform(spark, config, stage)
    source = _stage_source(spark, config, stage, options)
    app_ids: list[str] = []

    def process(batch: DataFrame, batch_id: int) -> None:
        if not app_ids:
            app_ids.append(read_query_id(stage.checkpoint))
        write_transform_batch(batch, batch_id, stage, bound, app_id=app_ids[0])

    return _start_foreach_batch(source, process, config, stage)


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


def table_rows(table: str) -> int:
    """Rows of a Delta table, from the ``numRecords`` stats of its active files."""
    import pyarrow.compute as pc

    actions = pa.table(load_table(table).get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


__all__ = [
    "QUARANTINE_DDL",
    "RAW_DDL",
    "BronzeBatchResult",
    "bronze_schema",
    "check_stages",
    "ensure_table",
    "input_schema",
    "output_schemas",
    "parse_raw",
    "plan_transform",
    "prepare_tables",
    "query_name",
    "start_stage",
    "table_rows",
    "waiting_for",
    "write_bronze_batch",
    "write_merge_batch",
    "write_transform_batch",
]
