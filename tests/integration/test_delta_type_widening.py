"""Delta's type widening on tables sparkonce writes (issue 41): ``ALTER TABLE ... ALTER COLUMN c TYPE <wider>`` on a
table with ``delta.enableTypeWidening``, the ``typeWidening`` feature in the protocol, each change recorded in the
column's ``delta.typeChanges``, and the files written before the change read with the new type on both read paths
(Spark's Parquet scan and the Python data source). Refusals carry Delta's (or Spark's) error class and name the
column and both types; nothing is written then.

Each test checks the Delta log as Delta writes it, the data files (still of the old type: nothing is rewritten) and
the rows and types both readers give. delta-rs opens these tables (schema, protocol) but does not read their data:
it refuses the ``typeWidening`` reader feature, which the last test pins.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from sparkonce.delta.read.native import NATIVE_READS_CONF, is_native
from sparkonce.errors import SqlError
from sparkonce.sql import DeltaSql

pytestmark = pytest.mark.spark

# column -> (type at creation, type after ALTER, a value written before, a value written after that needs the new type)
WIDENINGS: dict[str, tuple[str, str, Any, Any]] = {
    "b": ("TINYINT", "SMALLINT", 7, 30000),
    "s": ("SMALLINT", "INT", -300, 2_000_000_000),
    "i": ("INT", "BIGINT", 2_000_000_000, 5_000_000_000),
    "f": ("FLOAT", "DOUBLE", 1.5, 1.0e300),
    "n": ("INT", "DOUBLE", 123, 0.25),
    "d": ("DATE", "TIMESTAMP_NTZ", dt.date(2024, 2, 29), dt.datetime(2024, 3, 1, 12, 30, 1)),
    "m": ("DECIMAL(5,2)", "DECIMAL(9,4)", Decimal("123.45"), Decimal("12345.6789")),
    "k": ("INT", "DECIMAL(12,1)", 2_000_000_000, Decimal("99999999999.5")),
    "g": ("BIGINT", "DECIMAL(22,0)", 9_000_000_000_000_000_000, Decimal("1000000000000000000000")),
}
# Delta's typeName of each SQL type, as delta.typeChanges records it.
TYPE_NAMES = {
    "TINYINT": "byte",
    "SMALLINT": "short",
    "INT": "integer",
    "BIGINT": "long",
    "FLOAT": "float",
    "DOUBLE": "double",
    "DATE": "date",
    "TIMESTAMP_NTZ": "timestamp_ntz",
    "DECIMAL(5,2)": "decimal(5,2)",
    "DECIMAL(9,4)": "decimal(9,4)",
    "DECIMAL(12,1)": "decimal(12,1)",
    "DECIMAL(22,0)": "decimal(22,0)",
}


def _entries(table: Path) -> list[list[dict[str, Any]]]:
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted((table / "_delta_log").glob("*.json"))
    ]


def _last(table: Path, kind: str) -> dict[str, Any]:
    """The newest action of ``kind`` in the log (protocol, metaData)."""
    return dict([a[kind] for entry in _entries(table) for a in entry if kind in a][-1])


def _fields(table: Path) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(_last(table, "metaData")["schemaString"])["fields"]}


def _adds(table: Path) -> list[dict[str, Any]]:
    return [a["add"] for entry in _entries(table) for a in entry if "add" in a]


def _read(spark: SparkSession, table: Path, *, native: bool, **options: str) -> DataFrame:
    """The table through the native path or the Python data source."""
    if native:
        frame = spark.read.format("delta").options(**options).load(str(table))
        assert is_native(frame)
        return frame
    spark.conf.set(NATIVE_READS_CONF, "false")
    try:
        frame = spark.read.format("delta").options(**options).load(str(table))
        assert not is_native(frame)
        return frame
    finally:
        spark.conf.unset(NATIVE_READS_CONF)


def _types(frame: DataFrame) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields}


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return sorted((r.asDict(recursive=True) for r in frame.collect()), key=lambda r: r["id"])


def _columns_ddl(which: int) -> str:
    return ", ".join(f"{c} {types[which]}" for c, types in WIDENINGS.items())


def _values(which: int) -> list[Any]:
    return [values[2 + which] for values in WIDENINGS.values()]


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_alter_column_type_widens_every_type_delta_allows_and_both_readers_cast_the_old_files(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, partitioned: bool
) -> None:
    table = tmp_path / "t"
    parts = " PARTITIONED BY (i)" if partitioned else ""
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, {_columns_ddl(0)}) USING delta{parts} "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    protocol = _last(table, "protocol")
    assert protocol["minReaderVersion"] == 3 and protocol["minWriterVersion"] == 7
    assert "typeWidening" in protocol["readerFeatures"] and "typeWidening" in protocol["writerFeatures"]
    # DATE -> TIMESTAMP_NTZ needs Delta's timestampNtz feature, which Delta adds to an existing table only when asked
    sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')")
    spark.createDataFrame([(1, *_values(0))], f"id long, {_columns_ddl(0)}").write.format("delta").mode("append").save(
        str(table)
    )
    before = _last(table, "metaData")
    old_files = {a["path"] for a in _adds(table)}

    for column, (_, new, _, _) in WIDENINGS.items():
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN {column} TYPE {new}")
        commit = _entries(table)[-1]
        info = commit[0]["commitInfo"]
        assert info["operation"] == "CHANGE COLUMN"
        assert json.loads(info["operationParameters"]["column"])["name"] == column
        assert not any("add" in a or "remove" in a for a in commit)  # no data file rewritten
    fields = _fields(table)
    for column, (old, new, _, _) in WIDENINGS.items():
        assert fields[column]["type"] == TYPE_NAMES[new]
        assert fields[column]["metadata"]["delta.typeChanges"] == [
            {"fromType": TYPE_NAMES[old], "toType": TYPE_NAMES[new]}
        ]
    assert _last(table, "metaData")["id"] == before["id"]
    assert _last(table, "metaData")["partitionColumns"] == (["i"] if partitioned else [])
    assert set(_last(table, "protocol")["readerFeatures"]) == {"typeWidening", "timestampNtz"}
    # the old file still holds the old physical types
    (old_file,) = old_files
    physical = pq.read_schema(table / old_file)
    assert physical.field("s").type == pa.int16() and physical.field("f").type == pa.float32()
    assert physical.field("d").type == pa.date32() and physical.field("m").type == pa.decimal128(5, 2)

    spark.createDataFrame([(2, *_values(1))], f"id long, {_columns_ddl(1)}").write.format("delta").mode("append").save(
        str(table)
    )
    expected_types = {"id": "bigint", **{c: new.lower() for c, (_, new, _, _) in WIDENINGS.items()}}
    expected_types["d"] = "timestamp_ntz"
    first = {"id": 1, **{c: _widened(v[2], v[1]) for c, v in WIDENINGS.items()}}
    second = {"id": 2, **{c: _widened(v[3], v[1]) for c, v in WIDENINGS.items()}}
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert _types(frame) == _ordered(expected_types, frame), native
        assert _rows(frame) == [first, second], native
        # filters on the widened columns (data skipping and partition pruning on the native path)
        assert [r["id"] for r in _rows(frame.where("i > 3000000000 AND d >= '2024-03-01'"))] == [2], native
        assert [r["id"] for r in _rows(frame.where("f = 1.5 AND m = 123.45 AND s = -300"))] == [1], native
    # time travel to the table version before the change reads the old types
    old = _read(spark, table, native=True, versionAsOf="2")
    assert _types(old)["i"] == "int" and _types(old)["d"] == "date"
    assert _rows(old)[0]["d"] == dt.date(2024, 2, 29)


def _ordered(types: dict[str, str], frame: DataFrame) -> dict[str, str]:
    return {name: types[name] for name in frame.columns}


def _widened(value: Any, new: str) -> Any:
    """``value`` as Spark returns it under the new type."""
    if new == "DOUBLE":
        return float(value)
    if new == "TIMESTAMP_NTZ" and not isinstance(value, dt.datetime):
        return dt.datetime(value.year, value.month, value.day)
    if new.startswith("DECIMAL"):
        scale = int(new.split(",")[1].rstrip(")"))
        return Decimal(value).quantize(Decimal(1).scaleb(-scale))
    return value


@pytest.mark.parametrize(
    ("enabled", "old", "new", "error"),
    [
        (False, "INT", "BIGINT", r"\[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP\].* column v from INT to BIGINT$"),
        (True, "BIGINT", "DOUBLE", r"\[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP\].* v from BIGINT to DOUBLE$"),
        (True, "INT", "FLOAT", r"_CHANGE_COL_OP.* from INT to FLOAT$"),
        (True, "TIMESTAMP", "TIMESTAMP_NTZ", r"_CHANGE_COL_OP.* from TIMESTAMP to TIMESTAMP_NTZ$"),
        (
            True,
            "DATE",
            "TIMESTAMP_NTZ",
            r"(?s)^\[DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT\] .* feature\(s\): timestampNtz\..*"
            r"Current supported feature\(s\): appendOnly, invariants, typeWidening\.$",
        ),
        (True, "BIGINT", "INT", r"\[NOT_SUPPORTED_CHANGE_COLUMN\].*" r'`v` with type "BIGINT" to `v` with type "INT"'),
        (True, "DOUBLE", "FLOAT", r'NOT_SUPPORTED_CHANGE_COLUMN.* type "DOUBLE" to `v` with type "FLOAT"'),
        (True, "STRING", "INT", r'NOT_SUPPORTED_CHANGE_COLUMN.* type "STRING" to `v` with type "INT"'),
        (True, "INT", "DECIMAL(9,0)", r'NOT_SUPPORTED_CHANGE_COLUMN.* type "INT" to `v` with type "DECIMAL\(9,0\)"'),
        (True, "DECIMAL(5,2)", "DECIMAL(6,1)", r'_COLUMN.* type "DECIMAL\(5,2\)" to `v` with type "DECIMAL\(6,1\)"'),
    ],
)
def test_a_type_change_delta_refuses_names_the_column_and_both_types_and_writes_nothing(
    sql: DeltaSql, tmp_path: Path, enabled: bool, old: str, new: str, error: str
) -> None:
    table = tmp_path / "t"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v {old}) USING delta "
        f"TBLPROPERTIES ('delta.enableTypeWidening' = '{str(enabled).lower()}')"
    )
    protocol = _last(table, "protocol")
    assert ("typeWidening" in (protocol.get("readerFeatures") or [])) is enabled
    commits = len(_entries(table))
    with pytest.raises(SqlError, match=error):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE {new}")
    assert len(_entries(table)) == commits
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE {old}")  # the same type is no change, always allowed


def test_widening_is_enabled_on_an_existing_table_and_set_to_false_keeps_the_feature(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    spark.createDataFrame([(1, 10)], "id long, v int").write.format("delta").save(str(table))
    assert _last(table, "protocol") == {"minReaderVersion": 1, "minWriterVersion": 2}
    with pytest.raises(SqlError, match=r"DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.* from INT to BIGINT"):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    protocol = _last(table, "protocol")
    assert protocol["readerFeatures"] == ["typeWidening"]
    assert set(protocol["writerFeatures"]) == {"appendOnly", "invariants", "typeWidening"}
    sql(f"ALTER TABLE delta.`{table}` CHANGE COLUMN v v BIGINT COMMENT 'wide'")
    field = _fields(table)["v"]
    assert field["type"] == "long"
    assert field["metadata"] == {
        "delta.typeChanges": [{"fromType": "integer", "toType": "long"}],
        "comment": "wide",
    }
    sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'false')")
    assert "typeWidening" in _last(table, "protocol")["readerFeatures"]  # the feature stays; widening is off
    with pytest.raises(SqlError, match=r"DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.* from BIGINT to DECIMAL"):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE DECIMAL(25,0)")
    for native in (True, False):
        assert _rows(_read(spark, table, native=native)) == [{"id": 1, "v": 10}]


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_a_nested_field_widens_on_a_plain_and_a_column_mapped_table(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, mapping: str
) -> None:
    table = tmp_path / "t"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, s STRUCT<p: STRING, q: INT>) USING delta TBLPROPERTIES "
        f"('delta.enableTypeWidening' = 'true', 'delta.columnMapping.mode' = '{mapping}')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, named_struct('p', 'a', 'q', 7))")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN s.q TYPE BIGINT")
    (inner,) = [f for f in _fields(table)["s"]["type"]["fields"] if f["name"] == "q"]
    assert inner["type"] == "long"
    assert inner["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert ("delta.columnMapping.physicalName" in inner["metadata"]) is (mapping == "name")
    sql(f"INSERT INTO delta.`{table}` VALUES (2, named_struct('p', 'b', 'q', 8000000000))")
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert frame.schema["s"].dataType.simpleString() == "struct<p:string,q:bigint>", native
        assert _rows(frame) == [{"id": 1, "s": {"p": "a", "q": 7}}, {"id": 2, "s": {"p": "b", "q": 8000000000}}]


def test_streaming_appends_merge_and_update_write_the_widened_column(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """After ``INT`` -> ``BIGINT``: a stream appends values only the new type holds, MERGE and UPDATE rewrite the
    old files' rows under the new type (their new files are BIGINT), and both readers agree."""
    table, source, checkpoint = tmp_path / "t", tmp_path / "source", tmp_path / "checkpoint"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10), (2, 20), (3, 30)")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")

    spark.createDataFrame([(4, 4_000_000_000), (5, 5_000_000_000)], "id long, v long").write.format("delta").save(
        str(source)
    )
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert query.exception() is None
    assert _entries(table)[-1][0]["commitInfo"]["operation"] == "STREAMING UPDATE"

    sql(
        f"MERGE INTO delta.`{table}` t USING (SELECT * FROM VALUES (1L, 6000000000L), (6L, 7L) AS s(id, v)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    sql(f"UPDATE delta.`{table}` SET v = v * 1000000000 WHERE v = 20")
    expected = [
        {"id": 1, "v": 6_000_000_000},
        {"id": 2, "v": 20_000_000_000},
        {"id": 3, "v": 30},
        {"id": 4, "v": 4_000_000_000},
        {"id": 5, "v": 5_000_000_000},
        {"id": 6, "v": 7},
    ]
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert _types(frame) == {"id": "bigint", "v": "bigint"}
        assert _rows(frame) == expected, native
        assert [r["id"] for r in _rows(frame.where("v > 10000000000"))] == [2], native
    live = {a["path"] for a in _live_adds(table)}
    kinds = {pq.read_schema(table / p).field("v").type for p in live}
    assert pa.int64() in kinds  # the rewritten and appended files are BIGINT; an untouched old file may stay INT


def _live_adds(table: Path) -> list[dict[str, Any]]:
    removed = {a["remove"]["path"] for entry in _entries(table) for a in entry if "remove" in a}
    return [a for a in _adds(table) if a["path"] not in removed]


def test_delta_rs_opens_a_widened_table_but_refuses_its_data(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """delta-rs (1.x) reads the widened schema and the files' statistics, and refuses to read the rows (it does not
    implement the ``typeWidening`` reader feature); sparkonce reads them."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    table = tmp_path / "t"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10)")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    rs = DeltaTable(str(table))
    assert json.loads(rs.schema().to_json())["fields"][1] == {
        "name": "v",
        "type": "long",
        "nullable": True,
        "metadata": {"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]},
    }
    assert rs.protocol().reader_features == ["typeWidening"]
    with pytest.raises(DeltaProtocolError, match="typeWidening"):
        rs.to_pyarrow_table()
    assert _rows(_read(spark, table, native=True)) == [{"id": 1, "v": 10}]


def test_merge_schema_widens_a_column_to_the_datas_type_where_delta_does(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """Schema evolution on a table with type widening: a write with ``mergeSchema`` widens ``INT`` to ``BIGINT``
    (and adds a new column) in its own commit, as Delta does; a change Delta leaves to ALTER (``INT`` -> ``DOUBLE``),
    a write without ``mergeSchema`` and a table without type widening are refused before any file is written."""
    from pyspark.errors import AnalysisException

    table, plain = tmp_path / "t", tmp_path / "plain"
    for path, enabled in ((table, "true"), (plain, "false")):
        sql(
            f"CREATE TABLE delta.`{path}` (id BIGINT, v INT, w INT) USING delta "
            f"TBLPROPERTIES ('delta.enableTypeWidening' = '{enabled}')"
        )
        sql(f"INSERT INTO delta.`{path}` VALUES (1, 10, 100)")
    wide = spark.createDataFrame([(2, 5_000_000_000, 200, "x")], "id long, v long, w int, extra string")

    for path, options, error in (
        (table, {}, r"(?s)SchemaMismatchError: A schema mismatch detected.*column 'v': table has \"integer\""),
        (plain, {"mergeSchema": "true"}, r"DELTA_FAILED_TO_MERGE_FIELDS.*'v' and 'v'.*IntegerType and LongType"),
        (table, {"mergeSchema": "true"}, r"DELTA_FAILED_TO_MERGE_FIELDS.*'w' and 'w'.*IntegerType and DoubleType"),
    ):
        commits = len(_entries(path))
        frame = wide if path == table and "'w'" not in error else wide.withColumn("w", wide["w"].cast("double"))
        with pytest.raises(AnalysisException, match=error):
            frame.write.format("delta").mode("append").options(**options).save(str(path))
        assert len(_entries(path)) == commits

    wide.write.format("delta").mode("append").option("mergeSchema", "true").save(str(table))
    commit = _entries(table)[-1]
    assert commit[0]["commitInfo"]["operation"] == "WRITE"
    fields = json.loads(next(a["metaData"] for a in commit if "metaData" in a)["schemaString"])["fields"]
    assert [(f["name"], f["type"]) for f in fields] == [
        ("id", "long"),
        ("v", "long"),
        ("w", "integer"),
        ("extra", "string"),
    ]
    assert fields[1]["metadata"] == {"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]}
    for native in (True, False):
        assert _rows(_read(spark, table, native=native)) == [
            {"id": 1, "v": 10, "w": 100, "extra": None},
            {"id": 2, "v": 5_000_000_000, "w": 200, "extra": "x"},
        ], native


@pytest.mark.parametrize("starting", [None, "0"], ids=["snapshot", "from_version_0"])
def test_a_delta_stream_started_after_a_widening_reads_the_old_files_with_the_new_type(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, starting: str | None
) -> None:
    table, out, checkpoint = tmp_path / "t", tmp_path / "out", tmp_path / "checkpoint"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10)")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    sql(f"INSERT INTO delta.`{table}` VALUES (2, 5000000000)")
    reader = spark.readStream.format("delta")
    if starting is not None:
        reader = reader.option("startingVersion", starting)
    query = (
        reader.load(str(table))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    assert query.exception() is None
    frame = _read(spark, out, native=True)
    assert _types(frame) == {"id": "bigint", "v": "bigint"}
    assert _rows(frame) == [{"id": 1, "v": 10}, {"id": 2, "v": 5_000_000_000}]


def test_map_keys_values_and_array_elements_widen_with_their_field_path(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, m MAP<INT, FLOAT>, a ARRAY<INT>, "
        "s STRUCT<arr: ARRAY<SMALLINT>>) USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, map(7, 1.5), array(1, 2), named_struct('arr', array(3S)))")
    for column, new in (("m.key", "BIGINT"), ("m.value", "DOUBLE"), ("a.element", "BIGINT"), ("s.arr.element", "INT")):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN {column} TYPE {new}")
    fields = _fields(table)
    assert fields["m"]["type"]["keyType"] == "long" and fields["m"]["type"]["valueType"] == "double"
    assert fields["m"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "key"},
        {"fromType": "float", "toType": "double", "fieldPath": "value"},
    ]
    assert fields["a"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    (arr,) = fields["s"]["type"]["fields"]
    assert arr["type"]["elementType"] == "integer"
    assert arr["metadata"]["delta.typeChanges"] == [{"fromType": "short", "toType": "integer", "fieldPath": "element"}]
    with pytest.raises(
        SqlError, match=r"DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.* a.element from BIGINT to DOUBLE"
    ):
        sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN a.element TYPE DOUBLE")
    values = "(2, map(8000000000, 0.1D), array(9000000000), named_struct('arr', array(70000)))"
    sql(f"INSERT INTO delta.`{table}` VALUES {values}")
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert _types(frame) == {
            "id": "bigint",
            "m": "map<bigint,double>",
            "a": "array<bigint>",
            "s": "struct<arr:array<int>>",
        }, native
        assert _rows(frame) == [
            {"id": 1, "m": {7: 1.5}, "a": [1, 2], "s": {"arr": [3]}},
            {"id": 2, "m": {8_000_000_000: 0.1}, "a": [9_000_000_000], "s": {"arr": [70000]}},
        ], native


def test_a_delta_stream_defined_before_a_widening_stops_at_it(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """As Delta's source without a ``schemaTrackingLocation``: the schema the stream reads (resolved when it was
    defined) changed type, so the query stops before reading a file, naming the column and both types; nothing of
    the new commits is written."""
    from pyspark.errors import StreamingQueryException

    table, out, checkpoint = tmp_path / "t", tmp_path / "out", tmp_path / "checkpoint"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10)")
    stream = spark.readStream.format("delta").load(str(table))  # its schema: v INT

    def run() -> None:
        query = (
            stream.writeStream.format("delta")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(str(out))
        )
        query.awaitTermination()

    run()
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    sql(f"INSERT INTO delta.`{table}` VALUES (2, 5000000000)")
    with pytest.raises(
        StreamingQueryException,
        match=r"column 'v' changed type: stream reads \"integer\", table version 3 has \"long\"",
    ):
        run()
    assert _rows(_read(spark, out, native=True)) == [{"id": 1, "v": 10}]


def test_narrower_data_into_a_widened_column_as_delta_writes_it(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """After ``INT`` -> ``BIGINT`` (and ``FLOAT`` -> ``DOUBLE``): the streaming sink casts ``INT`` / ``FLOAT`` data to
    the table's types (Delta's sink casts implicitly; the files hold BIGINT / DOUBLE), a batch ``df.write`` of
    them is refused with Delta's ``DELTA_FAILED_TO_MERGE_FIELDS`` (delta-spark's V1 writes do not cast), while a
    ``SMALLINT`` column goes into an ``INT`` one (Parquet INT32, Delta's merge keeps the table's type); MERGE and
    UPDATE cast the values they assign. Nothing is written by a refused write."""
    from pyspark.errors import AnalysisException

    table, source, checkpoint = tmp_path / "t", tmp_path / "source", tmp_path / "checkpoint"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT, f FLOAT, n INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10, 1.5, 100)")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN f TYPE DOUBLE")
    narrow = spark.createDataFrame([(2, 20, 2.5, 200)], "id long, v int, f float, n int")
    commits = len(_entries(table))
    for options in ({}, {"mergeSchema": "true"}):
        with pytest.raises(AnalysisException, match=r"DELTA_FAILED_TO_MERGE_FIELDS.*'v' and 'v'.*LongType and Integ"):
            narrow.write.format("delta").mode("append").options(**options).save(str(table))
    assert len(_entries(table)) == commits
    narrow.withColumn("v", narrow["v"].cast("long")).withColumn("f", narrow["f"].cast("double")).withColumn(
        "n", narrow["n"].cast("short")
    ).write.format("delta").mode("append").save(str(table))
    assert pq.read_schema(table / _adds(table)[-1]["path"]).field("n").type == pa.int32()

    narrow.withColumn("id", narrow["id"] + 1).write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert query.exception() is None
    last = _entries(table)[-1]
    assert last[0]["commitInfo"]["operation"] == "STREAMING UPDATE"
    assert not any("metaData" in a for a in last)  # the table's types stay
    written = pq.read_schema(table / _adds(table)[-1]["path"])
    assert (written.field("v").type, written.field("f").type) == (pa.int64(), pa.float64())
    # MERGE and UPDATE assign INT / FLOAT values to the widened columns (Spark's store assignment casts them).
    sql(
        f"MERGE INTO delta.`{table}` t USING (SELECT * FROM VALUES (3L, 30, CAST(3.5 AS FLOAT), 300), "
        "(4L, 40, CAST(4.5 AS FLOAT), 400) AS s(id, v, f, n)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v, f = s.f WHEN NOT MATCHED THEN INSERT *"
    )
    sql(f"UPDATE delta.`{table}` SET v = CAST(11 AS INT) WHERE id = 1")
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert _types(frame) == {"id": "bigint", "v": "bigint", "f": "double", "n": "int"}, native
        assert _rows(frame) == [
            {"id": 1, "v": 11, "f": 1.5, "n": 100},
            {"id": 2, "v": 20, "f": 2.5, "n": 200},
            {"id": 3, "v": 30, "f": 3.5, "n": 200},
            {"id": 4, "v": 40, "f": 4.5, "n": 400},
        ], native


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_merge_schema_widens_nested_fields_with_their_field_path(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, mapping: str
) -> None:
    """A ``mergeSchema`` write whose struct field, map key and value and array element have wider types of the same
    family widens each in the write's commit, with ``delta.typeChanges`` on the nearest struct field (``fieldPath``
    below it), as Delta's schema merge records it; without ``mergeSchema`` the write is refused, nothing written."""
    from pyspark.errors import AnalysisException

    table = tmp_path / "t"
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, s STRUCT<a: SMALLINT, b: STRING>, m MAP<INT, FLOAT>, "
        "l ARRAY<INT>) USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true', "
        f"'delta.columnMapping.mode' = '{mapping}')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, named_struct('a', 7S, 'b', 'x'), map(1, 1.5F), array(2))")
    wide = spark.sql(
        "SELECT 2L AS id, named_struct('a', 70000, 'b', 'y') AS s, map(8000000000L, 0.1D) AS m, array(9000000000L) AS l"
    )
    commits = len(_entries(table))
    with pytest.raises(AnalysisException, match=r"(?s)A schema mismatch detected.*column 's'"):
        wide.write.format("delta").mode("append").save(str(table))
    assert len(_entries(table)) == commits
    wide.write.format("delta").mode("append").option("mergeSchema", "true").save(str(table))
    commit = _entries(table)[-1]
    assert commit[0]["commitInfo"]["operation"] == "WRITE"
    fields = {
        f["name"]: f
        for f in json.loads(next(a["metaData"] for a in commit if "metaData" in a)["schemaString"])["fields"]
    }
    a, b = fields["s"]["type"]["fields"]
    assert (a["type"], a["metadata"]["delta.typeChanges"]) == ("integer", [{"fromType": "short", "toType": "integer"}])
    assert "delta.typeChanges" not in b["metadata"] and "delta.typeChanges" not in fields["s"]["metadata"]
    assert (fields["m"]["type"]["keyType"], fields["m"]["type"]["valueType"]) == ("long", "double")
    assert fields["m"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "key"},
        {"fromType": "float", "toType": "double", "fieldPath": "value"},
    ]
    assert fields["l"]["type"]["elementType"] == "long"
    assert fields["l"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    if mapping == "name":
        assert {"delta.columnMapping.id", "delta.columnMapping.physicalName"} <= set(a["metadata"])
    for native in (True, False):
        frame = _read(spark, table, native=native)
        assert _types(frame) == {
            "id": "bigint",
            "s": "struct<a:int,b:string>",
            "m": "map<bigint,double>",
            "l": "array<bigint>",
        }, native
        assert _rows(frame) == [
            {"id": 1, "s": {"a": 7, "b": "x"}, "m": {1: 1.5}, "l": [2]},
            {"id": 2, "s": {"a": 70000, "b": "y"}, "m": {8_000_000_000: 0.1}, "l": [9_000_000_000]},
        ], native
