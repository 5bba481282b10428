"""Expired log cleanup (``delta.logRetentionDuration``), by Delta's rule, on real tables read back by delta-rs."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.txn.log_cleanup import LogFile, cleanup_expired_logs, expired_log_files
from sparkonce.errors import DeltaLogError, VersionNotFoundError
from sparkonce.storage import table_location

DAY_MS = 86_400_000
NOW_MS = 1_790_000_000_000 + 15 * 3_600_000  # an afternoon, UTC
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}


def _files(*mtimes: int) -> list[LogFile]:
    return [LogFile(f"{v:020d}.json", v, t) for v, t in enumerate(mtimes)]


def _versions(names: list[str]) -> list[int]:
    return [int(n[:20]) for n in names]


def test_files_old_enough_and_below_the_checkpoint_go() -> None:
    assert _versions(expired_log_files(_files(0, 1, 2, 3, 4), cutoff_ms=2, max_table_version=10)) == [0, 1, 2]
    assert _versions(expired_log_files(_files(0, 1, 2, 3, 4), cutoff_ms=100, max_table_version=2)) == [0, 1, 2]
    assert expired_log_files(_files(5, 6), cutoff_ms=4, max_table_version=10) == []


def test_a_clock_step_back_keeps_the_files_adjusted_to_a_newer_time() -> None:
    # version 2 and 3 were written with a clock behind version 1's: they count as 11 and 12 ms, and go only with
    # version 1 when the last of them (12) is old enough
    skewed = _files(0, 10, 8, 9, 20)
    assert _versions(expired_log_files(skewed, cutoff_ms=10, max_table_version=10)) == [0]
    assert _versions(expired_log_files(skewed, cutoff_ms=11, max_table_version=10)) == [0]
    assert _versions(expired_log_files(skewed, cutoff_ms=12, max_table_version=10)) == [0, 1, 2, 3]
    assert _versions(expired_log_files(skewed, cutoff_ms=12, max_table_version=2)) == [0]


def test_a_checkpoint_and_the_commit_of_the_same_version_are_not_adjusted() -> None:
    files = [
        LogFile(f"{9:020d}.json", 9, 5),
        LogFile(f"{10:020d}.checkpoint.parquet", 10, 7),
        LogFile(f"{10:020d}.json", 10, 7),
        LogFile(f"{11:020d}.json", 11, 9),
    ]
    assert expired_log_files(files, cutoff_ms=8, max_table_version=10) == [
        f"{9:020d}.json",
        f"{10:020d}.checkpoint.parquet",
        f"{10:020d}.json",
    ]


def _table(tmp_path: Path, commits: int, checkpoint_at: int, configuration: dict[str, str] | None = None) -> Path:
    """A table with ``commits`` appends (table versions 0..commits-1) and a delta-rs checkpoint at ``checkpoint_at``."""
    path = tmp_path / "t"
    for v in range(commits):
        data = pa.table({"id": pa.array([v], pa.int64())})
        write_deltalake(str(path), data, mode="append", configuration=configuration if v == 0 else None)
        if v == checkpoint_at:
            DeltaTable(str(path)).create_checkpoint()
    return path


def _age(path: Path, *, days: float, versions: range) -> None:
    """Date the log files of ``versions`` about ``days`` before NOW_MS, one second apart in table-version order
    (the last of them exactly ``days`` before; equal times would make Delta's rule treat them as one group)."""
    for f in (path / "_delta_log").iterdir():
        if f.name[:20].isdigit() and int(f.name[:20]) in versions:
            when = (NOW_MS - days * DAY_MS) / 1000 - (versions[-1] - int(f.name[:20]))
            os.utime(f, (when, when))


def test_equal_times_make_one_group_that_goes_only_with_its_newest_file(tmp_path: Path) -> None:
    path = _table(tmp_path, 12, 10)
    when = (NOW_MS - 40 * DAY_MS) / 1000
    for f in (path / "_delta_log").iterdir():
        os.utime(f, (when, when))  # as on a store whose times have one-second resolution and a fast writer
    result = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)
    assert result.deleted == ()  # versions 1..11 count as 1..11 ms after version 0, and 10 and 11 must stay


def _log_names(path: Path) -> list[str]:
    return sorted(f.name for f in (path / "_delta_log").iterdir() if f.name[:20].isdigit())


