"""Which batches a RESTORE undid while the table kept their txn (``sparkonce.delta.txn.restores``), on commit histories
built as data: no Spark, no files."""

from __future__ import annotations

import pytest

from sparkonce.delta.log.delta_log import CommitEntry, Txn
from sparkonce.delta.txn.restores import restored_app_id, undone_batches, undone_table_versions

Q = "query-1"


def _entry(table_version: int, *, batch: int | None = None, restore_to: int | None = None, app: str = Q) -> CommitEntry:
    return CommitEntry(
        table_version=table_version,
        timestamp_ms=None,
        operation="RESTORE" if restore_to is not None else "STREAMING UPDATE",
        operation_parameters={"version": str(restore_to)} if restore_to is not None else {},
        operation_metrics={},
        read_version=None,
        is_blind_append=None,
        user_metadata=None,
        engine_info=None,
        txns=(Txn(app, batch, None),) if batch is not None else (),
        num_added_files=0,
        num_removed_files=0,
        added_bytes=0,
        added_rows=None,
        commit_info={},
        query_id=app if batch is not None else None,
        batch_id=batch,
    )


def _batches(n: int) -> list[CommitEntry]:
    """Batches 0..n-1 of query Q at table versions 0..n-1."""
    return [_entry(b, batch=b) for b in range(n)]


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        # No RESTORE: nothing undone.
        (_batches(4), []),
        # Restore to table version 1 at table version 4: batches 2 and 3 undone.
        ([*_batches(4), _entry(4, restore_to=1)], [(4, 1, (2, 3))]),
        # The stream went on after the RESTORE (batch 4): still only 2 and 3.
        ([*_batches(4), _entry(4, restore_to=1), _entry(5, batch=4)], [(4, 1, (2, 3))]),
        # Restored back, then forward again to table version 3 (before the first RESTORE): nothing is undone now.
        ([*_batches(4), _entry(4, restore_to=1), _entry(5, restore_to=3)], []),
        # Two restores back: the newest content descends from table version 0, so batches 1-3 are all missing and
        # named under the RESTORE on its chain (the earlier RESTORE at 4 is itself undone).
        ([*_batches(4), _entry(4, restore_to=2), _entry(5, restore_to=0)], [(5, 0, (1, 2, 3))]),
    ],
)
def test_undone_batches(history: list[CommitEntry], expected: list[tuple[int, int, tuple[int, ...]]]) -> None:
    newest = history[-1].table_version
    found = undone_batches(reversed(history), newest, [Q])
    assert [(u.restore_table_version, u.restored_table_version, u.batch_ids) for u in found] == expected
    assert all(u.app_id == Q and not u.rewritten for u in found)


def test_nested_restores_name_every_batch_missing_from_the_content() -> None:
    # 0..5 written; restore to 4 (undoes 5); batch 6; restore to 1: the content descends from 1, so 2-6 are missing.
    history = [*_batches(6), _entry(6, restore_to=4), _entry(7, batch=6), _entry(8, restore_to=1)]
    found = undone_batches(history, 8, [Q])
    assert [(u.restore_table_version, u.batch_ids) for u in found] == [(8, (2, 3, 4, 5, 6))]
    assert undone_table_versions(history, 8) == {2, 3, 4, 5, 6, 7}  # the RESTORE at 6 too


def test_the_safe_path_marks_the_batches_rewritten() -> None:
    safe = restored_app_id(Q, 4)
    assert safe == f"{Q}-restore-4"
    history = [*_batches(4), _entry(4, restore_to=1), _entry(5, batch=2, app=safe), _entry(6, batch=3, app=safe)]
    (found,) = undone_batches(history, 6, [Q, safe])
    assert found.batch_ids == (2, 3) and found.rewritten
