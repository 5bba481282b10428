"""Schemas: Delta table schema vs the schema of data being written, and conversions between Arrow and Spark.

Runs on the driver (planning and commit) and on executors (casting what is read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.delta.log.table_view import LogTable
from sparkonce.delta.table.type_widening import decimal_type, is_schema_evolution_change, with_type_change
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
    """The table schema's fields (Delta JSON); from the ``schemaString`` itself when sparkonce's log reader read
    the table, whose types delta-rs may not know (geometry, geography)."""
    if isinstance(table, LogTable):
        return table.schema_fields()
    return list(json.loads(table.schema().to_json())["fields"])


def table_schema_string(table: AnyTable) -> str:
    """The table's ``schemaString``: as the log holds it when sparkonce's log reader read the table (delta-rs does
    not know every type: geometry, geography), else delta-rs's."""
    if isinstance(table, LogTable):
        return str(table.snapshot.metadata.get("schemaString") or '{"type":"struct","fields":[]}')
    return str(table.schema().to_json())


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


_SPARK_TYPE_NAMES = {
    "byte": "ByteType",
    "short": "ShortType",
    "integer": "IntegerType",
    "long": "LongType",
    "float": "FloatType",
    "double": "DoubleType",
    "string": "StringType",
    "binary": "BinaryType",
    "boolean": "BooleanType",
    "date": "DateType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
}
_PARQUET_INTEGERS = {("short", "byte"), ("integer", "short"), ("integer", "byte")}
"""(table type, data type) pairs whose merge keeps the table's type without any option: Parquet stores all three
as INT32 (Delta's ``SchemaMergingUtils.mergeDataTypes``)."""
_PARQUET_INTEGERS_UP = {("byte", "short"), ("byte", "integer"), ("short", "integer")}
"""(table type, data type) pairs whose merge takes the data's wider type, type widening or not (Parquet INT32)."""
_NUMERIC = {"byte", "short", "integer", "long", "float", "double"}


def _spark_type_name(delta_type: Any) -> str:
    """A type as Spark's ``DataType.toString`` names it in Delta's errors (``LongType``, ``DecimalType(10,2)``)."""
    if isinstance(delta_type, str):
        decimal = decimal_type(delta_type)
        if decimal is not None:
            return f"DecimalType({decimal[0]},{decimal[1]})"
        return _SPARK_TYPE_NAMES.get(delta_type, delta_type)
    return {"struct": "StructType", "array": "ArrayType", "map": "MapType"}.get(str(delta_type.get("type")), "?")


def _implicitly_castable(data: str, table: str) -> bool:
    """The casts of Delta's streaming sink (``allowImplicitConversions``: Spark's ``TypeCoercion.implicitCast``) that
    sparkonce makes: any numeric type to any other (a value the table's type cannot hold fails the batch, as Delta's
    ANSI cast does on overflow), and ``date`` to ``timestamp_ntz``."""
    if all(t in _NUMERIC or decimal_type(t) is not None for t in (data, table)):
        return True
    return (data, table) == ("date", "timestamp_ntz")


@dataclass(frozen=True)
class MergedType:
    """A table type merged with the data's (Delta's ``mergeDataTypes``): the result, and the widenings below the
    nearest struct field (``fieldPath`` steps, old type, new type) that its ``delta.typeChanges`` records."""

    type: Any
    changes: tuple[tuple[tuple[str, ...], str, str], ...] = ()


