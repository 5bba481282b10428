"""The pure-Python ``_delta_log`` reader, checked against delta-rs on every fixture table and table version."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from sparkonce.delta.log.delta_log import DeltaLog, Txn
from sparkonce.delta.table.deletion_vectors import dv_relative_path
from sparkonce.errors import DeltaLogError, TableNotFoundError, VersionNotFoundError
from tests.unit.doctor_helpers import raw_rows, stream_commit

TABLES = [
    "basic-with-inserts-deletes-checkpoint",
    "basic-with-inserts-overwrite-restore",
    "checkpoint",
    "data-reader-partition-values",
    "delta-0.1.0",
    "delta-0.2.0",
    "deltalog-getChanges",
    "dv-partitioned-with-checkpoint",
    "multi-part-checkpoint",
    "table-with-columnmapping-mode-name",
]
# delta-rs 1.6.6 cannot load this one (its metaData has no schemaString); checked by hand below.
NOT_FOR_DELTA_RS = "corrupted-last-checkpoint"


def _versions(fixtures: Path, name: str) -> list[tuple[str, int]]:
    log = DeltaLog(fixtures / "delta-tables" / name)
    return [(name, v) for v in range(log.latest_version() + 1)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "table_and_version" in metafunc.fixturenames:
        from tests.conftest import FIXTURES

        cases = [case for name in TABLES for case in _versions(FIXTURES, name)]
        metafunc.parametrize("table_and_version", cases, ids=[f"{n}@{v}" for n, v in cases])


def test_snapshot_matches_delta_rs(fixtures_dir: Path, table_and_version: tuple[str, int]) -> None:
    name, version = table_and_version
    path = fixtures_dir / "delta-tables" / name
    snapshot = DeltaLog(path).snapshot(version)
    expected_dt = deltalake.DeltaTable(str(path), version=version)
    expected = set(pa.table(expected_dt.get_add_actions()).column("path").to_pylist())
    assert set(snapshot.files) == expected
    assert snapshot.table_version == version
    for app_id in snapshot.txns:
        assert snapshot.txn_version(app_id) == expected_dt.transaction_version(app_id)
    assert snapshot.protocol["minReaderVersion"] == expected_dt.protocol().min_reader_version


@pytest.mark.parametrize(
    ("name", "checkpoint_version"),
    [
        ("checkpoint", 10),
        ("multi-part-checkpoint", 1),
        ("delta-0.2.0", 3),
        ("dv-partitioned-with-checkpoint", 10),
        ("deltalog-getChanges", None),
    ],
)
def test_snapshot_starts_from_newest_checkpoint(fixtures_dir: Path, name: str, checkpoint_version: int | None) -> None:
    assert DeltaLog(fixtures_dir / "delta-tables" / name).snapshot().checkpoint_version == checkpoint_version


def test_corrupted_last_checkpoint_fixture_by_hand(fixtures_dir: Path) -> None:
    log = DeltaLog(fixtures_dir / "delta-tables" / NOT_FOR_DELTA_RS)
    snapshot = log.snapshot()
    assert snapshot.checkpoint_version == 10
    assert set(snapshot.files) == {str(i) for i in range(11)}
    assert set(log.snapshot(4).files) == {str(i) for i in range(5)}


def test_txns_from_checkpoint_and_commits(fixtures_dir: Path) -> None:
    tables = fixtures_dir / "delta-tables"
    assert DeltaLog(tables / "delta-0.2.0").snapshot().txns == {
        "e4a20b59-dd0e-4c50-b074-e8ae4786df30": Txn("e4a20b59-dd0e-4c50-b074-e8ae4786df30", 0, 1564524299648)
    }
    assert DeltaLog(tables / "delta-0.1.0").snapshot().txn_version("txnId") == 0
    changes = DeltaLog(tables / "deltalog-getChanges")
    assert changes.snapshot(1).txn_version("fakeAppId") is None
    assert changes.snapshot(2).txns["fakeAppId"] == Txn("fakeAppId", 3, 200)


def test_history_reads_delta_jvm_streaming_commit(fixtures_dir: Path) -> None:
    history = DeltaLog(fixtures_dir / "delta-tables" / "delta-0.2.0").history()
    assert [e.table_version for e in history] == [3, 2, 1, 0]
    newest = history[0]
    assert newest.operation == "STREAMING UPDATE"
    assert newest.operation_parameters == {
        "outputMode": "Append",
        "queryId": "e4a20b59-dd0e-4c50-b074-e8ae4786df30",
        "epochId": "0",
    }
    assert (newest.query_id, newest.batch_id) == ("e4a20b59-dd0e-4c50-b074-e8ae4786df30", 0)
    assert newest.commit_info["timestamp"] == 1564524299648  # the writer's clock; Delta dates a commit by its file
    assert newest.timestamp_ms == dict(DeltaLog(fixtures_dir / "delta-tables" / "delta-0.2.0").commit_timestamps())[3]
    assert newest.read_version == 2 and newest.is_blind_append is True
    assert (newest.num_added_files, newest.num_removed_files, newest.added_bytes) == (1, 0, 404)
    assert history[2].operation == "WRITE" and history[2].query_id is None


def test_a_commit_is_dated_by_its_file_made_increasing_or_by_its_in_commit_timestamp(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """Delta's rule: the commit file's modification time, each one at least 1 ms after the previous (copied logs
    share one time); ``inCommitTimestamp`` as written when the commit has one; never ``commitInfo.timestamp``."""
    table = tmp_path / "t"
    shutil.copytree(fixtures_dir / "delta-tables" / "delta-0.2.0", table)
    at_ns = 1_700_000_000_000 * 1_000_000
    for version in range(4):  # 0 and 1 share a time, 2 went back before them, 3 is later
        when = {0: at_ns, 1: at_ns, 2: at_ns - 5_000_000, 3: at_ns + 9_000_000}[version]
        os.utime(table / "_delta_log" / f"{version:020d}.json", ns=(when, when))
    want = {0: 1_700_000_000_000, 1: 1_700_000_000_001, 2: 1_700_000_000_002, 3: 1_700_000_000_009}
    log = DeltaLog(table)
    assert dict(log.commit_timestamps()) == want
    assert {v: log.commit_entry(v).timestamp_ms for v in range(4)} == want
    assert {v: DeltaLog(table).commit_file_time(v) for v in range(4)} == want  # each looked up alone
    ict = DeltaLog(fixtures_dir / "delta-rs-tables" / "cdc_ict_table")
    infos = {v: [a["commitInfo"] for a in ict.read_actions(v) if "commitInfo" in a] for v in range(4)}
    written = {v: int(info["inCommitTimestamp"]) for v, (info,) in infos.items()}
    assert written[1] < written[0]  # the fixture's second commit is stamped before its first: kept as written
    assert dict(ict.commit_timestamps()) == written == {v: ict.commit_entry(v).timestamp_ms for v in range(4)}


def test_history_without_commit_info_uses_txn_and_file_time(fixtures_dir: Path) -> None:
    log = DeltaLog(fixtures_dir / "delta-tables" / "delta-0.1.0")
    entries = {e.table_version: e for e in log.history()}
    assert entries[0].operation is None and entries[0].commit_info == {}
    assert entries[0].timestamp_ms is not None
    with_txn = [e for e in entries.values() if e.txns]
    assert [(e.query_id, e.batch_id) for e in with_txn] == [("txnId", 0)]


def test_history_range(fixtures_dir: Path) -> None:
    log = DeltaLog(fixtures_dir / "delta-tables" / "checkpoint")
    assert [e.table_version for e in log.history(start=3, end=6)] == [6, 5, 4, 3]
    assert log.commit_versions() == list(range(15))
    assert log.latest_version() == 14


def test_sparkonce_streaming_commit_presented_as_delta_would(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    stream_commit(table, "q-1", 0, raw_rows("t", 0, range(5)), offsets_log="v1\n{}\n{}")
    stream_commit(table, "q-1", 1, raw_rows("t", 0, range(5, 12)))
    log = DeltaLog(table)
    newest, oldest = log.history()
    assert newest.operation == "STREAMING UPDATE"
    assert newest.operation_parameters == {"outputMode": "Append", "queryId": "q-1", "epochId": "1"}
    assert (newest.query_id, newest.batch_id, newest.added_rows) == ("q-1", 1, 7)
    assert newest.engine_info is not None and newest.engine_info.startswith("delta-rs")
    assert newest.txns == (Txn("q-1", 1, None),)
    assert oldest.commit_info["sparkonce"]["offsetsLog"] == "v1\n{}\n{}"
    assert log.snapshot().txn_version("q-1") == 1
    assert deltalake.DeltaTable(str(table)).transaction_version("q-1") == 1


def test_sparkonce_batch_idempotent_write(tmp_path: Path) -> None:
    table = tmp_path / "t"
    ours = {"operation": "WRITE", "operationParameters": {"mode": "Append", "txnAppId": "job", "txnVersion": 3}}
    write_deltalake(
        str(table),
        raw_rows("t", 0, [1]),
        commit_properties=CommitProperties(
            custom_metadata={"sparkonce": ours}, app_transactions=[Transaction("job", 3)]
        ),
    )
    (entry,) = DeltaLog(table).history()
    assert entry.operation == "WRITE"
    assert entry.operation_parameters["txnAppId"] == "job"
    assert (entry.query_id, entry.batch_id) == ("job", 3)


def _copy(fixtures_dir: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(fixtures_dir / "delta-tables" / name, target)
    return target


def test_garbled_commit_names_file_and_table_version(fixtures_dir: Path, tmp_path: Path) -> None:
    table = _copy(fixtures_dir, "checkpoint", tmp_path)
    commit = table / "_delta_log" / f"{12:020d}.json"
    commit.write_text(commit.read_text()[:40])
    log = DeltaLog(table)
    with pytest.raises(DeltaLogError, match=r"00000000000000000012\.json: line 1 of table version 12"):
        log.read_actions(12)
    with pytest.raises(DeltaLogError, match="table version 12"):
        log.snapshot()
    assert set(log.snapshot(11).files) == {"12"}


def test_missing_commit_is_reported(fixtures_dir: Path, tmp_path: Path) -> None:
    table = _copy(fixtures_dir, "checkpoint", tmp_path)
    (table / "_delta_log" / f"{12:020d}.json").unlink()
    log = DeltaLog(table)
    with pytest.raises(DeltaLogError, match="table version 12 is missing"):
        log.read_actions(12)
    with pytest.raises(DeltaLogError, match="table version 12 is missing"):
        log.snapshot(13)


@pytest.mark.parametrize("damage", ["garbled", "missing", "points-at-nothing"])
def test_last_checkpoint_is_only_a_hint(fixtures_dir: Path, tmp_path: Path, damage: str) -> None:
    table = _copy(fixtures_dir, "checkpoint", tmp_path)
    last = table / "_delta_log" / "_last_checkpoint"
    if damage == "garbled":
        last.write_text('{"version":1')
    elif damage == "missing":
        last.unlink()
    else:
        last.write_text('{"version":7,"size":3}')
    snapshot = DeltaLog(table).snapshot()
    assert snapshot.checkpoint_version == 10
    assert set(snapshot.files) == {"15"}
    if damage != "missing":
        assert snapshot.notes


def test_unreadable_checkpoint_falls_back_to_commits(fixtures_dir: Path, tmp_path: Path) -> None:
    table = _copy(fixtures_dir, "checkpoint", tmp_path)
    (table / "_delta_log" / f"{10:020d}.checkpoint.parquet").write_bytes(b"PAR1 garbage")
    snapshot = DeltaLog(table).snapshot()
    assert snapshot.checkpoint_version is None
    assert set(snapshot.files) == {"15"}
    assert any("skipped checkpoint at table version 10" in n for n in snapshot.notes)


def test_incomplete_multi_part_checkpoint_is_not_used(fixtures_dir: Path, tmp_path: Path) -> None:
    table = _copy(fixtures_dir, "multi-part-checkpoint", tmp_path)
    expected = set(DeltaLog(table).snapshot().files)
    (table / "_delta_log" / f"{1:020d}.checkpoint.0000000002.0000000002.parquet").unlink()
    snapshot = DeltaLog(table).snapshot()
    assert snapshot.checkpoint_version is None
    assert set(snapshot.files) == expected


def test_unknown_table_version(fixtures_dir: Path) -> None:
    with pytest.raises(
        VersionNotFoundError,
        match=r"^\[DELTA_VERSION_NOT_FOUND\] Cannot time travel Delta table to version 99\. Available versions: "
        r"\[0, 14\]\.",
    ):
        DeltaLog(fixtures_dir / "delta-tables" / "checkpoint").snapshot(99)


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        ("no-folder", "no _delta_log folder"),
        ("no-log", "no _delta_log folder"),
        ("empty-log", "_delta_log holds no commit or checkpoint"),
    ],
)
def test_not_a_table(tmp_path: Path, layout: str, problem: str) -> None:
    path = tmp_path / "t"
    if layout != "no-folder":
        path.mkdir()
    if layout == "empty-log":
        (path / "_delta_log").mkdir()
    with pytest.raises(TableNotFoundError, match=rf"^{re.escape(str(path))} is not a Delta table: {problem}$"):
        DeltaLog(path)


def test_deletion_vector_files_resolve(fixtures_dir: Path) -> None:
    table = fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint"
    snapshot = DeltaLog(table).snapshot()
    dvs = [a["deletionVector"] for a in snapshot.files.values() if a.get("deletionVector")]
    assert dvs
    for dv in dvs:
        rel = dv_relative_path(dv)
        assert rel is not None and (table / rel).is_file(), rel


def test_data_file_paths_are_url_decoded(fixtures_dir: Path) -> None:
    table = fixtures_dir / "delta-tables" / "data-reader-partition-values"
    log = DeltaLog(table)
    for raw in log.snapshot().files:
        local = log.data_file_fs_path(raw)
        assert local is not None and Path(local).is_file(), raw


def _write_commits(log_dir: Path, commits: list[str]) -> None:
    log_dir.mkdir(parents=True)
    for table_version, text in enumerate(commits):
        (log_dir / f"{table_version:020d}.json").write_text(text)


def test_commit_summaries_read_what_the_full_parse_reads(tmp_path: Path) -> None:
    """The byte search for ``{"commitInfo"``/``{"txn"`` lines and the line-by-line parse agree on every shape:
    commitInfo first or last, spaces inside the braces, several txns, none, a "txn" text inside a string."""
    info = '{"commitInfo":{"timestamp":5,"operation":"WRITE","userMetadata":"{\\"txn\\":1}"}}'
    add = '{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}'
    commits = [
        '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n' + info + "\n",
        add + '\n{"txn":{"appId":"q","version":3}}\n' + info,  # commitInfo last, no trailing newline
        '{ "commitInfo" : {"timestamp":6,"operation":"DELETE"}}\n{ "txn": {"appId":"q","version":4}}\n',
        info + '\n{"txn":{"appId":"a","version":1}}\n{"txn":{"appId":"b","version":2}}\n' + add + "\n",
        add + "\n",  # no commitInfo at all
    ]
    _write_commits(tmp_path / "_delta_log", commits)
    log = DeltaLog(tmp_path)
    summaries = log.commit_summaries(list(range(len(commits))))
    expected = []
    for table_version in range(len(commits)):
        actions = log.read_actions(table_version)
        expected.append(
            (
                table_version,
                next((a["commitInfo"] for a in actions if "commitInfo" in a), {}),
                tuple(Txn(a["txn"]["appId"], a["txn"]["version"], None) for a in actions if "txn" in a),
            )
        )
    assert [tuple(s) for s in summaries] == expected
    assert [len(s.txns) for s in summaries] == [0, 1, 1, 2, 0]
    assert summaries[2].commit_info["operation"] == "DELETE"


def test_commit_summaries_name_the_malformed_line(tmp_path: Path) -> None:
    info = '{"commitInfo":{"timestamp":5,"operation":"WRITE"}}'
    _write_commits(tmp_path / "_delta_log", [info + '\n{"txn":{"appId":"q","version":"three"}}\n'])
    with pytest.raises(DeltaLogError, match=r"00000000000000000000\.json: line 2 of table version 0: 'txn' action"):
        DeltaLog(tmp_path).commit_summaries([0])
