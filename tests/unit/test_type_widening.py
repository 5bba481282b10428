"""Delta's type widening rules (:mod:`sparkonce.delta.table.type_widening`) against PROTOCOL.md's list and Delta's
``TypeWidening.isTypeChangeSupported``, the ``delta.typeChanges`` records, and the reader's check of them."""

from __future__ import annotations

import pytest

from sparkonce.delta.table.skipping import column_kinds
from sparkonce.delta.table.type_widening import (
    can_up_cast,
    check_readable,
    is_schema_evolution_change,
    is_supported_change,
    recorded_changes,
    sql_name,
    with_type_change,
)
from sparkonce.errors import UnsupportedFeatureError

SUPPORTED = [
    ("byte", "short"),
    ("byte", "long"),
    ("short", "integer"),
    ("integer", "long"),
    ("float", "double"),
    ("byte", "double"),
    ("integer", "double"),
    ("date", "timestamp_ntz"),
    ("decimal(5,2)", "decimal(6,2)"),
    ("decimal(5,2)", "decimal(7,4)"),
    ("integer", "decimal(10,0)"),
    ("short", "decimal(12,2)"),
    ("long", "decimal(20,0)"),
    ("long", "decimal(38,18)"),
]
UNSUPPORTED = [
    ("long", "integer"),
    ("double", "float"),
    ("long", "double"),
    ("integer", "float"),
    ("date", "timestamp"),
    ("timestamp", "timestamp_ntz"),
    ("decimal(5,2)", "decimal(6,4)"),
    ("decimal(5,2)", "decimal(5,1)"),
    ("integer", "decimal(9,0)"),
    ("integer", "decimal(11,2)"),
    ("long", "decimal(21,2)"),
    ("string", "integer"),
    ("integer", "string"),
    ("decimal(10,0)", "long"),
]


@pytest.mark.parametrize(("old", "new"), SUPPORTED)
def test_the_widenings_delta_allows(old: str, new: str) -> None:
    assert is_supported_change(old, new)


@pytest.mark.parametrize(("old", "new"), UNSUPPORTED)
def test_changes_delta_refuses(old: str, new: str) -> None:
    assert not is_supported_change(old, new)


def test_schema_evolution_takes_only_changes_within_a_type_family() -> None:
    assert is_schema_evolution_change("integer", "long")
    assert is_schema_evolution_change("decimal(5,2)", "decimal(8,3)")
    assert is_schema_evolution_change("date", "timestamp_ntz")
    assert not is_schema_evolution_change("integer", "double")
    assert not is_schema_evolution_change("long", "decimal(22,0)")


def test_spark_up_casts_decide_which_error_a_refusal_gets() -> None:
    assert can_up_cast("integer", "float") and can_up_cast("long", "double") and can_up_cast("date", "timestamp")
    assert not can_up_cast("long", "integer")
    assert not can_up_cast("integer", "decimal(9,0)")
    assert not can_up_cast("string", "integer")
    assert can_up_cast("integer", "string")
    assert can_up_cast("decimal(10,0)", "long") and not can_up_cast("decimal(10,2)", "long")
    assert not can_up_cast("decimal(5,2)", "double")


def test_sql_names_are_sparks() -> None:
    assert [sql_name(t) for t in ("byte", "integer", "long", "decimal(10, 2)", "timestamp_ntz")] == [
        "TINYINT",
        "INT",
        "BIGINT",
        "DECIMAL(10,2)",
        "TIMESTAMP_NTZ",
    ]


def test_changes_are_appended_in_order_and_found_in_nested_fields() -> None:
    field = {"name": "e", "type": "short", "nullable": True, "metadata": {"comment": "c"}}
    field = with_type_change(field, "short", "integer")
    field = with_type_change(field, "integer", "long")
    assert field["metadata"] == {
        "comment": "c",
        "delta.typeChanges": [{"fromType": "short", "toType": "integer"}, {"fromType": "integer", "toType": "long"}],
    }
    inner = with_type_change({"name": "q", "type": "long", "nullable": True, "metadata": {}}, "integer", "long")
    outer = {
        "name": "s",
        "type": {"type": "array", "elementType": {"type": "struct", "fields": [inner]}, "containsNull": True},
        "nullable": True,
        "metadata": {},
    }
    assert list(recorded_changes([field, outer])) == [
        (("e",), {"fromType": "short", "toType": "integer"}),
        (("e",), {"fromType": "integer", "toType": "long"}),
        (("s", "element", "q"), {"fromType": "integer", "toType": "long"}),
    ]


def test_a_reader_refuses_a_recorded_change_delta_does_not_allow() -> None:
    good = with_type_change({"name": "a", "type": "long", "nullable": True, "metadata": {}}, "integer", "long")
    strings = with_type_change({"name": "c", "type": "string", "nullable": True, "metadata": {}}, "char(3)", "string")
    check_readable([good, strings], "/t")
    bad = with_type_change({"name": "b", "type": "integer", "nullable": True, "metadata": {}}, "string", "integer")
    with pytest.raises(
        UnsupportedFeatureError,
        match=r"^\[DELTA_UNSUPPORTED_TYPE_CHANGE_IN_SCHEMA\] .* Field b was changed from STRING to INT\. \(/t\)$",
    ):
        check_readable([good, bad], "/t")


def test_data_skipping_ignores_statistics_of_a_float_widened_to_double() -> None:
    widened = with_type_change({"name": "f", "type": "double", "nullable": True, "metadata": {}}, "float", "double")
    longer = with_type_change({"name": "i", "type": "long", "nullable": True, "metadata": {}}, "integer", "long")
    assert column_kinds([widened, longer]) == {"f": "other", "i": "int"}


def test_an_older_narrower_type_widens_to_the_read_type_through_nested_types() -> None:
    from sparkonce.delta.table.type_widening import widens_to

    old = {"type": "struct", "fields": [{"name": "q", "type": "integer"}, {"name": "gone", "type": "string"}]}
    new = {"type": "struct", "fields": [{"name": "Q", "type": "long"}, {"name": "added", "type": "string"}]}
    assert widens_to(old, new)
    assert widens_to({"type": "map", "keyType": "integer", "valueType": "float"}, {
        "type": "map", "keyType": "long", "valueType": "double"
    })  # fmt: skip
    assert not widens_to(new, old)
    assert not widens_to({"type": "array", "elementType": "long"}, {"type": "array", "elementType": "integer"})
    assert not widens_to("integer", {"type": "array", "elementType": "integer"})


def test_dropping_type_widening_removes_every_type_change_and_lists_the_fields() -> None:
    from sparkonce.delta.table.type_widening import without_type_changes

    change = {"delta.typeChanges": [{"fromType": "short", "toType": "integer"}], "comment": "kept"}
    fields = [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {
            "name": "s",
            "type": {
                "type": "struct",
                "fields": [{"name": "x", "type": "integer", "nullable": True, "metadata": change}],
            },
            "nullable": True,
            "metadata": {},
        },
    ]
    cleaned, removed = without_type_changes(fields)
    assert cleaned[1]["type"]["fields"][0]["metadata"] == {"comment": "kept"}
    assert cleaned[0] == fields[0]
    assert removed == [{"name": "s.x", "type": "integer", "nullable": True, "metadata": change}]
    assert list(recorded_changes(cleaned)) == []
