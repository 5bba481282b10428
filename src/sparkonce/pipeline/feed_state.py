"""Is a changes-fed stage's table the state its input's change data feed implies? Runs on the driver (delta-rs
reads, no Spark).

A merge stage with ``input_mode = "changes"`` applies its input table's change rows by keys, so once a batch has
read the feed through table version ``v`` of the input, the stage's table must hold the input's rows at ``v``, one
per key (the input is a table with one row per key, e.g. a merge stage's; when it holds several, the latest by
``order_by``). :func:`feed_state_check` compares the two for the newest batch the stage's table records: that
batch's end offset (``offsets/N`` of the stage's checkpoint) names ``v``. When that offset points inside a table
version (a batch ended in the middle of an append's files, or of the initial snapshot), the state at no table
version matches and the check says so instead of guessing. :func:`state_differences` is the comparison itself,
which ``sparkonce chaos`` also uses on the final tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkonce.delta.write.cdf import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
from sparkonce.pipeline.records import txn_versions

_FEED_COLUMNS = {CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN}


@dataclass(frozen=True)
class StateDifferences:
    """The stage's table against the state its input implies, key by key."""

    expected_keys: int
    lost: int
    """Keys of the input's state the table lacks."""
    extra: int
    """Keys the table holds that the input's state has not (a delete not applied)."""
    mismatched: int
    """Keys whose row differs in a column both have."""
    duplicates: int
    """Rows beyond the first per key in the table."""

    @property
    def total(self) -> int:
        return self.lost + self.extra + self.mismatched + self.duplicates


@dataclass(frozen=True)
class FeedStateCheck:
    """The outcome of :func:`feed_state_check`."""

    batch_id: int | None
    """The newest batch the stage's table records (None: none yet, nothing compared)."""
    input_table_version: int | None
    """The input's table version that batch read through (None: its end offset is inside a table version)."""
    differences: StateDifferences | None
    """None when nothing could be compared (see the two fields above)."""

    @property
    def ok(self) -> bool:
        return self.differences is None or self.differences.total == 0


def latest_state(
    rows: Iterable[Mapping[str, Any]], keys: Sequence[str], order_by: Sequence[str]
) -> dict[tuple[Any, ...], Mapping[str, Any]]:
    """One row per key: the last by ``order_by`` (the first seen when no order is given)."""
    state: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        current = state.get(key)
        if current is None or (order_by and _rank(row, order_by) > _rank(current, order_by)):
            state[key] = row
    return state


def state_differences(
    table_rows: Sequence[Mapping[str, Any]],
    input_rows: Iterable[Mapping[str, Any]],
    *,
    keys: Sequence[str],
    order_by: Sequence[str] = (),
) -> StateDifferences:
    """Compare a changes-fed table's rows with its input's rows (the columns both have, feed columns aside)."""
    expected = latest_state(input_rows, keys, order_by)
    counts = Counter(tuple(r[k] for k in keys) for r in table_rows)
    mismatched = 0
    for row in table_rows:
        want = expected.get(tuple(row[k] for k in keys))
        if want is None:
            continue
        columns = [c for c in want if c in row and c not in _FEED_COLUMNS]
        if any(want[c] != row[c] for c in columns):
            mismatched += 1
    return StateDifferences(
        expected_keys=len(expected),
        lost=len(expected.keys() - counts.keys()),
        extra=len(counts.keys() - expected.keys()),
        mismatched=mismatched,
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
    )


def feed_state_check(
    *,
    table: str,
    input_table: str,
    checkpoint: str,
    app_id: str,
    keys: Sequence[str],
    order_by: Sequence[str] = (),
    storage_options: Mapping[str, str] | None = None,
) -> FeedStateCheck:
    """Compare ``table`` (a changes-fed stage's, recording its batches as txn ``app_id``) with ``input_table`` at
    the table version the newest recorded batch read through.

    Raises:
        DeltaLogError: a Delta log cannot be read.
        CheckpointError: the batch's ``offsets/N`` cannot be read.
    """
    from deltalake import DeltaTable as RsTable

    from sparkonce.checkpoint.reader import read_checkpoint
    from sparkonce.delta.read.stream import BASE_INDEX, DeltaSourceOffset
    from sparkonce.delta.txn.commit import table_exists

    recorded = txn_versions(table, app_id)
    if not recorded:
        return FeedStateCheck(None, None, None)
    batch_id = max(recorded)
    offsets = read_checkpoint(checkpoint, read_sources=False).offsets.get(batch_id)
    if offsets is None or not table_exists(input_table):
        return FeedStateCheck(batch_id, None, None)
    end = DeltaSourceOffset.from_json(offsets.source_offset("0"))
    if end.index != BASE_INDEX or end.is_starting_version:
        return FeedStateCheck(batch_id, None, None)
    through = end.reservoir_version - 1
    options = dict(storage_options) if storage_options else None
    mine = RsTable(table, storage_options=options).to_pyarrow_table().to_pylist()
    theirs = RsTable(input_table, version=through, storage_options=options).to_pyarrow_table().to_pylist()
    return FeedStateCheck(batch_id, through, state_differences(mine, theirs, keys=keys, order_by=order_by))


def _rank(row: Mapping[str, Any], order_by: Sequence[str]) -> tuple[Any, ...]:
    return tuple((row[c] is not None, row[c]) for c in order_by)


__all__ = ["FeedStateCheck", "StateDifferences", "feed_state_check", "latest_state", "state_differences"]
