"""The retention guard: the reader registry under ``_delta_log/_sparkonce/readers/``, the hold-back it computes, and
log cleanup and VACUUM keeping what a registered reader still needs, on real tables read back by delta-rs."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.ops.vacuum import vacuum
from sparkonce.delta.txn.log_cleanup import cleanup_expired_logs
from sparkonce.delta.txn.readers import (
    READERS_DIR,
    RETENTION_PROPERTY,
    RegisteredReader,
    forget_reader,
    held_data_files,
    held_log_files,
    hold_back,
    read_readers,
    reader_retention_ms,
    reader_states,
    register_reader,
)
from sparkonce.errors import DeltaLogError
from sparkonce.storage import table_location

DAY_MS = 86_400_000
NOW_MS = 1_790_000_000_000 + 15 * 3_600_000
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
Q1, Q2 = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))


def _reader(query_id: str, table_version: int, *, updated_at_ms: int = NOW_MS) -> RegisteredReader:
    return RegisteredReader(query_id, f"/ck/{query_id[-1]}", "delta", table_version, updated_at_ms, "p.stage")


def _table(tmp_path: Path, commits: int, checkpoints: tuple[int, ...] = ()) -> Path:
    path = tmp_path / "t"
    for v in range(commits):
        write_deltalake(str(path), pa.table({"id": pa.array([v], pa.int64())}), mode="append")
        if v in checkpoints:
            DeltaTable(str(path)).create_checkpoint()
    return path


def test_a_registration_round_trips_and_is_rewritten_in_place(tmp_path: Path) -> None:
    path = _table(tmp_path, 1)
    register_reader(str(path), _reader(Q1, 0, updated_at_ms=5))
    register_reader(str(path), _reader(Q1, 3, updated_at_ms=9))
    register_reader(str(path), _reader(Q2, 1))
    readers, problems = read_readers(str(path))
    assert problems == []
    assert readers == [_reader(Q2, 1), _reader(Q1, 3, updated_at_ms=9)]  # by table version
    assert sorted(os.listdir(path / READERS_DIR)) == [f"{Q1}.json", f"{Q2}.json"]  # no temporary file left
    assert forget_reader(str(path), Q1) is True
    assert forget_reader(str(path), Q1) is False
    assert read_readers(str(path))[0] == [_reader(Q2, 1)]


def test_delta_readers_ignore_the_registry(tmp_path: Path) -> None:
    path = _table(tmp_path, 3, checkpoints=(1,))
    register_reader(str(path), _reader(Q1, 0))
    table = DeltaTable(str(path))
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]
    assert [h["version"] for h in table.history()] == [2, 1, 0]
    table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
    table.create_checkpoint()
    table.cleanup_metadata()
    assert (path / READERS_DIR / f"{Q1}.json").is_file()
    assert DeltaTable(str(path)).version() == 2


def test_a_bad_registration_is_named_and_holds_nothing(tmp_path: Path) -> None:
    path = _table(tmp_path, 1)
    register_reader(str(path), _reader(Q1, 0))
    (path / READERS_DIR / f"{Q2}.json").write_text('{"queryId": "x"}')
    readers, problems = read_readers(str(path))
    assert readers == [_reader(Q1, 0)]
    assert problems == [f"{path / READERS_DIR / Q2}.json: needs queryId, checkpointDir and source (strings)"]
    with pytest.raises(DeltaLogError, match=r"query id '\.\./x' is not a UUID"):
        register_reader(str(path), _reader("../x", 0))


def test_readers_past_the_retention_stop_holding_back() -> None:
    fresh, stale = _reader(Q1, 7), _reader(Q2, 2, updated_at_ms=NOW_MS - 8 * DAY_MS)
    hold = hold_back([fresh, stale], now_ms=NOW_MS, retention_ms=7 * DAY_MS)
    assert hold.active == (fresh,) and hold.expired == (stale,) and hold.table_version == 7
    both = hold_back([fresh, stale], now_ms=NOW_MS, retention_ms=9 * DAY_MS)
    assert both.active == (stale, fresh) and both.table_version == 2
    assert hold_back([], now_ms=NOW_MS, retention_ms=1).table_version is None


@pytest.mark.parametrize(("value", "ms"), [(None, 7 * DAY_MS), ("interval 2 hours", 7_200_000), ("0 days", 0)])
def test_the_reader_retention_is_a_table_property(value: str | None, ms: int) -> None:
    assert reader_retention_ms({} if value is None else {RETENTION_PROPERTY: value}) == ms


def test_a_bad_reader_retention_is_named() -> None:
    with pytest.raises(DeltaLogError, match=r"sparkonce\.readerRetentionDuration = 'soon'"):
        reader_retention_ms({RETENTION_PROPERTY: "soon"})


def test_log_files_are_held_from_the_newest_checkpoint_at_or_before_each_reader() -> None:
    names = [f"{v:020d}.json" for v in range(12)] + [f"{10:020d}.checkpoint.parquet"]
    names.sort()
    hold = hold_back([_reader(Q1, 7), _reader(Q2, 11)], now_ms=NOW_MS, retention_ms=DAY_MS)
    limit, held = held_log_files(hold, names, [5, 10])
    assert limit == 4  # checkpoint 5 and every commit after it stay for the reader at table version 7
    assert [(h.reader.query_id, [int(n[:20]) for n in h.files]) for h in held] == [
        (Q1, [5, 6, 7, 8, 9, 10, 10, 11]),
        (Q2, [10, 10, 11]),
    ]
    no_checkpoint, _ = held_log_files(hold, names, [])
    assert no_checkpoint == -1  # nothing before the reader can rebuild its snapshot: everything stays
    assert held_log_files(hold_back([], now_ms=NOW_MS, retention_ms=1), names, [5]) == (None, ())


def test_data_files_removed_at_or_after_a_reader_are_held() -> None:
    hold = hold_back([_reader(Q1, 4), _reader(Q2, 6)], now_ms=NOW_MS, retention_ms=DAY_MS)
    removed_at = {"a.parquet": 3, "b.parquet": 4, "c.parquet": 6}
    held, per_reader = held_data_files(hold, ["a.parquet", "b.parquet", "c.parquet", "orphan.parquet"], removed_at)
    assert held == {"b.parquet", "c.parquet"}
    assert [(h.reader.query_id, h.files) for h in per_reader] == [
        (Q1, ("b.parquet", "c.parquet")),
        (Q2, ("c.parquet",)),
    ]


def _age_log(path: Path, days: float) -> None:
    for f in (path / "_delta_log").iterdir():
        if f.name[:20].isdigit():
            when = (NOW_MS - days * DAY_MS) / 1000 + int(f.name[:20])
            os.utime(f, (when, when))


def test_log_cleanup_keeps_what_an_active_reader_needs_and_says_which(tmp_path: Path) -> None:
    path = _table(tmp_path, 14, checkpoints=(5, 10))
    _age_log(path, 40)
    register_reader(str(path), _reader(Q1, 7))
    register_reader(str(path), _reader(Q2, 1, updated_at_ms=NOW_MS - 8 * DAY_MS))  # expired: holds nothing

    result = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)

    assert [int(n[:20]) for n in result.deleted] == list(range(5))
    assert [(h.reader.query_id, h.files[0], len(h.files)) for h in result.held_back] == [
        (Q1, f"{5:020d}.checkpoint.parquet", 6)
    ]
    assert [r.query_id for r in result.expired_readers] == [Q2]
    assert sorted(DeltaTable(str(path), version=7).to_pyarrow_table().column("id").to_pylist()) == list(range(8))

    forced = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS, force=True)
    assert [int(n[:20]) for n in forced.deleted] == [5, 5, 6, 7, 8, 9]  # checkpoint 5 too
    assert forced.held_back == ()


def _files(path: Path, version: int | None = None) -> set[str]:
    root = f"{path}/"
    return {u.removeprefix("file://").removeprefix(root) for u in DeltaTable(str(path), version=version).file_uris()}


def test_vacuum_keeps_files_a_reader_still_reads_and_force_deletes_them(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [0]}))
    first = _files(path)
    write_deltalake(str(path), pa.table({"id": [1]}), mode="overwrite")  # table version 1 removes version 0's file
    for v in range(2, 4):
        write_deltalake(str(path), pa.table({"id": [v]}), mode="append")
    needed = _files(path)  # live from version 3 on: the reader at version 2 reads 2 and 3 (and, conservatively, 1)
    DeltaTable(str(path)).optimize.compact()  # table version 4 removes them
    register_reader(str(path), _reader(Q1, 2, updated_at_ms=int(time.time() * 1000)))

    kept = vacuum(str(path), retention_hours=0, enforce_retention_duration=False, dry_run=False)

    assert set(kept.files) == first  # removed at table version 1, before the reader's
    assert [(h.reader.query_id, set(h.files)) for h in kept.held_back] == [(Q1, needed)]
    assert all((path / f).is_file() for f in needed) and not any((path / f).exists() for f in first)

    forced = vacuum(str(path), retention_hours=0, enforce_retention_duration=False, dry_run=False, force=True)
    assert set(forced.files) == needed and forced.held_back == ()
    assert not any((path / f).exists() for f in needed)


def test_reader_states_name_expired_readers_and_gone_versions(tmp_path: Path) -> None:
    path = _table(tmp_path, 4, checkpoints=(2,))
    now = int(time.time() * 1000)
    register_reader(str(path), _reader(Q1, 3, updated_at_ms=now))
    register_reader(str(path), _reader(Q2, 2, updated_at_ms=now - 8 * DAY_MS))
    states, problems = reader_states(str(path), now_ms=now)
    assert problems == []
    assert [(s.reader.query_id, s.status, s.missing_version) for s in states] == [
        (Q2, "expired", None),
        (Q1, "active", None),
    ]
    os.remove(path / "_delta_log" / f"{2:020d}.json")
    states, _ = reader_states(str(path), now_ms=now)
    assert [(s.reader.query_id, s.status, s.missing_version) for s in states] == [
        (Q2, "versions-gone", 2),
        (Q1, "active", None),
    ]


def test_the_doctor_reports_an_expired_reader_and_one_whose_versions_are_gone(tmp_path: Path) -> None:
    from sparkonce.checkpoint.tables import RecordedTable, record_tables
    from sparkonce.ops.doctor import diagnose
    from tests.unit.doctor_helpers import make_checkpoint

    query_id = "11111111-2222-3333-4444-555555555555"
    path = _table(tmp_path, 4, checkpoints=(2,))
    checkpoint = make_checkpoint(tmp_path / "ck", query_id=query_id, planned=[0], committed=[0])
    record_tables(checkpoint, [RecordedTable("source", "delta", str(path))])
    now = int(time.time() * 1000)

    def codes() -> list[tuple[str, str, int | None]]:
        report = diagnose(checkpoint, now_ms=now)
        return [(f.code, f.severity, f.details.get("missing_version")) for f in report.findings if "reader" in f.code]

    register_reader(str(path), _reader(query_id, 1, updated_at_ms=now))
    register_reader(str(path), _reader(Q2, 0, updated_at_ms=now - 8 * DAY_MS))  # another query's: not ours
    assert codes() == []
    register_reader(str(path), _reader(query_id, 1, updated_at_ms=now - 8 * DAY_MS))
    assert codes() == [("reader-expired", "warning", None)]
    os.remove(path / "_delta_log" / f"{1:020d}.json")
    assert codes() == [("reader-versions-gone", "error", 1)]
