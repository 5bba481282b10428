"""Schema tracking of Delta streams (issue 39, item 2): ``schemaTrackingLocation`` with Delta's semantics.

A stream from a column-mapped (or type-widening) table meets a RENAME COLUMN, DROP COLUMN or ALTER COLUMN TYPE:
the batch before the change ends at it (offset index -20, ``sourceVersion`` 3), the schema log takes the new schema
and the query stops with ``DELTA_STREAMING_METADATA_EVOLUTION``; restarted, it refuses to go on
(``DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION``) until a reader option or SQL conf unblocks the
change, then reads with the new schema, every row exactly once. Both read paths (the native source and the Python
data source) and the change data feed. Each micro-batch lands in its own folder (``foreachBatch``, overwritten when
a batch runs again), so the tests see which batch carried which row; the SIGKILL test streams into a Delta table.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.read.native import NATIVE_READS_CONF, is_native
from sparkonce.delta.table.schema_log import (
    PersistedMetadata,
    SchemaLog,
    check_unblocked,
    checkpoint_hash,
    log_folder,
    source_metadata_path,
)
from sparkonce.errors import OptionError, SchemaTrackingError
from sparkonce.sql import DeltaSql
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.fixtures_delta_oracle import DeltaOracle, OracleError

pytestmark = pytest.mark.spark

RENAME_CONF = "spark.databricks.delta.streaming.allowSourceColumnRename"
TYPE_CHANGE_CONF = "spark.databricks.delta.streaming.allowSourceColumnTypeChange"


@pytest.fixture(params=["native", "python"])
def read_path(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[str]:
    """Both read paths of ``readStream.format("delta")``."""
    if request.param == "python":
        spark.conf.set(NATIVE_READS_CONF, "false")
    try:
        yield str(request.param)
    finally:
        spark.conf.unset(NATIVE_READS_CONF)


@pytest.fixture
def python_path(spark: SparkSession) -> Iterator[None]:
    """Reads through the Python data source."""
    spark.conf.set(NATIVE_READS_CONF, "false")
    try:
        yield
    finally:
        spark.conf.unset(NATIVE_READS_CONF)


def _table(spark: SparkSession, path: Path, rows: list[tuple[Any, ...]], ddl: str, **properties: str) -> None:
    writer = spark.createDataFrame(rows, ddl).coalesce(1).write.format("delta")
    for key, value in properties.items():
        writer = writer.option(key, value)
    writer.save(str(path))


def _append(spark: SparkSession, path: Path, rows: list[tuple[Any, ...]], ddl: str) -> None:
    spark.createDataFrame(rows, ddl).coalesce(1).write.format("delta").mode("append").save(str(path))


def _stream(
    spark: SparkSession, source: Path, ck: Path, out: Path, *, options: dict[str, str] | None = None
) -> DataFrame:
    """Define the stream (its schema comes from the schema log), start it into one folder per batch and wait for
    the end of its availableNow run."""
    reader = spark.readStream.format("delta").option("schemaTrackingLocation", str(ck / "_schema"))
    for key, value in {"maxFilesPerTrigger": "10", **(options or {})}.items():
        reader = reader.option(key, value)
    frame = reader.load(str(source))

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    query = (
        frame.writeStream.foreachBatch(write).option("checkpointLocation", str(ck)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    return frame


def _batches(spark: SparkSession, out: Path) -> dict[int, list[dict[str, Any]]]:
    """The rows each micro-batch delivered, by batch id (columns the batch did not have left out)."""
    found: dict[int, list[dict[str, Any]]] = {}
    for folder in sorted(out.glob("batch=*"), key=lambda p: int(p.name.split("=")[1])):
        rows = [r.asDict() for r in spark.read.parquet(str(folder)).collect()]
        found[int(folder.name.split("=")[1])] = sorted(rows, key=lambda r: r["id"])
    return found


def _ids(batches: dict[int, list[dict[str, Any]]]) -> list[int]:
    return sorted(r["id"] for rows in batches.values() for r in rows)


def _offsets(ck: Path, batch_id: int) -> dict[str, Any]:
    return json.loads((ck / "offsets" / str(batch_id)).read_text().splitlines()[-1])


def _entries(ck: Path) -> list[dict[str, Any]]:
    (folder,) = (ck / "_schema").glob("_schema_log_*")
    files = sorted((f for f in folder.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    out = []
    for f in files:
        head, body = f.read_text().split("\n", 1)
        assert head == "v1"
        out.append(json.loads(body))
    return out


def _columns(entry: dict[str, Any]) -> list[str]:
    return [f["name"] for f in json.loads(entry["dataSchemaJson"])["fields"]]


def _unblock_key(conf: str, ck: Path) -> str:
    return f"{conf}.ckpt_{checkpoint_hash(source_metadata_path(str(ck), 0))}"


def test_a_rename_stops_the_stream_at_the_change_and_a_restart_reads_the_new_name_exactly_once(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, read_path: str
) -> None:
    source, ck, out = tmp_path / "source", tmp_path / "ck", tmp_path / "out"
    ddl = "id long, v string"
    _table(spark, source, [(1, "a"), (2, "b")], ddl, **{"delta.columnMapping.mode": "name"})
    frame = _stream(spark, source, ck, out)
    assert is_native(frame) is (read_path == "native")
    assert [_columns(e) for e in _entries(ck)] == [["id", "v"]]
    assert _entries(ck)[0]["sourceMetadataPath"] == source_metadata_path(str(ck), 0)

    _append(spark, source, [(3, "c"), (4, "d")], ddl)  # table version 1
    sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN v TO w")  # table version 2
    _append(spark, source, [(5, "e"), (6, "f")], "id long, w string")  # table version 3

    with pytest.raises(StreamingQueryException, match=r"DELTA_STREAMING_METADATA_EVOLUTION\].*restart the stream"):
        _stream(spark, source, ck, out)
    # The batch before the rename read table version 1 and ended at the change; the log took the new schema.
    assert _batches(spark, out)[1] == [{"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    end = _offsets(ck, 1)
    assert (end["sourceVersion"], end["reservoirVersion"], end["index"]) == (3, 2, -20)
    assert (ck / "commits" / "1").exists()
    entries = _entries(ck)
    assert [(e["deltaCommitVersion"], _columns(e)) for e in entries] == [(0, ["id", "v"]), (2, ["id", "w"])]

    with pytest.raises(
        SchemaTrackingError, match=r"DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION"
    ) as err:
        _stream(spark, source, ck, out)
    assert "(RENAME COLUMN) between Delta version 0 and 2" in str(err.value)
    assert "'v' -> 'w'" in str(err.value)
    key = _unblock_key(RENAME_CONF, ck)
    assert f"SET {key} = 2;" in str(err.value)

    spark.conf.set(key, "2")
    try:
        frame = _stream(spark, source, ck, out)
    finally:
        spark.conf.unset(key)
    assert frame.columns == ["id", "w"]
    batches = _batches(spark, out)
    assert _ids(batches) == [1, 2, 3, 4, 5, 6]  # each row once: none lost, none twice
    after = [r for rows in batches.values() for r in rows if r["id"] >= 5]
    assert after == [{"id": 5, "w": "e"}, {"id": 6, "w": "f"}]
    assert all("w" not in r for rows in batches.values() for r in rows if r["id"] <= 4)


def test_a_drop_unblocked_by_the_reader_option(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path, python_path: None
) -> None:
    """Through the Python data source."""
    source, ck, out = tmp_path / "source", tmp_path / "ck", tmp_path / "out"
    ddl = "id long, v string, n int"
    _table(spark, source, [(1, "a", 10)], ddl, **{"delta.columnMapping.mode": "name"})
    _stream(spark, source, ck, out)
    _append(spark, source, [(2, "b", 20)], ddl)
    sql(f"ALTER TABLE delta.`{source}` DROP COLUMN n")  # table version 2
    _append(spark, source, [(3, "c")], "id long, v string")
    with pytest.raises(StreamingQueryException, match=r"DELTA_STREAMING_METADATA_EVOLUTION"):
        _stream(spark, source, ck, out)
    with pytest.raises(SchemaTrackingError, match=r"\(DROP COLUMN\)[\s\S]*'n'[\s\S]*allowSourceColumnDrop"):
        _stream(spark, source, ck, out, options={"allowSourceColumnDrop": "1"})  # another table version: no
    frame = _stream(spark, source, ck, out, options={"allowSourceColumnDrop": "always"})
    assert frame.columns == ["id", "v"]
    rows = [r for rows in _batches(spark, out).values() for r in rows]
    assert sorted(r["id"] for r in rows) == [1, 2, 3]
    assert [r for r in rows if r["id"] == 3] == [{"id": 3, "v": "c"}]
    assert [r for r in rows if r["id"] == 2] == [{"id": 2, "v": "b", "n": 20}]


def test_a_type_widening_unblocked_by_the_sql_conf(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    """Through the native source."""
    source, ck, out = tmp_path / "source", tmp_path / "ck", tmp_path / "out"
    _table(spark, source, [(1, 7)], "id long, n int", **{"delta.enableTypeWidening": "true"})
    _stream(spark, source, ck, out)
    _append(spark, source, [(2, 2_000_000_000)], "id long, n int")
    sql(f"ALTER TABLE delta.`{source}` ALTER COLUMN n TYPE BIGINT")  # table version 2
    _append(spark, source, [(3, 5_000_000_000)], "id long, n long")
    with pytest.raises(StreamingQueryException, match=r"DELTA_STREAMING_METADATA_EVOLUTION"):
        _stream(spark, source, ck, out)
    assert [json.loads(e["dataSchemaJson"])["fields"][1]["type"] for e in _entries(ck)] == ["integer", "long"]
    with pytest.raises(SchemaTrackingError, match=r"\(TYPE WIDENING\)[\s\S]*'n': INT -> BIGINT"):
        _stream(spark, source, ck, out)
    spark.conf.set(TYPE_CHANGE_CONF, "always")
    try:
        frame = _stream(spark, source, ck, out)
    finally:
        spark.conf.unset(TYPE_CHANGE_CONF)
    assert dict(frame.dtypes)["n"] == "bigint"
    batches = _batches(spark, out)
    assert _ids(batches) == [1, 2, 3]
    assert [r for rows in batches.values() for r in rows if r["id"] == 3] == [{"id": 3, "n": 5_000_000_000}]


def test_a_change_data_feed_stream_tracks_a_rename(spark: SparkSession, sql: DeltaSql, tmp_path: Path) -> None:
    source, ck, out = tmp_path / "source", tmp_path / "ck", tmp_path / "out"
    ddl = "id long, v string"
    properties = {"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true"}
    _table(spark, source, [(1, "a")], ddl, **properties)
    feed = {"readChangeFeed": "true", "startingVersion": "0"}
    _stream(spark, source, ck, out, options=feed)
    _append(spark, source, [(2, "b")], ddl)
    sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN v TO w")
    _append(spark, source, [(3, "c")], "id long, w string")
    with pytest.raises(StreamingQueryException, match=r"DELTA_STREAMING_METADATA_EVOLUTION"):
        _stream(spark, source, ck, out, options=feed)
    frame = _stream(spark, source, ck, out, options={**feed, "allowSourceColumnRename": "2"})
    assert frame.columns == ["id", "w", "_change_type", "_commit_version", "_commit_timestamp"]
    rows = [r for rows in _batches(spark, out).values() for r in rows]
    assert sorted((r["id"], r["_commit_version"], r.get("v"), r.get("w")) for r in rows) == [
        (1, 0, "a", None),
        (2, 1, "b", None),
        (3, 3, None, "c"),
    ]
    assert {r["_change_type"] for r in rows} == {"insert"}


def test_a_schema_tracking_location_outside_the_checkpoint_is_refused_before_anything_runs(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    _table(spark, source, [(1, "a")], "id long, v string", **{"delta.columnMapping.mode": "name"})
    frame = (
        spark.readStream.format("delta").option("schemaTrackingLocation", str(tmp_path / "schemas")).load(str(source))
    )
    with pytest.raises(
        OptionError, match=r"schemaTrackingLocation.*DELTA_STREAMING_SCHEMA_LOCATION_NOT_UNDER_CHECKPOINT"
    ):
        frame.writeStream.format("memory").queryName("outside").option(
            "checkpointLocation", str(tmp_path / "ck")
        ).start()
    with pytest.raises(OptionError, match=r"schemaTrackingLocation.*needs the query's checkpointLocation"):
        frame.writeStream.format("memory").queryName("outside").start()
    assert not (tmp_path / "schemas").exists()
    assert not (tmp_path / "ck" / "offsets").exists()


@pytest.mark.crash
def test_a_driver_killed_after_the_schema_log_write_restarts_exactly_once(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """SIGKILL of the driver (its whole process group) right after the schema log took the rename, before the query
    stopped: the restart with the unblocking conf reads on with the new name, and the Delta table the stream writes
    holds every row once."""
    source, target, ck = tmp_path / "source", tmp_path / "target", tmp_path / "ck"
    ddl = "id long, v string"
    _table(spark, source, [(1, "a"), (2, "b")], ddl, **{"delta.columnMapping.mode": "name"})
    # The first run in this process (one driver JVM less), as the driver runs it: batch 0 reads table version 0.
    (
        spark.readStream.format("delta")
        .option("schemaTrackingLocation", str(ck / "_schema"))
        .option("maxFilesPerTrigger", "10")
        .load(str(source))
        .writeStream.format("delta")
        .option("mergeSchema", "true")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(target))
        .awaitTermination()
    )
    driver = ["-m", "tests.integration.drivers.delta_to_delta", str(source), str(target), str(ck)]
    tracking = ["--schema-tracking", str(ck / "_schema"), "--max-files", "10", "--starting-version", "none"]
    _append(spark, source, [(3, "c"), (4, "d")], ddl)
    sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN v TO w")
    _append(spark, source, [(5, "e"), (6, "f")], "id long, w string")

    crashed = run_driver([*driver, *tracking], crash_at="after_schema_log_write", cwd=str(REPO), timeout=300)
    assert crashed.killed, crashed.stderr[-3000:]
    assert [(e["deltaCommitVersion"], _columns(e)) for e in _entries(ck)] == [(0, ["id", "v"]), (2, ["id", "w"])]
    assert (ck / "commits" / "1").exists() and (ck / "offsets" / "2").exists()
    assert not (ck / "commits" / "2").exists()
    assert sorted(r.id for r in spark.read.format("delta").load(str(target)).collect()) == [1, 2, 3, 4]

    key = _unblock_key(RENAME_CONF, ck)
    finished = run_driver([*driver, *tracking, "--conf", f"{key}=always"], cwd=str(REPO), timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = {r.id: (r.v, r.w) for r in spark.read.format("delta").load(str(target)).collect()}
    ids = [r.id for r in spark.read.format("delta").load(str(target)).collect()]
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert rows == {1: ("a", None), 2: ("b", None), 3: ("c", None), 4: ("d", None), 5: (None, "e"), 6: (None, "f")}


@pytest.mark.oracle
def test_delta_sparks_schema_log_and_barrier_are_the_ones_sparkonce_writes(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """delta-spark's own stream with a ``schemaTrackingLocation`` over a rename: its schema log entries are the
    entries sparkonce makes of the same table versions (format, source folder, protocol, configuration), its barrier
    offsets are sparkonce's, and the unblocking message it prints names the checkpoint hash and confs sparkonce's
    does."""
    source, target, ck = tmp_path / "source", tmp_path / "target", tmp_path / "ck"
    delta_oracle.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, v STRING) USING delta "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    delta_oracle.append(source, [{"id": 1, "v": "a"}], "id long, v string")
    tracking = {"schemaTrackingLocation": str(ck / "_schema"), "maxFilesPerTrigger": "10"}
    delta_oracle.stream(source, target, ck, **tracking)
    delta_log = DeltaLog(str(source))
    table_id = str(delta_log.snapshot(1).metadata["id"])
    folder = log_folder(str(ck / "_schema"), table_id, None)
    path = source_metadata_path(str(ck), 0)

    def ours(version: int) -> dict[str, Any]:
        state = delta_log.snapshot(version)
        return _comparable(PersistedMetadata.of(table_id, version, state.metadata, state.protocol, path).to_json())

    theirs = SchemaLog(folder, table_id).entry(0)
    assert _comparable(theirs.to_json()) == ours(theirs.delta_commit_version) and theirs.delta_commit_version == 1

    delta_oracle.append(source, [{"id": 2, "v": "b"}], "id long, v string")  # table version 2
    delta_oracle.sql(f"ALTER TABLE delta.`{source}` RENAME COLUMN v TO w")  # table version 3
    delta_oracle.append(source, [{"id": 3, "w": "c"}], "id long, w string")
    with pytest.raises(OracleError, match=r"DELTA_STREAMING_METADATA_EVOLUTION"):
        delta_oracle.stream(source, target, ck, **tracking)
    assert _comparable(SchemaLog(folder, table_id).entry(1).to_json()) == ours(3)
    planned = sorted(int(f.name) for f in (ck / "offsets").iterdir() if f.name.isdigit())
    barrier, post = _offsets(ck, planned[-2]), _offsets(ck, planned[-1])
    assert barrier == {
        "sourceVersion": 3,
        "reservoirId": table_id,
        "reservoirVersion": 3,
        "index": -20,
        "isStartingVersion": False,
    }
    assert post == {**barrier, "index": -19}

    with pytest.raises(OracleError) as err:
        delta_oracle.stream(source, target, ck, **tracking)
    schema_log = SchemaLog(folder, table_id)
    previous, current = schema_log.previous(), schema_log.entry(1)
    assert previous is not None
    with pytest.raises(SchemaTrackingError) as mine:
        check_unblocked(previous, current, options={}, confs={}, metadata_path=path)
    key = _unblock_key(RENAME_CONF, ck)
    for line in (f"SET {key} = 3;", f'SET {key} = "always";', f'SET {RENAME_CONF} = "always";', "'v' -> 'w'"):
        assert line in str(err.value) and line in str(mine.value), line
    assert "DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION" in str(err.value)


def _comparable(entry: dict[str, Any]) -> dict[str, Any]:
    """A schema log entry with its JSON strings parsed (the two engines order JSON keys their own way)."""
    out = dict(entry)
    for key in ("dataSchemaJson", "partitionSchemaJson", "protocolJson"):
        if key in out:
            out[key] = json.loads(out[key])
    return out