def _merge_type(table: Any, data: Any, *, widening: bool, implicit: bool) -> MergedType:
    """Delta's ``SchemaMergingUtils.mergeDataTypes`` of a table type and a data type.

    Raises:
        ValueError: the types do not merge (Delta's ``DELTA_MERGE_INCOMPATIBLE_DATATYPE`` /
            ``DELTA_MERGE_INCOMPATIBLE_DECIMAL_TYPE`` text), or a nested struct field is new.
    """
    if isinstance(table, dict) and isinstance(data, dict) and table.get("type") == data.get("type"):
        kind = table.get("type")
        if kind == "struct":
            fields = _merge_struct(table["fields"], data["fields"], widening=widening, implicit=implicit, nested=True)
            return MergedType({**table, "fields": fields})
        if kind == "array":
            element = _merge_type(table["elementType"], data["elementType"], widening=widening, implicit=implicit)
            changes = tuple((("element", *p), f, t) for p, f, t in element.changes)
            return MergedType({**table, "elementType": element.type}, changes)
        if kind == "map":
            key = _merge_type(table["keyType"], data["keyType"], widening=widening, implicit=implicit)
            value = _merge_type(table["valueType"], data["valueType"], widening=widening, implicit=implicit)
            changes = tuple((("key", *p), f, t) for p, f, t in key.changes)
            changes += tuple((("value", *p), f, t) for p, f, t in value.changes)
            return MergedType({**table, "keyType": key.type, "valueType": value.type}, changes)
    if isinstance(table, str) and isinstance(data, str):
        if table == data:
            return MergedType(table)
        if widening and is_schema_evolution_change(table, data):
            return MergedType(data, (((), table, data),))
        if implicit and _implicitly_castable(data, table):
            return MergedType(table)
        old, new = decimal_type(table), decimal_type(data)
        if old is not None and new is not None:
            differ = [
                f"{what} {a} and {b}"
                for what, a, b in (("precision", old[0], new[0]), ("scale", old[1], new[1]))
                if a != b
            ]
            raise ValueError(
                "[DELTA_MERGE_INCOMPATIBLE_DECIMAL_TYPE] Failed to merge decimal types with incompatible "
                + " & ".join(differ)
            )
        if (table, data) in _PARQUET_INTEGERS:
            return MergedType(table)
        if (table, data) in _PARQUET_INTEGERS_UP:
            return MergedType(data)
    raise ValueError(
        "[DELTA_MERGE_INCOMPATIBLE_DATATYPE] Failed to merge incompatible data types "
        f"{_spark_type_name(table)} and {_spark_type_name(data)}"
    )


def merge_fields(
    table: list[dict[str, Any]], data: list[dict[str, Any]], *, widening: bool, implicit: bool
) -> list[dict[str, Any]]:
    """The table's fields merged with the data's of the same names (case-insensitive), as Delta's schema merge
    makes them: each keeps the table's type, unless ``widening`` (type widening on) and the data's type is one
    schema evolution widens it to (:func:`sparkonce.delta.table.type_widening.is_schema_evolution_change`, at any
    depth: struct fields, array elements, map keys and values), which the field takes with the change appended to
    its ``delta.typeChanges`` (``fieldPath`` below it for an element, key or value), as Delta's
    ``TypeWideningMetadata`` records it. ``implicit``: the streaming sink's casts of the data to the table's type.
    Top-level fields only the data has are not added here (:func:`reconcile` lists them). Pure; runs on the driver.

    Raises:
        ValueError: a field's types do not merge (Delta's ``DELTA_FAILED_TO_MERGE_FIELDS`` text), or the data has a
            nested struct field the table lacks (sparkonce's schema merge adds top-level columns only).
    """
    return _merge_struct(table, data, widening=widening, implicit=implicit, nested=False)


def _merge_struct(
    table: list[dict[str, Any]], data: list[dict[str, Any]], *, widening: bool, implicit: bool, nested: bool
) -> list[dict[str, Any]]:
    by_name = {str(f["name"]).lower(): f for f in data}
    known = {str(f["name"]).lower() for f in table}
    added = [str(f["name"]) for f in data if str(f["name"]).lower() not in known]
    if nested and added:
        raise ValueError(f"the data has struct field(s) {added} the table's struct lacks: sparkonce adds columns only")
    merged = []
    for field in table:
        other = by_name.get(str(field["name"]).lower())
        if other is None:
            merged.append(dict(field))
            continue
        try:
            result = _merge_type(field["type"], other["type"], widening=widening, implicit=implicit)
        except ValueError as err:
            raise ValueError(
                f"[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields '{field['name']}' and '{other['name']}': {err}"
            ) from err
        updated = {**field, "type": result.type}
        for path, old, new in result.changes:
            updated = with_type_change(updated, old, new, field_path=path)
        merged.append(updated)
    return merged


def reconcile(
    table: list[dict[str, Any]],
    data: list[dict[str, Any]],
    *,
    merge_schema: bool,
    table_id: str | None,
    table_path: str,
    type_widening: bool = False,
    implicit_casts: bool = False,
) -> list[dict[str, Any]]:
    """Check data fields against table fields, as Delta's schema merge does; return the data fields the table lacks
    (to be added).

    The types merge by :func:`merge_fields` (``type_widening``: the table has ``delta.enableTypeWidening``;
    ``implicit_casts``: the streaming sink's casts); types that do not are Delta's ``DELTA_FAILED_TO_MERGE_FIELDS``,
    whatever the options. A merge that changes the table's schema (a widened column, a new column) needs
    ``merge_schema``. Table columns missing from the data are fine: they read as null, as in Delta.

    Raises:
        SchemaMismatchError: listing the table schema and the data schema, as Delta's message does.
    """
    schemas = f"Table schema:\n{tree_string(table)}\n\nData schema:\n{tree_string(data)}"
    try:
        merged = merge_fields(table, data, widening=type_widening, implicit=implicit_casts)
    except ValueError as err:
        raise SchemaMismatchError(
            f"{err} (writing to the Delta table at {table_path}, Table ID: {table_id})\n\n{schemas}"
        ) from err
    known = {f["name"].lower() for f in table}
    new = [f for f in data if f["name"].lower() not in known]
    changed = [
        f"column {old['name']!r}: table has {json.dumps(old['type'])}, data has {json.dumps(now['type'])}"
        for old, now in zip(table, merged, strict=True)
        if old["type"] != now["type"]
    ]
    if (changed or new) and not merge_schema:
        hint = (
            "To enable schema migration using DataFrameWriter or DataStreamWriter, please set:\n"
            '\'.option("mergeSchema", "true")\'.'
        )
        details = "\n".join(changed)
        raise SchemaMismatchError(
            f"A schema mismatch detected when writing to the Delta table at {table_path} "
            f"(Table ID: {table_id}).\n{hint}\n{details + chr(10) if details else ''}\n{schemas}"
        )
    return new


