"""The native streaming source (:mod:`sparkonce.delta.read.native_stream`): ``readStream.format("delta")`` planned by
the Delta stream source's offsets and read by Spark's own Parquet scan. Every fixture table streams the same rows on
both paths; a checkpoint moves between the paths; columns are pruned; two queries over one DataFrame keep their own
positions; the checkpoint records the source; deletion vectors are applied, also on a table that turned them on
after its DataFrame was made.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from sparkonce.checkpoint.tables import read_recorded_tables
from sparkonce.delta.read.native import NATIVE_READS_CONF, is_native
from tests.delta_helpers import comparable
from tests.integration.test_delta_deletion_vectors import golden_rows

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parents[1] / "fixtures" / "delta-tables"
FIXTURE_TABLES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and (p / "_delta_log").is_dir())
LOG_ONLY = frozenset({"checkpoint", "corrupted-last-checkpoint"})
"""Fixtures with a Delta log and no data files (Delta's golden log tests)."""

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("payload", pa.string())])


def _append(table: Path, ids: range, *, part: str = "a") -> None:
    rows = {"id": list(ids), "part": [part] * len(ids), "payload": [f"p{i}" for i in ids]}
    write_deltalake(str(table), pa.table(rows, schema=SCHEMA), mode="append")


def _drain(frame: DataFrame, checkpoint: Path, name: str) -> list[dict[str, Any]]:
    """Run ``frame`` into a memory table with availableNow; its progress (batches with rows)."""
    query = (
        frame.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def _drain_to(frame: DataFrame, checkpoint: Path, out: Path) -> list[int]:
    """Run ``frame`` into the Delta table ``out`` with availableNow (a sink that recovers from its checkpoint,
    unlike the memory sink); the rows of each batch that had some."""
    query = frame.writeStream.format("delta").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    started = query.start(str(out))
    started.awaitTermination(300)
    if started.exception() is not None:
        raise started.exception()  # type: ignore[misc]
    return [p["numInputRows"] for p in started.recentProgress if p["numInputRows"] > 0]


def _table_ids(out: Path) -> list[int]:
    return sorted(DeltaTable(str(out)).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _rows(spark: SparkSession, name: str) -> list[str]:
    rows = spark.sql(f"SELECT * FROM {name}").toArrow().to_pylist()
    return sorted(repr(tuple((k, comparable(v)) for k, v in r.items())) for r in rows)


def _ids(spark: SparkSession, name: str) -> list[int]:
    return sorted(r.id for r in spark.sql(f"SELECT id FROM {name}").collect())


def _python_path(spark: SparkSession, on: bool) -> None:
    if on:
        spark.conf.set(NATIVE_READS_CONF, "false")
    else:
        spark.conf.unset(NATIVE_READS_CONF)


@pytest.mark.parametrize("name", FIXTURE_TABLES)
def test_every_fixture_streams_the_same_rows_natively_and_through_the_python_source(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    """Each fixture is streamed twice per path: its initial snapshot, and every commit from table version 0 with
    change commits skipped. The two paths give the same rows, or refuse alike. A copy is streamed: a stream
    registers itself in its source table's log (the retention guard), and the fixture stays as it is."""
    path = str(tmp_path / name)
    shutil.copytree(FIXTURES / name, path)
    for mode, options in (("snapshot", {}), ("changes", {"startingVersion": "0", "skipChangeCommits": "true"})):
        answers: list[Any] = []
        for python in (False, True):
            _python_path(spark, python)
            table = f"fx_{mode}_{'py' if python else 'native'}_{abs(hash(name))}"
            try:
                frame = spark.readStream.format("delta").options(**options).load(path)
                assert is_native(frame) is (not python), name
                _drain(frame, tmp_path / f"ck-{table}", table)
                answers.append(_rows(spark, table))
            except Exception as err:  # compared below: both paths must refuse alike
                answers.append(_refusal(err))
            finally:
                _python_path(spark, False)
        native, python_answer = answers
        if name in LOG_ONLY:  # the log names data files that were never copied: both paths fail
            assert isinstance(native, tuple) and isinstance(python_answer, tuple), (name, mode)
            continue
        # rows alike, or the same sparkonce error with the same message (a table whose history cannot be streamed)
        assert native == python_answer, (name, mode)
        assert isinstance(native, list) or native[0] in ("SourceOffsetError", "a data file is missing"), (name, native)


def _refusal(err: Exception) -> tuple[str, str]:
    """(sparkonce error class, its message) of a failed stream, from the Python traceback in Spark's error; else
    the exception's own class."""
    text = str(err)
    if "FILE_NOT_EXIST" in text or "sparkonce.errors.DataFileMissingError" in text:
        return ("a data file is missing", "")  # Spark's reader and sparkonce's say it in their own words
    found = re.search(r"sparkonce\.errors\.(\w+): ([^\n]*)", text)
    return (found.group(1), found.group(2)) if found else (type(err).__name__, "")


def test_a_stream_reads_only_the_columns_its_query_uses(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "wide"
    _append(table, range(0, 50))
    frame = spark.readStream.format("delta").load(str(table)).select("id")
    query = (
        frame.writeStream.format("memory")
        .queryName("pruned")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()  # type: ignore[attr-defined]
    assert "FileScan parquet" in plan and "ReadSchema: struct<id:bigint>" in plan
    assert _ids(spark, "pruned") == list(range(50))
    [progress] = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert progress["numInputRows"] == 50
    assert progress["sources"][0]["description"] == f"DeltaSource[{table}]"


def test_a_checkpoint_moves_between_the_native_and_the_python_source(spark: SparkSession, tmp_path: Path) -> None:
    """Both paths write the same offsets: a query stopped on one resumes on the other, each row read once."""
    table, checkpoint, out = tmp_path / "moves", tmp_path / "ck", tmp_path / "out"
    _append(table, range(0, 10))
    for round_, python in enumerate((False, True, False, True)):
        _python_path(spark, python)
        try:
            frame = spark.readStream.format("delta").option("maxFilesPerTrigger", "1").load(str(table))
            assert is_native(frame) is not python
            batches = _drain_to(frame, checkpoint, out)
        finally:
            _python_path(spark, False)
        assert batches == ([10] if round_ == 0 else [5, 5])
        assert _table_ids(out) == list(range(0, 10 * (round_ + 1)))
        _append(table, range(10 + 10 * round_, 15 + 10 * round_))
        _append(table, range(15 + 10 * round_, 20 + 10 * round_))
    offsets = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert offsets == list(range(7))
    last = (checkpoint / "offsets" / "6").read_text(encoding="utf-8").splitlines()[-1]
    assert json.loads(last)["reservoirVersion"] == 7 and json.loads(last)["index"] == -1


def test_two_queries_over_one_dataframe_keep_their_own_positions(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "shared"
    _append(table, range(0, 10))
    frame = spark.readStream.format("delta").option("maxFilesPerTrigger", "1").load(str(table))
    queries = [
        frame.writeStream.format("memory")
        .queryName(f"shared_{i}")
        .option("checkpointLocation", str(tmp_path / f"ck{i}"))
        .start()
        for i in range(2)
    ]
    try:
        for i in range(1, 4):
            _append(table, range(10 * i, 10 * i + 10))
        for query in queries:
            query.processAllAvailable()
        assert _ids(spark, "shared_0") == _ids(spark, "shared_1") == list(range(40))
    finally:
        for query in queries:
            query.stop()
    # the same DataFrame runs again, one query after the other: each run plans afresh from its checkpoint
    out = tmp_path / "out"
    assert _drain_to(frame, tmp_path / "ck-again", out) == [10, 10, 10, 10]
    _append(table, range(40, 45))
    assert _drain_to(frame, tmp_path / "ck-again", out) == [5]
    assert _table_ids(out) == list(range(45))


def test_the_checkpoint_records_the_native_source(spark: SparkSession, tmp_path: Path) -> None:
    table, checkpoint = tmp_path / "recorded", tmp_path / "ck"
    _append(table, range(0, 3))
    frame = spark.readStream.format("delta").option("startingVersion", "0").load(str(table))
    _drain(frame, checkpoint, "recorded")
    recorded, problems = read_recorded_tables(str(checkpoint))
    assert problems == []
    [source] = [t for t in recorded if t.role == "source"]
    assert (source.format, source.options) == ("delta", {"startingVersion": "0"})
    assert source.location.rstrip("/").endswith(str(table))


def test_deletion_vectors_are_applied_natively_also_when_turned_on_after_the_dataframe_was_made(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A DataFrame made while the table had no deletion vectors is native; by the time its query starts the table
    has them (Delta's DV fixture, its history cut after version 0 with deletion vectors off, then given back with
    the feature turned on at version 1). The first batch (the snapshot of version 15) reads files with one, and
    drops the rows they delete, as the Python source does."""
    table, held, checkpoint = tmp_path / "dv", tmp_path / "held", tmp_path / "ck"
    shutil.copytree(FIXTURES / "dv-partitioned-with-checkpoint", table)
    log, held_log = table / "_delta_log", held / "_delta_log"
    held_log.mkdir(parents=True)
    for entry in log.iterdir():
        if entry.name != f"{0:020d}.json":
            shutil.move(entry, held_log / entry.name)
    first = log / f"{0:020d}.json"
    actions = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    [with_dv] = [json.dumps(a) for a in actions if "protocol" in a]
    for action in actions:
        if "protocol" in action:
            action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 2}
        if "metaData" in action:
            action["metaData"]["configuration"] = {}
    first.write_text("".join(json.dumps(a) + "\n" for a in actions), encoding="utf-8")
    frame = spark.readStream.format("delta").load(str(table))
    assert is_native(frame)
    for entry in held_log.iterdir():
        shutil.move(entry, log / entry.name)
    second = log / f"{1:020d}.json"
    second.write_text(with_dv + "\n" + second.read_text(encoding="utf-8"), encoding="utf-8")

    out = tmp_path / "out"
    # one batch; its numInputRows counts what Spark's scan read (deleted rows included, 39), before the anti-join
    assert len(_drain_to(frame, checkpoint, out)) == 1
    rows = DeltaTable(str(out)).to_pyarrow_table().to_pylist()
    assert sorted((r["part"], r["col1"], r["col2"]) for r in rows) == golden_rows(15)
