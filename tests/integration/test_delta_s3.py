"""Delta tables on the embedded S3 store (SeaweedFS): the same code paths as local tables, exactly once.

Real store, real delta-rs commits with put-if-absent (``conditional_put=etag``), real Spark. Checkpoints stay on
the local disk (Spark writes them through Hadoop's file system API).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.txn.commit import BatchTxn, commit_files, load_table
from sparkonce.delta.txn.readers import read_readers
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import SqlError, StorageError
from sparkonce.storage import table_location
from tests.fixtures_storage import EmbeddedStore, copy_table_to_store
from tests.integration.conftest import registered_reader

pytestmark = pytest.mark.s3

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


def _commit_rows(uri: str, options: dict[str, str], ids: list[int], writer: str, app_id: str, batch_id: int) -> bool:
    """One driver's commit of one batch (files written first, as executors do); True when it committed."""
    location = table_location(uri, storage_options=options)
    files = TableFileWriter(FileWriterOptions(location=location), task_id=0)
    files.write(pa.table({"id": ids, "writer": [writer] * len(ids)}, schema=SCHEMA))
    result = commit_files(location, files.close(), data_schema=SCHEMA, txn=BatchTxn(app_id, batch_id))
    return not result.skipped


def _race_same_batch(uri: str, options: dict[str, str], writer: str, queue: Any) -> None:
    queue.put(_commit_rows(uri, options, [1, 2, 3], writer, "query-1", 0))


def _append_batches(uri: str, options: dict[str, str], app_id: str, batches: int, queue: Any) -> None:
    for batch_id in range(batches):
        base = (0 if app_id == "a" else 1000) + batch_id * 10
        _commit_rows(uri, options, list(range(base, base + 10)), app_id, app_id, batch_id)
    queue.put(app_id)


def _run(target: Any, args_list: list[tuple[Any, ...]]) -> list[Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=target, args=(*args, queue)) for args in args_list]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
        assert process.exitcode == 0
    return [queue.get(timeout=10) for _ in processes]


def test_four_processes_committing_the_same_batch_make_exactly_one_commit(
    object_store: EmbeddedStore, s3_uri: str
) -> None:
    options = object_store.storage_options
    committed = _run(_race_same_batch, [(s3_uri, options, f"w{i}") for i in range(4)])
    assert sorted(committed) == [False, False, False, True]
    table = load_table(table_location(s3_uri, storage_options=options))
    assert table.transaction_version("query-1") == 0
    rows = table.to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    assert len(set(rows.column("writer").to_pylist())) == 1
    log = DeltaLog(table_location(s3_uri, storage_options=options))
    assert [e.batch_id for e in log.history() if e.query_id == "query-1"] == [0]


def test_two_queries_appending_make_contiguous_table_versions_and_lose_nothing(
    object_store: EmbeddedStore, s3_uri: str
) -> None:
    options = object_store.storage_options
    _run(_append_batches, [(s3_uri, options, "a", 5), (s3_uri, options, "b", 5)])
    location = table_location(s3_uri, storage_options=options)
    log = DeltaLog(location)
    versions = log.commit_versions()
    assert versions == list(range(len(versions)))  # contiguous, nothing overwritten
    commits = [(e.query_id, e.batch_id) for e in log.history() if e.query_id in ("a", "b")]
    assert sorted(commits) == [(app, b) for app in ("a", "b") for b in range(5)]
    ids = sorted(load_table(location).to_pyarrow_table().column("id").to_pylist())
    assert ids == [*range(0, 50), *range(1000, 1050)]


