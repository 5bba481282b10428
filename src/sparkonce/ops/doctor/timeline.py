"""The doctor's batch timeline: each recent batch, planned/committed, with the table versions that hold it.

Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

from collections import defaultdict

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.ops.doctor.delta import DeltaFacts
from sparkonce.ops.doctor.ranges import newest_ids
from sparkonce.ops.doctor.report import BatchRow

__all__ = ["timeline"]


def timeline(state: CheckpointState, delta: dict[str, DeltaFacts], window: int) -> tuple[BatchRow, ...]:
    """The newest ``window`` batches, each with the table versions (of this query's app id) that hold it."""
    ids = newest_ids(state.offset_ids, state.commit_ids, window)
    if not ids:
        return ()
    versions: dict[int, list[int]] = defaultdict(list)
    rows: dict[int, int] = {}
    app = state.query_id
    for facts in delta.values():
        for entry in facts.entries:
            if entry.query_id == app and entry.batch_id is not None:
                versions[entry.batch_id].append(entry.table_version)
                if entry.added_rows is not None:
                    rows[entry.batch_id] = rows.get(entry.batch_id, 0) + entry.added_rows
    out = []
    planned, committed = set(state.offset_ids[-window:]), set(state.commit_ids[-window:])
    for b in ids:
        offsets = state.offsets.get(b)
        ts = offsets.metadata.batch_timestamp_ms if offsets and offsets.metadata else None
        out.append(BatchRow(b, b in planned, b in committed, ts, tuple(sorted(versions.get(b, []))), rows.get(b)))
    return tuple(out)
