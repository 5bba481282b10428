"""The postgres kind: Delta stream of its input (or the Kafka source) -> ``foreachBatch``: the optional transform,
then the PostgreSQL sink (:class:`~sparkonce.sinks.postgres.PostgresSink`): the staging load on executors and one
database transaction with the ledger row ``(f"{query id}:{table}", batch id)``. Runs on the driver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast, get_args

from sparkonce.pipeline.kinds.base import Kind, OutputFacts
from sparkonce.pipeline.model import PipelineConfig, PostgresStage, Stage
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.records import TargetCheck
from sparkonce.pipeline.streams import input_schema, stage_source, start_foreach_batch
from sparkonce.pipeline.transforms import check_transform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from sparkonce.sinks.postgres import PostgresSink


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


def _check_postgres(stage: PostgresStage, query_id: str, committed: set[int]) -> TargetCheck:
    from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions

    record_id = f"{query_id}:{stage.pg_table}"
    sink = PostgresSink(
        PostgresSinkOptions(
            dsn=stage.resolved_dsn(), table=stage.pg_table, app_id=record_id, ledger_table=stage.ledger_table
        )
    )
    ledger: list[Any] = sink.ledger_rows()
    counts = Counter(int(row[0]) for row in ledger)
    difference = None
    if not stage.keys:
        moved = sum(int(row[1]) for row in ledger)
        difference = sink.target_rows() - moved
    return TargetCheck(
        stage=stage.name,
        target=f"postgresql:{stage.pg_table}",
        record_id=record_id,
        committed_batches=len(committed),
        missing=tuple(sorted(committed - set(counts))),
        duplicated=tuple(sorted(v for v, n in counts.items() if n > 1)),
        row_difference=difference,
    )


class PostgresKind(Kind[PostgresStage]):
    """Input batches into a PostgreSQL table, exactly once per batch. Runs on the driver."""

    name = "postgres"
    stage_class = PostgresStage
    unreadable = "writes PostgreSQL"

    def parse(
        self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]
    ) -> PostgresStage:
        from sparkonce.errors import OptionError
        from sparkonce.sinks.postgres.options import CommitProtocol, appends_only_problem, table_parts

        key = f"stages.{name}"
        reader.known(
            data,
            key,
            {
                "input",
                "checkpoint",
                "trigger",
                "dsn",
                "dsn_env",
                "table",
                "keys",
                "ledger_table",
                "transform",
                "sql",
                "max_files_per_trigger",
                "commit_protocol",
            },
        )
        if ("dsn" in data) == ("dsn_env" in data):
            raise reader.fail(key, 'give exactly one of dsn = "postgresql://..." and dsn_env = "ENV_VARIABLE"')
        table = reader.string(data, "table", key)
        ledger = reader.string(data, "ledger_table", key, default="sparkonce_ledger")
        assert table is not None and ledger is not None
        for option, value in (("table", table), ("ledger_table", ledger)):
            try:
                table_parts(option, value)
            except OptionError as err:
                raise reader.fail(f"{key}.{option}", str(err)) from err
        if "transform" in data and "sql" in data:
            raise reader.fail(key, "give at most one of transform and sql")
        keys = reader.names(data, "keys", key, default=())
        named = reader.string(data, "commit_protocol", key, default="staging")
        if named not in get_args(CommitProtocol):
            raise reader.fail(f"{key}.commit_protocol", f"{named!r} must be one of {list(get_args(CommitProtocol))}")
        protocol = cast(CommitProtocol, named)
        problem = appends_only_problem(protocol, keys)
        if problem is not None:
            raise reader.fail(f"{key}.commit_protocol", problem)
        return PostgresStage(
            name=name,
            input=reader.input(data, key, None),
            checkpoint=reader.path(data, "checkpoint", key),
            trigger=reader.trigger(data, key),
            pg_table=table,
            dsn=reader.string(data, "dsn", key) if "dsn" in data else None,
            dsn_env=reader.string(data, "dsn_env", key) if "dsn_env" in data else None,
            keys=keys,
            ledger_table=ledger,
            transform=reader.optional_transform(data, key),
            max_files_per_trigger=reader.integer(data, "max_files_per_trigger", key),
            commit_protocol=protocol,
        )

    def check(self, spark: SparkSession, config: PipelineConfig, stage: PostgresStage) -> None:
        postgres_sink(spark, config, stage).check()

    def start(
        self, spark: SparkSession, config: PipelineConfig, stage: PostgresStage, options: dict[str, str]
    ) -> StreamingQuery:
        sink = postgres_sink(spark, config, stage)
        bound = stage.transform.resolve() if stage.transform is not None else None
        schema = input_schema(spark, config, stage)
        if bound is not None:
            schema = check_transform(bound, spark, schema)
        sink.check(schema)  # target, staging and ledger tables exist before the first batch
        source = stage_source(spark, config, stage, options)

        def process(batch: DataFrame, batch_id: int) -> None:
            sink.write_batch(bound.apply(batch, batch_id) if bound is not None else batch, batch_id)

        return start_foreach_batch(source, process, config, stage)

    def verify(self, stage: PostgresStage, query_id: str, committed: set[int]) -> list[TargetCheck]:
        """The ledger rows against the committed batches; in append mode, the target's rows against the rows the
        ledger says were moved.

        Raises:
            PipelineConfigError: the DSN's environment variable is unset.
            SinkError: the database is unreachable.
        """
        return [_check_postgres(stage, query_id, committed)]

    def describe(self, stage: PostgresStage, query_id: str, storage_options: Mapping[str, str]) -> list[OutputFacts]:
        """The target table and its ledger app id; ``status`` does not connect to the database (``check`` does)."""
        return [OutputFacts(f"postgresql:{stage.pg_table}", f"{query_id}:{stage.pg_table}")]


__all__ = ["PostgresKind", "postgres_sink"]
