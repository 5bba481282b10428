"""Column mapping (issue 12 item 5): a table written with physical field names reads back with logical names,
and null nested values (a null map of structs, a null array of structs, a null struct) stay null.

The table is written here by hand, as Delta's JVM connector lays it out: Parquet files whose columns and nested
fields carry the physical names (with Parquet field ids), and a commit whose schema maps logical to physical
names (``delta.columnMapping.physicalName`` / ``delta.columnMapping.id``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _field(name: str, physical: str, field_id: int, delta_type: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": delta_type,
        "nullable": True,
        "metadata": {"delta.columnMapping.id": field_id, "delta.columnMapping.physicalName": physical},
    }


def _arrow(physical: str, field_id: int, type_: pa.DataType) -> pa.Field:
    return pa.field(physical, type_, metadata={b"PARQUET:field_id": str(field_id).encode()})


ROWS: list[dict[str, Any]] = [
    {"id": 1, "tags": [("a", {"score": 10})], "items": [{"score": 1}], "info": {"score": 5}},
    {"id": 2, "tags": None, "items": None, "info": None},
    {"id": 3, "tags": [], "items": [], "info": {"score": None}},
    {"id": 4, "tags": [("b", None)], "items": [None], "info": None},
]


def write_column_mapped_table(root: Path, mode: str) -> None:
    def inner(n: int) -> pa.DataType:
        return pa.struct([_arrow(f"col-s{n}", 4 + n, pa.int64())])

    schema = pa.schema(
        [
            _arrow("col-id", 1, pa.int64()),
            _arrow("col-tags", 2, pa.map_(pa.string(), inner(1))),
            _arrow("col-items", 3, pa.list_(pa.field("element", inner(2)))),
            _arrow("col-info", 4, inner(3)),
        ]
    )
    data = {
        "col-id": [r["id"] for r in ROWS],
        "col-tags": [
            None if r["tags"] is None else [(k, None if v is None else {"col-s1": v["score"]}) for k, v in r["tags"]]
            for r in ROWS
        ],
        "col-items": [
            None if r["items"] is None else [None if v is None else {"col-s2": v["score"]} for v in r["items"]]
            for r in ROWS
        ],
        "col-info": [None if r["info"] is None else {"col-s3": r["info"]["score"]} for r in ROWS],
    }
    root.mkdir(parents=True)
    pq.write_table(pa.table(data, schema=schema), root / "part-00000.snappy.parquet", row_group_size=2)

    def score(n: int) -> dict[str, Any]:
        return {"type": "struct", "fields": [_field("score", f"col-s{n}", 4 + n, "long")]}

    fields = [
        _field("id", "col-id", 1, "long"),
        _field(
            "tags",
            "col-tags",
            2,
            {"type": "map", "keyType": "string", "valueType": score(1), "valueContainsNull": True},
        ),
        _field("items", "col-items", 3, {"type": "array", "elementType": score(2), "containsNull": True}),
        _field("info", "col-info", 4, score(3)),
    ]
    actions = [
        {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
        {
            "metaData": {
                "id": "cm-test",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps({"type": "struct", "fields": fields}),
                "partitionColumns": [],
                "configuration": {"delta.columnMapping.mode": mode, "delta.columnMapping.maxColumnId": "7"},
                "createdTime": 1700000000000,
            }
        },
        {
            "add": {
                "path": "part-00000.snappy.parquet",
                "partitionValues": {},
                "size": (root / "part-00000.snappy.parquet").stat().st_size,
                "modificationTime": 1700000000000,
                "dataChange": True,
            }
        },
        {"commitInfo": {"timestamp": 1700000000000, "operation": "WRITE"}},
    ]
    log = root / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


@pytest.mark.parametrize("mode", ["name", "id"])
def test_null_nested_values_stay_null_through_renaming(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    table = tmp_path / f"cm-{mode}"
    write_column_mapped_table(table, mode)
    df = spark.read.format("delta").load(str(table))
    assert df.columns == ["id", "tags", "items", "info"]
    got = sorted(df.toArrow().to_pylist(), key=lambda r: r["id"])
    assert got == ROWS
    # Nulls filter as nulls in Spark, too (an empty map would not).
    assert sorted(r["id"] for r in df.where("tags is null").collect()) == [2]
    assert sorted(r["id"] for r in df.where("items is null").collect()) == [2]
    assert sorted(r["id"] for r in df.where("info is null").collect()) == [2, 4]
