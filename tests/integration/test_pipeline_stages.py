"""Bronze parsing (quarantine, drift), the gold merge (idempotent, touched files only) and replay atomicity.

Real Spark (session fixture) and real Delta tables; batches are built as DataFrames in the raw table's shape.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sparkonce.delta.ops.merge import merge_latest
from sparkonce.delta.txn.commit import BatchTxn
from sparkonce.errors import SchemaMismatchError
from sparkonce.pipeline.ddl import ddl_schema
from sparkonce.pipeline.kinds.bronze import LINEAGE_DDL, QUARANTINE_DDL, parse_raw, write_bronze_batch
from sparkonce.pipeline.loader import parse_pipeline
from sparkonce.pipeline.streams import RAW_DDL
from sparkonce_local.demo_pipeline import quickstart_pipeline
from tests.integration.conftest import operation_metrics

pytestmark = [pytest.mark.spark]

T0 = datetime(2026, 5, 14, 9, 0, tzinfo=UTC)


def _config(tmp_path: Path, drift: str = "fail"):  # type: ignore[no-untyped-def]
    text = quickstart_pipeline("127.0.0.1:1").replace('drift = "fail"', f'drift = "{drift}"')
    return parse_pipeline(text, tmp_path / "pipeline.toml")


def _raw(spark, values: list[str | None]):  # type: ignore[no-untyped-def]
    rows = [("k", v, "t", 0, i, T0, T0) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, RAW_DDL)


GOOD = '{"device_id":"sensor-001","reading_time":"2026-05-14T09:00:00.000Z","value":21.5}'


def test_bronze_quarantines_every_failure_with_its_reason(spark, tmp_path: Path) -> None:
    stage = _config(tmp_path).bronze
    values = [
        GOOD,
        "device=sensor-001 value=3",
        GOOD[:20],
        '{"device_id":"sensor-001","reading_time":"2026-05-14T09:00:00.000Z"}',
        '{"device_id":"sensor-001","reading_time":"2026-05-14T09:00:00.000Z","value":"n/a"}',
        "[1, 2]",
        None,
        GOOD + "}",  # from_json reads the first object and ignores what follows: quarantined all the same
        GOOD + "," + GOOD,
        GOOD + "]",
        " " + GOOD + "\n",
        # Texts that close an array around the value, as a check counting "[<value>,0]"'s elements was fooled by.
        GOOD + ",0],[",
        GOOD + "," + GOOD + "]",
        GOOD + ',"sparkonce-end-0"],[',
        # A value whose first '}' is its last byte ends there (checked without a parse); the others are parsed.
        GOOD.replace("sensor-001", "sensor-}01"),
        GOOD.replace("sensor-001", "sensor-\u00e901"),  # 'é': its first '}' is its last character, not byte
        GOOD.replace("sensor-001", "sensor-\u00e901") + "x",
        '{"value":21.5,"device_id":"sensor-001","reading_time":"2026-05-14T09:00:00.000Z"}',  # no key is new
        GOOD.replace("sensor-001", "sensor-}01") + "}",
        GOOD.replace("sensor-001", "sensor,0,0,1"),  # more commas than keys: the keys are read, none is new
    ]
    good, bad, added = parse_raw(_raw(spark, values), stage, batch_id=7)
    assert added == ()
    assert sorted(r["_offset"] for r in good.collect()) == [0, 10, 14, 15, 17, 19]
    reasons = {r["offset"]: r["reason"] for r in bad.collect()}
    assert reasons == {
        1: "malformed JSON: not a JSON object",
        2: "malformed JSON: not a JSON object",
        3: "missing required field(s): value",
        4: "wrong type: value=n/a is not DOUBLE",
        5: "malformed JSON: not a JSON object",
        6: "null value",
        7: "malformed JSON: text after the JSON object",
        8: "malformed JSON: text after the JSON object",
        9: "malformed JSON: text after the JSON object",
        11: "malformed JSON: text after the JSON object",
        12: "malformed JSON: text after the JSON object",
        13: "malformed JSON: text after the JSON object",
        16: "malformed JSON: text after the JSON object",
        18: "malformed JSON: text after the JSON object",
    }
    assert {r["_offset"]: r["device_id"] for r in good.collect()}[15] == "sensor-\u00e901"
    row = bad.where("offset = 4").collect()[0]
    assert (row["topic"], row["partition"], row["batch_id"]) == ("t", 0, 7)
    assert row["value"] == values[4]  # the raw record, untouched


def test_bronze_batches_compile_their_code_once_and_stamp_the_quarantine(spark, tmp_path: Path) -> None:
    """A batch's id and time are values of the files' rows, not of the plan: the second and third batches compile no
    new code (a literal in the projection would be compiled into it, batch after batch)."""
    from deltalake import DeltaTable

    stage = _config(tmp_path).bronze
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    compiled: list[int] = []
    columns = None
    times: list[tuple[datetime, datetime]] = []
    for batch_id in range(3):
        raw = _raw(spark, [GOOD, "not json", GOOD])
        before = datetime.now(UTC)
        result = write_bronze_batch(raw, batch_id, stage, app_id="app-b", columns=columns)
        times.append((before, datetime.now(UTC)))
        columns = result.columns
        assert (result.bronze_rows, result.quarantined_rows) == (2, 1)
        compiled.append(int(metrics.METRIC_COMPILATION_TIME().getCount()))
    assert compiled[0] == compiled[1] == compiled[2]
    rows = sorted(DeltaTable(stage.quarantine).to_pyarrow_table().to_pylist(), key=lambda r: r["batch_id"])
    assert [(r["batch_id"], r["value"], r["reason"]) for r in rows] == [
        (b, "not json", "malformed JSON: not a JSON object") for b in range(3)
    ]
    for row, (before, after) in zip(rows, times, strict=True):
        assert before - timedelta(milliseconds=1) <= row["quarantined_at"] <= after


def test_drift_fail_stops_and_drift_add_adds_the_column(spark, tmp_path: Path) -> None:
    drifted = GOOD[:-1] + ',"humidity":40}'
    with pytest.raises(SchemaMismatchError, match=r"\['humidity'\].*drift = \"fail\""):
        parse_raw(_raw(spark, [GOOD, drifted]), _config(tmp_path / "f").bronze, batch_id=0)
    good, bad, added = parse_raw(_raw(spark, [GOOD, drifted]), _config(tmp_path / "a", "add").bronze, batch_id=0)
    assert added == ("humidity",)
    assert bad.count() == 0
    assert sorted((r["_offset"], r["humidity"]) for r in good.collect()) == [(0, None), (1, 40)]


def test_drift_finds_every_undeclared_key_whatever_the_rest_of_the_record(spark, tmp_path: Path) -> None:
    """Most records' keys are proven declared from the typed parse and a comma count, without reading them; every
    record that carries an undeclared key must still be found: next to no, null, mistyped, misnamed or repeated
    declared fields, with commas inside values, with a nested value."""
    time = '"reading_time":"2026-05-14T09:00:00.000Z"'
    drifted = [
        '{"x1":1}',
        GOOD[:-1] + ',"x2":null}',
        '{"device_id":"a,b",' + time + ',"value":1.5,"x3":1}',
        '{"device_id":"s",' + time + ',"value":"n/a","x4":1}',
        '{"device_id":"s","device_id":"t","x5":1}',
        '{"Device_id":"s",' + time + ',"value":1.5}',
        '{"device_id":"s",' + time + ',"value":1.5,"x6":{"a":1,"b":2}}',
        '{"x7":"a,b,c,d",' + time + "}",
    ]
    with pytest.raises(SchemaMismatchError, match=r"\['Device_id', 'x1', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7'\]"):
        parse_raw(_raw(spark, [GOOD, *drifted]), _config(tmp_path).bronze, batch_id=0)


def _readings(spark, rows: list[tuple[str, int, float]]):  # type: ignore[no-untyped-def]
    data = [(d, T0 + timedelta(seconds=s), v, i) for i, (d, s, v) in enumerate(rows)]
    return spark.createDataFrame(data, "device_id string, reading_time timestamp, value double, _offset bigint")


def _commit_metrics(table: Path, table_version: int) -> dict:
    lines = (table / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    info = next(json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line)
    return operation_metrics(info)


def test_gold_merge_rewrites_only_touched_files_and_a_replay_changes_nothing(spark, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    gold = tmp_path / "gold"
    first = _readings(spark, [(f"sensor-{i:03d}", 0, float(i)) for i in range(100)])
    merge_latest(
        first, str(gold), keys=["device_id"], order_by=["reading_time"], txn=BatchTxn("a", 0), target_file_rows=10
    )
    assert len(DeltaTable(str(gold)).file_uris()) == 10

    update = _readings(spark, [("sensor-005", 10, 50.0), ("sensor-005", 20, 55.0), ("sensor-050", -10, -1.0)])
    result = merge_latest(update, str(gold), keys=["device_id"], order_by=["reading_time"], txn=BatchTxn("a", 1))
    # sensor-005 is newer (the later of its two rows wins); sensor-050's row is older than gold's: ignored.
    assert (result.rows_updated, result.rows_inserted, result.files_removed, result.table_files) == (1, 0, 1, 10)
    metrics = _commit_metrics(gold, int(result.table_version))
    assert metrics["numTargetFilesRemoved"] == 1 and metrics["numTargetFilesBefore"] == 10
    rows = {r["device_id"]: r["value"] for r in DeltaTable(str(gold)).to_pyarrow_table().to_pylist()}
    assert len(rows) == 100 and rows["sensor-005"] == 55.0 and rows["sensor-050"] == 50.0
    before = DeltaTable(str(gold)).version()

    same_txn = merge_latest(update, str(gold), keys=["device_id"], order_by=["reading_time"], txn=BatchTxn("a", 1))
    assert same_txn.skipped and DeltaTable(str(gold)).version() == before

    other_app = merge_latest(update, str(gold), keys=["device_id"], order_by=["reading_time"], txn=BatchTxn("b", 0))
    assert (other_app.files_removed, other_app.files_added, other_app.rows_updated) == (0, 0, 0)
    assert {r["device_id"]: r["value"] for r in DeltaTable(str(gold)).to_pyarrow_table().to_pylist()} == rows


def test_replay_replaces_the_table_atomically(spark, tmp_path: Path) -> None:
    """A reader polling the bronze table with delta-rs sees the old row count or the new one, never a mix."""
    from deltalake import DeltaTable

    from sparkonce.pipeline.replay import plan_replay, replay_stage

    config = _config(tmp_path)
    stage = config.bronze
    bad = '{"device_id":"x","reading_time":"2026-05-14T09:00:00.000Z","value":"n/a"}'
    values = [GOOD.replace("21.5", str(i)) if i % 5 else bad for i in range(200)]
    raw = _raw(spark, values)
    raw.write.format("delta").mode("append").save(config.raw.table)  # table_version 0: the first write's rows
    raw.limit(50).write.format("delta").mode("append").save(config.raw.table)  # table_version 1: 50 more rows
    good, _, _ = parse_raw(raw, stage, batch_id=0)
    for _ in range(3):  # bronze spread over several Delta commits, as a stream writes it
        good.write.format("delta").mode("append").save(stage.table)
    old_rows = 3 * 160
    new_rows = 160  # replay as of raw table_version 0: the 200 first records, 40 of them quarantined

    seen: set[int] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.add(DeltaTable(stage.table).to_pyarrow_table(columns=["_offset"]).num_rows)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        plan = plan_replay(config, "bronze", "0")
        result = replay_stage(spark, config, plan)
    finally:
        done.set()
        reader.join()
    assert result.rows == {stage.table: new_rows, stage.quarantine: 40}
    assert seen <= {old_rows, new_rows} and old_rows in seen
    assert DeltaTable(stage.table).to_pyarrow_table().num_rows == new_rows
    from sparkonce.pipeline.owner import read_owner

    owner = read_owner(stage.checkpoint)
    assert owner is not None and owner.starting_version == 1


@pytest.mark.parametrize(
    "ddl", [RAW_DDL, QUARANTINE_DDL, LINEAGE_DDL, "a INT, b BOOLEAN, c DOUBLE", "a INT NOT NULL, `b c` STRING"]
)
def test_plain_field_lists_are_built_without_spark_as_spark_parses_them(spark, ddl: str) -> None:
    assert ddl_schema(spark, ddl) == spark.createDataFrame([], ddl).schema


def test_other_ddl_goes_to_spark(spark) -> None:
    assert (
        ddl_schema(spark, "a DECIMAL(10, 2), b ARRAY<STRING>")
        == spark.createDataFrame([], "a DECIMAL(10, 2), b ARRAY<STRING>").schema
    )
