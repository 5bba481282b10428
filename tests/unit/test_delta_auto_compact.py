"""Auto compaction after a commit (``delta/ops/auto_compact.py``), on real tables written by delta-rs and read back by
delta-rs: Delta's settings and priority, the partitions chosen, the OPTIMIZE commit it makes, and a failure that
never escapes. No Spark: the rewrite runs in this process, as in the sink's commit."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.ops import optimize
from sparkonce.delta.ops.auto_compact import (
    AutoCompactSettings,
    compact_after_commit,
    optimize_write_requested,
    partitions_to_compact,
)
from sparkonce.delta.table.properties import table_properties
from sparkonce.errors import OptionError
from sparkonce.storage import table_location


def _append(table: Path, part: str, first: int, rows: int = 3) -> None:
    from deltalake import write_deltalake

    data = pa.table({"id": pa.array(range(first, first + rows), pa.int64()), "part": [part] * rows})
    write_deltalake(str(table), data, mode="append", partition_by=["part"])


def _added(part: str) -> WrittenFile:
    """A file the batch added to ``part`` (only its partition counts for the choice)."""
    return WrittenFile(f"part={part}/x.parquet", 1, {"part": part}, 0, 1, "{}")


def _last_commit(table: Path) -> list[dict[str, Any]]:
    last = sorted((table / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in last.read_text().splitlines() if line.strip()]


def _table(tmp_path: Path, counts: dict[str, int]) -> Path:
    table = tmp_path / "t"
    first = 0
    for part, n in counts.items():
        for _ in range(n):
            _append(table, part, first)
            first += 3
    return table


def test_settings_follow_delta_priority_and_refuse_bad_values() -> None:
    on = {"delta.autoOptimize.autoCompact": "true"}
    assert AutoCompactSettings.from_conf({}).enabled_for(on) is True
    assert AutoCompactSettings.from_conf({}).enabled_for({}) is False
    conf_off = AutoCompactSettings.from_conf({"spark.databricks.delta.autoCompact.enabled": "FALSE"})
    assert conf_off.enabled_for(on) is False  # the session conf wins over the table property
    settings = AutoCompactSettings.from_conf({"spark.databricks.delta.autoCompact.maxFileSize": "1000"})
    assert (settings.min_num_files, settings.max_file_size, settings.small_file_size) == (50, 1000, 500)
    with pytest.raises(OptionError, match=r"spark\.databricks\.delta\.autoCompact\.enabled"):
        AutoCompactSettings.from_conf({"spark.databricks.delta.autoCompact.enabled": "auto"})
    with pytest.raises(OptionError, match="DELTA_INVALID_AUTO_COMPACT_TYPE"):
        AutoCompactSettings().enabled_for({"delta.autoOptimize.autoCompact": "legacy"})
    with pytest.raises(OptionError, match=r"autoCompact\.minNumFiles"):
        AutoCompactSettings.from_conf({"spark.databricks.delta.autoCompact.minNumFiles": "-1"})
    with pytest.raises(OptionError, match="DELTA_INVALID_AUTO_COMPACT_TYPE"):  # refused when a table is created
        table_properties({"delta.autoOptimize.autoCompact": "auto"})
    assert table_properties({"delta.autoOptimize.autoCompact": "TRUE"}) == {"delta.autoOptimize.autoCompact": "TRUE"}


def test_optimized_writes_requested_by_the_conf_over_the_property() -> None:
    prop = {"delta.autoOptimize.optimizeWrite": "true"}
    assert optimize_write_requested(AutoCompactSettings(), prop) is True
    assert optimize_write_requested(AutoCompactSettings(), {}) is False
    off = AutoCompactSettings.from_conf({"spark.databricks.delta.optimizeWrite.enabled": "false"})
    assert optimize_write_requested(off, prop) is False


def test_only_touched_partitions_with_enough_small_files_are_chosen() -> None:
    files = [({"p": "a"}, 10)] * 4 + [({"p": "b"}, 10)] * 3 + [({"p": "c"}, 10)] * 9 + [({"p": "a"}, 900)] * 5
    settings = AutoCompactSettings(min_num_files=4, max_file_size=1000)
    # c has the most small files but the batch did not write to it; a's large files do not count
    assert partitions_to_compact(files, [{"p": "a"}, {"p": "b"}], settings) == {(("p", "a"),)}


def test_compaction_rewrites_the_chosen_partition_with_data_change_false(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = _table(tmp_path, {"a": 5, "b": 2})
    before = sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist())
    settings = AutoCompactSettings(enabled=True, min_num_files=5)

    result = compact_after_commit(table_location(str(table)), [_added("a"), _added("b")], settings)

    assert result is not None and result.table_version == 7
    assert (result.files_removed, result.files_added, result.partitions_optimized) == (5, 1, 1)
    actions = _last_commit(table)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert info["operationParameters"]["auto"] == "true"  # Delta writes every parameter value as a string
    assert json.loads(info["operationParameters"]["predicate"]) == ["(part <=> 'a')"]
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 1 and len(removes) == 5
    assert all(a["dataChange"] is False for a in adds + removes)
    assert {r["partitionValues"]["part"] for r in removes} == {"a"}
    dt = DeltaTable(str(table))
    assert dt.history(1)[0]["operation"] == "OPTIMIZE"
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == before
    assert len(dt.file_uris()) == 3  # a: 1 compacted file, b: its 2 small files left

    assert compact_after_commit(table_location(str(table)), [_added("a")], settings) is None  # nothing due now


def test_a_failed_compaction_is_logged_and_does_not_escape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A DELETE that removes a compacted file while the compaction rewrites it: Delta's conflict, logged, the
    table left as the DELETE made it."""
    from deltalake import DeltaTable

    table = _table(tmp_path, {"a": 3})
    rewrite = optimize.rewrite_bins_in_process

    def rewrite_while_a_delete_commits(*args: Any, **kwargs: Any) -> Any:
        written = rewrite(*args, **kwargs)
        DeltaTable(str(table)).delete("id = 0")
        return written

    monkeypatch.setattr(optimize, "rewrite_bins_in_process", rewrite_while_a_delete_commits)
    with caplog.at_level(logging.WARNING, logger="sparkonce.delta.ops.auto_compact"):
        result = compact_after_commit(
            table_location(str(table)), [_added("a")], AutoCompactSettings(enabled=True, min_num_files=2)
        )
    assert result is None
    assert "auto compaction of" in caplog.text and "ConcurrentDeleteReadError" in caplog.text
    dt = DeltaTable(str(table))
    assert dt.history(1)[0]["operation"] == "DELETE"
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == list(range(1, 9))
