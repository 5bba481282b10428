"""The Delta sink under SDP's checkpoint layout: a full refresh (a new generation, a new query id) is refused by
default and truncates the table with ``fullRefresh=truncate``, exactly once.

Real Spark queries write with the checkpoint folders ``spark-pipelines`` would give the flow
(``<storage>/_checkpoints/<sink>/<flow>/<generation>``); the end-to-end run of ``spark-pipelines`` itself is
``test_sdp_example.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import StreamingQueryException

from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns
from tests.integration.conftest import delta_ids, write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def _run(spark: SparkSession, inputs: Path, table: Path, checkpoint: Path, **options: str) -> None:
    stream = spark.readStream.format("json").schema("id long, device string, value double").load(str(inputs))
    writer = stream.writeStream.format("sparkonce.delta").option("checkpointLocation", f"file:{checkpoint}")
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start(str(table))
    query.awaitTermination()


def test_full_refresh_fails_by_default_and_truncates_when_asked(spark: SparkSession, tmp_path: Path) -> None:
    inputs, table = tmp_path / "input", tmp_path / "table"
    flow = tmp_path / "storage" / "_checkpoints" / "events" / "load_events"
    expected = write_input_files(inputs, files=2, rows_per_file=20)

    _run(spark, inputs, table, flow / "0")  # the flow's first generation (file:/x, as SDP passes it)
    assert delta_ids(table) == expected
    before = sorted((table / "_delta_log").glob("*.json"))

    with pytest.raises(StreamingQueryException, match=r"(?s)SinkError: .*new checkpoint generation .* fullRefresh"):
        _run(spark, inputs, table, flow / "1")  # a full refresh: a new query id reads the input again
    assert delta_ids(table) == expected
    assert sorted((table / "_delta_log").glob("*.json")) == before

    _run(spark, inputs, table, flow / "1", fullRefresh="truncate")
    assert delta_ids(table) == expected  # replaced, not doubled
    refreshed = checkpoint_query_id(flow / "1")
    assert delta_txns(table)[-1][0] == refreshed

    more = write_input_files(inputs, files=1, rows_per_file=20, start=1000)
    _run(spark, inputs, table, flow / "1", fullRefresh="truncate")  # later batches append
    assert delta_ids(table) == sorted(expected + more)


@pytest.mark.crash
def test_crash_after_the_truncating_commit_does_not_truncate_again(tmp_path: Path) -> None:
    inputs, table = tmp_path / "input", tmp_path / "table"
    flow = tmp_path / "storage" / "_checkpoints" / "events" / "load_events"
    expected = write_input_files(inputs, files=3, rows_per_file=20)
    driver = ["-m", "sparkonce.ops.stream_files", str(inputs), str(table)]
    assert run_driver([*driver, str(flow / "0")], cwd=str(REPO), timeout=900).returncode == 0
    assert delta_ids(table) == expected

    refresh = [*driver, str(flow / "1"), "--option", "fullRefresh=truncate"]
    crashed = run_driver(refresh, crash_at="after_delta_commit:1", cwd=str(REPO), timeout=900)
    assert crashed.killed, crashed.stderr[-3000:]
    assert delta_ids(table) == expected[:40]  # batch 0 truncated and wrote file 0; batch 1 committed file 1
    finished = run_driver(refresh, cwd=str(REPO), timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert delta_ids(table) == expected
