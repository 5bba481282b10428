"""Rewrites (DELETE, UPDATE, MERGE, OPTIMIZE) of tables whose files carry deletion vectors written by Delta's JVM
connector (issue 12): a rewritten file is read with its deletion vector applied (no deleted row comes back), and
its ``remove`` carries that deletion vector, since Delta readers match an ``add`` and its ``remove`` on (path,
deletion vector); untouched files keep theirs. Each result is checked against delta-rs's own reading of the table
(its DataFusion scan applies deletion vectors) and against the rows the golden generator implies.

Every rewrite runs on a local copy of the table and on a copy in the embedded S3 store (SeaweedFS), where
sparkonce's own log entry is created with a conditional PUT (``If-None-Match: *``), and a lost race for the log
file (another writer's commit lands between the snapshot and the put) ends in a retry on top of it or a clear
conflict, never an overwrite.

The fixture (delta-io/delta ``GoldenTables.scala``, "dv-partitioned-with-checkpoint"): rows
``(x % 10, x, "foo" + x % 5)`` for x in 0..49, partitioned by ``part``, then 15 DELETEs ``col1 = 2n`` (n = 0..14)
stored as deletion vectors: 35 rows, x not an even number below 30.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import ConcurrentDeleteReadError, StorageError
from sparkonce.storage import SESSION_CONF_PREFIX, TableLocation, table_location
from tests.fixtures_storage import copy_table_to_store
from tests.integration.conftest import operation_metrics

pytestmark = pytest.mark.spark

Row = tuple[int, int, str]
FIXTURE = "dv-partitioned-with-checkpoint"


def golden() -> list[Row]:
    return sorted((x % 10, x, f"foo{x % 5}") for x in range(50) if not (x % 2 == 0 and x < 30))


def copy_fixture(fixtures_dir: Path, tmp_path: Path, name: str = FIXTURE) -> Path:
    table = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-tables" / name, table)
    return table


def copy_fixture_to_store(fixtures_dir: Path, location: TableLocation, name: str = FIXTURE) -> None:
    copy_table_to_store(fixtures_dir / "delta-tables" / name, location)


@contextlib.contextmanager
def session_storage(spark: SparkSession, options: dict[str, str]) -> Iterator[None]:
    """Make ``options`` the session's storage options (``spark.sparkonce.storage.*``), unset them afterwards."""
    import sparkonce

    for name, value in options.items():
        spark.conf.set(f"{SESSION_CONF_PREFIX}{name}", value)
    sparkonce.register(spark)
    try:
        yield
    finally:
        for name in options:
            spark.conf.unset(f"{SESSION_CONF_PREFIX}{name}")
        sparkonce.register(spark)


