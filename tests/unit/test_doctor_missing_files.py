"""The doctor finds committed files that are gone or changed (issue 21 item 5): the damage a commit step that deleted
its own committed files left, which the doctor used to call "No findings" and "safe".

Real Delta tables written with delta-rs as sparkonce's sink commits (``doctor_helpers.stream_commit``) and Delta's
golden deletion-vector table; no Spark.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from sparkonce.cli.main import cli
from sparkonce.delta.ops.restore import restore_table
from sparkonce.delta.table.deletion_vectors import dv_relative_path
from sparkonce.ops.doctor import DoctorReport, diagnose
from sparkonce.ops.findings import Finding
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

QID = "11111111-2222-3333-4444-555555555555"
DAMAGE_CODES = ("delta-missing-files", "delta-file-size-mismatch")


def _added(table: Path, table_version: int) -> list[Path]:
    """The data files a Delta commit added, sorted."""
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return sorted(table / unquote(json.loads(line)["add"]["path"]) for line in lines if '"add"' in line)


def _write_batches(root: Path, batches: int, *, partition_column: str = "partition") -> tuple[Path, Path]:
    """A checkpoint with ``batches`` committed batches and their table: one Delta commit per batch, each adding two
    files (two Kafka partitions, the table partitioned by ``partition_column``)."""
    cp = make_checkpoint(root / "cp", planned=range(batches), committed=range(batches))
    table = root / "raw"
    for b in range(batches):
        data = pa.concat_tables(
            [raw_rows("events", 0, range(b * 10, b * 10 + 5)), raw_rows("events", 1, range(b * 10 + 5, b * 10 + 10))]
        )
        if partition_column != "partition":
            data = data.append_column(partition_column, data.column("partition"))
        stream_commit(table, QID, b, data, partition_by=[partition_column])
    return cp, table


def _cut(path: Path, nbytes: int = 10) -> None:
    path.write_bytes(path.read_bytes()[:-nbytes])


def _damage(report: DoctorReport) -> dict[str, Finding]:
    return {f.code: f for f in report.findings if f.code in DAMAGE_CODES}


@pytest.fixture
def version0_damaged(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    """Three batches (table versions 0-2); of table version 0's two files one is deleted and one cut short."""
    cp, table = _write_batches(tmp_path, 3)
    gone, cut = _added(table, 0)
    os.remove(gone)
    _cut(cut)
    return cp, table, [gone, cut]


def test_files_of_table_version_0_deleted_and_cut_short(version0_damaged: tuple[Path, Path, list[Path]]) -> None:
    cp, table, (gone, cut) = version0_damaged
    report = diagnose(cp, tables=[str(table)])
    found = _damage(report)
    assert sorted(found) == sorted(DAMAGE_CODES)
    missing, resized = found["delta-missing-files"], found["delta-file-size-mismatch"]
    assert (missing.severity, resized.severity) == ("error", "error")
    rel = {p: p.relative_to(table).as_posix() for p in (gone, cut)}
    assert missing.details["files"] == [
        {
            "path": rel[gone],
            "kind": "data",
            "size": missing.details["files"][0]["size"],
            "found_size": None,
            "table_version": 0,
        }
    ]
    (resized_file,) = resized.details["files"]
    assert resized_file["path"] == rel[cut] and resized_file["kind"] == "data"
    assert resized_file["found_size"] == cut.stat().st_size == resized_file["size"] - 10
    for finding in (missing, resized):
        assert finding.details["count"] == 1
        assert finding.details["table_versions"] == [0]
        assert finding.details["batches"] == [{"query_id": QID, "batch_id": 0, "table_version": 0}]
        assert finding.details["unknown_origin"] == 0
        assert finding.details["restore_table_version"] is None  # nothing before table version 0
        assert finding.details["undone_batches"] == [
            {"query_id": QID, "first_batch_id": 0, "last_batch_id": 2, "count": 3}
        ]
        assert f"Table version(s) 0 added them (query {QID} batch(es) 0)" in finding.message
        assert finding.fix.startswith("table version 0 is damaged, so there is no earlier table version to restore")
        assert f"sparkonce reset {cp} --table {table} --yes" in finding.fix
    assert f"1 data file(s) that table version 2 references are missing, e.g. {rel[gone]}" in missing.message
    assert f"{rel[cut]} ({resized_file['found_size']} bytes; the log records {resized_file['size']})" in resized.message
    assert report.tables[0].damaged_files == 2
    assert not report.healthy and report.severity == "error"
    assert report.next_start.endswith("unsafe (see delta-missing-files, delta-file-size-mismatch).")
    assert ": safe." not in report.next_start


