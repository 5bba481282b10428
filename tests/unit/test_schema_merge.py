"""How a write's types merge with the table's (:func:`sparkonce.delta.table.schema.merge_fields`), as Delta's
``SchemaMergingUtils.mergeDataTypes`` merges them: the table keeps its type for narrower Parquet integers, type
widening takes the data's same-family wider types at any depth (``delta.typeChanges`` with ``fieldPath`` below the
nearest struct field), the streaming sink casts numbers, and the rest is ``DELTA_FAILED_TO_MERGE_FIELDS``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from sparkonce.delta.table.schema import cast_schema, merge_fields, reconcile
from sparkonce.errors import SchemaMismatchError


def _field(name: str, kind: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


@pytest.mark.parametrize(
    ("table", "data", "widening", "implicit", "merged"),
    [
        ("integer", "short", False, False, "integer"),  # Parquet INT32: the table keeps its type
        ("short", "integer", False, False, "integer"),  # ... or takes the wider one (a schema change)
        ("long", "integer", False, True, "long"),  # the sink casts
        ("integer", "long", False, True, "integer"),  # ... down too (an overflow fails the batch)
        ("decimal(12,2)", "decimal(10,2)", False, True, "decimal(12,2)"),
        ("timestamp_ntz", "date", False, True, "timestamp_ntz"),
        ("integer", "long", True, False, "long"),  # type widening by schema evolution
        ("byte", "short", True, False, "short"),
    ],
)
def test_top_level_types_merge_as_deltas(table: str, data: str, widening: bool, implicit: bool, merged: str) -> None:
    fields = merge_fields([_field("v", table)], [_field("v", data)], widening=widening, implicit=implicit)
    assert fields[0]["type"] == merged
    widened = merged != table and widening
    assert bool(fields[0]["metadata"]) == widened


@pytest.mark.parametrize(
    ("table", "data", "error"),
    [
        ("long", "integer", "Failed to merge incompatible data types LongType and IntegerType"),
        ("double", "float", "Failed to merge incompatible data types DoubleType and FloatType"),
        ("integer", "string", "Failed to merge incompatible data types IntegerType and StringType"),
        ("decimal(12,2)", "decimal(10,2)", "DELTA_MERGE_INCOMPATIBLE_DECIMAL_TYPE.*precision 12 and 10"),
        ("integer", "double", "IntegerType and DoubleType"),  # int -> double is an ALTER-only widening
    ],
)
def test_a_batch_write_refuses_other_types_with_deltas_error(table: str, data: str, error: str) -> None:
    with pytest.raises(SchemaMismatchError, match=rf"(?s)\[DELTA_FAILED_TO_MERGE_FIELDS\] .*'v' and 'v'.*{error}"):
        reconcile(
            [_field("v", table)],
            [_field("v", data)],
            merge_schema=True,
            table_id="id",
            table_path="/t",
            type_widening=True,
        )


def test_nested_fields_widen_with_their_field_path_on_the_nearest_struct_field() -> None:
    table = [
        _field("s", {"type": "struct", "fields": [_field("a", "short"), _field("b", "string")]}),
        _field("m", {"type": "map", "keyType": "integer", "valueType": "float", "valueContainsNull": True}),
        _field("l", {"type": "array", "elementType": {"type": "array", "elementType": "byte", "containsNull": True}}),
    ]
    data = [
        _field("s", {"type": "struct", "fields": [_field("a", "integer"), _field("b", "string")]}),
        _field("m", {"type": "map", "keyType": "long", "valueType": "double", "valueContainsNull": True}),
        _field("l", {"type": "array", "elementType": {"type": "array", "elementType": "long", "containsNull": True}}),
    ]
    merged = merge_fields(table, data, widening=True, implicit=False)
    struct = merged[0]["type"]["fields"][0]
    assert (struct["type"], struct["metadata"]) == (
        "integer",
        {"delta.typeChanges": [{"fromType": "short", "toType": "integer"}]},
    )
    assert merged[0]["metadata"] == {}
    assert merged[1]["type"]["keyType"] == "long" and merged[1]["type"]["valueType"] == "double"
    assert merged[1]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "key"},
        {"fromType": "float", "toType": "double", "fieldPath": "value"},
    ]
    assert merged[2]["metadata"]["delta.typeChanges"] == [
        {"fromType": "byte", "toType": "long", "fieldPath": "element.element"}
    ]
    # Without type widening: a struct's short takes the data's int (Parquet INT32), a map's int key refuses a long.
    with pytest.raises(ValueError, match=r"DELTA_FAILED_TO_MERGE_FIELDS.*'m' and 'm'.*IntegerType and LongType"):
        merge_fields(table, data, widening=False, implicit=False)


def test_the_files_schema_casts_only_what_the_table_keeps() -> None:
    table = [
        _field("id", "long"),
        _field("v", "long"),
        _field("s", {"type": "struct", "fields": [_field("a", "double"), _field("b", "date")]}),
    ]
    data = pa.schema(
        [
            ("id", pa.int64()),
            ("v", pa.int32()),
            ("s", pa.struct([("a", pa.float32()), ("b", pa.date32())])),
        ]
    )
    files = cast_schema(table, data, widening=False, implicit=True)
    assert files == pa.schema(
        [("id", pa.int64()), ("v", pa.int64()), ("s", pa.struct([("a", pa.float64()), ("b", pa.date32())]))]
    )


def test_geo_columns_become_geoarrow_wkb_columns_parquet_writes_as_geometry(tmp_path: Any) -> None:
    """PySpark's ``struct<srid, wkb>`` of a geometry / geography column becomes a ``geoarrow.wkb`` column of its
    CRS, which pyarrow writes as Parquet's GEOMETRY / GEOGRAPHY logical types (a null row stays null)."""
    import pyarrow.parquet as pq

    from sparkonce.delta.write.files import geo_as_wkb

    def geo(kind: bytes, srid: bytes) -> pa.DataType:
        wkb = pa.field("wkb", pa.binary(), metadata={kind: b"true", b"srid": srid})
        return pa.struct([pa.field("srid", pa.int32()), wkb])

    point = bytes.fromhex("0101000000000000000000F03F0000000000000040")
    rows = [{"srid": 4326, "wkb": point}, None]
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "g": pa.array(rows, geo(b"geometry", b"4326")),
            "h": pa.array(rows, geo(b"geography", b"4326")),
            "z": pa.array([{"srid": 0, "wkb": point}, None], geo(b"geometry", b"0")),
        }
    )
    converted = geo_as_wkb(table)
    assert converted.column("g").type.extension_name == "geoarrow.wkb"
    assert converted.column("g").chunk(0).storage.to_pylist() == [point, None]
    pq.write_table(converted, tmp_path / "geo.parquet")
    schema = pq.ParquetFile(tmp_path / "geo.parquet").metadata.schema
    assert [str(schema.column(i).logical_type) for i in (1, 2, 3)] == [
        "Geometry(crs=)",
        "Geography(crs=, algorithm=spherical)",
        "Geometry(crs=SRID:0)",
    ]


def test_a_value_the_tables_type_cannot_hold_fails_the_cast_naming_the_column(tmp_path: Any) -> None:
    from sparkonce.delta.write.files import FileWriterOptions
    from sparkonce.storage import table_location

    options = FileWriterOptions(location=table_location(str(tmp_path)))
    options.cast_schema = pa.schema([("id", pa.int64()), ("v", pa.int32())])
    fits = pa.RecordBatch.from_pydict({"id": [1], "v": [7]}, schema=pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    assert options.cast(fits).schema == options.cast_schema
    assert options.cast(fits).column(1).to_pylist() == [7]
    wide = pa.RecordBatch.from_pydict(
        {"id": [1], "v": [5_000_000_000]}, schema=pa.schema([("id", pa.int64()), ("v", pa.int64())])
    )
    with pytest.raises(
        SchemaMismatchError, match=r"CAST_OVERFLOW_IN_TABLE_INSERT.*int64 type to the int32 type column `v`"
    ):
        options.cast(wide)
