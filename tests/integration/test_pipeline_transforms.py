"""User stages: a Python transform with a fan-out and a SQL stage in a DAG, crashed for real; load-time errors.

The DAG: ``raw`` (Kafka -> Delta) -> ``parsed`` (Python ``(df, batch_id)`` transform with a UDF from the pipeline's
folder, fanned out to ``readings`` (every parsed row) and ``high`` (``value > 25``)) -> ``low`` (SQL on
``readings``). Every stage is ``availableNow``: ``sparkonce run`` drains the topic and exits 0.

1. crash at ``between_fanout_tables:1``: ``parsed`` batch 1 committed ``readings``, not ``high``;
2. restart to the end.

Then exact contents against an oracle computed in Python from the raw records, and one txn per (app id, batch id)
per table.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.loader import parse_pipeline
from sparkonce_local.chaos import DriverRun, run_driver
from sparkonce_local.services.producer import produce_sensor_readings
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_commits, checkpoint_query_id, delta_rows, delta_txns

RECORDS = 300

TRANSFORMS = """
import pyspark.sql.functions as F
from pyspark.sql.types import StringType


@F.udf(StringType())
def site_of(device_id):
    return None if device_id is None else "site-" + device_id[-1]


def parse(df, batch_id):
    return df.select(
        F.get_json_object("value", "$.device_id").alias("device_id"),
        F.expr("try_cast(get_json_object(value, '$.value') AS DOUBLE)").alias("value"),
        site_of(F.get_json_object("value", "$.device_id")).alias("site"),
        F.lit(batch_id).cast("bigint").alias("batch_id"),
        "partition",
        "offset",
    ).where(F.col("value").isNotNull())