def test_damage_after_table_version_0_names_the_table_version_to_restore(tmp_path: Path) -> None:
    """Batch 1's file deleted, batch 2's cut short: restore to table version 0, write batches 1-2 again."""
    cp, table = _write_batches(tmp_path, 4)
    os.remove(_added(table, 1)[0])
    _cut(_added(table, 2)[1])
    found = _damage(diagnose(cp, tables=[str(table)]))
    assert found["delta-missing-files"].details["table_versions"] == [1]
    assert found["delta-missing-files"].details["batches"] == [{"query_id": QID, "batch_id": 1, "table_version": 1}]
    assert found["delta-file-size-mismatch"].details["table_versions"] == [2]
    fix = found["delta-missing-files"].fix
    assert fix == found["delta-file-size-mismatch"].fix
    assert found["delta-missing-files"].details["restore_table_version"] == 0
    assert found["delta-missing-files"].details["undone_batches"] == [
        {"query_id": QID, "first_batch_id": 1, "last_batch_id": 3, "count": 3}
    ]
    assert fix.startswith(
        f"restore the table to table version 0, the last before the damage (RESTORE TABLE delta.`{table}` TO VERSION "
        "AS OF 0, or DeltaTable.forPath(spark, path).restoreToVersion(0)); that undoes table version(s) 1-3"
    )
    assert (
        f"append the source's records of query {QID}'s batches 1-3, from where batch 0 ended to where batch 3 "
        "ended (offsets/0 and offsets/3 of this checkpoint), in one batch write with a new txnAppId" in fix
    )
    assert "a RESTORE keeps the txn" in fix


def test_a_restore_keeps_the_txn(tmp_path: Path) -> None:
    """Why the fix says to append the batches again instead of re-running them: a RESTORE keeps the txn (sparkonce's,
    as Delta's and delta-rs's)."""
    _, table = _write_batches(tmp_path, 3)
    restore_table(str(table), table_version=0)
    assert DeltaTable(str(table)).transaction_version(QID) == 2


def test_a_healthy_table_has_no_such_finding(tmp_path: Path) -> None:
    cp, table = _write_batches(tmp_path, 2)
    report = diagnose(cp, tables=[str(table)])
    assert _damage(report) == {}
    assert report.tables[0].damaged_files == 0
    assert report.next_start.endswith("checkpoint and table agree: safe.")


def test_data_files_in_hidden_partition_folders_are_found(tmp_path: Path) -> None:
    """A partition column starting with ``_`` gives folders like ``_p=0``: hidden for orphans, listed for the check."""
    cp, table = _write_batches(tmp_path, 2, partition_column="_p")
    assert {p.parent.name for p in _added(table, 0)} == {"_p=0", "_p=1"}
    report = diagnose(cp, tables=[str(table)])
    assert _damage(report) == {}
    os.remove(_added(table, 1)[0])
    (finding,) = _damage(diagnose(cp, tables=[str(table)])).values()
    assert (finding.code, finding.details["table_versions"]) == ("delta-missing-files", [1])


