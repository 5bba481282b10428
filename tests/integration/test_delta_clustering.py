"""Liquid clustering: ``clusterBy`` / ``CLUSTER BY`` create a clustered table (features, ``delta.clustering``
domain), ``OPTIMIZE`` clusters by its columns, ``ALTER TABLE ... CLUSTER BY`` changes them, ``DESCRIBE DETAIL``
shows them, and the domain survives checkpoints; checked with delta-rs and the log's own files."""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.table.clustering import table_clustering
from sparkonce.errors import SqlError, UnsupportedFeatureError
from sparkonce.sql import DeltaSql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def _actions(path: Path, table_version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{table_version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _domain(path: Path, table_version: int) -> dict[str, Any]:
    [domain] = [a["domainMetadata"] for a in _actions(path, table_version) if "domainMetadata" in a]
    return dict(domain)


def test_builder_and_sql_create_clustered_tables(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    from sparkonce import DeltaTable as SparkonceDeltaTable

    table = (
        SparkonceDeltaTable.create(spark)
        .tableName("clustered")
        .addColumn("a", "BIGINT")
        .addColumn("b", "STRING")
        .clusterBy("a", "b")
        .execute()
    )
    path = tmp_path / "warehouse" / "clustered"
    protocol = DeltaTable(str(path)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 7)
    assert protocol.writer_features == ["appendOnly", "clustering", "domainMetadata", "invariants"]
    assert _domain(path, 0) == {
        "domain": "delta.clustering",
        "configuration": '{"clusteringColumns":[["a"],["b"]]}',
        "removed": False,
    }
    assert table.detail().select("clusteringColumns").collect()[0][0] == ["a", "b"]
    assert sql("DESCRIBE DETAIL clustered").select("clusteringColumns").collect()[0][0] == ["a", "b"]

    by_sql = tmp_path / "by-sql"
    sql(f"CREATE TABLE delta.`{by_sql}` (id BIGINT, day STRING) USING delta CLUSTER BY (day)")
    assert _domain(by_sql, 0)["configuration"] == '{"clusteringColumns":[["day"]]}'
    assert "clustering" in (DeltaTable(str(by_sql)).protocol().writer_features or [])

    # Bad input, refused before anything is written.
    with pytest.raises(TypeError, match=re.escape("Clustering column must be str. Found 1 with type <class 'int'>")):
        SparkonceDeltaTable.create(spark).clusterBy("a", 1)  # type: ignore[arg-type]
    with pytest.raises(SqlError, match="DELTA_CLUSTER_BY_WITH_PARTITIONED_BY"):
        SparkonceDeltaTable.create(spark).tableName("both").addColumn("a", "INT").addColumn("p", "INT").partitionedBy(
            "p"
        ).clusterBy("a").execute()
    with pytest.raises(SqlError, match="clustering column 'nope' is not a column"):
        sql(f"CREATE TABLE delta.`{tmp_path / 'bad'}` (a INT) USING delta CLUSTER BY (nope)")
    with pytest.raises(SqlError, match="DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS"):
        sql(
            f"CREATE TABLE delta.`{tmp_path / 'many'}` (a INT, b INT, c INT, d INT, e INT) USING delta "
            "CLUSTER BY (a, b, c, d, e)"
        )
    with pytest.raises(SqlError, match="DELTA_CLUSTERING_COLUMN_MISSING_STATS"):
        sql(
            f"CREATE TABLE delta.`{tmp_path / 'nostats'}` (a INT, b INT) USING delta CLUSTER BY (b) "
            "TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '1')"
        )
    with pytest.raises(
        SqlError,
        match=r"^\[DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE\] Replacing a clustered Delta table with a "
        r"partitioned table is not allowed\.$",
    ):
        SparkonceDeltaTable.createOrReplace(spark).tableName("clustered").addColumn("x", "INT").partitionedBy(
            "x"
        ).execute()
    for name in ("both", "bad", "many", "nostats"):
        assert not (tmp_path / name).exists() and not (tmp_path / "warehouse" / name).exists()
    assert DeltaTable(str(path)).version() == 0

    # Replacing, as Delta's ClusteredTableDDLSuite: new clustering columns replace the old ones; a replace without
    # them (here overwriteSchema) leaves the table clustered by nothing, its features kept.
    SparkonceDeltaTable.createOrReplace(spark).tableName("clustered").addColumn("x", "INT").addColumn(
        "y", "STRING"
    ).clusterBy("y").execute()
    assert _domain(path, 1)["configuration"] == '{"clusteringColumns":[["y"]]}'
    spark.range(2).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(str(path))
    assert _domain(path, 2)["configuration"] == '{"clusteringColumns":[]}'
    assert table_clustering(path) == ()
    assert DeltaTable(str(path)).protocol().writer_features == [
        "appendOnly",
        "clustering",
        "domainMetadata",
        "invariants",
    ]
    assert DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist() == [0, 1]
    # A plain table replaced by a clustered one gets the features (writer 7) and the domain.
    sql(f"CREATE OR REPLACE TABLE delta.`{tmp_path / 'plain'}` (id BIGINT) USING delta")
    sql(f"CREATE OR REPLACE TABLE delta.`{tmp_path / 'plain'}` (id BIGINT, k INT) USING delta CLUSTER BY (k)")
    plain = DeltaTable(str(tmp_path / "plain")).protocol()
    assert (plain.min_writer_version, plain.writer_features) == (
        7,
        ["appendOnly", "clustering", "domainMetadata", "invariants"],
    )
    assert table_clustering(tmp_path / "plain") == ("k",)


def test_optimize_clusters_and_alter_changes_columns(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    path = tmp_path / "events"
    sql(
        f"CREATE TABLE delta.`{path}` (a BIGINT, b STRING) USING delta CLUSTER BY (a, b) "
        "TBLPROPERTIES ('delta.checkpointInterval' = '3')"
    )
    for start in (0, 100):
        frame = spark.range(start, start + 100, 1, 4).selectExpr("id AS a", "CAST(id % 7 AS STRING) AS b")
        frame.write.format("delta").mode("append").save(str(path))
    with pytest.raises(SqlError, match="DELTA_CLUSTERING_WITH_ZORDER_BY"):
        sql(f"OPTIMIZE delta.`{path}` ZORDER BY (a)")
    sql(f"OPTIMIZE delta.`{path}`")
    info = DeltaTable(str(path)).history(1)[0]
    assert (info["operation"], info["operationParameters"]["clusterBy"]) == ("OPTIMIZE", '["a","b"]')
    assert info["operationParameters"]["zOrderBy"] == "[]"
    adds = [a["add"] for a in _actions(path, 3) if "add" in a]
    assert adds and {a["clusteringProvider"] for a in adds} == {"liquid"}
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pydict()
    assert sorted(rows["a"]) == list(range(200))

    # The checkpoint at table version 3 keeps the domain, and sparkonce's log reader reads it back from there.
    [checkpoint] = glob.glob(str(path / "_delta_log" / "*.checkpoint.parquet"))
    domains = [d for d in pq.read_table(checkpoint).column("domainMetadata").to_pylist() if d]
    assert domains == [
        {"domain": "delta.clustering", "configuration": '{"clusteringColumns":[["a"],["b"]]}', "removed": False}
    ]
    snapshot = DeltaLog(str(path)).snapshot(3)
    assert snapshot.checkpoint_version == 3
    assert table_clustering(str(path), 3) == ("a", "b")

    sql(f"ALTER TABLE delta.`{path}` CLUSTER BY (b)")
    assert _domain(path, 4)["configuration"] == '{"clusteringColumns":[["b"]]}'
    info = DeltaTable(str(path)).history(1)[0]
    assert (info["operation"], info["operationParameters"]) == (
        "CLUSTER BY",
        {"oldClusteringColumns": "a,b", "newClusteringColumns": "b"},
    )
    assert sql(f"DESCRIBE DETAIL delta.`{path}`").select("clusteringColumns").collect()[0][0] == ["b"]
    with pytest.raises(UnsupportedFeatureError, match="clustering columns differ"):  # delta-rs keeps the domain
        sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 3")
    sql(f"ALTER TABLE delta.`{path}` CLUSTER BY NONE")
    assert _domain(path, 5)["configuration"] == '{"clusteringColumns":[]}'
    assert sql(f"DESCRIBE DETAIL delta.`{path}`").select("clusteringColumns").collect()[0][0] == []
    assert "clustering" in (DeltaTable(str(path)).protocol().writer_features or [])  # still a clustered table

    # A plain table becomes clustered; a partitioned one cannot; NONE on a plain table changes nothing.
    plain = tmp_path / "plain"
    spark.range(5).selectExpr("id AS a").write.format("delta").save(str(plain))
    sql(f"ALTER TABLE delta.`{plain}` CLUSTER BY NONE")
    assert DeltaTable(str(plain)).version() == 0
    sql(f"ALTER TABLE delta.`{plain}` CLUSTER BY (a)")
    protocol = DeltaTable(str(plain)).protocol()
    assert protocol.min_writer_version == 7 and {"clustering", "domainMetadata"} <= set(protocol.writer_features or [])
    assert _domain(plain, 1)["configuration"] == '{"clusteringColumns":[["a"]]}'
    parted = tmp_path / "parted"
    spark.range(5).selectExpr("id AS a", "id % 2 AS p").write.format("delta").partitionBy("p").save(str(parted))
    with pytest.raises(SqlError, match="DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED"):
        sql(f"ALTER TABLE delta.`{parted}` CLUSTER BY (a)")
    assert DeltaTable(str(parted)).version() == 0


def test_alter_cluster_by_on_a_column_mapped_table_names_physical_columns(sql: DeltaSql, tmp_path: Path) -> None:
    from tests.integration.test_delta_column_mapping import write_column_mapped_table

    table = tmp_path / "mapped"
    write_column_mapped_table(table, "name")
    sql(f"ALTER TABLE delta.`{table}` CLUSTER BY (id)")
    assert _domain(table, 1)["configuration"] == '{"clusteringColumns":[["col-id"]]}'  # as Delta: physical names
