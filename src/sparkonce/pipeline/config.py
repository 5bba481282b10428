"""The pipeline definition: a TOML file parsed once, on load, into frozen dataclasses (driver side, no Spark).

A definition names a Kafka source and up to three stages, each with its own table and checkpoint::

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

Relative paths are resolved against the directory of the file. Every problem raises a
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
from typing import Any, Literal

from sparkonce.errors import PipelineConfigError, StorageError
from sparkonce.storage import checkpoint_path, table_location

StageName = Literal["raw", "bronze", "gold"]
STAGE_ORDER: tuple[StageName, ...] = ("raw", "bronze", "gold")
DriftPolicy = Literal["fail", "add"]
MergeRule = Literal["latest"]

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


@dataclass(frozen=True)
class GoldStage:
    """Bronze -> gold: upsert the latest row per key (by ``order_by``), rewriting only the files that hold them."""

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


Stage = RawStage | BronzeStage | GoldStage


@dataclass(frozen=True)
class PipelineConfig:
    """A validated pipeline definition. Paths are absolute."""

    path: str
    """The absolute path of the definition file (the owner recorded in each checkpoint)."""
    name: str
    source: SourceConfig
    raw: RawStage
    bronze: BronzeStage | None = None
    gold: GoldStage | None = None

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The defined stages, upstream first."""
        return tuple(s for s in (self.raw, self.bronze, self.gold) if s is not None)

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
        """The Delta table a stage reads (None for raw, which reads Kafka)."""
        if isinstance(stage, BronzeStage):
            return self.raw.table
        if isinstance(stage, GoldStage):
            assert self.bronze is not None
            return self.bronze.table
        return None


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
    """Walks the TOML document once; every error names the key path (runs on the driver)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.base = file.parent

    def fail(self, key: str, problem: str) -> PipelineConfigError:
        return PipelineConfigError(f"{key}: {problem} (in {self.file})")

    def pipeline(self, data: Mapping[str, Any]) -> PipelineConfig:
        self.known(data, "", {"name", "source", "stages"})
        name = self.string(data, "name", "", default=self.file.stem)
        assert name is not None
        source = self.source(self.table(data, "source", ""))
        stages = self.table(data, "stages", "")
        self.known(stages, "stages", set(STAGE_ORDER))
        if "raw" not in stages:
            raise self.fail("stages.raw", "missing: every pipeline starts with the raw stage (Kafka -> Delta)")
        raw = self.raw(self.table(stages, "raw", "stages"))
        bronze = self.bronze(self.table(stages, "bronze", "stages")) if "bronze" in stages else None
        gold = None
        if "gold" in stages:
            if bronze is None:
                raise self.fail("stages.gold", "needs a stages.bronze to read from")
            gold = self.gold(self.table(stages, "gold", "stages"), bronze)
        config = PipelineConfig(str(self.file), name, source, raw, bronze, gold)
        self.check_paths(config)
        return config

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

    def raw(self, data: Mapping[str, Any]) -> RawStage:
        key = "stages.raw"
        self.known(data, key, {"table", "checkpoint", "trigger"})
        return RawStage(self.path(data, "table", key), self.path(data, "checkpoint", key), self.trigger(data, key))

    def bronze(self, data: Mapping[str, Any]) -> BronzeStage:
        key = "stages.bronze"
        self.known(
            data,
            key,
            {"table", "checkpoint", "trigger", "quarantine", "schema", "required", "drift", "max_files_per_trigger"},
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
        )

    def gold(self, data: Mapping[str, Any], bronze: BronzeStage) -> GoldStage:
        key = "stages.gold"
        self.known(
            data,
            key,
            {
                "table",
                "checkpoint",
                "trigger",
                "keys",
                "order_by",
                "merge",
                "drift",
                "target_file_rows",
                "max_files_per_trigger",
            },
        )
        keys = self.names(data, "keys", key)
        if not keys:
            raise self.fail(f"{key}.keys", "must name at least one column")
        raw_order = data.get("order_by")
        if raw_order is None:
            raise self.fail(f"{key}.order_by", "missing: the event-time column that decides the latest row")
        order_by = (raw_order,) if isinstance(raw_order, str) else self.names(data, "order_by", key)
        if not order_by or not all(order_by):
            raise self.fail(f"{key}.order_by", "must name at least one column")
        columns = {f.name for f in bronze.fields} | set(LINEAGE_COLUMNS)
        for list_key, names in (("keys", keys), ("order_by", order_by)):
            for column in names:
                if column not in columns:
                    raise self.fail(f"{key}.{list_key}", f"{column!r} is not a bronze column {sorted(columns)}")
                if column in {f.name for f in bronze.fields} and column not in bronze.required:
                    raise self.fail(
                        f"{key}.{list_key}",
                        f"{column!r} must be listed in stages.bronze.required (a null {list_key[:-1]} cannot "
                        "be merged)",
                    )
        merge = self.string(data, "merge", key, default="latest")
        if merge != "latest":
            raise self.fail(f"{key}.merge", f"{merge!r} is not a merge rule (supported: 'latest')")
        target = self.integer(data, "target_file_rows", key)
        return GoldStage(
            table=self.path(data, "table", key),
            checkpoint=self.path(data, "checkpoint", key),
            trigger=self.trigger(data, key),
            keys=keys,
            order_by=order_by,
            merge="latest",
            drift=self.drift(data, key),
            target_file_rows=target if target is not None else 100_000,
            max_files_per_trigger=self.integer(data, "max_files_per_trigger", key),
        )

    def check_paths(self, config: PipelineConfig) -> None:
        """One checkpoint per stage; no table or checkpoint used twice or nested in another."""
        places: list[tuple[str, str]] = []
        for stage in config.stages:
            places.append((f"stages.{stage.name}.checkpoint", stage.checkpoint))
            places.append((f"stages.{stage.name}.table", stage.table))
            if isinstance(stage, BronzeStage):
                places.append((f"stages.{stage.name}.quarantine", stage.quarantine))
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

    def path(self, data: Mapping[str, Any], name: str, parent: str) -> str:
        value = self.string(data, name, parent)
        assert value is not None
        is_uri = value.lower().startswith("file:") or "://" in value
        where = value if is_uri else os.path.join(self.base, os.path.expanduser(value))
        try:
            return checkpoint_path(where) if name == "checkpoint" else str(table_location(where))
        except StorageError as err:
            raise self.fail(f"{parent}.{name}", str(err)) from err

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
    "GoldStage",
    "PipelineConfig",
    "RawStage",
    "SchemaField",
    "SourceConfig",
    "Stage",
    "StageName",
    "Trigger",
    "load_pipeline",
    "parse_pipeline",
]
