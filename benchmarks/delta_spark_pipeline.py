"""The pipeline of ``bench_pipeline_vs_delta_spark.py`` as a user writes it without sparkonce: Spark's Kafka
connector, delta-spark's streaming sink, and a ``foreachBatch`` with Delta's idempotent writes. Plain PySpark.

Runs in the delta-spark worker (``delta_spark_worker.py`` under ``.venv-delta``: PySpark 4.2, delta-spark's jars,
and here the ``spark-sql-kafka-0-10`` connector's jars too), which serves :data:`OPERATIONS`. The topology and the
semantics are those of sparkonce's raw and bronze stages (``src/sparkonce/pipeline/kinds/raw.py``, ``bronze.py``):

* **raw**: ``readStream.format("kafka")`` with the pipeline's source options (the same ``maxOffsetsPerTrigger``),
  projected to the raw table's columns (key and value as strings, topic, partition, offset, the Kafka timestamp,
  the arrival time), into Delta's streaming sink with ``mergeSchema`` on (the sink records ``txn(query id, batch
  id)`` itself);
* **bronze**: ``readStream.format("delta")`` of the raw table, ``foreachBatch``: each value parsed by ``from_json``
  with the declared schema; a row goes to quarantine, with the reason text sparkonce writes, when its value is null,
  is not a JSON object, has text after the object, holds a field of the wrong type, or lacks a required field; the
  other rows go to bronze (the payload fields, then ``_topic``, ``_partition``, ``_offset``, ``_kafka_timestamp``).
  A well-formed record with a field the schema does not declare fails the batch (sparkonce's default,
  ``drift = "fail"``). The parsed batch is persisted, checked, written to both tables as two appends with Delta's
  idempotent writes (``txnAppId``, ``txnVersion`` = the batch id: a batch run again is skipped on each table), then
  unpersisted: what the Spark and Delta guides recommend for ``foreachBatch`` into two tables.

:func:`classify` restates the bronze stage's expressions (``bronze._classify``) in plain PySpark on purpose: the
worker cannot import sparkonce, and a user would write them. A change to the bronze stage's reasons must be made
here too; the benchmark's check, which compares the quarantine's rows per reason across both systems, fails until
it is.

The raw table is created empty before the queries start (the bronze stream cannot start on a missing table), as
sparkonce's pipeline creates its tables before its queries start.

Imports only pyspark and delta-spark (never sparkonce). Runs on the worker's driver; the parse and the files'
writes run on its executors.
"""

from __future__ import annotations

import secrets
from typing import Any

RAW_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP, "
    "arrival_time TIMESTAMP"
)
"""The raw table's columns (sparkonce's ``sparkonce.pipeline.streams.RAW_DDL``)."""

CORRUPT = "_corrupt_record"
END = f"end-{secrets.token_hex(8)}"

_running: dict[str, Any] = {}
"""The streaming queries of :func:`pipeline_start`, by stage name, until :func:`pipeline_stop`."""


def schema_fields(ddl: str) -> list[Any]:
    """The fields of a DDL schema string (``StructField``s)."""
    from pyspark.sql.types import DataType, StructType

    parsed = DataType.fromDDL(ddl)
    assert isinstance(parsed, StructType)
    return list(parsed.fields)


