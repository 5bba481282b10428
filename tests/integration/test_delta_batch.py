"""Batch writes and reads through format("delta"), against real tables on disk (checked with delta-rs too)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from pyspark.sql.utils import AnalysisException

from sparkonce.errors import OptionError, TableNotFoundError
from tests.delta_helpers import commit_times

pytestmark = pytest.mark.spark


def rows(spark: SparkSession, path: Path, **options: str) -> list[tuple]:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(tuple(r) for r in reader.load(str(path)).collect())


def table_log(path: Path, table_version: int) -> list[dict]:
    text = (path / "_delta_log" / f"{table_version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_append_overwrite_and_time_travel(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string").write.format("delta").save(str(path))
    spark.createDataFrame([(3, "c")], "id long, name string").write.format("delta").mode("append").save(str(path))
    spark.createDataFrame([(9, "z")], "id long, name string").write.format("delta").mode("overwrite").save(str(path))

    assert rows(spark, path) == [(9, "z")]
    assert rows(spark, path, versionAsOf="0") == [(1, "a"), (2, "b")]  # table version 0 holds the first write
    assert rows(spark, path, versionAsOf="1") == [(1, "a"), (2, "b"), (3, "c")]
    assert DeltaTable(str(path)).version() == 2  # 3 writes
    # timestampAsOf resolves to the newest table version committed at or before the timestamp
    import datetime as dt

    # A commit's timestamp is its file's modification time (Delta's rule without in-commit timestamps; the
    # commitInfo's own time is the writer's clock before the file was written). Spread the files' times apart by
    # seconds so the check cannot race a clock: history shows them, and time travel resolves against them.
    import os

    first_ms = int(DeltaTable(str(path)).history()[-1]["timestamp"])
    for table_version in range(3):
        at_ns = (first_ms + 10_000 * table_version) * 1_000_000
        os.utime(path / "_delta_log" / f"{table_version:020d}.json", ns=(at_ns, at_ns))
    committed_at = commit_times(path)
    assert committed_at == {v: first_ms + 10_000 * v for v in range(3)}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert {r.version: round(r.timestamp.timestamp() * 1000) for r in history} == committed_at

    def as_of(millis: float) -> list[tuple]:
        when = dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        return rows(spark, path, timestampAsOf=when)

    assert as_of(committed_at[0]) == [(1, "a"), (2, "b")]  # exactly at table version 0
    assert as_of((committed_at[0] + committed_at[1]) / 2) == [(1, "a"), (2, "b")]  # between 0 and 1
    assert as_of(committed_at[1]) == [(1, "a"), (2, "b"), (3, "c")]  # exactly at table version 1
    assert as_of(committed_at[2]) == [(9, "z")]


def test_seed_002_time_travel_read(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 002: read the raw zone as of a timestamp, reprocess, overwrite the bronze table."""
    raw, bronze = tmp_path / "raw", tmp_path / "bronze"
    spark.createDataFrame([('{"v": 1}',)], "raw_payload string").write.format("delta").mode("append").save(str(raw))
    before = spark.read.format("delta").option("versionAsOf", 0).load(str(raw))
    fixed = before.selectExpr("get_json_object(raw_payload, '$.v') as v")
    fixed.write.format("delta").mode("overwrite").save(str(bronze))
    assert rows(spark, bronze) == [("1",)]


