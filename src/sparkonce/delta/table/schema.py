"""Schemas: Delta table schema vs the schema of data being written, and conversions between Arrow and Spark.

Runs on the driver (planning and commit) and on executors (casting what is read).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.delta.table.type_widening import is_atomic, is_schema_evolution_change
from sparkonce.errors import SchemaMismatchError, UnsupportedFeatureError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from sparkonce.delta.log.table_view import AnyTable


SPARK_METADATA_KEY = "SPARK::metadata::json"
"""The Arrow field metadata key under which PySpark hands a ``StructField``'s metadata (comments, ...) as JSON."""


def delta_fields(arrow_schema: pa.Schema) -> list[dict[str, Any]]:
    """Delta's JSON field list (name, type, nullable, metadata) of an Arrow schema; Spark's field metadata (a
    column's comment, ...) becomes the Delta field's metadata, as Delta stores it, and a geometry or geography
    column (as PySpark hands it to Arrow) gets Spark's type (``geometry(OGC:CRS84)``), as Delta logs it.

    Raises:
        UnsupportedFeatureError: a geometry or geography column with a negative SRID (Delta's
            ``DELTA_GEOSPATIAL_SRID_NOT_SUPPORTED``).
    """
    from deltalake import Schema

    fields = list(json.loads(Schema.from_arrow(arrow_schema).to_json())["fields"])
    for f, arrow_field in zip(fields, arrow_schema, strict=True):
        _spark_metadata(f)
        geo = geo_type(arrow_field.type)
        if geo is not None:
            f["type"] = geo
    return fields


GEO_TYPE_PREFIXES = ("geometry(", "geography(")
"""How Spark's JSON names its geospatial types (``geometry(OGC:CRS84)``, ``geography(SRID:0, SPHERICAL)``)."""


def geo_type(arrow_type: pa.DataType) -> str | None:
    """Spark's JSON type of a geometry or geography column as PySpark hands it to Arrow (a ``struct<srid, wkb>``
    whose ``wkb`` field's metadata names the kind and the SRID), else None.

    Raises:
        UnsupportedFeatureError: a negative SRID (Delta's ``DELTA_GEOSPATIAL_SRID_NOT_SUPPORTED``).
    """
    if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index("wkb") < 0:
        return None
    metadata = arrow_type.field("wkb").metadata or {}
    kinds = [k for k in (b"geometry", b"geography") if metadata.get(k) == b"true"]
    if not kinds:
        return None
    from pyspark.sql.types import GeographyType, GeometryType

    raw = metadata.get(b"srid", b"0").decode()
    srid: int | str = int(raw) if raw.lstrip("-").isdigit() else raw.upper()
    if isinstance(srid, int) and srid < 0:
        raise UnsupportedFeatureError(
            f"[DELTA_GEOSPATIAL_SRID_NOT_SUPPORTED] Geospatial type has an unsupported srid: {srid}. Delta tables "
            "only support non-negative srid values."
        )
    kind = GeometryType(srid) if kinds[0] == b"geometry" else GeographyType(srid)
    return str(kind.jsonValue())


def has_geo_columns(schema_string: str) -> bool:
    """True when a ``schemaString`` has a geometry or geography column (at any depth)."""
    return any(f'"{prefix}' in schema_string for prefix in GEO_TYPE_PREFIXES)


def delta_schema_string(arrow_schema: pa.Schema) -> str:
    """Delta's ``schemaString`` of an Arrow schema (see :func:`delta_fields`)."""
    return json.dumps({"type": "struct", "fields": delta_fields(arrow_schema)}, separators=(",", ":"))


def _spark_metadata(field: dict[str, Any]) -> None:
    metadata = field.get("metadata") or {}
    if SPARK_METADATA_KEY in metadata:
        try:
            decoded = json.loads(metadata.pop(SPARK_METADATA_KEY))
        except (TypeError, ValueError):
            decoded = {}
        if isinstance(decoded, dict):
            metadata.update(decoded)
        field["metadata"] = metadata
    kind = field.get("type")
    while isinstance(kind, dict):  # nested structs, arrays of structs, maps of structs
        if kind.get("type") == "struct":
            for nested in kind.get("fields", []):
                _spark_metadata(nested)
            return
        kind = kind.get("elementType") if kind.get("type") == "array" else kind.get("valueType")


def table_fields(table: AnyTable) -> list[dict[str, Any]]:
    return list(json.loads(table.schema().to_json())["fields"])


