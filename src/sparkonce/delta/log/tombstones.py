"""Driver side: the ``remove`` tombstones of a table's state, kept as the checkpoint's Arrow column until asked for.

A stream's table keeps a week of tombstones (Delta's ``delta.deletedFileRetentionDuration``): 10^5..10^6 ``remove``
actions in every checkpoint. Only a checkpoint's writer, VACUUM and the doctor's orphan check look at them, so a
snapshot holds them as read: the checkpoint's ``remove`` column (:class:`pyarrow.StructArray`), the logical files
added again since (which are no longer tombstones), and the ``remove`` actions of the Delta commits replayed since
(as dicts). A logical file is a path and its deletion vector (:func:`file_key`), as Delta reconciles actions.
Building a snapshot and bringing it up to date costs what the active files cost; the dicts are built on the first
use of :attr:`Tombstones.removes`, and a checkpoint writes the column back without building them
(:meth:`Tombstones.checkpoint_column`).

Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sparkonce.delta.log.actions import DeletionVectorDescriptor, RemoveFile

if TYPE_CHECKING:  # pyarrow is imported on first use: importing the log reader stays cheap
    import pyarrow as pa

__all__ = ["Tombstones", "arrow_rows", "conform", "file_key"]


def file_key(action: Mapping[str, Any]) -> str:
    """The logical file an ``add`` or ``remove`` action names (PROTOCOL.md "Action Reconciliation": its path and
    its deletion vector's unique id): the raw path, followed by ``#`` and the unique id (``storageType``,
    ``pathOrInlineDv``, ``@offset`` when there is one) when the action has a deletion vector. A deletion vector
    update (``remove`` of the file with its old deletion vector, ``add`` with the new one) leaves a tombstone."""
    dv = action.get("deletionVector")
    if not isinstance(dv, dict):
        return str(action["path"])
    offset = dv.get("offset")
    at = "" if offset is None else f"@{offset}"
    return f"{action['path']}#{dv.get('storageType') or ''}{dv.get('pathOrInlineDv') or ''}{at}"


def _key_column(rows: pa.StructArray) -> pa.Array:
    """:func:`file_key` of every row of an ``add``/``remove`` struct array (every row valid)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    paths = rows.field("path").cast(pa.string())
    if rows.type.get_field_index("deletionVector") < 0:
        return paths
    dv = rows.field("deletionVector")
    if dv.null_count == len(dv):
        return paths

    def text(name: str) -> pa.Array:
        if dv.type.get_field_index(name) < 0:
            return pa.array([""] * len(dv), pa.string())
        return pc.fill_null(dv.field(name).cast(pa.string()), "")

    offset = dv.field("offset") if dv.type.get_field_index("offset") >= 0 else pa.nulls(len(dv), pa.int32())
    at = pc.fill_null(pc.binary_join_element_wise("@", offset.cast(pa.string()), ""), "")
    keyed = pc.binary_join_element_wise(paths, "#", text("storageType"), text("pathOrInlineDv"), at, "")
    return pc.if_else(dv.is_valid(), keyed, paths)


