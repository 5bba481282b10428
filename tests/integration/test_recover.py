"""Rebuilding a lost checkpoint from the table, and the guarded reset, on real streams (driver subprocesses)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from sparkonce.cli.main import cli
from sparkonce.errors import CheckpointError
from sparkonce.ops.recover import apply_rebuild, apply_reset, plan_rebuild, plan_reset
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.crash]


def _append_source(path: Path, start: int, count: int) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array(range(start, start + count), pa.int64())}), mode="append")


def _stream(source: Path, target: Path, ck: Path) -> None:
    run = run_driver(
        ["-m", "tests.integration.drivers.delta_to_delta", str(source), str(target), str(ck), "--max-files", "1"],
        cwd=str(REPO),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def _ids(table: Path) -> list[int]:
    return sorted(pa.table(DeltaTable(str(table)).to_pyarrow_table(columns=["id"])).column("id").to_pylist())


def test_lost_checkpoint_rebuilt_from_table_resumes_exactly(tmp_path: Path) -> None:
    source, target, ck = tmp_path / "source", tmp_path / "target", tmp_path / "ck"
    for i in range(3):
        _append_source(source, i * 10, 10)
    _stream(source, target, ck)
    query_id = (ck / "metadata").read_text()
    shutil.rmtree(ck)  # the checkpoint is lost

    plan = plan_rebuild(target, ck)
    assert plan.batch_id == 2 and plan.source_kinds == ("delta",)
    assert f'"{plan.query_id}"' in query_id
    apply_rebuild(plan)
    with pytest.raises(CheckpointError, match="not empty"):
        plan_rebuild(target, ck)

    for i in range(3, 5):
        _append_source(source, i * 10, 10)
    _stream(source, target, ck)
    ids = _ids(target)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert ids == list(range(50))
    assert (ck / "metadata").read_text() == query_id  # same app id: the sink's txn still guards replays


def test_reset_refuses_without_table_then_clears_and_restarts_clean(tmp_path: Path) -> None:
    source, target, ck = tmp_path / "source", tmp_path / "target", tmp_path / "ck"
    _append_source(source, 0, 10)
    _stream(source, target, ck)
    with pytest.raises(CheckpointError, match="--table"):
        plan_reset(ck, [])
    with pytest.raises(CheckpointError, match="may still be running"):
        plan_reset(ck, [target])  # just written: looks like a running query

    plan = plan_reset(ck, [target], force=True)
    result = apply_reset(plan)
    assert not ck.exists() and Path(plan.moved_to).is_dir()
    assert _ids(target) == []
    assert result.cleared_table_versions[str(target)] == DeltaTable(str(target)).version()
    _stream(source, target, ck)  # fresh checkpoint, source from the start: exactly one copy
    assert _ids(target) == list(range(10))


def test_cli_shows_plan_and_acts_only_with_yes(tmp_path: Path) -> None:
    source, target, ck = tmp_path / "source", tmp_path / "target", tmp_path / "ck"
    _append_source(source, 0, 5)
    _stream(source, target, ck)
    shutil.rmtree(ck)
    runner = CliRunner()
    shown = runner.invoke(cli, ["rebuild-checkpoint", str(target), str(ck)])
    assert shown.exit_code == 0, shown.output
    assert "Nothing written" in shown.output and not ck.exists()
    done = runner.invoke(cli, ["rebuild-checkpoint", str(target), str(ck), "--yes"])
    assert done.exit_code == 0, done.output
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*") if p.is_file()) == [
        "commits/0",
        "metadata",
        "offsets/0",
    ]
    refused = runner.invoke(cli, ["reset", str(ck)])
    assert refused.exit_code == 3 and "--table" in refused.output
