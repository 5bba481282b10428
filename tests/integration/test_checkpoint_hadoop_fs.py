"""A streaming checkpoint on a Hadoop file system that Python's ``os`` cannot open: ``viewfs://`` (Hadoop's
ViewFileSystem, in the pyspark wheel's hadoop-client jars) with a mount table pointing into this test's tmp dir.
The stream, doctor, rebuild-checkpoint and reset read and write it through the session's Hadoop file system; the
files are checked afterwards on the local disk the mount points at."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from sparkonce.checkpoint import OffsetSeqMetadata, read_checkpoint, write_commit, write_metadata, write_offsets
from sparkonce.cli.main import cli
from sparkonce.errors import CheckpointError, StorageError
from sparkonce.ops.doctor import diagnose
from sparkonce.ops.recover import apply_rebuild, apply_reset, plan_rebuild, plan_reset
from tests.unit.doctor_helpers import stream_commit

pytestmark = [pytest.mark.spark]

QUERY_ID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def viewfs(spark: SparkSession, tmp_path: Path) -> tuple[str, Path]:
    """``viewfs://<new cluster>/ck`` mounted on ``tmp_path/mnt`` (a new mount table name per test: Hadoop caches a
    file system per scheme and authority)."""
    cluster = f"c{uuid.uuid4().hex[:12]}"
    mount = tmp_path / "mnt"
    mount.mkdir()
    spark._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{cluster}.link./ck", mount.as_uri())  # type: ignore[union-attr]
    return f"viewfs://{cluster}/ck", mount


def _ids(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _append(path: Path, start: int, count: int) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array(range(start, start + count), pa.int64())}), mode="append")


def _offsets_line(end: int) -> str:
    return json.dumps({"events": {"0": end}}, separators=(",", ":"))


def _write_checkpoint(uri: str, batches: int) -> None:
    write_metadata(uri, QUERY_ID)
    for b in range(batches):
        write_offsets(uri, b, metadata=OffsetSeqMetadata(0, 1_700_000_000_000 + b, {}), sources=[_offsets_line(b)])
        write_commit(uri, b)


def test_delta_stream_on_viewfs_checkpoint_restarts_exactly_once(
    spark: SparkSession, viewfs: tuple[str, Path], tmp_path: Path
) -> None:
    base, mount = viewfs
    source, target = tmp_path / "source", tmp_path / "target"
    checkpoint = f"{base}/q1"
    _append(source, 0, 10)

    def run() -> None:
        query = (
            spark.readStream.format("delta")
            .option("startingVersion", "0")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .writeStream.format("delta")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(str(target))
        )
        query.awaitTermination()

    run()
    _append(source, 10, 10)
    run()  # a restart on the same checkpoint: batch 1 only

    ids = _ids(target)
    assert [i for i, n in Counter(ids).items() if n > 1] == [] and ids == list(range(20))
    local = mount / "q1"
    assert sorted(p.name for p in (local / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]
    query_id = json.loads((local / "metadata").read_text())["id"]
    table = DeltaTable(str(target))
    assert table.transaction_version(query_id) == 1  # the sink's txn used the checkpoint's query id
    ours = [c["sparkonce"] for c in table.history() if "sparkonce" in c]
    assert {c["checkpointLocation"] for c in ours} == {checkpoint}


def test_doctor_reads_viewfs_checkpoint(spark: SparkSession, viewfs: tuple[str, Path], tmp_path: Path) -> None:
    base, mount = viewfs
    checkpoint = f"{base}/q1"
    _write_checkpoint(checkpoint, 3)  # through Hadoop's file system
    (mount / "q1" / "offsets" / f".3.{uuid.uuid4()}.tmp").write_text("v1")  # a writer crashed mid-write
    table = tmp_path / "table"
    for b in range(3):
        stream_commit(table, QUERY_ID, b, pa.table({"id": pa.array([b], pa.int64())}))

    report = diagnose(checkpoint, tables=[str(table)])
    assert report.checkpoint_dir == checkpoint
    assert report.query_id == QUERY_ID
    assert report.last_planned == 2 and report.last_committed == 2
    leftover = [f for f in report.findings if f.code == "temp-files"]
    assert len(leftover) == 1 and f"{checkpoint}/offsets/.3." in leftover[0].message

    shown = CliRunner().invoke(cli, ["doctor", checkpoint, "--table", str(table), "--json"])
    assert json.loads(shown.output)["checkpoint_dir"] == checkpoint, shown.output


def test_rebuild_writes_viewfs_checkpoint(spark: SparkSession, viewfs: tuple[str, Path], tmp_path: Path) -> None:
    base, mount = viewfs
    table = tmp_path / "table"
    texts = [f"v1\n\n{_offsets_line(b)}" for b in range(2)]
    for b, text in enumerate(texts):
        stream_commit(table, QUERY_ID, b, pa.table({"id": pa.array([b], pa.int64())}), offsets_log=text)
    checkpoint = f"{base}/rebuilt"

    plan = plan_rebuild(table, checkpoint)
    assert plan.checkpoint_dir == checkpoint and plan.batch_id == 1
    written = apply_rebuild(plan)

    assert written == [f"{checkpoint}/{name}" for name in plan.files]
    local = mount / "rebuilt"
    assert json.loads((local / "metadata").read_text()) == {"id": QUERY_ID}
    assert [(local / "offsets" / str(b)).read_text() for b in range(2)] == texts
    assert read_checkpoint(checkpoint).last_committed == 1
    with pytest.raises(CheckpointError, match="not empty"):
        plan_rebuild(table, checkpoint)


def test_reset_moves_viewfs_checkpoint_aside(spark: SparkSession, viewfs: tuple[str, Path], tmp_path: Path) -> None:
    base, mount = viewfs
    checkpoint = f"{base}/q1"
    _write_checkpoint(checkpoint, 2)
    table = tmp_path / "table"
    for b in range(2):
        stream_commit(table, QUERY_ID, b, pa.table({"id": pa.array([b], pa.int64())}))

    with pytest.raises(CheckpointError, match="may still be running"):
        plan_reset(checkpoint, [table])
    plan = plan_reset(checkpoint, [table], force=True)
    assert plan.moved_to.startswith(f"{checkpoint}.reset-")
    apply_reset(plan)

    assert not (mount / "q1").exists()
    (moved,) = [p for p in mount.iterdir() if p.name.startswith("q1.reset-")]
    assert sorted(p.name for p in (moved / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert _ids(table) == []


def test_unknown_scheme_is_refused_naming_the_location(spark: SparkSession) -> None:
    with pytest.raises(StorageError, match=r"nosuchfs://x/ck: No FileSystem for scheme \"nosuchfs\".*jars"):
        read_checkpoint("nosuchfs://x/ck")
