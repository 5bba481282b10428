"""RESTORE through sparkonce's commit engine (``sparkonce.delta.ops.restore``), without Spark: the actions Delta's
``RestoreTableCommand`` writes, deletion vectors, lost races, missing files. Real tables on disk; delta-rs reads
them back as a second engine."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.ops import restore as restore_module
from sparkonce.delta.ops.restore import RESTORE_METRICS, restore_table
from sparkonce.delta.txn.commit import BatchTxn, CommitMode, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import ConcurrentAppendError, DataFileMissingError, OptionError
from sparkonce.retries import count_retries
from sparkonce.storage import table_location

SCHEMA = pa.schema([("id", pa.int64())])


def _write(table: str, ids: list[int]) -> list[Any]:
    files = TableFileWriter(FileWriterOptions(location=table_location(table)))
    files.write(pa.table({"id": ids}, schema=SCHEMA))
    return files.close()


def _append(table: str, ids: list[int], *, mode: CommitMode = "append") -> int:
    done = commit_files(table, _write(table, ids), data_schema=SCHEMA, mode=mode)
    assert done.table_version is not None
    return int(done.table_version)


def _actions(table: str, table_version: int) -> list[dict[str, Any]]:
    return DeltaLog(table).read_actions(table_version)


def _ids(table: str, table_version: int | None = None) -> list[int]:
    return sorted(pa.table(DeltaTable(table, version=table_version).to_pyarrow_table()).column("id").to_pylist())


def _count(table: str, table_version: int | None = None) -> int:
    result = (
        QueryBuilder().register("t", DeltaTable(table, version=table_version)).execute("select count(*) as n from t")
    )
    return int(pa.table(result.read_all()).column("n")[0].as_py())


def test_a_restore_is_one_commit_of_deltas_actions(tmp_path: Path) -> None:
    """add (dataChange true) for files back, remove (extended metadata) for files gone, the restored version's
    metaData and the merged protocol; Delta's operation parameters and metrics; delta-rs reads the old content."""
    table = str(tmp_path / "t")
    _append(table, [1, 2])
    _append(table, [3])
    _append(table, [9], mode="overwrite")  # table version 2: removes both files, adds one
    live_at_2 = set(DeltaLog(table).snapshot(2).files)

    done = restore_table(table, table_version=1)

    assert (done.table_version, done.restored_table_version) == (3, 1)
    restored = DeltaLog(table).snapshot(1)
    sizes = {p: int(a["size"]) for p, a in restored.files.items()}
    assert done.metrics == {
        "tableSizeAfterRestore": sum(sizes.values()),
        "numOfFilesAfterRestore": 2,
        "numRemovedFiles": 1,
        "numRestoredFiles": 2,
        "removedFilesSize": sum(int(a["size"]) for a in DeltaLog(table).snapshot(2).files.values()),
        "restoredFilesSize": sum(sizes.values()),
    }
    actions = _actions(table, 3)
    assert [next(iter(a)) for a in actions] == ["commitInfo", "metaData", "add", "add", "remove", "protocol"]
    info = actions[0]["commitInfo"]
    assert (info["operation"], info["operationParameters"], info["readVersion"], info["isBlindAppend"]) == (
        "RESTORE",
        {"version": "1"},
        2,
        False,
    )
    assert list(info["operationMetrics"]) == list(RESTORE_METRICS)
    assert info["operationMetrics"] == {k: str(v) for k, v in done.metrics.items()}
    assert actions[1]["metaData"] == restored.metadata
    assert {a["add"]["path"] for a in actions[2:4]} == set(restored.files)
    assert all(a["add"]["dataChange"] is True for a in actions[2:4])
    remove = actions[4]["remove"]
    assert remove["path"] in live_at_2 and (remove["dataChange"], remove["extendedFileMetadata"]) == (True, True)
    assert actions[5]["protocol"] == restored.protocol
    assert _ids(table) == [1, 2, 3]  # delta-rs, a second reader, sees table version 1's rows
    entry = DeltaLog(table).commit_entry(3)
    assert (entry.operation, entry.operation_parameters) == ("RESTORE", {"version": "1"})


