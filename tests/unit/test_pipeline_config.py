"""The pipeline definition: validation errors name the key; checkpoint ownership (no Spark)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparkonce.errors import CheckpointError, PipelineConfigError
from sparkonce.pipeline.config import Trigger, load_pipeline, parse_pipeline
from sparkonce.pipeline.defaults import quickstart_pipeline
from sparkonce.pipeline.owner import OWNER_FILE, claim_checkpoint, read_owner

VALID = quickstart_pipeline("127.0.0.1:9092")


def _parse(text: str, tmp_path: Path) -> object:
    return parse_pipeline(text, tmp_path / "p.toml")


def test_quickstart_pipeline_is_valid(tmp_path: Path) -> None:
    config = parse_pipeline(VALID, tmp_path / "p.toml")
    assert [s.name for s in config.stages] == ["raw", "bronze", "gold"]
    assert config.raw.table == str(tmp_path / "tables" / "raw")
    assert config.raw.trigger == Trigger("availableNow")
    assert config.bronze is not None and [f.name for f in config.bronze.fields] == [
        "device_id",
        "reading_time",
        "value",
    ]
    assert config.gold is not None and config.gold.keys == ("device_id",) and config.gold.order_by == ("reading_time",)
    assert config.source.spark_options()["maxOffsetsPerTrigger"] == "500"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'checkpoint = "checkpoints/bronze"',
            'checkpoint = "checkpoints/raw"',
            "stages.bronze.checkpoint: shared with stages.raw.checkpoint",
        ),
        (
            'quarantine = "tables/quarantine"',
            'quarantine = "tables/bronze"',
            "stages.bronze.quarantine: same path as stages.bronze.table",
        ),
        ('checkpoint = "checkpoints/gold"', 'checkpoint = "checkpoints/raw/gold"', "stages.gold.checkpoint"),
        ('drift = "fail"', 'drift = "evolve"', "stages.bronze.drift: 'evolve' is not a drift policy"),
        ('keys = ["device_id"]', 'keys = ["sensor"]', "stages.gold.keys: 'sensor' is not a bronze column"),
        ('merge = "latest"', 'merge = "sum"', "stages.gold.merge"),
        (
            "max_offsets_per_trigger = 500",
            "max_offsets_per_trigger = -1",
            "source.max_offsets_per_trigger: must be a positive",
        ),
        ("max_offsets_per_trigger = 500", "max_offset_per_trigger = 5", "source.max_offset_per_trigger: unknown key"),
        ('starting_offsets = "earliest"', 'starting_offsets = "first"', "source.starting_offsets"),
        (
            'schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"',
            'schema = "device_id STRING, value DUBBLE"',
            "stages.bronze.schema: field 'value'",
        ),
        (
            'schema = "device_id STRING, reading_time TIMESTAMP, value DOUBLE"',
            'schema = "device_id STRING, _offset BIGINT"',
            "reserved",
        ),
        (
            'required = ["device_id", "reading_time", "value"]',
            'required = ["device_id", "humidity"]',
            "stages.bronze.required: 'humidity'",
        ),
        (
            'required = ["device_id", "reading_time", "value"]',
            'required = ["value"]',
            "stages.gold.keys: 'device_id' must be listed in stages.bronze.required",
        ),
        (
            "trigger = { availableNow = true }",
            'trigger = { processingTime = "soon" }',
            "stages.raw.trigger.processingTime",
        ),
        ("trigger = { availableNow = true }", "trigger = { once = true }", "stages.raw.trigger.once: unknown trigger"),
        ('topic = "sensor_readings_raw"', "topic = 42", "source.topic: must be a non-empty string"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in VALID
    with pytest.raises(PipelineConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _parse(VALID.replace(old, new, 1), tmp_path)


def test_missing_sections(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"^source: missing"):
        _parse('[stages.raw]\ntable = "t"\ncheckpoint = "c"\n', tmp_path)
    with pytest.raises(PipelineConfigError, match=r"stages\.raw: missing"):
        _parse('[source]\nbootstrap_servers = "b"\ntopic = "t"\n[stages.bronze]\ntable = "x"\n', tmp_path)
    with pytest.raises(PipelineConfigError, match="not valid TOML"):
        _parse("[source\n", tmp_path)
    with pytest.raises(PipelineConfigError, match="pipeline file not found"):
        load_pipeline(tmp_path / "nope.toml")


def test_default_trigger_is_five_seconds(tmp_path: Path) -> None:
    text = '[source]\nbootstrap_servers = "b"\ntopic = "t"\n[stages.raw]\ntable = "t"\ncheckpoint = "c"\n'
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert config.raw.trigger.spark_kwargs() == {"processingTime": "5 seconds"}


def _write(tmp_path: Path, name: str, text: str = VALID) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_checkpoint_claimed_and_reclaimed(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    owner = claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    assert owner == read_owner(config.raw.checkpoint)
    assert claim_checkpoint(config.path, "raw", config.raw.checkpoint) == owner


def test_checkpoint_shared_by_two_pipeline_files_is_refused(tmp_path: Path) -> None:
    first = load_pipeline(_write(tmp_path, "first.toml"))
    second = load_pipeline(_write(tmp_path, "second.toml"))
    claim_checkpoint(first.path, "raw", first.raw.checkpoint)
    with pytest.raises(CheckpointError, match=r"belongs to stage 'raw' of pipeline .*first\.toml.*refusing to share"):
        claim_checkpoint(second.path, "raw", second.raw.checkpoint)


def test_checkpoint_of_another_stage_is_refused(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    with pytest.raises(CheckpointError, match="belongs to stage 'raw'"):
        claim_checkpoint(config.path, "bronze", config.raw.checkpoint)


def test_moved_checkpoint_is_noticed(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    claim_checkpoint(config.path, "raw", config.raw.checkpoint)
    (Path(config.raw.checkpoint) / "offsets").mkdir()
    moved = tmp_path / "elsewhere" / "raw"
    moved.parent.mkdir()
    shutil.move(config.raw.checkpoint, moved)
    with pytest.raises(CheckpointError, match=r"was created at .* has been moved"):
        claim_checkpoint(config.path, "raw", str(moved))


def test_foreign_spark_checkpoint_is_refused(tmp_path: Path) -> None:
    config = load_pipeline(_write(tmp_path, "p.toml"))
    ck = Path(config.raw.checkpoint)
    ck.mkdir(parents=True)
    (ck / "metadata").write_text(json.dumps({"id": "q"}))
    with pytest.raises(CheckpointError, match=f"no {OWNER_FILE}"):
        claim_checkpoint(config.path, "raw", str(ck))
