"""The native read path (:mod:`sparkonce.delta.read.native`): Spark's own Parquet scan over the files the Delta log
lists.

Every fixture table reads the same rows on the native path as on the Python data source; partition pruning is
exact (Spark leaves partition filters to the index); data skipping drops files by their statistics; columns are
pruned; a DataFrame and a view over it see the table's state at each query, as delta-spark's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from sparkonce.delta.read.native import NATIVE_READS_CONF, last_scan
from tests.delta_helpers import comparable

pytestmark = pytest.mark.spark

FIXTURE_TABLES = sorted(
    p.name
    for p in (Path(__file__).parents[1] / "fixtures" / "delta-tables").iterdir()
    if p.is_dir() and (p / "_delta_log").is_dir()
) + ["delta-rs:" + n for n in ("cdf-table", "cdf-table-non-partitioned", "cdc_ict_table", "cdf-table-with-cdc-and-dvs")]


LOG_ONLY = frozenset({"checkpoint", "corrupted-last-checkpoint"})
"""Fixtures with a Delta log and no data files (Delta's golden log tests)."""


def _rows(frame: DataFrame) -> list[str]:
    # toArrow, not collect: a map with array keys cannot become a Python dict (a PySpark Row limitation)
    return sorted(repr(tuple((k, comparable(v)) for k, v in r.items())) for r in frame.toArrow().to_pylist())


def _both(spark: SparkSession, read: Any) -> tuple[Any, Any]:
    """``read()`` on the native path, then on the Python data source: (result or exception) of each."""
    answers = []
    for native in ("true", "false"):
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            answers.append(read())
        except Exception as err:
            answers.append(err)
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    return answers[0], answers[1]


def _message(err: Exception) -> str:
    """The whole message of an error, the JVM's included (a py4j error's ``str`` is cut)."""
    java = getattr(err, "java_exception", None)
    return f"{err} {java.toString() if java is not None else ''}"


def _fixture(fixtures_dir: Path, name: str) -> Path:
    if name.startswith("delta-rs:"):
        return fixtures_dir / "delta-rs-tables" / name.split(":", 1)[1]
    return fixtures_dir / "delta-tables" / name


@pytest.mark.parametrize("name", FIXTURE_TABLES)
def test_every_fixture_reads_the_same_rows_natively_and_through_the_python_source(
    spark: SparkSession, fixtures_dir: Path, name: str
) -> None:
    path = str(_fixture(fixtures_dir, name))
    native, python = _both(spark, lambda: _rows(spark.read.format("delta").load(path)))
    if name in LOG_ONLY:  # the log names data files that were never copied: both paths refuse
        assert isinstance(python, Exception)
        assert isinstance(native, Exception) and "FILE_NOT_EXIST" in _message(native)
        return
    assert not isinstance(python, Exception), f"{name}: {_message(python)[:500]}"
    assert not isinstance(native, Exception), f"{name}: native read failed: {_message(native)[:500]}"
    assert native == python


def test_every_version_of_a_restored_table_reads_alike(spark: SparkSession, fixtures_dir: Path) -> None:
    path = str(fixtures_dir / "delta-tables" / "basic-with-inserts-overwrite-restore")
    from deltalake import DeltaTable

    for version in range(DeltaTable(path).version() + 1):
        native, python = _both(
            spark, lambda v=version: _rows(spark.read.format("delta").option("versionAsOf", v).load(path))
        )
        assert native == python, f"table version {version}"


@pytest.fixture
def partitioned(spark: SparkSession, tmp_path: Path) -> str:
    """Partitioned by a string (with nulls), a date and an int; 3 rows per partition."""
    path = str(tmp_path / "partitioned")
    spark.range(0, 60).selectExpr(
        "id",
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('p', cast(id % 4 as string)) END AS s",
        "date_add(DATE'2024-01-01', cast(id % 3 as int)) AS d",
        "cast(id % 2 as int) AS n",
        "cast(id as double) / 2 AS v",
    ).write.format("delta").partitionBy("s", "d", "n").save(path)
    return path


@pytest.mark.parametrize(
    "condition",
    [
        "s = 'p1'",
        "s IS NULL",
        "s IS NOT NULL AND n = 1",
        "s IN ('p1', 'p3') OR d = DATE'2024-01-03'",
        "d > DATE'2024-01-01' AND v > 10",
        "NOT (s = 'p2')",
        "s <=> NULL",
        "coalesce(s, 'none') = 'none'",
        "upper(s) = 'P3' AND id < 40",
        "n + 1 = 2 OR v < 3",
    ],
)
def test_partition_pruning_is_exact(spark: SparkSession, partitioned: str, condition: str) -> None:
    """Spark leaves partition filters to the index and never applies them again: the rows must be exact."""
    native, python = _both(spark, lambda: _rows(spark.read.format("delta").load(partitioned).where(condition)))
    whole = spark.read.format("delta").load(partitioned)
    expected = _rows(spark.createDataFrame(whole.collect(), whole.schema).where(condition))
    assert native == python == expected
    assert len(native) > 0


def test_partition_pruning_reads_only_the_partitions_asked_for(spark: SparkSession, partitioned: str) -> None:
    spark.read.format("delta").load(partitioned).where("s = 'p1' AND n = 1").collect()
    scan = last_scan(partitioned)
    assert scan is not None
    assert scan.files_total > scan.files_after_partition_pruning > 0


@pytest.fixture
def ranges(spark: SparkSession, tmp_path: Path) -> str:
    """20 files, each a contiguous id range of 1,000 rows, with a string and a timestamp column."""
    path = str(tmp_path / "ranges")
    spark.range(0, 20_000, numPartitions=20).selectExpr(
        "id",
        "concat('name-', lpad(cast(id as string), 6, '0')) AS name",
        "timestamp_seconds(1700000000 + id) AS at",
        "CASE WHEN id % 1000 = 999 THEN NULL ELSE id % 7 END AS maybe",
        "cast(id as double) AS dbl",
    ).write.format("delta").save(path)
    return path


@pytest.mark.parametrize(
    ("condition", "files"),
    [
        ("id = 12345", 1),
        ("id IN (5, 15005)", 2),
        ("id < 1000", 1),
        ("id >= 19000", 1),
        ("id > 999 AND id <= 2000", 2),
        ("name = 'name-003500'", 1),
        ("name LIKE 'name-0042%'", 1),
        ("at = timestamp_seconds(1700000000 + 7777)", 1),
        ("id = 3 OR id = 19999", 2),
        ("NOT (id >= 1000)", 1),
        ("dbl < 1000", 1),
        ("id = -1", 0),
        ("maybe IS NULL AND id < 1000", 1),
        ("maybe IS NULL", 20),
        ("dbl > 18999.5", 20),  # NaN is above every number and not in the statistics: no skipping on >
        ("abs(id) = 5", 20),  # not understood: no file may be dropped
    ],
)
def test_data_skipping_reads_only_files_whose_statistics_may_match(
    spark: SparkSession, ranges: str, condition: str, files: int
) -> None:
    native, python = _both(spark, lambda: _rows(spark.read.format("delta").load(ranges).where(condition)))
    spark.read.format("delta").load(ranges).where(condition).collect()
    scan = last_scan(ranges)
    assert native == python
    assert scan is not None and scan.files_total == 20
    assert scan.files_read == files, condition


def test_only_the_columns_a_query_uses_are_read(spark: SparkSession, ranges: str) -> None:
    frame = spark.read.format("delta").load(ranges).selectExpr("sum(id)")
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<id:bigint>" in plan
    assert frame.collect()[0][0] == sum(range(20_000))


def test_metadata_columns_resolve_on_a_native_read(spark: SparkSession, ranges: str) -> None:
    frame = (
        spark.read.format("delta")
        .load(ranges)
        .where("id = 42")
        .select("id", "_metadata.file_path", "_metadata.row_index")
    )
    [row] = frame.collect()
    assert row.file_path.startswith("file:") and row.file_path.endswith(".parquet")
    assert row.row_index == 42


def test_a_view_sees_every_later_change_of_the_table(spark: SparkSession, tmp_path: Path) -> None:
    """Each query over a view re-reads the log, as delta-spark's file index does: append, MERGE, overwrite and an
    added column (the view keeps its columns)."""
    path = str(tmp_path / "t")
    spark.range(5).selectExpr("id", "id * 10 AS v").write.format("delta").save(path)
    spark.read.format("delta").load(path).where("id > 1").createOrReplaceTempView("native_view")
    frame = spark.read.format("delta").load(path)

    def view() -> list[tuple[int, int]]:
        return sorted((r.id, r.v) for r in spark.sql("SELECT * FROM native_view").collect())

    assert view() == [(2, 20), (3, 30), (4, 40)]
    spark.range(5, 7).selectExpr("id", "id * 10 AS v").write.format("delta").mode("append").save(path)
    assert view() == [(2, 20), (3, 30), (4, 40), (5, 50), (6, 60)]
    assert frame.count() == 7
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT 3 AS id, 333 AS v) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v"
    )
    assert (3, 333) in view()
    spark.range(10, 12).selectExpr("id", "id AS v").write.format("delta").mode("overwrite").save(path)
    assert view() == [(10, 10), (11, 11)]
    spark.range(20, 21).selectExpr("id", "id AS v", "'x' AS extra").write.format("delta").mode("append").option(
        "mergeSchema", "true"
    ).save(path)
    assert view() == [(10, 10), (11, 11), (20, 20)]
    assert spark.read.format("delta").load(path).columns == ["id", "v", "extra"]