def test_a_file_outside_the_table_root_is_looked_up_alone(tmp_path: Path) -> None:
    """An ``add`` with an absolute URI outside the table (a shallow clone's) is not in the listing: looked up alone."""
    cp, table = _write_batches(tmp_path, 1)
    outside = tmp_path / "elsewhere" / "part-x.parquet"
    outside.parent.mkdir()
    outside.write_bytes(b"x" * 50)
    add = {"path": outside.as_uri(), "partitionValues": {"partition": "0"}, "size": 50, "dataChange": True}
    commit = [{"commitInfo": {"operation": "WRITE"}}, {"add": add}]
    (table / "_delta_log" / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    assert _damage(diagnose(cp, tables=[str(table)])) == {}
    outside.unlink()
    (finding,) = _damage(diagnose(cp, tables=[str(table)])).values()
    assert [(f["path"], f["table_version"]) for f in finding.details["files"]] == [(outside.as_uri(), 1)]
    assert finding.details["restore_table_version"] == 0
    assert finding.details["undone_other_commits"] == [{"table_version": 1, "operation": "WRITE"}]


def test_commits_no_longer_in_the_log(tmp_path: Path) -> None:
    """The JSON commit that added the damaged file was cleaned up after a Delta checkpoint: no restore target."""
    cp, table = _write_batches(tmp_path, 3)
    DeltaTable(str(table)).create_checkpoint()
    for v in (0, 1):
        os.remove(table / "_delta_log" / f"{v:020d}.json")
    os.remove(_added_from_checkpoint(table)[0])
    (finding,) = _damage(diagnose(cp, tables=[str(table)])).values()
    assert finding.details["unknown_origin"] == 1
    assert finding.details["table_versions"] == []
    assert finding.details["restore_table_version"] is None
    assert "no longer in _delta_log" in finding.message
    assert finding.fix.startswith("the Delta commits that added 1 of these files are no longer in the log")


def _added_from_checkpoint(table: Path) -> list[Path]:
    """Files of table versions 0 and 1 (their commits about to be removed), read before removing them."""
    return sorted(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts and p not in _added(table, 2))


DV_TABLE = "delta-tables/dv-partitioned-with-checkpoint"


def _dv_file(table: Path, table_version: int) -> Path:
    """The deletion vector file of the ``add`` of a Delta commit of the golden table."""
    for line in (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines():
        add = json.loads(line).get("add")
        if add and add.get("deletionVector"):
            return table / str(dv_relative_path(add["deletionVector"]))
    raise AssertionError(f"no deletion vector in table version {table_version}")


@pytest.fixture
def dv_table(tmp_path: Path, fixtures_dir: Path) -> tuple[Path, Path]:
    """Delta's golden table: table version 0 writes 20 files, 1-15 DELETEs with deletion vectors."""
    table = tmp_path / "dv"
    shutil.copytree(fixtures_dir / DV_TABLE, table)
    return make_checkpoint(tmp_path / "cp", planned=range(1), committed=range(1)), table


def test_deletion_vector_files_missing_and_cut_short(dv_table: tuple[Path, Path]) -> None:
    """Table version 15's deletion vector file deleted, 14's cut short: restore to 13 and repeat the DELETEs."""
    cp, table = dv_table
    os.remove(_dv_file(table, 15))
    _cut(_dv_file(table, 14), 1)
    found = _damage(diagnose(cp, tables=[str(table)]))
    missing, resized = found["delta-missing-files"], found["delta-file-size-mismatch"]
    assert [(f["kind"], f["table_version"], f["found_size"]) for f in missing.details["files"]] == [
        ("deletion-vector", 15, None)
    ]
    assert [(f["kind"], f["table_version"], f["size"], f["found_size"]) for f in resized.details["files"]] == [
        ("deletion-vector", 14, 43, 42)
    ]
    assert missing.details["restore_table_version"] == 13
    assert missing.details["batches"] == [] and missing.details["undone_batches"] == []
    assert missing.details["undone_other_commits"] == [
        {"table_version": 15, "operation": "DELETE"},
        {"table_version": 14, "operation": "DELETE"},
    ]
    assert "1 deletion vector file(s) that table version 15 references are missing" in missing.message
    assert "its deletion vectors need 43" in resized.message
    assert missing.fix.startswith("restore the table to table version 13, the last before the damage")
    assert missing.fix.endswith("repeat the other Delta commits it undoes: table version(s) 15 (DELETE), 14 (DELETE)")


def test_a_data_file_updated_by_a_deletion_vector_comes_from_its_first_commit(dv_table: tuple[Path, Path]) -> None:
    """Table version 14 removed and re-added a file of table version 0 with a deletion vector: the file's data was
    written by table version 0, so no restore to 13 brings it back."""
    cp, table = dv_table
    lines = (table / "_delta_log" / f"{14:020d}.json").read_text().splitlines()
    (path,) = [json.loads(line)["add"]["path"] for line in lines if '"add"' in line]
    os.remove(table / unquote(path))
    (finding,) = _damage(diagnose(cp, tables=[str(table)])).values()
    assert [(f["path"], f["table_version"]) for f in finding.details["files"]] == [(path, 0)]
    assert finding.details["restore_table_version"] is None


def test_cli_exits_1_and_says_what_is_damaged(version0_damaged: tuple[Path, Path, list[Path]]) -> None:
    cp, table, _ = version0_damaged
    result = CliRunner().invoke(cli, ["doctor", str(cp), "--table", str(table)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "No findings" not in text
    assert f"table: {table} [delta] table version 2, txn_version for this query 2 (table version 2), 2 damaged" in text
    assert "unsafe (see delta-missing-files, delta-file-size-mismatch)" in text
    assert "error delta-missing-files" in text and "error delta-file-size-mismatch" in text
    assert f"Table version(s) 0 added them (query {QID} batch(es) 0)" in text
    assert "table version 0 is damaged, so there is no earlier table version to restore" in text


def test_cli_json_keeps_schema_version_1(version0_damaged: tuple[Path, Path, list[Path]]) -> None:
    cp, table, _ = version0_damaged
    result = CliRunner().invoke(cli, ["doctor", str(cp), "--table", str(table), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert (report["schema_version"], report["healthy"], report["severity"]) == (1, False, "error")
    assert report["tables"][0]["damaged_files"] == 2
    codes = {f["code"]: f["details"]["table_versions"] for f in report["findings"] if f["code"] in DAMAGE_CODES}
    assert codes == {"delta-missing-files": [0], "delta-file-size-mismatch": [0]}
