"""The driver-side Delta commit without Spark: txn skipping, races between writers, files of skipped attempts.

Concurrency runs in real processes against a real table on disk; delta-rs's put-if-absent on the log decides.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import SchemaMismatchError
from sparkonce.retries import count_retries
from sparkonce.storage import table_location
from tests.delta_helpers import delta_txns

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


def _write(table: str, ids: list[int], writer: str) -> list:
    files = TableFileWriter(FileWriterOptions(location=table_location(table)))
    files.write(pa.table({"id": ids, "writer": [writer] * len(ids)}, schema=SCHEMA))
    return files.close()


def _commit_one(args: tuple[str, str, int, str, mp.synchronize.Barrier]) -> tuple[bool, int | None]:
    table, app_id, batch_id, writer, barrier = args
    written = _write(table, [batch_id * 100 + i for i in range(3)], writer)
    barrier.wait()
    result = commit_files(table, written, data_schema=SCHEMA, txn=BatchTxn(app_id, batch_id))
    return result.skipped, result.table_version


def _racer(table: str, app_id: str, batches: int, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:
    barrier.wait()
    for batch_id in range(batches):
        written = _write(table, [batch_id], app_id)
        result = commit_files(table, written, data_schema=SCHEMA, txn=BatchTxn(app_id, batch_id))
        out.put((app_id, batch_id, result.skipped, result.table_version))


def test_replayed_batch_is_skipped_and_its_files_removed(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    first = commit_files(table, _write(table, [1, 2], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 0))
    assert not first.skipped and first.table_version == 0  # the first write is table version 0
    replay_files = _write(table, [1, 2], "a")
    replay = commit_files(table, replay_files, data_schema=SCHEMA, txn=BatchTxn("q", 0))
    assert replay.skipped and replay.table_version is None
    assert not (tmp_path / "t" / replay_files[0].path).exists()
    older = commit_files(table, _write(table, [9], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 0))
    assert older.skipped
    assert sorted(pa.table(DeltaTable(table).to_pyarrow_table()).column("id").to_pylist()) == [1, 2]


def test_a_stale_snapshot_costs_a_retry_never_a_second_commit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The streaming sink hands ``commit_files`` the table its writer loaded (``snapshot=``). When another writer
    committed the same txn after that load, the commit of the stale snapshot's next table version fails, the retry
    loads the table afresh and skips the batch; a stale snapshot without such a race commits on top."""
    from sparkonce.delta.txn.commit import load_table

    caplog.set_level(logging.WARNING, logger="sparkonce.delta.txn.commit")
    table = str(tmp_path / "t")
    commit_files(table, _write(table, [0], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 0))
    stale = load_table(table)
    commit_files(table, _write(table, [1], "zombie"), data_schema=SCHEMA, txn=BatchTxn("q", 1))
    replay = commit_files(table, _write(table, [1], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 1), snapshot=stale)
    assert replay.skipped and replay.attempts == 2
    stale = load_table(table)
    commit_files(table, _write(table, [2], "other"), data_schema=SCHEMA, txn=BatchTxn("other", 0))
    onto = commit_files(table, _write(table, [3], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 2), snapshot=stale)
    assert not onto.skipped and onto.attempts == 2 and onto.table_version == 3
    fresh = load_table(table)
    again = commit_files(table, _write(table, [4], "a"), data_schema=SCHEMA, txn=BatchTxn("q", 3), snapshot=fresh)
    assert again.attempts == 1 and again.table_version == 4
    assert count_retries(caplog.messages) == {"delta_commit": 2}  # each retry logged once, at WARNING
    assert sorted(pa.table(DeltaTable(table).to_pyarrow_table()).column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert delta_txns(tmp_path / "t") == [
        ("q", 0),
        ("q", 1),
        ("other", 0),
        ("q", 2),
        ("q", 3),
    ]


def test_same_batch_racing_from_four_processes_commits_once(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    commit_files(table, [], data_schema=SCHEMA)  # create the table first so the race is on the batch commit
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            results = pool.map(_commit_one, [(table, "query-1", 5, f"w{i}", barrier) for i in range(4)])
    assert sorted(skipped for skipped, _ in results) == [False, True, True, True]
    assert delta_txns(tmp_path / "t") == [("query-1", 5)]
    data = pa.table(DeltaTable(table).to_pyarrow_table())
    assert data.num_rows == 3 and len(set(data.column("writer").to_pylist())) == 1
    assert len(list((tmp_path / "t").glob("*.parquet"))) == 1  # losers deleted their files


def test_two_queries_appending_concurrently_lose_no_commit(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    commit_files(table, [], data_schema=SCHEMA)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(table, app, 8, barrier, out)) for app in ("a", "b")]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in range(16)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(not skipped for _, _, skipped, _ in results)
    versions = sorted(v for _, _, _, v in results)
    assert versions == list(range(1, 17))  # contiguous: every commit landed on its own table version
    assert sorted(delta_txns(tmp_path / "t")) == sorted((app, b) for app in ("a", "b") for b in range(8))
    data = pa.table(DeltaTable(table).to_pyarrow_table())
    assert data.num_rows == 16


def test_partition_mismatch_and_type_conflict_are_refused(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    commit_files(table, _write(table, [1], "a"), data_schema=SCHEMA)
    with pytest.raises(SchemaMismatchError, match="partition columns"):
        commit_files(table, [], data_schema=SCHEMA, partition_by=("writer",))
    other = pa.schema([("id", pa.string())])
    with pytest.raises(
        SchemaMismatchError, match=r"\[DELTA_FAILED_TO_MERGE_FIELDS\] Failed to merge fields 'id' and 'id'"
    ):
        commit_files(table, [], data_schema=other)
    assert DeltaTable(table).version() == 0


def _dv_table(fixtures_dir: Path, tmp_path: Path) -> tuple[str, dict]:
    import shutil

    from sparkonce.delta.log.delta_log import DeltaLog

    table = tmp_path / "dv"
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", table)
    files = DeltaLog(table_location(str(table))).snapshot(None).files
    path, add = next((p, a) for p, a in sorted(files.items()) if a.get("deletionVector"))
    return str(table), {"path": path, **add}


def _rs_count(table: str) -> int:
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", DeltaTable(table)).execute("select count(*) as n from t").read_all()
    return int(pa.table(result).column("n")[0].as_py())


def test_a_removed_file_with_a_deletion_vector_is_removed_with_it(fixtures_dir: Path, tmp_path: Path) -> None:
    """The remove carries the add's deletion vector (delta-rs matches them on path and DV), and a file whose DV is
    not the one the rewrite read is a conflict: nothing is committed."""
    from sparkonce.delta.table.schema import table_arrow_schema
    from sparkonce.delta.txn.commit import RemovedFile
    from sparkonce.errors import CommitConflictError

    table, add = _dv_table(fixtures_dir, tmp_path)
    schema = table_arrow_schema(DeltaTable(table))
    before, rows_before = DeltaTable(table).version(), _rs_count(table)
    stale = {**add["deletionVector"], "cardinality": 0, "offset": 99}
    remove = RemovedFile(add["path"], add["size"], add["partitionValues"], deletion_vector=stale)
    with pytest.raises(CommitConflictError, match="deleted rows of them"):
        commit_files(table, [], data_schema=schema, removes=[remove])
    assert DeltaTable(table).version() == before

    remove = RemovedFile(add["path"], add["size"], add["partitionValues"], deletion_vector=add["deletionVector"])
    result = commit_files(table, [], data_schema=schema, removes=[remove], txn=BatchTxn("app", 3))
    assert result.table_version == before + 1
    live = json.loads(add["stats"])["numRecords"] - add["deletionVector"]["cardinality"]
    assert _rs_count(table) == rows_before - live
    assert DeltaTable(table).transaction_version("app") == 3
    paths = DeltaTable(table).get_add_actions(flatten=True).column("path").to_pylist()
    assert add["path"] not in paths


def _race_before_the_commit(monkeypatch: pytest.MonkeyPatch, concurrent: Callable[[], object]) -> list[int]:
    """Make the first attempt of the next ALTER lose its race: right after the attempt reads the table, another
    writer commits (``concurrent()``, a real commit), so the table version the attempt commits is taken. Returns
    the list of attempts seen (one table read per attempt)."""
    import sparkonce.delta.ops.alter as alter

    read = alter.existing_table
    attempts: list[int] = []

    def reading_then_racing(location: Any) -> Any:
        snapshot = read(location)
        attempts.append(int(snapshot.version()))
        if len(attempts) == 1:
            concurrent()
        return snapshot

    monkeypatch.setattr(alter, "existing_table", reading_then_racing)
    return attempts


def test_an_alter_racing_an_append_retries_through_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ALTER TABLE SET TBLPROPERTIES whose commit loses the race to a concurrent append (a second writer) goes
    through the one commit engine: the lost race is a ``delta_commit`` retry (WARNING), the append is no conflict
    (the ALTER reads no data), and the retry commits on top of it; both commits are in the table."""
    from sparkonce.delta.ops.alter import alter_properties

    table = str(tmp_path / "t")
    commit_files(table, _write(table, [1], "first"), data_schema=SCHEMA)
    appended: list[int | None] = []
    attempts = _race_before_the_commit(
        monkeypatch,
        lambda: appended.append(commit_files(table, _write(table, [2], "other"), data_schema=SCHEMA).table_version),
    )
    caplog.set_level(logging.WARNING, logger="sparkonce.delta.txn.commit")

    assert alter_properties(table, set={"owner": "team-a"}) == 2
    assert appended == [1] and attempts == [0, 1]  # attempt 1 read table version 0, attempt 2 the append's
    retries = [r.getMessage() for r in caplog.records if "sparkonce retry" in r.getMessage()]
    assert count_retries(retries) == {"delta_commit": 1}
    assert "attempt 1 of 100 to commit table_version 1" in retries[0] and "(SET TBLPROPERTIES)" in retries[0]
    history = {h["version"]: h["operation"] for h in DeltaTable(table).history()}
    assert history == {0: "WRITE", 1: "WRITE", 2: "SET TBLPROPERTIES"}
    assert DeltaTable(table).metadata().configuration == {"owner": "team-a"}
    assert sorted(pa.table(DeltaTable(table).to_pyarrow_table()).column("writer").to_pylist()) == ["first", "other"]


def test_an_alter_racing_another_alter_is_delta_sparks_metadata_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ALTER that loses its race to another metadata change fails with Delta's ``MetadataChangedException``
    (the engine's conflict rules, as Delta's ``ConflictChecker``), committing nothing of its own."""
    from sparkonce.delta.ops.alter import alter_properties
    from sparkonce.errors import MetadataChangedError

    table = str(tmp_path / "t")
    commit_files(table, _write(table, [1], "first"), data_schema=SCHEMA)
    _race_before_the_commit(monkeypatch, lambda: alter_properties(table, set={"owner": "team-b"}))

    with pytest.raises(MetadataChangedError, match=r"^\[DELTA_METADATA_CHANGED\] .*table_version 1 \(SET TBLPROP"):
        alter_properties(table, set={"owner": "team-a", "tier": "gold"})
    assert DeltaTable(table).version() == 1
    assert DeltaTable(table).metadata().configuration == {"owner": "team-b"}


def test_an_alter_whose_commit_landed_despite_a_store_error_is_done_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store writes the ALTER's commit file and then fails the request (a lost answer): the engine finds the
    commit by its ``txnId`` and returns its table version, with no second commit."""
    from sparkonce.delta.ops.alter import alter_properties
    from sparkonce.errors import StorageError
    from sparkonce.storage import TableLocation

    table = str(tmp_path / "t")
    commit_files(table, _write(table, [1], "first"), data_schema=SCHEMA)
    put = TableLocation.put_if_absent

    def put_then_fail(self: TableLocation, relative: str, data: bytes) -> bool:
        put(self, relative, data)
        raise StorageError(f"{self}: the answer to PUT {relative} was lost")

    monkeypatch.setattr(TableLocation, "put_if_absent", put_then_fail)
    caplog.set_level(logging.WARNING, logger="sparkonce.delta.txn.commit")
    assert alter_properties(table, set={"owner": "team-a"}) == 1
    monkeypatch.undo()
    assert DeltaTable(table).version() == 1
    assert DeltaTable(table).metadata().configuration == {"owner": "team-a"}
    assert any("landed although attempt 1 reported a failure" in r.getMessage() for r in caplog.records)


def test_a_create_only_commit_leaves_a_table_it_finds_as_it_is(tmp_path: Path) -> None:
    """The pipeline's empty tables (``ensure_table``) are created through the engine with ``create_only``: the first
    creator makes table version 0; one that finds the table (it lost the race, or came later) commits nothing."""
    table = str(tmp_path / "t")
    first = commit_files(table, [], data_schema=SCHEMA, create_only=True)
    assert (first.table_version, first.skipped) == (0, False)
    again = commit_files(table, [], data_schema=SCHEMA, create_only=True)
    assert (again.table_version, again.skipped) == (None, True)
    assert DeltaTable(table).version() == 0
