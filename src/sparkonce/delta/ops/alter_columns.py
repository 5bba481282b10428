"""``ALTER TABLE`` column statements as Delta runs them: ``ADD COLUMNS`` (``FIRST`` / ``AFTER``), ``RENAME
COLUMN``, ``DROP COLUMN(S)``, ``ALTER | CHANGE COLUMN`` (comment, nullability, position, type) and ``REPLACE
COLUMNS``. Each is one Delta commit of the table's new ``metaData``; no data file is rewritten.

Renames and drops need column mapping (Delta's rule): the files name their columns by physical name, which a
rename keeps and a drop leaves unread. New columns of a column-mapped table get the next ids and new physical
names, and ``delta.columnMapping.maxColumnId`` moves on. Errors carry Delta's error classes and messages.

Runs on the driver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sparkonce._types import TableVersion
from sparkonce.delta.log.log_entry import Operation
from sparkonce.delta.log.table_view import existing_table
from sparkonce.delta.ops.alter import commit_schema
from sparkonce.delta.table import protocol, type_widening
from sparkonce.delta.table.clustering import table_clustering
from sparkonce.delta.table.column_mapping import (
    MAX_ID_PROPERTY,
    assign_columns,
    configured_mode,
    max_column_id,
)
from sparkonce.delta.txn.commit import protocol_action
from sparkonce.errors import OptionError, SqlError
from sparkonce.storage import TableLocation, table_location

log = logging.getLogger(__name__)

ADVICE = (
    "\nPlease enable Column Mapping on your Delta table with mapping mode 'name'.\nYou can use one of the following "
    "commands.\n\nALTER TABLE table_name SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')\n\nNote, if your "
    "table is not on the required protocol version it will be upgraded.\nColumn mapping requires at least protocol "
    "(2, 5)\n"
)
"""Delta's ``columnMappingAdviceMessage`` for the required protocol (2, 5)."""

Position = tuple[Literal["first", "after"], str]
"""``FIRST`` (the name is "") or ``AFTER <column>``."""


@dataclass(frozen=True)
class NewColumn:
    """One column of ``ADD COLUMNS``: its parent's path (empty: top level), its schema JSON field, its position."""

    path: tuple[str, ...]
    field: Mapping[str, Any]
    position: Position | None = None


@dataclass(frozen=True)
class ColumnChange:
    """What ``ALTER | CHANGE COLUMN`` changes in one column (None: unchanged)."""

    comment: str | None = None
    nullable: bool | None = None
    """False: ``SET NOT NULL``; True: ``DROP NOT NULL``."""
    data_type: Any = None
    """The new type as schema JSON (``"long"``, a struct's dict)."""
    position: Position | None = None


def dotted(path: Sequence[str]) -> str:
    """A column path as Spark prints it (``UnresolvedAttribute.name``): parts with a dot or a backtick quoted."""
    return ".".join(f"`{p.replace('`', '``')}`" if ("." in p or "`" in p) else p for p in path)


def _struct_fields(schema: dict[str, Any], parent: Sequence[str], *, shown: str) -> list[dict[str, Any]]:
    """The field list of the struct at ``parent`` (top level when empty), found case-insensitively."""
    fields: list[dict[str, Any]] = schema["fields"]
    for depth, part in enumerate(parent):
        found = _find(fields, part)
        if found is None:
            raise _unresolved(list(parent[: depth + 1]), fields)
        kind = fields[found]["type"]
        if not (isinstance(kind, dict) and kind.get("type") == "struct"):
            raise SqlError(
                f"[DELTA_ADD_COLUMN_PARENT_NOT_STRUCT] Cannot add a column to {dotted(parent)} of {shown} because "
                f"its parent is not a StructType. Found {kind}"
            )
        fields = kind["fields"]
    return fields


def _find(fields: Sequence[Mapping[str, Any]], name: str) -> int | None:
    return next((i for i, f in enumerate(fields) if str(f["name"]).lower() == name.lower()), None)


def _unresolved(path: Sequence[str], fields: Sequence[Mapping[str, Any]]) -> SqlError:
    names = ", ".join(f"`{f['name']}`" for f in fields)
    return SqlError(
        f"[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name "
        f"`{dotted(path)}` cannot be resolved. Did you mean one of the following? [{names}]."
    )


