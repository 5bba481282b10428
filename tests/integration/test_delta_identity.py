"""Identity columns on real tables: created by the builder and by SQL, filled by batch writes from several tasks,
``INSERT INTO`` and a streaming sink, with the high-water mark in the log; explicit values per ``GENERATED ALWAYS``
/ ``BY DEFAULT``; checked with delta-rs (rows, schema metadata, protocol)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import AnalysisException

from sparkonce.delta.catalog import WAREHOUSE_CONF
from sparkonce.errors import SqlError, UnsupportedFeatureError
from sparkonce.sql import DeltaSql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


@pytest.fixture
def sql(spark: SparkSession, tmp_path: Path) -> Iterator[DeltaSql]:
    assert isinstance(spark.sql, DeltaSql)
    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "warehouse"))
    yield spark.sql
    spark.conf.unset(WAREHOUSE_CONF)


def _identity(path: Path, column: str = "id") -> dict[str, Any]:
    fields = json.loads(DeltaTable(str(path)).schema().to_json())["fields"]
    return dict(next(f for f in fields if f["name"] == column)["metadata"])


def _ids(path: Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist())


def test_builder_identity_filled_by_batch_writes(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    from sparkonce import DeltaTable as SparkonceDeltaTable
    from sparkonce import IdentityGenerator

    (
        SparkonceDeltaTable.create(spark)
        .tableName("ids")
        .addColumn("id", "BIGINT", generatedAlwaysAs=IdentityGenerator(start=10, step=3))
        .addColumn("v", "STRING")
        .execute()
    )
    path = tmp_path / "warehouse" / "ids"
    protocol = DeltaTable(str(path)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 6)
    assert _identity(path) == {
        "delta.identity.start": 10,
        "delta.identity.step": 3,
        "delta.identity.allowExplicitInsert": False,
    }
    # Three tasks, no task count known to them: a block per task, all of the form 10 + 3k, unique.
    spark.range(0, 10, 1, 3).selectExpr("CAST(id AS STRING) AS v").write.format("delta").mode("append").save(str(path))
    first = _ids(path)
    assert len(set(first)) == 10 and all((i - 10) % 3 == 0 and i >= 10 for i in first)
    assert first[:3] == [10, 13, 16]  # task 0 starts at start
    assert _identity(path)["delta.identity.highWaterMark"] == max(first)
    spark.range(0, 4, 1, 2).selectExpr("CAST(id AS STRING) AS v").write.format("delta").mode("append").save(str(path))
    second = sorted(set(_ids(path)) - set(first))
    assert len(second) == 4 and min(second) == max(first) + 3  # past the high-water mark, on the sequence
    assert _identity(path)["delta.identity.highWaterMark"] == max(second)

    # GENERATED ALWAYS refuses values, with Delta's error, before anything is written.
    with pytest.raises(AnalysisException, match="DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED"):
        spark.range(2).selectExpr("id", "'x' AS v").write.format("delta").mode("append").save(str(path))
    with pytest.raises(SqlError, match="DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED"):
        sql("INSERT INTO ids VALUES (1, 'x')")
    assert len(_ids(path)) == 14

    # Metadata-only commits keep the schema's marks.
    sql("ALTER TABLE ids SET TBLPROPERTIES ('owner' = 'me')")
    assert _identity(path)["delta.identity.highWaterMark"] == max(second)

    # RESTORE would take the high-water mark back (later values could repeat): refused.
    with pytest.raises(UnsupportedFeatureError, match="high-water marks the restore would take back"):
        sql("RESTORE TABLE ids TO VERSION AS OF 1")
    assert DeltaTable(str(path)).version() == 3

    # DELETE keeps the other rows' values; MERGE is refused (sparkonce does not generate values there yet).
    sql("DELETE FROM ids WHERE v = '0'")
    assert len(_ids(path)) == 12
    source = spark.createDataFrame([("new",)], "v STRING")
    with pytest.raises(UnsupportedFeatureError, match="identity columns"):
        SparkonceDeltaTable.forName(spark, "ids").alias("t").merge(
            source.alias("s"), "t.v = s.v"
        ).whenNotMatchedInsertAll().execute()

    # Builder argument checks, as delta-spark's.
    builder = SparkonceDeltaTable.create(spark)
    with pytest.raises(ValueError, match="generatedByDefaultAs and generatedAlwaysAs cannot both be set"):
        builder.addColumn(
            "x", "BIGINT", generatedAlwaysAs=IdentityGenerator(), generatedByDefaultAs=IdentityGenerator()
        )
    with pytest.raises(ValueError, match="Column identity generation requires step to be non-zero"):
        builder.addColumn("x", "BIGINT", generatedByDefaultAs=IdentityGenerator(step=0))
    with pytest.raises(TypeError, match="Generated by default expression must be IdentityGenerator"):
        builder.addColumn("x", "BIGINT", generatedByDefaultAs="1")  # type: ignore[arg-type]
    with pytest.raises(SqlError, match="DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE"):
        SparkonceDeltaTable.create(spark).tableName("int_ids").addColumn(
            "id", "INT", generatedAlwaysAs=IdentityGenerator()
        ).execute()
    assert not (tmp_path / "warehouse" / "int_ids").exists()


def test_sql_identity_insert_and_explicit_values(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "down"
    sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED BY DEFAULT AS IDENTITY (START WITH 100 INCREMENT BY -5), "
        "v STRING) USING delta"
    )
    assert _identity(path) == {
        "delta.identity.start": 100,
        "delta.identity.step": -5,
        "delta.identity.allowExplicitInsert": True,
    }
    spark.range(0, 9, 1, 3).selectExpr("CAST(id AS STRING) AS v").createOrReplaceTempView("nine")
    sql(f"INSERT INTO delta.`{path}` (v) SELECT v FROM nine")
    # Delta's rule with the query's 3 tasks: task p writes 100 - 5 * (p + 3 i): together 100, 95, ..., 60.
    assert _ids(path) == list(range(60, 101, 5))
    assert _identity(path)["delta.identity.highWaterMark"] == 60
    # BY DEFAULT takes explicit values; one beyond the mark moves it (rounded onto the sequence, as Delta does).
    sql(f"INSERT INTO delta.`{path}` VALUES (-3, 'explicit')")
    assert _identity(path)["delta.identity.highWaterMark"] == -5
    sql(f"INSERT INTO delta.`{path}` (v) VALUES ('next')")
    assert _ids(path)[:2] == [-10, -3]
    assert (DeltaTable(str(path)).protocol().min_writer_version, len(_ids(path))) == (6, 11)
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 11  # delta-rs reads every row
    with pytest.raises(SqlError, match="DELTA_IDENTITY_COLUMNS_ILLEGAL_STEP"):
        sql(
            f"CREATE TABLE delta.`{tmp_path / 'zero'}` (id BIGINT GENERATED ALWAYS AS IDENTITY (INCREMENT BY 0)) "
            "USING delta"
        )
    assert not (tmp_path / "zero").exists()


def test_streaming_sink_fills_identity(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    import pyarrow as pa

    source, target, checkpoint = tmp_path / "source", tmp_path / "target", tmp_path / "checkpoint"
    for start in (0, 5):
        write_deltalake(str(source), pa.table({"v": [f"r{i}" for i in range(start, start + 5)]}), mode="append")
    sql(f"CREATE TABLE delta.`{target}` (id BIGINT GENERATED ALWAYS AS IDENTITY, v STRING) USING delta")
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination(120)
    assert query.exception() is None
    ids = _ids(target)
    assert len(ids) == 10 and len(set(ids)) == 10 and min(ids) == 1
    assert _identity(target)["delta.identity.highWaterMark"] == max(ids)
    history = DeltaTable(str(target)).history()
    assert [h["operation"] for h in history[:2]] == ["STREAMING UPDATE", "STREAMING UPDATE"]
    # Running the query again finds nothing new: no values are generated twice.
    again = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(target))
    )
    again.awaitTermination(120)
    assert _ids(target) == ids


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", ["mid_write:1", "after_delta_commit:1"])
def test_streaming_identity_survives_a_driver_crash(tmp_path: Path, crash_at: str) -> None:
    """SIGKILL of the driver while batch 1 writes (uncommitted: re-run from the unchanged mark) or right after its
    Delta commit (committed: skipped by its txn): after the restart every row is there once, with one identity
    value each, all distinct, and the high-water mark is the largest."""
    from collections import Counter

    from sparkonce_local.chaos import run_driver
    from tests.conftest import REPO
    from tests.integration.conftest import write_input_files

    table = tmp_path / "table"
    (table / "_delta_log").mkdir(parents=True)
    fields = [
        {"name": "row_id", "type": "long", "nullable": True, "metadata": {
            "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}},
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "device", "type": "string", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
    ]  # fmt: skip
    actions = [
        {"commitInfo": {"operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 6}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                      "schemaString": json.dumps({"type": "struct", "fields": fields}), "configuration": {},
                      "createdTime": 0}},
    ]  # fmt: skip
    (table / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    expected = write_input_files(tmp_path / "input", files=4, rows_per_file=50)
    args = ["-m", "sparkonce.ops.stream_files", str(tmp_path / "input"), str(table), str(tmp_path / "ck")]
    crashed = run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=300)
    assert crashed.killed, crashed.stderr[-3000:]
    finished = run_driver(args, cwd=str(REPO), timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pydict()
    assert sorted(rows["id"]) == expected  # every row once
    assert [v for v, n in Counter(rows["row_id"]).items() if n > 1] == [] and None not in rows["row_id"]
    assert _identity(table, "row_id")["delta.identity.highWaterMark"] == max(rows["row_id"])
