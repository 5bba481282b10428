"""``examples/sdp``: Kafka -> sparkonce Delta sink as a Spark Declarative Pipeline, run by the real ``spark-pipelines``.

Produce, run, produce more, run again on the same checkpoint, then a full refresh: after each run the Delta table
holds every Kafka record exactly once. ``spark-pipelines`` starts a Spark Connect server on port 15002, so this
module's runs are sequential and must not overlap another SDP test (marker ``sdp``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns
from tests.fixtures_broker import EmbeddedBroker, numbered

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.sdp]

EXAMPLE = REPO / "examples" / "sdp"
CLI = Path(sys.executable).with_name("spark-pipelines")


def _project(tmp_path: Path, bootstrap: str, topic: str) -> tuple[Path, Path]:
    """A copy of the example with its four settings pointed at this test's broker and folders."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    table = tmp_path / "tables" / "raw"
    spec = project / "spark-pipeline.yml"
    text = spec.read_text()
    for key, value in {
        "storage": f"file://{tmp_path / 'storage'}",
        "sparkonce.example.bootstrap": f'"{bootstrap}"',
        "sparkonce.example.topic": f'"{topic}"',
        "sparkonce.example.table": f'"{table}"',
    }.items():
        text, n = re.subn(rf"^(\s*){re.escape(key)}: .*$", rf"\g<1>{key}: {value}", text, flags=re.M)
        assert n == 1, key
    spec.write_text(text)
    return spec, table


def _run(spec: Path, *extra: str) -> str:
    """Run the pipeline; return its output. Success is read from the run's events (see docs/sdp.md)."""
    env = dict(os.environ)
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]),
        PATH=os.pathsep.join([str(CLI.parent), env.get("PATH", "")]),
    )
    proc = subprocess.Popen(
        [str(CLI), "run", "--spec", str(spec), *extra],
        cwd=spec.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=1500)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the server JVM and its Python workers
        except ProcessLookupError:
            pass
    events = [line for line in out.splitlines() if re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: ", line)]
    assert any(e.endswith("Run is COMPLETED.") for e in events), out[-5000:]
    assert not [e for e in events if "FAILED" in e], out[-5000:]
    # pyspark 4.3's client exits 1 after every successful run with Python data sources, failing on the accumulator
    # updates the server sends back (docs/sdp.md); when a pyspark release fixes that, this is where to change.
    assert proc.returncode == 1, out[-5000:]
    assert "PySparkValueError: [UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__" in out
    return out


def _exact_records(table: Path, topic: str, ends: dict[int, int]) -> None:
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["key", "value", "topic", "partition", "offset"]).to_pylist()
    coordinates = [(r["topic"], r["partition"], r["offset"]) for r in rows]
    assert [c for c, n in Counter(coordinates).items() if n > 1] == []
    assert set(coordinates) == {(topic, p, o) for p, end in ends.items() for o in range(end)}
    assert sorted(int(r["key"][1:]) for r in rows) == list(range(sum(ends.values())))
    assert all(r["value"] == "v" + r["key"][1:] for r in rows)


def test_example_runs_twice_on_its_checkpoint_then_full_refresh_truncates(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(120), partitions=2)
    spec, table = _project(tmp_path, broker.bootstrap, topic)
    flow = tmp_path / "storage" / "_checkpoints" / "raw_events" / "kafka_to_raw"

    _run(spec)
    _exact_records(table, topic, {0: 60, 1: 60})
    first = checkpoint_query_id(flow / "0")
    batches = len(list((flow / "0" / "commits").glob("[0-9]*")))

    broker.produce(topic, numbered(80, start=120), partitions=2)
    _run(spec)  # continues the same checkpoint: the same query id, later batch ids
    _exact_records(table, topic, {0: 100, 1: 100})
    assert {app for app, _ in delta_txns(table)} == {first}
    assert len(list((flow / "0" / "commits").glob("[0-9]*"))) > batches

    _run(spec, "--full-refresh-all")  # generation 1, a new query id, the topic read from the start again
    refreshed = checkpoint_query_id(flow / "1")
    assert refreshed != first
    _exact_records(table, topic, {0: 100, 1: 100})  # truncated by its first batch, not doubled
    assert delta_txns(table)[-1][0] == refreshed
