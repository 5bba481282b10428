"""Seed-style upserts with ``DeltaTable.merge`` inside ``foreachBatch`` are exactly-once with Delta's txn confs,
proven by a SIGKILL of the driver right after a merge's Delta commit (before Spark's ``commits/N``) and a restart;
the same crash without the confs double counts, so the check can fail."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sparkonce_local.chaos import DriverRun, run_driver
from tests.conftest import REPO
from tests.integration.conftest import write_input_files

pytestmark = [pytest.mark.spark, pytest.mark.crash]


def _run(tmp_path: Path, *extra: str, crash_at: str | None = None) -> DriverRun:
    args = [
        "-m",
        "tests.integration.drivers.files_to_merge",
        str(tmp_path / "input"),
        str(tmp_path / "ck"),
        str(tmp_path / "table"),
        *extra,
    ]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=600)


def _hits(table: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    return {r["device"]: r["hits"] for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()}


@pytest.mark.sampled(keep=1)
@pytest.mark.parametrize("txn", [True, False], ids=["txn-confs", "naive"])
def test_crash_after_merge_commit_then_restart(tmp_path: Path, txn: bool) -> None:
    ids = write_input_files(tmp_path / "input", files=3, rows_per_file=20)
    expected = dict(Counter(f"dev-{i % 4}" for i in ids))
    extra = [] if txn else ["--no-txn"]

    crashed = _run(tmp_path, *extra, crash_at="after_delta_commit:1")
    assert crashed.killed, crashed.stderr[-3000:]
    ck, table = tmp_path / "ck", tmp_path / "table"
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    first_two = dict(Counter(f"dev-{i % 4}" for i in ids[:40]))
    assert _hits(table) == first_two  # batch 1's merge is in the table, Spark's commits/1 is not

    finished = _run(tmp_path, *extra)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "DONE" in finished.stdout
    merges = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        if info.get("operation") == "MERGE":
            merges.append([(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a])
    if txn:
        assert _hits(table) == expected  # batch 1 re-run by Spark, skipped by its txn
        assert merges == [[("device-hits-upsert", b)] for b in range(3)]
    else:
        # The naive upsert applies batch 1 twice: every device of it counted twice.
        batch_1 = Counter(f"dev-{i % 4}" for i in ids[20:40])
        assert _hits(table) == {d: n + batch_1[d] for d, n in expected.items()}
        assert len(merges) == 4
