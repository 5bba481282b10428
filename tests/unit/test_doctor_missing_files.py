"""The doctor finds committed data files that are gone or changed (issue 21): the damage a commit step that
deleted its own committed files left, which the doctor used to call "No findings" and "safe"."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.ops.doctor import diagnose
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

QID = "11111111-2222-3333-4444-555555555555"


def _added(table: Path, table_version: int) -> list[Path]:
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return [table / unquote(json.loads(line)["add"]["path"]) for line in lines if '"add"' in line]


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, Path]:
    """Three batches; batch 1's file deleted (table version 1), batch 2's file cut short (table version 2)."""
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    table = tmp_path / "raw"
    for b in range(3):
        stream_commit(table, QID, b, raw_rows("events", 0, range(b * 10, (b + 1) * 10)))
    (gone,) = _added(table, 1)
    os.remove(gone)
    (cut,) = _added(table, 2)
    cut.write_bytes(cut.read_bytes()[:-10])
    return cp, table


def test_missing_and_resized_files_name_their_versions_batches_and_the_way_back(damaged: tuple[Path, Path]) -> None:
    cp, table = damaged
    report = diagnose(cp, tables=[str(table)])
    (finding,) = [f for f in report.findings if f.code == "delta-missing-files"]
    assert finding.severity == "error"
    assert finding.details["count"] == 2
    assert finding.details["table_versions"] == [1, 2]
    assert finding.details["batches"] == [{"query_id": QID, "batch_id": 1}, {"query_id": QID, "batch_id": 2}]
    sizes = sorted((f["found_size"] is None, f["size"] - (f["found_size"] or 0)) for f in finding.details["files"])
    assert sizes == [(False, 10), (True, sizes[1][1])]
    assert "1 missing" in finding.message and "1 of another size" in finding.message
    assert "restore the table to table version 0" in finding.fix and "sparkonce replay" in finding.fix
    assert "unsafe" in report.next_start and "safe." not in report.next_start.replace("unsafe", "")


def test_a_healthy_table_has_no_such_finding(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(2), committed=range(2))
    table = tmp_path / "raw"
    for b in range(2):
        stream_commit(table, QID, b, raw_rows("events", 0, range(b * 10, (b + 1) * 10)))
    report = diagnose(cp, tables=[str(table)])
    assert [f.code for f in report.findings if f.code == "delta-missing-files"] == []
    assert report.next_start.endswith("safe.")


def test_cli_exits_1_and_says_what_is_missing(damaged: tuple[Path, Path]) -> None:
    cp, table = damaged
    result = CliRunner().invoke(cli, ["doctor", str(cp), "--table", str(table)])
    assert result.exit_code == 1, result.output
    assert "delta-missing-files" in result.output
    assert "No findings" not in result.output
    assert "table version(s) 1-2" in result.output
