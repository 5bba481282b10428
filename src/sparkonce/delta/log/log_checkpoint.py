"""Driver side: write a Delta log checkpoint of a table version from sparkonce's own snapshot.

A classic checkpoint (PROTOCOL.md "Checkpoints", "Checkpoint Schema"): one Parquet row per action of the table
version's state (``protocol``, ``metaData``, every ``txn``, every active ``add``, the ``remove`` tombstones still in
the log, ``domainMetadata``), in ``_delta_log/NNN.checkpoint.parquet``, or, when the state holds more than
``part_size`` actions (Delta's ``spark.databricks.delta.checkpoint.partSize``), in ``P`` parts named
``NNN.checkpoint.0000000001.000000000P.parquet`` (every part at most ``part_size`` actions). Then
``_delta_log/_last_checkpoint`` names it: ``{"version", "size", "parts"?}``.

It is written from the snapshot the commit path already holds (:mod:`sparkonce.delta.log.table_view`): no listing of
``_delta_log``, no load through delta-rs. Each file is written whole (a reader sees it complete or not at all);
``_last_checkpoint`` goes last, so a reader it sends to the checkpoint finds every part.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, cast

import pyarrow as pa
import pyarrow.parquet as pq

from sparkonce.delta.log.actions import Action, LastCheckpoint
from sparkonce.delta.log.delta_log import Snapshot
from sparkonce.delta.log.tombstones import Tombstones, with_field
from sparkonce.storage import TableLocation

__all__ = ["CHECKPOINT_SCHEMA", "checkpoint_actions", "checkpoint_table", "WrittenCheckpoint", "write_checkpoint"]

_STRING_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STRING_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("tags", _STRING_MAP),
                    ("deletionVector", _DV),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                    ("clusteringProvider", pa.string()),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", _STRING_MAP),
                    ("size", pa.int64()),
                    ("deletionVector", _DV),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
    ]
)
"""The Parquet schema of a classic checkpoint: one nullable struct column per action; each row sets one. The fields
and types of the checkpoints Delta's JVM writer writes (PROTOCOL.md "Checkpoint Schema"; ``remove`` tombstones
without ``stats`` and ``tags``), without the optional ``partitionValues_parsed`` and ``stats_parsed``, with ``add``'s
``clusteringProvider`` (clustered tables)."""


TOMBSTONE_RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
DEFAULT_TOMBSTONE_RETENTION = "interval 1 week"
"""Delta's default ``delta.deletedFileRetentionDuration``: how long a checkpoint keeps a ``remove`` tombstone."""


def _tombstone_cutoff(snapshot: Snapshot, now_ms: int | None) -> int:
    """The oldest ``deletionTimestamp`` (real ms) a checkpoint of ``snapshot`` keeps:
    ``delta.deletedFileRetentionDuration`` (Delta's default: 1 week) before ``now_ms`` (default: now) on the retention
    clock (:mod:`sparkonce.delta.log.clock`).

    Raises:
        DeltaLogError: ``delta.deletedFileRetentionDuration`` is not an interval.
    """
    from sparkonce.delta.log import clock
    from sparkonce.delta.log.interval import parse_interval_ms

    retention = str(snapshot.configuration.get(TOMBSTONE_RETENTION_PROPERTY) or DEFAULT_TOMBSTONE_RETENTION)
    now = clock.now_ms() if now_ms is None else now_ms
    return clock.earliest_real_ms(now - parse_interval_ms(retention, name=TOMBSTONE_RETENTION_PROPERTY))


def checkpoint_actions(snapshot: Snapshot, *, now_ms: int | None = None) -> list[Action]:
    """The actions a checkpoint of ``snapshot`` holds, protocol and metadata first. A ``remove`` whose
    ``deletionTimestamp`` is older than ``delta.deletedFileRetentionDuration`` (Delta's default: 1 week) before
    ``now_ms`` (default: now) is left out, as Delta leaves expired tombstones out. (The rows of
    :func:`checkpoint_table` as dicts.)

    Raises:
        DeltaLogError: ``delta.deletedFileRetentionDuration`` is not an interval.
    """
    cutoff = _tombstone_cutoff(snapshot, now_ms)
    actions = _head_actions(snapshot)
    actions += [{"add": {**add, "dataChange": False}} for add in snapshot.files.values()]
    actions += [
        {"remove": {**remove, "dataChange": False}}
        for remove in snapshot.removes.values()
        if int(remove.get("deletionTimestamp") or 0) >= cutoff
    ]
    return actions


def _head_actions(snapshot: Snapshot) -> list[Action]:
    """The checkpoint's first rows: protocol, metadata, every ``txn`` and metadata domain."""
    actions: list[Action] = [{"protocol": snapshot.protocol}, {"metaData": snapshot.metadata}]
    actions += [
        {"txn": {"appId": t.app_id, "version": t.txn_version, "lastUpdated": t.last_updated}}
        for t in snapshot.txns.values()
    ]
    actions += [{"domainMetadata": d} for d in snapshot.domains.values()]
    return actions


