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


NEW_ROWS: list[dict[str, Any]] = [
    {"id": 5, "tags": [("c", {"score": 7})], "items": [{"score": 3}, None], "info": {"score": 8}},
    {"id": 6, "tags": None, "items": None, "info": None},
    {"id": 7, "tags": [("d", None)], "items": [], "info": {"score": None}},
]
DDL = "id long, tags map<string, struct<score: long>>, items array<struct<score: long>>, info struct<score: long>"
PHYSICAL = ["col-id", "col-tags", "col-items", "col-info"]


def _frame(spark: SparkSession, rows: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame(
        [(r["id"], None if r["tags"] is None else dict(r["tags"]), r["items"], r["info"]) for r in rows], DDL
    )


def _rows(spark: SparkSession, table: Path) -> list[dict[str, Any]]:
    return sorted(spark.read.format("delta").load(str(table)).toArrow().to_pylist(), key=lambda r: r["id"])


def _delta_rs_rows(table: Path) -> list[tuple[int, int | None]]:
    """(id, info.score) as delta-rs reads the table (by physical names): an independent reader."""
    from deltalake import DeltaTable, QueryBuilder

    result = QueryBuilder().register("t", DeltaTable(str(table))).execute("select id, info from t").read_all()
    return sorted((r["id"], None if r["info"] is None else r["info"]["score"]) for r in pa.table(result).to_pylist())


def _expected_rs(rows: list[dict[str, Any]]) -> list[tuple[int, int | None]]:
    return sorted((r["id"], None if r["info"] is None else r["info"]["score"]) for r in rows)


def _check_new_files(table: Path, before: set[str]) -> None:
    """Files sparkonce added name their columns (nested fields too) by physical name, with the field ids."""
    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.storage import table_location

    files = DeltaLog(table_location(str(table))).snapshot(None).files
    added = set(files) - before
    assert added
    for path in added:
        schema = pq.read_schema(table / path)
        assert schema.names == PHYSICAL
        assert [f.metadata[b"PARQUET:field_id"] for f in schema] == [b"1", b"2", b"3", b"4"]
        assert schema.field("col-info").type.field(0).name == "col-s3"
        assert schema.field("col-items").type.value_type.field(0).name == "col-s2"
        assert set(json.loads(files[path]["stats"])["minValues"]) <= set(PHYSICAL)


def _active(table: Path) -> set[str]:
    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.storage import table_location

    return set(DeltaLog(table_location(str(table))).snapshot(None).files)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_appends_write_physical_names_and_read_back_through_every_reader(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    """A batch append and a streaming append into a column-mapped table: the files carry physical names and
    field ids (before the fix they carried logical names and every reader saw their columns as null)."""
    table = tmp_path / f"cm-{mode}"
    write_column_mapped_table(table, mode)
    before = _active(table)
    _frame(spark, NEW_ROWS[:2]).write.format("delta").mode("append").save(str(table))
    source = tmp_path / "source"
    _frame(spark, NEW_ROWS[2:]).write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert _rows(spark, table) == ROWS + NEW_ROWS
    assert _delta_rs_rows(table) == _expected_rs(ROWS + NEW_ROWS)
    _check_new_files(table, before)


def test_delete_update_merge_and_optimize_rewrite_with_physical_names(spark: SparkSession, tmp_path: Path) -> None:
    from sparkonce.delta.tables import DeltaTable

    table = tmp_path / "cm"
    write_column_mapped_table(table, "id")
    before = _active(table)
    delta = DeltaTable.forPath(spark, str(table))
    delta.delete("id = 1")
    delta.update("id = 3", {"info": "named_struct('score', 30L)"})
    (
        delta.alias("t")
        .merge(_frame(spark, [{**NEW_ROWS[0], "id": 4}, NEW_ROWS[1]]).alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected = [
        {**ROWS[1]},
        {**ROWS[2], "info": {"score": 30}},
        {**NEW_ROWS[0], "id": 4},
        NEW_ROWS[1],
    ]
    assert _rows(spark, table) == expected
    assert _delta_rs_rows(table) == _expected_rs(expected)
    _check_new_files(table, before)
    delta.optimize().executeCompaction()
    assert _rows(spark, table) == expected
    assert _delta_rs_rows(table) == _expected_rs(expected)
    assert len(_active(table)) == 1
    _check_new_files(table, before)


def test_merge_schema_gives_new_columns_ids_and_physical_names(spark: SparkSession, tmp_path: Path) -> None:
    """A batch and a streaming ``mergeSchema`` write into a column-mapped table: each new column gets the next id and
    a physical name, its files carry them, and every reader sees its values."""
    table = tmp_path / "cm"
    write_column_mapped_table(table, "name")
    wider = _frame(spark, NEW_ROWS[:1]).selectExpr("*", "IF(id > 0, 'x', NULL) AS extra")
    wider.write.format("delta").mode("append").option("mergeSchema", "true").save(str(table))
    source = tmp_path / "source"
    _frame(spark, NEW_ROWS[1:2]).selectExpr(
        "*", "IF(id > 0, 'y', NULL) AS extra", "IF(id > 0, 7, NULL) AS more"
    ).write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .option("mergeSchema", "true")
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    entries = sorted((table / "_delta_log").glob("*.json"))
    lines = [json.loads(line) for line in entries[-1].read_text().splitlines()]
    metadata = next(a["metaData"] for a in lines if "metaData" in a)
    fields = {f["name"]: f["metadata"] for f in json.loads(metadata["schemaString"])["fields"]}
    assert (fields["extra"]["delta.columnMapping.id"], fields["more"]["delta.columnMapping.id"]) == (8, 9)
    assert metadata["configuration"]["delta.columnMapping.maxColumnId"] == "9"
    physical = {fields[c]["delta.columnMapping.physicalName"] for c in ("extra", "more")}
    assert all(p.startswith("col-") for p in physical)
    newest = [a["add"]["path"] for a in lines if "add" in a]
    assert physical <= set(pq.read_schema(table / newest[0]).names)
    rows = spark.read.format("delta").load(str(table)).where("id >= 5").select("id", "extra", "more").collect()
    assert sorted((r["id"], r["extra"], r["more"]) for r in rows) == [(5, "x", None), (6, "y", 7)]
    from deltalake import DeltaTable, QueryBuilder

    result = QueryBuilder().register("t", DeltaTable(str(table))).execute("select id, extra, more from t where id >= 5")
    assert sorted(tuple(r.values()) for r in pa.table(result.read_all()).to_pylist()) == [(5, "x", None), (6, "y", 7)]
