"""``sparkonce chaos`` refuses bad input before anything starts: exit 2 with the option or file named."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sparkonce.cli.main import cli


def test_unknown_fault_kind(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["chaos", "--kinds", "driver_kill,meteor", "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert "--kinds" in done.output and "meteor" in done.output
    assert not (tmp_path / "w").exists()


def test_plan_file_that_is_not_json(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("{not json")
    done = CliRunner().invoke(cli, ["chaos", "--plan", str(plan), "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert str(plan) in done.output


def test_plan_file_that_is_not_a_plan(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"plan_version": 1, "rounds": []}')
    done = CliRunner().invoke(cli, ["chaos", "--plan", str(plan), "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert str(plan) in done.output and "not a chaos fault plan" in done.output


def test_refuses_to_wipe_a_work_dir_it_did_not_make(tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    (work / "keep.txt").write_text("precious")
    done = CliRunner().invoke(cli, ["chaos", "--faults", "1", "--work-dir", str(work)])
    assert done.exit_code == 2
    assert "not made by sparkonce chaos" in done.output
    assert (work / "keep.txt").read_text() == "precious"


def test_soak_refuses_a_pipeline_file_and_a_naive_kind(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text('name = "x"\n')
    done = CliRunner().invoke(cli, ["chaos", "--soak", "--naive", "delta-append", "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert "soak" in done.output and "naive" in done.output
    assert not (tmp_path / "w").exists()


def test_network_faults_refuse_a_pipeline_file(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text('name = "x"\n')
    done = CliRunner().invoke(cli, ["chaos", str(pipeline), "--network", "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert "--network" in done.output and "quickstart" in done.output
    assert not (tmp_path / "w").exists()


def test_overlapped_network_faults_are_for_soak_mode(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["chaos", "--network", "--overlap-network", "--work-dir", str(tmp_path / "w")])
    assert done.exit_code == 2
    assert "--overlap-network" in done.output and "soak mode only" in done.output
    assert not (tmp_path / "w").exists()


def test_changes_stage_is_for_the_quickstart_setup_whose_pipeline_then_feeds_a_stage_from_golds_changes(
    tmp_path: Path,
) -> None:
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.model import MergeStage
    from sparkonce_local.demo_pipeline import write_quickstart_pipeline

    pipeline = tmp_path / "p.toml"
    pipeline.write_text("")
    result = CliRunner().invoke(cli, ["chaos", str(pipeline), "--changes-stage", "--work-dir", str(tmp_path / "w")])
    assert result.exit_code == 2
    assert "changes_stage" in result.output and "quickstart setup only" in result.output

    config = load_pipeline(write_quickstart_pipeline(tmp_path / "q", "127.0.0.1:1", changes_stage=True))
    stage = config.stage("gold_changes")
    assert isinstance(stage, MergeStage)
    assert (stage.input, stage.input_mode, stage.keys) == ("gold", "changes", ("device_id",))
