"""The merge kind (the built-in gold): Delta stream of its input (``skipChangeCommits``: a replayed input does not
stop it) -> ``foreachBatch`` :func:`sparkonce.delta.ops.merge.merge_latest` (rule ``latest``) or
:func:`sparkonce.delta.ops.merge.merge_into` (rule ``clauses``) with ``txn(merge query id, batch id)``. Runs on the
driver; the merge's reads and writes run on executors.

``input_mode = "changes"``: the stream is the input table's change data feed (``readChangeFeed``; the feed is
turned on for the input table when it is off); each batch's last change per key (by ``_commit_version``, a
delete before an upsert within one commit, then ``order_by`` when given; update pre-images ignored) is merged
by ``keys``: an ``insert`` or ``update_postimage`` upserts the row, a ``delete`` deletes it. The table mirrors its
input's latest state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.checkpoint.query import read_query_id
from sparkonce.crash import crash_point
from sparkonce.delta.ops.merge import MergeClause, MergeResult, latest_per_key, merge_into, merge_latest
from sparkonce.delta.txn.commit import BatchTxn
from sparkonce.delta.write.cdf import CDF_PROPERTY, CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.kinds.base import Kind, kind_of
from sparkonce.pipeline.model import DEFAULT_INPUT, SOURCE, MergeStage, PipelineConfig, Stage
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.streams import input_schema, start_foreach_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

CHANGE_COLUMNS = (CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN)


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


def latest_changes(batch: DataFrame, keys: tuple[str, ...], order_by: tuple[str, ...]) -> DataFrame:
    """The last change of each key in a batch of change rows: update pre-images dropped, then the latest by
    ``_commit_version``, a delete before an upsert within one commit (a commit that deletes a key's row and
    writes a new one, as an overwrite does, leaves the key), then ``order_by`` (descending)."""
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    kind = F.col(CHANGE_TYPE_COLUMN)
    upsert_last = F.when(kind == "delete", 0).otherwise(1)
    order = [F.col(COMMIT_VERSION_COLUMN).desc(), upsert_last.desc(), *[F.col(c).desc() for c in order_by]]
    window = Window.partitionBy(*keys).orderBy(*order)
    return (
        batch.where(kind != "update_preimage")
        .withColumn("_sparkonce_rank", F.row_number().over(window))
        .where("_sparkonce_rank = 1")
        .drop("_sparkonce_rank")
    )


def write_changes_batch(
    batch: DataFrame, batch_id: int, stage: MergeStage, *, app_id: str | None = None
) -> MergeResult:
    """Apply one batch of the input's change rows to the stage's table by keys, exactly once for ``(app_id,
    batch_id)``: the last change per key upserts (``insert``, ``update_postimage``) or deletes (``delete``)."""
    app_id = app_id or read_query_id(stage.checkpoint)
    columns = [c for c in batch.columns if c not in CHANGE_COLUMNS]
    assignments = {c: f"source.`{c}`" for c in columns}
    is_delete = f"source.`{CHANGE_TYPE_COLUMN}` = 'delete'"
    result = merge_into(
        latest_changes(batch, stage.keys, stage.order_by).alias("source"),
        stage.table,
        " AND ".join(f"target.`{k}` = source.`{k}`" for k in stage.keys),
        [
            MergeClause("matched", "delete", is_delete),
            MergeClause("matched", "update", None, assignments),
            MergeClause("notMatched", "insert", f"NOT ({is_delete})", assignments),
        ],
        target_alias="target",
        keys=[(k, k) for k in stage.keys],
        txn=BatchTxn(app_id, batch_id),
        target_file_rows=stage.target_file_rows,
        parameters={"keys": list(stage.keys), "orderBy": list(stage.order_by), "inputMode": "changes"},
    )
    crash_point("after_gold_merge", batch_id)
    return result


def enable_change_feed(table: str, stage: MergeStage) -> None:
    """Turn the change data feed on for the input ``table`` of a ``changes`` stage when it is off (one Delta
    commit; the stream's first batch reads the table's snapshot from then on)."""
    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.delta.ops.alter import alter_properties
    from sparkonce.delta.write.cdf import cdf_enabled

    if cdf_enabled(existing_table(table).metadata().configuration):
        return
    table_version = alter_properties(table, set={CDF_PROPERTY: "true"})
    log.info("stage %s: turned the change data feed on for its input %s at %s", stage.name, table, table_version)


class MergeKind(Kind[MergeStage]):
    """Input rows upserted into a Delta table by keys. Runs on the driver."""

    name = "merge"
    stage_class = MergeStage

    def parse(self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> MergeStage:
        key = f"stages.{name}"
        reader.known(
            data,
            key,
            {
                "table",
                "table_name",
                "checkpoint",
                "trigger",
                "keys",
                "order_by",
                "merge",
                "drift",
                "target_file_rows",
                "max_files_per_trigger",
                "input",
                "delete",
                "update",
                "insert",
                "partition_by",
                "input_mode",
            },
        )
        input_name = reader.input(data, key, DEFAULT_INPUT.get(name))
        keys = reader.names(data, "keys", key)
        if not keys:
            raise reader.fail(f"{key}.keys", "must name at least one column")
        input_mode = reader.string(data, "input_mode", key, default="rows")
        if input_mode not in ("rows", "changes"):
            raise reader.fail(
                f"{key}.input_mode", f"{input_mode!r} is not an input mode (supported: 'rows', 'changes')"
            )
        raw_order = data.get("order_by")
        if raw_order is None and input_mode == "rows":
            raise reader.fail(f"{key}.order_by", "missing: the event-time column that decides the latest row")
        if raw_order is None:
            order_by: tuple[str, ...] = ()
        else:
            order_by = (raw_order,) if isinstance(raw_order, str) else reader.names(data, "order_by", key)
            if not order_by or not all(order_by):
                raise reader.fail(f"{key}.order_by", "must name at least one column")
        if input_mode == "changes":
            if input_name == SOURCE:
                raise reader.fail(f"{key}.input_mode", '"changes" reads the change data feed of a stage\'s table')
            for option, default in (("merge", "latest"), ("drift", "fail")):
                if data.get(option, default) != default:
                    raise reader.fail(
                        f"{key}.{option}",
                        f'input_mode = "changes" applies changes by keys: {option} must be "{default}"',
                    )
        upstream = before.get(input_name)
        if upstream is not None:  # columns known on load (bronze's); the others: checked before the stage starts
            upstream_kind = kind_of(upstream)
            upstream_kind.check_input_columns(reader, upstream, f"{key}.keys", keys)
            upstream_kind.check_input_columns(reader, upstream, f"{key}.order_by", order_by)
        merge = reader.string(data, "merge", key, default="latest")
        if merge not in ("latest", "clauses"):
            raise reader.fail(f"{key}.merge", f"{merge!r} is not a merge rule (supported: 'latest', 'clauses')")
        clauses: dict[str, str | None] = {}
        for clause in ("delete", "update", "insert"):
            value = data.get(clause)
            if value is not None and merge == "latest":
                raise reader.fail(f"{key}.{clause}", 'SQL clauses go with merge = "clauses"')
            if value is True:
                value = "true"
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise reader.fail(f"{key}.{clause}", f"must be a SQL condition or true, not {value!r}")
            clauses[clause] = value
        if "partition_by" in data and merge != "clauses":
            raise reader.fail(f"{key}.partition_by", 'a partitioned merge target goes with merge = "clauses"')
        if merge == "clauses" and not any(clauses.values()):
            raise reader.fail(key, 'merge = "clauses" needs at least one of delete, update, insert')
        target = reader.integer(data, "target_file_rows", key)
        return MergeStage(
            table=reader.path(data, "table", key),
            checkpoint=reader.path(data, "checkpoint", key),
            trigger=reader.trigger(data, key),
            keys=keys,
            order_by=order_by,
            merge="clauses" if merge == "clauses" else "latest",
            drift=reader.drift(data, key),
            target_file_rows=target if target is not None else 100_000,
            max_files_per_trigger=reader.integer(data, "max_files_per_trigger", key),
            name=name,
            input=input_name,
            delete=clauses["delete"],
            update=clauses["update"],
            insert=clauses["insert"],
            partition_by=reader.names(data, "partition_by", key, default=()),
            input_mode="changes" if input_mode == "changes" else "rows",
        )

    def output_schemas(
        self, spark: SparkSession, config: PipelineConfig, stage: MergeStage, *, downstream: bool = False
    ) -> dict[str, StructType]:
        """The table is created by the first merge (none here), unless it is partitioned, or ``downstream``: a
        stage reading it needs it to exist, with the merge input's schema."""
        if downstream or stage.partition_by or stage.input_mode == "changes":
            return {stage.table: input_schema(spark, config, stage)}
        return {}

    def partition_by(self, stage: MergeStage) -> tuple[str, ...]:
        return stage.partition_by

    def check(self, spark: SparkSession, config: PipelineConfig, stage: MergeStage) -> None:
        check_merge(spark, config, stage)

    def start(
        self, spark: SparkSession, config: PipelineConfig, stage: MergeStage, options: dict[str, str]
    ) -> StreamingQuery:
        input_table = config.input_table(stage)
        if stage.input_mode == "changes":
            assert input_table is not None  # parse refuses changes from the Kafka source
            enable_change_feed(input_table, stage)
            options["readChangeFeed"] = "true"
        else:
            options["skipChangeCommits"] = "true"
        if stage.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(stage.max_files_per_trigger)
        source = spark.readStream.format("delta").options(**options).load(input_table)

        def process(batch: DataFrame, batch_id: int) -> None:
            if stage.input_mode == "changes":
                write_changes_batch(batch, batch_id, stage)
            else:
                write_merge_batch(batch, batch_id, stage)

        return start_foreach_batch(source, process, config, stage)

    def txn_records(self, stage: MergeStage, query_id: str) -> list[tuple[str, str]]:
        return [(stage.table, query_id)]

    def replayable(self, stage: MergeStage) -> bool:
        return True

    def replay_outputs(
        self, spark: SparkSession, config: PipelineConfig, stage: MergeStage, source: DataFrame
    ) -> list[tuple[str, DataFrame]]:
        if stage.input_mode == "changes":  # the table mirrors its input's rows
            return [(stage.table, latest_per_key(source, stage.keys, stage.order_by) if stage.order_by else source)]
        latest = latest_per_key(source, stage.keys, stage.order_by)
        if stage.merge == "clauses":
            # The whole input merged into an empty table: only the insert clause can apply.
            import pyspark.sql.functions as F

            inserted = latest.withColumn("source", F.struct(*latest.columns))
            condition = stage.insert if stage.insert is not None else "false"
            latest = inserted.where(condition).drop("source")
        return [(stage.table, latest)]


__all__ = [
    "MergeKind",
    "check_merge",
    "enable_change_feed",
    "latest_changes",
    "write_changes_batch",
    "write_merge_batch",
]
