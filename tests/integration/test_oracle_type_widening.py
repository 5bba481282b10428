"""delta-spark (the oracle) reads the type-widened tables sparkonce writes (issue 41): a column widened by a
``mergeSchema`` write at nested levels (struct field, map key and value, array element), narrower data the
streaming sink cast into a widened column, and a table whose ``typeWidening`` feature sparkonce dropped (files
rewritten, ``checkpointProtection`` in the protocol) with the commits delta-spark makes on a twin table, which
delta-spark then writes to as well. One test, one
oracle JVM (the ``oracle`` xdist group)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sparkonce.sql import DeltaSql
from tests.fixtures_delta_oracle import DeltaOracle, spark_rows, table_ref

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


def test_delta_spark_reads_widened_and_feature_dropped_tables_sparkonce_wrote(
    spark: SparkSession, sql: DeltaSql, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    nested, narrow, dropped = tmp_path / "nested", tmp_path / "narrow", tmp_path / "dropped"
    sql(
        f"CREATE TABLE delta.`{nested}` (id BIGINT, s STRUCT<a: SMALLINT>, m MAP<INT, FLOAT>, l ARRAY<INT>) "
        "USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{nested}` VALUES (1, named_struct('a', 7S), map(1, 1.5F), array(2))")
    spark.sql(
        "SELECT 2L AS id, named_struct('a', 70000) AS s, map(8000000000L, 0.1D) AS m, array(9000000000L) AS l"
    ).write.format("delta").mode("append").option("mergeSchema", "true").save(str(nested))

    sql(
        f"CREATE TABLE delta.`{narrow}` (id BIGINT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{narrow}` VALUES (1, 10)")
    sql(f"ALTER TABLE delta.`{narrow}` ALTER COLUMN v TYPE BIGINT")
    source = tmp_path / "source"
    spark.createDataFrame([(2, 20)], "id long, v int").write.format("delta").save(str(source))
    query = (
        spark.readStream.format("delta")
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(narrow))
    )
    query.awaitTermination()
    assert query.exception() is None

    twin = tmp_path / "twin"  # the same statements on delta-spark: the same commits, protocol and properties
    for target, run in ((dropped, sql), (twin, delta_oracle.sql)):
        for statement in (
            "CREATE TABLE {t} (id BIGINT, v INT) USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
            "INSERT INTO {t} VALUES (1, 10)",
            "ALTER TABLE {t} ALTER COLUMN v TYPE BIGINT",
            "ALTER TABLE {t} DROP FEATURE typeWidening",
        ):
            run(statement.format(t=table_ref(target)))
    # From the ALTER on (sparkonce records its CREATE TABLE of a path table as a WRITE, as before).
    operations = [[entry["operation"] for entry in delta_oracle.history(t)][2:] for t in (dropped, twin)]
    assert (
        operations[0]
        == operations[1]
        == [
            "CHANGE COLUMN",
            "UNSET TBLPROPERTIES",
            "REORG",
            "DROP FEATURE",
            "Empty Commit",
            "Empty Commit",
            "Empty Commit",
            "DROP FEATURE",
        ]
    )
    details = [delta_oracle.detail(t) for t in (dropped, twin)]
    assert [(d["minReaderVersion"], d["minWriterVersion"], d["tableFeatures"], d["properties"]) for d in details] == [
        (
            1,
            7,
            ["appendOnly", "checkpointProtection", "invariants"],
            {"delta.requireCheckpointProtectionBeforeVersion": "9"},
        )
    ] * 2

    for table in (nested, narrow, dropped, twin):
        ours = spark_rows(spark.read.format("delta").load(str(table)))
        assert delta_oracle.rows(table) == ours, table.name
    assert delta_oracle.rows(nested) == [
        {"id": 1, "s": {"a": 7}, "m": {"1": 1.5}, "l": [2]},
        {"id": 2, "s": {"a": 70000}, "m": {"8000000000": 0.1}, "l": [9000000000]},
    ]
    delta_oracle.sql(f"INSERT INTO {table_ref(dropped)} VALUES (3, 5000000000)")
    assert spark_rows(spark.read.format("delta").load(str(dropped))) == [
        {"id": 1, "v": 10},
        {"id": 3, "v": 5000000000},
    ]
