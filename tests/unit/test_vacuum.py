"""vacuum: Delta's retention guard, orphan files of failed attempts, tombstoned files; real tables on disk."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.ops.vacuum import VacuumResult, retention_from_properties, vacuum
from sparkonce.errors import DeltaLogError, OptionError

HOUR = 3600


def _age(path: Path, hours: float) -> None:
    when = time.time() - hours * HOUR
    os.utime(path, (when, when))


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """A partitioned table: one tombstoned file (overwritten just now), old and fresh orphans, a _-prefixed file."""
    root = tmp_path / "table"
    write_deltalake(str(root), pa.table({"id": [1, 2], "part": ["a", "a"]}), partition_by=["part"])
    write_deltalake(str(root), pa.table({"id": [3], "part": ["b"]}), partition_by=["part"], mode="overwrite")
    (root / "part=a" / "orphan-old.parquet").write_bytes(b"o" * 100)
    _age(root / "part=a" / "orphan-old.parquet", 200)
    (root / "orphan-old-top.parquet").write_bytes(b"t" * 10)
    _age(root / "orphan-old-top.parquet", 200)
    (root / "orphan-in-flight.parquet").write_bytes(b"n" * 7)  # a write in flight: must survive
    (root / "_spark_metadata").mkdir()
    (root / "_spark_metadata" / "0").write_text("v1")
    _age(root / "_spark_metadata" / "0", 200)
    return root


def _data_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith("_")
    }


def test_dry_run_lists_old_orphans_only(table: Path) -> None:
    before = _data_files(table)
    result = vacuum(table)
    assert isinstance(result, VacuumResult) and result.dry_run
    assert result.files == ("orphan-old-top.parquet", "part=a/orphan-old.parquet")
    assert result.bytes == 110
    assert result.table_version == 1
    assert _data_files(table) == before  # nothing deleted


def test_retention_below_table_minimum_is_refused(table: Path) -> None:
    with pytest.raises(OptionError, match="deletedFileRetentionDuration of 168 hours") as failure:
        vacuum(table, retention_hours=1, dry_run=False)
    assert failure.value.option == "retention_hours"
    with pytest.raises(OptionError, match=">= 0"):
        vacuum(table, retention_hours=-1, enforce_retention_duration=False)


def test_zero_retention_deletes_every_unreferenced_file_and_keeps_the_table(table: Path) -> None:
    active = {os.path.relpath(uri, table) for uri in DeltaTable(str(table)).file_uris()}
    result = vacuum(table, retention_hours=0, dry_run=False, enforce_retention_duration=False)
    assert not result.dry_run
    assert "orphan-in-flight.parquet" in result.files and "part=a/orphan-old.parquet" in result.files
    assert any(f.startswith("part=a/part-") for f in result.files)  # the tombstoned file of table version 0
    assert _data_files(table) == active
    assert (table / "_spark_metadata" / "0").exists()
    assert DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist() == [3]


def test_table_property_sets_the_minimum(tmp_path: Path) -> None:
    root = tmp_path / "table"
    write_deltalake(
        str(root),
        pa.table({"id": [1]}),
        configuration={"delta.deletedFileRetentionDuration": "interval 2 hours"},
    )
    (root / "orphan.parquet").write_bytes(b"x")
    _age(root / "orphan.parquet", 3)
    assert vacuum(root, retention_hours=2).files == ("orphan.parquet",)
    with pytest.raises(OptionError, match="of 2 hours"):
        vacuum(root, retention_hours=1)


@pytest.mark.parametrize(
    ("raw", "hours"),
    [
        (None, 168.0),
        ("interval 7 days", 168.0),
        ("interval 1 hour", 1.0),
        ("interval 30 minutes", 0.5),
        ("2 weeks", 336.0),
    ],
)
def test_retention_property_parsing(raw: str | None, hours: float) -> None:
    conf = {} if raw is None else {"delta.deletedFileRetentionDuration": raw}
    assert retention_from_properties(conf) == hours


def test_bad_retention_property_names_it() -> None:
    with pytest.raises(DeltaLogError, match="deletedFileRetentionDuration"):
        retention_from_properties({"delta.deletedFileRetentionDuration": "soon"})
