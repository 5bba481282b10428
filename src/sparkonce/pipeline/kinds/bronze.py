"""The bronze kind: Delta stream of raw -> ``foreachBatch``: parse the JSON value with the declared schema; rows
that parse go to bronze, rows that fail go to quarantine with the reason. One Spark job per batch parses,
classifies and writes both tables' files (a one-pass fan-out, :mod:`sparkonce.sinks.fanout`); each table then gets
its own Delta commit with txn app id ``f"{bronze query id}:{bronze|quarantine}"`` and txn version = the batch id,
so each is written exactly once even when a crash falls between the two. Runs on the driver; the parse and the
files' writes run on executors.
"""

from __future__ import annotations

import functools
import logging
import operator
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sparkonce.checkpoint.query import read_query_id
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.table.schema import spark_schema, table_arrow_schema
from sparkonce.delta.txn.commit import table_exists
from sparkonce.errors import SchemaMismatchError
from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.kinds.base import Kind
from sparkonce.pipeline.model import DEFAULT_INPUT, LINEAGE_COLUMNS, BronzeStage, PipelineConfig, Stage
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.streams import start_foreach_batch
from sparkonce.sinks.fanout import BatchValue, FanOutTarget, FanOutWriter

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructField, StructType

log = logging.getLogger(__name__)

LINEAGE_DDL = "_topic STRING, _partition INT, _offset BIGINT, _kafka_timestamp TIMESTAMP"
QUARANTINE_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP, "
    "reason STRING, batch_id BIGINT, quarantined_at TIMESTAMP"
)
_CORRUPT = "_sparkonce_corrupt"
_KEYS = "_sparkonce_keys"
_EXTRA = "_sparkonce_extra"
_END = f"sparkonce-end-{secrets.token_hex(8)}"
"""The second element of ``[<value>,"<_END>"]``, the text-after-the-object check: it is that element only when the
value is exactly one JSON value. Random per process, so a value cannot forge it (``{...},0],[`` makes a two-element
array of ``[<value>,0]``, and ``{...},{...}]`` of ``[<value>,"x"]``), and the same for every batch (no new code)."""
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
    columns: RoutedColumns
    """The expressions the batch was parsed with: give them to the next batch (:func:`write_bronze_batch`)."""


def bronze_schema(spark: SparkSession, stage: BronzeStage) -> StructType:
    """The declared payload fields followed by the lineage columns."""
    return ddl_schema(spark, f"{stage.schema}, {LINEAGE_DDL}")


def write_bronze_batch(
    batch: DataFrame,
    batch_id: int,
    stage: BronzeStage,
    *,
    app_id: str | None = None,
    columns: RoutedColumns | None = None,
) -> BronzeBatchResult:
    """Parse one raw batch and write bronze and quarantine, each exactly once for ``batch_id``, in one pass.

    One Spark job parses, classifies and writes the files of both tables (a one-pass fan-out,
    :meth:`~sparkonce.sinks.fanout.FanOutWriter.stage_routed`) and reports the JSON fields no schema declares in
    the same pass; then the driver makes one Delta commit per table, txn app id ``f"{app_id}:bronze"`` and
    ``f"{app_id}:quarantine"`` (app id: the bronze query id), txn version ``batch_id``. Only when undeclared fields
    appear under ``drift = "add"`` are the files discarded and the batch written again with the inferred fields.
    ``columns``: the previous batch's :attr:`BronzeBatchResult.columns`, reused while the payload fields are the same.

    Raises:
        SchemaMismatchError: undeclared fields under ``drift = "fail"`` (nothing of the batch is committed).
    """
    app_id = app_id or read_query_id(stage.checkpoint)
    spark = batch.sparkSession
    fields = payload_fields(spark, stage)
    if columns is None or columns.fields != tuple(fields):
        columns = RoutedColumns.build(stage, fields)
    writer = bronze_writer(stage, fields, app_id, batch_id=batch_id)
    staged = writer.stage_routed(columns.apply(batch), batch_id, route=ROUTE_COLUMN, observe=(_EXTRA,))
    added: tuple[str, ...] = ()
    found = sorted(staged.observed.get(_EXTRA, ()))
    if found:
        writer.discard(staged)
        if stage.drift == "fail":
            raise _drift_error(found, batch_id)
        new_fields = _infer_fields(spark, batch, found)
        added = tuple(f.name for f in new_fields)
        fields = [*fields, *new_fields]
        columns = RoutedColumns.build(stage, fields)
        writer = bronze_writer(stage, fields, app_id, batch_id=batch_id)
        staged = writer.stage_routed(columns.apply(batch), batch_id, route=ROUTE_COLUMN)
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
    return BronzeBatchResult(batch_id, bronze_rows, quarantined_rows, added, columns)