def test_cleanup_removes_expired_versions_and_the_table_still_reads(tmp_path: Path) -> None:
    path = _table(tmp_path, 14, 10)
    _age(path, days=40, versions=range(0, 12))
    _age(path, days=1, versions=range(12, 14))
    before = sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist())

    result = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)

    assert _versions(list(result.deleted)) == list(range(10))
    assert result.cutoff_ms == (NOW_MS - 30 * DAY_MS) // DAY_MS * DAY_MS
    assert _log_names(path) == [f"{10:020d}.checkpoint.parquet"] + [f"{v:020d}.json" for v in range(10, 14)]
    assert sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist()) == before == list(range(14))
    assert DeltaTable(str(path), version=10).version() == 10
    log = DeltaLog(path)
    assert log.earliest_version() == 10
    assert sorted(log.snapshot().files) == sorted(log.snapshot(13).files)
    assert len(log.snapshot(10).files) == 11
    with pytest.raises(
        VersionNotFoundError,
        match=r"^\[DELTA_VERSION_NOT_FOUND\] Cannot time travel Delta table to version 4\. Available versions: "
        r"\[10, 13\]\. .*versions before 10 were removed from the log after delta\.logRetentionDuration",
    ):
        log.snapshot(4)


def test_nothing_younger_than_the_retention_goes(tmp_path: Path) -> None:
    path = _table(tmp_path, 12, 10)
    _age(path, days=29, versions=range(0, 12))
    result = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)
    assert result.deleted == ()
    assert len(_log_names(path)) == 13


def test_the_table_retention_property_counts_and_the_cutoff_is_midnight(tmp_path: Path) -> None:
    path = _table(tmp_path, 12, 10)
    config = {"delta.logRetentionDuration": "interval 2 days"}
    # 2 days and 1 hour old, but not before midnight two days ago (NOW_MS is 15:00): kept
    _age(path, days=2 + 1 / 24, versions=range(0, 12))
    assert cleanup_expired_logs(table_location(str(path)), config, PROTOCOL, now_ms=NOW_MS).deleted == ()
    _age(path, days=2 + 16 / 24, versions=range(0, 12))  # 23:00 three days ago: before that midnight
    result = cleanup_expired_logs(table_location(str(path)), config, PROTOCOL, now_ms=NOW_MS)
    assert _versions(list(result.deleted)) == list(range(10))


def test_cleanup_off_or_without_a_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    path = _table(tmp_path, 12, 10)
    _age(path, days=400, versions=range(0, 12))
    off = cleanup_expired_logs(
        table_location(str(path)), {"delta.enableExpiredLogCleanup": "false"}, PROTOCOL, now_ms=NOW_MS
    )
    assert (off.deleted, off.skipped) == ((), "delta.enableExpiredLogCleanup is false")
    protected = cleanup_expired_logs(
        table_location(str(path)),
        {},
        {"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": ["checkpointProtection"]},
        now_ms=NOW_MS,
    )
    assert (protected.deleted, protected.skipped) == ((), "the table has the checkpointProtection feature")
    (path / "_delta_log" / "_last_checkpoint").unlink()
    none = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)
    assert (none.deleted, none.skipped) == ((), "no _last_checkpoint")
    assert len(_log_names(path)) == 13


