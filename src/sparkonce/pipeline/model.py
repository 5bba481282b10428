"""The pipeline definition's model: frozen dataclasses of the source, every stage kind and the pipeline (no
Spark, no I/O). :mod:`sparkonce.pipeline.loader` builds them from a TOML file.

Runs on the driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkonce.delta.table.catalog import CatalogTable
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.transforms import Transform

if TYPE_CHECKING:
    from sparkonce.sinks.postgres.options import CommitProtocol

StageName = str
STAGE_ORDER: tuple[str, ...] = ("raw", "bronze", "gold")
"""The built-in stages, by name: a stage named so without a ``kind`` key has that kind (raw, bronze, merge)."""
SOURCE = "source"
"""The ``input`` of a stage that reads the Kafka source."""
DEFAULT_INPUT: dict[str, str] = {"raw": SOURCE, "bronze": "raw", "gold": "bronze"}
"""The ``input`` of a built-in stage (by name) that does not give one."""
StageKind = Literal["raw", "bronze", "merge", "transform", "postgres"]
DriftPolicy = Literal["fail", "add"]
MergeRule = Literal["latest", "clauses"]
InputMode = Literal["rows", "changes"]
"""What a merge stage reads of its input table: its appended rows, or its change data feed (upserts and deletes)."""

LINEAGE_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp")
"""Columns bronze adds to every row (where in Kafka the record came from); payload fields may not use them."""


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

    kind: ClassVar[StageKind] = "raw"
    """Its kind: the key of its behaviour in :data:`sparkonce.pipeline.kinds.KINDS`."""

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

    kind: ClassVar[StageKind] = "bronze"
    """Its kind: the key of its behaviour in :data:`sparkonce.pipeline.kinds.KINDS`."""

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

    kind: ClassVar[StageKind] = "merge"
    """Its kind: the key of its behaviour in :data:`sparkonce.pipeline.kinds.KINDS`."""

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
    input_mode: InputMode = "rows"
    """``changes``: the input table's change data feed, applied by ``keys`` (inserts and update post-images
    upserted, deletes deleted; the table mirrors its input)."""

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

    kind: ClassVar[StageKind] = "transform"
    """Its kind: the key of its behaviour in :data:`sparkonce.pipeline.kinds.KINDS`."""

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

    kind: ClassVar[StageKind] = "postgres"
    """Its kind: the key of its behaviour in :data:`sparkonce.pipeline.kinds.KINDS`."""

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
class CompactionSchedule:
    """A stage's ``optimize`` table: compact its Delta tables (OPTIMIZE, ``dataChange=false``) after every
    ``every_batches`` micro-batches of its query, while it runs (:mod:`sparkonce.pipeline.compaction`)."""

    stage: StageName
    every_batches: int
    zorder_by: tuple[str, ...] = ()
    """``OPTIMIZE ... ZORDER BY`` these columns (every file of the table rewritten each time), or plain
    bin-packing of the small files when empty."""


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
    compaction: tuple[CompactionSchedule, ...] = ()
    """The stages' scheduled compactions (their ``optimize`` tables)."""

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

    @property
    def merges(self) -> tuple[MergeStage, ...]:
        """Every merge stage, in file order (the changes-fed ones among them: ``input_mode == "changes"``)."""
        return tuple(s for s in self.stages if isinstance(s, MergeStage))

    def downstream(self, name: str) -> tuple[str, ...]:
        """The stages reading ``name``'s table, directly or through others, upstream first."""
        found: set[str] = set()
        for stage in self.stages:
            if stage.input == name or stage.input in found:
                found.add(stage.name)
        return tuple(s.name for s in self.stages if s.name in found)

    def consumer_group(self, stage_name: str) -> str:
        """The Kafka consumer group a stage reading the source commits its batches' end offsets to (for lag tools:
        ``kafka-consumer-groups.sh --describe --group sparkonce-<pipeline>-<stage>``; informational only)."""
        return f"sparkonce-{self.name}-{stage_name}"

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


__all__ = [
    "DEFAULT_INPUT",
    "InputMode",
    "LINEAGE_COLUMNS",
    "SOURCE",
    "STAGE_ORDER",
    "BronzeStage",
    "DriftPolicy",
    "MergeRule",
    "MergeStage",
    "OutputTable",
    "PipelineConfig",
    "PostgresStage",
    "RawStage",
    "SchemaField",
    "SourceConfig",
    "Stage",
    "StageKind",
    "StageName",
    "TransformStage",
    "Trigger",
]