def table_arrow_schema(table: AnyTable) -> pa.Schema:
    """The table's logical schema as Arrow (partition columns included, in table order)."""
    return pa.schema(table.schema().to_arrow())


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def arrow_schema_for_spark(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC", prefers_large_types=False)


def tree_string(fields: list[dict[str, Any]]) -> str:
    """Render Delta JSON fields the way Spark prints a schema (``root`` then `` |-- name: type``)."""
    lines = ["root"]

    def type_name(t: Any) -> str:
        if isinstance(t, str):
            return t
        kind = t.get("type")
        if kind == "struct":
            return "struct"
        if kind == "array":
            return f"array<{type_name(t['elementType'])}>"
        if kind == "map":
            return f"map<{type_name(t['keyType'])},{type_name(t['valueType'])}>"
        return str(kind)

    def walk(items: list[dict[str, Any]], depth: int) -> None:
        for field in items:
            prefix = " |   " * depth + " |-- "
            lines.append(
                f"{prefix}{field['name']}: {type_name(field['type'])} (nullable = {str(field['nullable']).lower()})"
            )
            if isinstance(field["type"], dict) and field["type"].get("type") == "struct":
                walk(field["type"]["fields"], depth + 1)

    walk(fields, 0)
    return "\n".join(lines)


def _strip_metadata(t: Any) -> Any:
    """A type's JSON without nullability/metadata details that do not change what values fit."""
    if isinstance(t, dict):
        if t.get("type") == "struct":
            return {
                "type": "struct",
                "fields": [(f["name"], _strip_metadata(f["type"])) for f in t["fields"]],
            }
        if t.get("type") == "array":
            return {"type": "array", "elementType": _strip_metadata(t["elementType"])}
        if t.get("type") == "map":
            return {"type": "map", "k": _strip_metadata(t["keyType"]), "v": _strip_metadata(t["valueType"])}
    return t


def reconcile(
    table: list[dict[str, Any]],
    data: list[dict[str, Any]],
    *,
    merge_schema: bool,
    table_id: str | None,
    table_path: str,
    type_widening: bool = False,
) -> list[dict[str, Any]]:
    """Check data fields against table fields; return the data fields the table lacks (to be added).

    A data column whose type differs from the table's is an error, unless ``merge_schema`` and ``type_widening``
    (the table has ``delta.enableTypeWidening``) and the data's type is one Delta widens the column to by schema
    evolution (:func:`sparkonce.delta.table.type_widening.evolved_fields` gives the widened fields). New columns are an
    error unless ``merge_schema``. Table columns missing from the data are fine: they read as null, as in Delta.

    Raises:
        SchemaMismatchError: listing the table schema and the data schema, as Delta's message does.
    """
    by_name = {f["name"].lower(): f for f in table}
    new: list[dict[str, Any]] = []
    conflicts: list[str] = []
    for field in data:
        existing = by_name.get(field["name"].lower())
        if existing is None:
            new.append(field)
        elif _strip_metadata(existing["type"]) != _strip_metadata(field["type"]):
            old, wanted = existing["type"], field["type"]
            widens = is_atomic(old) and is_atomic(wanted) and is_schema_evolution_change(old, wanted)
            if merge_schema and type_widening and widens:  # the commit widens the column (type widening)
                continue
            conflicts.append(
                f"column {field['name']!r}: table has {json.dumps(existing['type'])}, "
                f"data has {json.dumps(field['type'])}"
            )
    if conflicts or (new and not merge_schema):
        hint = (
            'Column types differ; a type change needs an overwrite with \'.option("overwriteSchema", "true")\'.'
            if conflicts
            else "To enable schema migration using DataFrameWriter or DataStreamWriter, please set:\n"
            '\'.option("mergeSchema", "true")\'.'
        )
        details = "\n".join(conflicts)
        raise SchemaMismatchError(
            f"A schema mismatch detected when writing to the Delta table at {table_path} "
            f"(Table ID: {table_id}).\n{hint}\n{details + chr(10) if details else ''}\n"
            f"Table schema:\n{tree_string(table)}\n\nData schema:\n{tree_string(data)}"
        )
    return new


__all__ = [
    "GEO_TYPE_PREFIXES",
    "arrow_schema_for_spark",
    "delta_fields",
    "geo_type",
    "has_geo_columns",
    "reconcile",
    "spark_schema",
    "table_arrow_schema",
    "table_fields",
    "tree_string",
]
