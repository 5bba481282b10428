"""Rebuilding a lost checkpoint from the table alone, and a guarded reset.

Rebuild: sparkonce's Delta sink records, in every streaming Delta commit, the query id, the batch id and the exact
text of the checkpoint's ``offsets/N``. From the newest such commit a checkpoint can be written again with the
**same query id** (so the sink's txn keeps making replays idempotent), ``offsets/N`` and ``commits/N``: Spark then
resumes at batch N+1 from the recorded end offsets, with nothing duplicated or skipped.

Reset: the safe reset sequence (stop the job, clear the output, remove the checkpoint, restart from the
earliest offsets), guarded so the output cannot be forgotten: the table is cleared in one Delta commit (time
travel keeps the old rows), then the checkpoint is moved aside rather than deleted.

Both are plans first (pure functions returning dataclasses); ``apply_*`` acts on a plan. The checkpoint is read and
written through its file system (:mod:`sparkonce.checkpoint.fs`): a local directory, or any Hadoop file system of the
active Spark session (``hdfs://``, ``s3a://``, ``abfss://``, ``dbfs:``, ...).
Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkonce.checkpoint.files import parse_offsets
from sparkonce.checkpoint.fs import CheckpointFS, checkpoint_fs
from sparkonce.errors import CheckpointError, DeltaLogError
from sparkonce.storage import TableLocation, table_location

SourceKind = Literal["delta", "kafka", "file", "unknown"]
# A checkpoint touched this recently may belong to a running query.
RUNNING_WINDOW_SECONDS = 120.0


@dataclass(frozen=True)
class RebuildPlan:
    """What a rebuilt checkpoint will hold."""

    checkpoint_dir: str
    """The checkpoint location: an absolute local path, or the qualified URI (``hdfs://``, ``s3a://``, ...)."""
    table: str
    """The table's location (a path or an object-store URI)."""
    query_id: str
    batch_id: int
    table_version: int
    offsets_text: str
    previous_offsets_text: str | None
    """``offsets/N-1``: Spark reads it on restart to know where batch N started (None when N is 0)."""
    source_kinds: tuple[SourceKind, ...]
    warnings: tuple[str, ...]
    other_query_ids: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        previous = (f"offsets/{self.batch_id - 1}", f"commits/{self.batch_id - 1}") if self.batch_id else ()
        return ("metadata", *previous, f"offsets/{self.batch_id}", f"commits/{self.batch_id}")


@dataclass(frozen=True)
class ResetPlan:
    checkpoint_dir: str
    tables: tuple[TableLocation, ...]
    moved_to: str
    warnings: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ResetResult:
    plan: ResetPlan
    cleared_table_versions: dict[str, int]


def _source_kind(text: str | None) -> SourceKind:
    if text is None:
        return "unknown"
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return "file" if text.strip().isdigit() else "unknown"
    if isinstance(value, dict):
        if "reservoirId" in value:
            return "delta"
        if "logOffset" in value:
            return "file"
        if value and all(isinstance(v, dict) for v in value.values()):
            return "kafka"
    return "unknown"


def plan_rebuild(
    table: str | os.PathLike[str] | TableLocation,
    checkpoint_dir: str | os.PathLike[str],
    *,
    query_id: str | None = None,
) -> RebuildPlan:
    """Plan a checkpoint for the newest streaming batch of ``query_id`` (default: the newest query) in ``table``.

    Raises:
        CheckpointError: the checkpoint directory is not empty, or the table holds no usable streaming commit.
    """
    from sparkonce.delta.log.delta_log import DeltaLog

    location = table_location(table)
    fs = checkpoint_fs(checkpoint_dir)
    table_path, ck = str(location), fs.root
    if fs.names(ck):
        raise CheckpointError(
            f"{ck} is not empty: a checkpoint is rebuilt only into an empty or new directory (never over one)"
        )
    # query id -> batch id -> (table version, offsets text); the newest Delta commit of a batch wins
    found: dict[str, dict[int, tuple[int, str | None]]] = {}
    for entry in DeltaLog(location).iter_history():
        if entry.query_id is None or entry.batch_id is None:
            continue
        ours = entry.commit_info.get("sparkonce")
        offsets_log = ours.get("offsetsLog") if isinstance(ours, dict) else None
        found.setdefault(entry.query_id, {}).setdefault(entry.batch_id, (entry.table_version, offsets_log))
    if not found:
        raise CheckpointError(f"{table_path} holds no streaming Delta commit: nothing to rebuild a checkpoint from")
    if query_id is None:
        query_id = max(found, key=lambda q: max(v for v, _ in found[q].values()))
    if query_id not in found:
        raise CheckpointError(f"{table_path} holds no streaming Delta commit of query {query_id}")
    batches = found[query_id]
    batch_id = max(batches)
    table_version, offsets_text = batches[batch_id]
    if not offsets_text:
        raise CheckpointError(
            f"the Delta commit of batch {batch_id} (table version {table_version}) does not record the checkpoint's "
            "offsets (written by another engine?): the source position cannot be recovered from the table"
        )
    previous_text = None
    if batch_id > 0:
        previous_text = batches.get(batch_id - 1, (0, None))[1]
        if not previous_text:
            raise CheckpointError(
                f"the table holds no Delta commit with the offsets of batch {batch_id - 1} of query {query_id} "
                "(Spark needs offsets/N-1 to restart; the log may have been cleaned up)"
            )
    offsets = parse_offsets(offsets_text, batch_id)
    kinds = tuple(_source_kind(text) for text in offsets.sources.values())
    warnings = []
    if "file" in kinds:
        warnings.append(
            "a file source keeps its seen-files log under sources/; it cannot be rebuilt from the table, so "
            "files may be read again (the Delta sink cannot tell: the rebuilt batch ids continue)"
        )
    if "unknown" in kinds:
        warnings.append("a source offset is of an unknown kind; check that its source keeps no state of its own")
    warnings.append("stateful operators (state/) cannot be rebuilt: only stateless queries resume exactly")
    return RebuildPlan(
        checkpoint_dir=ck,
        table=table_path,
        query_id=query_id,
        batch_id=batch_id,
        table_version=table_version,
        offsets_text=offsets_text,
        previous_offsets_text=previous_text,
        source_kinds=kinds,
        warnings=tuple(warnings),
        other_query_ids=tuple(sorted(q for q in found if q != query_id)),
    )


def apply_rebuild(plan: RebuildPlan) -> list[str]:
    """Write ``metadata``, ``offsets/N-1``, ``commits/N-1``, ``offsets/N``, ``commits/N`` (each once, atomically)."""
    from sparkonce.checkpoint.writer import write_commit, write_metadata, write_offsets

    written = [write_metadata(plan.checkpoint_dir, plan.query_id)]
    batches = [(plan.batch_id - 1, plan.previous_offsets_text)] if plan.previous_offsets_text else []
    for batch_id, text in [*batches, (plan.batch_id, plan.offsets_text)]:
        assert text is not None
        offsets = parse_offsets(text, batch_id)
        sources: list[str | None] | dict[str, str | None]
        sources = dict(offsets.sources) if offsets.log_version == 2 else list(offsets.sources.values())
        log_version: Literal[1, 2] = 2 if offsets.log_version == 2 else 1
        written.append(
            write_offsets(
                plan.checkpoint_dir, batch_id, metadata=offsets.metadata, sources=sources, log_version=log_version
            )
        )
        watermark = offsets.metadata.batch_watermark_ms if offsets.metadata is not None else 0
        written.append(write_commit(plan.checkpoint_dir, batch_id, next_batch_watermark_ms=watermark))
    return written


def plan_reset(
    checkpoint_dir: str | os.PathLike[str],
    tables: Sequence[str | os.PathLike[str] | TableLocation],
    *,
    force: bool = False,
    now: float | None = None,
) -> ResetPlan:
    """Plan a reset of a query: clear every output table, then move its checkpoint aside.

    Raises:
        CheckpointError: no table given (a reset without clearing the output duplicates data), the checkpoint is
            missing, or it was modified in the last two minutes (a running query) and ``force`` is not set.
    """
    from sparkonce.delta.txn.commit import table_exists

    fs = checkpoint_fs(checkpoint_dir)
    ck = fs.root
    if not tables:
        raise CheckpointError(
            "a reset needs the query's output table(s) (--table): deleting a checkpoint without clearing its output "
            "re-reads the source and duplicates every row"
        )
    if not fs.is_dir(ck):
        raise CheckpointError(f"checkpoint {ck} does not exist")
    locations = tuple(table_location(t) for t in tables)
    for location in locations:
        if not table_exists(location):
            raise DeltaLogError(f"{location} is not a Delta table; only Delta outputs can be cleared safely")
    newest = _newest_mtime_ms(fs, ck) / 1000
    age = (now or time.time()) - newest
    warnings = []
    if age < RUNNING_WINDOW_SECONDS:
        message = f"{ck} was modified {age:.0f} s ago: its query may still be running; stop it first"
        if not force:
            raise CheckpointError(message + " (or pass --force)")
        warnings.append(message)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    return ResetPlan(ck, locations, f"{ck.rstrip('/')}.reset-{stamp}", tuple(warnings))


def _newest_mtime_ms(fs: CheckpointFS, folder: str) -> int:
    """The newest modification time of a file under ``folder`` (0 when it holds none)."""
    newest = 0
    for name in fs.names(folder):
        path = fs.join(folder, name)
        stat = fs.stat(path)
        if stat is None:
            continue
        newest = max(newest, _newest_mtime_ms(fs, path) if stat.is_dir else stat.mtime_ms)
    return newest


def apply_reset(plan: ResetPlan) -> ResetResult:
    """Clear each table in one Delta overwrite commit (schema kept), then move the checkpoint aside."""
    import pyarrow as pa

    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.delta.txn.commit import commit_files

    cleared = {}
    for table in plan.tables:
        current = existing_table(table)
        schema = pa.schema(current.schema().to_arrow())
        result = commit_files(
            table,
            [],
            data_schema=schema,
            mode="overwrite",
            # Delta's name for clearing a table; sparkonce's own field says which checkpoint was reset.
            custom_metadata={"sparkonce": {"operation": "TRUNCATE", "resetCheckpoint": str(plan.checkpoint_dir)}},
        )
        assert result.table_version is not None
        cleared[str(table)] = int(result.table_version)
    checkpoint_fs(plan.checkpoint_dir).rename(plan.checkpoint_dir, plan.moved_to)
    return ResetResult(plan, cleared)


__all__ = ["RebuildPlan", "ResetPlan", "ResetResult", "apply_rebuild", "apply_reset", "plan_rebuild", "plan_reset"]