def test_plain_s3_without_put_if_absent_is_refused_naming_the_option(
    object_store: EmbeddedStore, s3_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)
    options = {k: v for k, v in object_store.storage_options.items() if k != "conditional_put"}
    location = table_location(s3_uri, storage_options=options)
    with pytest.raises(StorageError, match=r"conditional_put=etag.*AWS_S3_LOCKING_PROVIDER, is no longer supported"):
        location.check_commit_safety()  # what the batch writer and the streaming sink ask before any task runs
    with pytest.raises(StorageError, match=r"conditional_put=etag.*AWS_S3_LOCKING_PROVIDER, is no longer supported"):
        commit_files(location, [], data_schema=SCHEMA, txn=BatchTxn("q", 0))
    assert not location.check_reachable(for_write=True)  # nothing was created


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_bucket", r"bucket 'no-such-bucket-[0-9a-f]+' does not exist"),
        ("wrong_credentials", r"refused the credentials: check AWS_ACCESS_KEY_ID"),
        ("unreachable", r"unreachable: check AWS_ENDPOINT_URL"),
        ("not_delta", r"holds objects but no _delta_log: it is not a Delta table"),
    ],
)
def test_bad_store_input_is_a_clear_error_before_any_data_moves(
    object_store: EmbeddedStore, s3_uri: str, case: str, message: str
) -> None:
    import uuid

    import pyarrow.fs as pafs

    options = dict(object_store.storage_options)
    uri = s3_uri
    if case == "missing_bucket":
        uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t"
    elif case == "wrong_credentials":
        options["AWS_SECRET_ACCESS_KEY"] = "wrong-secret"
    elif case == "unreachable":
        options["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # the discard port: nothing listens
        options["AWS_MAX_RETRIES"] = "0"
    else:
        import pyarrow.parquet as pq

        filesystem = table_location(uri, storage_options=options).filesystem()
        pq.write_table(pa.table({"id": [1]}), "data.parquet", filesystem=filesystem)
    location = table_location(uri, storage_options=options)
    with pytest.raises(StorageError, match=message):
        location.check_reachable(for_write=True)
    if case != "not_delta":
        with pytest.raises(StorageError, match=message):
            load_table(location)
    else:
        names = [i.base_name for i in location.filesystem().get_file_info(pafs.FileSelector("", recursive=True))]
        assert names == ["data.parquet"]  # nothing written beside it


# -- through Spark -----------------------------------------------------------------------------------------------


def _storage(writer: Any, options: dict[str, str]) -> Any:
    for name, value in options.items():
        writer = writer.option(f"storage.{name}", value)
    return writer


@pytest.mark.spark
def test_batch_write_read_time_travel_and_txn_through_spark(
    spark: Any, object_store: EmbeddedStore, s3_uri: str
) -> None:
    options = object_store.storage_options
    first = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    _storage(first.write.format("delta").mode("append"), options).save(s3_uri)
    second = spark.createDataFrame([(3, "c")], "id long, name string")
    for _ in range(2):  # the replay of txn (app, 7) is skipped
        _storage(second.write.format("delta").mode("append"), options).option("txnAppId", "app").option(
            "txnVersion", 7
        ).save(s3_uri)

    def read(**extra: str) -> list[tuple[Any, ...]]:
        reader = _storage(spark.read.format("delta"), options)
        for key, value in extra.items():
            reader = reader.option(key, value)
        return sorted(tuple(r) for r in reader.load(s3_uri).collect())

    latest = load_table(table_location(s3_uri, storage_options=options)).version()
    assert read() == [(1, "a"), (2, "b"), (3, "c")]
    assert read(versionAsOf=str(latest - 1)) == [(1, "a"), (2, "b")]
    assert load_table(table_location(s3_uri, storage_options=options)).transaction_version("app") == 7


@pytest.mark.spark
def test_deletion_vectors_on_s3_are_read_and_verified(
    spark: Any, object_store: EmbeddedStore, s3_uri: str, fixtures_dir: Path
) -> None:
    """Delta's golden DV table (50 rows, 15 of them deleted by deletion vectors in files next to the data) copied
    to the store: Spark's read and verify both see the 35 live rows, the DVs read through the store."""
    from sparkonce.ops.verify import verify_table

    options = object_store.storage_options
    location = table_location(s3_uri, storage_options=options)
    copy_table_to_store(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", location)
    rows = _storage(spark.read.format("delta"), options).load(s3_uri).collect()
    live = sorted(x for x in range(50) if not (x % 2 == 0 and x < 30))
    assert sorted(r["col1"] for r in rows) == live
    report = verify_table(location, topic_column="col2", partition_column="part", offset_column="col1")
    assert report.rows_scanned == len(live)


@pytest.mark.spark
def test_stream_from_an_s3_table_into_an_s3_table_exactly_once(
    spark: Any, object_store: EmbeddedStore, tmp_path: Path
) -> None:
    options = object_store.storage_options
    source, target = object_store.unique_uri("src"), object_store.unique_uri("dst")

    def append(ids: range) -> None:
        frame = spark.createDataFrame([(i,) for i in ids], "id long")
        _storage(frame.write.format("delta").mode("append"), options).save(source)

    def run() -> str:
        stream = _storage(spark.readStream.format("delta"), options).load(source)
        writer = _storage(stream.writeStream.format("delta"), options)
        query = writer.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(target)
        query.awaitTermination()
        return str(query.id)

    append(range(0, 5))
    run()
    append(range(5, 12))
    query_id = run()
    rows = load_table(table_location(target, storage_options=options)).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(12))
    # the stream registered itself in the source's log on the store (the retention guard), at its last batch's start
    source_location = table_location(source, storage_options=options)
    assert registered_reader(source_location, query_id, 1).source == "delta"
    assert len(read_readers(source_location)[0]) == 1


@pytest.mark.spark
def test_a_checkpoint_scheme_without_hadoop_file_system_is_refused_before_any_data_moves(
    spark: Any, object_store: EmbeddedStore, s3_uri: str
) -> None:
    # s3:// (not s3a://): the session's Hadoop has no file system for it, so Spark could not write the checkpoint
    frame = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    writer = _storage(frame.writeStream.format("delta"), object_store.storage_options)
    with pytest.raises(StorageError, match=rf"{s3_uri}-ck: No FileSystem for scheme \"s3\""):
        writer.option("checkpointLocation", f"{s3_uri}-ck").trigger(availableNow=True).start(s3_uri).awaitTermination()
    assert not table_location(s3_uri, storage_options=object_store.storage_options).check_reachable(for_write=True)


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from sparkonce.cli.main import cli

    return CliRunner().invoke(cli, list(args))


def _option_args(options: dict[str, str]) -> list[str]:
    return [arg for name, value in options.items() for arg in ("--storage-option", f"{name}={value}")]


@pytest.mark.spark
def test_lost_checkpoint_is_rebuilt_from_the_s3_table_and_the_stream_resumes_exactly_once(
    spark: Any, object_store: EmbeddedStore, tmp_path: Path
) -> None:
    """A driver's disk is lost with the checkpoint; the table on S3 carries each batch's offsets.

    The CLI does the diagnosis and the rebuild, the store reached through ``--storage-option`` only.
    """
    import json
    import shutil

    options = object_store.storage_options
    source, target = object_store.unique_uri("src"), object_store.unique_uri("dst")
    checkpoint = tmp_path / "ck"

    def append(ids: range) -> None:
        frame = spark.createDataFrame([(i,) for i in ids], "id long")
        _storage(frame.write.format("delta").mode("append"), options).save(source)

    def run() -> str:
        stream = _storage(spark.readStream.format("delta"), options).option("maxFilesPerTrigger", 1).load(source)
        writer = _storage(stream.writeStream.format("delta"), options)
        query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(target)
        query.awaitTermination()
        return str(query.id)

    append(range(0, 4))
    append(range(4, 8))
    query_id = run()
    import pyarrow.parquet as pq

    stray = table_location(target, storage_options=options).filesystem()  # a file left by an aborted write
    pq.write_table(pa.table({"id": [99]}), "part-stray.parquet", filesystem=stray)
    doctor = _cli("doctor", str(checkpoint), "--table", target, *_option_args(options), "--json")
    assert doctor.exit_code == 0, doctor.output
    report = json.loads(doctor.output)
    source_files = len(load_table(table_location(source, storage_options=options)).file_uris())
    assert report["last_committed"] == source_files - 1  # one batch per source file (maxFilesPerTrigger 1)
    found = [(t["table_path"], t["txn_version"], t["orphan_files"]) for t in report["tables"]]
    assert found == [(target, report["last_committed"], 1)]  # the stray file, and no file the table references
    assert "AWS_SECRET_ACCESS_KEY" not in doctor.output and options["AWS_SECRET_ACCESS_KEY"] not in doctor.output
    shutil.rmtree(checkpoint)  # the driver's disk is gone
    rebuilt = _cli("rebuild-checkpoint", target, str(checkpoint), *_option_args(options), "--yes", "--json")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads(rebuilt.output)["plan"]["query_id"] == query_id
    append(range(8, 13))
    assert run() == query_id  # the same query resumes
    rows = load_table(table_location(target, storage_options=options)).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(13))  # every row exactly once


