"""Which file system serves a checkpoint location, and the local one's write-once rule (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.checkpoint.fs import LocalCheckpointFS, checkpoint_fs, checkpoint_scheme
from sparkonce.errors import CheckpointError, StorageError


@pytest.mark.parametrize(
    ("location", "scheme"),
    [
        ("/data/ck", "file"),
        ("ck/relative", "file"),
        ("file:///data/ck", "file"),
        ("file:/data/ck", "file"),
        ("C:\\ck", "file"),
        ("hdfs://namenode:8020/ck", "hdfs"),
        ("S3A://bucket/ck", "s3a"),
        ("abfss://c@account.dfs.core.windows.net/ck", "abfss"),
        ("dbfs:/ck", "dbfs"),
        ("viewfs://cluster/ck", "viewfs"),
    ],
)
def test_scheme_of_a_checkpoint_location(location: str, scheme: str) -> None:
    assert checkpoint_scheme(location) == scheme


def test_local_locations_need_no_spark(tmp_path: Path) -> None:
    fs = checkpoint_fs(f"file://{tmp_path}/ck")
    assert isinstance(fs, LocalCheckpointFS) and fs.root == str(tmp_path / "ck")
    with pytest.raises(StorageError, match="empty checkpoint location"):
        checkpoint_scheme(" ")


def test_local_create_writes_once_and_leaves_no_temp_file(tmp_path: Path) -> None:
    fs = checkpoint_fs(tmp_path / "ck")
    target = fs.join(fs.root, "offsets", "0")
    fs.create(target, b"v1\n{}")
    with pytest.raises(CheckpointError, match="already exists"):
        fs.create(target, b"v1\nother")
    assert Path(target).read_bytes() == b"v1\n{}"
    assert fs.names(fs.join(fs.root, "offsets")) == ["0"]
    assert fs.names(fs.join(fs.root, "missing")) == [] and fs.stat(fs.join(fs.root, "missing")) is None
