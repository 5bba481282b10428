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
from pathlib import Path
from typing import Any

from sparkonce.delta.table.catalog import WAREHOUSE_ENV
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.kinds import KINDS, kind_of
from sparkonce.pipeline.model import SOURCE, CompactionSchedule, PipelineConfig, SourceConfig, Stage, StageKind
from sparkonce.pipeline.reader import TomlReader

_DEFAULT_KIND: dict[str, StageKind] = {"raw": "raw", "bronze": "bronze", "gold": "merge"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_NAME = _NAME


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


class _Parser(TomlReader):
    """Walks the TOML document once; every error names the key path. Runs on the driver."""

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
        compaction: list[CompactionSchedule] = []
        for stage_name in stages:
            if not _NAME.match(stage_name):
                raise self.fail(f"stages.{stage_name}", "a stage name uses letters, digits and underscores")
            stage_data = dict(self.table(stages, stage_name, "stages"))
            optimize = stage_data.pop("optimize", None)
            parsed[stage_name] = self.stage(stage_name, stage_data, parsed)
            if optimize is not None:
                compaction.append(self.compaction(parsed[stage_name], optimize))
        config = PipelineConfig(
            str(self.file),
            name,
            source,
            self.upstream_first(parsed),
            storage=self.storage_table(data, "storage"),
            storage_env=self.storage_table(data, "storage_env"),
            warehouse=self.warehouse if self.named else None,
            named_tables=tuple(self.named.values()),
            compaction=tuple(compaction),
        )
        both = sorted({n.lower() for n, _ in config.storage} & {n.lower() for n, _ in config.storage_env})
        if both:
            raise self.fail(f"storage_env.{both[0]}", "is also set in [storage]; give each option once")
        self.check_paths(config)
        return config

    def stage(self, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> Stage:
        key = f"stages.{name}"
        kind = data.get("kind", _DEFAULT_KIND.get(name, "transform"))
        if not isinstance(kind, str) or kind not in KINDS:
            raise self.fail(f"{key}.kind", f"{kind!r} is not a stage kind ({', '.join(KINDS)})")
        fields = {k: v for k, v in data.items() if k != "kind"}
        stage: Stage = KINDS[kind].parse(self, name, fields, before)
        return stage

    def compaction(self, stage: Stage, value: Any) -> CompactionSchedule:
        """A stage's ``optimize = { every_batches = N, zorder_by = [...] }``."""
        key = f"stages.{stage.name}.optimize"
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a table such as {{ every_batches = 10 }}, not {value!r}")
        self.known(value, key, {"every_batches", "zorder_by"})
        every = self.integer(value, "every_batches", key)
        if every is None:
            raise self.fail(f"{key}.every_batches", "missing: compact after how many micro-batches of the stage")
        if not stage.tables:
            raise self.fail(key, f"the {stage.kind} stage {stage.name} writes no Delta table to compact")
        zorder_by = self.names(value, "zorder_by", key, default=())
        if zorder_by and len(stage.tables) > 1:
            raise self.fail(
                f"{key}.zorder_by",
                f"Z-ordering needs a stage that writes one Delta table; {stage.name} writes {len(stage.tables)}",
            )
        return CompactionSchedule(stage.name, every, zorder_by)

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
            unreadable = kind_of(stages[stage.input]).unreadable if stage.input != SOURCE else None
            if unreadable is not None:
                raise self.fail(
                    f"stages.{stage.name}.input",
                    f"stage {stage.input!r} {unreadable}; a stage reads the Kafka source or a Delta table",
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

    def check_paths(self, config: PipelineConfig) -> None:
        """One checkpoint per stage; no table or checkpoint used twice or nested in another."""
        places: list[tuple[str, str]] = []
        for stage in config.stages:
            places.append((f"stages.{stage.name}.checkpoint", stage.checkpoint))
            places += kind_of(stage).places(stage)
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


def _inside(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip(os.sep) + os.sep)


__all__ = ["load_pipeline", "parse_pipeline"]
