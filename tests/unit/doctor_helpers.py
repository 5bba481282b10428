"""Builders for the doctor/verify tests: checkpoints written in Spark's format, and Delta tables committed the
way sparkonce's sink commits (delta-rs write + ``sparkonce`` commitInfo + ``txn``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from sparkonce.checkpoint import OffsetSeqMetadata, write_commit, write_metadata, write_offsets

CONF = {"spark.sql.shuffle.partitions": "2"}


def kafka_offsets_line(topic: str, ends: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in ends.items()}}, separators=(",", ":"))


def make_checkpoint(
    root: Path,
    *,
    query_id: str | None = "11111111-2222-3333-4444-555555555555",
    planned: Sequence[int] = (),
    committed: Sequence[int] = (),
    topic: str = "events",
    per_batch: int = 10,
    ts0: int = 1_700_000_000_000,
) -> Path:
    """A checkpoint whose batch N read ``events-0`` offsets [N*per_batch, (N+1)*per_batch)."""
    root.mkdir(parents=True, exist_ok=True)
    if query_id is not None:
        write_metadata(root, query_id)
    for b in planned:
        write_offsets(
            root,
            b,
            metadata=OffsetSeqMetadata(0, ts0 + b * 1000, CONF),
            sources=[kafka_offsets_line(topic, {0: (b + 1) * per_batch})],
        )
    for b in committed:
        write_commit(root, b)
    return root


def raw_rows(topic: str, partition: int, offsets: Sequence[int]) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array([topic] * len(offsets), pa.string()),
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
            "value": pa.array([b"v"] * len(offsets), pa.binary()),
        }
    )


def stream_commit(
    table: Path,
    query_id: str,
    batch_id: int,
    data: pa.Table,
    *,
    offsets_log: str | None = None,
    checkpoint: Path | None = None,
    partition_by: list[str] | None = None,
) -> None:
    """Commit one batch as sparkonce's sink does: one Delta commit with the txn and the ``sparkonce`` object (one
    file per partition with ``partition_by``)."""
    ours: dict[str, object] = {
        "operation": "STREAMING UPDATE",
        "operationParameters": {"outputMode": "Append", "queryId": query_id, "epochId": str(batch_id)},
        "batchId": batch_id,
    }
    if checkpoint is not None:
        ours["checkpointLocation"] = str(checkpoint)
    if offsets_log is not None:
        ours["offsetsLog"] = offsets_log
    mode = "append" if (table / "_delta_log").is_dir() else "error"
    write_deltalake(
        str(table),
        data,
        mode=mode,  # type: ignore[arg-type]
        partition_by=partition_by,
        commit_properties=CommitProperties(
            custom_metadata={"sparkonce": ours}, app_transactions=[Transaction(query_id, batch_id)]
        ),
    )