def _locate(schema: dict[str, Any], path: Sequence[str], *, shown: str) -> tuple[list[dict[str, Any]], int]:
    """The field list holding the column at ``path`` and its index there.

    Raises:
        SqlError: no such column (Spark's ``UNRESOLVED_COLUMN``).
    """
    fields = _struct_fields(schema, path[:-1], shown=shown)
    index = _find(fields, path[-1])
    if index is None:
        raise _unresolved(path, fields)
    return fields, index


def _configuration(snapshot: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}


def _schema(snapshot: Any) -> dict[str, Any]:
    return dict(json.loads(snapshot.schema().to_json()))


def _encode(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))


def _check_dependents(snapshot: Any, configuration: Mapping[str, str], path: Sequence[str]) -> None:
    """Refuse to rename, drop or retype a column that a CHECK constraint or a generated column refers to (Delta's
    ``DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE`` / ``DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE``): any
    mention of the column's top-level name counts."""
    from sparkonce.sqltext.lexer import tokenize

    def mentions(expression: str) -> bool:
        return any(t.kind in ("word", "quoted") and t.value.lower() == path[0].lower() for t in tokenize(expression))

    constraints = {
        k[len("delta.constraints.") :]: v
        for k, v in configuration.items()
        if k.lower().startswith("delta.constraints.") and mentions(v)
    }
    if constraints:
        listed = "\n".join(f"{k} -> {v}" for k, v in sorted(constraints.items()))
        raise SqlError(
            f"[DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE] Cannot alter column {dotted(path)} because this column is "
            f"referenced by the following check constraint(s):\n{listed}"
        )
    generated = {
        str(f["name"]): str(f["metadata"]["delta.generationExpression"])
        for f in _schema(snapshot)["fields"]
        if "delta.generationExpression" in (f.get("metadata") or {})
        and mentions(str(f["metadata"]["delta.generationExpression"]))
    }
    if generated:
        listed = "\n".join(f"{k} -> {v}" for k, v in sorted(generated.items()))
        raise SqlError(
            f"[DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE] Cannot alter column {dotted(path)} because this "
            f"column is referenced by the following generated column(s):\n{listed}"
        )


def _with_mapping(schema: dict[str, Any], configuration: dict[str, str], location: TableLocation) -> dict[str, Any]:
    """``schema`` with ids and physical names for its new fields when the table is column-mapped, and the
    configuration's ``delta.columnMapping.maxColumnId`` moved on."""
    if configured_mode(configuration) == "none":
        return schema
    fields, top = assign_columns(
        schema["fields"],
        table=str(location),
        after_id=max_column_id(configuration, schema["fields"]),
        reuse_names=False,
    )
    configuration[MAX_ID_PROPERTY] = str(top)
    return {**schema, "fields": fields}


def _check_duplicates(fields: Sequence[Mapping[str, Any]], *, shown: str) -> None:
    seen: set[str] = set()
    for f in fields:
        name = str(f["name"]).lower()
        if name in seen:
            raise SqlError(f"[DELTA_DUPLICATE_COLUMNS_FOUND] Found duplicate column(s) in {shown}: {f['name']}.")
        seen.add(name)


def _place(fields: list[dict[str, Any]], field: dict[str, Any], position: Position | None, *, shown: str) -> None:
    """Insert ``field`` into ``fields`` at ``position`` (the end when None)."""
    if position is None:
        fields.append(field)
    elif position[0] == "first":
        fields.insert(0, field)
    else:
        after = _find(fields, position[1])
        if after is None:
            listed = ", ".join(str(f["name"]) for f in fields)
            raise SqlError(f"[DELTA_COLUMN_NOT_FOUND] Unable to find the column `{position[1]}` given [{listed}]")
        fields.insert(after + 1, field)