def test_restore_to_a_timestamp_records_it_and_the_version_it_resolved(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    _append(table, [1])
    _append(table, [2])
    stamps = dict(DeltaLog(table).commit_timestamps())
    when = dt.datetime.fromtimestamp(stamps[0] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    done = restore_table(table, timestamp=when)
    assert done.restored_table_version == 0
    info = _actions(table, 2)[0]["commitInfo"]
    assert info["operationParameters"] == {"timestamp": when, "version": "0"}
    assert _ids(table) == [1]


def test_a_restore_of_a_deletion_vector_table_matches_files_by_path_and_deletion_vector(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    """delta-spark's DV table (15 DELETEs, a checkpoint at 10): a file live then and now with other deletion
    vectors is removed with the one it has and added with the one it had; the rows are table version 5's."""
    table = tmp_path / "dv"
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", table)
    now, then = DeltaLog(str(table)).snapshot(15).files, DeltaLog(str(table)).snapshot(5).files
    changed = sorted(
        p for p in now.keys() & then.keys() if now[p].get("deletionVector") != then[p].get("deletionVector")
    )
    assert changed  # the fixture has files whose DV differs between the two versions

    done = restore_table(str(table), table_version=5)

    actions = _actions(str(table), int(done.table_version))
    adds = {a["add"]["path"]: a["add"] for a in actions if "add" in a}
    removes = {a["remove"]["path"]: a["remove"] for a in actions if "remove" in a}
    for path in changed:
        assert removes[path].get("deletionVector") == now[path].get("deletionVector")
        assert adds[path].get("deletionVector") == then[path].get("deletionVector")
    assert set(adds) == {p for p in then if p not in now or p in changed}
    assert set(removes) == {p for p in now if p not in then or p in changed}
    assert done.metrics["numRestoredFiles"] == len(adds) and done.metrics["numRemovedFiles"] == len(removes)
    live = {p: (a["size"], a.get("deletionVector")) for p, a in DeltaLog(str(table)).snapshot().files.items()}
    assert live == {p: (a["size"], a.get("deletionVector")) for p, a in then.items()}  # table version 5's files
    assert _count(str(table)) == _count(str(table), 5)


def _race_after_the_read(monkeypatch: pytest.MonkeyPatch, concurrent: Any) -> list[int]:
    """Make the restore's first attempt lose its race: right after it reads the table, another writer commits
    (``concurrent()``, a real commit). Returns the table versions each read saw."""
    read = restore_module.existing_table
    seen: list[int] = []

    def reading_then_racing(location: Any) -> Any:
        snapshot = read(location)
        seen.append(snapshot.version())
        if len(seen) == 1:
            concurrent()
        return snapshot

    monkeypatch.setattr(restore_module, "existing_table", reading_then_racing)
    return seen


def test_a_restore_that_loses_its_race_to_an_append_is_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore read the whole table (a non-blind transaction that also writes the metadata): an append that
    lands between its read and its commit is Delta's ConcurrentAppendException; nothing of the restore is written."""
    table = str(tmp_path / "t")
    _append(table, [1])
    _append(table, [2])
    _race_after_the_read(monkeypatch, lambda: _append(table, [3]))

    with pytest.raises(ConcurrentAppendError, match=r"^\[DELTA_CONCURRENT_APPEND\] .*table_version 2 \(WRITE\)"):
        restore_table(table, table_version=0)
    assert DeltaLog(table).latest_version() == 2
    assert _ids(table) == [1, 2, 3]


def test_a_restore_that_loses_its_race_to_a_commit_of_no_files_commits_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A winner that touched no file, metadata or protocol (a batch of no rows: its txn only) is no conflict: the
    engine logs the lost race as a ``delta_commit`` retry and restores on top of it; the winner's txn stays."""
    table = str(tmp_path / "t")
    _append(table, [1])
    _append(table, [2])
    seen = _race_after_the_read(
        monkeypatch, lambda: commit_files(table, [], data_schema=SCHEMA, txn=BatchTxn("other", 0))
    )
    caplog.set_level(logging.WARNING, logger="sparkonce.delta.txn.commit")

    done = restore_table(table, table_version=0)

    assert (done.table_version, seen) == (3, [1, 2])
    retries = [r.getMessage() for r in caplog.records if "sparkonce retry" in r.getMessage()]
    assert count_retries(retries) == {"delta_commit": 1}
    assert "(RESTORE to table_version 0)" in retries[0]
    assert _actions(table, 3)[0]["commitInfo"]["readVersion"] == 2
    assert _ids(table) == [1]
    assert DeltaTable(table).transaction_version("other") == 0


def test_a_file_to_restore_that_is_gone_is_refused_unless_missing_files_are_ignored(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    _append(table, [1])
    _append(table, [2], mode="overwrite")
    (gone,) = DeltaLog(table).snapshot(0).files
    (tmp_path / "t" / gone).unlink()  # what VACUUM does to a removed file

    with pytest.raises(DataFileMissingError, match=rf"table_version 0: .*missing \(1, .*\): {gone}\..*ignoreMissing"):
        restore_table(table, table_version=0)
    assert DeltaLog(table).latest_version() == 1
    done = restore_table(table, table_version=0, ignore_missing_files=True)
    assert done.metrics["numRestoredFiles"] == 1


@pytest.mark.parametrize("target", [2, 3, -1])
def test_only_an_earlier_table_version_can_be_restored(tmp_path: Path, target: int) -> None:
    """As Delta: the version to restore must be below the latest (restoring the latest is refused too)."""
    table = str(tmp_path / "t")
    _append(table, [1])
    _append(table, [2])
    _append(table, [3])
    with pytest.raises(OptionError, match=r"before its latest \(2\); RESTORE goes back to one of 0 to 1"):
        restore_table(table, table_version=target)
    assert DeltaLog(table).latest_version() == 2
