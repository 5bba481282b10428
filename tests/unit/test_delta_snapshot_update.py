"""The commit path's own table snapshot: kept between batches, brought up to date by reading only new commits
(:mod:`sparkonce.delta.log.table_view`), and the log checkpoints it writes (:mod:`sparkonce.delta.log.log_checkpoint`).

Real tables on disk; another writer is delta-rs (``write_deltalake``); every result is checked with delta-rs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.table_view import current_table, forget_table
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import DeltaLogError
from sparkonce.storage import table_location

SCHEMA = pa.schema([("id", pa.int64())])


def _batch(table: str, ids: list[int], app_id: str, batch_id: int, **kwargs: object) -> int | None:
    files = TableFileWriter(FileWriterOptions(location=table_location(table)))
    files.write(pa.table({"id": ids}, schema=SCHEMA))
    result = commit_files(table, files.close(), data_schema=SCHEMA, txn=BatchTxn(app_id, batch_id), **kwargs)  # type: ignore[arg-type]
    return None if result.skipped else result.table_version


def _ids(table: str) -> list[int]:
    return sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist())


def _log_names(table: str) -> list[str]:
    return sorted(os.listdir(os.path.join(table, "_delta_log")))


def test_a_kept_snapshot_picks_up_a_commit_of_another_writer_between_batches(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    assert _batch(table, [0], "stream", 0) == 0
    assert _batch(table, [1], "stream", 1) == 1
    held = current_table(table)
    assert held is not None and held.version() == 1
    write_deltalake(table, pa.table({"id": [100]}, schema=SCHEMA), mode="append")  # table version 2
    updated = current_table(table)
    assert updated is not None and updated.version() == 2
    assert updated.transaction_version("stream") == 1
    assert len(updated.snapshot.files) == 3  # the other writer's file is in the kept snapshot
    assert held.version() == 1  # the snapshot handed out before is not changed
    assert _batch(table, [2], "stream", 2) == 3
    assert _batch(table, [2], "stream", 2) is None  # the replayed batch is seen in the kept snapshot
    assert _ids(table) == [0, 1, 2, 100]
    assert DeltaTable(table).transaction_version("stream") == 2


def test_a_txn_only_in_a_checkpoint_is_seen(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    properties = {"delta.checkpointInterval": "2"}
    assert _batch(table, [0], "old-app", 7, new_table_properties=properties) == 0
    for batch_id in range(3):
        _batch(table, [10 + batch_id], "stream", batch_id)
    assert "00000000000000000002.checkpoint.parquet" in _log_names(table)
    for table_version in range(3):  # the commits before the checkpoint leave the log (as log cleanup does)
        os.remove(os.path.join(table, "_delta_log", f"{table_version:020d}.json"))
    forget_table(table)  # a new process: no kept snapshot
    assert _batch(table, [0], "old-app", 7) is None  # its txn lives only in the checkpoint now
    assert _batch(table, [0], "old-app", 6) is None
    assert _batch(table, [1], "old-app", 8) == 4
    assert DeltaTable(table).transaction_version("old-app") == 8
    assert _ids(table) == [0, 1, 10, 11, 12]


def test_a_kept_snapshot_older_than_the_log_is_rebuilt_from_the_newest_checkpoint(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    properties = {"delta.checkpointInterval": "3"}
    assert _batch(table, [0], "a", 0, new_table_properties=properties) == 0
    held = current_table(table)
    assert held is not None and held.version() == 0
    for batch_id in range(1, 5):
        _batch(table, [batch_id], "b", batch_id)
    for table_version in range(3):  # commits 1 and 2, which the held snapshot needs, are gone
        os.remove(os.path.join(table, "_delta_log", f"{table_version:020d}.json"))
    updated = DeltaLog(table).update(held.snapshot)
    assert (updated.table_version, updated.checkpoint_version) == (4, 3)
    assert updated.txn_version("a") == 0 and updated.txn_version("b") == 4
    assert len(updated.files) == 5


def test_a_table_replaced_at_the_same_place_is_read_afresh(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    for batch_id in range(3):
        _batch(table, [batch_id], "a", batch_id)
    held = current_table(table)
    assert held is not None and held.version() == 2
    shutil.rmtree(table)
    for batch_id in range(5):  # a new table there, with more table versions than the held snapshot
        _batch(table, [100 + batch_id], "b", batch_id)
    again = current_table(table)
    assert again is not None and again.version() == 4
    assert again.transaction_version("a") is None and again.transaction_version("b") == 4
    assert _ids(table) == [100, 101, 102, 103, 104]


def test_multi_part_checkpoints_are_read_by_delta_rs_and_sparkonce(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    properties = {"delta.checkpointInterval": "4"}
    for batch_id in range(5):
        _batch(table, [batch_id], "s", batch_id, new_table_properties=properties, checkpoint_part_size=3)
    parts = [n for n in _log_names(table) if ".checkpoint." in n]
    # 8 actions at table version 4 (protocol, metaData, one txn, five adds): at most 3 per part -> 3 parts
    assert parts == [f"00000000000000000004.checkpoint.{i:010d}.0000000003.parquet" for i in (1, 2, 3)]
    last = json.loads(Path(table, "_delta_log", "_last_checkpoint").read_text())
    assert last == {"version": 4, "size": 8, "parts": 3}
    for table_version in range(4):
        os.remove(os.path.join(table, "_delta_log", f"{table_version:020d}.json"))
    assert _ids(table) == [0, 1, 2, 3, 4]
    assert DeltaTable(table).transaction_version("s") == 4
    snapshot = DeltaLog(table).snapshot()
    assert (snapshot.table_version, snapshot.checkpoint_version, len(snapshot.files)) == (4, 4, 5)


def test_a_single_file_checkpoint_is_read_by_delta_rs_without_the_commits_before_it(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    for batch_id in range(11):
        _batch(table, [batch_id], "s", batch_id)
    names = _log_names(table)
    assert "00000000000000000010.checkpoint.parquet" in names
    assert not [n for n in names if ".checkpoint.0" in n]
    assert json.loads(Path(table, "_delta_log", "_last_checkpoint").read_text()) == {"version": 10, "size": 14}
    for table_version in range(10):
        os.remove(os.path.join(table, "_delta_log", f"{table_version:020d}.json"))
    assert _ids(table) == list(range(11))
    assert DeltaTable(table).transaction_version("s") == 10


def _v2_table(root: Path, *, with_sidecar: bool = True) -> None:
    """A table whose state at table version 1 is a V2 checkpoint (``NNN.checkpoint.<uuid>.json``) with a Parquet
    sidecar under ``_delta_log/_sidecars``, as Delta writes one (PROTOCOL.md "V2 Spec"); commit 2 after it."""
    log = root / "_delta_log"
    (log / "_sidecars").mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["v2Checkpoint"],
        "writerFeatures": ["v2Checkpoint"],
    }
    metadata = {
        "id": "v2-table",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": [],
        "configuration": {"delta.checkpointPolicy": "v2"},
        "createdTime": 0,
    }
    for i in (0, 1):
        pq.write_table(pa.table({"id": [i]}, schema=SCHEMA), root / f"f{i}.parquet")
    adds = [
        {"add": {"path": f"f{i}.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": False}}
        for i in (0, 1)
    ]
    sidecar = "00000000000000000001.checkpoint.0000000001.0000000001.7d17ac10-5cf3-4f8e-9e4b-2a4a8d3c0f11.parquet"
    if with_sidecar:
        from sparkonce.delta.log.log_checkpoint import _part_table

        pq.write_table(_part_table(adds), log / "_sidecars" / sidecar)
    top = [
        {"checkpointMetadata": {"version": 1}},
        {"protocol": protocol},
        {"metaData": metadata},
        {"txn": {"appId": "jvm-stream", "version": 41}},
        {"sidecar": {"path": sidecar, "sizeInBytes": 1, "modificationTime": 0}},
    ]
    name = "00000000000000000001.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"
    (log / name).write_text("\n".join(json.dumps(a) for a in top) + "\n")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": 5, "v2Checkpoint": {"path": name}}))
    pq.write_table(pa.table({"id": [2]}, schema=SCHEMA), root / "f2.parquet")
    commit2 = [
        {"commitInfo": {"operation": "WRITE", "timestamp": 2}},
        {"add": {"path": "f2.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True}},
    ]
    (log / "00000000000000000002.json").write_text("\n".join(json.dumps(a) for a in commit2) + "\n")


def test_a_v2_checkpoint_with_a_sidecar_is_read_by_the_commit_path(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _v2_table(root)
    table = str(root)
    snapshot = DeltaLog(table).snapshot()
    assert (snapshot.table_version, snapshot.checkpoint_version) == (2, 1)
    assert sorted(snapshot.files) == ["f0.parquet", "f1.parquet", "f2.parquet"]
    assert _batch(table, [9], "jvm-stream", 41) is None  # the txn of the V2 checkpoint's top-level file
    assert _batch(table, [3], "jvm-stream", 42) == 3
    assert not [n for n in _log_names(table) if n.startswith("00000000000000000003.checkpoint")]
    assert DeltaLog(table).snapshot().txn_version("jvm-stream") == 42


def test_a_v2_checkpoint_with_a_missing_sidecar_is_an_error_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _v2_table(root, with_sidecar=False)
    with pytest.raises(DeltaLogError, match=r"_sidecars/0+1\.checkpoint\.0+1\.0+1\.7d17ac10.*\.parquet.*v2Checkpoint"):
        DeltaLog(str(root)).snapshot()


def test_the_one_door_gives_the_latest_table_or_any_table_version(tmp_path: Path) -> None:
    """``existing_table``: the latest table version (the kept snapshot) or one rebuilt at ``table_version``, each
    answering as delta-rs does at that version; a missing table and a version past the latest are errors."""
    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.errors import TableNotFoundError, VersionNotFoundError

    table = str(tmp_path / "t")
    for batch_id in range(3):
        _batch(table, [batch_id], "q", batch_id)
    latest = existing_table(table)
    assert (latest.version(), latest.transaction_version("q")) == (2, 2)
    assert latest.snapshot is current_table(table).snapshot  # the kept one
    for table_version in range(3):
        at = existing_table(table, table_version=table_version)
        theirs = DeltaTable(table, version=table_version)
        assert (at.version(), at.transaction_version("q")) == (table_version, theirs.transaction_version("q"))
        assert len(at.snapshot.files) == len(theirs.file_uris())
        assert at.schema().to_json() == theirs.schema().to_json()
    with pytest.raises(VersionNotFoundError, match=r"DELTA_VERSION_NOT_FOUND.*Available versions: \[0, 2\]"):
        existing_table(table, table_version=3)
    with pytest.raises(TableNotFoundError, match="is not a Delta table"):
        existing_table(str(tmp_path / "none"))
