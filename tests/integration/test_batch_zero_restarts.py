"""Issue 13, the same trap in the other sources: Spark re-runs an uncommitted batch 0 with a fresh
``initialOffset()`` (not checkpointed), paired with the end saved in ``offsets/0``. A source whose initial offset
depends on when it is asked must still re-read exactly what batch 0 planned. Each test SIGKILLs a driver inside
batch 0, lets the input grow, restarts and checks exact contents. (The Delta source: test_delta_stream_restart.py.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.fixtures_broker import EmbeddedBroker, numbered
from tests.integration.conftest import delta_ids, write_input_files

pytestmark = [pytest.mark.spark, pytest.mark.crash]


@pytest.mark.broker
def test_kafka_latest_killed_in_batch_zero_reads_only_what_came_after_it(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """``startingOffsets=latest`` is resolved into batch 0's end; a re-run must not re-resolve it later."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, numbered(40), partitions=2)  # before the query: never read
    table, ck = tmp_path / "table", tmp_path / "ck"
    args = ["-m", "tests.integration.drivers.kafka_to_sink", broker.bootstrap, topic, str(table), str(ck)]
    args += ["--format", "delta", "--starting-offsets", "latest"]

    crashed = run_driver(args, crash_at="after_delta_commit:0", cwd=str(REPO), timeout=900)
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "offsets" / "0").exists() and not (ck / "commits" / "0").exists()
    broker.produce(topic, numbered(30, start=40), partitions=2)  # 15 more per partition while the driver is down

    finished = run_driver(args, cwd=str(REPO), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = pa.table(DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset"])).to_pylist()
    coordinates = [(r["partition"], r["offset"]) for r in rows]
    assert [c for c, n in Counter(coordinates).items() if n > 1] == []
    assert sorted(coordinates) == [(p, o) for p in (0, 1) for o in range(20, 35)]


def test_file_source_killed_in_batch_zero_after_new_files_arrive(tmp_path: Path) -> None:
    """Spark's JSON file source keeps batch 0's files in ``sources/0``: new files wait for later batches."""
    inputs, table, ck = tmp_path / "input", tmp_path / "table", tmp_path / "ck"
    expected = write_input_files(inputs, files=3, rows_per_file=20)
    args = ["-m", "sparkonce.ops.stream_files", str(inputs), str(table), str(ck)]

    crashed = run_driver(args, crash_at="mid_write:0", cwd=str(REPO), timeout=900)
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "offsets" / "0").exists() and not (ck / "commits" / "0").exists()
    expected += write_input_files(inputs, files=2, rows_per_file=20, start=1000)

    finished = run_driver(args, cwd=str(REPO), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    ids = delta_ids(table)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert ids == sorted(expected)