def create_raw_table(spark: Any, table: str) -> None:
    """The raw table, empty, unless it exists."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    DeltaTable.createIfNotExists(spark).location(table).addColumns(StructType(schema_fields(RAW_DDL))).execute()


def start_raw(spark: Any, *, kafka: dict[str, str], raw: str, raw_checkpoint: str, trigger: dict[str, Any]) -> Any:
    """Kafka -> the raw table: the connector's rows in the raw shape into Delta's streaming sink."""
    import pyspark.sql.functions as F

    return (
        spark.readStream.format("kafka")
        .options(**kafka)
        .load()
        .select(
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            "topic",
            "partition",
            "offset",
            F.col("timestamp").alias("kafka_timestamp"),
            F.current_timestamp().alias("arrival_time"),
        )
        .writeStream.format("delta")
        .queryName("raw")
        .option("checkpointLocation", raw_checkpoint)
        .option("mergeSchema", "true")
        .trigger(**trigger)
        .start(raw)
    )


def classify(raw: Any, schema: str, required: list[str]) -> Any:
    """Raw rows with ``_p`` (the typed parse), ``_reason`` (why the row is quarantined; null: it is good) and
    ``_extra`` (a well-formed record's JSON keys the schema does not declare)."""
    import pyspark.sql.functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    fields = schema_fields(schema)
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    typed = StructType([*fields, StructField(CORRUPT, StringType())])
    text = StructType([*(StructField(f.name, StringType()) for f in fields), StructField(CORRUPT, StringType())])
    corrupt = F.col(f"_p.{CORRUPT}").isNotNull()
    # each parse its own column, computed once per row (as sparkonce's bronze stage does)
    frame = (
        raw.withColumn("_p", F.from_json("value", typed, options))
        .withColumn("_keys", F.json_object_keys("value"))
        .withColumn("_s", F.when(corrupt, F.from_json("value", text, options)))
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
    missing = [F.when(F.col(f"_p.{name}").isNull(), F.lit(name)) for name in required]
    keys = F.col("_keys")
    reason = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(keys.isNull(), F.lit("malformed JSON: not a JSON object"))
        # from_json reads the first JSON value and ignores what follows: as the first element of an array the
        # value must be followed by the array's own second element (a random text, as sparkonce's bronze stage).
        .when(
            F.coalesce(F.get_json_object(F.concat(F.lit("["), F.col("value"), F.lit(f',"{END}"]')), "$[1]"), F.lit(""))
            != END,
            F.lit("malformed JSON: text after the JSON object"),
        )
        .when(corrupt, F.concat(F.lit("wrong type: "), F.concat_ws("; ", *wrong)))
    )
    if missing:
        reason = reason.when(
            F.concat_ws(", ", *missing) != "",
            F.concat(F.lit("missing required field(s): "), F.concat_ws(", ", *missing)),
        )
    extra = F.array_except(keys, F.array(*[F.lit(f.name) for f in fields]))
    return frame.withColumn("_reason", reason).withColumn("_extra", extra)


def write_bronze_batch(
    batch: Any, batch_id: int, *, schema: str, required: list[str], bronze: str, quarantine: str, app_id: str
) -> None:
    """One raw batch parsed, checked for undeclared fields, and appended to bronze and quarantine exactly once."""
    import pyspark.sql.functions as F

    parsed = classify(batch, schema, required).persist()
    try:
        drift = parsed.where(F.size("_extra") > 0).select("_extra").limit(1).collect()
        if drift:
            raise ValueError(f"batch {batch_id}: record(s) carry field(s) {drift[0][0]} the schema does not declare")
        good = parsed.where(F.col("_reason").isNull()).select(
            *[F.col(f"_p.{f.name}").alias(f.name) for f in schema_fields(schema)],
            F.col("topic").alias("_topic"),
            F.col("partition").alias("_partition"),
            F.col("offset").alias("_offset"),
            F.col("kafka_timestamp").alias("_kafka_timestamp"),
        )
        bad = parsed.where(F.col("_reason").isNotNull()).select(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "kafka_timestamp",
            F.col("_reason").alias("reason"),
            F.lit(batch_id).cast("bigint").alias("batch_id"),
            F.current_timestamp().alias("quarantined_at"),
        )
        for rows, table in ((good, bronze), (bad, quarantine)):
            writer = rows.write.format("delta").mode("append")
            writer.option("txnAppId", app_id).option("txnVersion", batch_id).save(table)
    finally:
        parsed.unpersist()


def start_bronze(
    spark: Any,
    *,
    raw: str,
    bronze: str,
    quarantine: str,
    bronze_checkpoint: str,
    schema: str,
    required: list[str],
    app_id: str,
    trigger: dict[str, Any],
) -> Any:
    """The raw table's Delta stream -> bronze and quarantine, one :func:`write_bronze_batch` per batch."""

    def process(batch: Any, batch_id: int) -> None:
        write_bronze_batch(
            batch, batch_id, schema=schema, required=required, bronze=bronze, quarantine=quarantine, app_id=app_id
        )

    return (
        spark.readStream.format("delta")
        .load(raw)
        .writeStream.foreachBatch(process)
        .queryName("bronze")
        .option("checkpointLocation", bronze_checkpoint)
        .trigger(**trigger)
        .start()
    )


def _start(spark: Any, stage: str, spec: dict[str, Any]) -> Any:
    if stage == "raw":
        return start_raw(
            spark,
            kafka=spec["kafka"],
            raw=spec["raw"],
            raw_checkpoint=spec["raw_checkpoint"],
            trigger=spec["trigger"],
        )
    return start_bronze(
        spark,
        raw=spec["raw"],
        bronze=spec["bronze"],
        quarantine=spec["quarantine"],
        bronze_checkpoint=spec["bronze_checkpoint"],
        schema=spec["schema"],
        required=spec["required"],
        app_id=spec["app_id"],
        trigger=spec["trigger"],
    )


def _raise_failure(name: str, query: Any) -> None:
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"the {name} query failed: {failure}")


def pipeline_start(spark: Any, **spec: Any) -> None:
    """Create the raw table, then start the raw and the bronze queries (``spec["trigger"]``: processingTime);
    they run until :func:`pipeline_stop`."""
    if _running:
        raise RuntimeError(f"a pipeline runs already ({sorted(_running)})")
    create_raw_table(spark, spec["raw"])
    try:
        for stage in ("raw", "bronze"):
            _running[stage] = _start(spark, stage, spec)
    except BaseException:
        for query in _running.values():
            query.stop()
        _running.clear()
        raise


def pipeline_running(spark: Any) -> bool:
    """Whether both queries of :func:`pipeline_start` are active; raises the failure of one that failed."""
    for name, query in _running.items():
        if not query.isActive:
            _raise_failure(name, query)
    return bool(_running) and all(query.isActive for query in _running.values())


def pipeline_stop(spark: Any) -> None:
    """Stop the queries of :func:`pipeline_start`; raises the failure of one that failed."""
    queries = dict(_running)
    _running.clear()
    for query in queries.values():
        query.stop()
    for name, query in queries.items():
        _raise_failure(name, query)


def pipeline_stage(spark: Any, *, stage: str, **spec: Any) -> None:
    """One stage (``raw`` or ``bronze``) with the availableNow trigger, until it has drained its input."""
    if stage == "raw":
        create_raw_table(spark, spec["raw"])
    query = _start(spark, stage, {**spec, "trigger": {"availableNow": True}})
    query.awaitTermination()
    _raise_failure(stage, query)


OPERATIONS = {
    "pipeline_start": pipeline_start,
    "pipeline_running": pipeline_running,
    "pipeline_stop": pipeline_stop,
    "pipeline_stage": pipeline_stage,
}
"""The requests of ``bench_pipeline_vs_delta_spark.py`` (``delta_spark_worker.py`` serves them)."""