def add_columns(table: str | TableLocation, columns: Sequence[NewColumn], *, max_attempts: int = 100) -> TableVersion:
    """``ALTER TABLE t ADD COLUMNS (...)``: add ``columns`` (nested ones into their parent struct) at their
    positions in one Delta commit; a column-mapped table gives each new field its id and physical name.

    Raises:
        OptionError: a NOT NULL column (existing rows would break it).
        SqlError: a column the table has already, a parent that is not a struct, an ``AFTER`` column that is not
            there.
    """
    location = table_location(table)
    location.check_commit_safety()
    for column in columns:
        if not column.field.get("nullable", True):
            raise OptionError(
                str(column.field["name"]),
                "NOT NULL",
                f"[DELTA_OPERATION_NOT_ALLOWED] Operation not allowed: `NOT NULL in ALTER TABLE ADD COLUMNS` is not "
                f"supported for Delta tables ({location})",
            )

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        schema = _schema(snapshot)
        for column in columns:
            fields = _struct_fields(schema, column.path, shown=str(location))
            if _find(fields, str(column.field["name"])) is not None:
                raise SqlError(
                    f"[FIELD_ALREADY_EXISTS] Cannot add column, because "
                    f"{dotted([*column.path, str(column.field['name'])])} already exists in {location}."
                )
            _place(fields, dict(column.field), column.position, shown=str(location))
        schema = _with_mapping(schema, configuration, location)
        return configuration, _encode(schema), {}

    parameters = []
    for column in columns:
        entry: dict[str, Any] = {"column": {**column.field, "name": dotted([*column.path, column.field["name"]])}}
        if column.position is not None:
            entry["position"] = "FIRST" if column.position[0] == "first" else f"AFTER {column.position[1]}"
        parameters.append(entry)
    return commit_schema(location, Operation("ADD COLUMNS", {"columns": parameters}), change, max_attempts=max_attempts)


def rename_column(
    table: str | TableLocation, path: Sequence[str], new_name: str, *, max_attempts: int = 100
) -> TableVersion:
    """``ALTER TABLE t RENAME COLUMN a.b TO c``: one ``RENAME COLUMN`` commit; the field keeps its id and
    physical name (its data stays where it is), a renamed partition column is renamed in ``partitionColumns``.

    Raises:
        SqlError: the table is not column-mapped (Delta's ``DELTA_UNSUPPORTED_RENAME_COLUMN`` and its advice), no
            such column, the new name is taken, or a constraint or generated column refers to the column.
    """
    location = table_location(table)
    location.check_commit_safety()
    path = tuple(path)

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        schema = _schema(snapshot)
        fields, index = _locate(schema, path, shown=str(location))
        if configured_mode(configuration) == "none":
            raise SqlError(
                f"[DELTA_UNSUPPORTED_RENAME_COLUMN] Column rename is not supported for your Delta table. {ADVICE}"
            )
        taken = _find(fields, new_name)
        if taken is not None and taken != index:
            raise SqlError(
                f"[FIELD_ALREADY_EXISTS] Cannot rename column, because {dotted([*path[:-1], new_name])} already "
                f"exists in {location}."
            )
        if path[-1] != new_name:
            _check_dependents(snapshot, configuration, path)
        fields[index] = {**fields[index], "name": new_name}
        return configuration, _encode(schema), {}

    def partitions(snapshot: Any) -> tuple[str, ...]:
        columns = tuple(snapshot.metadata().partition_columns)
        if len(path) != 1:
            return columns
        return tuple(new_name if c.lower() == path[0].lower() else c for c in columns)

    operation = Operation(
        "RENAME COLUMN", {"oldColumnPath": dotted(path), "newColumnPath": dotted([*path[:-1], new_name])}
    )
    return commit_schema(location, operation, change, max_attempts=max_attempts, partition_columns=partitions)


