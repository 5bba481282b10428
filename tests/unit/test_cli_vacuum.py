"""``sparkonce vacuum`` through click's runner: lists without --yes, Delta's retention guard, deletes with --yes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from sparkonce.cli.main import cli


def _age(path: Path, hours: float) -> None:
    when = time.time() - hours * 3600
    os.utime(path, (when, when))


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """A table with a 2-hour retention, an orphan 3 hours old and one written just now (a write in flight)."""
    root = tmp_path / "table"
    write_deltalake(
        str(root), pa.table({"id": [1]}), configuration={"delta.deletedFileRetentionDuration": "interval 2 hours"}
    )
    (root / "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet").write_bytes(b"x" * 10)
    _age(root / "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet", 3)
    (root / "in-flight.parquet").write_bytes(b"y")
    return root


def test_without_yes_only_lists(table: Path) -> None:
    result = CliRunner().invoke(cli, ["vacuum", str(table)])
    assert result.exit_code == 0, result.output
    assert "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet" in result.output.splitlines()
    assert "Would delete 1 file(s), 10 bytes." in result.output and "--yes" in result.output
    assert (table / "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet").exists()
    dry = CliRunner().invoke(cli, ["vacuum", str(table), "--dry-run", "--yes"])
    assert dry.exit_code == 0 and "Would delete 1 file(s)" in dry.output
    assert (table / "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet").exists()


def test_yes_deletes_with_the_tables_retention(table: Path) -> None:
    result = CliRunner().invoke(cli, ["vacuum", str(table), "--yes", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["files"] == ["orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet"]
    assert data["retention_hours"] == 2.0 and data["dry_run"] is False
    assert not (table / "orphan-of-a-failed-batch-with-a-long-name-0123456789abcdef.parquet").exists()
    assert (table / "in-flight.parquet").exists()
    assert DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist() == [1]


def test_retention_guard(table: Path) -> None:
    refused = CliRunner().invoke(cli, ["vacuum", str(table), "--retain-hours", "0", "--yes"])
    assert refused.exit_code == 2, refused.output
    assert "option '--retain-hours' = 0.0" in refused.output and "--no-retention-check" in refused.output
    assert "delta.deletedFileRetentionDuration of 2 hours" in refused.output
    assert (table / "in-flight.parquet").exists()
    forced = CliRunner().invoke(cli, ["vacuum", str(table), "--retain-hours", "0", "--no-retention-check", "--yes"])
    assert forced.exit_code == 0, forced.output
    assert not (table / "in-flight.parquet").exists()


def test_not_a_table_exits_3(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["vacuum", str(tmp_path)])
    assert result.exit_code == 3, result.output


def test_each_file_once_by_its_table_relative_path(tmp_path: Path) -> None:
    """A file tombstoned twice (removed, restored, removed again), in a partition whose value the log
    URL-encodes: listed once, relative to the table, in the dry run and after deleting."""
    root = tmp_path / "table"
    data = {"p": ["a b"]}
    write_deltalake(str(root), pa.table({"id": [1], **data}), partition_by=["p"])
    first = sorted(str(f.relative_to(root)) for f in root.rglob("*.parquet"))
    write_deltalake(str(root), pa.table({"id": [2], **data}), partition_by=["p"], mode="overwrite")
    DeltaTable(str(root)).restore(0)
    write_deltalake(str(root), pa.table({"id": [3], **data}), partition_by=["p"], mode="overwrite")
    adds = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).column("path").to_pylist()
    active = {a.rsplit("/", 1)[-1] for a in adds}  # file names are unique (a UUID each)
    stale = sorted(str(f.relative_to(root)) for f in root.rglob("*.parquet") if f.name not in active)
    assert len(stale) == 2 and first[0] in stale
    dry = CliRunner().invoke(cli, ["vacuum", str(root), "--retain-hours", "0", "--no-retention-check", "--json"])
    assert dry.exit_code == 0, dry.output
    listed = json.loads(dry.output)
    assert listed["files"] == stale
    assert listed["bytes"] == sum((root / f).stat().st_size for f in stale)
    text = CliRunner().invoke(cli, ["vacuum", str(root), "--retain-hours", "0", "--no-retention-check", "--dry-run"])
    assert [line for line in text.output.splitlines() if line.endswith(".parquet")] == stale
    done = CliRunner().invoke(
        cli, ["vacuum", str(root), "--retain-hours", "0", "--no-retention-check", "--yes", "--json"]
    )
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert (result["files"], result["bytes"]) == (stale, listed["bytes"])
    assert not any((root / f).exists() for f in stale)
    assert DeltaTable(str(root)).to_pyarrow_table().column("id").to_pylist() == [3]


def _registered(table: Path) -> str:
    """A table version 1 that removes version 0's file, and a stream registered as reading from version 0."""
    from sparkonce.delta.txn.readers import RegisteredReader, register_reader

    write_deltalake(str(table), pa.table({"id": [2]}), mode="overwrite")
    query_id = "00000000-0000-0000-0000-00000000000a"
    now = int(time.time() * 1000)
    register_reader(str(table), RegisteredReader(query_id, "/ck/events", "delta", 0, now, "p.events"))
    return query_id


def test_vacuum_keeps_what_a_registered_reader_needs_unless_forced(table: Path) -> None:
    query_id = _registered(table)
    live = str(DeltaTable(str(table)).file_uris())
    removed = [f for f in os.listdir(table) if f.startswith("part-") and f not in live]
    kept = CliRunner().invoke(cli, ["vacuum", str(table), "--retain-hours", "0", "--no-retention-check", "--yes"])
    assert kept.exit_code == 0, kept.output
    assert (
        f"Kept 1 file(s) for the reader query {query_id} (checkpoint /ck/events) at table version 0; --force "
        "deletes them." in kept.output
    )
    assert all((table / f).exists() for f in removed)
    forced = CliRunner().invoke(
        cli, ["vacuum", str(table), "--retain-hours", "0", "--no-retention-check", "--yes", "--force"]
    )
    assert forced.exit_code == 0, forced.output
    assert "Kept" not in forced.output and not any((table / f).exists() for f in removed)


def test_readers_lists_and_forgets_only_with_yes(table: Path) -> None:
    query_id = _registered(table)
    listed = CliRunner().invoke(cli, ["readers", str(table)])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if line.startswith(query_id))
    assert row.split()[1:5] == ["p.events", "delta", "0", time.strftime("%Y-%m-%d", time.gmtime())]
    assert row.split()[-2:] == ["active", "/ck/events"]
    as_json = json.loads(CliRunner().invoke(cli, ["readers", str(table), "--json"]).output)
    assert [(r["reader"]["query_id"], r["status"]) for r in as_json["readers"]] == [(query_id, "active")]

    plan = CliRunner().invoke(cli, ["readers", str(table), "--forget", query_id])
    assert plan.exit_code == 0 and "Would forget the registration of query" in plan.output
    assert "re-run with --yes" in plan.output
    done = CliRunner().invoke(cli, ["readers", str(table), "--forget", query_id, "--yes"])
    assert done.exit_code == 0 and "Forgot the registration of query" in done.output
    assert "0 registered reader(s)." in CliRunner().invoke(cli, ["readers", str(table)]).output
    unknown = CliRunner().invoke(cli, ["readers", str(table), "--forget", query_id, "--yes"])
    assert unknown.exit_code == 2 and "is not a registered reader of" in unknown.output