def bronze_writer(stage: BronzeStage, fields: Sequence[StructField], app_id: str, *, batch_id: int) -> FanOutWriter:
    """The one-pass fan-out of batch ``batch_id``: rows routed ``bronze`` and ``quarantine`` (see
    :func:`routed_frame`). The quarantine rows' ``batch_id`` and ``quarantined_at`` (now) are set by the tasks that
    write the files, so the batch's plan is the same for every batch (:class:`~sparkonce.sinks.fanout.BatchValue`).
    """
    from pyspark.sql.types import LongType, TimestampType

    quarantine_columns: dict[str, str | BatchValue] = {
        **_QUARANTINE_COLUMNS,
        "batch_id": BatchValue(batch_id, LongType()),
        "quarantined_at": BatchValue(datetime.now(UTC), TimestampType()),
    }
    return FanOutWriter(
        [
            FanOutTarget(
                stage.table,
                name=BRONZE,
                columns=_bronze_columns(fields),
                options={"mergeSchema": "true"} if stage.drift == "add" else {},
            ),
            FanOutTarget(stage.quarantine, name=QUARANTINE, columns=quarantine_columns),
        ],
        app_id=app_id,
    )


def routed_frame(raw: DataFrame, stage: BronzeStage, fields: Sequence[StructField]) -> DataFrame:
    """Raw rows parsed and classified in one projection: the route (``bronze`` / ``quarantine``), the typed payload
    fields (``_b_<name>``), the quarantine columns, and the JSON keys no field declares (for drift detection; null
    unless the value is a JSON object).

    The plan holds no value that changes from batch to batch, so its generated code is compiled once per query.
    """
    return RoutedColumns.build(stage, fields).apply(raw)


@dataclass(frozen=True)
class RoutedColumns:
    """The expressions of :func:`routed_frame` for one payload schema. Built on the driver.

    A streaming query builds them once and applies them to every batch: a batch's DataFrame is new each time, its
    expressions need not be, and building them costs about a thousand calls into the JVM (~0.1 s a batch).
    """

    fields: tuple[StructField, ...]
    layers: tuple[dict[str, Column], ...]
    """Columns added to the raw rows, layer after layer (a layer's expressions read the layers before it)."""
    output: tuple[Column, ...]

    @classmethod
    def build(cls, stage: BronzeStage, fields: Sequence[StructField]) -> RoutedColumns:
        import pyspark.sql.functions as F

        declared = F.array(*[F.lit(f.name) for f in fields])
        # Null when the keys are exactly the declared fields in their order, as most records' are: no set per row.
        extra = F.when(F.col(_KEYS) != declared, F.array_except(F.col(_KEYS), declared))
        output = (
            F.when(F.col("_reason").isNull(), F.lit(BRONZE)).otherwise(F.lit(QUARANTINE)).alias(ROUTE_COLUMN),
            *[F.col(f"_p.{f.name}").alias(f"_b_{f.name}") for f in fields],
            # The record's key and value go to quarantine only: null in bronze's rows, so they do not cross to Python.
            *[F.when(F.col("_reason").isNotNull(), F.col(name)).alias(name) for name in ("key", "value")],
            *[F.col(name) for name in ("topic", "partition", "offset", "kafka_timestamp")],
            F.col("_reason").alias("_q_reason"),
            extra.alias(_EXTRA),
        )
        return cls(tuple(fields), _classify(stage, list(fields)), output)

    def apply(self, raw: DataFrame) -> DataFrame:
        """The routed frame of ``raw`` (the raw table's rows)."""
        frame = raw
        for layer in self.layers:
            frame = frame.withColumns(layer)
        return frame.select(*self.output)


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
    frame = routed_frame(raw, stage, fields)
    found = frame.select(F.array_distinct(F.flatten(F.collect_list(_EXTRA))).alias("new")).collect()[0]["new"]
    new_fields: list[StructField] = []
    if found:
        if stage.drift == "fail":
            raise _drift_error(sorted(found), batch_id)
        new_fields = _infer_fields(spark, raw, sorted(found))
        fields = [*fields, *new_fields]
        frame = routed_frame(raw, stage, fields)
    frame = frame.withColumns(
        {"_q_batch_id": F.lit(batch_id).cast("bigint"), "_q_quarantined_at": F.current_timestamp()}
    )

    def side(route: str, columns: Mapping[str, str]) -> DataFrame:
        rows = frame.where(F.col(ROUTE_COLUMN) == route)
        return rows.select(*[F.col(source).alias(target) for target, source in columns.items()])

    good = side(BRONZE, _bronze_columns(fields))
    bad = side(QUARANTINE, {**_QUARANTINE_COLUMNS, "batch_id": "_q_batch_id", "quarantined_at": "_q_quarantined_at"})
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
}
"""The quarantine table's columns from the routed frame, but ``batch_id`` and ``quarantined_at`` (set per batch)."""


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
    table_schema = spark_schema(table_arrow_schema(existing_table(stage.table)))
    names = set(declared.names) | set(LINEAGE_COLUMNS)
    return [*declared.fields, *(f for f in table_schema.fields if f.name not in names)]


