"""A streaming checkpoint on ``s3a://`` (Hadoop's S3A file system, from the S3A jars of ``sparkonce jars fetch s3a``)
and its Delta table on ``s3://``, both on the embedded object store (SeaweedFS).

The stream's driver is SIGKILLed after batch 1's Delta commit, before its checkpoint commit, and restarted: every
row once. Then ``sparkonce doctor``, ``rebuild-checkpoint`` and ``reset`` work on that checkpoint through this
session's S3A file system (its bucket's ``fs.s3a.bucket.<name>.*`` settings set at run time).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from sparkonce.checkpoint import read_checkpoint
from sparkonce.cli.main import cli
from sparkonce.delta.log.delta_log import streaming_info
from sparkonce.errors import CheckpointError
from sparkonce.jars import S3A
from sparkonce.ops.recover import apply_rebuild, apply_reset, plan_rebuild, plan_reset
from sparkonce.storage import table_location
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.fixtures_storage import EmbeddedStore
from tests.integration.conftest import write_input_files
from tests.unit.doctor_helpers import stream_commit

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.crash]

QUERY_ID = "11111111-2222-3333-4444-555555555555"


def _ids(table: str, storage: dict[str, str]) -> list[int]:
    dt = DeltaTable(table, storage_options=storage)
    return sorted(dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _batches(table: str, storage: dict[str, str]) -> list[tuple[str | None, int | None]]:
    """Every streaming commit's ``(query_id, batch_id)``, oldest first (from the table's history, via delta-rs)."""
    history = DeltaTable(table, storage_options=storage).history()
    return [streaming_info(commit) for commit in reversed(history) if streaming_info(commit) != (None, None)]


def _s3a_on(spark: SparkSession, bucket: str, store: EmbeddedStore) -> None:
    """Point this session's S3A file system at the store, for ``bucket`` only (Hadoop's per-bucket settings)."""
    hadoop = spark._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in store.info.s3a_conf().items():
        hadoop.set(key.removeprefix("spark.hadoop.").replace("fs.s3a.", f"fs.s3a.bucket.{bucket}.", 1), value)


def test_a_stream_with_checkpoint_and_table_on_s3_is_exactly_once_across_a_sigkill_and_recoverable(
    spark: SparkSession, object_store: EmbeddedStore, tmp_path: Path
) -> None:
    assert S3A.resolved() is not None, "the S3A jars are part of the setup: `sparkonce jars fetch s3a`"
    bucket = object_store.new_bucket("s3a").removeprefix("s3://")
    table, checkpoint = f"s3://{bucket}/table", f"s3a://{bucket}/ck"
    storage = object_store.storage_options
    conf = {**object_store.info.s3a_conf(), **{f"spark.sparkonce.storage.{k}": v for k, v in storage.items()}}
    expected = write_input_files(tmp_path / "input", files=4, rows_per_file=25)
    args = ["-m", "sparkonce.ops.stream_files", str(tmp_path / "input"), table, checkpoint]
    args += [f"--conf={key}={value}" for key, value in conf.items()]

    crashed = run_driver(args, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=600)
    assert crashed.killed, crashed.stderr[-3000:]
    _s3a_on(spark, bucket, object_store)
    state = read_checkpoint(checkpoint)
    # Batch 1 is planned but not committed in the checkpoint, and committed in the table.
    assert state.last_planned == 1 and state.last_committed == 0
    query_id = state.query_id
    assert _batches(table, storage) == [(query_id, 0), (query_id, 1)]
    assert _ids(table, storage) == expected[:50]

    finished = run_driver(args, cwd=str(REPO), timeout=600)
    assert finished.returncode == 0 and "DONE" in finished.stdout, finished.stderr[-3000:]
    ids = _ids(table, storage)
    assert [i for i, n in Counter(ids).items() if n > 1] == [] and ids == expected
    # Batch 1 replayed by Spark and skipped by the sink: one streaming commit per batch id.
    assert _batches(table, storage) == [(query_id, b) for b in range(4)]
    assert read_checkpoint(checkpoint).last_committed == 3

    options = [f"--storage-option={key}={value}" for key, value in storage.items()]
    shown = CliRunner().invoke(cli, ["doctor", checkpoint, "--table", table, *options, "--json"])
    report = json.loads(shown.output)
    assert report["checkpoint_dir"] == checkpoint and report["query_id"] == query_id, shown.output
    assert report["last_committed"] == 3 and not [f for f in report["findings"] if f["severity"] == "error"]

    # The sink commits from a Python worker, which cannot read an s3a:// checkpoint's offsets/N: its Delta commits
    # do not record them, and rebuilding this checkpoint from the table says so (docs/storage.md).
    location = table_location(table, storage_options=storage)
    with pytest.raises(CheckpointError, match="does not record the checkpoint's"):
        plan_rebuild(location, f"s3a://{bucket}/from-stream")
    # A table that records them (a stream with a local checkpoint) rebuilds its checkpoint onto s3a://.
    recorded = tmp_path / "recorded"
    texts = [f"v1\n\n{json.dumps({'events': {'0': b}}, separators=(',', ':'))}" for b in range(2)]
    for b, text in enumerate(texts):
        stream_commit(recorded, QUERY_ID, b, pa.table({"id": pa.array([b], pa.int64())}), offsets_log=text)
    rebuilt = f"s3a://{bucket}/rebuilt"
    plan = plan_rebuild(recorded, rebuilt)
    assert plan.query_id == QUERY_ID and plan.batch_id == 1
    apply_rebuild(plan)
    again = read_checkpoint(rebuilt)
    assert again.last_committed == 1 and again.query_id == QUERY_ID
    assert [again.offsets[b].raw for b in range(2)] == texts
    with pytest.raises(CheckpointError, match="not empty"):
        plan_rebuild(recorded, rebuilt)

    reset = plan_reset(checkpoint, [location], force=True)
    assert reset.moved_to.startswith(f"{checkpoint}.reset-")
    apply_reset(reset)
    assert _ids(table, storage) == []
    assert read_checkpoint(reset.moved_to).last_committed == 3
    assert _files_under(spark, checkpoint) == []  # everything moved (SeaweedFS may keep the empty folder)


def _files_under(spark: SparkSession, uri: str) -> list[str]:
    """Every file below ``uri`` through the session's Hadoop file system (none when it does not exist)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[union-attr]
    if not fs.exists(path):
        return []
    found, files = [], fs.listFiles(path, True)
    while files.hasNext():
        found.append(str(files.next().getPath()))
    return found
