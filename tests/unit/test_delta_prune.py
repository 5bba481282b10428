"""Partition pruning on the driver: a file is kept unless its partition values make a filter false."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import EqualNullSafe, EqualTo, GreaterThan, In, IsNotNull, IsNull, LessThanOrEqual

from sparkonce.delta.reader import DataFile, prune


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