def cast_schema(table: list[dict[str, Any]], arrow_schema: pa.Schema, *, widening: bool, implicit: bool) -> pa.Schema:
    """The Arrow schema a write's files take: the data's (``arrow_schema``), with each type the schema merge keeps
    the table's type for (:func:`merge_fields`: a narrower integer, decimal, ``float`` or ``date`` into a widened
    column, the streaming sink's implicit casts) replaced by the table's, at any depth; the executors cast each
    batch to it (:func:`sparkonce.delta.writer.write_task`). Pure; runs on the driver, after :func:`reconcile`."""
    merged = {
        str(f["name"]).lower(): f["type"]
        for f in merge_fields(table, delta_fields(arrow_schema), widening=widening, implicit=implicit)
    }
    fields = []
    for field in arrow_schema:
        target = merged.get(field.name.lower())
        fields.append(field if target is None else field.with_type(_cast_arrow_type(field.type, target)))
    return pa.schema(fields, metadata=arrow_schema.metadata)


_ARROW_ATOMIC = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp_ntz": pa.timestamp("us"),
}


def _cast_arrow_type(arrow_type: pa.DataType, delta_type: Any) -> pa.DataType:
    """``arrow_type`` (the data's) with each primitive the merged Delta type differs in replaced by it."""
    if pa.types.is_struct(arrow_type) and isinstance(delta_type, dict) and delta_type.get("type") == "struct":
        targets = {str(f["name"]).lower(): f["type"] for f in delta_type["fields"]}
        children = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return pa.struct(
            [
                c if c.name.lower() not in targets else c.with_type(_cast_arrow_type(c.type, targets[c.name.lower()]))
                for c in children
            ]
        )
    if pa.types.is_list(arrow_type) and isinstance(delta_type, dict) and delta_type.get("type") == "array":
        value = arrow_type.value_field
        return pa.list_(value.with_type(_cast_arrow_type(value.type, delta_type["elementType"])))
    if pa.types.is_map(arrow_type) and isinstance(delta_type, dict) and delta_type.get("type") == "map":
        key, item = arrow_type.key_field, arrow_type.item_field
        return pa.map_(
            key.with_type(_cast_arrow_type(key.type, delta_type["keyType"])),
            item.with_type(_cast_arrow_type(item.type, delta_type["valueType"])),
        )
    if isinstance(delta_type, str):
        decimal = decimal_type(delta_type)
        wanted = pa.decimal128(*decimal) if decimal is not None else _ARROW_ATOMIC.get(delta_type)
        if wanted is not None and not _same_atomic(arrow_type, delta_type):
            return wanted
    return arrow_type


def _same_atomic(arrow_type: pa.DataType, delta_type: str) -> bool:
    """True when the Arrow type already holds the Delta primitive (a type sparkonce never casts to counts)."""
    decimal = decimal_type(delta_type)
    if decimal is not None:
        return pa.types.is_decimal(arrow_type) and (arrow_type.precision, arrow_type.scale) == decimal
    if delta_type == "timestamp_ntz":
        return pa.types.is_timestamp(arrow_type) and arrow_type.tz is None
    wanted = _ARROW_ATOMIC.get(delta_type)
    return wanted is None or arrow_type == wanted


__all__ = [
    "GEO_TYPE_PREFIXES",
    "arrow_schema_for_spark",
    "delta_fields",
    "geo_type",
    "has_geo_columns",
    "MergedType",
    "cast_schema",
    "merge_fields",
    "reconcile",
    "spark_schema",
    "table_arrow_schema",
    "table_schema_string",
    "table_fields",
    "tree_string",
]
