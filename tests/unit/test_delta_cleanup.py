"""The one rule of clean-up: a write attempt's files are deleted only when no Delta commit references them.

Real tables on disk (delta-rs commits); no Spark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.txn.cleanup import COMMIT_ID_KEY, find_commit, remove_unreferenced_files
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location

SCHEMA = pa.schema([("id", pa.int64()), ("device", pa.string())])


def _write(table: Path, ids: list[int], device: str = "d", *, partitioned: bool = False) -> list[WrittenFile]:
    options = FileWriterOptions(location=table_location(str(table)), partition_by=("device",) if partitioned else ())
    writer = TableFileWriter(options)
    writer.write(pa.table({"id": ids, "device": [device] * len(ids)}, schema=SCHEMA))
    return writer.close()


def _exists(table: Path, files: list[WrittenFile]) -> list[bool]:
    return [(table / f.path).is_file() for f in files]


@pytest.mark.parametrize("device", ["plain", "a:b c%"], ids=["plain", "escaped-partition-value"])
def test_only_unreferenced_files_are_removed(tmp_path: Path, device: str) -> None:
    table = tmp_path / "t"
    commit_files(str(table), _write(table, [0], device, partitioned=True), data_schema=SCHEMA, partition_by=("device",))
    landed = _write(table, [1, 2], device, partitioned=True)
    commit_files(str(table), landed, data_schema=SCHEMA, partition_by=("device",))  # table version 1
    stray = _write(table, [3], device, partitioned=True)

    cleanup = remove_unreferenced_files(
        table_location(str(table)), [f.path for f in landed + stray], written_after=0, purpose="test"
    )
    assert (cleanup.removed, cleanup.undecided) == (1, None)
    assert sorted(cleanup.referenced) == sorted(f.path for f in landed)
    assert _exists(table, landed) == [True] and _exists(table, stray) == [False]
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


def test_an_unreadable_commit_since_the_read_removes_nothing(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit_files(str(table), _write(table, [0]), data_schema=SCHEMA)
    stray = _write(table, [1])
    (table / "_delta_log" / f"{1:020d}.json").write_text('{"commitInfo": {"timestamp": 1}}\nnot json\n')

    cleanup = remove_unreferenced_files(
        table_location(str(table)), [f.path for f in stray], written_after=0, purpose="t"
    )
    assert cleanup.removed == 0 and cleanup.referenced == ()
    assert cleanup.undecided is not None and "after table_version 0" in cleanup.undecided
    assert _exists(table, stray) == [True]


def test_no_table_means_nothing_references_the_files(tmp_path: Path) -> None:
    table = tmp_path / "t"
    stray = _write(table, [1])
    cleanup = remove_unreferenced_files(
        table_location(str(table)), [f.path for f in stray], written_after=-1, purpose="t"
    )
    assert (cleanup.removed, cleanup.referenced, cleanup.undecided) == (1, (), None)


def test_a_replay_with_the_files_its_own_landed_commit_added_keeps_them(tmp_path: Path) -> None:
    """The skip path: an attempt whose commit landed but reported an error retries, finds its own txn, skips.

    Before issue 21's fix it deleted "the unreferenced files of this attempt": the files of the commit it made.
    """
    table = tmp_path / "t"
    commit_files(str(table), _write(table, [0]), data_schema=SCHEMA, txn=BatchTxn("q", 0))
    files = _write(table, [1, 2])
    first = commit_files(str(table), files, data_schema=SCHEMA, txn=BatchTxn("q", 1), written_after=0)
    assert (first.skipped, first.table_version) == (False, 1)

    again = commit_files(str(table), files, data_schema=SCHEMA, txn=BatchTxn("q", 1), written_after=0)
    assert again.skipped
    assert _exists(table, files) == [True]
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


def test_every_commit_carries_a_fresh_commit_id_that_find_commit_finds(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for i in range(3):
        commit_files(str(table), _write(table, [i]), data_schema=SCHEMA)
    ids = []
    for table_version in range(3):
        lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
        (info,) = [json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line]
        ids.append(info[COMMIT_ID_KEY])
    assert len(set(ids)) == 3
    location = table_location(str(table))
    assert [find_commit(location, commit_id, after=-1) for commit_id in ids] == [0, 1, 2]
    assert find_commit(location, ids[1], after=1) is None  # only commits after the given table version count
    assert find_commit(location, "no-such-commit", after=-1) is None
