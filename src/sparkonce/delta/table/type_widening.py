"""Delta's type widening (the ``typeWidening`` table feature, ``delta.enableTypeWidening``): which type changes a
column may take, how a change is recorded in the schema, and the check every reader makes of the recorded changes.

The changes Delta allows (PROTOCOL.md "Type Widening", Delta's ``TypeWidening.isTypeChangeSupported``):

* ``byte`` -> ``short`` -> ``integer`` -> ``long``;
* ``float`` -> ``double``; ``byte``, ``short``, ``integer`` -> ``double``;
* ``date`` -> ``timestamp_ntz``;
* ``decimal(p, s)`` -> ``decimal(p + k1, s + k2)`` with ``k1 >= k2 >= 0``;
* ``byte``, ``short``, ``integer`` -> ``decimal(10 + k1, k2)``; ``long`` -> ``decimal(20 + k1, k2)``.

A change is recorded in the ``metadata`` of the changed column (or of the nearest struct field above a map key or
value or an array element) under ``delta.typeChanges``: a list of ``{"fromType", "toType"[, "fieldPath"]}``, oldest
first. Data files keep the type they were written with; readers cast their values up to the table's type
(:mod:`sparkonce.delta.read.reader` through Arrow casts, :mod:`sparkonce.delta.read.native` through Spark's Parquet
reader).

Pure functions on Delta schema JSON; run on the driver.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sparkonce.errors import UnsupportedFeatureError

TYPE_CHANGES_KEY = "delta.typeChanges"
"""The field metadata key holding a column's type changes."""
ENABLE_PROPERTY = "delta.enableTypeWidening"
FEATURES = ("typeWidening", "typeWidening-preview")
"""The table features of type widening (the stable one, and the preview of Delta 3.2)."""

_INTEGRAL_SIZES = {"byte": 1, "short": 2, "integer": 4, "long": 8}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_SQL_NAMES = {
    "byte": "TINYINT",
    "short": "SMALLINT",
    "integer": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP_NTZ",
    "string": "STRING",
    "boolean": "BOOLEAN",
    "binary": "BINARY",
}
_NUMERIC_ORDER = ("byte", "short", "integer", "long", "float", "double")


