"""``sparkonce doctor``, ``history`` and ``verify`` through click's runner: exit codes, output, JSON, HTML."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.checkpoint.tables import RecordedTable, record_tables
from sparkonce.cli.main import cli
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

QID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()  # output is not a terminal, as when piped: every value must be printed in full


@pytest.fixture
def healthy(tmp_path: Path) -> tuple[Path, Path]:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    table = tmp_path / "raw"
    for b in range(3):
        stream_commit(table, QID, b, raw_rows("events", 0, range(b * 10, (b + 1) * 10)))
    return cp, table


def test_doctor_healthy_exits_0(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    cp, table = healthy
    result = runner.invoke(cli, ["doctor", str(cp), "--table", str(table)])
    assert result.exit_code == 0, result.output
    assert "Batch 2 is planned and committed" in result.output
    assert "No findings" in result.output
    assert QID in result.output


@pytest.mark.parametrize(
    ("damage", "code", "exit_code"),
    [
        ("delete-metadata", "metadata-missing", 1),
        ("garble-offsets", "file-malformed", 1),
        ("add-tmp", "temp-files", 0),  # info only
        ("uncommitted-batch", None, 0),
    ],
)
def test_doctor_exit_codes(
    runner: CliRunner, healthy: tuple[Path, Path], damage: str, code: str | None, exit_code: int
) -> None:
    cp, table = healthy
    if damage == "delete-metadata":
        (cp / "metadata").unlink()
    elif damage == "garble-offsets":
        (cp / "offsets" / "1").write_text("v1\n{trunc")
    elif damage == "add-tmp":
        (cp / "commits" / ".3.0a1b2c3d-0000-4000-8000-000000000000.tmp").write_text("")
    else:
        (cp / "commits" / "2").unlink()
    result = runner.invoke(cli, ["doctor", str(cp), "--table", str(table), "--json"])
    assert result.exit_code == exit_code, result.output
    data = json.loads(result.output)
    assert data["schema_version"] == 1 and data["kind"] == "doctor"
    assert data["healthy"] is (exit_code == 0)
    found = {f["code"] for f in data["findings"]}
    assert (code in found) if code else not found
    if damage == "uncommitted-batch":
        assert "the write will be skipped: safe" in data["next_start"]


def test_doctor_json_schema(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    cp, table = healthy
    data = json.loads(runner.invoke(cli, ["doctor", str(cp), "--table", str(table), "--json"]).output)
    assert set(data) == {
        "schema_version",
        "kind",
        "severity",
        "healthy",
        "checkpoint_dir",
        "query_id",
        "last_planned",
        "last_committed",
        "next_start",
        "findings",
        "tables",
        "kafka",
        "timeline",
        "generated_at_ms",
        "unread_checkpoint_files",
        "table_origin",
        "recorded_tables",
    }
    assert data["tables"][0]["txn_version"] == 2 and data["tables"][0]["kind"] == "delta"
    assert [(b["batch_id"], b["planned"], b["committed"], b["rows"]) for b in data["timeline"]] == [
        (0, True, True, 10),
        (1, True, True, 10),
        (2, True, True, 10),
    ]


def test_doctor_html_is_self_contained(runner: CliRunner, healthy: tuple[Path, Path], tmp_path: Path) -> None:
    cp, table = healthy
    out = tmp_path / "report.html"
    result = runner.invoke(cli, ["doctor", str(cp), "--table", str(table), "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "batch 2: 10 rows" in page
    for external in ("<script", "<link", "http://", "https://", "src="):
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.parametrize(
    "args",
    [
        ["doctor", "/no/such/checkpoint"],
        ["doctor", "{cp}", "--table", "/no/such/table"],
        ["history", "/no/such/table"],
        ["verify", "--table", "/no/such/table", "--range", "t:0:0-1"],
        ["verify", "--table", "{table}"],
        ["verify", "--table", "{table}", "--topic", "t"],
        ["verify", "--table", "{table}", "--range", "nonsense"],
        ["history", "{table}", "--limit", "0"],
    ],
)
def test_usage_errors_exit_2(runner: CliRunner, healthy: tuple[Path, Path], args: list[str]) -> None:
    cp, table = healthy
    result = runner.invoke(cli, [a.format(cp=cp, table=table) for a in args])
    assert result.exit_code == 2, result.output


def test_table_that_is_not_a_table_exits_3(runner: CliRunner, healthy: tuple[Path, Path], tmp_path: Path) -> None:
    cp, _ = healthy
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli, ["doctor", str(cp), "--table", str(empty)])
    assert result.exit_code == 3
    assert "neither a Delta table" in result.output
    assert runner.invoke(cli, ["history", str(empty)]).exit_code == 3


def test_history(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    _, table = healthy
    result = runner.invoke(cli, ["history", str(table), "--limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kind"] == "history" and data["latest_table_version"] == 2
    assert [
        (e["table_version"], e["operation"], e["query_id"], e["batch_id"], e["added_rows"]) for e in data["entries"]
    ] == [
        (2, "STREAMING UPDATE", QID, 2, 10),
        (1, "STREAMING UPDATE", QID, 1, 10),
    ]
    text = runner.invoke(cli, ["history", str(table)])
    assert text.exit_code == 0 and "STREAMING UPDATE" in text.output and QID in text.output


def test_history_of_a_garbled_log_names_the_file(runner: CliRunner, fixtures_dir: Path, tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(fixtures_dir / "delta-tables" / "delta-0.2.0", table)
    (table / "_delta_log" / f"{3:020d}.json").write_text('{"commitInfo":')
    result = runner.invoke(cli, ["history", str(table)])
    assert result.exit_code == 1
    assert "00000000000000000003.json" in result.output and "table version 3" in result.output
    assert "Traceback" not in result.output


def test_verify(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    _, table = healthy
    ok = runner.invoke(cli, ["verify", "--table", str(table), "--range", "events:0:0-30", "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["kind"] == "verify" and data["partitions"][0]["rows"] == 30 and data["findings"] == []
    holes = runner.invoke(cli, ["verify", "--table", str(table), "--range", "events:0:0-35"])
    assert holes.exit_code == 1 and "offsets-missing" in holes.output


def test_doctor_and_verify_use_the_tables_the_checkpoint_records(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    cp, table = healthy
    alone = runner.invoke(cli, ["verify", "--checkpoint", str(cp), "--range", "events:0:0-30"])
    assert alone.exit_code == 2 and "records 0 Delta sink table(s)" in alone.output
    record_tables(
        cp,
        [
            RecordedTable("sink", "delta", str(table)),
            RecordedTable("source", "sparkonce.kafka", "localhost:1", {"subscribe": "events"}),
        ],
    )
    ok = runner.invoke(cli, ["verify", "--checkpoint", str(cp), "--range", "events:0:0-30", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["table_path"] == str(table)
    both = runner.invoke(cli, ["verify", "--checkpoint", str(cp), "--table", str(table), "--range", "events:0:0-30"])
    assert both.exit_code == 2
    doctor = json.loads(runner.invoke(cli, ["doctor", str(cp), "--json"]).output)
    assert doctor["table_origin"] == "recorded" and [t["table_path"] for t in doctor["tables"]] == [str(table)]
    assert doctor["healthy"] and doctor["findings"] == []
    shutil.rmtree(table)  # the recorded sink deleted after batches were committed: an error, not a usage error
    gone = runner.invoke(cli, ["doctor", str(cp), "--json"])
    assert gone.exit_code == 1
    assert {f["code"] for f in json.loads(gone.output)["findings"]} == {"recorded-table-missing", "no-table-examined"}


# ------------------------------------------------------------------------------------------ piped output
def line_with(output: str, *parts: str) -> str:
    """The one output line holding every part (what `| grep` would find), or fail showing the output."""
    lines = [line for line in output.splitlines() if all(p in line for p in parts)]
    assert len(lines) == 1, output
    return lines[0]


def test_piped_history_prints_each_commit_on_one_line(runner: CliRunner, healthy: tuple[Path, Path]) -> None:
    _, table = healthy
    result = runner.invoke(cli, ["history", str(table)])
    assert result.exit_code == 0, result.output
    for batch in range(3):
        line = line_with(result.output, f" {batch} ", "STREAMING UPDATE", QID, f"{QID}={batch}")
        assert line.split()[0] == str(batch)  # the table version leads the line
    assert "│" not in result.output  # plain columns, no box drawing


def test_piped_doctor_prints_findings_and_next_start_in_full(runner: CliRunner, tmp_path: Path) -> None:
    long_dir = tmp_path / ("a-checkpoint-folder-with-a-long-name-" * 3)
    cp = make_checkpoint(long_dir, planned=range(4), committed=range(2))
    result = runner.invoke(cli, ["doctor", str(cp)])
    assert result.exit_code == 1, result.output
    line_with(result.output, "Next start:", "Batch 3 is planned but not committed", "does not re-run them.")
    finding = line_with(result.output, "uncommitted-batches")
    assert "batches 2-3 are planned but only batch 1 is committed" in finding
    assert finding.rstrip().endswith("otherwise their data is lost")  # the fix column, not cut
    line_with(result.output, f"checkpoint {cp}")


def test_piped_verify_prints_full_rows(runner: CliRunner, tmp_path: Path) -> None:
    table = tmp_path / "raw"
    topic = "sensor-readings-from-the-north-building-" * 3
    stream_commit(table, QID, 0, raw_rows(topic, 7, range(5)))
    result = runner.invoke(cli, ["verify", "--table", str(table), "--range", f"{topic}:7:0-8"])
    assert result.exit_code == 1, result.output
    row = line_with(result.output, topic, "[0, 8)", "0..4")
    assert row.split() == [topic, "7", "[0,", "8)", "0..4", "5", "0", "3", "0"]
    line_with(result.output, "offsets-missing", f"{topic}-7: 3 offset(s) of [0, 8)")


def test_piped_output_ignores_a_columns_variable_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """COLUMNS (exported by some shells and test runners) describes a terminal that piped output does not go to."""
    import io

    from sparkonce.cli.common import _PipeAwareConsole

    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    _PipeAwareConsole(file=out, highlight=False).print("word " * 30)
    assert out.getvalue() == "word " * 30 + "\n"
    narrow = io.StringIO()
    _PipeAwareConsole(file=narrow, width=40, highlight=False).print("word " * 30)
    assert len(narrow.getvalue().splitlines()) > 1  # a width set on the console itself still wraps
