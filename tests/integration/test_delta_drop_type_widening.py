"""``ALTER TABLE t DROP FEATURE typeWidening [TRUNCATE HISTORY]`` and ``DeltaTable.dropFeatureSupport("typeWidening")``
as delta-spark 4 runs them (issue 41): ``delta.enableTypeWidening`` unset, the files written before a type change
rewritten (a ``REORG`` commit), ``delta.typeChanges`` removed from the schema (a ``DROP FEATURE`` commit naming the
fields), then either Delta's fast drop (three checkpointed ``Empty Commit``s and the protocol without the feature,
with ``checkpointProtection``) or, with ``TRUNCATE HISTORY``, Delta's two steps (``DELTA_FEATURE_DROP_WAIT_FOR_
RETENTION_PERIOD``, then the drop once the log older than 24 hours is gone). Each test checks the log, the files'
Parquet types, the rows on both read paths and delta-rs reading the table once the feature is gone."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sparkonce.delta.read.native import NATIVE_READS_CONF
from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import UnsupportedFeatureError
from sparkonce.sql import DeltaSql

pytestmark = pytest.mark.spark

ROWS = [
    {"id": 1, "v": 10, "s": {"x": 3}},
    {"id": 2, "v": 5_000_000_000, "s": {"x": 70000}},
]


def _commits(table: Path) -> dict[int, list[dict[str, Any]]]:
    return {
        int(path.name[:20]): [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted((table / "_delta_log").glob("*.json"))
    }


def _action(actions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((a[kind] for a in actions if kind in a), None)


def _live_files(table: Path) -> list[str]:
    """The table's data files, as delta-rs lists them (the table no longer has reader features it lacks)."""
    from deltalake import DeltaTable as RsTable

    return list(RsTable(str(table)).file_uris())


def _rows(spark: SparkSession, table: Path, *, native: bool) -> list[dict[str, Any]]:
    if not native:
        spark.conf.set(NATIVE_READS_CONF, "false")
    try:
        frame = spark.read.format("delta").load(str(table))
        assert [f.dataType.simpleString() for f in frame.schema.fields] == ["bigint", "bigint", "struct<x:int>"]
        return sorted((r.asDict(recursive=True) for r in frame.collect()), key=lambda r: r["id"])
    finally:
        spark.conf.unset(NATIVE_READS_CONF)


def _widened_table(sql: DeltaSql, table: Path) -> None:
    """INT ``v`` and SMALLINT ``s.x`` widened after the first file, a second file written with the new types."""
    sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, v INT, s STRUCT<x: SMALLINT>) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
    )
    sql(f"INSERT INTO delta.`{table}` VALUES (1, 10, named_struct('x', 3S))")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN v TYPE BIGINT")
    sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN s.x TYPE INT")
    sql(f"INSERT INTO delta.`{table}` VALUES (2, 5000000000, named_struct('x', 70000))")


def _check_traces_removed(table: Path, first: int) -> None:
    """The commits from table version ``first``: UNSET TBLPROPERTIES, REORG of the one old file, DROP FEATURE
    of the type changes; every live file holds the table's types, the schema no ``delta.typeChanges``."""
    commits = _commits(table)
    operations = [commits[v][0]["commitInfo"]["operation"] for v in range(first, first + 3)]
    assert operations == ["UNSET TBLPROPERTIES", "REORG", "DROP FEATURE"]
    unset = commits[first]
    assert unset[0]["commitInfo"]["operationParameters"] == {
        "properties": '["delta.enableTypeWidening"]',
        "ifExists": "true",  # Delta writes JSON booleans here; DESCRIBE HISTORY shows both as "true"
    }
    assert _action(unset, "metaData")["configuration"] == {}  # type: ignore[index]
    reorg = commits[first + 1]
    assert reorg[0]["commitInfo"]["operationParameters"] == {"predicate": "[]", "applyPurge": "true"}
    metrics = reorg[0]["commitInfo"]["operationMetrics"]
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"]) == ("1", "1")
    adds = [a["add"] for a in reorg if "add" in a]
    removes = [a["remove"] for a in reorg if "remove" in a]
    assert [a["dataChange"] for a in adds + removes] == [False, False]
    assert json.loads(adds[0]["stats"])["numRecords"] == 1
    dropped = commits[first + 2]
    columns = json.loads(dropped[0]["commitInfo"]["operationParameters"]["columns"])
    assert [(c["name"], c["metadata"]["delta.typeChanges"]) for c in columns] == [
        ("v", [{"fromType": "integer", "toType": "long"}]),
        ("s.x", [{"fromType": "short", "toType": "integer"}]),
    ]
    schema = _action(dropped, "metaData")["schemaString"]  # type: ignore[index]
    assert "delta.typeChanges" not in schema
    for uri in _live_files(table):
        kinds = pq.read_schema(uri.removeprefix("file://"))
        assert (kinds.field("v").type, kinds.field("s").type.field("x").type) == (pa.int64(), pa.int32())