def test_a_view_over_a_dropped_column_fails_with_deltas_error(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).selectExpr("id", "id AS v").write.format("delta").save(path)
    spark.read.format("delta").load(path).createOrReplaceTempView("native_view_dropped")
    spark.range(3).selectExpr("id", "'s' AS w").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(path)
    with pytest.raises(Exception, match="DELTA_SCHEMA_CHANGED_WITH_VERSION"):
        spark.sql("SELECT * FROM native_view_dropped").collect()


def test_time_travel_pins_the_version_across_later_commits(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    pinned = spark.read.format("delta").option("versionAsOf", 0).load(path)
    spark.range(3, 5).write.format("delta").mode("append").save(path)
    assert pinned.count() == 3
    assert spark.read.format("delta").load(path).count() == 5


def test_a_timestamp_after_the_latest_commit_is_refused_as_delta_refuses_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    with pytest.raises(Exception, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        spark.read.format("delta").option("timestampAsOf", "2099-01-01").load(path).collect()
    with pytest.raises(Exception, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        spark.sql(f"SELECT * FROM delta.`{path}` TIMESTAMP AS OF '2099-01-01'").collect()


@pytest.mark.parametrize("name", ["dv-partitioned-with-checkpoint", "dv-with-columnmapping"])
def test_a_table_with_deletion_vectors_reads_natively_without_the_deleted_rows(
    spark: SparkSession, fixtures_dir: Path, name: str
) -> None:
    """Delta's golden DV tables (rows ``(x % 10, x, "foo" + x % 5)`` for x in 0..49, then table versions 1..15 each
    deleting ``col1 = 2 * (version - 1)`` by deletion vector): every table version reads natively with exactly the
    rows left, as the Python source reads it; Spark's scan reads only the columns asked for, and only the row index
    and the file's vector cross into Python (the vectorized filter)."""
    path = str(fixtures_dir / "delta-tables" / name)
    for version in (0, 1, 7, 15):
        frame = spark.read.format("delta").option("versionAsOf", version).load(path)
        deleted = {2 * n for n in range(version)}
        expected = sorted((x % 10, x, f"foo{x % 5}") for x in range(50) if x not in deleted)
        native, python = _both(
            spark,
            lambda v=version: sorted(
                (r.part, r.col1, r.col2)
                for r in spark.read.format("delta").option("versionAsOf", v).load(path).collect()
            ),
        )
        assert native == python == expected, version
        assert getattr(frame, "_sparkonce_native", False) is True
    latest = spark.read.format("delta").load(path)
    assert latest.count() == 35
    pruned = latest.where("col1 >= 40").select("col2")
    plan = pruned._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan and "ArrowEvalPython" in plan and "BatchScan" not in plan
    read_schema = plan.split("ReadSchema: struct<")[1].split(">")[0]
    if name == "dv-partitioned-with-checkpoint":  # (the column-mapped one reads physical names)
        assert read_schema == "col1:int,col2:string,_tmp_metadata_row_index:bigint"
    assert sorted(r.col2 for r in pruned.collect()) == sorted(f"foo{x % 5}" for x in range(40, 50))
    # the metadata column, and SQL over the path
    rows = spark.read.format("delta").option("metadataColumn", "true").load(path).select("col1", "_metadata")
    assert rows.count() == 35 and rows.where("_metadata.row_index IS NULL").count() == 0
    assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` VERSION AS OF 3").first().n == 47  # type: ignore[union-attr]


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_merge_update_delete_and_optimize_read_their_files_natively(
    spark: SparkSession, tmp_path: Path, mapping: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The rewrites read the files they rewrite through Spark's Parquet scan (their log line names the file set),
    and end with the same table as on the Python workers' path."""
    from sparkonce.delta.tables import DeltaTable

    results = []
    for native in ("true", "false"):
        path = str(tmp_path / f"t-{native}")
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            writer = spark.range(0, 400).selectExpr("id", "id % 4 AS part", "concat('v', id) AS v")
            writer = writer.repartitionByRange(4, "id").write.format("delta").partitionBy("part")
            writer.option("delta.columnMapping.mode", mapping).save(path)
            table = DeltaTable.forPath(spark, path)
            source = spark.range(390, 410).selectExpr("id", "id % 4 AS part", "concat('m', id) AS v")
            with caplog.at_level("INFO", logger="sparkonce.delta.read.native"):
                caplog.clear()
                (
                    table.alias("t")
                    .merge(source.alias("s"), "t.id = s.id")
                    .whenMatchedUpdateAll()
                    .whenNotMatchedInsertAll()
                    .execute()
                )
                table.update("id = 7", {"v": "'updated'"})
                table.delete("id < 5")
                table.optimize().executeCompaction()
                rewrites = [r.getMessage() for r in caplog.records if "file(s) to rewrite" in r.getMessage()]
            assert (len(rewrites) >= 4) is (native == "true"), rewrites
            rows = spark.read.format("delta").load(path).orderBy("id").collect()
            results.append([(r.id, r.part, r.v) for r in rows])
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    native_rows, python_rows = results
    assert native_rows == python_rows
    expected = {i: ("m" if i >= 390 else "v") + str(i) for i in range(5, 410)}
    expected[7] = "updated"
    assert native_rows == [(i, i % 4, v) for i, v in sorted(expected.items())]


def test_rewrites_of_a_table_with_deletion_vectors_read_its_files_natively_without_the_deleted_rows(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """UPDATE and DELETE on Delta's DV fixture: the files they rewrite are read by Spark's scan, the rows the
    deletion vectors delete dropped by the anti-join; the table ends as on the Python workers' path."""
    import shutil

    from sparkonce.delta.tables import DeltaTable

    results = []
    for native in ("true", "false"):
        path = tmp_path / f"dv-{native}"
        shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", path)
        spark.conf.set(NATIVE_READS_CONF, native)
        try:
            table = DeltaTable.forPath(spark, str(path))
            with caplog.at_level("INFO", logger="sparkonce.delta.read.native"):
                caplog.clear()
                table.update("col1 % 2 = 0", {"col2": "'even'"})
                table.delete("col1 > 40")
                rewrites = [r.getMessage() for r in caplog.records if "file(s) to rewrite" in r.getMessage()]
            assert (len(rewrites) >= 2) is (native == "true"), rewrites
            rows = spark.read.format("delta").load(str(path)).collect()
            results.append(sorted((r.part, r.col1, r.col2) for r in rows))
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    native_rows, python_rows = results
    assert native_rows == python_rows
    assert native_rows and all(c1 <= 40 and (c2 == "even") is (c1 % 2 == 0) for _, c1, c2 in native_rows)


def test_a_dataframe_made_before_the_table_could_hold_deletion_vectors_refuses_a_file_with_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A DataFrame over a table without the ``deletionVectors`` feature has no filter for them: once the table
    takes the feature and a DELETE marks rows by deletion vector, the DataFrame fails naming the file (never
    returning a deleted row), and a new read applies the vector."""
    import json

    from sparkonce.delta.tables import DeltaTable

    path = str(tmp_path / "t")
    spark.range(0, 20, numPartitions=1).write.format("delta").save(path)
    frame = spark.read.format("delta").load(path)
    assert frame.count() == 20
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert frame.count() == 20  # the feature alone: no file has a vector yet
    DeltaTable.forPath(spark, path).delete("id < 5")
    last = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))[-1]
    actions = [json.loads(line) for line in last.read_text(encoding="utf-8").splitlines()]
    assert any("deletionVector" in (a.get("add") or {}) for a in actions)  # deleted by vector, not rewritten
    with pytest.raises(Exception, match=r"has deletion vectors \(file .*\.parquet\).*read the table again"):
        frame.count()
    fresh = spark.read.format("delta").load(path)
    assert sorted(r.id for r in fresh.collect()) == list(range(5, 20))
