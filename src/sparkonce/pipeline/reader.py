"""Reading the values of a pipeline file's TOML tables: every reader names the key path of a problem. Shared by
the loader (:mod:`sparkonce.pipeline.loader`) and each stage kind's parser (:mod:`sparkonce.pipeline.kinds`).

Runs on the driver (no Spark).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkonce.delta.table.catalog import CatalogTable
from sparkonce.errors import PipelineConfigError, StorageError
from sparkonce.pipeline.ddl import DdlError, parse_fields
from sparkonce.pipeline.model import LINEAGE_COLUMNS, DriftPolicy, OutputTable, SchemaField, Trigger
from sparkonce.pipeline.transforms import Transform, read_sql
from sparkonce.storage import checkpoint_path, table_location

_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$", re.I
)


class TomlReader:
    """Reads typed values out of the TOML tables of one pipeline file; every error names the key path and the
    file. Runs on the driver."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.base = file.parent
        self.warehouse: str | None = None
        self.named: dict[tuple[str, str], CatalogTable] = {}

    def fail(self, key: str, problem: str) -> PipelineConfigError:
        return PipelineConfigError(f"{key}: {problem} (in {self.file})")

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
            # A stage's checkpoint stays local on purpose: sparkonce run holds an flock on a file in it.
            return checkpoint_path(where) if name == "checkpoint" else str(table_location(where))
        except StorageError as err:
            raise self.fail(f"{parent}.{name}", str(err)) from err

    def named_table(self, data: Mapping[str, Any], key: str, parent: str) -> str:
        """The location of the catalog table named by ``key`` (its registered one, or the managed one to be)."""
        from sparkonce.delta.table.catalog import DeltaCatalog, named_key
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

    def input(self, data: Mapping[str, Any], key: str, default: str | None) -> str:
        value = self.string(data, "input", key, default=default)
        if value is None:
            raise self.fail(f"{key}.input", "missing: another stage's name, or 'source' for the Kafka source")
        return value

    def optional_transform(self, data: Mapping[str, Any], key: str) -> Transform | None:
        if "transform" in data:
            function = self.string(data, "transform", key)
            return Transform(f"{key}.transform", function=function, base_dir=str(self.base))
        if "sql" in data:
            text = self.string(data, "sql", key)
            assert text is not None
            return Transform(f"{key}.sql", sql=read_sql(f"{key}.sql", text, self.base), base_dir=str(self.base))
        return None

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


__all__ = ["TomlReader"]
