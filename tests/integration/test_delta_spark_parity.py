"""The behaviours delta-spark's own Python tests (``python/delta/tests/test_deltatable.py``, ``test_sql.py``)
check, checked here against sparkonce on real tables, each read back through delta-rs or the log: table
properties at CREATE/REPLACE, the builders' create/replace semantics and errors, the merge builder's argument
checks, ``hadoopConf``, protocol upgrades that are no-ops, table features added and dropped (Delta's test features
under ``DELTA_TESTING``), RESTORE's timestamp error, OPTIMIZE's partition predicates. Upstream's files themselves
run unchanged from outside the repository (``docs/delta.md``, "delta-spark's own tests")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.base import UnsupportedOperationException
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sparkonce import DeltaTable, IdentityGenerator
from sparkonce.errors import OptionError, UnsupportedFeatureError
from sparkonce.sql import DeltaSql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def _protocol(path: Path) -> tuple[int, int]:
    protocol = RsTable(str(path)).protocol()
    return protocol.min_reader_version, protocol.min_writer_version


def _newest(path: Path) -> dict:  # type: ignore[type-arg]
    return RsTable(str(path)).history(1)[0]


def test_user_properties_at_create_and_replace(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"

    def build(builder):  # type: ignore[no-untyped-def]
        return (
            builder.addColumn("col1", "int", comment="foo", nullable=False)
            .addColumn("col2", IntegerType(), generatedAlwaysAs="col1 + 10")
            .property("foo", "bar")
            .comment("comment")
            .partitionedBy("col1")
            .execute()
        )

    table = build(DeltaTable.create(spark).location(str(path)))
    metadata = RsTable(str(path)).metadata()
    assert metadata.configuration == {"foo": "bar"}  # any user key, as Delta stores it
    assert (metadata.partition_columns, metadata.description) == (["col1"], "comment")
    assert table.toDF().schema == StructType(
        [StructField("col1", IntegerType(), False, {"comment": "foo"}), StructField("col2", IntegerType(), True)]
    )  # the column's comment shows in reads, its generation expression does not
    shown = dict(map(tuple, sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()))
    assert shown["foo"] == "bar"

    # REPLACE: the table's configuration becomes the given properties (the old ones go), as Delta's REPLACE does
    (
        DeltaTable.replace(spark)
        .location(str(path))
        .addColumn("k", "string")
        .property("owner.team", "x")
        .property("delta.appendOnly", "false")
        .execute()
    )
    assert RsTable(str(path)).metadata().configuration == {"owner.team": "x", "delta.appendOnly": "false"}
    assert RsTable(str(path)).metadata().partition_columns == []

    sql("CREATE TABLE props (id BIGINT) USING delta TBLPROPERTIES ('foo' = 'bar', 'delta.appendOnly' = 'true')")
    located = tmp_path / "warehouse" / "props"
    assert RsTable(str(located)).metadata().configuration == {"foo": "bar", "delta.appendOnly": "true"}
    with pytest.raises(OptionError, match=r"Unknown configuration was specified: delta\.nope"):
        DeltaTable.create(spark).location(str(tmp_path / "bad")).addColumn("a", "INT").property(
            "delta.nope", "1"
        ).execute()
    assert not (tmp_path / "bad").exists()


def test_builder_create_and_replace_semantics(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    sql("CREATE TABLE existing (c1 INT) USING delta")
    with pytest.raises(AnalysisException, match=r"TABLE_OR_VIEW_ALREADY_EXISTS.*`existing` because it already exists"):
        DeltaTable.create(spark).tableName("existing").addColumn("x", "INT").execute()
    kept = DeltaTable.createIfNotExists(spark).tableName("existing").addColumn("x", "INT").execute()
    assert kept.toDF().columns == ["c1"]  # exists: nothing written
    with pytest.raises(AnalysisException, match=r"TABLE_OR_VIEW_NOT_FOUND.*`missing` cannot be found"):
        DeltaTable.replace(spark).tableName("missing").addColumn("x", "INT").execute()
    assert not (tmp_path / "warehouse" / "missing").exists()
    made = DeltaTable.createOrReplace(spark).tableName("missing").addColumn("x", "INT").execute()
    assert made.toDF().columns == ["x"]
    nowhere = tmp_path / "nowhere"
    with pytest.raises(AnalysisException, match="DELTA_CANNOT_REPLACE_MISSING_TABLE"):
        DeltaTable.replace(spark).location(str(nowhere)).addColumn("x", "INT").execute()
    DeltaTable.create(spark).location(str(nowhere)).addColumn("x", "INT").execute()
    with pytest.raises(AnalysisException, match="DELTA_TABLE_ALREADY_EXISTS"):
        DeltaTable.create(spark).location(str(nowhere)).addColumn("x", "INT").execute()
    assert len(RsTable(str(nowhere)).history()) == 1


def test_builder_argument_checks_in_delta_spark_order(spark: SparkSession, tmp_path: Path) -> None:
    builder = DeltaTable.create(spark).location(str(tmp_path / "t"))
    with pytest.raises(UnsupportedOperationException, match="DataType integer is not supported for IDENTITY"):
        builder.addColumn("a", "int", generatedAlwaysAs=IdentityGenerator())  # at addColumn, not execute
    with pytest.raises(UnsupportedFeatureError, match="DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE"):
        builder.addColumn("a", "int", generatedByDefaultAs=IdentityGenerator())
    with pytest.raises(ValueError, match="step to be non-zero"):  # the step is checked before the type
        builder.addColumn("a", "int", generatedAlwaysAs=IdentityGenerator(step=0))
    builder.addColumn("a", LongType(), generatedAlwaysAs=IdentityGenerator()).execute()
    assert not (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").exists()


def test_merge_builder_checks_set_and_values_first(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"key": ["a"], "value": [1]}))
    source = spark.createDataFrame([("a", 2)], "k STRING, v LONG")
    merge = DeltaTable.forPath(spark, str(path)).merge(source, "key = k")
    with pytest.raises(ValueError, match=re.escape("'set' in whenMatchedUpdate cannot be None")):
        merge.whenMatchedUpdate({"value": "v"})  # type: ignore[call-overload]  # the dict is the condition
    with pytest.raises(ValueError, match=re.escape("'values' in whenNotMatchedInsert cannot be None")):
        merge.whenNotMatchedInsert(1)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=re.escape("'set' in whenNotMatchedBySourceUpdate cannot be None")):
        merge.whenNotMatchedBySourceUpdate(1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be a Spark SQL Column or a string"):
        merge.whenMatchedUpdate(1, {"value": "v"})  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"'set' in whenMatchedUpdate must be a dict"):
        merge.whenMatchedUpdate("k = 'a'", 1)  # type: ignore[call-overload]
    merge.whenMatchedUpdate("k = 'a'", {"value": "v"}).execute()
    assert RsTable(str(path)).to_pyarrow_table().to_pylist() == [{"key": "a", "value": 2}]


def test_for_path_hadoop_conf(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    fake = {"fs.fake.impl": "org.apache.spark.sql.delta.FakeFileSystem", "fs.fake.impl.disable.cache": "true"}
    assert DeltaTable.forPath(spark, str(path), fake).toDF().collect()[0].id == 1  # accepted, nothing to do
    with pytest.raises(OptionError, match=r"storage option AWS_ACCESS_KEY_ID: set it as spark\.sparkonce\.storage"):
        DeltaTable.forPath(spark, str(path), {"fs.s3a.access.key": "k"})


def test_protocol_upgrades_are_never_downgrades(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"key": ["a"], "value": [1]}))
    table = DeltaTable.forPath(spark, str(path))
    assert _protocol(path) == (1, 2)
    table.upgradeTableProtocol(1, 3)
    table.upgradeTableProtocol(1, 2)  # no-op: Delta ignores a lower version
    detail = table.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion) == (1, 3) == _protocol(path)
    with pytest.raises(ValueError, match="readerVersion"):
        table.upgradeTableProtocol([1], 3)  # type: ignore[arg-type]

    # the last row: a CHECK constraint on a table at writer 6 (identity + generated columns)
    sql(
        "CREATE TABLE ident (id BIGINT GENERATED ALWAYS AS IDENTITY, v INT, "
        "w INT GENERATED ALWAYS AS (v * 2)) USING delta"
    )
    ident = tmp_path / "warehouse" / "ident"
    assert _protocol(ident) == (1, 6)
    sql("ALTER TABLE ident ADD CONSTRAINT v_pos CHECK (v > 0)")
    assert _protocol(ident) == (1, 6)
    assert RsTable(str(ident)).metadata().configuration["delta.constraints.v_pos"] == "v > 0"


def test_table_features_added_listed_and_dropped(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DELTA_TESTING", "1")  # Delta's test-only features, as Delta's own tests run
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    table = DeltaTable.forPath(spark, str(path))
    with pytest.raises(OptionError, match="DELTA_UNSUPPORTED_FEATURES_IN_CONFIG"):
        table.addFeatureSupport("abc")
    with pytest.raises(ValueError, match="featureName needs to be a string"):
        table.addFeatureSupport(12345)  # type: ignore[arg-type]
    table.addFeatureSupport("appendOnly")  # implied by (1, 2) already: the protocol stays legacy
    detail = table.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion, detail.tableFeatures) == (
        1,
        2,
        ["appendOnly", "invariants"],
    )

    table.addFeatureSupport("testRemovableWriter")
    assert sorted(table.detail().collect()[0].tableFeatures) == ["appendOnly", "invariants", "testRemovableWriter"]
    assert _protocol(path) == (1, 7)
    with pytest.raises(UnsupportedFeatureError, match="DELTA_FEATURE_DROP_HISTORY_TRUNCATION_NOT_ALLOWED"):
        table.dropFeatureSupport("testRemovableWriter", True)
    table.dropFeatureSupport("testRemovableWriter")
    assert _protocol(path) == (1, 2)
    assert (_newest(path)["operation"], _newest(path)["operationParameters"]) == (
        "DROP FEATURE",
        {"featureName": "testRemovableWriter", "truncateHistory": "false"},
    )

    # a reader-writer feature delta-rs does not know: delta-rs refuses to open the table, sparkonce's log reader
    # answers DESCRIBE DETAIL and the metadata commits
    table.addFeatureSupport("testRemovableReaderWriter")
    detail = table.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion, sorted(detail.tableFeatures)) == (
        3,
        7,
        ["appendOnly", "invariants", "testRemovableReaderWriter"],
    )
    table.dropFeatureSupport("testRemovableReaderWriter")
    detail = table.detail().collect()[0]
    assert (detail.minReaderVersion, detail.minWriterVersion) == (1, 2)
    assert _protocol(path) == (1, 2)  # delta-rs opens the table again
    table.addFeatureSupport("testReaderWriter")
    with pytest.raises(UnsupportedFeatureError, match="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE"):
        table.dropFeatureSupport("testReaderWriter")
    assert sorted(table.detail().collect()[0].tableFeatures) == ["appendOnly", "invariants", "testReaderWriter"]
    with pytest.raises(OptionError, match="DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE"):
        table.dropFeatureSupport("__invalid_feature__")
    with pytest.raises(OptionError, match="DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT"):
        table.dropFeatureSupport("testRemovableWriter")
    with pytest.raises(UnsupportedFeatureError, match="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE"):
        table.dropFeatureSupport("appendOnly")
    with pytest.raises(ValueError, match="truncateHistory needs to be a boolean"):
        table.dropFeatureSupport("testRemovableWriter", 12345)  # type: ignore[arg-type]

    monkeypatch.delenv("DELTA_TESTING")
    with pytest.raises(OptionError, match="DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE"):
        table.dropFeatureSupport("testRemovableWriter")  # outside Delta's tests there is no such feature


def test_restore_to_an_unparseable_timestamp(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    message = "[DELTA_TIMESTAMP_INVALID] The provided timestamp ('05/04/1999') cannot be converted to a valid timestamp"
    with pytest.raises(AnalysisException, match=re.escape(message)):
        DeltaTable.forPath(spark, str(path)).restoreToTimestamp("05/04/1999")
    assert len(RsTable(str(path)).history()) == 1


def test_optimize_partition_predicates(spark: SparkSession, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    for i in range(2):
        write_deltalake(str(plain), pa.table({"key": ["a"], "value": [i]}), mode="append")
    message = "Predicate references non-partition column 'key'. Only the partition columns may be referenced: []"
    with pytest.raises(AnalysisException, match=re.escape(message)):
        DeltaTable.forPath(spark, str(plain)).optimize().where("key = 'a'").executeCompaction()
    assert len(RsTable(str(plain)).history()) == 2

    parted = tmp_path / "parted"
    for key in ("a", "a", "b"):
        write_deltalake(str(parted), pa.table({"key": [key], "value": [1]}), partition_by=["key"], mode="append")
    table = DeltaTable.forPath(spark, str(parted))
    metrics = table.optimize().where("key = 'a'").executeCompaction().first().metrics
    assert (metrics.numFilesAdded, metrics.numFilesRemoved) == (1, 2)
    assert json.loads(_newest(parted)["operationParameters"]["predicate"]) == ["('key = a)"]  # as Delta records it
    message = "Predicate references non-partition column 'value'. Only the partition columns may be referenced: [key]"
    with pytest.raises(AnalysisException, match=re.escape(message)):
        table.optimize().where("value = 1").executeCompaction()
    with pytest.raises(AnalysisException, match=r"key is a partition column\. Z-Ordering can only be performed"):
        table.optimize().where("key = 'b'").executeZOrderBy(["key"])


def test_existing_schema_columns_keep_their_nullability(spark: SparkSession, tmp_path: Path) -> None:
    schema = StructType([StructField("key", StringType()), StructField("value", LongType())])
    table = (
        DeltaTable.create(spark)
        .location(str(tmp_path / "t"))
        .addColumns(schema)
        .addColumn("value2", dataType="int")
        .partitionedBy(["value2", "value"])
        .execute()
    )
    detail = table.detail().collect()[0]
    assert sorted(detail.partitionColumns) == ["value", "value2"]
    assert [(f.name, f.nullable) for f in table.toDF().schema.fields] == [
        ("key", True),
        ("value", True),
        ("value2", True),
    ]


def test_merge_schema_evolution_adds_nullable_columns(spark: SparkSession, tmp_path: Path) -> None:
    """delta-spark's test_merge_with_inconsistent_sessions: the source's new column is NOT NULL (``spark.range``),
    the target's old row has no value for it; the column is added nullable, as Delta adds it."""
    from pyspark.sql.functions import col

    source_path, target_path = tmp_path / "source", tmp_path / "target"
    spark.range(3).withColumn("x", col("id")).withColumn("y", col("id")).write.format("delta").save(str(source_path))
    spark.range(1).withColumn("x", col("id")).write.format("delta").save(str(target_path))
    source = spark.read.format("delta").load(str(source_path)).alias("s")
    (
        DeltaTable.forPath(spark, str(target_path))
        .alias("t")
        .merge(source, "t.id = s.id")
        .whenMatchedUpdate(set={"t.x": "t.x + 1"})
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )
    fields = json.loads(RsTable(str(target_path)).schema().to_json())["fields"]
    assert [(f["name"], f["nullable"]) for f in fields] == [("id", False), ("x", False), ("y", True)]
    assert sorted(tuple(r) for r in spark.read.format("delta").load(str(target_path)).collect()) == [
        (0, 1, None),
        (1, 1, 1),
        (2, 2, 2),
    ]


def test_zorder_metrics_carry_zorder_stats(spark: SparkSession, tmp_path: Path) -> None:
    """Delta's OPTIMIZE ZORDER BY metrics: ``zOrderStats`` with the "all" strategy and one output cube per rewritten
    partition; a compaction has none."""
    path = tmp_path / "t"
    for key in ("a", "a", "b", "b", "c"):
        write_deltalake(str(path), pa.table({"key": [key], "v": [1]}), partition_by=["key"], mode="append")
    table = DeltaTable.forPath(spark, str(path))
    metrics = table.optimize().where("key = 'a'").executeZOrderBy("v").first().metrics
    stats = metrics.zOrderStats
    assert (stats.strategyName, stats.numOutputCubes, stats.inputNumCubes) == ("all", 1, 0)
    assert (stats.inputOtherFiles.num, stats.mergedFiles.num) == (2, 2)
    metrics = table.optimize().executeZOrderBy("v").first().metrics
    assert (metrics.partitionsOptimized, metrics.zOrderStats.numOutputCubes) == (3, 3)
    write_deltalake(str(path), pa.table({"key": ["c"], "v": [2]}), partition_by=["key"], mode="append")
    assert table.optimize().executeCompaction().first().metrics.zOrderStats is None
