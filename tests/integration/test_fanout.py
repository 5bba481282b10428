"""Fan-out to several Delta tables, each idempotent on its own txn: a replay is skipped per table, and a crash
between two tables leaves no duplicate after the restart.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkonce.errors import OptionError
from sparkonce.sinks.fanout import FanOutTarget, FanOutWriter
from sparkonce_local.chaos import run_driver
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_query_id, delta_txns
from tests.integration.conftest import delta_ids, write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _ordered_input(directory: Path) -> list[int]:
    """Three JSON files of 20 rows; modification times one second apart so one file per batch goes in order."""
    ids = write_input_files(directory, files=3, rows_per_file=20)
    for index, path in enumerate(sorted(directory.iterdir())):
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return ids


@pytest.mark.spark
def test_replayed_batch_is_skipped_per_table(spark: SparkSession, tmp_path: Path) -> None:
    writer = FanOutWriter(
        [
            FanOutTarget(str(tmp_path / "all")),
            FanOutTarget(str(tmp_path / "even"), select=lambda df: df.where("id % 2 = 0"), partition_by=("device",)),
        ],
        app_id="app-f",
    )
    batch = spark.createDataFrame(
        [(i, f"dev-{i % 2}", i / 10) for i in range(8)], "id long, device string, value double"
    )
    first = writer.write_batch(batch, 0)
    assert first.written == ("all", "even")
    again = writer.write_batch(batch, 0)
    assert (again.written, again.skipped) == ((), ("all", "even"))
    assert delta_ids(tmp_path / "all") == list(range(8))
    assert delta_ids(tmp_path / "even") == [0, 2, 4, 6]
    assert delta_txns(tmp_path / "all") == [("app-f:all", 0)]
    assert delta_txns(tmp_path / "even") == [("app-f:even", 0)]


@pytest.mark.parametrize(
    ("targets", "kwargs", "option", "problem"),
    [
        ([], {"app_id": "a"}, "targets", "a fan-out needs at least one target table"),
        (
            [FanOutTarget("/x/t"), FanOutTarget("/y/t")],
            {"app_id": "a"},
            "targets",
            r"table names must be unique \(give name=...\): \['t'\] repeat",
        ),
        (
            [FanOutTarget("/x/t", options={"txnVersion": "3"})],
            {"app_id": "a"},
            "targets[t].options",
            "are set by the fan-out",
        ),
        ([FanOutTarget("/x/t")], {}, "app_id", "give exactly one of app_id and checkpoint_dir"),
        ([FanOutTarget("/x/t")], {"app_id": "a", "checkpoint_dir": "/ck"}, "app_id", "give exactly one of app_id"),
    ],
    ids=["no-targets", "duplicate-names", "reserved-option", "no-app-id", "both-app-ids"],
)
def test_bad_configuration(targets: list[FanOutTarget], kwargs: dict[str, str], option: str, problem: str) -> None:
    with pytest.raises(OptionError, match=rf"^option {re.escape(repr(option))} = .*: {problem}") as info:
        FanOutWriter(targets, **kwargs)
    assert info.value.option == option


@pytest.mark.spark
@pytest.mark.crash
def test_crash_between_tables_then_restart_gives_exact_tables(tmp_path: Path) -> None:
    expected = _ordered_input(tmp_path / "input")
    args = ["-m", "tests.integration.drivers.files_to_sinks", str(tmp_path / "input"), str(tmp_path / "ck")]
    args += ["fanout", str(tmp_path / "all"), str(tmp_path / "even")]

    crashed = run_driver(args, crash_at="between_fanout_tables:1", cwd=str(REPO), timeout=300)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    query_id = checkpoint_query_id(ck)
    # Batch 1 reached the first table only.
    assert delta_ids(tmp_path / "all") == expected[:40]
    assert delta_ids(tmp_path / "even") == [i for i in expected[:20] if i % 2 == 0]

    finished = run_driver(args, cwd=str(REPO), timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert delta_ids(tmp_path / "all") == expected  # batch 1 skipped in "all": no duplicate
    assert delta_ids(tmp_path / "even") == [i for i in expected if i % 2 == 0]  # and written to "even"
    assert delta_txns(tmp_path / "all") == [(f"{query_id}:all", b) for b in range(3)]
    assert delta_txns(tmp_path / "even") == [(f"{query_id}:even", b) for b in range(3)]


@pytest.mark.spark
def test_a_one_pass_write_fills_batch_values_and_refuses_a_value_not_of_its_type(
    spark: SparkSession, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from deltalake import DeltaTable
    from pyspark.sql.types import LongType, TimestampType

    from sparkonce.sinks.fanout import BatchValue

    at = datetime(2026, 11, 28, 7, 30, 15, 123456, tzinfo=UTC)
    batch = spark.createDataFrame([(i, "odd" if i % 2 else "even") for i in range(6)], "id long, _route string")
    writer = FanOutWriter(
        [
            FanOutTarget(
                str(tmp_path / "odd"),
                columns={"id": "id", "batch_id": BatchValue(7, LongType()), "at": BatchValue(at, TimestampType())},
            ),
            FanOutTarget(str(tmp_path / "even"), columns={"id": "id"}),
        ],
        app_id="app-v",
    )
    writer.write_routed(batch, 7, route="_route")
    odd = sorted(DeltaTable(str(tmp_path / "odd")).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert odd == [{"id": i, "batch_id": 7, "at": at} for i in (1, 3, 5)]
    assert delta_ids(tmp_path / "even") == [0, 2, 4]

    wrong = FanOutWriter(
        [FanOutTarget(str(tmp_path / "wrong"), name="odd", columns={"id": "id", "n": BatchValue("x", LongType())})],
        app_id="app-w",
    )
    with pytest.raises(OptionError, match=r"^option 'targets\[odd\]\.columns\.n' = 'x': is not a bigint"):
        wrong.write_routed(batch, 0, route="_route")
    assert not (tmp_path / "wrong").exists()  # refused before any file is written