def test_cli_table_commands_take_s3_uris_and_storage_options(object_store: EmbeddedStore, tmp_path: Path) -> None:
    """verify, history, vacuum and reset on an S3 table; bad option syntax and refused credentials are clear."""
    import json

    from deltalake import write_deltalake

    options = object_store.storage_options
    uri = object_store.unique_uri("cli")
    offsets = [*range(10), 3]  # offset 3 twice
    raw = pa.table({"topic": ["t"] * len(offsets), "partition": [0] * len(offsets), "offset": offsets})
    write_deltalake(uri, raw.slice(0, 10), storage_options=options)
    write_deltalake(uri, raw.slice(10), mode="append", storage_options=options)
    args = _option_args(options)

    verify = _cli("verify", "--table", uri, *args, "--range", "t:0:0-10", "--json")
    assert verify.exit_code == 1, verify.output  # the duplicate is a finding
    partitions = json.loads(verify.output)["partitions"]
    found = [(p["rows"], [d["offset"] for d in p["duplicates"]], p["missing_offsets"]) for p in partitions]
    assert found == [(11, [3], 0)]
    history = _cli("history", uri, *args, "--json")
    assert history.exit_code == 0, history.output
    assert [e["table_version"] for e in json.loads(history.output)["entries"]] == [1, 0]
    assert _cli("vacuum", uri, *args, "--dry-run").exit_code == 0

    checkpoint = tmp_path / "ck"
    (checkpoint / "offsets").mkdir(parents=True)
    reset = _cli("reset", str(checkpoint), "--table", uri, *args, "--force", "--yes")
    assert reset.exit_code == 0, reset.output
    assert load_table(table_location(uri, storage_options=options)).to_pyarrow_table().num_rows == 0

    bad_syntax = _cli("history", uri, "--storage-option", "AWS_REGION")
    assert bad_syntax.exit_code == 2 and "give NAME=VALUE" in bad_syntax.output
    refused = _cli("history", uri, *_option_args({**options, "AWS_SECRET_ACCESS_KEY": "wrong"}))
    assert refused.exit_code == 3 and "refused the credentials" in refused.output, refused.output
    assert _cli("history", "hdfs://nn/t").exit_code == 2


