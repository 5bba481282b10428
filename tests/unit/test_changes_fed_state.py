"""Issue 24 item 4: a changes-fed merge stage's table against the state its input's change data feed implies,
as ``sparkonce chaos`` reconciles it (final tables) and ``verify`` checks it (at the table version the newest
recorded batch read through). Real Delta tables written by delta-rs; no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from sparkonce.pipeline.feed_state import feed_state_check
from sparkonce_local.chaos.reconcile import check_changes_fed

APP_ID = "5b0c2f53-2d5c-4a4f-9d6b-1b1b5f4b5d0e"


def _rows(pairs: list[tuple[str, float]]) -> pa.Table:
    return pa.table({"device_id": [k for k, _ in pairs], "value": [v for _, v in pairs]})


def _offsets(checkpoint: Path, batch_id: int, reservoir_version: int, index: int) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    offset = {
        "sourceVersion": 1,
        "reservoirId": "id",
        "reservoirVersion": reservoir_version,
        "index": index,
        "isStartingVersion": False,
    }
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    (checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offset)}")


def test_the_final_tables_reconcile_key_by_key(tmp_path: Path) -> None:
    silver, gold = tmp_path / "silver", tmp_path / "gold"
    write_deltalake(silver, _rows([("a", 1.0), ("b", 2.0), ("c", 3.0)]))
    write_deltalake(gold, _rows([("a", 1.0), ("b", 2.0), ("c", 3.0)]))
    clean = check_changes_fed(str(gold), str(silver), name="gold", keys=("device_id",), order_by=())
    assert clean.ok and (clean.rows, clean.expected_rows) == (3, 3)

    # gold: "b" wrong, "c" missing (a lost upsert), "z" extra (a lost delete), "a" twice
    write_deltalake(gold, _rows([("a", 1.0), ("a", 1.0), ("b", 9.0), ("z", 0.0)]), mode="overwrite")
    found = check_changes_fed(str(gold), str(silver), name="gold", keys=("device_id",), order_by=())
    assert (found.lost, found.extra, found.mismatched, found.duplicates) == (1, 1, 1, 1)


def test_verify_compares_with_the_input_at_the_table_version_the_newest_batch_read_through(tmp_path: Path) -> None:
    silver, gold, checkpoint = tmp_path / "silver", tmp_path / "gold", tmp_path / "ck"
    write_deltalake(silver, _rows([("a", 1.0), ("b", 2.0)]))  # 0
    write_deltalake(silver, _rows([("a", 5.0), ("b", 2.0)]), mode="overwrite")  # 1
    write_deltalake(silver, _rows([("c", 3.0)]), mode="append")  # 2: not read by gold yet
    txn = CommitProperties(app_transactions=[Transaction(APP_ID, 0)])
    write_deltalake(gold, _rows([("a", 5.0), ("b", 2.0)]), commit_properties=txn)
    _offsets(checkpoint, 0, reservoir_version=2, index=-1)  # batch 0 read silver through table version 1

    def check() -> tuple[int | None, int | None, int | None]:
        state = feed_state_check(
            table=str(gold), input_table=str(silver), checkpoint=str(checkpoint), app_id=APP_ID, keys=("device_id",)
        )
        total = None if state.differences is None else state.differences.total
        return state.batch_id, state.input_table_version, total

    assert check() == (0, 1, 0)
    write_deltalake(gold, _rows([("a", 1.0), ("b", 2.0)]), mode="overwrite")  # no txn: gold's state is stale
    assert check() == (0, 1, 1)
    _offsets(checkpoint, 0, reservoir_version=2, index=0)  # inside a table version: nothing to compare
    assert check() == (0, None, None)
