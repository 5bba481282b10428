"""Column mapping (Delta modes ``name`` and ``id``): logical column names in Spark, physical names in the files.

A column-mapped table's schema gives every field, nested ones included, a ``delta.columnMapping.physicalName``
and a ``delta.columnMapping.id``. Its data files name their columns by physical name and carry the id as the
Parquet field id; ``add`` actions key ``partitionValues`` and the stats by physical name. Readers rename
physical -> logical (:func:`rename_tree` with ``to_physical=False``); writers do the reverse and attach the field
ids (:class:`ColumnMapping`), so files sparkonce writes into such a table read back through every Delta reader.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce.errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from sparkonce.delta.log.table_view import AnyTable

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""
MODE_PROPERTY = "delta.columnMapping.mode"
MAX_ID_PROPERTY = "delta.columnMapping.maxColumnId"
MODES = ("none", "id", "name")
"""Delta's column mapping modes (``DeltaColumnMapping.supportedModes``)."""
RANDOM_PREFIX_LENGTH = 2
"""Delta's default ``delta.randomPrefixLength``: a column-mapped table's data files go into folders of this many
random letters and digits instead of partition folders (Delta's ``TransactionalWrite``)."""


def mapping_mode(table: AnyTable) -> str:
    """The table's ``delta.columnMapping.mode`` (``none`` when unset)."""
    return configured_mode(table.metadata().configuration)


def configured_mode(configuration: Mapping[str, Any]) -> str:
    """The column mapping mode ``configuration`` (``metaData.configuration``, keys compared case-insensitively)
    sets, ``none`` when unset.

    Raises:
        UnsupportedFeatureError: a mode Delta does not have (Delta's ``DELTA_MODE_NOT_SUPPORTED``).
    """
    value = next((v for k, v in configuration.items() if k.lower() == MODE_PROPERTY.lower() and v is not None), None)
    mode = str(value or "none").strip().lower()
    if mode not in MODES:
        raise UnsupportedFeatureError(
            f"[DELTA_MODE_NOT_SUPPORTED] Specified mode '{value}' is not supported. Supported modes are: id, none, name"
        )
    return mode


def max_column_id(configuration: Mapping[str, Any], fields: list[dict[str, Any]]) -> int:
    """The highest column mapping id the table gave out: ``delta.columnMapping.maxColumnId`` or, when higher,
    the highest id in ``fields`` (Delta's ``findMaxColumnId``)."""
    found = 0
    for value in _walk(fields):
        found = max(found, int((value.get("metadata") or {}).get(FIELD_ID_KEY, 0) or 0))
    given = next((v for k, v in configuration.items() if k.lower() == MAX_ID_PROPERTY.lower()), None)
    return max(found, int(given or 0))


def _walk(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every struct field in ``fields``, nested ones included, in Delta's order (a field, then its children)."""
    out: list[dict[str, Any]] = []
    for f in fields:
        out.append(f)
        for struct in _structs(f["type"]):
            out += _walk(struct["fields"])
    return out


def _structs(delta_type: Any) -> list[dict[str, Any]]:
    """The struct types directly inside ``delta_type`` (itself, or through arrays and maps)."""
    if not isinstance(delta_type, dict):
        return []
    kind = delta_type.get("type")
    if kind == "struct":
        return [delta_type]
    if kind == "array":
        return _structs(delta_type["elementType"])
    if kind == "map":
        return _structs(delta_type["keyType"]) + _structs(delta_type["valueType"])
    return []


def logical_by_physical(fields: list[dict[str, Any]]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Every field's physical path -> its logical path, nested fields included (through arrays and maps too), for
    a column-mapped schema's ``fields``: two schemas of a table differ here by their renames and drops."""
    out: dict[tuple[str, ...], tuple[str, ...]] = {}

    def visit(items: list[dict[str, Any]], physical: tuple[str, ...], logical: tuple[str, ...]) -> None:
        for f in items:
            name = str((f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, f["name"]))
            out[(*physical, name)] = (*logical, str(f["name"]))
            for struct in _structs(f["type"]):
                visit(struct["fields"], (*physical, name), (*logical, str(f["name"])))

    visit(fields, (), ())
    return out


def physical_name_for(table: str, column_id: int) -> str:
    """The physical name of the column given ``column_id`` in ``table``: Delta's ``col-<uuid>`` form.

    Delta draws a random UUID; sparkonce derives it from the table's URI and the column's id, so that every
    driver process that plans a write (Spark builds a streaming writer in more than one) names the columns of a
    table it creates alike, and two writers racing to create a table agree on the files' column names. Ids are
    never reused within a table, so names stay unique.
    """
    return "col-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table}#columnMapping#{column_id}"))