@pytest.fixture
def session_storage(spark: Any) -> Iterator[Callable[[dict[str, str]], None]]:
    """Set ``spark.sparkonce.storage.*`` entries and register again; unset them and register again after."""
    import sparkonce

    keys: list[str] = []

    def set_conf(options: dict[str, str]) -> None:
        for name, value in options.items():
            spark.conf.set(f"spark.sparkonce.storage.{name}", value)
            keys.append(f"spark.sparkonce.storage.{name}")
        sparkonce.register(spark)

    yield set_conf
    for key in keys:
        spark.conf.unset(key)
    sparkonce.register(spark)


@pytest.mark.spark
def test_session_storage_options_from_the_spark_conf_reach_reads_writes_and_streams(
    spark: Any, object_store: EmbeddedStore, session_storage: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """Endpoint and keys only in the Spark conf: batch write, batch read, a stream between two S3 tables."""
    from sparkonce.storage import session_storage_options

    options = object_store.storage_options
    source, target = object_store.unique_uri("conf-src"), object_store.unique_uri("conf-dst")
    session_storage(options)
    assert session_storage_options() == options  # the driver's own table locations get them too

    spark.createDataFrame([(i,) for i in range(5)], "id long").write.format("delta").mode("append").save(source)
    assert sorted(r.id for r in spark.read.format("delta").load(source).collect()) == list(range(5))
    query = (
        spark.readStream.format("delta")
        .load(source)
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination()
    rows = load_table(table_location(target)).to_pyarrow_table()  # the session options, no explicit ones
    assert sorted(rows.column("id").to_pylist()) == list(range(5))


@pytest.mark.spark
def test_an_explicit_storage_option_wins_over_the_spark_conf(
    spark: Any, object_store: EmbeddedStore, session_storage: Callable[[dict[str, str]], None], s3_uri: str
) -> None:
    options = object_store.storage_options
    session_storage({**options, "AWS_SECRET_ACCESS_KEY": "not-the-key"})
    frame = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(AnalysisException, match=r"StorageError: .*refused the credentials"):
        frame.write.format("delta").mode("append").save(s3_uri)
    writer = frame.write.format("delta").mode("append")
    writer.option("storage.AWS_SECRET_ACCESS_KEY", options["AWS_SECRET_ACCESS_KEY"]).save(s3_uri)
    rows = load_table(table_location(s3_uri, storage_options=options)).to_pyarrow_table()
    assert rows.column("id").to_pylist() == [1]


@pytest.mark.spark
def test_cli_optimize_compacts_an_s3_table_with_storage_options(spark: Any, object_store: EmbeddedStore) -> None:
    """``sparkonce optimize s3://... --storage-option ...`` in the active session: same rows, fewer files."""
    import json

    from deltalake import write_deltalake

    options = object_store.storage_options
    uri = object_store.unique_uri("optimize")
    for start in range(0, 30, 10):
        write_deltalake(uri, pa.table({"id": list(range(start, start + 10))}), mode="append", storage_options=options)
    result = _cli("optimize", uri, *_option_args(options), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["files_removed"] == 3
    table = load_table(table_location(uri, storage_options=options))
    assert len(table.file_uris()) == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(30))


@pytest.mark.spark
def test_tables_by_name_with_the_warehouse_and_an_external_table_on_s3(
    spark: Any, object_store: EmbeddedStore, session_storage: Callable[[dict[str, str]], None], tmp_path: Path
) -> None:
    """sparkonce's catalog in an S3 warehouse: a managed table (saveAsTable, toTable, spark.table, forName, DROP TABLE
    deleting its files) and an external one (CREATE TABLE ... LOCATION 's3://...')."""
    import deltalake
    import pyarrow.fs as pafs

    from sparkonce.delta.table.catalog import CATALOG_DIR, DeltaCatalog
    from sparkonce.delta.tables import DeltaTable as SoDeltaTable

    warehouse = object_store.unique_uri("warehouse")
    external = object_store.unique_uri("external")
    session_storage(object_store.storage_options)
    spark.conf.set("spark.sparkonce.warehouse.dir", warehouse)
    try:
        spark.createDataFrame([(i,) for i in range(4)], "id long").write.format("delta").saveAsTable("s3_managed")
        assert DeltaCatalog(warehouse).get("default", "s3_managed") is not None
        managed = f"{warehouse}/s3_managed"
        assert (
            deltalake.DeltaTable(managed, storage_options=object_store.storage_options).to_pyarrow_table().num_rows == 4
        )
        query = (
            spark.readStream.format("delta")
            .table("s3_managed")
            .writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .toTable("s3_copy")
        )
        query.awaitTermination()
        assert sorted(r.id for r in spark.table("s3_copy").collect()) == list(range(4))
        assert SoDeltaTable.forName(spark, "s3_managed").toDF().count() == 4

        spark.createDataFrame([(9,)], "id long").write.format("delta").save(external)
        spark.sql(f"CREATE TABLE s3_external USING delta LOCATION '{external}'")
        assert [r.id for r in spark.sql("SELECT id FROM s3_external").collect()] == [9]
        names = {r.tableName for r in spark.sql("SHOW TABLES").collect()}
        assert {"s3_managed", "s3_copy", "s3_external"} <= names

        with pytest.raises(
            SqlError, match=r"^\[TABLE_OR_VIEW_ALREADY_EXISTS\] Cannot create table or view `default`.`s3_external`"
        ):
            spark.sql(f"CREATE TABLE s3_external USING delta LOCATION '{external}'")
        spark.sql("DROP TABLE s3_managed")  # managed: its files go
        spark.sql("DROP TABLE s3_external")  # external: its files stay
        store = table_location(warehouse).filesystem()
        left = store.get_file_info(pafs.FileSelector("s3_managed", recursive=True, allow_not_found=True))
        # SeaweedFS keeps the emptied folders and lists them as empty objects: no file with content is left.
        assert [i.path for i in left if i.is_file and i.size] == []
        assert not deltalake.DeltaTable.is_deltatable(managed, storage_options=object_store.storage_options)
        assert store.get_file_info(f"{CATALOG_DIR}/default/s3_external.json").type.name == "NotFound"
        assert deltalake.DeltaTable(external, storage_options=object_store.storage_options).version() == 0
    finally:
        for name in ("s3_managed", "s3_copy", "s3_external"):
            spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.conf.unset("spark.sparkonce.warehouse.dir")
