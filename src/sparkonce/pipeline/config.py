"""The pipeline definition: a TOML file parsed once, on load, into frozen dataclasses. Runs on the driver (no Spark).

A definition names a Kafka source and any number of stages, each with its own table and checkpoint, each reading
the source or another stage's table (any DAG without cycles); the built-in raw -> bronze -> gold chain::

    name = "sensors"

    [source]
    bootstrap_servers = "127.0.0.1:9092"
    topic = "sensor_readings_raw"
    starting_offsets = "earliest"          # earliest | latest | Spark's JSON offsets
    max_offsets_per_trigger = 500          # optional

    [stages.raw]                           # Kafka -> Delta, everything kept
    table = "tables/raw"
    checkpoint = "checkpoints/raw"
    trigger = { availableNow = true }      # or { processingTime = "5 seconds" } (the default)

    [stages.bronze]                        # raw -> parsed rows; failures -> quarantine
    table = "tables/bronze"
    checkpoint = "checkpoints/bronze"
    quarantine = "tables/quarantine"
    schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"
    required = ["device_id", "reading_time"]
    drift = "fail"                         # or "add"

    [stages.gold]                          # bronze -> latest row per key
    table = "tables/gold"
    checkpoint = "checkpoints/gold"
    keys = ["device_id"]
    order_by = "reading_time"
    merge = "latest"

Relative paths are resolved against the directory of the file. A table can also be named as in Spark's catalog:
``table_name = "db.events"`` instead of ``table = "path"`` (also ``quarantine_name``, and ``table_name`` instead
of ``path`` in a fan-out's ``tables``), found in sparkonce's catalog in the warehouse directory (top-level
``warehouse = "path"``; default ``$SPARKONCE_WAREHOUSE``, else ``spark-warehouse`` beside the file). A name not
registered yet is a managed table (``<warehouse>/<db>.db/<table>``), registered when the pipeline first runs.
Every problem raises a
:class:`~sparkonce.errors.PipelineConfigError` naming the key path (``stages.bronze.checkpoint: shared with
stages.raw``); unknown keys are errors too, so a typo never falls back to a default silently.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from sparkonce.delta.catalog import WAREHOUSE_ENV, CatalogTable
from sparkonce.errors import PipelineConfigError, StorageError
from sparkonce.pipeline.transforms import Transform, read_sql
from sparkonce.storage import checkpoint_path, table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkonce.sinks.postgres.options import CommitProtocol

StageName = str
STAGE_ORDER: tuple[str, ...] = ("raw", "bronze", "gold")
"""The built-in stages, by name: a stage named so without a ``kind`` key has that kind (raw, bronze, merge)."""
SOURCE = "source"
"""The ``input`` of a stage that reads the Kafka source."""
StageKind = Literal["raw", "bronze", "merge", "transform", "postgres"]
_DEFAULT_KIND: dict[str, StageKind] = {"raw": "raw", "bronze": "bronze", "gold": "merge"}
_DEFAULT_INPUT = {"raw": SOURCE, "bronze": "raw", "gold": "bronze"}
DriftPolicy = Literal["fail", "add"]
MergeRule = Literal["latest", "clauses"]

LINEAGE_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp")
"""Columns bronze adds to every row (where in Kafka the record came from); payload fields may not use them."""

_PRIMITIVE_TYPES = {
    "STRING",
    "VARCHAR",
    "CHAR",
    "BOOLEAN",
    "BYTE",
    "TINYINT",
    "SHORT",
    "SMALLINT",
    "INT",
    "INTEGER",
    "LONG",
    "BIGINT",
    "FLOAT",
    "REAL",
    "DOUBLE",
    "DECIMAL",
    "NUMERIC",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
    "TIMESTAMP_NTZ",
    "BINARY",
}
_COMPLEX_TYPES = {"ARRAY", "MAP", "STRUCT"}
_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$", re.I
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_NAME = _NAME


@dataclass(frozen=True)
class Trigger:
    """When a stage's streaming query runs a batch: every ``interval`` or once over all available data."""

    kind: Literal["processingTime", "availableNow"]
    interval: str | None = None
    """``processingTime`` only, e.g. ``"5 seconds"``."""

    def spark_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``DataStreamWriter.trigger``."""
        if self.kind == "availableNow":
            return {"availableNow": True}
        return {"processingTime": self.interval}


@dataclass(frozen=True)
class SourceConfig:
    """The Kafka topic the raw stage reads."""

    bootstrap_servers: str
    topic: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True

    def spark_options(self) -> dict[str, str]:
        """Options of ``spark.readStream.format("sparkonce.kafka")``."""
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": self.topic,
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": str(self.fail_on_data_loss).lower(),
        }
        if self.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        return options


@dataclass(frozen=True)
class SchemaField:
    """One top-level field of the bronze payload schema."""

    name: str
    type: str
    """The Spark SQL type as written (``DOUBLE``, ``ARRAY<STRING>``)."""


@dataclass(frozen=True)
class RawStage:
    """Kafka -> Delta: key, value, topic, partition, offset, Kafka timestamp, arrival time (append only)."""

    table: str
    checkpoint: str
    trigger: Trigger
    name: StageName = "raw"
    input: str = SOURCE

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table,)


@dataclass(frozen=True)
class BronzeStage:
    """Raw -> bronze: parse the JSON value with the declared schema; failures go to the quarantine table."""

    table: str
    checkpoint: str
    trigger: Trigger
    quarantine: str
    schema: str
    """The DDL string as written; :attr:`fields` is its parsed form."""
    fields: tuple[SchemaField, ...]
    required: tuple[str, ...]
    drift: DriftPolicy = "fail"
    max_files_per_trigger: int | None = None
    name: StageName = "bronze"
    input: str = "raw"

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table, self.quarantine)


@dataclass(frozen=True)
class MergeStage:
    """A merge stage (``kind = "merge"``; the built-in gold): upsert the input's rows into a Delta table by keys,
    rewriting only the files that hold them. Rule ``latest``: the latest row per key (by ``order_by``) wins;
    rule ``clauses``: SQL conditions over ``source.<col>`` / ``target.<col>`` decide delete / update / insert."""

    table: str
    checkpoint: str
    trigger: Trigger
    keys: tuple[str, ...]
    order_by: tuple[str, ...]
    merge: MergeRule = "latest"
    drift: DriftPolicy = "fail"
    target_file_rows: int = 100_000
    max_files_per_trigger: int | None = None
    name: StageName = "gold"
    input: str = "bronze"
    delete: str | None = None
    """Rule ``clauses``: WHEN MATCHED AND delete THEN DELETE."""
    update: str | None = None
    """Rule ``clauses``: WHEN MATCHED [AND update] THEN UPDATE SET *."""
    insert: str | None = None
    """Rule ``clauses``: WHEN NOT MATCHED [AND insert] THEN INSERT *."""
    partition_by: tuple[str, ...] = ()
    """Partition columns of the table when the stage creates it."""

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table,)


@dataclass(frozen=True)
class OutputTable:
    """One Delta table a transform stage writes (its rows: the stage's output, filtered by ``where``)."""

    path: str
    name: str
    """Its name in the stage's fan-out: part of the txn app id (``f"{query id}:{name}"``)."""
    where: str | None = None
    """A SQL condition picking this table's rows; every row when None."""


@dataclass(frozen=True)
class TransformStage:
    """Input batches through a user transformation (Python or SQL) into one or more Delta tables, each exactly once."""

    name: StageName
    input: str
    """``"source"`` (the Kafka records, in the raw table's shape) or another stage's name (its first table)."""
    checkpoint: str
    trigger: Trigger
    outputs: tuple[OutputTable, ...]
    transform: Transform
    merge_schema: bool = False
    max_files_per_trigger: int | None = None

    @property
    def table(self) -> str:
        """The first output table (what a downstream stage reads)."""
        return self.outputs[0].path

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(o.path for o in self.outputs)


@dataclass(frozen=True)
class PostgresStage:
    """Input batches (optionally transformed) into a PostgreSQL table, exactly once per batch: the staging load on
    executors and one database transaction with the ledger row (:class:`~sparkonce.sinks.postgres.PostgresSink`)."""

    name: StageName
    input: str
    checkpoint: str
    trigger: Trigger
    pg_table: str
    """The target table, ``table`` or ``schema.table`` (the ``table`` key)."""
    dsn: str | None
    dsn_env: str | None
    """The environment variable holding the DSN (read when the stage starts), when ``dsn`` is not in the file."""
    keys: tuple[str, ...] = ()
    """Upsert keys; rows are appended when empty."""
    ledger_table: str = "sparkonce_ledger"
    transform: Transform | None = None
    max_files_per_trigger: int | None = None
    commit_protocol: CommitProtocol = "staging"
    """``staging`` or ``two-phase`` (append only), see :class:`~sparkonce.sinks.postgres.PostgresSinkOptions`."""

    @property
    def tables(self) -> tuple[str, ...]:
        """Delta tables written: none."""
        return ()

    def resolved_dsn(self) -> str:
        """The DSN, from the file or the environment.

        Raises:
            PipelineConfigError: the environment variable is not set.
        """
        if self.dsn is not None:
            return self.dsn
        assert self.dsn_env is not None
        value = os.environ.get(self.dsn_env, "").strip()
        if not value:
            raise PipelineConfigError(
                f"stages.{self.name}.dsn_env: the environment variable {self.dsn_env} is not set (the DSN of the "
                "PostgreSQL stage)"
            )
        return value


Stage = RawStage | BronzeStage | MergeStage | TransformStage | PostgresStage


@dataclass(frozen=True)
class PipelineConfig:
    """A validated pipeline definition. Paths are absolute."""

    path: str
    """The absolute path of the definition file (the owner recorded in each checkpoint)."""
    name: str
    source: SourceConfig
    stages: tuple[Stage, ...]
    """Every stage, upstream first (an input before the stages reading it)."""
    storage: tuple[tuple[str, str], ...] = ()
    """The ``[storage]`` table: storage options (delta-rs names) of every table of the pipeline."""
    storage_env: tuple[tuple[str, str], ...] = ()
    """The ``[storage_env]`` table: storage option -> the environment variable holding its value (read when the
    pipeline's tables are first used)."""
    warehouse: str | None = None
    """The warehouse directory of the catalog that ``table_name`` keys name tables in (None: no table is named)."""
    named_tables: tuple[CatalogTable, ...] = ()
    """The tables given by name, with their locations (``managed`` for a name not registered yet)."""

    def storage_options(self) -> dict[str, str]:
        """The storage options of the pipeline's tables: ``[storage]``, plus ``[storage_env]`` read now.

        Raises:
            PipelineConfigError: a ``[storage_env]`` variable is not set (naming the key and the file).
        """
        options = dict(self.storage)
        for name, variable in self.storage_env:
            value = os.environ.get(variable, "")
            if not value:
                raise PipelineConfigError(
                    f"storage_env.{name}: the environment variable {variable} is not set (the storage option "
                    f"{name} of every table; in {self.path})"
                )
            options[name] = value
        return options

    @property
    def raw(self) -> RawStage:
        """The raw stage (Kafka -> Delta).

        Raises:
            PipelineConfigError: the pipeline has none.
        """
        for stage in self.stages:
            if isinstance(stage, RawStage):
                return stage
        raise PipelineConfigError(f"{self.path}: the pipeline has no raw stage (Kafka -> Delta)")

    @property
    def bronze(self) -> BronzeStage | None:
        return next((s for s in self.stages if isinstance(s, BronzeStage)), None)

    @property
    def gold(self) -> MergeStage | None:
        return next((s for s in self.stages if isinstance(s, MergeStage)), None)

    def downstream(self, name: str) -> tuple[str, ...]:
        """The stages reading ``name``'s table, directly or through others, upstream first."""
        found: set[str] = set()
        for stage in self.stages:
            if stage.input == name or stage.input in found:
                found.add(stage.name)
        return tuple(s.name for s in self.stages if s.name in found)

    def stage(self, name: str) -> Stage:
        """The stage called ``name``.

        Raises:
            PipelineConfigError: no such stage in this pipeline.
        """
        for stage in self.stages:
            if stage.name == name:
                return stage
        defined = ", ".join(s.name for s in self.stages)
        raise PipelineConfigError(f"stages.{name}: not defined in {self.path} (defined: {defined})")

    def input_table(self, stage: Stage) -> str | None:
        """The Delta table a stage reads (None when it reads the Kafka source)."""
        if stage.input == SOURCE:
            return None
        return self.stage(stage.input).tables[0]


def use_storage(config: PipelineConfig, spark: SparkSession | None = None) -> None:
    """Give the pipeline's storage options (``[storage]``, ``[storage_env]``) to its tables. Runs on the driver.

    With ``spark``: as the session's ``spark.sparkonce.storage.*`` conf, registered again so the Delta sources
    and this process's table locations get them (``docs/storage.md``). Without: to this process's table locations
    only (commands that read the tables without Spark). Over the Spark conf; under explicit ``storage.*`` options.

    Raises:
        PipelineConfigError: a ``[storage_env]`` variable is not set.
    """
    options = config.storage_options()
    if not options:
        return
    from sparkonce.storage import SESSION_CONF_PREFIX, session_storage_options, set_session_storage_options

    if spark is None:
        set_session_storage_options({**session_storage_options(), **options})
        return
    import sparkonce

    for name, value in options.items():
        spark.conf.set(SESSION_CONF_PREFIX + name, value)
    sparkonce.register(spark)


def use_catalog(config: PipelineConfig, spark: SparkSession) -> None:
    """Register the tables the pipeline names (``table_name`` keys) that the catalog does not hold yet, as managed
    tables where the parse placed them, and point the session's catalog at the pipeline's warehouse (so
    ``spark.table("db.t")`` in a transform finds them). Runs on the driver, before any stage starts.

    Raises:
        PipelineConfigError: a name was registered meanwhile at another location.
    """
    if config.warehouse is None:
        return
    from sparkonce.delta.catalog import WAREHOUSE_CONF, DeltaCatalog
    from sparkonce.errors import SqlError

    spark.conf.set(WAREHOUSE_CONF, config.warehouse)
    catalog = DeltaCatalog(config.warehouse)
    for table in config.named_tables:
        try:
            catalog.add(table.database, table.name, table.location, managed=table.managed)
        except SqlError:  # registered already (by an earlier run, or meanwhile)
            found = catalog.get(table.database, table.name)
            if found is None or found.location.rstrip("/") != table.location.rstrip("/"):
                where = found.location if found is not None else "nowhere"
                raise PipelineConfigError(
                    f"{config.path}: table {table.database}.{table.name} is registered at {where}, not at "
                    f"{table.location} where the pipeline file resolved it; load the file again"
                ) from None


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate a pipeline definition file.

    Raises:
        PipelineConfigError: the file is missing, not TOML, or a key is missing, unknown or invalid.
    """
    file = Path(path).absolute()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise PipelineConfigError(f"{file}: pipeline file not found") from err
    except OSError as err:
        raise PipelineConfigError(f"{file}: cannot read the pipeline file ({err.strerror})") from err
    return parse_pipeline(text, file)


def parse_pipeline(text: str, path: str | os.PathLike[str]) -> PipelineConfig:
    """Validate the TOML ``text`` of the pipeline file at ``path`` (relative paths resolve against its folder).

    Raises:
        PipelineConfigError: the text is not TOML, or a key is missing, unknown or invalid.
    """
    file = Path(path).absolute()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PipelineConfigError(f"{file}: not valid TOML: {err}") from err
    return _Parser(file).pipeline(data)


class _Parser:
    """Walks the TOML document once; every error names the key path. Runs on the driver."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.base = file.parent
        self.warehouse: str | None = None
        self.named: dict[tuple[str, str], CatalogTable] = {}

    def fail(self, key: str, problem: str) -> PipelineConfigError:
        return PipelineConfigError(f"{key}: {problem} (in {self.file})")

    def pipeline(self, data: Mapping[str, Any]) -> PipelineConfig:
        self.known(data, "", {"name", "source", "stages", "storage", "storage_env", "warehouse"})
        name = self.string(data, "name", "", default=self.file.stem)
        assert name is not None
        warehouse = self.string(data, "warehouse", "", default=os.environ.get(WAREHOUSE_ENV) or "spark-warehouse")
        assert warehouse is not None
        self.warehouse = os.path.join(self.base, os.path.expanduser(warehouse))
        source = self.source(self.table(data, "source", ""))
        stages = self.table(data, "stages", "")
        if not stages:
            raise self.fail("stages", "defines no stage")
        parsed: dict[str, Stage] = {}
        for stage_name in stages:
            if not _NAME.match(stage_name):
                raise self.fail(f"stages.{stage_name}", "a stage name uses letters, digits and underscores")
            parsed[stage_name] = self.stage(stage_name, self.table(stages, stage_name, "stages"), parsed)
        config = PipelineConfig(
            str(self.file),
            name,
            source,
            self.upstream_first(parsed),
            storage=self.storage_table(data, "storage"),
            storage_env=self.storage_table(data, "storage_env"),
            warehouse=self.warehouse if self.named else None,
            named_tables=tuple(self.named.values()),
        )
        both = sorted({n.lower() for n, _ in config.storage} & {n.lower() for n, _ in config.storage_env})
        if both:
            raise self.fail(f"storage_env.{both[0]}", "is also set in [storage]; give each option once")
        self.check_paths(config)
        return config

    def stage(self, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> Stage:
        key = f"stages.{name}"
        kind = data.get("kind", _DEFAULT_KIND.get(name, "transform"))
        if kind not in ("raw", "bronze", "merge", "transform", "postgres"):
            raise self.fail(f"{key}.kind", f"{kind!r} is not a stage kind (raw, bronze, merge, transform, postgres)")
        fields = {k: v for k, v in data.items() if k != "kind"}
        if kind == "raw":
            return self.raw(name, fields)
        if kind == "bronze":
            return self.bronze(name, fields)
        if kind == "merge":
            return self.merge_stage(name, fields, before)
        if kind == "postgres":
            return self.postgres(name, fields)
        return self.transform_stage(name, fields)

    def upstream_first(self, stages: Mapping[str, Stage]) -> tuple[Stage, ...]:
        """The stages ordered so each comes after its input; unknown inputs and cycles are errors."""
        for stage in stages.values():
            if stage.input != SOURCE and stage.input not in stages:
                raise self.fail(
                    f"stages.{stage.name}.input",
                    f"{stage.input!r} is not a stage of this pipeline (stages: {sorted(stages)}) nor 'source'",
                )
            if stage.input == stage.name:
                raise self.fail(f"stages.{stage.name}.input", "a stage cannot read its own table")
            if stage.input != SOURCE and isinstance(stages[stage.input], PostgresStage):
                raise self.fail(
                    f"stages.{stage.name}.input",
                    f"stage {stage.input!r} writes PostgreSQL; a stage reads the Kafka source or a Delta table",
                )
        ordered: list[Stage] = []
        done: set[str] = set()
        remaining = dict(stages)
        while remaining:
            ready = [s for s in remaining.values() if s.input == SOURCE or s.input in done]
            if not ready:
                cycle = " -> ".join(sorted(remaining))
                raise self.fail("stages", f"the stages {cycle} read one another in a cycle")
            for stage in ready:
                ordered.append(stage)
                done.add(stage.name)
                del remaining[stage.name]
        return tuple(ordered)

    # -- sections ----------------------------------------------------------------------------------------------

    def source(self, data: Mapping[str, Any]) -> SourceConfig:
        key = "source"
        self.known(
            data,
            key,
            {"bootstrap_servers", "topic", "starting_offsets", "max_offsets_per_trigger", "fail_on_data_loss"},
        )
        servers = self.string(data, "bootstrap_servers", key)
        topic = self.string(data, "topic", key)
        assert servers is not None and topic is not None
        starting = self.string(data, "starting_offsets", key, default="earliest")
        assert starting is not None
        if starting not in ("earliest", "latest") and not starting.lstrip().startswith("{"):
            raise self.fail(f"{key}.starting_offsets", f"{starting!r} is not earliest, latest or a JSON object")
        return SourceConfig(
            bootstrap_servers=servers,
            topic=topic,
            starting_offsets=starting,
            max_offsets_per_trigger=self.integer(data, "max_offsets_per_trigger", key),
            fail_on_data_loss=self.boolean(data, "fail_on_data_loss", key, default=True),
        )

    def raw(self, name: str, data: Mapping[str, Any]) -> RawStage:
        key = f"stages.{name}"
        self.known(data, key, {"table", "table_name", "checkpoint", "trigger", "input"})
        if data.get("input", SOURCE) != SOURCE:
            raise self.fail(f"{key}.input", "a raw stage reads the Kafka source: input = 'source'")
        return RawStage(
            self.path(data, "table", key), self.path(data, "checkpoint", key), self.trigger(data, key), name=name
        )

    def bronze(self, name: str, data: Mapping[str, Any]) -> BronzeStage:
        key = f"stages.{name}"
        self.known(
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
        schema = self.string(data, "schema", key)
        assert schema is not None
        fields = self.ddl(schema, f"{key}.schema")
        names = [f.name for f in fields]
        required = self.names(data, "required", key, default=())
        for field_name in required:
            if field_name not in names:
                raise self.fail(f"{key}.required", f"{field_name!r} is not a field of the schema {names}")
        return BronzeStage(
            table=self.path(data, "table", key),
            checkpoint=self.path(data, "checkpoint", key),
            trigger=self.trigger(data, key),
            quarantine=self.path(data, "quarantine", key),
            schema=schema,
            fields=fields,
            required=required,
            drift=self.drift(data, key),
            max_files_per_trigger=self.integer(data, "max_files_per_trigger", key),
            name=name,
            input=self.input(data, key, _DEFAULT_INPUT.get(name)),
        )

    def input(self, data: Mapping[str, Any], key: str, default: str | None) -> str:
        value = self.string(data, "input", key, default=default)
        if value is None:
            raise self.fail(f"{key}.input", "missing: another stage's name, or 'source' for the Kafka source")
        return value

    def postgres(self, name: str, data: Mapping[str, Any]) -> PostgresStage:
        from sparkonce.errors import OptionError
        from sparkonce.sinks.postgres.options import CommitProtocol, appends_only_problem, table_parts

        key = f"stages.{name}"
        self.known(
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
            raise self.fail(key, 'give exactly one of dsn = "postgresql://..." and dsn_env = "ENV_VARIABLE"')
        table = self.string(data, "table", key)
        ledger = self.string(data, "ledger_table", key, default="sparkonce_ledger")
        assert table is not None and ledger is not None
        for option, value in (("table", table), ("ledger_table", ledger)):
            try:
                table_parts(option, value)
            except OptionError as err:
                raise self.fail(f"{key}.{option}", str(err)) from err
        if "transform" in data and "sql" in data:
            raise self.fail(key, "give at most one of transform and sql")
        keys = self.names(data, "keys", key, default=())
        named = self.string(data, "commit_protocol", key, default="staging")
        if named not in get_args(CommitProtocol):
            raise self.fail(f"{key}.commit_protocol", f"{named!r} must be one of {list(get_args(CommitProtocol))}")
        protocol = cast(CommitProtocol, named)
        problem = appends_only_problem(protocol, keys)
        if problem is not None:
            raise self.fail(f"{key}.commit_protocol", problem)
        return PostgresStage(
            name=name,
            input=self.input(data, key, None),
            checkpoint=self.path(data, "checkpoint", key),
            trigger=self.trigger(data, key),
            pg_table=table,
            dsn=self.string(data, "dsn", key) if "dsn" in data else None,
            dsn_env=self.string(data, "dsn_env", key) if "dsn_env" in data else None,
            keys=keys,
            ledger_table=ledger,
            transform=self.optional_transform(data, key),
            max_files_per_trigger=self.integer(data, "max_files_per_trigger", key),
            commit_protocol=protocol,
        )

    def optional_transform(self, data: Mapping[str, Any], key: str) -> Transform | None:
        if "transform" in data:
            function = self.string(data, "transform", key)
            return Transform(f"{key}.transform", function=function, base_dir=str(self.base))
        if "sql" in data:
            text = self.string(data, "sql", key)
            assert text is not None
            return Transform(f"{key}.sql", sql=read_sql(f"{key}.sql", text, self.base), base_dir=str(self.base))
        return None

    def transform_stage(self, name: str, data: Mapping[str, Any]) -> TransformStage:
        key = f"stages.{name}"
        self.known(
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
            raise self.fail(key, 'give exactly one of transform = "module:function" and sql = "SELECT ... {input}"')
        transform = self.optional_transform(data, key)
        assert transform is not None
        return TransformStage(
            name=name,
            input=self.input(data, key, None),
            checkpoint=self.path(data, "checkpoint", key),
            trigger=self.trigger(data, key),
            outputs=self.outputs(data, key),
            transform=transform,
            merge_schema=self.boolean(data, "merge_schema", key, default=False),
            max_files_per_trigger=self.integer(data, "max_files_per_trigger", key),
        )

    def outputs(self, data: Mapping[str, Any], key: str) -> tuple[OutputTable, ...]:
        """``table = "path"`` (or ``table_name``), or ``tables = ["path", { path = "...", name = "...", where = "SQL"
        }, ...]`` (``table_name`` instead of ``path`` for a table name)."""
        if ("table" in data or "table_name" in data) == ("tables" in data):
            raise self.fail(key, 'give exactly one of table = "path" and tables = [...] (a fan-out)')
        if "table" in data or "table_name" in data:
            path = self.path(data, "table", key)
            return (OutputTable(path, os.path.basename(path)),)
        items = data["tables"]
        if not isinstance(items, list) or not items:
            raise self.fail(f"{key}.tables", "must be a non-empty list of paths or { path, name, where } tables")
        outputs: list[OutputTable] = []
        for index, item in enumerate(items):
            item_key = f"{key}.tables[{index}]"
            entry = {"path": item} if isinstance(item, str) else item
            if not isinstance(entry, dict):
                raise self.fail(item_key, f"must be a path or a table {{ path, name, where }}, not {item!r}")
            self.known(entry, item_key, {"path", "table_name", "name", "where"})
            path = self.path(entry, "path", item_key, name_key="table_name")
            table_name = self.string(entry, "name", item_key, default=os.path.basename(path))
            assert table_name is not None
            where = entry.get("where")
            if where is not None and (not isinstance(where, str) or not where.strip()):
                raise self.fail(f"{item_key}.where", f"must be a SQL condition, not {where!r}")
            if any(o.name == table_name for o in outputs):
                raise self.fail(f"{item_key}.name", f"{table_name!r} names two tables of the stage; give name = ...")
            outputs.append(OutputTable(path, table_name, where))
        return tuple(outputs)

    def merge_stage(self, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> MergeStage:
        key = f"stages.{name}"
        self.known(
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
            },
        )
        input_name = self.input(data, key, _DEFAULT_INPUT.get(name))
        keys = self.names(data, "keys", key)
        if not keys:
            raise self.fail(f"{key}.keys", "must name at least one column")
        raw_order = data.get("order_by")
        if raw_order is None:
            raise self.fail(f"{key}.order_by", "missing: the event-time column that decides the latest row")
        order_by = (raw_order,) if isinstance(raw_order, str) else self.names(data, "order_by", key)
        if not order_by or not all(order_by):
            raise self.fail(f"{key}.order_by", "must name at least one column")
        bronze = before.get(input_name)
        checked: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if isinstance(bronze, BronzeStage):  # other inputs: the columns are checked against the input's schema
            checked = (("keys", keys), ("order_by", order_by))
        columns = {f.name for f in bronze.fields} | set(LINEAGE_COLUMNS) if isinstance(bronze, BronzeStage) else set()
        for list_key, names in checked:
            assert isinstance(bronze, BronzeStage)
            for column in names:
                if column not in columns:
                    raise self.fail(f"{key}.{list_key}", f"{column!r} is not a bronze column {sorted(columns)}")
                if column in {f.name for f in bronze.fields} and column not in bronze.required:
                    raise self.fail(
                        f"{key}.{list_key}",
                        f"{column!r} must be listed in stages.{bronze.name}.required (a null {list_key[:-1]} cannot "
                        "be merged)",
                    )
        merge = self.string(data, "merge", key, default="latest")
        if merge not in ("latest", "clauses"):
            raise self.fail(f"{key}.merge", f"{merge!r} is not a merge rule (supported: 'latest', 'clauses')")
        clauses: dict[str, str | None] = {}
        for clause in ("delete", "update", "insert"):
            value = data.get(clause)
            if value is not None and merge == "latest":
                raise self.fail(f"{key}.{clause}", 'SQL clauses go with merge = "clauses"')
            if value is True:
                value = "true"
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise self.fail(f"{key}.{clause}", f"must be a SQL condition or true, not {value!r}")
            clauses[clause] = value
        if "partition_by" in data and merge != "clauses":
            raise self.fail(f"{key}.partition_by", 'a partitioned merge target goes with merge = "clauses"')
        if merge == "clauses" and not any(clauses.values()):
            raise self.fail(key, 'merge = "clauses" needs at least one of delete, update, insert')
        target = self.integer(data, "target_file_rows", key)
        return MergeStage(
            table=self.path(data, "table", key),
            checkpoint=self.path(data, "checkpoint", key),
            trigger=self.trigger(data, key),
            keys=keys,
            order_by=order_by,
            merge="clauses" if merge == "clauses" else "latest",
            drift=self.drift(data, key),
            target_file_rows=target if target is not None else 100_000,
            max_files_per_trigger=self.integer(data, "max_files_per_trigger", key),
            name=name,
            input=input_name,
            delete=clauses["delete"],
            update=clauses["update"],
            insert=clauses["insert"],
            partition_by=self.names(data, "partition_by", key, default=()),
        )

    def check_paths(self, config: PipelineConfig) -> None:
        """One checkpoint per stage; no table or checkpoint used twice or nested in another."""
        places: list[tuple[str, str]] = []
        for stage in config.stages:
            places.append((f"stages.{stage.name}.checkpoint", stage.checkpoint))
            if isinstance(stage, PostgresStage):
                continue
            places.append((f"stages.{stage.name}.table", stage.table))
            if isinstance(stage, BronzeStage):
                places.append((f"stages.{stage.name}.quarantine", stage.quarantine))
            if isinstance(stage, TransformStage):
                places += [(f"stages.{stage.name}.tables[{i}]", t) for i, t in enumerate(stage.tables[1:], 1)]
        for index, (key, path) in enumerate(places):
            for other_key, other in places[:index]:
                if path == other:
                    what = (
                        "shared with"
                        if key.endswith("checkpoint") and other_key.endswith("checkpoint")
                        else "same path as"
                    )
                    raise self.fail(key, f"{what} {other_key} ({path}); each stage needs its own checkpoint and tables")
                if _inside(path, other) or _inside(other, path):
                    raise self.fail(key, f"{path} and {other_key} ({other}) are nested in one another")

    # -- values ------------------------------------------------------------------------------------------------

    def known(self, data: Mapping[str, Any], key: str, allowed: set[str]) -> None:
        for name in data:
            if name not in allowed:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, f"unknown key (expected one of {sorted(allowed)})")

    def table(self, data: Mapping[str, Any], name: str, parent: str) -> Mapping[str, Any]:
        key = f"{parent}.{name}" if parent else name
        value = data.get(name)
        if value is None:
            raise self.fail(key, "missing")
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, not {type(value).__name__}")
        return value

    def string(self, data: Mapping[str, Any], name: str, parent: str, *, default: str | None = None) -> str | None:
        key = f"{parent}.{name}" if parent else name
        value = data.get(name)
        if value is None:
            if default is None:
                raise self.fail(key, "missing")
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, not {value!r}")
        return value.strip()

    def integer(self, data: Mapping[str, Any], name: str, parent: str) -> int | None:
        value = data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{parent}.{name}", f"must be a positive integer, not {value!r}")
        return value

    def boolean(self, data: Mapping[str, Any], name: str, parent: str, *, default: bool) -> bool:
        value = data.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(f"{parent}.{name}", f"must be true or false, not {value!r}")
        return value

    def names(
        self, data: Mapping[str, Any], name: str, parent: str, *, default: tuple[str, ...] | None = None
    ) -> tuple[str, ...]:
        key = f"{parent}.{name}"
        value = data.get(name)
        if value is None:
            if default is None:
                raise self.fail(key, "missing")
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"must be a list of column names, not {value!r}")
        if len(set(value)) != len(value):
            raise self.fail(key, f"lists a column twice: {value}")
        return tuple(value)

    def path(self, data: Mapping[str, Any], name: str, parent: str, *, name_key: str | None = None) -> str:
        """The location given by ``name`` (a path or URI), or by ``<name>_name`` (``name_key``: a table name)."""
        name_key = name_key or f"{name}_name"
        if name != "checkpoint" and name_key in data:
            if name in data:
                raise self.fail(f"{parent}.{name_key}", f"give one of {name} (a path) and {name_key} (a table name)")
            return self.named_table(data, name_key, parent)
        value = self.string(data, name, parent)
        assert value is not None
        is_uri = value.lower().startswith("file:") or "://" in value
        where = value if is_uri else os.path.join(self.base, os.path.expanduser(value))
        try:
            return checkpoint_path(where) if name == "checkpoint" else str(table_location(where))
        except StorageError as err:
            raise self.fail(f"{parent}.{name}", str(err)) from err

    def named_table(self, data: Mapping[str, Any], key: str, parent: str) -> str:
        """The location of the catalog table named by ``key`` (its registered one, or the managed one to be)."""
        from sparkonce.delta.catalog import DeltaCatalog, table_key
        from sparkonce.errors import SqlError

        text = self.string(data, key, parent)
        assert text is not None and self.warehouse is not None
        parts = text.strip().split(".")
        table = table_key(None, parts)
        if table is None or not all(_NAME.match(p) for p in table):
            raise self.fail(f"{parent}.{key}", f"{text!r} is not a table name (name, or database.name)")
        catalog = DeltaCatalog(self.warehouse)
        try:
            found = catalog.get(*table)
        except SqlError as err:
            raise self.fail(f"{parent}.{key}", str(err)) from err
        entry = found or CatalogTable(*table, catalog.managed_location(*table), managed=True)
        self.named[table] = entry
        try:
            return str(table_location(entry.location))
        except StorageError as err:
            raise self.fail(f"{parent}.{key}", f"table {text}: {err}") from err

    def storage_table(self, data: Mapping[str, Any], name: str) -> tuple[tuple[str, str], ...]:
        """``[storage]`` (option -> value) or ``[storage_env]`` (option -> environment variable), validated."""
        if name not in data:
            return ()
        table = self.table(data, name, "")
        entries: list[tuple[str, str]] = []
        for option, value in table.items():
            key = f"{name}.{option}"
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", option):
                raise self.fail(key, "is not a storage option name (delta-rs names: AWS_ENDPOINT_URL, conditional_put)")
            if name == "storage" and isinstance(value, bool):
                value = "true" if value else "false"
            elif name == "storage" and isinstance(value, int):
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                what = "an environment variable name" if name == "storage_env" else "a string (or true/false, a number)"
                raise self.fail(key, f"must be {what}, not {value!r}")
            if name == "storage_env" and not _ENV_NAME.match(value.strip()):
                raise self.fail(key, f"{value!r} is not an environment variable name")
            entries.append((option, value.strip()))
        return tuple(entries)

    def drift(self, data: Mapping[str, Any], parent: str) -> DriftPolicy:
        value = data.get("drift", "fail")
        if value not in ("fail", "add"):
            raise self.fail(f"{parent}.drift", f"{value!r} is not a drift policy (fail or add)")
        return value  # type: ignore[no-any-return]

    def trigger(self, data: Mapping[str, Any], parent: str) -> Trigger:
        key = f"{parent}.trigger"
        value = data.get("trigger")
        if value is None:
            return Trigger("processingTime", "5 seconds")
        if not isinstance(value, dict) or len(value) != 1:
            raise self.fail(key, 'must be { processingTime = "5 seconds" } or { availableNow = true }')
        (kind, setting), *_ = value.items()
        if kind == "availableNow":
            if setting is not True:
                raise self.fail(f"{key}.availableNow", f"must be true, not {setting!r}")
            return Trigger("availableNow")
        if kind == "processingTime":
            if not isinstance(setting, str) or not _DURATION.match(setting):
                raise self.fail(f"{key}.processingTime", f'{setting!r} is not a duration like "5 seconds"')
            return Trigger("processingTime", setting.strip())
        raise self.fail(f"{key}.{kind}", "unknown trigger (processingTime or availableNow)")

    def ddl(self, text: str, key: str) -> tuple[SchemaField, ...]:
        """Parse ``name TYPE, ...`` (top level only; nested types are checked for balance, Spark checks them)."""
        fields: list[SchemaField] = []
        for part in _split_top_level(text, key, self):
            match = re.match(r"^\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+(.+?)\s*$", part, re.S)
            if match is None:
                raise self.fail(key, f"{part.strip()!r} is not 'name TYPE'")
            name = match.group(1).strip("`")
            type_text = re.sub(r"\s+(NOT\s+NULL|COMMENT\s+'.*')\s*$", "", match.group(2), flags=re.I | re.S)
            base = re.match(r"^([A-Za-z_]+)", type_text)
            type_name = base.group(1).upper() if base else ""
            if type_name not in _PRIMITIVE_TYPES | _COMPLEX_TYPES:
                raise self.fail(key, f"field {name!r}: {type_text!r} is not a Spark SQL type")
            if type_name in _COMPLEX_TYPES and "<" not in type_text:
                raise self.fail(key, f"field {name!r}: {type_name} needs its element types, e.g. {type_name}<STRING>")
            if name in LINEAGE_COLUMNS or name.startswith("_sparkonce"):
                raise self.fail(key, f"field {name!r} is reserved for lineage columns {list(LINEAGE_COLUMNS)}")
            if any(f.name == name for f in fields):
                raise self.fail(key, f"field {name!r} is declared twice")
            if not _NAME.match(name):
                raise self.fail(key, f"field {name!r}: use letters, digits and underscores")
            fields.append(SchemaField(name, type_text))
        if not fields:
            raise self.fail(key, "declares no field")
        return tuple(fields)


def _split_top_level(text: str, key: str, parser: _Parser) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
            if depth < 0:
                raise parser.fail(key, f"unbalanced {char!r} in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise parser.fail(key, f"unbalanced brackets in {text!r}")
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _inside(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip(os.sep) + os.sep)


__all__ = [
    "LINEAGE_COLUMNS",
    "STAGE_ORDER",
    "BronzeStage",
    "DriftPolicy",
    "MergeStage",
    "OutputTable",
    "PipelineConfig",
    "PostgresStage",
    "RawStage",
    "SchemaField",
    "SourceConfig",
    "SOURCE",
    "Stage",
    "StageKind",
    "StageName",
    "TransformStage",
    "Trigger",
    "load_pipeline",
    "parse_pipeline",
    "use_catalog",
    "use_storage",
]
