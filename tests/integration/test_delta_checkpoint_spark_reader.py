"""A checkpoint sparkonce writes, read as Delta's JVM reads checkpoints: Spark's Parquet reader with the checkpoint
schema Delta's JVM writer recorded in its own checkpoint (``org.apache.spark.sql.parquet.row.metadata`` of the
Delta-JVM checkpoint in tests/fixtures). There is no Delta JVM here; this is the reader it would use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.log_checkpoint import write_checkpoint
from sparkonce.storage import table_location
from tests.unit.test_delta_log_checkpoint import JVM_CHECKPOINT, OURS, every_action_table

pytestmark = pytest.mark.spark


def _plain(value: Any) -> Any:
    """A Spark Row's value as the JSON log holds it (unset fields left out)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items() if v is not None}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_sparks_parquet_reader_reads_a_sparkonce_checkpoint_with_the_delta_jvm_schema(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    snapshot = DeltaLog(root).snapshot()
    write_checkpoint(table_location(str(root)), snapshot)
    recorded = pq.read_schema(root / JVM_CHECKPOINT).metadata[b"org.apache.spark.sql.parquet.row.metadata"]
    jvm_schema = StructType.fromJson(json.loads(recorded))
    rows = [_plain(r) for r in spark.read.schema(jvm_schema).parquet(str(root / OURS)).collect()]
    actions: dict[str, list[Any]] = {}
    for row in rows:
        ((name, action),) = row.items()  # one action per row
        actions.setdefault(name, []).append(action)
    assert {a["path"]: a for a in actions["add"]} == {
        path: {k: v for k, v in add.items() if k != "dataChange"} | {"dataChange": False}
        for path, add in snapshot.files.items()
    }
    assert len(actions["remove"]) == len(snapshot.removes) == 16
    assert sorted(json.dumps(r, sort_keys=True) for r in actions["remove"]) == sorted(
        json.dumps({**r, "dataChange": False}, sort_keys=True) for r in snapshot.removes.values()
    )
    assert actions["txn"] == [{"appId": "stream-a", "version": 7, "lastUpdated": 1_700_000_000_000}]
    assert actions["metaData"] == [snapshot.metadata]
    assert actions["protocol"] == [snapshot.protocol]
    assert actions["domainMetadata"] == list(snapshot.domains.values())
