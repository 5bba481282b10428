"""A stage's scheduled compaction (``optimize = { every_batches = N, zorder_by = [...] }``): the TOML keys, their
errors naming the key, and when a compaction is due (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.compaction import due
from sparkonce.pipeline.loader import parse_pipeline
from sparkonce.pipeline.model import CompactionSchedule
from sparkonce_local.demo_pipeline import quickstart_pipeline

VALID = quickstart_pipeline("127.0.0.1:9092")
RAW = 'checkpoint = "checkpoints/raw"\n'
GOLD = 'checkpoint = "checkpoints/gold"\n'


def test_optimize_tables_become_schedules(tmp_path: Path) -> None:
    text = VALID.replace(RAW, RAW + "optimize = { every_batches = 10 }\n").replace(
        GOLD, GOLD + 'optimize = { every_batches = 3, zorder_by = ["value"] }\n'
    )
    config = parse_pipeline(text, tmp_path / "p.toml")
    assert config.compaction == (CompactionSchedule("raw", 10), CompactionSchedule("gold", 3, ("value",)))
    assert parse_pipeline(VALID, tmp_path / "p.toml").compaction == ()


@pytest.mark.parametrize(
    ("stage", "value", "message"),
    [
        (RAW, "optimize = 5", "stages.raw.optimize: must be a table such as { every_batches = 10 }"),
        (RAW, "optimize = { every_batches = 0 }", "stages.raw.optimize.every_batches: must be a positive integer"),
        (RAW, "optimize = { zorder_by = [] }", "stages.raw.optimize.every_batches: missing"),
        (RAW, "optimize = { every_batches = 2, when = 1 }", "stages.raw.optimize.when: unknown key"),
        (GOLD, 'optimize = { every_batches = 2, zorder_by = "value" }', "stages.gold.optimize.zorder_by: must be a"),
        (
            'quarantine = "tables/quarantine"\n',
            'optimize = { every_batches = 2, zorder_by = ["value"] }',
            "stages.bronze.optimize.zorder_by: Z-ordering needs a stage that writes one Delta table",
        ),
    ],
)
def test_bad_optimize_tables_name_the_key(tmp_path: Path, stage: str, value: str, message: str) -> None:
    with pytest.raises(PipelineConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_pipeline(VALID.replace(stage, stage + value + "\n"), tmp_path / "p.toml")


def test_due_after_every_n_batches_across_polls_and_restarts() -> None:
    every_3 = CompactionSchedule("gold", 3)
    assert not due(every_3, -1, 1)  # batches 0 and 1 done
    assert due(every_3, -1, 2)  # batch 2: three batches
    assert not due(every_3, 2, 4)
    assert due(every_3, 2, 7)  # a poll that saw several batches at once compacts once
    assert due(every_3, 6, 8)  # a restarted run that first sees batch 7 counts from the batch ids
    assert all(due(CompactionSchedule("raw", 1), b - 1, b) for b in range(5))
