"""Compaction while a streaming query appends to the same table: both keep committing, the optimize commit is
made on top of the appends that landed while it ran, no row is lost or doubled, and a streaming reader of the
table (from table version 0, through the OPTIMIZE commits) sees each row once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparkonce.delta.ops import optimize
from sparkonce.delta.ops.optimize import compact

pytestmark = [pytest.mark.spark]


def _values(table: Path) -> list[int]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(table)).to_pyarrow_table(columns=["value"]).column("value").to_pylist())


def _files(table: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(table)).file_uris())


def test_optimize_races_a_running_stream(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    table, copy = tmp_path / "events", tmp_path / "copy"
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start(str(table))
    )
    rewrite = optimize._rewrite_bins

    def rewrite_then_let_the_stream_commit(*args, **kwargs):  # type: ignore[no-untyped-def]
        """The race, made certain rather than left to timing: once the compaction has planned and written its
        files, wait for a stream commit before the compaction commits."""
        commits = len(list((table / "_delta_log").glob("*.json")))
        written = rewrite(*args, **kwargs)
        waited_until = time.monotonic() + 300
        while len(list((table / "_delta_log").glob("*.json"))) <= commits:
            assert time.monotonic() < waited_until and query.isActive, query.exception()
            time.sleep(0.05)
        return written

    monkeypatch.setattr(optimize, "_rewrite_bins", rewrite_then_let_the_stream_commit)
    results = []
    try:
        deadline = time.monotonic() + 900  # generous: the machine running the suite may be loaded
        # Until a compaction's commit landed after stream commits made while it ran (a rebase), twice.
        while sum(r.table_version > r.planned_table_version + 1 for r in results if r.table_version) < 2:
            assert time.monotonic() < deadline, f"no compaction raced the stream in time: {results}"
            assert query.isActive, query.exception()
            # A commit file, not just the folder: the first commit stages its file inside _delta_log before linking.
            if any((table / "_delta_log").glob("0*.json")) and _files(table) >= 3:
                results.append(compact(spark, str(table), target_file_size=64 * 1024 * 1024))
        versions_after = len(list((table / "_delta_log").glob("*.json")))
        poll_until = time.monotonic() + 120
        while len(list((table / "_delta_log").glob("*.json"))) < versions_after + 2:  # the stream goes on
            assert time.monotonic() < poll_until and query.isActive, query.exception()
            time.sleep(0.1)
    finally:
        query.stop()
    assert query.exception() is None

    values = _values(table)
    assert values and values == list(range(len(values)))  # every generated row once: nothing lost or doubled
    assert all(r.files_removed > 1 and r.files_added == 1 for r in results if r.table_version is not None)

    reader = (
        spark.readStream.format("delta")
        .option("startingVersion", 0)
        .load(str(table))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck-copy"))
        .trigger(availableNow=True)
        .start(str(copy))
    )
    reader.awaitTermination()
    assert _values(copy) == values
