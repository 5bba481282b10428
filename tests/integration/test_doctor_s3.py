"""``doctor`` on a Delta table in the embedded S3 store (SeaweedFS): damaged data files are found from one listing
of the table's prefix, as on a local disk (issue 21 item 5). No Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.ops.doctor import diagnose
from sparkonce.storage import table_location
from tests.fixtures_storage import EmbeddedStore, copy_table_to_store
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

pytestmark = pytest.mark.s3

QID = "11111111-2222-3333-4444-555555555555"


def test_files_of_table_version_0_deleted_and_cut_short_on_s3(object_store: EmbeddedStore, tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    local = tmp_path / "raw"
    for b in range(3):
        data = pa.concat_tables(
            [raw_rows("events", 0, range(b * 10, b * 10 + 5)), raw_rows("events", 1, range(b * 10 + 5, b * 10 + 10))]
        )
        stream_commit(local, QID, b, data, partition_by=["partition"])
    location = table_location(object_store.unique_uri("doctor-damage"), storage_options=object_store.storage_options)
    copy_table_to_store(local, location)
    options = [
        arg for name, value in object_store.storage_options.items() for arg in ("--storage-option", f"{name}={value}")
    ]
    healthy = CliRunner().invoke(cli, ["doctor", str(cp), "--table", str(location), *options, "--json"])
    assert healthy.exit_code == 0, healthy.output

    lines = (local / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    gone, cut = sorted(unquote(json.loads(line)["add"]["path"]) for line in lines if '"add"' in line)
    fs = location.filesystem()
    fs.delete_file(location.fs_path(gone))
    short = tmp_path / "short.parquet"
    short.write_bytes((local / cut).read_bytes()[:-10])
    pafs.copy_files(
        str(short), location.fs_path(cut), source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
    )

    report = diagnose(cp, tables=[location])
    found = {f.code: f for f in report.findings if f.code.startswith("delta-")}
    assert sorted(found) == ["delta-file-size-mismatch", "delta-missing-files"]
    assert [(f["path"], f["found_size"]) for f in found["delta-missing-files"].details["files"]] == [(gone, None)]
    (resized,) = found["delta-file-size-mismatch"].details["files"]
    assert (resized["path"], resized["size"] - resized["found_size"]) == (cut, 10)
    for finding in found.values():
        assert finding.details["table_versions"] == [0]
        assert finding.details["batches"] == [{"query_id": QID, "batch_id": 0, "table_version": 0}]
    assert report.tables[0].damaged_files == 2 and "unsafe" in report.next_start
    result = CliRunner().invoke(cli, ["doctor", str(cp), "--table", str(location), *options])
    assert result.exit_code == 1, result.output
    assert "delta-missing-files" in result.output and os.path.basename(gone) in " ".join(result.output.split())
