"""The change data feed planner (``sparkonce.delta.read.changes``) on tables delta-rs writes: which files of which
commit hold change rows, and the range rules (no Spark)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.read.changes import ChangeFeedOptions, plan_changes, resolve_range
from sparkonce.errors import OptionError

CDF = {"delta.enableChangeDataFeed": "true"}


def _table(tmp_path: Path) -> Path:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array(range(4), pa.int64()), "part": ["a", "a", "b", "b"]})
    write_deltalake(str(table), data, partition_by=["part"], configuration=CDF)  # 0: two files
    DeltaTable(str(table)).update(updates={"id": "id + 10"}, predicate="id = 0")  # 1: cdc
    DeltaTable(str(table)).delete("part = 'b'")  # 2: removes only
    return table


def test_each_commit_maps_to_its_cdc_files_else_its_adds_and_removes(tmp_path: Path) -> None:
    table = _table(tmp_path)
    plan = plan_changes(DeltaLog(table), 0, 2, table=str(table))
    kinds = {c.table_version: sorted(f.kind for f in c.files) for c in plan.commits}
    assert kinds == {0: ["insert", "insert"], 1: ["cdc"], 2: ["delete"]}
    assert [f.data_file.partition_values for f in plan.commits[2].files] == [{"part": "b"}]
    assert all(f.data_file.path.startswith(str(table / "_change_data")) for f in plan.commits[1].files)
    assert [c.timestamp_ms for c in plan.commits] == sorted(c.timestamp_ms for c in plan.commits)


def test_the_range_follows_deltas_rules(tmp_path: Path) -> None:
    table = _table(tmp_path)
    log = DeltaLog(table)

    def options(**given: str) -> ChangeFeedOptions:
        return ChangeFeedOptions.parse({"path": str(table), **given})

    assert resolve_range(options(startingVersion="1"), log) == (1, 2)
    assert resolve_range(options(startingVersion="0", endingVersion="7"), log) == (0, 2)
    with pytest.raises(OptionError, match=r"DELTA_INVALID_CDC_RANGE\] CDC range from start 2 to end 1"):
        resolve_range(options(startingVersion="2", endingVersion="1"), log)
    with pytest.raises(OptionError, match=r"DELTA_CDC_START_VERSION_AFTER_LATEST\] Start version 3 "):
        resolve_range(options(startingVersion="3"), log)
    with pytest.raises(OptionError, match=r"DELTA_NO_START_FOR_CDC_READ"):
        options()
    with pytest.raises(OptionError, match=r"'startingTimestamp'.*cannot be combined with startingVersion"):
        options(startingVersion="0", startingTimestamp="2020-01-01")
    with pytest.raises(OptionError, match=r"'versionAsOf'.*cannot be combined with readChangeFeed"):
        options(startingVersion="0", versionAsOf="1")
    stamps = dict(log.commit_timestamps())
    at_1 = dt.datetime.fromtimestamp(stamps[1] / 1000, dt.UTC).isoformat()
    assert resolve_range(options(startingTimestamp=at_1, endingTimestamp=at_1), log) == (1, 1)


def test_a_start_before_the_feed_was_on_is_refused_though_that_version_has_no_metadata(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}))  # 0
    write_deltalake(str(table), pa.table({"id": pa.array([2], pa.int64())}), mode="append")  # 1: no metaData
    DeltaTable(str(table)).alter.set_table_properties(CDF)  # 2
    with pytest.raises(OptionError, match=r"DELTA_MISSING_CHANGE_DATA\].*\[1 , 2\].*version \[1\]"):
        plan_changes(DeltaLog(table), 1, 2, table=str(table))
    assert [c.table_version for c in plan_changes(DeltaLog(table), 2, 2, table=str(table)).commits] == [2]


def test_a_skipped_batch_deletes_its_change_data_files_and_a_commit_records_them_as_cdc(tmp_path: Path) -> None:
    from sparkonce.delta.log.log_entry import WrittenFile
    from sparkonce.delta.txn.commit import BatchTxn, commit_files

    table = tmp_path / "t"
    schema = pa.schema([("id", pa.int64())])
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}), configuration=CDF)

    def change_file(name: str) -> WrittenFile:
        path = table / "_change_data" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"PAR1")
        return WrittenFile(f"_change_data/{name}", 4, {}, 0, 1, "{}")

    done = commit_files(str(table), [], data_schema=schema, txn=BatchTxn("app", 1), change_files=[change_file("a")])
    assert done.table_version == 1
    actions = DeltaLog(table).read_actions(1)
    assert [a["cdc"] for a in actions if "cdc" in a] == [
        {"path": "_change_data/a", "partitionValues": {}, "size": 4, "dataChange": False}
    ]
    again = commit_files(str(table), [], data_schema=schema, txn=BatchTxn("app", 1), change_files=[change_file("b")])
    assert again.skipped and not (table / "_change_data" / "b").exists()
    assert (table / "_change_data" / "a").exists()


def test_a_delta_jvm_commit_with_cdc_actions_reads_its_change_files_only(fixtures_dir: Path, tmp_path: Path) -> None:
    """Delta's golden table ``deltalog-getChanges`` (written by Delta 3.1 on the JVM): table version 1 holds an
    ``AddCDCFile`` beside a ``remove``; as in Delta's CDCReader, the commit's change rows are its cdc file's, and the
    remove is not read as deletes. The feed is turned on in the copy's first commit (the fixture leaves it off)."""
    import shutil

    table = tmp_path / "getChanges"
    shutil.copytree(fixtures_dir / "delta-tables" / "deltalog-getChanges", table)
    first = table / "_delta_log" / f"{0:020d}.json"
    first.write_text(
        first.read_text().replace('"configuration":{}', '"configuration":{"delta.enableChangeDataFeed":"true"}')
    )
    plan = plan_changes(DeltaLog(table), 0, 2, table=str(table))
    files = {
        c.table_version: [(f.kind, Path(f.data_file.path).name, f.data_file.partition_values) for f in c.files]
        for c in plan.commits
    }
    assert files == {0: [("insert", "1", {})], 1: [("cdc", "2", {"partition_foo": "partition_bar"})], 2: []}