"""


def _pipeline(bootstrap: str, topic: str) -> str:
    return f'''
name = "dag"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
max_offsets_per_trigger = 100

[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
trigger = {{ availableNow = true }}

[stages.parsed]
input = "raw"
transform = "dag_transforms:parse"
tables = [{{ path = "tables/readings", name = "readings", where = "value IS NOT NULL" }},
          {{ path = "tables/high", name = "high", where = "value > 25" }}]
checkpoint = "checkpoints/parsed"
max_files_per_trigger = 1
trigger = {{ availableNow = true }}

[stages.low]
input = "parsed"
sql = "low.sql"
table = "tables/low"
checkpoint = "checkpoints/low"
trigger = {{ availableNow = true }}
'''


def _run(pipeline: Path, crash_at: str | None = None) -> DriverRun:
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain"]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=600)


def _oracle_value(value: str | None) -> float | None:
    try:
        reading = json.loads(value or "")
    except json.JSONDecodeError:
        return None
    if not isinstance(reading, dict):
        return None
    number = reading.get("value")
    return float(number) if isinstance(number, int | float) and not isinstance(number, bool) else None


def _key(row: dict[str, Any]) -> tuple[int, int]:
    return (row["partition"], row["offset"])


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.crash
def test_dag_with_python_fanout_and_sql_stage_crash_restart_exact(broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = broker.unique_topic("dag")
    produced = produce_sensor_readings(
        broker.bootstrap, topic=topic, count=RECORDS, partitions=2, malformed_share=0.1, seed=5
    )
    (tmp_path / "dag_transforms.py").write_text(TRANSFORMS)
    (tmp_path / "low.sql").write_text("SELECT device_id, value, partition, offset FROM {input} WHERE value < 15\n")
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(_pipeline(broker.bootstrap, topic))
    tables, ck = tmp_path / "tables", tmp_path / "checkpoints"

    crashed = _run(pipeline, "between_fanout_tables:1")
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "parsed" / "offsets" / "1").exists() and not (ck / "parsed" / "commits" / "1").exists()
    parsed_app = checkpoint_query_id(ck / "parsed")
    assert max(v for a, v in delta_txns(tables / "readings") if a == f"{parsed_app}:readings") == 1
    assert max(v for a, v in delta_txns(tables / "high") if a == f"{parsed_app}:high") == 0
    assert not (tables / "low").exists(), "low started before parsed finished (availableNow stages run in order)"

    finished = _run(pipeline)
    assert finished.returncode == 0, finished.stderr[-3000:]

    raw = delta_rows(tables / "raw")
    assert len(raw) == produced.records
    expected = {_key(r): _oracle_value(r["value"]) for r in raw}
    devices = {_key(r): json.loads(r["value"])["device_id"] for r in raw if expected[_key(r)] is not None}
    readings = delta_rows(tables / "readings")
    keys = [_key(r) for r in readings]
    assert len(keys) == len(set(keys)), f"duplicates in readings: {[k for k, n in Counter(keys).items() if n > 1]}"
    assert set(keys) == {k for k, v in expected.items() if v is not None}
    for row in readings:
        assert math.isclose(row["value"], expected[_key(row)] or math.nan)
        assert row["device_id"] == devices[_key(row)]
        assert row["site"] == "site-" + row["device_id"][-1]
    high = delta_rows(tables / "high")
    assert sorted(_key(r) for r in high) == sorted(k for k, v in expected.items() if v is not None and v > 25)
    low = delta_rows(tables / "low")
    assert sorted(_key(r) for r in low) == sorted(k for k, v in expected.items() if v is not None and v < 15)
    assert high and low, "the data should exercise both filtered tables"

    for table, stage, name in (
        ("readings", "parsed", ":readings"),
        ("high", "parsed", ":high"),
        ("low", "low", ":low"),
    ):
        txns = delta_txns(tables / table)
        assert len(txns) == len(set(txns)), f"{table}: a batch committed twice: {Counter(txns)}"
        app_id = checkpoint_query_id(ck / stage) + name
        assert {a for a, _ in txns} == {app_id}
        assert {v for _, v in txns} == checkpoint_commits(ck / stage)
    assert len(checkpoint_commits(ck / "parsed")) > 2


SCHEMA_SOURCE = '[source]\nbootstrap_servers = "127.0.0.1:1"\ntopic = "t"\n'


@pytest.mark.spark
@pytest.mark.parametrize(
    ("stage", "message"),
    [
        ('sql = "SELECT no_such_column FROM {input}"', "stages.t.sql: sql does not apply to the input's schema"),
        ('sql = "SELEC value FROM {input}"', "stages.t.sql: sql does not apply to the input's schema"),
        ('transform = "bad_plan:f"', "stages.t.transform: bad_plan:f does not apply to the input's schema"),
        ('transform = "not_a_frame:f"', "stages.t.transform: not_a_frame:f returned a int, not a DataFrame"),
        (
            'sql = "SELECT value FROM {input}"\nwhere_table = true',
            "stages.t.tables[0].where: 'nope > 1' does not apply to the stage's output",
        ),
    ],
    ids=["unknown-column", "syntax", "python-plan", "not-a-dataframe", "where"],
)
def test_load_time_errors_before_any_data_moves(spark, tmp_path: Path, stage: str, message: str) -> None:  # type: ignore[no-untyped-def]
    from sparkonce.pipeline.stages import check_stages

    (tmp_path / "bad_plan.py").write_text("def f(df):\n    return df.select('no_such_column')\n")
    (tmp_path / "not_a_frame.py").write_text("def f(df, batch_id):\n    return 3\n")
    output = 'table = "tables/t"'
    if "where_table = true" in stage:
        stage = stage.replace("\nwhere_table = true", "")
        output = 'tables = [{ path = "tables/t", where = "nope > 1" }]'
    text = SCHEMA_SOURCE + f'[stages.t]\ninput = "source"\n{output}\ncheckpoint = "ck/t"\n{stage}\n'
    config = parse_pipeline(text, tmp_path / "p.toml")
    with pytest.raises(PipelineConfigError, match=f"^{re.escape(message)}"):
        check_stages(spark, config, config.stages)
    assert not (tmp_path / "tables").exists() and not (tmp_path / "ck").exists()