def assign_columns(
    fields: list[dict[str, Any]], *, table: str, after_id: int, reuse_names: bool
) -> tuple[list[dict[str, Any]], int]:
    """``fields`` (schema JSON) with a ``delta.columnMapping.id`` and ``delta.columnMapping.physicalName`` on
    every field that lacks one, nested fields included, as Delta's ``assignColumnIdAndPhysicalName`` gives them:
    ids counted on from ``after_id`` in schema order (a field before its children); physical names new
    (:func:`physical_name_for`), or the field's own name when ``reuse_names`` (column mapping turned on for a
    table whose files already name their columns so). Returns the fields and the highest id given out."""
    counter = [after_id]

    def assign(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for f in items:
            f = dict(f)
            metadata = dict(f.get("metadata") or {})
            if FIELD_ID_KEY not in metadata:
                counter[0] += 1
                metadata[FIELD_ID_KEY] = counter[0]
            if PHYSICAL_NAME_KEY not in metadata:
                metadata[PHYSICAL_NAME_KEY] = (
                    f["name"] if reuse_names else physical_name_for(table, int(metadata[FIELD_ID_KEY]))
                )
            f["metadata"] = metadata
            f["type"] = _assign_type(f["type"], assign)
            out.append(f)
        return out

    return assign(fields), counter[0]


def _assign_type(delta_type: Any, assign: Any) -> Any:
    if not isinstance(delta_type, dict):
        return delta_type
    kind = delta_type.get("type")
    if kind == "struct":
        return {**delta_type, "fields": assign(delta_type["fields"])}
    if kind == "array":
        return {**delta_type, "elementType": _assign_type(delta_type["elementType"], assign)}
    if kind == "map":
        return {
            **delta_type,
            "keyType": _assign_type(delta_type["keyType"], assign),
            "valueType": _assign_type(delta_type["valueType"], assign),
        }
    return delta_type


def new_table_columns(
    schema_string: str, configuration: Mapping[str, str], *, table: str
) -> tuple[str, dict[str, str]]:
    """The schema string and configuration of a table created with ``configuration``: when it asks for column
    mapping (``name`` or ``id``), every field gets its id and physical name and the configuration
    ``delta.columnMapping.maxColumnId``, as Delta creates the table; else both unchanged.

    Raises:
        UnsupportedFeatureError: a mode Delta does not have.
    """
    configuration = dict(configuration)
    if configured_mode(configuration) == "none":
        return schema_string, configuration
    schema = json.loads(schema_string)
    fields, top = assign_columns(
        schema["fields"], table=table, after_id=max_column_id(configuration, schema["fields"]), reuse_names=False
    )
    configuration[MAX_ID_PROPERTY] = str(top)
    return json.dumps({**schema, "fields": fields}, separators=(",", ":")), configuration


def rename_tree(delta_type: Any, *, to_physical: bool) -> Any:
    """A tree of renames for the struct fields inside a column of Delta type ``delta_type`` (its schema JSON).

    Struct nodes map a child's current name to ``(new name, subtree, Arrow field metadata)``: physical ->
    logical for reading, logical -> physical with the Parquet field id for writing; list and map nodes hold
    ``__element__`` / ``__key__`` / ``__value__``. None when there is nothing to rename or tag.
    """
    if not isinstance(delta_type, dict):
        return None
    kind = delta_type.get("type")
    if kind == "struct":
        out: dict[str, tuple[str, Any, dict[bytes, bytes] | None]] = {}
        for f in delta_type["fields"]:
            metadata = f.get("metadata", {})
            physical = metadata.get(PHYSICAL_NAME_KEY, f["name"])
            sub = rename_tree(f["type"], to_physical=to_physical)
            if to_physical:
                field_id = metadata.get(FIELD_ID_KEY)
                tags = {PARQUET_FIELD_ID: str(field_id).encode()} if field_id is not None else None
                out[f["name"]] = (physical, sub, tags)
            else:
                out[physical] = (f["name"], sub, None)
        changed = any(old != new or sub or tags for old, (new, sub, tags) in out.items())
        return out if changed else None
    if kind == "array":
        inner = rename_tree(delta_type["elementType"], to_physical=to_physical)
        return {"__element__": inner} if inner else None
    if kind == "map":
        key = rename_tree(delta_type["keyType"], to_physical=to_physical)
        value = rename_tree(delta_type["valueType"], to_physical=to_physical)
        return {"__key__": key, "__value__": value} if key or value else None
    return None


def rename_nested(column: pa.Array, renames: Any) -> pa.Array:
    """Rename the struct fields inside ``column`` along ``renames`` (a :func:`rename_tree`), keeping every null
    where it is: a null struct, list or map stays null, never an empty one."""
    mask = column.is_null() if column.null_count else None
    if pa.types.is_struct(column.type) and isinstance(renames, dict):
        children, fields = [], []
        for i in range(column.type.num_fields):
            child_field = column.type.field(i)
            new_name, sub, tags = renames.get(child_field.name, (child_field.name, None, None))
            child = column.field(i)
            if sub:
                child = rename_nested(child, sub)
            children.append(child)
            fields.append(pa.field(new_name, child.type, child_field.nullable, metadata=tags))
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_list(column.type) and renames.get("__element__"):
        offsets, values = rebased(column)
        values = rename_nested(values, renames["__element__"])
        return pa.ListArray.from_arrays(offsets, values, mask=mask)
    if pa.types.is_map(column.type):
        offsets, entries = rebased(column)
        keys, items = entries.field(0), entries.field(1)
        if renames.get("__key__"):
            keys = rename_nested(keys, renames["__key__"])
        if renames.get("__value__"):
            items = rename_nested(items, renames["__value__"])
        return pa.MapArray.from_arrays(offsets, keys, items, mask=mask)
    return column


def rebased(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list or map array's offsets starting at 0 and the child values they index (works for slices)."""
    import pyarrow.compute as pc  # here: the commit process, which imports this module, never needs it

    offsets = column.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first:
        offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
    return offsets, column.values.slice(first, last - first)


def with_new_columns(
    fields: list[dict[str, Any]], added: list[dict[str, Any]], configuration: Mapping[str, Any], *, table: str
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A column-mapped table's ``fields`` with the ``added`` columns at the end (``mergeSchema``), each given the
    next ids and its physical name, and the configuration with the new ``delta.columnMapping.maxColumnId``: the
    same on the driver that plans the files and on the one that commits them (:func:`physical_name_for`)."""
    out = {str(k): str(v) for k, v in configuration.items() if v is not None}
    merged, top = assign_columns([*fields, *added], table=table, after_id=max_column_id(out, fields), reuse_names=False)
    out[MAX_ID_PROPERTY] = str(top)
    return merged, out


def replaced_columns(
    schema_string: str, old_fields: list[dict[str, Any]], configuration: Mapping[str, Any], *, table: str
) -> tuple[str, dict[str, str]]:
    """The schema string and configuration of a column-mapped table whose schema ``schema_string`` replaces
    ``old_fields`` (``overwriteSchema``, ``CREATE OR REPLACE``): every field new ids after the table's highest
    and new physical names, as Delta's ``assignColumnIdAndPhysicalName`` gives them on an overwrite."""
    out = {str(k): str(v) for k, v in configuration.items() if v is not None}
    schema = json.loads(schema_string)
    fresh = json.loads(json.dumps(schema["fields"]))
    for f in _walk(fresh):
        metadata = dict(f.get("metadata") or {})
        metadata.pop(FIELD_ID_KEY, None)
        metadata.pop(PHYSICAL_NAME_KEY, None)
        f["metadata"] = metadata
    fields, top = assign_columns(fresh, table=table, after_id=max_column_id(out, old_fields), reuse_names=False)
    out[MAX_ID_PROPERTY] = str(top)
    return json.dumps({**schema, "fields": fields}, separators=(",", ":")), out


@dataclass(frozen=True)
class ColumnMapping:
    """How to write data files of a column-mapped table. Built on the driver from the table's schema; pickled to
    executors, which rename each batch with :meth:`to_physical` before writing it."""

    mode: str
    """``name`` or ``id``."""
    physical_names: dict[str, str]
    """Logical top-level column name -> physical name."""
    field_ids: dict[str, int]
    """Logical top-level column name -> its column mapping id (the Parquet field id)."""
    nested: dict[str, Any]
    """Logical top-level column name -> :func:`rename_tree` (``to_physical=True``) of its type."""

    @classmethod
    def of(cls, table: AnyTable) -> ColumnMapping | None:
        """The mapping of ``table``'s schema, or None when the table is not column-mapped."""
        return cls.from_schema(mapping_mode(table), table.schema().to_json())

    @classmethod
    def from_schema(cls, mode: str, schema_string: str) -> ColumnMapping | None:
        """The mapping of a table in ``mode`` with the schema ``schema_string``; None for mode ``none``."""
        if mode == "none":
            return None
        physical: dict[str, str] = {}
        ids: dict[str, int] = {}
        nested: dict[str, Any] = {}
        for f in json.loads(schema_string)["fields"]:
            metadata = f.get("metadata", {})
            physical[f["name"]] = metadata.get(PHYSICAL_NAME_KEY, f["name"])
            if metadata.get(FIELD_ID_KEY) is not None:
                ids[f["name"]] = int(metadata[FIELD_ID_KEY])
            tree = rename_tree(f["type"], to_physical=True)
            if tree:
                nested[f["name"]] = tree
        return cls(mode, physical, ids, nested)

    def physical_name(self, logical: str) -> str:
        return self.physical_names.get(logical, logical)

    def to_physical(self, table: pa.Table) -> pa.Table:
        """Executor side: ``table`` (logical names) with the physical names and Parquet field ids, nested fields
        included, every null kept."""
        arrays, fields = [], []
        for field, column in zip(table.schema, table.columns):
            renames = self.nested.get(field.name)
            data = column
            if renames:
                chunks = column.chunks or [pa.array([], type=column.type)]
                data = pa.chunked_array([rename_nested(c, renames) for c in chunks])
            field_id = self.field_ids.get(field.name)
            tags = {PARQUET_FIELD_ID: str(field_id).encode()} if field_id is not None else None
            arrays.append(data)
            fields.append(pa.field(self.physical_name(field.name), data.type, field.nullable, metadata=tags))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


__all__ = [
    "FIELD_ID_KEY",
    "MAX_ID_PROPERTY",
    "MODES",
    "MODE_PROPERTY",
    "PHYSICAL_NAME_KEY",
    "RANDOM_PREFIX_LENGTH",
    "ColumnMapping",
    "assign_columns",
    "configured_mode",
    "mapping_mode",
    "max_column_id",
    "new_table_columns",
    "logical_by_physical",
    "physical_name_for",
    "rebased",
    "rename_nested",
    "rename_tree",
    "replaced_columns",
    "with_new_columns",
]