def _infer_fields(spark: SparkSession, raw: DataFrame, names: list[str]) -> list[StructField]:
    """Spark's JSON schema inference for the new top-level fields (drift = "add")."""
    import pyspark.sql.functions as F

    well_formed = raw.where(F.col("value").isNotNull() & F.json_object_keys(F.col("value")).isNotNull())
    inferred = spark.read.json(well_formed.select("value").rdd.map(lambda row: row[0])).schema
    by_name = {f.name: f for f in inferred.fields}
    return [by_name[n] for n in names if n in by_name]


def _classify(stage: BronzeStage, fields: list[StructField]) -> tuple[dict[str, Column], ...]:
    """The layers that add ``_p`` (the typed parse), the value's top-level JSON keys (null unless it is a JSON
    object) and ``_reason`` (null when the row is good) to the raw rows.

    Each parse of the value is its own column, computed once per row: the typed parse, the keys, the all-strings
    parse (corrupt rows only) and the text-after-the-object check (a projection's expressions are evaluated where
    they are used, so a parse used twice would run twice).
    """
    import pyspark.sql.functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    typed = StructType([*fields, StructField(_CORRUPT, StringType())])
    text = StructType([*(StructField(f.name, StringType()) for f in fields), StructField(_CORRUPT, StringType())])
    corrupt = F.col(f"_p.{_CORRUPT}").isNotNull()
    parses = {"_p": F.from_json("value", typed, options)}
    # The all-strings parse only explains a wrong type: evaluated for corrupt rows alone.
    explained = {"_s": F.when(corrupt, F.from_json("value", text, options)), _KEYS: _top_level_keys(fields)}
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
        .when(F.col(_KEYS).isNull(), F.lit("malformed JSON: not a JSON object"))
        .when(_text_after_object(), F.lit("malformed JSON: text after the JSON object"))
        .when(corrupt, F.concat(F.lit("wrong type: "), F.concat_ws("; ", *wrong)))
    )
    if missing:
        reason = reason.when(
            functools.reduce(operator.or_, [F.col(f"_p.{name}").isNull() for name in stage.required]),
            F.concat(F.lit("missing required field(s): "), F.concat_ws(", ", *missing)),
        )
    return parses, explained, {"_reason": reason}


def _text_after_object() -> Column:
    """Whether text follows the JSON object the value starts with: ``from_json`` and ``json_object_keys`` read the
    first JSON value and ignore what follows (``{...}}``, ``{...}x``).

    When the value's first ``}`` is its last byte (the text before it is one byte shorter than the value), the
    object, which ends with a ``}``, ends there and nothing can follow it. Else, as the first element of an array
    the value must be followed by the array's own second element. (``substring_index`` finds the ``}`` by bytes;
    ``instr`` counts characters on the way, about twice the cost, and every row pays it.)
    """
    import pyspark.sql.functions as F

    value = F.col("value")
    before_first = F.call_function("substring_index", value, F.lit("}"), F.lit(1))
    wrapped = F.concat(F.lit("["), value, F.lit(f',"{_END}"]'))
    return (F.octet_length(before_first) != F.octet_length(value) - 1) & (
        F.coalesce(F.get_json_object(wrapped, "$[1]"), F.lit("")) != _END
    )


def _top_level_keys(fields: Sequence[StructField]) -> Column:
    """The value's top-level JSON keys (null unless it is a JSON object), read from the typed parse ``_p`` where it
    proves them, by ``json_object_keys`` elsewhere.

    ``json_object_keys`` is a second parse of the value, with a JSON parser of its own per row (Spark's: an 8 KB
    buffer and a UTF-8 reader each); most rows are spared it. A row whose typed parse is not corrupt and has
    ``n > 0`` non-null fields is a JSON object with at least those ``n`` distinct declared keys at its top level
    (``from_json`` matches names exactly and reads the top level only). An object's top-level keys, duplicates
    counted, are at most one more than its commas (every comma of the text counts, in strings and nested values
    too). So when the value has fewer than ``n`` commas (``substring_index`` up to the ``n``-th comma is the whole
    value), its top-level keys are exactly declared ones: the row has no undeclared key, and its keys are given as
    the declared names (the order is not kept; only the undeclared ones are read from it).
    """
    import pyspark.sql.functions as F

    value = F.col("value")
    found = functools.reduce(operator.add, [F.col(f"_p.{f.name}").isNotNull().cast("int") for f in fields])
    before_nth_comma = F.call_function("substring_index", value, F.lit(","), found)
    fewer_commas = F.octet_length(before_nth_comma) == F.octet_length(value)
    proven = F.col(f"_p.{_CORRUPT}").isNull() & (found > 0) & fewer_commas
    return F.when(proven, F.array(*[F.lit(f.name) for f in fields])).otherwise(F.json_object_keys(value))