def test_a_last_checkpoint_naming_a_missing_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    path = _table(tmp_path, 12, 10)
    _age(path, days=400, versions=range(0, 12))
    (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").unlink()
    result = cleanup_expired_logs(table_location(str(path)), {}, PROTOCOL, now_ms=NOW_MS)
    assert result.deleted == ()
    assert result.skipped == "_last_checkpoint names table version 10, whose checkpoint is missing or incomplete"


def test_a_bad_retention_is_named(tmp_path: Path) -> None:
    path = _table(tmp_path, 11, 10)
    with pytest.raises(DeltaLogError, match=r"delta\.logRetentionDuration = 'forever'"):
        cleanup_expired_logs(
            table_location(str(path)), {"delta.logRetentionDuration": "forever"}, PROTOCOL, now_ms=NOW_MS
        )


def test_the_latest_snapshot_starts_from_the_last_checkpoint_without_listing_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _table(tmp_path, 14, 10)
    log = DeltaLog(path)
    full = log.snapshot(13)  # an explicit table version: the full listing
    assert log.latest_version() == 13

    def no_listing(self: DeltaLog) -> list[str] | None:
        raise AssertionError("listed _delta_log")

    monkeypatch.setattr(DeltaLog, "_names", no_listing)
    log = DeltaLog(path)  # opening checks the table without listing too
    quick = log.snapshot()
    assert (quick.table_version, quick.checkpoint_version, quick.notes) == (13, 10, ())
    assert quick.files == full.files and quick.metadata == full.metadata and quick.txns == full.txns
    assert log.latest_version() == 13
    monkeypatch.undo()

    (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").write_bytes(b"PAR1 garbage")
    fallback = DeltaLog(path).snapshot()  # the checkpoint it names is unreadable: the listing decides
    assert (fallback.table_version, fallback.checkpoint_version) == (13, None)
    assert set(fallback.files) == set(full.files)  # replayed from the JSON commits (their actions carry more keys)


def test_a_fast_retention_clock_ages_the_log_as_a_longer_run_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPARKONCE_RETENTION_CLOCK (sparkonce.delta.log.clock): from its origin the retention clock runs RATE times as
    fast, and log files' times are mapped the same way, so files written a real minute apart count as written two
    hours apart at 120x: those up to the clock's midnight go, the rest stay."""
    import time

    from sparkonce.delta.log import clock

    path = _table(tmp_path, 14, 2)
    origin = NOW_MS // DAY_MS * DAY_MS - 3 * DAY_MS + 20 * 3_600_000  # 20:00 three days before NOW_MS
    for f in (path / "_delta_log").iterdir():
        if f.name[:20].isdigit():  # version v written v real minutes after the origin
            when = (origin + int(f.name[:20]) * 60_000) / 1000
            os.utime(f, (when, when))
    monkeypatch.setattr(time, "time", lambda: (origin + 14 * 60_000) / 1000)  # 14 real minutes after the origin
    config = {"delta.logRetentionDuration": "interval 10 minutes"}
    assert cleanup_expired_logs(table_location(str(path)), config, PROTOCOL).deleted == ()  # the real clock

    monkeypatch.setenv(clock.CLOCK_VARIABLE, f"{origin}:120")
    assert clock.clock_ms(origin + 60_000) == origin + 2 * 3_600_000
    assert clock.clock_ms(origin - 60_000) == origin - 60_000  # before the origin: the real time
    assert clock.now_ms() == origin + 28 * 3_600_000  # 00:00 two days after the origin's day
    result = cleanup_expired_logs(table_location(str(path)), config, PROTOCOL)
    # version v at 20:00 + 2v clock-hours: the cut-off is midnight after the origin's day, so 0 (20:00), 1 (22:00)
    # and 2 (00:00, not after the cut-off) expired; 3 (02:00) did not. 0 and 1 go; 2, the checkpoint 3 onward are
    # rebuilt from, stays (as in delta-spark)
    assert result.cutoff_ms == origin + 4 * 3_600_000
    assert _versions(list(result.deleted)) == [0, 1]
    assert sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist()) == list(range(14))


@pytest.mark.parametrize("value", ["123", "abc:2", "123:0.5", "123:inf", "123:nan"])
def test_a_malformed_retention_clock_is_named(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkonce.delta.log import clock
    from sparkonce.errors import OptionError

    monkeypatch.setenv(clock.CLOCK_VARIABLE, value)
    with pytest.raises(OptionError, match=r"SPARKONCE_RETENTION_CLOCK.*ORIGIN_MS:RATE"):
        clock.now_ms()


def test_checkpoint_tombstones_expire_on_the_retention_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``remove`` an hour old stays in a checkpoint under Delta's default week of
    ``delta.deletedFileRetentionDuration``; on a retention clock running 200x that hour counts as 200 hours."""
    import time

    from sparkonce.delta.log import clock
    from sparkonce.delta.log.log_checkpoint import checkpoint_actions

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    write_deltalake(str(path), pa.table({"id": [2]}), mode="overwrite")  # removes version 0's file
    snapshot = DeltaLog(path).snapshot()
    (deleted_at,) = [int(r["deletionTimestamp"]) for r in snapshot.removes.values()]
    monkeypatch.setattr(time, "time", lambda: (deleted_at + 3_600_000) / 1000)

    def tombstones() -> int:
        return sum(1 for action in checkpoint_actions(snapshot) if "remove" in action)

    assert tombstones() == 1
    monkeypatch.setenv(clock.CLOCK_VARIABLE, f"{deleted_at - 60_000}:200")
    assert tombstones() == 0
    monkeypatch.setenv(clock.CLOCK_VARIABLE, f"{deleted_at - 60_000}:100")  # 100 hours: still kept
    assert tombstones() == 1
