"""Delta's conflict rules in sparkonce's commit, on real tables without Spark.

Many writers race for real (processes and threads, sparkonce commits and delta-rs appends on one table). The
conflicts are forced deterministically: the "winner" commits between the loser's read (its ``ReadSet``) and its
commit, by calling the commit functions in that order; no sleeps.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.ops.rewrite import commit_rewrite
from sparkonce.delta.txn.commit import BatchTxn, CommitResult, RemovedFile, commit_files
from sparkonce.delta.txn.conflicts import ReadSet
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import (
    CommitConflictError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
)
from sparkonce.storage import table_location
from tests.delta_helpers import delta_rows

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def _write(table: str, ids: list[int], part: str, schema: pa.Schema = SCHEMA) -> list[WrittenFile]:
    files = TableFileWriter(FileWriterOptions(location=table_location(table), partition_by=("part",)))
    columns: dict[str, Any] = {"id": ids, "part": [part] * len(ids)}
    for extra in schema.names[2:]:
        columns[extra] = [None] * len(ids)
    files.write(pa.table(columns, schema=schema))
    return files.close()


def _append(table: str, ids: list[int], part: str, *, txn: BatchTxn | None = None) -> CommitResult:
    """A blind append, as the streaming sink commits a batch."""
    meta = {"operation": "STREAMING UPDATE"} if txn is not None else None
    return commit_files(
        table, _write(table, ids, part), data_schema=SCHEMA, partition_by=("part",), txn=txn, custom_metadata=meta
    )


def _merge(table: str, ids: list[int], part: str) -> CommitResult:
    """A non-blind commit adding rows (a MERGE inserting them): ``isBlindAppend`` false."""
    return commit_rewrite(
        table, _write(table, ids, part), [], data_schema=SCHEMA, operation="MERGE", parameters={}, metrics={}
    )


def _active(table: str) -> dict[str, dict[str, Any]]:
    """The table's active files (path -> add action), read by delta-rs."""
    adds = pa.table(DeltaTable(table).get_add_actions(flatten=False)).to_pylist()
    return {a["path"]: a for a in adds}


def _removed(add: dict[str, Any]) -> RemovedFile:
    return RemovedFile(add["path"], int(add["size_bytes"]), dict(add["partition"] or {}))


def _delete(table: str, read: ReadSet, files: list[RemovedFile]) -> CommitResult:
    """A DELETE of whole files (what a partition-predicate DELETE commits)."""
    return commit_files(
        table,
        [],
        data_schema=SCHEMA,
        removes=files,
        custom_metadata={"operation": "DELETE"},
        read=read,
    )


def _ids(table: str) -> list[int]:
    return sorted(r["id"] for r in delta_rows(table, ["id"]))


def _table_with_two_partitions(tmp_path: Path) -> str:
    table = str(tmp_path / "t")
    _append(table, [1, 2], "a")
    _append(table, [3, 4], "b")
    return table


def _read_of(table: str, part: str | None) -> tuple[ReadSet, list[RemovedFile]]:
    """What a DELETE of partition ``part`` (None: the whole table, by a data predicate) reads and removes."""
    version = DeltaTable(table).version()
    files = [f for f in _active(table).values() if part is None or f["partition"]["part"] == part]
    read = ReadSet.of_files(version, [(f["path"], dict(f["partition"])) for f in files], whole_table=part is None)
    return read, [_removed(f) for f in files]


# -- (a) many blind appenders ---------------------------------------------------------------------------------


def _writer_process(table: str, process: int, threads: int, commits: int, out: Any) -> None:
    """``threads`` writers in this process, half sparkonce streaming batches, half delta-rs appends."""
    results: list[tuple[str, int, int | None, bool, str]] = []
    lock = threading.Lock()

    def sparkonce_writer(app_id: str, base: int) -> None:
        for batch_id in range(commits):
            ids = [base + batch_id * 10 + i for i in range(3)]
            try:
                result = _append(table, ids, f"p{batch_id % 2}", txn=BatchTxn(app_id, batch_id))
                outcome = ("sparkonce", base + batch_id * 10, result.table_version, result.skipped, "")
            except Exception as err:  # recorded: the test asserts there are none
                outcome = ("sparkonce", base + batch_id * 10, None, False, repr(err))
            with lock:
                results.append(outcome)

    def delta_rs_writer(base: int) -> None:
        for n in range(commits):
            ids = [base + n * 10 + i for i in range(3)]
            data = pa.table({"id": ids, "part": [f"p{n % 2}"] * 3}, schema=SCHEMA)
            try:
                write_deltalake(table, data, mode="append", commit_properties=CommitProperties(max_commit_retries=1000))
                outcome = ("delta-rs", base + n * 10, None, False, "")
            except Exception as err:
                outcome = ("delta-rs", base + n * 10, None, False, repr(err))
            with lock:
                results.append(outcome)

    workers = []
    for t in range(threads):
        base = (process * threads + t) * 1000
        if t % 2 == 0:
            workers.append(threading.Thread(target=sparkonce_writer, args=(f"app-{process}-{t}", base)))
        else:
            workers.append(threading.Thread(target=delta_rs_writer, args=(base,)))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(results)