def drop_columns(
    table: str | TableLocation, paths: Sequence[Sequence[str]], *, if_exists: bool = False, max_attempts: int = 100
) -> TableVersion | None:
    """``ALTER TABLE t DROP COLUMN[S] [IF EXISTS] a, b.c``: one ``DROP COLUMNS`` commit; the files keep the data,
    which no reader reads any more. None when ``if_exists`` and none of the columns is there.

    Raises:
        SqlError: the table is not column-mapped (Delta's ``DELTA_UNSUPPORTED_DROP_COLUMN`` and its advice), no
            such column, a partition or clustering column, the last column of a struct, or a column a constraint or
            generated column refers to.
    """
    location = table_location(table)
    location.check_commit_safety()
    wanted = [tuple(p) for p in paths]
    dropped: list[tuple[str, ...]] = []

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        if configured_mode(configuration) == "none":
            raise SqlError(
                f"[DELTA_UNSUPPORTED_DROP_COLUMN] DROP COLUMN is not supported for your Delta table. {ADVICE}"
            )
        schema = _schema(snapshot)
        dropped.clear()
        for path in wanted:
            try:
                fields, index = _locate(schema, path, shown=str(location))
            except SqlError:
                if if_exists:
                    continue
                raise
            if len(fields) == 1:
                raise SqlError(
                    "[DELTA_DROP_COLUMN_ON_SINGLE_FIELD_SCHEMA] Cannot drop column from a schema with a single "
                    f"column. Schema:\n{_encode({'type': 'struct', 'fields': fields})}"
                )
            _check_dependents(snapshot, configuration, path)
            del fields[index]
            dropped.append(path)
        tops = {p[0].lower() for p in dropped if len(p) == 1}
        partitioned = [c for c in snapshot.metadata().partition_columns if c.lower() in tops]
        if partitioned:
            raise SqlError(
                f"[DELTA_UNSUPPORTED_DROP_PARTITION_COLUMN] Dropping partition columns ({','.join(partitioned)}) is "
                "not allowed."
            )
        clustered = [c for c in table_clustering(location, int(snapshot.version())) or () if c.lower() in tops]
        if clustered:
            raise SqlError(
                f"[DELTA_UNSUPPORTED_DROP_CLUSTERING_COLUMN] Dropping clustering columns ({','.join(clustered)}) is "
                "not allowed."
            )
        return configuration, _encode(schema), {}

    location_shown = str(location)
    if if_exists:
        schema = _schema(existing_table(location))
        present = []
        for path in wanted:
            try:
                _locate(schema, path, shown=location_shown)
                present.append(path)
            except SqlError:
                continue
        if not present:
            log.info("DROP COLUMNS IF EXISTS on %s: none of %s is there, nothing to do", location, wanted)
            return None
        wanted = present
    operation = Operation("DROP COLUMNS", {"columns": [dotted(p) for p in wanted]})
    return commit_schema(location, operation, change, max_attempts=max_attempts)


def _retyped(
    field: dict[str, Any], data_type: Any, configuration: Mapping[str, str], *, shown_path: str, location: TableLocation
) -> dict[str, Any]:
    """``field`` with the type ``data_type`` and the change recorded in its ``delta.typeChanges``, when Delta allows
    it: the table has type widening enabled and the change is one of Delta's widenings
    (:mod:`sparkonce.delta.table.type_widening`).

    Raises:
        SqlError: Spark's ``NOT_SUPPORTED_CHANGE_COLUMN`` for a change that is not an upcast (Spark refuses those
            before Delta sees them), else Delta's ``DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP`` (type widening
            off, or not one of its changes), naming the column, the old and the new type.
    """
    old_type = field["type"]
    nullable_text = "" if field.get("nullable", True) else " NOT NULL"
    if type_widening.is_atomic(old_type) and not (
        type_widening.is_atomic(data_type) and type_widening.can_up_cast(old_type, data_type)
    ):
        name = f"`{field['name']}`"
        old_sql, new_sql = type_widening.sql_name(old_type), type_widening.sql_name(data_type)
        raise SqlError(
            f"[NOT_SUPPORTED_CHANGE_COLUMN] ALTER TABLE ALTER/CHANGE COLUMN is not supported for changing "
            f'{location}\'s column {name} with type "{old_sql}" to {name} with type "{new_sql}".'
        )
    allowed = (
        type_widening.is_atomic(old_type)
        and type_widening.enabled(configuration)
        and type_widening.is_supported_change(old_type, data_type)
    )
    if not allowed:
        raise SqlError(
            "[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP] ALTER TABLE CHANGE COLUMN is not supported for "
            f"changing column {shown_path} from {type_widening.sql_name(old_type)}{nullable_text} to "
            f"{type_widening.sql_name(data_type)}{nullable_text}"
        )
    log.info("%s: column %s widened from %s to %s", location, shown_path, old_type, data_type)
    return {**type_widening.with_type_change(field, old_type, data_type), "type": data_type}


