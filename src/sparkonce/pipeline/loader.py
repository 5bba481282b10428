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
from typing import Any, cast, get_args

from sparkonce.delta.catalog import WAREHOUSE_ENV, CatalogTable
from sparkonce.errors import PipelineConfigError, StorageError
from sparkonce.pipeline.ddl import DdlError, parse_fields
from sparkonce.pipeline.model import (
    LINEAGE_COLUMNS,
    SOURCE,
    BronzeStage,
    DriftPolicy,
    MergeStage,
    OutputTable,
    PipelineConfig,
    PostgresStage,
    RawStage,
    SchemaField,
    SourceConfig,
    Stage,
    StageKind,
    TransformStage,
    Trigger,
)
from sparkonce.pipeline.transforms import Transform, read_sql
from sparkonce.storage import checkpoint_path, table_location

_DEFAULT_INPUT = {"raw": SOURCE, "bronze": "raw", "gold": "bronze"}
_DEFAULT_KIND: dict[str, StageKind] = {"raw": "raw", "bronze": "bronze", "gold": "merge"}
_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$", re.I
)
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
        from sparkonce.delta.catalog import DeltaCatalog, named_key
        from sparkonce.errors import SqlError

        text = self.string(data, key, parent)
        assert text is not None and self.warehouse is not None
        table = named_key(text)
        if table is None:
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
        """The bronze payload's fields (:func:`sparkonce.pipeline.ddl.parse_fields`), none named like a lineage
        column."""
        try:
            fields = parse_fields(text)
        except DdlError as err:
            raise self.fail(key, str(err)) from None
        for field in fields:
            if field.name in LINEAGE_COLUMNS or field.name.startswith("_sparkonce"):
                raise self.fail(key, f"field {field.name!r} is reserved for lineage columns {list(LINEAGE_COLUMNS)}")
        return fields


def _inside(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip(os.sep) + os.sep)


__all__ = ["load_pipeline", "parse_pipeline"]
