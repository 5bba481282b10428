"""`sparkonce run`'s progress: each stage's batch durations (p50/p95 of the batches that read rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.run import _Monitor
from sparkonce_local.demo_pipeline import quickstart_pipeline


class _Query:
    """What the monitor reads of a streaming query: ``recentProgress`` and ``isActive``."""

    def __init__(self, progress: list[dict[str, Any]]) -> None:
        self.recentProgress = progress
        self.isActive = True


def _progress(batch_id: int, rows: int, took_ms: int) -> dict[str, Any]:
    return {
        "runId": "run-1",
        "batchId": batch_id,
        "timestamp": f"2026-11-23T08:00:{batch_id:02d}.000Z",
        "numInputRows": rows,
        "processedRowsPerSecond": 10.0,
        "durationMs": {"triggerExecution": took_ms},
        "sources": [],
    }


def test_batch_duration_percentiles_per_stage_skip_empty_batches_and_count_each_batch_once(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline("127.0.0.1:1", topic="t"))
    config = load_pipeline(pipeline)
    monitor = _Monitor(config, (config.bronze,))
    monitor._last_broker_poll = float("inf")  # no broker here: lag is not what this test is about
    # 20 batches with rows taking 100..1,000 ms / 19 more; empty polls (0 rows) take 1 ms and must not count
    progress = [_progress(b, 5, 100 + 50 * b) for b in range(19)] + [_progress(19, 5, 2000)]
    progress += [_progress(20 + b, 0, 1) for b in range(5)]
    query = _Query(progress[:10])
    monitor.update({"bronze": query})  # type: ignore[dict-item]
    query.recentProgress = progress  # recentProgress repeats batches already seen
    monitor.update({"bronze": query})  # type: ignore[dict-item]
    (stage,) = monitor.snapshot({"bronze": query})  # type: ignore[dict-item]
    durations = sorted([100 + 50 * b for b in range(19)] + [2000])
    assert stage.batch_ms_p50 == durations[9]  # nearest rank: the 10th of 20
    assert stage.batch_ms_p95 == durations[18]  # the 19th of 20
    assert stage.batches == 25 and stage.total_rows == 100


def test_no_batch_with_rows_yet_has_no_percentiles(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline("127.0.0.1:1", topic="t"))
    config = load_pipeline(pipeline)
    monitor = _Monitor(config, (config.bronze,))
    monitor._last_broker_poll = float("inf")
    query = _Query([_progress(0, 0, 3)])
    monitor.update({"bronze": query})  # type: ignore[dict-item]
    (stage,) = monitor.snapshot({"bronze": query})  # type: ignore[dict-item]
    assert stage.batch_ms_p50 is None and stage.batch_ms_p95 is None


def test_a_stage_reading_a_table_shows_versions_and_bytes_behind(tmp_path: Path) -> None:
    """The lag of bronze from its last batch's end offset in the progress JSON and raw's Delta log (delta-rs)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from sparkonce.cli.pipeline import _lag_text

    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline("127.0.0.1:1", topic="t"))
    config = load_pipeline(pipeline)
    for i in range(3):  # raw at table versions 0, 1, 2: one file each
        write_deltalake(config.raw.table, pa.table({"x": list(range(10 * (i + 1)))}), mode="append")
    adds = pa.table(DeltaTable(config.raw.table).get_add_actions(flatten=True)).to_pydict()
    first = pa.table(DeltaTable(config.raw.table, version=0).get_add_actions(flatten=True)).to_pydict()
    unread = sum(s for p, s in zip(adds["path"], adds["size_bytes"]) if p not in first["path"])
    monitor = _Monitor(config, (config.bronze,))
    monitor._last_broker_poll = float("inf")
    progress = _progress(0, 10, 5)
    end = {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": 1, "index": -1, "isStartingVersion": False}
    progress["sources"] = [{"endOffset": end}]
    query = _Query([progress])
    monitor.update({"bronze": query})  # type: ignore[dict-item]
    (stage,) = monitor.snapshot({"bronze": query})  # type: ignore[dict-item]
    assert (stage.versions_behind, stage.bytes_behind) == (2, unread)
    assert _lag_text(stage).startswith("2 input table version(s), ") and _lag_text(stage).endswith(" behind")