def _check_manual_features(snapshot: Any, data_type: Any) -> None:
    """A new type that needs the ``timestampNtz`` feature on a table without it: Delta adds that feature to an
    existing table only when asked (``automaticallyUpdateProtocolOfExistingTables`` is false for it).

    Raises:
        SqlError: Delta's ``DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT``, with the features the table supports.
    """
    supported = protocol.supported_features(protocol_action(snapshot))
    if '"timestamp_ntz"' not in json.dumps(data_type) or "timestampNtz" in supported:
        return
    listed = ", ".join(sorted(supported))
    raise SqlError(
        "[DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT] Your table schema requires manually enablement of the following "
        "table feature(s): timestampNtz.\n\nTo do this, run the following command for each of features listed "
        "above:\n  ALTER TABLE table_name SET TBLPROPERTIES ('delta.feature.feature_name' = 'supported')\nReplace "
        f'"table_name" and "feature_name" with real values.\n\nCurrent supported feature(s): {listed}.'
    )


def change_column(
    table: str | TableLocation, path: Sequence[str], change: ColumnChange, *, max_attempts: int = 100
) -> TableVersion:
    """``ALTER TABLE t ALTER|CHANGE COLUMN c ...``: one ``CHANGE COLUMN`` commit of the column's comment,
    nullability (``DROP NOT NULL``; ``SET NOT NULL`` is refused, as Delta refuses it), position (``FIRST`` /
    ``AFTER``) or type: a widening Delta allows on a table with ``delta.enableTypeWidening`` (recorded in the
    column's ``delta.typeChanges``; no data file is rewritten, readers cast the old files' values).

    Raises:
        SqlError: no such column, a change Delta refuses (``DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP``, Spark's
            ``NOT_SUPPORTED_CHANGE_COLUMN`` for a type that is not an upcast), a constraint or generated column
            that refers to a retyped column, an ``AFTER`` column that is not there.
    """
    location = table_location(table)
    location.check_commit_safety()
    path = tuple(path)
    cut, steps = _element_steps(_schema(existing_table(location)), path, shown=str(location))
    if steps:
        return _change_element(location, path[:cut], steps, change, max_attempts=max_attempts)
    new_field: dict[str, Any] = {}

    def apply(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        schema = _schema(snapshot)
        fields, index = _locate(schema, path, shown=str(location))
        old = fields[index]
        field = dict(old)
        shown_path = dotted([*path[:-1], str(old["name"])])
        if change.data_type is not None and change.data_type != old["type"]:
            field = _retyped(field, change.data_type, configuration, shown_path=shown_path, location=location)
            _check_dependents(snapshot, configuration, path)
            _check_manual_features(snapshot, change.data_type)
        if change.nullable is False and old.get("nullable", True):
            kind = type_widening.sql_name(old["type"])
            raise SqlError(
                "[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP] ALTER TABLE CHANGE COLUMN is not supported for "
                f"changing column {shown_path} from {kind} to {kind} NOT NULL"
            )
        if change.nullable is True:
            field["nullable"] = True
        if change.comment is not None:
            field["metadata"] = {**(field.get("metadata") or {}), "comment": change.comment}
        del fields[index]
        after_itself = change.position is not None and change.position[1].lower() == str(old["name"]).lower()
        if change.position is None or (change.position[0] == "after" and after_itself):
            fields.insert(index, field)
        else:
            _place(fields, field, change.position, shown=str(location))
        new_field.clear()
        new_field.update(field)
        return configuration, _encode(schema), {}

    fields, index = _locate(_schema(existing_table(location)), path, shown=str(location))
    preview = dict(fields[index])
    if change.data_type is not None:
        preview["type"] = change.data_type
    if change.nullable is True:
        preview["nullable"] = True
    if change.comment is not None:
        preview["metadata"] = {**(preview.get("metadata") or {}), "comment": change.comment}
    column: dict[str, Any] = {
        "name": dotted([*path[:-1], str(preview["name"])]),
        "type": preview["type"] if isinstance(preview["type"], str) else preview["type"].get("type"),
        "nullable": preview.get("nullable", True),
        "metadata": preview.get("metadata") or {},
    }
    parameters: dict[str, Any] = {"column": column}
    if change.position is not None:
        parameters["position"] = "FIRST" if change.position[0] == "first" else f"AFTER {change.position[1]}"
    return commit_schema(location, Operation("CHANGE COLUMN", parameters), apply, max_attempts=max_attempts)


_ELEMENT_STEPS = {"key": ("map", "keyType"), "value": ("map", "valueType"), "element": ("array", "elementType")}


def _element_steps(schema: dict[str, Any], path: Sequence[str], *, shown: str) -> tuple[int, tuple[str, ...]]:
    """Where an ``ALTER COLUMN`` path leaves the struct fields: (the length of the field's path, the ``key`` /
    ``value`` / ``element`` steps into its maps and arrays after it); no steps for a struct field."""
    for cut in range(len(path), 0, -1):
        steps = tuple(p.lower() for p in path[cut:])
        if not all(step in _ELEMENT_STEPS for step in steps):
            break
        try:
            fields, index = _locate(schema, path[:cut], shown=shown)
        except SqlError:
            continue
        kind = fields[index]["type"]
        for step in steps:
            container, key = _ELEMENT_STEPS[step]
            if not (isinstance(kind, dict) and kind.get("type") == container):
                break
            kind = kind[key]
        else:
            return cut, steps
    return len(path), ()


def _change_element(
    location: TableLocation,
    field_path: tuple[str, ...],
    steps: tuple[str, ...],
    change: ColumnChange,
    *,
    max_attempts: int,
) -> TableVersion:
    """``ALTER TABLE t ALTER COLUMN m.key | m.value | a.element TYPE <wider>``: the type of a map key or value or
    an array element (type widening only, as Delta's ``verifyMapArrayChange``), the change recorded on the nearest
    struct field with its ``fieldPath``.

    Raises:
        SqlError: a comment, a position or a nullability change, or a type change Delta refuses.
    """
    shown_path = dotted([*field_path, *steps])
    if change.comment is not None or change.position is not None or change.nullable is not None:
        raise SqlError(
            f"[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP] ALTER TABLE CHANGE COLUMN of {shown_path} on {location}: "
            "a map key or value or an array element takes a change of type only"
        )

    def apply(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        schema = _schema(snapshot)
        fields, index = _locate(schema, field_path, shown=str(location))
        field = fields[index]
        containers = [field["type"]]
        for step in steps[:-1]:
            containers.append(containers[-1][_ELEMENT_STEPS[step][1]])
        key = _ELEMENT_STEPS[steps[-1]][1]
        old_type = containers[-1][key]
        if change.data_type is None or change.data_type == old_type:
            return configuration, _encode(schema), {}
        probe = {"name": steps[-1], "type": old_type, "nullable": True, "metadata": {}}
        _retyped(probe, change.data_type, configuration, shown_path=shown_path, location=location)
        _check_dependents(snapshot, configuration, field_path)
        _check_manual_features(snapshot, change.data_type)
        containers[-1][key] = change.data_type
        fields[index] = type_widening.with_type_change(field, old_type, change.data_type, field_path=steps)
        return configuration, _encode(schema), {}

    column = {"name": shown_path, "type": change.data_type, "nullable": True, "metadata": {}}
    return commit_schema(location, Operation("CHANGE COLUMN", {"column": column}), apply, max_attempts=max_attempts)


def replace_columns(
    table: str | TableLocation, columns: Sequence[Mapping[str, Any]], *, max_attempts: int = 100
) -> TableVersion:
    """``ALTER TABLE t REPLACE COLUMNS (...)``: the table's columns become ``columns`` where Delta allows it (the
    same columns reordered, comments changed, nullability loosened, columns added as nullable; columns left out
    are dropped, which needs column mapping); one ``REPLACE COLUMNS`` commit. Kept columns keep their metadata
    (ids and physical names).

    Raises:
        SqlError: a change Delta refuses (``DELTA_UNSUPPORTED_ALTER_TABLE_REPLACE_COL_OP``), duplicate names, a
            table with identity columns.
    """
    location = table_location(table)
    location.check_commit_safety()
    wanted = [dict(c) for c in columns]
    _check_duplicates(wanted, shown=str(location))

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = _configuration(snapshot)
        schema = _schema(snapshot)
        old_fields = schema["fields"]
        if any("delta.identity.start" in (f.get("metadata") or {}) for f in old_fields):
            raise SqlError(
                "[DELTA_IDENTITY_COLUMNS_REPLACE_COLUMN_NOT_SUPPORTED] ALTER TABLE REPLACE COLUMNS is not supported "
                "for table with IDENTITY columns."
            )
        mapped = configured_mode(configuration) != "none"

        def refuse(reason: str) -> SqlError:
            return SqlError(
                f"[DELTA_UNSUPPORTED_ALTER_TABLE_REPLACE_COL_OP] Unsupported ALTER TABLE REPLACE COLUMNS operation. "
                f"Reason: {reason}\n\nFailed to change schema from:\n{_encode(schema)}\nto:\n"
                f"{_encode({'type': 'struct', 'fields': wanted})}"
            )

        def merge_fields(old_fields: list[dict[str, Any]], new: list[dict[str, Any]], path: tuple[str, ...]) -> Any:
            out = []
            kept: set[int] = set()
            for want in new:
                index = _find(old_fields, str(want["name"]))
                if index is None:
                    if not want.get("nullable", True):
                        raise refuse(
                            f"Cannot change data type: adding non-nullable column {dotted([*path, want['name']])}"
                        )
                    out.append(want)
                    continue
                kept.add(index)
                old = old_fields[index]
                name = dotted([*path, str(old["name"])])
                if old.get("nullable", True) and not want.get("nullable", True):
                    raise refuse(f"Cannot change data type: tightening nullability of {name}")
                metadata = dict(old.get("metadata") or {})
                comment = (want.get("metadata") or {}).get("comment")
                if comment is not None:
                    metadata["comment"] = comment
                merged = merge_type(old["type"], want["type"], (*path, str(old["name"])))
                nullable = want.get("nullable", True)
                out.append({**old, "name": want["name"], "type": merged, "nullable": nullable, "metadata": metadata})
            left_out = [dotted([*path, str(f["name"])]) for i, f in enumerate(old_fields) if i not in kept]
            if left_out and not mapped:
                raise refuse(f"Cannot change data type: dropping column(s) [{', '.join(left_out)}]")
            return out, left_out

        def merge_type(old: Any, new: Any, path: tuple[str, ...]) -> Any:
            if isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type") == "struct":
                return {**old, "fields": merge_fields(old["fields"], new["fields"], path)[0]}
            if isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type") == "array":
                return {**old, "elementType": merge_type(old["elementType"], new["elementType"], (*path, "element"))}
            if isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type") == "map":
                return {
                    **old,
                    "keyType": merge_type(old["keyType"], new["keyType"], (*path, "key")),
                    "valueType": merge_type(old["valueType"], new["valueType"], (*path, "value")),
                }
            if old != new:
                raise refuse(f"Cannot change data type: changing data type of {dotted(path)} from {old} to {new}")
            return old

        new_fields, left_out = merge_fields(old_fields, wanted, ())
        partitions = {c.lower() for c in snapshot.metadata().partition_columns}
        if any(c.lower() in partitions for c in left_out):
            raise refuse(f"Cannot drop partition column(s) {left_out}")
        schema = _with_mapping({**schema, "fields": new_fields}, configuration, location)
        return configuration, _encode(schema), {}

    parameters = [
        {
            "name": c["name"],
            "type": c["type"] if isinstance(c["type"], str) else c["type"].get("type"),
            "nullable": c.get("nullable", True),
            "metadata": c.get("metadata") or {},
        }
        for c in wanted
    ]
    return commit_schema(
        location, Operation("REPLACE COLUMNS", {"columns": parameters}), change, max_attempts=max_attempts
    )


__all__ = [
    "ADVICE",
    "ColumnChange",
    "NewColumn",
    "Position",
    "add_columns",
    "change_column",
    "dotted",
    "drop_columns",
    "rename_column",
    "replace_columns",
]