def test_drop_feature_type_widening_rewrites_old_files_and_drops_it_behind_protected_checkpoints(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """Delta 4's fast drop: after the traces are gone, three checkpointed ``Empty Commit``s, then the ``DROP
    FEATURE`` commit of the protocol without ``typeWidening`` and with ``checkpointProtection``
    (``delta.requireCheckpointProtectionBeforeVersion`` its table version), checkpointed; delta-rs reads the rows."""
    from deltalake import DeltaTable as RsTable

    table = tmp_path / "t"
    _widened_table(sql, table)
    sql(f"ALTER TABLE delta.`{table}` DROP FEATURE typeWidening")
    _check_traces_removed(table, 5)
    commits = _commits(table)
    assert max(commits) == 11
    for version in (8, 9, 10):
        assert [list(a) for a in commits[version]] == [["commitInfo"]]
        assert commits[version][0]["commitInfo"]["operation"] == "Empty Commit"
    last = commits[11]
    assert last[0]["commitInfo"]["operation"] == "DROP FEATURE"
    assert last[0]["commitInfo"]["operationParameters"] == {"featureName": "typeWidening", "truncateHistory": "false"}
    assert _action(last, "protocol") == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "checkpointProtection", "invariants"],
    }
    assert _action(last, "metaData")["configuration"] == {  # type: ignore[index]
        "delta.requireCheckpointProtectionBeforeVersion": "11"
    }
    checkpoints = sorted(int(p.name[:20]) for p in (table / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints[-4:] == [8, 9, 10, 11]
    for native in (True, False):
        assert _rows(spark, table, native=native) == ROWS, native
    assert sorted(RsTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == ROWS
    sql(f"INSERT INTO delta.`{table}` VALUES (3, 7, named_struct('x', 8))")  # writers take the table as it is
    assert len(_rows(spark, table, native=True)) == 3


def test_drop_feature_support_with_truncate_history_waits_for_the_retention_period(
    spark: SparkSession, sql: DeltaSql, tmp_path: Path
) -> None:
    """``dropFeatureSupport("typeWidening", truncateHistory=True)``: the first call removes the traces, makes a
    checkpointed ``Empty Commit`` and fails with ``DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD``; a call while
    the log younger than 24 hours still records type changes fails with
    ``DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST``; once those commits are older than 24 hours (their files'
    modification times put back two days, as the clock would), the call removes them and drops the feature."""
    from deltalake import DeltaTable as RsTable

    table = tmp_path / "t"
    _widened_table(sql, table)
    delta = DeltaTable.forPath(spark, str(table))
    with pytest.raises(UnsupportedFeatureError, match=r"DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD.*typeWidening"):
        delta.dropFeatureSupport("typeWidening", truncateHistory=True)
    _check_traces_removed(table, 5)
    commits = _commits(table)
    assert max(commits) == 8 and commits[8][0]["commitInfo"]["operation"] == "Empty Commit"
    assert (table / "_delta_log" / f"{8:020d}.checkpoint.parquet").exists()
    assert "typeWidening" in DeltaTable.forPath(spark, str(table)).detail().collect()[0].tableFeatures

    with pytest.raises(UnsupportedFeatureError, match=r"DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST"):
        delta.dropFeatureSupport("typeWidening", truncateHistory=True)
    assert max(_commits(table)) == 9  # its own checkpointed Empty Commit, nothing else

    two_days_ago = time.time() - 2 * 24 * 3600
    for path in (table / "_delta_log").iterdir():
        os.utime(path, (two_days_ago, two_days_ago))
    delta.dropFeatureSupport("typeWidening", truncateHistory=True)
    commits = _commits(table)
    # The log cleanup removed every commit before the checkpoint of table version 9 (the type changes with them).
    assert (min(commits), max(commits)) == (9, 11)
    last = commits[11]
    assert last[0]["commitInfo"]["operationParameters"] == {"featureName": "typeWidening", "truncateHistory": "true"}
    assert _action(last, "protocol") == {"minReaderVersion": 1, "minWriterVersion": 2}
    for native in (True, False):
        assert _rows(spark, table, native=native) == ROWS, native
    assert sorted(RsTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == ROWS