def _decimal(delta_type: Any) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(p,s)`` type, else None."""
    if not isinstance(delta_type, str):
        return None
    found = _DECIMAL.match(delta_type.strip().lower())
    return (int(found.group(1)), int(found.group(2))) if found else None


def decimal_type(delta_type: Any) -> tuple[int, int] | None:
    """(precision, scale) of a Delta ``decimal(p,s)`` type, else None."""
    return _decimal(delta_type)


def _decimal_of_integral(delta_type: str) -> tuple[int, int] | None:
    """The decimal that holds every value of an integral type (Spark's ``DecimalType.forType``)."""
    return {"byte": (3, 0), "short": (5, 0), "integer": (10, 0), "long": (20, 0)}.get(delta_type)


def _decimal_wider(to: tuple[int, int], other: tuple[int, int]) -> bool:
    """Spark's ``DecimalType.isWiderThan``: ``to`` holds every value of ``other``."""
    return to[0] - to[1] >= other[0] - other[1] and to[1] >= other[1]


def sql_name(delta_type: Any) -> str:
    """A type as Spark's ``DataType.sql`` prints it (``INT``, ``BIGINT``, ``DECIMAL(10,2)``, ``STRUCT``)."""
    if isinstance(delta_type, str):
        decimal = _decimal(delta_type)
        if decimal is not None:
            return f"DECIMAL({decimal[0]},{decimal[1]})"
        return _SQL_NAMES.get(delta_type, delta_type.upper())
    return str(delta_type.get("type", "")).upper()


def is_atomic(delta_type: Any) -> bool:
    """True for a primitive type (not a struct, array or map)."""
    return isinstance(delta_type, str)


def can_up_cast(from_type: str, to_type: str) -> bool:
    """Spark's ``Cast.canUpCast`` of two primitive types: every value of ``from_type`` fits ``to_type`` (Spark
    refuses any other ``ALTER COLUMN ... TYPE`` before Delta sees it)."""
    if from_type == to_type:
        return True
    if to_type == "string":
        return from_type != "binary"
    from_decimal, to_decimal = _decimal(from_type), _decimal(to_type)
    if to_decimal is not None:
        source = from_decimal or _decimal_of_integral(from_type)
        return source is not None and _decimal_wider(to_decimal, source)
    if from_decimal is not None:  # Spark's DecimalType.isTighterThan an integral type
        bound = _decimal_of_integral(to_type)
        return bound is not None and from_decimal[1] == 0 and from_decimal[0] <= bound[0]
    if from_type in _NUMERIC_ORDER and to_type in _NUMERIC_ORDER:
        return _NUMERIC_ORDER.index(from_type) <= _NUMERIC_ORDER.index(to_type)
    return (from_type, to_type) in {
        ("date", "timestamp"),
        ("date", "timestamp_ntz"),
        ("timestamp", "timestamp_ntz"),
        ("timestamp_ntz", "timestamp"),
    }


def is_supported_change(from_type: str, to_type: str) -> bool:
    """Delta's ``TypeWidening.isTypeChangeSupported`` of two primitive types (the same type counts)."""
    if from_type == to_type:
        return True
    if not can_up_cast(from_type, to_type):
        return False
    if from_type in _INTEGRAL_SIZES and to_type in _INTEGRAL_SIZES:
        return _INTEGRAL_SIZES[from_type] <= _INTEGRAL_SIZES[to_type]
    if (from_type, to_type) in {("float", "double"), ("date", "timestamp_ntz")}:
        return True
    if from_type in ("byte", "short", "integer") and to_type == "double":
        return True
    to_decimal = _decimal(to_type)
    if to_decimal is None:
        return False
    from_decimal = _decimal(from_type)
    if from_decimal is not None:
        return _decimal_wider(to_decimal, from_decimal)
    if from_type in ("byte", "short", "integer"):
        return _decimal_wider(to_decimal, (10, 0))
    if from_type == "long":
        return _decimal_wider(to_decimal, (20, 0))
    return False


def is_schema_evolution_change(from_type: str, to_type: str) -> bool:
    """Delta's ``isTypeChangeSupportedForSchemaEvolution``: the changes a write with schema evolution makes by itself
    (integers to wider integers, ``float`` -> ``double``, wider decimals, ``date`` -> ``timestamp_ntz``; not
    integers to ``double`` or ``decimal``)."""
    if from_type == to_type:
        return True
    if not is_supported_change(from_type, to_type):
        return False
    if from_type in _INTEGRAL_SIZES:
        return to_type in _INTEGRAL_SIZES
    return True


def widens_to(old: Any, new: Any) -> bool:
    """True when values of the Delta type ``old`` read as ``new`` through type widening alone: the same shape (struct
    fields by name, arrays, maps) with every differing primitive a change Delta allows."""
    if isinstance(old, str) and isinstance(new, str):
        return is_supported_change(old.strip().lower(), new.strip().lower())
    if not (isinstance(old, dict) and isinstance(new, dict)) or old.get("type") != new.get("type"):
        return False
    kind = old.get("type")
    if kind == "array":
        return widens_to(old.get("elementType"), new.get("elementType"))
    if kind == "map":
        keys = widens_to(old.get("keyType"), new.get("keyType"))
        return keys and widens_to(old.get("valueType"), new.get("valueType"))
    if kind == "struct":
        olds = {str(f["name"]).lower(): f["type"] for f in old.get("fields") or []}
        news = {str(f["name"]).lower(): f["type"] for f in new.get("fields") or []}
        return all(name not in olds or widens_to(olds[name], kind_) for name, kind_ in news.items())
    return old == new


def enabled(configuration: Mapping[str, Any]) -> bool:
    """True when ``delta.enableTypeWidening`` is ``true`` (keys compared case-insensitively)."""
    return any(
        str(k).lower() == ENABLE_PROPERTY.lower() and str(v).strip().lower() == "true"
        for k, v in configuration.items()
        if v is not None
    )


def type_changes(field: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The type changes recorded on a schema field (oldest first; empty when none)."""
    found = (field.get("metadata") or {}).get(TYPE_CHANGES_KEY)
    return [dict(c) for c in found] if isinstance(found, list) else []


def with_type_change(
    field: Mapping[str, Any], from_type: str, to_type: str, *, field_path: Sequence[str] = ()
) -> dict[str, Any]:
    """``field`` with the change ``from_type`` -> ``to_type`` appended to its ``delta.typeChanges`` (``field_path``:
    ``key`` / ``value`` / ``element`` steps below the field for a map key or value or an array element), as Delta's
    ``TypeWideningMetadata.appendToField`` records it."""
    change: dict[str, Any] = {"fromType": from_type, "toType": to_type}
    if field_path:
        change["fieldPath"] = ".".join(field_path)
    metadata = dict(field.get("metadata") or {})
    metadata[TYPE_CHANGES_KEY] = [*type_changes(field), change]
    return {**field, "metadata": metadata}


def recorded_changes(fields: Sequence[Mapping[str, Any]]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every type change recorded in a schema's fields, nested ones included: (the field's path, the change)."""

    def walk(items: Sequence[Mapping[str, Any]], parent: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        for field in items:
            path = (*parent, str(field["name"]))
            for change in type_changes(field):
                yield path, change
            yield from nested(field.get("type"), path)

    def nested(delta_type: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if not isinstance(delta_type, dict):
            return
        kind = delta_type.get("type")
        if kind == "struct":
            yield from walk(delta_type.get("fields") or [], path)
        elif kind == "array":
            yield from nested(delta_type.get("elementType"), (*path, "element"))
        elif kind == "map":
            yield from nested(delta_type.get("keyType"), (*path, "key"))
            yield from nested(delta_type.get("valueType"), (*path, "value"))

    yield from walk(fields, ())


def without_type_changes(
    fields: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The schema's fields without any ``delta.typeChanges`` (at any depth), and the fields that had them as
    Delta's ``TypeWideningMetadata.removeTypeWideningMetadata`` lists them for the ``DROP FEATURE`` commit's
    ``columns`` parameter: each with its dotted path as name and its metadata before the removal."""
    removed: list[dict[str, Any]] = []

    def clean_fields(items: Sequence[Mapping[str, Any]], parent: tuple[str, ...]) -> list[dict[str, Any]]:
        cleaned = []
        for field in items:
            path = (*parent, str(field["name"]))
            metadata = dict(field.get("metadata") or {})
            if TYPE_CHANGES_KEY in metadata:
                removed.append(
                    {
                        "name": ".".join(path),
                        "type": field["type"],
                        "nullable": field.get("nullable", True),
                        "metadata": dict(metadata),
                    }
                )
                del metadata[TYPE_CHANGES_KEY]
            cleaned.append({**field, "type": clean_type(field["type"], path), "metadata": metadata})
        return cleaned

    def clean_type(delta_type: Any, path: tuple[str, ...]) -> Any:
        if not isinstance(delta_type, dict):
            return delta_type
        kind = delta_type.get("type")
        if kind == "struct":
            return {**delta_type, "fields": clean_fields(delta_type.get("fields") or [], path)}
        if kind == "array":
            return {**delta_type, "elementType": clean_type(delta_type["elementType"], (*path, "element"))}
        if kind == "map":
            key = clean_type(delta_type["keyType"], (*path, "key"))
            return {**delta_type, "keyType": key, "valueType": clean_type(delta_type["valueType"], (*path, "value"))}
        return delta_type

    return clean_fields(fields, ()), removed


def check_readable(fields: Sequence[Mapping[str, Any]], table: str) -> None:
    """The reader's check of the type changes a schema records (PROTOCOL.md: readers fail on a change they do not
    support): every one must be a change Delta allows; string to string changes (char/varchar) are not widening and
    pass, as in Delta.

    Raises:
        UnsupportedFeatureError: Delta's ``DELTA_UNSUPPORTED_TYPE_CHANGE_IN_SCHEMA``, naming the field and the types.
    """
    for path, change in recorded_changes(fields):
        from_type, to_type = change.get("fromType"), change.get("toType")
        if isinstance(from_type, str) and isinstance(to_type, str):
            if is_supported_change(from_type.strip().lower(), to_type.strip().lower()):
                continue
            if from_type.lower().startswith(("string", "char", "varchar")) and to_type.lower().startswith(
                ("string", "char", "varchar")
            ):
                continue
        where = ".".join([*path, *str(change.get("fieldPath") or "").split(".")]).strip(".")
        raise UnsupportedFeatureError(
            f"[DELTA_UNSUPPORTED_TYPE_CHANGE_IN_SCHEMA] Unable to operate on this table because an unsupported type "
            f"change was applied. Field {where} was changed from {sql_name(from_type)} to {sql_name(to_type)}. "
            f"({table})"
        )


__all__ = [
    "ENABLE_PROPERTY",
    "FEATURES",
    "TYPE_CHANGES_KEY",
    "can_up_cast",
    "check_readable",
    "decimal_type",
    "enabled",
    "is_atomic",
    "is_schema_evolution_change",
    "is_supported_change",
    "recorded_changes",
    "sql_name",
    "type_changes",
    "widens_to",
    "with_type_change",
    "without_type_changes",
]