def test_32_blind_appenders_all_commit_exactly_once(tmp_path: Path) -> None:
    """16 sparkonce streaming writers and 16 delta-rs appenders (4 processes x 8 threads) x 3 commits each on one
    partitioned table: none fails, and every commit that reported success is in the table exactly once."""
    table = str(tmp_path / "t")
    _append(table, [-1], "p0")
    processes, threads, commits = 4, 8, 3
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(table, p, threads, commits, out)) for p in range(processes)]
    for p in procs:
        p.start()
    results = [r for _ in procs for r in out.get(timeout=600)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [r for r in results if r[4]] == []  # no writer failed
    assert len(results) == processes * threads * commits
    expected = sorted([-1] + [first + i for _, first, _, _, _ in results for i in range(3)])
    assert _ids(table) == expected  # each committed row once: nothing lost, nothing doubled
    log = tmp_path / "t" / "_delta_log"
    for kind, _first, table_version, skipped, _ in results:
        if kind == "sparkonce":
            assert not skipped and table_version is not None
            actions = [json.loads(line) for line in (log / f"{table_version:020d}.json").read_text().splitlines()]
            txns = [a["txn"] for a in actions if "txn" in a]
            assert len(txns) == 1  # the commit the writer was told about is its own
    assert DeltaTable(table).version() == processes * threads * commits


# -- (b) DELETE vs a concurrent non-blind MERGE ---------------------------------------------------------------


def test_delete_loses_to_a_merge_adding_rows_in_its_partition(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read, files = _read_of(table, "a")
    before = _merge(table, [5], "a").table_version  # the winner commits between the DELETE's read and commit
    with pytest.raises(ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\].*partition \{'part': 'a'\}"):
        _delete(table, read, files)
    assert DeltaTable(table).version() == before  # the loser committed nothing
    assert _ids(table) == [1, 2, 3, 4, 5]


def test_delete_and_a_merge_in_another_partition_both_commit(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read, files = _read_of(table, "a")
    _merge(table, [6], "b")
    result = _delete(table, read, files)
    assert result.table_version == 3 and result.files_removed == 1
    assert _ids(table) == [3, 4, 6]


def test_whole_table_delete_loses_to_a_delta_rs_append_but_not_to_a_blind_append(tmp_path: Path) -> None:
    """delta-rs writes no ``isBlindAppend``: Delta counts its append as not blind, so a DELETE that read the whole
    table conflicts with it; sparkonce's streaming append says ``isBlindAppend: true`` and never conflicts."""
    table = _table_with_two_partitions(tmp_path)
    read, files = _read_of(table, None)
    write_deltalake(table, pa.table({"id": [7], "part": ["b"]}, schema=SCHEMA), mode="append")
    with pytest.raises(
        ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\] .*\(WRITE\) .*partition \{'part': 'b'\}"
    ):
        _delete(table, read, files)
    read, files = _read_of(table, None)
    _append(table, [8], "a", txn=BatchTxn("stream", 0))
    assert _delete(table, read, files).files_removed == 3
    assert _ids(table) == [8]


# -- (c) DELETE vs DELETE of the same file --------------------------------------------------------------------


def test_delete_of_a_file_a_concurrent_delete_removed(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read, files = _read_of(table, "a")
    read_blind = ReadSet(read.read_version)  # removes the file without having read it (e.g. a file-level purge)
    _delete(table, *_read_of(table, "a"))  # the winner
    version = DeltaTable(table).version()
    with pytest.raises(ConcurrentDeleteReadError, match=r"^\[DELTA_CONCURRENT_DELETE_READ\]"):
        _delete(table, read, files)
    with pytest.raises(ConcurrentDeleteDeleteError, match=r"^\[DELTA_CONCURRENT_DELETE_DELETE\]"):
        _delete(table, read_blind, files)
    assert DeltaTable(table).version() == version
    assert _ids(table) == [3, 4]


# -- (d) OPTIMIZE vs appends and deletes ----------------------------------------------------------------------


def _optimize(table: str, read: ReadSet, removes: list[RemovedFile], written: list[WrittenFile]) -> CommitResult:
    """OPTIMIZE's commit: the compacted file replaces ``removes``, ``dataChange`` false."""
    return commit_files(
        table,
        written,
        data_schema=SCHEMA,
        removes=removes,
        data_change=False,
        custom_metadata={"operation": "OPTIMIZE"},
        read=read,
    )


def _optimize_read(table: str, part: str) -> tuple[ReadSet, list[RemovedFile]]:
    version = DeltaTable(table).version()
    files = [f for f in _active(table).values() if f["partition"]["part"] == part]
    read = ReadSet.of_files(
        version,
        [(f["path"], dict(f["partition"])) for f in files],
        whole_table=False,
        isolation="SnapshotIsolation",
    )
    return read, [_removed(f) for f in files]


def test_optimize_and_streaming_appends_both_commit(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    _append(table, [5], "a")
    read, removes = _optimize_read(table, "a")
    assert len(removes) == 2
    for batch_id in range(3):  # appends to the very partition being compacted, and a non-blind one too
        _append(table, [10 + batch_id], "a", txn=BatchTxn("stream", batch_id))
    _merge(table, [20], "a")
    result = _optimize(table, read, removes, _write(table, [1, 2, 5], "a"))
    assert result.table_version == 7 and result.files_removed == 2
    assert _ids(table) == [1, 2, 3, 4, 5, 10, 11, 12, 20]


def test_optimize_loses_to_a_delete_of_a_file_it_compacts(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read, removes = _optimize_read(table, "a")
    _delete(table, *_read_of(table, "a"))
    version = DeltaTable(table).version()
    compacted = _write(table, [1, 2], "a")
    with pytest.raises(
        ConcurrentDeleteReadError, match=r"^\[DELTA_CONCURRENT_DELETE_READ\] .*removed 1 file\(s\) this"
    ):
        _optimize(table, read, removes, compacted)
    assert DeltaTable(table).version() == version and _ids(table) == [3, 4]  # no deleted row came back
    assert not (tmp_path / "t" / compacted[0].path).exists()  # the loser's file is removed with it


# -- (e) metadata changes --------------------------------------------------------------------------------------


def _add_column(table: str) -> None:
    wide = SCHEMA.append(pa.field("note", pa.string()))
    commit_files(table, _write(table, [9], "b", wide), data_schema=wide, merge_schema=True)


def test_a_metadata_change_fails_a_delete_not_a_streaming_append(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read, files = _read_of(table, "a")
    _add_column(table)
    version = DeltaTable(table).version()
    with pytest.raises(MetadataChangedError, match=r"^\[DELTA_METADATA_CHANGED\]"):
        _delete(table, read, files)
    assert DeltaTable(table).version() == version
    from sparkonce.delta.txn.commit import load_table

    stale = load_table(table, table_version=version - 1)
    append = commit_files(  # a blind append that read the table before the change: its files still fit
        table, _write(table, [10], "a"), data_schema=SCHEMA, snapshot=stale, txn=BatchTxn("s", 0)
    )
    assert append.attempts == 2 and append.table_version == version + 1


def test_a_read_app_txn_committed_concurrently_is_a_conflict(tmp_path: Path) -> None:
    table = _table_with_two_partitions(tmp_path)
    read = ReadSet(DeltaTable(table).version(), app_ids=frozenset({"q"}))
    _append(table, [5], "a", txn=BatchTxn("q", 0))
    with pytest.raises(ConcurrentTransactionError, match=r"^\[DELTA_CONCURRENT_TRANSACTION\]"):
        commit_files(table, _write(table, [6], "a"), data_schema=SCHEMA, read=read)


def test_every_conflict_is_a_commit_conflict_error() -> None:
    import sparkonce.delta.exceptions as delta_exceptions
    from sparkonce.errors import DELTA_EXCEPTION_NAMES, ConcurrentWriteError, ProtocolChangedError

    conflicts = (
        ConcurrentWriteError,
        MetadataChangedError,
        ProtocolChangedError,
        ConcurrentAppendError,
        ConcurrentDeleteReadError,
        ConcurrentDeleteDeleteError,
        ConcurrentTransactionError,
    )
    for error in conflicts:
        assert issubclass(error, CommitConflictError)
    assert delta_exceptions.__all__ == list(DELTA_EXCEPTION_NAMES)  # delta-spark's names, in its order
    assert [getattr(delta_exceptions, name) for name in DELTA_EXCEPTION_NAMES] == [CommitConflictError, *conflicts]


# -- (f) delta-spark's names, and giving up ------------------------------------------------------------------


def _conflict_protocol(table: str) -> None:
    """A DELETE of partition a loses to a protocol upgrade committed after its read."""
    from sparkonce.delta.ops.alter import alter_properties

    read, files = _read_of(table, "a")
    alter_properties(table, set={"delta.minWriterVersion": "3"})
    _delete(table, read, files)


def _conflict_metadata(table: str) -> None:
    """A DELETE of partition a loses to a schema change (a column added by an append with mergeSchema)."""
    read, files = _read_of(table, "a")
    _add_column(table)
    _delete(table, read, files)


def _conflict_append(table: str) -> None:
    """A DELETE of partition a loses to a MERGE that inserted rows into partition a."""
    read, files = _read_of(table, "a")
    _merge(table, [5], "a")
    _delete(table, read, files)


def _conflict_delete_read(table: str) -> None:
    """A DELETE of partition a loses to another DELETE of it: a file it read is gone."""
    read, files = _read_of(table, "a")
    _delete(table, *_read_of(table, "a"))
    _delete(table, read, files)


def _conflict_delete_delete(table: str) -> None:
    """A removal of partition a's file that read nothing loses to a DELETE of the same file."""
    read, files = _read_of(table, "a")
    _delete(table, *_read_of(table, "a"))
    _delete(table, ReadSet(read.read_version), files)


def _conflict_transaction(table: str) -> None:
    """A write that read app q's txn_version loses to q's next batch."""
    read = ReadSet(DeltaTable(table).version(), app_ids=frozenset({"q"}))
    _append(table, [5], "a", txn=BatchTxn("q", 0))
    commit_files(table, _write(table, [6], "a"), data_schema=SCHEMA, read=read)


DELTA_SPARK_CONFLICTS = [
    ("ProtocolChangedException", "DELTA_PROTOCOL_CHANGED", _conflict_protocol),
    ("MetadataChangedException", "DELTA_METADATA_CHANGED", _conflict_metadata),
    ("ConcurrentAppendException", "DELTA_CONCURRENT_APPEND", _conflict_append),
    ("ConcurrentDeleteReadException", "DELTA_CONCURRENT_DELETE_READ", _conflict_delete_read),
    ("ConcurrentDeleteDeleteException", "DELTA_CONCURRENT_DELETE_DELETE", _conflict_delete_delete),
    ("ConcurrentTransactionException", "DELTA_CONCURRENT_TRANSACTION", _conflict_transaction),
]


@pytest.mark.parametrize(
    ("name", "error_class", "provoke"), DELTA_SPARK_CONFLICTS, ids=[c[0] for c in DELTA_SPARK_CONFLICTS]
)
def test_each_conflict_is_caught_under_delta_sparks_name(
    tmp_path: Path, name: str, error_class: str, provoke: Any
) -> None:
    """A conflict of each kind, from a real commit between the loser's read and its commit, caught by an
    ``except`` clause written for delta-spark (``from delta.exceptions import ...``, here sparkonce's module) and
    by the base class; the loser committed nothing. ``ConcurrentWriteException`` (ADD CONSTRAINT's) needs Spark:
    tests/integration/test_delta_constraints.py."""
    import sparkonce
    import sparkonce.delta.exceptions as delta_exceptions

    table = _table_with_two_partitions(tmp_path)
    delta_name = getattr(delta_exceptions, name)
    assert getattr(sparkonce, name) is delta_name  # the root exports the same class
    caught: list[BaseException] = []
    version = None
    try:
        try:
            provoke(table)
        except delta_name as conflict:  # what a ported ``except`` clause does
            caught.append(conflict)
            version = DeltaTable(table).version()
            raise
    except delta_exceptions.DeltaConcurrentModificationException as conflict:
        assert conflict is caught[0]
    assert len(caught) == 1 and str(caught[0]).startswith(f"[{error_class}] ")
    assert caught[0].error_class == error_class
    assert DeltaTable(table).version() == version


def test_giving_up_after_lost_races_is_not_a_conflict(tmp_path: Path) -> None:
    """A blind append that may try once, on a snapshot a concurrent append made stale: it loses the race for the
    next table version, no rule is broken, and it gives up with CommitRetriesExceededError naming the attempts."""
    import sparkonce.delta.exceptions as delta_exceptions
    from sparkonce.delta.txn.commit import load_table
    from sparkonce.errors import CommitRetriesExceededError

    table = _table_with_two_partitions(tmp_path)
    stale = load_table(table)
    _append(table, [5], "a")  # the concurrent writer takes table_version 2
    with pytest.raises(
        CommitRetriesExceededError,
        match=r"^\[DELTA_MAX_COMMIT_RETRIES_EXCEEDED\] gave up committing to .* after 1 attempts",
    ) as gave_up:
        commit_files(table, _write(table, [6], "a"), data_schema=SCHEMA, snapshot=stale, max_attempts=1)
    assert gave_up.value.attempts == 1
    assert not isinstance(gave_up.value, (CommitConflictError, delta_exceptions.DeltaConcurrentModificationException))
    assert DeltaTable(table).version() == 2 and _ids(table) == [1, 2, 3, 4, 5]


# -- appenders, OPTIMIZE and DELETE all at once ---------------------------------------------------------------


def _file_ids(table: str, path: str) -> list[int]:
    import pyarrow.parquet as pq

    return [int(i) for i in pq.read_table(str(Path(table) / path), columns=["id"]).column("id").to_pylist()]


def _maintenance(
    table: str, kind: str, writers_done: threading.Event, outcomes: list[tuple[str, list[int], str]]
) -> None:
    """OPTIMIZEs (of p0 then p1, ...) or DELETEs (of the first file of p1) until the writers are done, each
    reading the newest table, as a compaction job or a partition DELETE plans; records (kind, ids deleted, error
    class or "")."""
    n = 0
    while not writers_done.is_set():
        n += 1
        part = f"p{n % 2}" if kind == "optimize" else "p1"
        version = DeltaTable(table).version()
        files = [f for f in _active(table).values() if f["partition"]["part"] == part]
        if kind == "delete":
            files = files[:1]
        if len(files) < (2 if kind == "optimize" else 1):
            writers_done.wait(0.05)  # nothing to do yet
            continue
        read = ReadSet.of_files(
            version,
            [(f["path"], dict(f["partition"])) for f in files],
            whole_table=False,
            isolation="SnapshotIsolation" if kind == "optimize" else "WriteSerializable",
        )
        ids = [i for f in files for i in _file_ids(table, f["path"])]
        try:
            if kind == "optimize":
                _optimize(table, read, [_removed(f) for f in files], _write(table, ids, part))
                outcomes.append((kind, [], ""))
            else:
                _delete(table, read, [_removed(f) for f in files])
                outcomes.append((kind, ids, ""))
        except CommitConflictError as err:
            outcomes.append((kind, [], getattr(err, "error_class", "?")))


def test_appenders_optimize_and_delete_at_once_lose_no_update(tmp_path: Path) -> None:
    """16 appenders (8 sparkonce streams, 8 delta-rs) x 3 commits, while an OPTIMIZE job and a DELETE job work on
    the same partitions: no sparkonce append fails; OPTIMIZE fails only when a DELETE removed a file it compacts, a
    DELETE only by Delta's rules (a file it read gone, or a delta-rs append, not blind, into its partition); the
    table holds exactly every row whose append reported success, minus the rows of the DELETEs that did. (A
    delta-rs append may fail by delta-rs's own checker, stricter than Delta's: it counts an append as having read
    the whole table, so a concurrent DELETE fails it.)"""
    table = str(tmp_path / "t")
    _append(table, [-1, -2], "p0")
    _append(table, [-3, -4], "p1")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(table, p, 8, 3, out)) for p in range(2)]
    for p in procs:
        p.start()
    outcomes: list[tuple[str, list[int], str]] = []
    done = threading.Event()
    kinds = ("optimize", "delete")
    jobs = [threading.Thread(target=_maintenance, args=(table, kind, done, outcomes)) for kind in kinds]
    for job in jobs:
        job.start()
    results = [r for _ in procs for r in out.get(timeout=600)]
    done.set()
    for job in jobs:
        job.join()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    rs_stricter = "a concurrent transaction deleted data this operation read"
    assert [r for r in results if r[4] and not (r[0] == "delta-rs" and rs_stricter in r[4])] == []
    allowed = {
        "optimize": {"", "DELTA_CONCURRENT_DELETE_READ"},
        "delete": {"", "DELTA_CONCURRENT_DELETE_READ", "DELTA_CONCURRENT_APPEND"},
    }
    assert all(error in allowed[kind] for kind, _, error in outcomes), outcomes
    assert {kind for kind, _, error in outcomes if not error} == {"optimize", "delete"}  # both jobs committed
    appended = [-1, -2, -3, -4] + [first + i for _, first, _, _, error in results if not error for i in range(3)]
    deleted = {i for kind, ids, error in outcomes if kind == "delete" and not error for i in ids}
    assert _ids(table) == sorted(set(appended) - deleted)
    assert len(_ids(table)) == len(set(appended) - deleted)  # nothing doubled by a compaction