class Tombstones:
    """The ``remove`` actions still in a table's log, not added again since. Runs on the driver.

    Args:
        base: The ``remove`` rows of the checkpoint the state started from (every row valid), or None.
        hidden: Logical files (:func:`file_key`) added again after the checkpoint: base rows of these are no longer
            tombstones.
        later: The ``remove`` actions of the Delta commits replayed after the checkpoint (:func:`file_key` ->
            action); they win over a base row of the same logical file.
        later_dvs: The deletion vector descriptors of every ``remove`` replayed after the checkpoint (kept even when
            the path is added again: the deletion vector file stays until VACUUM).
    """

    def __init__(
        self,
        base: pa.StructArray | None = None,
        *,
        hidden: frozenset[str] = frozenset(),
        later: Mapping[str, RemoveFile] | None = None,
        later_dvs: tuple[DeletionVectorDescriptor, ...] = (),
    ) -> None:
        self.base = base if base is not None and len(base) else None
        self.hidden = hidden
        self.later: Mapping[str, RemoveFile] = later or {}
        self.later_dvs = later_dvs

    def __len__(self) -> int:
        return len(self.removes)

    def __eq__(self, other: object) -> bool:
        """The same tombstones (and deletion vectors), however they are held."""
        if not isinstance(other, Tombstones):
            return NotImplemented
        return self.removes == other.removes and sorted(map(repr, self.dvs)) == sorted(map(repr, other.dvs))

    __hash__ = None  # type: ignore[assignment]

    @cached_property
    def _kept_base(self) -> pa.StructArray | None:
        """The base rows still tombstones (not added again, not removed again later)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.base is None:
            return None
        shadowed = self.hidden.union(self.later)
        if not shadowed:
            return self.base
        keys = _key_column(self.base)
        keep = pc.invert(pc.is_in(keys, value_set=pa.array(sorted(shadowed), pa.string())))
        return self.base.filter(keep)

    @cached_property
    def removes(self) -> dict[str, RemoveFile]:
        """The logical file (:func:`file_key`: the raw path, with the deletion vector's id when it has one) -> the
        ``remove`` action (JSON shape: maps as dicts, unset fields left out)."""
        out: dict[str, RemoveFile] = {}
        kept = self._kept_base
        if kept is not None:
            for row in arrow_rows(kept):
                out[file_key(row)] = row
        out.update(self.later)
        return out

    @cached_property
    def paths(self) -> frozenset[str]:
        """The raw paths of the tombstones."""
        kept = self._kept_base
        base = frozenset[str]() if kept is None else frozenset(kept.field("path").to_pylist())
        return base.union(str(r["path"]) for r in self.later.values())

    @cached_property
    def dvs(self) -> tuple[DeletionVectorDescriptor, ...]:
        """The deletion vector descriptors of every ``remove`` the state read (their files stay until VACUUM)."""
        found: list[DeletionVectorDescriptor] = []
        if self.base is not None and self.base.type.get_field_index("deletionVector") >= 0:
            column = self.base.field("deletionVector")
            found = [dv for dv in arrow_rows(column.filter(column.is_valid())) if dv]
        return (*found, *self.later_dvs)

    def checkpoint_column(
        self, arrow_type: pa.StructType, *, kept: Callable[[pa.Array], pa.Array], from_dicts: Callable[..., pa.Array]
    ) -> pa.StructArray:
        """The tombstones as a checkpoint's ``remove`` rows of ``arrow_type``, ``dataChange`` false, only those whose
        ``deletionTimestamp`` column ``kept`` accepts (it returns a boolean mask). ``from_dicts`` builds rows of
        ``arrow_type`` from ``remove`` actions (for the later ones)."""
        import pyarrow as pa

        parts: list[pa.Array] = []
        base = self._kept_base
        if base is not None:
            try:
                parts.append(conform(base, arrow_type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                parts.append(from_dicts(arrow_rows(base), arrow_type))
        if self.later:
            parts.append(from_dicts(list(self.later.values()), arrow_type))
        if not parts:
            return pa.array([], type=arrow_type)
        column = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
        stamps = column.field("deletionTimestamp").fill_null(0)
        column = column.filter(kept(stamps))
        return with_field(column, "dataChange", pa.array([False] * len(column), pa.bool_()))


def with_field(column: pa.StructArray, name: str, values: pa.Array) -> pa.StructArray:
    """``column`` (every row valid) with its field ``name`` replaced by ``values``."""
    import pyarrow as pa

    struct_type = column.type
    children = [values if f.name == name else column.field(i) for i, f in enumerate(struct_type)]
    return pa.StructArray.from_arrays(children, fields=list(struct_type))


def conform(array: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """``array`` as ``arrow_type``: struct fields matched by name (missing ones null, others dropped), the rest
    cast.

    Raises:
        pyarrow.ArrowInvalid: a value does not fit ``arrow_type``.
    """
    import pyarrow as pa

    if pa.types.is_struct(arrow_type) and pa.types.is_struct(array.type):
        flat = {f.name: array.field(i) for i, f in enumerate(array.type)}
        children = [
            conform(flat[f.name], f.type) if f.name in flat else pa.nulls(len(array), f.type) for f in arrow_type
        ]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)
    if array.type == arrow_type:
        return array
    return array.cast(arrow_type)


def arrow_rows(array: pa.Array) -> list[Any]:
    """The values of a struct array as the JSON log holds them: one dict per row (None for a null row) without
    unset fields and without ``*_parsed`` fields, maps as dicts. Column by column: the Python objects are built once,
    not walked again."""
    import pyarrow as pa

    if not pa.types.is_struct(array.type):
        return _plain(array)
    names: list[str] = []
    columns: list[list[Any]] = []
    sparse = bool(array.null_count)
    for i, f in enumerate(array.type):
        child = array.field(i)
        if f.name.endswith("_parsed") or child.null_count == len(child):  # an unset field is left out of every row
            continue
        names.append(f.name)
        columns.append(arrow_rows(child))
        sparse = sparse or bool(child.null_count)
    if columns and not sparse:  # every row sets every field (an add's path, size, stats, ...): no test per value
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    valid = array.is_valid().to_pylist() if array.null_count else None
    rows: list[Any] = []
    for n, values in enumerate(zip(*columns, strict=True)) if columns else enumerate([()] * len(array)):
        if valid is not None and not valid[n]:
            rows.append(None)
        else:
            rows.append({k: v for k, v in zip(names, values, strict=True) if v is not None})
    return rows


def _plain(array: pa.Array) -> list[Any]:
    import pyarrow as pa

    arrow_type = array.type
    values: list[Any] = array.to_pylist()
    if pa.types.is_map(arrow_type):
        item = arrow_type.item_type
        if not pa.types.is_nested(item):
            return [None if v is None else dict(v) for v in values]  # pyarrow gives a map as (key, value) pairs
        return [None if v is None else {k: _normal(x, item) for k, x in v} for v in values]
    if pa.types.is_nested(arrow_type):
        return [_normal(v, arrow_type) for v in values]
    return values


def _normal(value: Any, arrow_type: pa.DataType) -> Any:
    """One value of pyarrow's ``to_pylist`` as the JSON log holds it (the slow walk, for nested values only)."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {k: _normal(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {
            f.name: _normal(value.get(f.name), f.type)
            for f in arrow_type
            if not f.name.endswith("_parsed") and value.get(f.name) is not None
        }
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_normal(v, arrow_type.value_type) for v in value]
    return value