@pytest.fixture(params=["local", "local-column-mapped", pytest.param("s3", marks=pytest.mark.s3)])
def dv_table(request: pytest.FixtureRequest, spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> Iterator[str]:
    """The golden DV table, copied to a local directory or to a fresh prefix of the embedded S3 store (whose
    storage options, ``conditional_put=etag`` among them, reach sparkonce as session conf); or its twin with
    column mapping ``name`` (same rows, same deletion vectors), after which every file the test's rewrites added
    is checked to be laid out as Delta lays out a column-mapped table's files."""
    if request.param == "local":
        yield str(copy_fixture(fixtures_dir, tmp_path))
        return
    if request.param == "local-column-mapped":
        table = copy_fixture(fixtures_dir, tmp_path, "dv-with-columnmapping")
        before = set(active_dvs(table))
        yield str(table)
        check_column_mapped_layout(table, set(active_dvs(table)) - before)
        return
    store = request.getfixturevalue("object_store")
    with session_storage(spark, store.storage_options):
        uri = store.unique_uri(request.node.name)
        copy_fixture_to_store(fixtures_dir, table_location(uri))
        yield uri


def rs_rows(table: str | Path) -> list[Row]:
    """The table's rows as delta-rs reads them (deletion vectors applied by its DataFusion scan)."""
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    location = table_location(str(table))
    rs_table = RsTable(location.uri, storage_options=location.options() or None)
    result = QueryBuilder().register("t", rs_table).execute("select part, col1, col2 from t").read_all()
    data = result.to_pylist() if hasattr(result, "to_pylist") else _arro3_rows(result)
    return sorted((int(r["part"]), int(r["col1"]), str(r["col2"])) for r in data)


def _arro3_rows(result: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    rows: list[dict[str, Any]] = pa.table(result).to_pylist()
    return rows


def check_column_mapped_layout(table: Path, added: set[str]) -> None:
    """Files written into the column-mapped twin name their columns by physical name with the field ids, and
    their ``add`` actions key partition values and stats by physical name (else Delta readers see nulls)."""
    import pyarrow.parquet as pq

    metadata = DeltaLog(table_location(str(table))).snapshot(None).metadata
    fields = {f["name"]: f["metadata"] for f in json.loads(metadata["schemaString"])["fields"]}
    physical = {name: m["delta.columnMapping.physicalName"] for name, m in fields.items()}
    adds = DeltaLog(table_location(str(table))).snapshot(None).files
    for path in added:
        schema = pq.read_schema(table / path)
        assert schema.names == [physical["col1"], physical["col2"]], path
        assert [f.metadata[b"PARQUET:field_id"] for f in schema] == [
            str(fields[c]["delta.columnMapping.id"]).encode() for c in ("col1", "col2")
        ]
        assert list(adds[path]["partitionValues"]) == [physical["part"]]
        stats = json.loads(adds[path]["stats"])
        assert set(stats["minValues"]) <= {physical["col1"], physical["col2"]}, stats
        assert stats["minValues"], stats


def spark_rows(spark: SparkSession, table: str | Path) -> list[Row]:
    frame = spark.read.format("delta").load(str(table))
    return sorted((r["part"], r["col1"], r["col2"]) for r in frame.collect())


def active_dvs(table: str | Path) -> dict[str, Any]:
    """Active file path -> its deletion vector descriptor (None without one), from the log."""
    snapshot = DeltaLog(table_location(str(table))).snapshot(None)
    return {path: add.get("deletionVector") for path, add in snapshot.files.items()}


def commit_actions(table: str | Path, table_version: int | None = None) -> list[dict[str, Any]]:
    """The actions of one commit (the newest by default), read from the log."""
    log = DeltaLog(table_location(str(table)))
    return log.read_actions(log.latest_version() if table_version is None else table_version)


def last_commit(table: str | Path) -> list[dict[str, Any]]:
    return commit_actions(table)


def latest_version(table: str | Path) -> int:
    return DeltaLog(table_location(str(table))).latest_version()


def check_removes_carry_their_dvs(before: dict[str, Any], table: str | Path) -> set[str]:
    """Every ``remove`` of the newest commit names the deletion vector its file had; untouched files keep theirs; a
    removed file still in the table (the fixture enables deletion vectors: DML marks rows deleted) has a new
    deletion vector deleting more rows. Returns the removed paths."""
    removes = [a["remove"] for a in last_commit(table) if "remove" in a]
    assert removes
    for remove in removes:
        assert remove.get("deletionVector") == before[remove["path"]], remove["path"]
    removed = {r["path"] for r in removes}
    after = active_dvs(table)
    for path, dv in before.items():
        if path not in removed:
            assert after[path] == dv, path
    for path in removed & set(after):
        assert after[path] is not None and after[path]["cardinality"] > (before[path] or {}).get("cardinality", 0)
    return removed


def test_delete_on_a_deletion_vector_table(spark: SparkSession, dv_table: str) -> None:
    """The table has ``delta.enableDeletionVectors``: the DELETE marks the rows deleted (test_delta_dv_writes.py),
    each touched file removed with the deletion vector it had and added again with one holding the old and the new
    deletes; no data file is written."""
    table = dv_table
    before = active_dvs(table)
    DeltaTable.forPath(spark, table).delete("col1 % 3 = 0")
    expected = [r for r in golden() if r[1] % 3]
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    actions = last_commit(table)
    removes = {a["remove"]["path"]: a["remove"] for a in actions if "remove" in a}
    adds = {a["add"]["path"]: a["add"] for a in actions if "add" in a}
    assert any(before[p] is not None for p in removes)
    assert set(adds) <= set(removes) and adds
    after = active_dvs(table)
    for path, remove in removes.items():
        assert remove.get("deletionVector") == before[path], path
        if path in adds:
            old = (before[path] or {}).get("cardinality", 0)
            assert after[path] == adds[path]["deletionVector"] and after[path]["cardinality"] > old, path
    assert all(after[p] == dv for p, dv in before.items() if p not in removes)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    metrics = operation_metrics(info)
    assert metrics["numDeletedRows"] == len(golden()) - len(expected)
    assert (metrics["numAddedFiles"], metrics["numCopiedRows"]) == (0, 0)
    assert info["operation"] == "DELETE"


def test_update_on_a_deletion_vector_table(spark: SparkSession, dv_table: str) -> None:
    table = dv_table
    before = active_dvs(table)
    DeltaTable.forPath(spark, table).update("part in (2, 4)", {"col2": "'bar'"})
    expected = sorted((p, x, "bar" if p in (2, 4) else s) for p, x, s in golden())
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    check_removes_carry_their_dvs(before, table)


def test_merge_on_a_deletion_vector_table_never_matches_deleted_rows(spark: SparkSession, dv_table: str) -> None:
    table = dv_table
    before = active_dvs(table)
    # 0 and 2 are deleted (they must be inserted, not updated), 1 and 3 are live, 100 is new
    source = spark.createDataFrame(
        [(0, 0, "new0"), (2, 2, "new2"), (1, 1, "new1"), (3, 3, "new3"), (0, 100, "new100")],
        "part int, col1 int, col2 string",
    )
    (
        DeltaTable.forPath(spark, table)
        .alias("t")
        .merge(source.alias("s"), "t.col1 = s.col1")
        .whenMatchedUpdate(set={"col2": "s.col2"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected = sorted(
        [(p, x, f"new{x}" if x in (1, 3) else s) for p, x, s in golden()]
        + [(0, 0, "new0"), (2, 2, "new2"), (0, 100, "new100")]
    )
    assert rs_rows(table) == expected
    assert spark_rows(spark, table) == expected
    metrics = operation_metrics(next(a["commitInfo"] for a in last_commit(table) if "commitInfo" in a))
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (2, 3)
    check_removes_carry_their_dvs(before, table)


def test_optimize_purges_deleted_rows(spark: SparkSession, dv_table: str) -> None:
    table = dv_table
    before = active_dvs(table)
    with_dvs = {p for p, dv in before.items() if dv is not None}
    assert len(with_dvs) == 2  # part=6 and part=8: one file each, 1 of its 3 rows deleted
    DeltaTable.forPath(spark, table).optimize().executeCompaction()
    assert rs_rows(table) == golden()
    assert spark_rows(spark, table) == golden()
    removed = check_removes_carry_their_dvs(before, table)
    # odd partitions: two small files packed into one; part=6 and part=8: alone, rewritten for their 33% deleted
    # rows; parts 0, 2, 4: one file without a deletion vector, left alone
    odd = {p for p in before if int(p.split("/")[0].split("=")[1]) % 2}
    assert removed == odd | with_dvs
    assert all(dv is None for dv in active_dvs(table).values())
    info = next(a["commitInfo"] for a in last_commit(table) if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE"
    assert operation_metrics(info)["numDeletionVectorsRemoved"] == 2
    changes = [a.get("add", a.get("remove"))["dataChange"] for a in last_commit(table) if "add" in a or "remove" in a]
    assert changes and not any(changes)


def _race_for_the_next_log_file(
    monkeypatch: pytest.MonkeyPatch, competitor: Callable[[str, int], list[dict[str, Any]]]
) -> list[int]:
    """Make sparkonce's next put-if-absent of a log file lose a race for real: just before it, another writer
    creates that same table version in the same store (put-if-absent too) with ``competitor(uri, table_version)``'s
    actions. Returns the table versions raced (filled when it happened)."""
    raced: list[int] = []
    original = TableLocation.put_if_absent

    def racing(self: TableLocation, relative: str, data: bytes) -> bool:
        if not raced and relative.startswith("_delta_log/"):
            table_version = int(relative.removeprefix("_delta_log/").removesuffix(".json"))
            actions = competitor(self.uri, table_version)
            assert original(self, relative, "".join(json.dumps(a) + "\n" for a in actions).encode())
            raced.append(table_version)
        return original(self, relative, data)

    monkeypatch.setattr(TableLocation, "put_if_absent", racing)
    return raced


def _competitor_info() -> dict[str, Any]:
    return {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE", "engineInfo": "competitor"}}


def test_a_lost_race_for_the_log_file_is_retried_on_top_of_the_winner(
    spark: SparkSession, dv_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's commit (an unrelated txn) takes the table version first: the DELETE reloads, finds its
    files unchanged, and commits at the next table version; the winner's log file is left byte for byte."""
    read_version = latest_version(dv_table)
    winner = [_competitor_info(), {"txn": {"appId": "competitor", "version": 7, "lastUpdated": 1}}]
    raced = _race_for_the_next_log_file(monkeypatch, lambda uri, table_version: winner)
    DeltaTable.forPath(spark, dv_table).delete("col1 % 3 = 0")
    assert raced == [read_version + 1]
    assert commit_actions(dv_table, read_version + 1) == winner
    assert latest_version(dv_table) == read_version + 2
    assert next(a["commitInfo"] for a in last_commit(dv_table) if "commitInfo" in a)["operation"] == "DELETE"
    expected = [r for r in golden() if r[1] % 3]
    assert rs_rows(dv_table) == expected
    assert spark_rows(spark, dv_table) == expected
    assert DeltaLog(table_location(dv_table)).snapshot(None).txn_version("competitor") == 7


def test_a_lost_race_against_a_rewrite_of_the_same_files_is_a_clear_conflict(
    spark: SparkSession, dv_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The winner removed a file the DELETE rewrites (with its deletion vector): the DELETE stops with a
    Delta's DELTA_CONCURRENT_DELETE_READ naming the file, the winner's commit stays the newest, nothing is
    overwritten."""
    read_version = latest_version(dv_table)
    before = active_dvs(dv_table)
    in_part_6 = next(path for path, dv in before.items() if path.split("/")[0].endswith("=6") and dv is not None)
    winner = [
        _competitor_info(),
        {
            "remove": {
                "path": in_part_6,
                "deletionTimestamp": 1,
                "dataChange": True,
                "deletionVector": before[in_part_6],
            }
        },
    ]
    raced = _race_for_the_next_log_file(monkeypatch, lambda uri, table_version: winner)
    conflict = rf"^\[DELTA_CONCURRENT_DELETE_READ\].*table_version {read_version + 1} .*=6/"
    with pytest.raises(ConcurrentDeleteReadError, match=conflict):
        DeltaTable.forPath(spark, dv_table).delete("part in (6, 8)")
    assert raced == [read_version + 1]
    assert latest_version(dv_table) == read_version + 1
    assert commit_actions(dv_table, read_version + 1) == winner
    assert rs_rows(dv_table) == [r for r in golden() if r[0] != 6]


@pytest.mark.s3
def test_s3_without_conditional_put_refuses_a_rewrite_unless_the_user_chose_a_single_writer(
    spark: SparkSession, object_store: Any, fixtures_dir: Path
) -> None:
    """Without a conditional put two writers could both create one log file: refused before any data moves, naming
    ``conditional_put=etag``. With ``AWS_S3_ALLOW_UNSAFE_RENAME`` (the user's choice of a single writer) sparkonce
    looks for the log file and then writes it."""
    options = {k: v for k, v in object_store.storage_options.items() if k.lower() != "conditional_put"}
    with session_storage(spark, options):
        uri = object_store.unique_uri("dv-no-conditional-put")
        copy_fixture_to_store(fixtures_dir, table_location(uri))
        read_version = latest_version(uri)
        with pytest.raises(StorageError, match=r"s3://.*conditional_put=etag"):
            DeltaTable.forPath(spark, uri).delete("col1 = 1")
        assert latest_version(uri) == read_version
        assert rs_rows(uri) == golden()
    with session_storage(spark, {**options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}):
        DeltaTable.forPath(spark, uri).delete("col1 = 1")
        assert latest_version(uri) == read_version + 1
        assert rs_rows(uri) == [r for r in golden() if r[1] != 1]
