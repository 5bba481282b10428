"""The driver side of the retention guard without Spark: which table version a query registers at its start (from its
checkpoint), and when a registration is written again (moved, refreshed, a failed write only a WARNING)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sparkonce.checkpoint import OffsetSeqMetadata, write_commit, write_metadata, write_offsets
from sparkonce.delta.reader_listener import ReadTable, Registration, restart_offsets, restart_version
from sparkonce.delta.txn.readers import READERS_DIR, RegisteredReader, read_readers
from sparkonce.storage import table_location

TABLE_ID = "4371c9b4-c7ba-4d41-b124-fa3793e53587"
QID = str(uuid.UUID(int=7))


def _offset(version: int, index: int = -1, *, snapshot: bool = False, table_id: str = TABLE_ID) -> str:
    return json.dumps(
        {
            "sourceVersion": 1,
            "reservoirId": table_id,
            "reservoirVersion": version,
            "index": index,
            "isStartingVersion": snapshot,
        }
    )


def _checkpoint(root: Path, ends: list[list[str]], committed: int) -> str:
    write_metadata(root, QID)
    for batch_id, sources in enumerate(ends):
        write_offsets(root, batch_id, metadata=OffsetSeqMetadata(0, 1_700_000_000_000, {}), sources=sources)
    for batch_id in range(committed + 1):
        write_commit(root, batch_id)
    return str(root)


PLAIN, FROM_5 = ReadTable("/t"), ReadTable("/t", {"startingversion": "5"})


@pytest.mark.parametrize(
    ("ends", "committed", "reads", "expected"),
    [
        ([], -1, [PLAIN], 12),  # a new query: the latest table version
        ([], -1, [FROM_5], 5),  # startingVersion
        ([], -1, [ReadTable("/t", {"startingtimestamp": "2026-01-01"})], 0),  # resolved by its first batch
        ([[_offset(9)]], 0, [PLAIN], 8),  # batch 0 read the snapshot of 8; Spark plans it again on restart
        ([[_offset(9, 3, snapshot=True)]], 0, [PLAIN], 9),  # batch 0 ends inside the snapshot of 9
        ([[_offset(9)], [_offset(11)]], 1, [PLAIN], 9),  # committed batch 1: its start
        ([[_offset(9)], [_offset(11)], [_offset(14)]], 1, [PLAIN], 11),  # batch 2 planned: re-run from its start
        ([[_offset(9), _offset(4)], [_offset(11), _offset(6)]], 1, [PLAIN], 4),  # the table read twice: the older
        ([[_offset(9, table_id="other")], [_offset(11, table_id="other")]], 1, [FROM_5], 5),  # another table's
    ],
)
def test_the_version_registered_at_start_is_where_a_restart_reads_from(
    tmp_path: Path, ends: list[list[str]], committed: int, reads: list[ReadTable], expected: int
) -> None:
    checkpoint = _checkpoint(tmp_path / "ck", ends, committed)
    assert restart_version(restart_offsets(checkpoint), TABLE_ID, reads, 12) == expected


def test_a_missing_checkpoint_registers_like_a_new_query(tmp_path: Path) -> None:
    assert restart_version(restart_offsets(str(tmp_path / "none")), TABLE_ID, [PLAIN], 12) == 12


def _registration(tmp_path: Path) -> tuple[Path, Registration]:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": [1]}))
    reader = RegisteredReader(QID, "/ck", "delta", 3, 0, None)
    return table, Registration(table_location(str(table)), TABLE_ID, reader, refresh_ms=1000)


def test_a_registration_is_written_when_it_moves_or_is_due(tmp_path: Path) -> None:
    table, registration = _registration(tmp_path)

    def written() -> list[tuple[int, int]]:
        return [(r.table_version, r.updated_at_ms) for r in read_readers(str(table))[0]]

    registration.update(None, now_ms=100)
    assert written() == [(3, 100)]
    registration.update(3, now_ms=500)
    registration.update(None, now_ms=1099)
    assert written() == [(3, 100)]  # unchanged and recent: no write
    registration.update(4, now_ms=1099)
    assert written() == [(4, 1099)]  # moved
    registration.update(None, now_ms=2099)
    assert written() == [(4, 2099)]  # due a refresh


def test_a_failed_write_is_a_warning_and_keeps_the_older_registration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, registration = _registration(tmp_path)
    registration.update(None, now_ms=100)
    folder = table / READERS_DIR
    (folder / f"{QID}.json").unlink()
    folder.rmdir()
    folder.write_text("not a folder")  # every write fails now
    with caplog.at_level(logging.WARNING, logger="sparkonce.delta.reader_listener"):
        registration.update(9, now_ms=200)
    assert registration.reader.table_version == 3
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"could not register the reader query {QID} on {table} at table_version 9"
    ]