def checkpoint_table(snapshot: Snapshot, *, now_ms: int | None = None) -> pa.Table:
    """The rows of a checkpoint of ``snapshot`` (:func:`checkpoint_actions`, same order) as a table of
    :data:`CHECKPOINT_SCHEMA`, built column by column: the active files' ``add`` rows from their dicts in one
    conversion, the tombstones' ``remove`` rows from the checkpoint column the snapshot holds
    (:meth:`sparkonce.delta.log.tombstones.Tombstones.checkpoint_column`), without a dict per tombstone.

    Raises:
        DeltaLogError: ``delta.deletedFileRetentionDuration`` is not an interval.
    """
    import pyarrow.compute as pc

    cutoff = _tombstone_cutoff(snapshot, now_ms)
    head = _part_table(_head_actions(snapshot))
    add_type = CHECKPOINT_SCHEMA.field("add").type
    adds = _struct_rows(list(snapshot.files.values()), add_type)
    adds = with_field(adds, "dataChange", pa.array([False] * len(adds), pa.bool_()))
    removes = snapshot.tombstone_set.checkpoint_column(
        CHECKPOINT_SCHEMA.field("remove").type,
        kept=lambda stamps: pc.greater_equal(stamps, cutoff),
        from_dicts=_struct_rows,
    )
    rows = {"add": adds, "remove": removes}
    before = {"add": 0, "remove": len(adds)}
    after = {"add": len(removes), "remove": 0}
    columns = []
    for f in CHECKPOINT_SCHEMA:
        if f.name in rows:
            parts = [pa.nulls(len(head), f.type), pa.nulls(before[f.name], f.type), rows[f.name]]
            parts.append(pa.nulls(after[f.name], f.type))
        else:
            parts = [*head.column(f.name).chunks, pa.nulls(len(adds) + len(removes), f.type)]
        columns.append(pa.concat_arrays([p for p in parts if len(p)] or [pa.nulls(0, f.type)]))
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


def _struct_rows(values: Sequence[Mapping[str, Any]], arrow_type: pa.StructType) -> pa.Array:
    """``add``/``remove`` actions as rows of ``arrow_type``: one conversion by pyarrow (maps from dicts, fields the
    type does not know dropped); the walk of :func:`_row_value` for actions pyarrow does not take as they are
    (e.g. a partition value written as a JSON number)."""
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_row_value(v, arrow_type) for v in values], type=arrow_type)


def _row_value(value: Any, arrow_type: pa.DataType) -> Any:
    """``value`` (a log action's JSON) as pyarrow builds ``arrow_type`` from it: maps as key/value pairs, fields
    the schema does not know dropped."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return [(str(k), None if v is None else str(v)) for k, v in dict(value).items()]
    if pa.types.is_struct(arrow_type):
        return {
            arrow_type.field(i).name: _row_value(value.get(arrow_type.field(i).name), arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        }
    if pa.types.is_list(arrow_type):
        return [_row_value(v, arrow_type.value_type) for v in value]
    return value


def _part_table(actions: Sequence[Action]) -> pa.Table:
    columns = []
    for field in CHECKPOINT_SCHEMA:
        values = [_row_value(cast(Mapping[str, Any], a).get(field.name), field.type) for a in actions]
        columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


class WrittenCheckpoint(NamedTuple):
    """A checkpoint :func:`write_checkpoint` wrote."""

    parts: int
    """The number of checkpoint files (1 for a classic single-file checkpoint)."""
    snapshot: Snapshot
    """The snapshot that was written, now starting from this checkpoint: its tombstones are the checkpoint's
    ``remove`` column (expired ones gone), so a stream that keeps it needs not read the checkpoint back."""


def write_checkpoint(location: TableLocation, snapshot: Snapshot, *, part_size: int | None = None) -> WrittenCheckpoint:
    """Write the checkpoint of ``snapshot``'s table version and point ``_last_checkpoint`` at it. Runs on the
    driver.

    Args:
        location: The table.
        snapshot: The table's state at the table version to checkpoint.
        part_size: At most this many actions per checkpoint file (Delta's
            ``spark.databricks.delta.checkpoint.partSize``); None: one file.

    Returns:
        The number of checkpoint files written and the snapshot as one read from them.

    Raises:
        StorageError: the store failed or refused a write.
    """
    table = checkpoint_table(snapshot)
    version = snapshot.table_version
    parts = 1 if part_size is None or part_size <= 0 else max(1, math.ceil(len(table) / part_size))
    if parts == 1:
        location.put(f"_delta_log/{version:020d}.checkpoint.parquet", _parquet(table))
    else:
        per_part = math.ceil(len(table) / parts)
        for part in range(parts):
            chunk = table.slice(part * per_part, per_part)
            name = f"_delta_log/{version:020d}.checkpoint.{part + 1:010d}.{parts:010d}.parquet"
            location.put(name, _parquet(chunk))
    last: LastCheckpoint = {"version": version, "size": len(table)}
    if parts > 1:
        last["parts"] = parts
    location.put("_delta_log/_last_checkpoint", json.dumps(last, separators=(",", ":")).encode())
    removes = table.column("remove").filter(table.column("remove").is_valid()).combine_chunks()
    based = replace(snapshot, checkpoint_version=version, tombstone_set=Tombstones(removes))
    return WrittenCheckpoint(parts, based)


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()
