"""Restore-aware replays (issue 39 item 4, delta-io/delta#1813): a RESTORE keeps the txn, so batches it undid are
skipped by a replay under the same app id. sparkonce's sink refuses that replay and names the safe app id; the
doctor names the batches; the safe path (a new app id) loses nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from sparkonce.cli.main import cli
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.txn.restores import restored_app_id
from tests.integration.conftest import INPUT_SCHEMA, delta_ids, stream_input_files, write_input_files

pytestmark = pytest.mark.spark

SCHEMA = INPUT_SCHEMA


def _doctor(ck: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["doctor", str(ck), "--json"])
    return result.exit_code, json.loads(result.output)


def test_restore_then_replay_loses_nothing_through_the_safe_path(spark: SparkSession, tmp_path: Path) -> None:
    from sparkonce import DeltaTable

    inputs, ck, table = tmp_path / "in", tmp_path / "ck", tmp_path / "events"
    ids = write_input_files(inputs, files=3, rows_per_file=5)
    query_id = stream_input_files(spark, inputs, ck, table)
    assert sorted(delta_ids(table)) == sorted(ids)
    # Batch b wrote ids [5b, 5b+5) at table version b. Restore to table version 0: batches 1 and 2 are undone.
    DeltaTable.forPath(spark, str(table)).restoreToVersion(0)
    snapshot = DeltaLog(table).snapshot()
    assert snapshot.table_version == 3 and snapshot.txn_version(query_id) == 2  # the RESTORE kept the txn
    assert sorted(delta_ids(table)) == list(range(5))

    # The unsafe replay: batch 1 again under the query id. Delta would skip it silently; sparkonce refuses.
    batch_1 = spark.read.format("json").schema(SCHEMA).load(str(inputs / sorted(p.name for p in inputs.iterdir())[1]))
    safe = restored_app_id(query_id, 3)
    with pytest.raises(Exception, match=safe):
        batch_1.write.format("delta").option("txnAppId", query_id).option("txnVersion", 1).mode("append").save(
            str(table)
        )
    assert sorted(delta_ids(table)) == list(range(5))
    assert DeltaLog(table).snapshot().table_version == 3  # nothing was committed

    # The doctor (no --table: the sink is recorded in the checkpoint) names the undone batches and the safe app id.
    code, report = _doctor(ck)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["code"] == "restore-kept-txn"]
    assert finding["details"]["batch_ids"] == [1, 2] and finding["details"]["table_versions"] == [1, 2]
    assert finding["details"]["restore_table_version"] == 3 and finding["details"]["restored_table_version"] == 0
    assert safe in finding["fix"] and "offsets/0 to offsets/2" in finding["fix"]

    # The safe path: each undone batch written again under the new app id, from the checkpoint's offsets.
    files = sorted(p for p in inputs.iterdir() if p.suffix == ".json")
    for batch_id in (1, 2):
        rows = spark.read.format("json").schema(SCHEMA).load(str(files[batch_id]))
        rows.write.format("delta").option("txnAppId", safe).option("txnVersion", batch_id).mode("append").save(
            str(table)
        )
    assert sorted(delta_ids(table)) == sorted(ids)  # every id exactly once

    code, report = _doctor(ck)
    assert code == 0, report["findings"]
    assert [f["code"] for f in report["findings"]] == ["restore-rewritten"]

    # The stream goes on under its query id: the next batch is written once, the earlier ones are not repeated.
    more = write_input_files(inputs, files=1, rows_per_file=5, start=len(ids))
    assert stream_input_files(spark, inputs, ck, table) == query_id
    assert sorted(delta_ids(table)) == sorted(ids + more)
