"""``sparkonce status`` without Spark: the run lock tells running from stopped, the Delta lag of real tables
(written by delta-rs) per end offset, and what is wrong is a finding with exit code 1, not a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import CheckpointError
from sparkonce.pipeline.lag import DeltaLagReader
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.owner import lock_run, run_holder
from sparkonce.pipeline.status import pipeline_status
from sparkonce_local.demo_pipeline import quickstart_pipeline


def _sizes(table: str, version: int) -> dict[str, int]:
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(table, version=version).get_add_actions(flatten=True)).to_pydict()
    return dict(zip(actions["path"], actions["size_bytes"]))


def test_delta_lag_counts_the_versions_and_bytes_not_read(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    table = str(tmp_path / "t")
    for i in range(4):  # table versions 0..3, one file each
        write_deltalake(table, pa.table({"x": list(range(i * 10, i * 10 + 10 + i))}), mode="append")
    added = [sum(_sizes(table, v).values()) - (sum(_sizes(table, v - 1).values()) if v else 0) for v in range(4)]
    reader = DeltaLagReader(table)

    def lag(version: int, index: int, snapshot: bool = False) -> tuple[int, int, int]:
        end = {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": version, "index": index}
        result = reader.lag({**end, "isStartingVersion": snapshot})
        return result.latest_table_version, result.versions_behind, result.bytes_behind

    assert lag(4, -1) == (3, 0, 0)  # read everything
    assert lag(2, -1) == (3, 2, added[2] + added[3])  # table versions 2 and 3 not read
    assert lag(2, 0) == (3, 1, added[3])  # the one file of table version 2 read
    assert lag(0, -1) == (3, 4, sum(added))
    # inside the initial snapshot of table version 3 (4 files, read in modification time order): 2 read
    assert lag(3, 1, snapshot=True)[:2] == (3, 0)
    assert 0 < lag(3, 1, snapshot=True)[2] < sum(added)


def test_run_lock_tells_running_from_stopped_and_refuses_a_second_run(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "checkpoints" / "raw")
    assert run_holder(checkpoint) is None
    held = lock_run("/p.toml", "raw", checkpoint)
    try:
        holder = run_holder(checkpoint)
        assert holder is not None and (holder.pid, holder.stage, holder.pipeline) == (os.getpid(), "raw", "/p.toml")
        with pytest.raises(CheckpointError, match=f"in use by a running sparkonce run \\(pid {os.getpid()} on"):
            lock_run("/p.toml", "raw", checkpoint)
    finally:
        held.release()
    assert run_holder(checkpoint) is None  # the file stays; nobody holds it
    lock_run("/p.toml", "raw", checkpoint).release()


def test_status_of_a_stage_running_now_and_an_unreachable_broker(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline("127.0.0.1:1", topic="nowhere"))
    config = load_pipeline(pipeline)
    assert config.bronze is not None
    held = lock_run(config.path, "bronze", config.bronze.checkpoint)
    try:
        report = pipeline_status(config, broker_timeout_s=2.0)
    finally:
        held.release()
    stages = {s.stage: s for s in report.stages}
    assert report.running is True
    assert stages["bronze"].state == "running" and stages["bronze"].run_pid == os.getpid()
    assert stages["raw"].state == "never started" and stages["raw"].last_committed is None
    assert stages["raw"].partition_lag == () and stages["gold"].delta_lag is None
    assert len(report.findings) == 1
    assert report.findings[0].startswith("Kafka lag unknown: broker at 127.0.0.1:1 is unreachable")
    assert not report.ok

    result = CliRunner().invoke(cli, ["status", str(pipeline), "--json", "--stage", "gold"])
    assert result.exit_code == 0, result.output  # gold reads a table: the broker is not asked
    data = json.loads(result.output)
    assert data["running"] is False and [s["state"] for s in data["stages"]] == ["never started"]


def test_a_checkpoint_that_records_another_sink_is_a_finding(tmp_path: Path) -> None:
    from sparkonce.checkpoint.tables import RecordedTable, record_tables
    from sparkonce.storage import table_location
    from tests.unit.doctor_helpers import make_checkpoint

    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(quickstart_pipeline("127.0.0.1:1", topic="nowhere"))
    config = load_pipeline(pipeline)
    assert config.gold is not None
    gold = config.gold.checkpoint
    make_checkpoint(Path(gold), planned=range(2), committed=range(2))
    own = table_location(config.gold.tables[0]).uri
    record_tables(gold, [RecordedTable("sink", "delta", own)])

    def recorded_findings() -> list[str]:  # (the checkpoint's Kafka offsets also give a lag finding, not checked here)
        return [
            f for f in pipeline_status(config, stages=["gold"]).stages[0].findings if f.startswith("its checkpoint")
        ]

    assert recorded_findings() == []  # the stage's own table: fine
    record_tables(gold, [RecordedTable("sink", "delta", str(tmp_path / "old_gold"))])
    (finding,) = recorded_findings()
    assert finding.startswith(f"its checkpoint records batches written to {tmp_path / 'old_gold'}, a table the stage")
    assert own in finding