def test_save_modes_error_and_ignore(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    df = spark.createDataFrame([(1,)], "id long")
    df.write.format("delta").mode("error").save(str(path))  # creates: fine
    with pytest.raises(
        AnalysisException, match=r"OptionError: option 'mode' = 'error': the Delta table .* already exists"
    ):
        df.write.format("delta").save(str(path))  # default mode is errorifexists, as in Delta
    spark.createDataFrame([(2,)], "id long").write.format("delta").mode("ignore").save(str(path))
    assert rows(spark, path) == [(1,)]
    assert DeltaTable(str(path)).version() == 0


def test_partition_by_writes_partition_dirs_and_prunes(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    df = spark.createDataFrame(
        [(i, f"p{i % 3}", None if i == 0 else "x y") for i in range(30)], "id long, p string, q string"
    )
    df.write.format("delta").partitionBy("p", "q").mode("overwrite").save(str(path))
    table = DeltaTable(str(path))
    assert table.metadata().partition_columns == ["p", "q"]
    assert (path / "p=p1" / "q=x y").is_dir() and (path / "p=p0" / "q=__HIVE_DEFAULT_PARTITION__").is_dir()
    got = rows(spark, path)
    assert got == sorted((i, f"p{i % 3}", None if i == 0 else "x y") for i in range(30))
    assert sorted(pa.table(table.to_pyarrow_table()).column("id").to_pylist()) == list(range(30))
    filtered = spark.read.format("delta").load(str(path)).where("p = 'p1'")
    assert sorted(r.id for r in filtered.collect()) == [i for i in range(30) if i % 3 == 1]
    # pruning: with the files of partition p0 gone from disk, a read of p1 still works (they are never opened)
    import shutil

    shutil.rmtree(path / "p=p0")
    assert sorted(r.id for r in spark.read.format("delta").load(str(path)).where("p = 'p1'").collect()) == [
        i for i in range(30) if i % 3 == 1
    ]
    with pytest.raises(Py4JJavaError) as missing:  # Spark's own Parquet scan reads the files (native read path)
        spark.read.format("delta").load(str(path)).collect()
    assert re.search(r"FAILED_READ_FILE\.FILE_NOT_EXIST\] .*/t/p=p0/", missing.value.java_exception.toString())
    shutil.rmtree(path)
    df.write.format("delta").partitionBy("p", "q").mode("overwrite").save(str(path))
    # a later append without partitionBy uses the table's partitioning
    spark.createDataFrame([(100, "p1", "x y")], "id long, p string, q string").write.format("delta").mode(
        "append"
    ).save(str(path))
    assert 100 in [r.id for r in spark.read.format("delta").load(str(path)).where("p = 'p1'").collect()]


def test_idempotent_writes_with_txn_app_id_and_version(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 003: both options given, a repeated (appId, version) is skipped; a higher version is written."""
    path = tmp_path / "t"
    df = spark.createDataFrame([(1,)], "id long")

    def write(version: int) -> None:
        df.write.format("delta").option("txnAppId", "1-2-3-4").option("txnVersion", version).mode("append").save(
            str(path)
        )

    write(0)
    write(0)
    write(1)
    write(1)
    write(0)
    assert rows(spark, path) == [(1,), (1,)]
    assert DeltaTable(str(path)).transaction_version("1-2-3-4") == 1
    txns = [a["txn"] for v in range(DeltaTable(str(path)).version() + 1) for a in table_log(path, v) if "txn" in a]
    assert [(t["appId"], t["version"]) for t in txns] == [("1-2-3-4", 0), ("1-2-3-4", 1)]
    # skipped writes leave no data files behind
    parquet = {p.name for p in path.glob("*.parquet")}
    referenced = {Path(f).name for f in DeltaTable(str(path)).file_uris()}
    assert parquet == referenced


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"txnVersion": "1"}, "txnAppId"),
        ({"txnAppId": "a"}, "txnVersion"),
        ({"txnAppId": "a", "txnVersion": "-1"}, "non-negative"),
        ({"txnAppId": "a", "txnVersion": "x1"}, "non-negative"),
        ({"maxRecordsPerFile": "0"}, "maxRecordsPerFile"),
        ({"compression": "brotli9"}, "compression"),
        ({"mergeSchema": "maybe"}, "mergeSchema"),
    ],
)
def test_bad_write_options_name_the_option(spark: SparkSession, tmp_path: Path, options: dict, message: str) -> None:
    writer = spark.createDataFrame([(1,)], "id long").write.format("delta").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(AnalysisException, match=f"OptionError: option .*{message}"):
        writer.save(str(tmp_path / "t"))
    assert not (tmp_path / "t" / "_delta_log").exists()  # nothing written


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"versionAsOf": "1", "timestampAsOf": "2020-01-01"}, "cannot be combined"),
        ({"versionAsOf": "-1"}, "versionAsOf"),
        ({"timestampAsOf": "yesterday"}, "timestampAsOf"),
        ({"timestampAsOf": "1999-01-01"}, "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION"),
        ({"timestampAsOf": "2999-01-01"}, "DELTA_TIMESTAMP_GREATER_THAN_COMMIT"),
    ],
)
def test_bad_read_options_name_the_option(spark: SparkSession, tmp_path: Path, options: dict, message: str) -> None:
    """Refused by load(), before any data moves (the native read path plans the scan there)."""
    spark.createDataFrame([(1,)], "id long").write.format("delta").save(str(tmp_path / "t"))
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(OptionError, match=f"option .*{message}"):
        reader.load(str(tmp_path / "t"))


def test_reading_a_path_that_is_not_a_delta_table(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(TableNotFoundError, match=r"\[DELTA_MISSING_DELTA_TABLE\] .*plain is not a Delta table"):
        spark.read.format("delta").load(str(tmp_path / "plain"))


def test_corrupted_log_json_names_the_file_and_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([(1,)], "id long").write.format("delta").save(str(path))
    spark.createDataFrame([(2,)], "id long").write.format("delta").mode("append").save(str(path))
    bad = path / "_delta_log" / f"{1:020d}.json"
    bad.write_text(bad.read_text()[:40])
    with pytest.raises(
        AnalysisException,
        match=r"DeltaLogError: \S*/_delta_log/00000000000000000001\.json: line 1 of table version 1 is not valid JSON",
    ):
        spark.createDataFrame([(3,)], "id long").write.format("delta").mode("append").save(str(path))
    assert sorted(p.name for p in (path / "_delta_log").glob("*.json")) == [f"{0:020d}.json", f"{1:020d}.json"]


def test_schema_enforcement_lists_both_schemas(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([(1, "a")], "value long, old_column string").write.format("delta").save(str(path))
    mismatch = (
        r"(?s)SchemaMismatchError: A schema mismatch.*mergeSchema.*Table schema.*old_column.*Data schema.*new_column"
    )
    with pytest.raises(AnalysisException, match=mismatch):
        spark.createDataFrame([(2, "b")], "value long, new_column string").write.format("delta").mode("append").save(
            str(path)
        )
    with pytest.raises(
        AnalysisException, match=r"(?s)SchemaMismatchError: \[DELTA_FAILED_TO_MERGE_FIELDS\].*'value' and 'value'"
    ):
        spark.createDataFrame([("x",)], "value string").write.format("delta").mode("append").save(str(path))
    assert rows(spark, path) == [(1, "a")]


def test_merge_schema_adds_columns_and_old_rows_read_null(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([(1,)], "id long").write.format("delta").save(str(path))
    spark.createDataFrame([(2, "n")], "id long, extra string").write.format("delta").mode("append").option(
        "mergeSchema", "true"
    ).save(str(path))
    assert rows(spark, path) == [(1, None), (2, "n")]
    assert [f.name for f in DeltaTable(str(path)).schema().fields] == ["id", "extra"]


def test_overwrite_schema_replaces_schema_atomically(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([(1,)], "id long").write.format("delta").save(str(path))
    spark.createDataFrame([("a",)], "name string").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(str(path))
    assert rows(spark, path) == [("a",)]
    actions = table_log(path, 1)
    assert any("metaData" in a for a in actions) and any("add" in a for a in actions)  # one Delta commit
    with pytest.raises(
        AnalysisException, match=r"OptionError: option 'overwriteSchema' = 'true': needs mode overwrite"
    ):
        spark.createDataFrame([(1,)], "id long").write.format("delta").mode("append").option(
            "overwriteSchema", "true"
        ).save(str(path))


def test_overwrite_schema_replaces_the_partitioning_too(spark: SparkSession, tmp_path: Path) -> None:
    """As Delta: with overwriteSchema the table's partitioning becomes the one given, none when none is."""
    path = tmp_path / "t"
    spark.createDataFrame([(1, "d1")], "id long, day string").write.format("delta").partitionBy("day").save(str(path))
    spark.createDataFrame([(2, "x")], "id long, k string").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).save(str(path))
    assert DeltaTable(str(path)).metadata().partition_columns == []
    assert DeltaTable(str(path)).to_pyarrow_table().to_pylist() == [{"id": 2, "k": "x"}]  # delta-rs reads it
    spark.createDataFrame([(3, "y")], "id long, k string").write.format("delta").mode("overwrite").option(
        "overwriteSchema", "true"
    ).partitionBy("k").save(str(path))
    assert DeltaTable(str(path)).metadata().partition_columns == ["k"]
    assert DeltaTable(str(path)).to_pyarrow_table().to_pylist() == [{"id": 3, "k": "y"}]
    with pytest.raises(
        AnalysisException, match=r"SchemaMismatchError: partition columns \['id'\] do not match the table's \['k'\]"
    ):  # without overwriteSchema: refused
        spark.createDataFrame([(4, "z")], "id long, k string").write.format("delta").mode("overwrite").partitionBy(
            "id"
        ).save(str(path))


def test_max_records_per_file_rolls_files(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.range(0, 100, numPartitions=1).write.format("delta").option("maxRecordsPerFile", 30).save(str(path))
    assert len(DeltaTable(str(path)).file_uris()) == 4
    assert [r.id for r in spark.read.format("delta").load(str(path)).orderBy("id").collect()] == list(range(100))


def test_orphan_files_are_never_read(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 001's partial-write copy: a file the log does not reference is ignored (unlike a globbed read)."""
    import shutil

    path = tmp_path / "t"
    spark.range(0, 10, numPartitions=2).write.format("delta").save(str(path))
    one = next(path.glob("*.parquet"))
    shutil.copy(one, path / ("copy-" + one.name))
    assert spark.read.format("delta").load(str(path)).count() == 10
    assert spark.read.parquet(str(path / "*.parquet")).count() > 10  # the globbed read sees the orphan


def test_sparkonce_delta_name_and_seed_003_fanout(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 003's fan-out: foreachBatch writes one batch to two tables, each idempotent by (app id, batch id)."""
    df = spark.createDataFrame([(1,), (2,)], "id long")

    def write_batch_7() -> None:
        for name in ("a", "b"):
            df.write.format("sparkonce.delta").option("txnAppId", f"fanout-{name}").option("txnVersion", 7).mode(
                "append"
            ).save(str(tmp_path / name))

    write_batch_7()
    first = {name: DeltaTable(str(tmp_path / name)) for name in ("a", "b")}
    for name, table in first.items():
        assert table.transaction_version(f"fanout-{name}") == 7
        assert rows(spark, tmp_path / name) == [(1,), (2,)]
    write_batch_7()  # the replay of batch 7 (a restart after a crash between the tables) commits nothing
    for name, table in first.items():
        assert DeltaTable(str(tmp_path / name)).version() == table.version()
        assert rows(spark, tmp_path / name) == [(1,), (2,)]


def test_writes_from_a_thread_that_did_not_create_the_session(spark: SparkSession, tmp_path: Path) -> None:
    """Spark looks Python data sources up for a write in the calling thread's active session: without the writer
    shims making it active, a batch or streaming write from another thread failed with DATA_SOURCE_NOT_FOUND."""
    import threading

    errors: list[BaseException] = []

    def write() -> None:
        try:
            spark.range(3).write.format("delta").mode("append").save(str(tmp_path / "batch"))
            query = (
                spark.readStream.format("delta")
                .load(str(tmp_path / "batch"))
                .writeStream.format("delta")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True)
                .start(str(tmp_path / "stream"))
            )
            query.awaitTermination()
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert not errors, errors[0]
    assert rows(spark, tmp_path / "batch") == [(0,), (1,), (2,)]
    assert rows(spark, tmp_path / "stream") == [(0,), (1,), (2,)]
