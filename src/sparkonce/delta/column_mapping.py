"""Column mapping (Delta modes ``name`` and ``id``): logical column names in Spark, physical names in the files.

A column-mapped table's schema gives every field, nested ones included, a ``delta.columnMapping.physicalName``
and a ``delta.columnMapping.id``. Its data files name their columns by physical name and carry the id as the
Parquet field id; ``add`` actions key ``partitionValues`` and the stats by physical name. Readers rename
physical -> logical (:func:`rename_tree` with ``to_physical=False``); writers do the reverse and attach the field
ids (:class:`ColumnMapping`), so files sparkonce writes into such a table read back through every Delta reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from sparkonce.delta.table_view import AnyTable

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""


def mapping_mode(table: AnyTable) -> str:
    """The table's ``delta.columnMapping.mode`` (``none`` when unset)."""
    return str(table.metadata().configuration.get("delta.columnMapping.mode") or "none")


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
        mode = mapping_mode(table)
        if mode == "none":
            return None
        physical: dict[str, str] = {}
        ids: dict[str, int] = {}
        nested: dict[str, Any] = {}
        for f in json.loads(table.schema().to_json())["fields"]:
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
    "PHYSICAL_NAME_KEY",
    "ColumnMapping",
    "mapping_mode",
    "rebased",
    "rename_nested",
    "rename_tree",
]