class BronzeKind(Kind[BronzeStage]):
    """Raw -> parsed rows; failures -> quarantine. Runs on the driver."""

    name = "bronze"
    stage_class = BronzeStage

    def parse(self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> BronzeStage:
        key = f"stages.{name}"
        reader.known(
            data,
            key,
            {
                "table",
                "table_name",
                "checkpoint",
                "trigger",
                "quarantine",
                "quarantine_name",
                "schema",
                "required",
                "drift",
                "max_files_per_trigger",
                "input",
            },
        )
        schema = reader.string(data, "schema", key)
        assert schema is not None
        fields = reader.ddl(schema, f"{key}.schema")
        names = [f.name for f in fields]
        required = reader.names(data, "required", key, default=())
        for field_name in required:
            if field_name not in names:
                raise reader.fail(f"{key}.required", f"{field_name!r} is not a field of the schema {names}")
        return BronzeStage(
            table=reader.path(data, "table", key),
            checkpoint=reader.path(data, "checkpoint", key),
            trigger=reader.trigger(data, key),
            quarantine=reader.path(data, "quarantine", key),
            schema=schema,
            fields=fields,
            required=required,
            drift=reader.drift(data, key),
            max_files_per_trigger=reader.integer(data, "max_files_per_trigger", key),
            name=name,
            input=reader.input(data, key, DEFAULT_INPUT.get(name)),
        )

    def places(self, stage: BronzeStage) -> list[tuple[str, str]]:
        return [(f"stages.{stage.name}.table", stage.table), (f"stages.{stage.name}.quarantine", stage.quarantine)]

    def check_input_columns(self, reader: TomlReader, stage: BronzeStage, key: str, names: tuple[str, ...]) -> None:
        """The columns must be bronze columns, and payload ones listed in ``required`` (a null key or order value
        cannot be merged)."""
        list_key = key.rpartition(".")[2]
        columns = {f.name for f in stage.fields} | set(LINEAGE_COLUMNS)
        for column in names:
            if column not in columns:
                raise reader.fail(key, f"{column!r} is not a bronze column {sorted(columns)}")
            if column in {f.name for f in stage.fields} and column not in stage.required:
                raise reader.fail(
                    key,
                    f"{column!r} must be listed in stages.{stage.name}.required (a null {list_key[:-1]} cannot "
                    "be merged)",
                )

    def output_schemas(
        self, spark: SparkSession, config: PipelineConfig, stage: BronzeStage, *, downstream: bool = False
    ) -> dict[str, StructType]:
        return {stage.table: bronze_schema(spark, stage), stage.quarantine: ddl_schema(spark, QUARANTINE_DDL)}

    def start(
        self, spark: SparkSession, config: PipelineConfig, stage: BronzeStage, options: dict[str, str]
    ) -> StreamingQuery:
        if stage.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
        source = spark.readStream.format("delta").options(**options).load(config.input_table(stage))
        app_id: str | None = None
        columns: RoutedColumns | None = None  # the last batch's expressions, reused by the next

        def process(batch: DataFrame, batch_id: int) -> None:
            nonlocal app_id, columns
            app_id = app_id or read_query_id(stage.checkpoint)  # the query id, read from the checkpoint once
            columns = write_bronze_batch(batch, batch_id, stage, app_id=app_id, columns=columns).columns

        return start_foreach_batch(source, process, config, stage)

    def txn_records(self, stage: BronzeStage, query_id: str) -> list[tuple[str, str]]:
        return [(stage.table, f"{query_id}:{BRONZE}"), (stage.quarantine, f"{query_id}:{QUARANTINE}")]

    def replayable(self, stage: BronzeStage) -> bool:
        return True

    def replay_outputs(
        self, spark: SparkSession, config: PipelineConfig, stage: BronzeStage, source: DataFrame
    ) -> list[tuple[str, DataFrame]]:
        good, bad, _added = parse_raw(source, stage, batch_id=None)
        return [(stage.table, good), (stage.quarantine, bad)]


__all__ = [
    "LINEAGE_DDL",
    "QUARANTINE_DDL",
    "BronzeBatchResult",
    "BronzeKind",
    "bronze_schema",
    "parse_raw",
    "write_bronze_batch",
]
