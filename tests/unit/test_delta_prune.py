"""Partition pruning on the driver: a file is kept unless its partition values make a filter false."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import EqualNullSafe, EqualTo, GreaterThan, In, IsNotNull, IsNull, LessThanOrEqual

from sparkonce.delta.read.reader import DataFile, prune


def _files() -> list[DataFile]:
    values = [("a", 1, dt.date(2024, 1, 1)), ("b", 2, dt.date(2024, 1, 2)), (None, None, None)]
    return [DataFile(f"/t/{i}.parquet", 1, {"p": p, "n": n, "d": d}) for i, (p, n, d) in enumerate(values)]


@pytest.mark.parametrize(
    ("flt", "kept"),
    [
        (EqualTo(("p",), "a"), ["0"]),
        (EqualNullSafe(("p",), None), ["2"]),
        (In(("p",), ("a", "b")), ["0", "1"]),
        (GreaterThan(("n",), 1), ["1"]),
        (LessThanOrEqual(("d",), dt.date(2024, 1, 1)), ["0"]),
        (IsNull(("p",)), ["2"]),
        (IsNotNull(("n",)), ["0", "1"]),
        (EqualTo(("data_column",), 5), ["0", "1", "2"]),  # not a partition column: nothing pruned
        (EqualTo(("p", "nested"), "a"), ["0", "1", "2"]),
        (GreaterThan(("p",), 3), ["0", "1"]),  # incomparable types: kept, Spark evaluates it (nulls never match)
    ],
)
def test_prune(flt: object, kept: list[str]) -> None:
    files = prune(_files(), [flt], ["p", "n", "d"])  # type: ignore[list-item]
    assert [f.path.rsplit("/", 1)[1].split(".")[0] for f in files] == kept


def test_plan_partitions_uses_every_core_and_caps_task_size() -> None:
    from sparkonce.delta.read.reader import plan_partitions

    small = [DataFile(f"/t/{i}.parquet", 1_000_000, {}) for i in range(5)]
    assert [len(p.files) for p in plan_partitions(small, parallelism=2)] == [3, 2]
    assert len(plan_partitions(small[:1], parallelism=4)) == 1
    assert plan_partitions([], parallelism=2) == []
    big = [DataFile(f"/t/{i}.parquet", 100, {}) for i in range(10)]
    assert len(plan_partitions(big, parallelism=2, target_bytes=250)) == 4  # 1000 bytes / 250 per task
    planned = plan_partitions(small, parallelism=2)
    assert sorted(f.path for p in planned for f in p.files) == sorted(f.path for f in small)
    assert [[f.path for f in p.files] for p in planned] == [
        [f.path for f in p.files] for p in plan_partitions(small, parallelism=2)
    ]
