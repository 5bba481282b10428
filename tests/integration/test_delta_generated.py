"""Delta generated columns (``delta.generationExpression``): created by delta-spark's builder and by SQL, computed
when a write lacks them, checked when it gives them, recomputed by UPDATE and MERGE; each table read back by
delta-rs (rows, schema metadata, protocol)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PythonException

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import SqlError, UnsupportedFeatureError

pytestmark = pytest.mark.spark

VIOLATION = (
    r"ConstraintViolationError: \[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES\] CHECK constraint Generated Column "
    r"\(day <=> CAST\(ts AS DATE\)\) violated by row with values:\n - day : 2020-01-01\n - ts : 2024-01-02 "
)


def _rs(path: Path) -> Any:
    from deltalake import DeltaTable as RsTable

    return RsTable(str(path))


def _rows(path: Path, *columns: str) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in _rs(path).to_pyarrow_table().to_pylist())


def _events_table(spark: Any, path: Path) -> None:
    (
        DeltaTable.create(spark)
        .location(str(path))
        .addColumn("id", "BIGINT")
        .addColumn("ts", "TIMESTAMP")
        .addColumn("day", "DATE", generatedAlwaysAs="CAST(ts AS DATE)", comment="event day")
        .addColumn("label", "STRING", generatedAlwaysAs="concat('e-', id)")
        .partitionedBy("day")
        .execute()
    )


def _append(spark: Any, path: Path, rows: list[tuple], schema: str) -> None:
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(str(path))


def test_builder_creates_the_columns_with_delta_metadata_and_writer_version_4(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    table = _rs(path)
    fields = {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}
    assert fields["day"]["metadata"] == {"delta.generationExpression": "CAST(ts AS DATE)", "comment": "event day"}
    assert fields["label"]["metadata"] == {"delta.generationExpression": "concat('e-', id)"}
    assert "metadata" not in fields["ts"] or not fields["ts"]["metadata"]
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 4)


def test_an_append_without_the_columns_computes_them(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 23, 30)), (2, None)], "id BIGINT, ts TIMESTAMP")
    assert _rows(path, "id", "day", "label") == [(1, dt.date(2024, 1, 2), "e-1"), (2, None, "e-2")]
    import pyarrow as pa

    actions = pa.table(_rs(path).get_add_actions(flatten=True)).to_pylist()
    assert sorted((a["partition.day"] for a in actions), key=str) == [dt.date(2024, 1, 2), None]


def test_given_values_must_equal_the_expression(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    schema = "id BIGINT, ts TIMESTAMP, day DATE"
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 8), dt.date(2024, 1, 2))], schema)
    before = _rs(path).version()
    with pytest.raises(PythonException, match=VIOLATION):
        _append(spark, path, [(2, dt.datetime(2024, 1, 2, 9), dt.date(2020, 1, 1))], schema)
    assert _rs(path).version() == before
    assert _rows(path, "id", "day", "label") == [(1, dt.date(2024, 1, 2), "e-1")]


def test_a_stream_into_the_table_computes_them(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "0.json").write_text('{"id": 1, "ts": "2024-05-06T07:08:09Z"}\n{"id": 2, "ts": "2024-05-07T00:00:00Z"}\n')
    query = (
        spark.readStream.format("json")
        .schema("id BIGINT, ts TIMESTAMP")
        .load(str(inputs))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(path))
    )
    query.awaitTermination()
    assert _rows(path, "id", "day", "label") == [(1, dt.date(2024, 5, 6), "e-1"), (2, dt.date(2024, 5, 7), "e-2")]


def test_update_of_a_source_column_recomputes_the_column(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 8)), (2, dt.datetime(2024, 1, 3, 8))], "id BIGINT, ts TIMESTAMP")
    DeltaTable.forPath(spark, str(path)).update("id = 1", {"ts": "timestamp'2025-06-30 12:00:00'", "id": "10"})
    assert _rows(path, "id", "day", "label") == [(2, dt.date(2024, 1, 3), "e-2"), (10, dt.date(2025, 6, 30), "e-10")]


def test_update_setting_a_wrong_value_fails_and_commits_nothing(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 8))], "id BIGINT, ts TIMESTAMP")
    before = _rs(path).version()
    with pytest.raises(PythonException, match="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES"):
        DeltaTable.forPath(spark, str(path)).update("id = 1", {"day": "date'2020-01-01'"})
    assert _rs(path).version() == before


def test_merge_recomputes_updated_rows_and_computes_inserted_ones(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 8)), (2, dt.datetime(2024, 1, 3, 8))], "id BIGINT, ts TIMESTAMP")
    source = spark.createDataFrame(
        [(1, dt.datetime(2024, 2, 1, 1)), (3, dt.datetime(2024, 3, 1, 1))], "id BIGINT, ts TIMESTAMP"
    )
    (
        DeltaTable.forPath(spark, str(path))
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"ts": "s.ts"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert _rows(path, "id", "day", "label") == [
        (1, dt.date(2024, 2, 1), "e-1"),
        (2, dt.date(2024, 1, 3), "e-2"),
        (3, dt.date(2024, 3, 1), "e-3"),
    ]


def test_sql_create_table_with_generated_always_as(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "sql_events"
    spark.sql(
        f"""CREATE TABLE delta.`{path}` (
              id BIGINT,
              ts TIMESTAMP,
              hour_of_day INT GENERATED ALWAYS AS (hour(ts)) COMMENT 'hour',
              month STRING GENERATED ALWAYS AS (date_format(ts, 'yyyy-MM'))
            ) USING delta PARTITIONED BY (month)"""
    )
    _append(spark, path, [(1, dt.datetime(2024, 1, 2, 23, 30))], "id BIGINT, ts TIMESTAMP")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (2, timestamp'2024-02-03 04:05:06')")
    spark.sql(f"INSERT INTO delta.`{path}` (ts, id) VALUES (timestamp'2024-03-04 05:06:07', 3)")
    assert _rows(path, "id", "hour_of_day", "month") == [(1, 23, "2024-01"), (2, 4, "2024-02"), (3, 5, "2024-03")]
    fields = {f["name"]: f for f in json.loads(_rs(path).schema().to_json())["fields"]}
    assert fields["hour_of_day"]["metadata"] == {"delta.generationExpression": "hour(ts)", "comment": "hour"}
    assert fields["month"]["metadata"] == {"delta.generationExpression": "date_format(ts, 'yyyy-MM')"}


def test_an_expression_outside_the_subset_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "refused"
    builder = (
        DeltaTable.create(spark)
        .location(str(path))
        .addColumn("s", "STRING")
        .addColumn("h", "STRING", generatedAlwaysAs="md5(s)")
    )
    with pytest.raises(UnsupportedFeatureError, match=r"generated column h .*md5\(s\).*function MD5"):
        builder.execute()
    assert not (path / "_delta_log").exists() or not any((path / "_delta_log").glob("*.json"))


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("other + 1", "DELTA_INVALID_GENERATED_COLUMN_REFERENCES"),
        ("g2 + 1", "DELTA_INVALID_GENERATED_COLUMN_REFERENCES"),
        ("CAST(a AS STRING)", r"DELTA_GENERATED_COLUMNS_EXPR_TYPE_MISMATCH\] The expression type of the generated "
         r"column g is STRING, but the column type is BIGINT"),
    ],
)  # fmt: skip
def test_delta_refuses_bad_generation_expressions(spark: Any, tmp_path: Path, expression: str, error: str) -> None:
    builder = (
        DeltaTable.create(spark)
        .location(str(tmp_path / "bad"))
        .addColumn("a", "BIGINT")
        .addColumn("g", "BIGINT", generatedAlwaysAs=expression)
        .addColumn("g2", "BIGINT", generatedAlwaysAs="a * 2")
    )
    with pytest.raises(SqlError, match=error):
        builder.execute()


def test_the_generated_column_argument_is_type_checked(spark: Any) -> None:
    with pytest.raises(
        TypeError,
        match=r"^Generated always as expression must be str or IdentityGenerator\. "
        r"Found 1 with type <class 'int'>$",
    ):
        DeltaTable.create(spark).addColumn("g", "INT", generatedAlwaysAs=1)  # type: ignore[arg-type]


def test_a_source_column_the_data_lacks_reads_as_null(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "events"
    _events_table(spark, path)
    _append(spark, path, [(7,)], "id BIGINT")
    assert _rows(path, "id", "ts", "day", "label") == [(7, None, None, "e-7")]


def test_delta_rs_and_sparkonce_write_the_same_generated_table(spark: Any, tmp_path: Path) -> None:
    """delta-rs computes and checks the generated column of a table sparkonce created, and sparkonce those of a
    table delta-rs created: the metadata and protocol are the ones both engines read."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import Field, Schema, write_deltalake
    from deltalake.exceptions import DeltaError

    ours = tmp_path / "ours"
    _events_table(spark, ours)
    utc = dt.UTC
    rows = pa.table(
        {
            "id": pa.array([5], pa.int64()),
            "ts": pa.array([dt.datetime(2024, 7, 8, 9, tzinfo=utc)], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(ours), rows, mode="append")
    assert _rows(ours, "id", "day", "label") == [(5, dt.date(2024, 7, 8), "e-5")]
    wrong = rows.append_column("day", pa.array([dt.date(2020, 1, 1)], pa.date32()))
    with pytest.raises(DeltaError, match="failed validation check"):
        write_deltalake(str(ours), wrong, mode="append")

    theirs = tmp_path / "theirs"
    schema = Schema(
        [
            Field("id", "long"),
            Field("ts", "timestamp"),
            Field("day", "date", metadata={"delta.generationExpression": "CAST(ts AS DATE)"}),
        ]
    )
    RsTable.create(str(theirs), schema)
    _append(spark, theirs, [(1, dt.datetime(2024, 1, 2, 23, 30))], "id BIGINT, ts TIMESTAMP")
    assert _rows(theirs, "id", "day") == [(1, dt.date(2024, 1, 2))]


def test_filters_on_the_source_column_prune_generated_partitions(spark: Any, tmp_path: Path) -> None:
    """Delta's OptimizablePartitionExpression: a filter on ts prunes the day partitions (day = CAST(ts AS DATE));
    the rows are those delta-rs reads and filters itself."""
    from pyspark.sql.datasource import GreaterThanOrEqual

    from sparkonce.delta.read.reader import DeltaBatchReader
    from sparkonce.delta.table.options import ReadOptions

    path = tmp_path / "events"
    _events_table(spark, path)
    rows = [(i, dt.datetime(2024, 1, 1 + i, 10, 0)) for i in range(6)]
    _append(spark, path, rows, "id BIGINT, ts TIMESTAMP")
    since = dt.datetime(2024, 1, 4, 12, 0, tzinfo=dt.UTC)
    reader = DeltaBatchReader(ReadOptions.parse({"path": str(path)}))
    reader.pushFilters([GreaterThanOrEqual(("ts",), since)])
    planned = sorted(str(f.partition_values["day"]) for p in reader.partitions() for f in p.files)  # type: ignore[attr-defined]
    assert planned == ["2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06"]  # of 6: widened by a day for the zone
    got = spark.read.format("delta").load(str(path)).where(f"ts >= TIMESTAMP '{since.isoformat()}'")
    table = _rs(path).to_pyarrow_table()
    expected = sorted(r["id"] for r in table.to_pylist() if r["ts"] >= since)
    assert sorted(r["id"] for r in got.select("id").collect()) == expected == [4, 5]
