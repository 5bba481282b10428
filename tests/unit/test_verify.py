"""``verify_table``: coverage, duplicates (with table versions and files) and holes per topic-partition."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sparkonce.errors import OptionError, TableNotFoundError
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.ops.verify import parse_range, verify_table
from tests.unit.doctor_helpers import raw_rows, stream_commit

QID = "q-verify"


@pytest.fixture
def raw_table(tmp_path: Path) -> Path:
    """events-0: 0..19 with 15..19 written twice (table versions 1 and 2); events-1: 0..4 and 7."""
    table = tmp_path / "raw"
    stream_commit(table, QID, 0, raw_rows("events", 0, range(0, 10)))
    stream_commit(table, QID, 1, raw_rows("events", 0, range(10, 20)))
    stream_commit(table, "q-recreated", 0, raw_rows("events", 0, range(15, 20)))
    stream_commit(table, QID, 2, raw_rows("events", 1, [*range(0, 5), 7]))
    return table


def test_duplicates_missing_and_coverage(raw_table: Path) -> None:
    report = verify_table(
        raw_table,
        expected=[OffsetRange(TopicPartition("events", 0), 0, 25), OffsetRange(TopicPartition("events", 1), 0, 8)],
    )
    assert report.rows_scanned == 31 and report.files_read == 4 and report.table_version == 3
    p0, p1 = report.partitions
    assert (p0.min_offset, p0.max_offset, p0.rows, p0.distinct_offsets) == (0, 19, 25, 20)
    assert (p0.duplicated_offsets, p0.duplicate_rows) == (5, 5)
    assert [d.offset for d in p0.duplicates] == [15, 16, 17, 18, 19]
    assert all(d.table_versions == (1, 2) and d.count == 2 for d in p0.duplicates)
    assert len(set(p0.duplicates[0].files)) == 2
    assert (p0.missing_offsets, p0.missing_ranges) == (5, ((20, 25),))
    assert (p1.missing_offsets, p1.missing_ranges, p1.duplicated_offsets) == (2, ((5, 7),), 0)
    assert {f.code for f in report.findings} == {"offsets-duplicated", "offsets-missing"}
    assert report.severity == "error"


def test_clean_table(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    stream_commit(table, QID, 0, raw_rows("events", 0, range(0, 50)))
    stream_commit(table, QID, 1, raw_rows("events", 0, range(50, 100)))
    report = verify_table(table, expected=[OffsetRange(TopicPartition("events", 0), 0, 100)])
    (p,) = report.partitions
    assert p.ok and report.findings == () and report.severity is None


@pytest.mark.parametrize(
    ("expected", "missing", "unexpected"),
    [
        (OffsetRange(TopicPartition("events", 0), 0, 100), 0, 0),
        (OffsetRange(TopicPartition("events", 0), 20, 100), 0, 0),  # offsets below the range (retention) are fine
        (OffsetRange(TopicPartition("events", 0), 0, 120), 20, 0),
        (OffsetRange(TopicPartition("events", 0), 0, 90), 0, 10),
        (OffsetRange(TopicPartition("events", 0), 0, 0), 0, 100),
    ],
)
def test_expected_range_edges(tmp_path: Path, expected: OffsetRange, missing: int, unexpected: int) -> None:
    table = tmp_path / "raw"
    stream_commit(table, QID, 0, raw_rows("events", 0, range(100)))
    (p,) = verify_table(table, expected=[expected]).partitions
    assert (p.missing_offsets, p.unexpected_offsets) == (missing, unexpected)


def test_partition_without_rows_is_all_missing(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    stream_commit(table, QID, 0, raw_rows("events", 0, range(10)))
    report = verify_table(table, expected=[OffsetRange(TopicPartition("events", 3), 5, 9)])
    p3 = next(p for p in report.partitions if p.partition == 3)
    assert (p3.rows, p3.missing_offsets, p3.missing_ranges, p3.min_offset) == (0, 4, ((5, 9),), None)


def test_partitioned_by_topic_and_removed_files(tmp_path: Path) -> None:
    """Partition columns come from partitionValues; files removed by an overwrite are not read."""
    table = tmp_path / "raw"
    write_deltalake(str(table), raw_rows("a", 0, range(5)), partition_by=["topic"])
    write_deltalake(str(table), raw_rows("b", 0, range(3)), mode="append", partition_by=["topic"])
    write_deltalake(str(table), raw_rows("a", 0, range(5)), mode="append", partition_by=["topic"])
    write_deltalake(str(table), raw_rows("a", 0, range(5)), mode="overwrite", partition_by=["topic"])
    report = verify_table(table, expected=[OffsetRange(TopicPartition("a", 0), 0, 5)])
    assert [(p.topic, p.rows, p.duplicated_offsets) for p in report.partitions] == [("a", 5, 0)]
    older = verify_table(table, table_version=2)
    assert [(p.topic, p.rows, p.duplicated_offsets) for p in older.partitions] == [("a", 10, 5), ("b", 3, 0)]


def test_column_mapping_mode_name(fixtures_dir: Path) -> None:
    """Parquet files of this fixture name columns ``col-<uuid>``; verify must read them by physical name."""
    table = fixtures_dir / "delta-tables" / "table-with-columnmapping-mode-name"
    report = verify_table(table, topic_column="StringType", partition_column="IntegerType", offset_column="LongType")
    assert report.rows_scanned == 6
    nulls = [f for f in report.findings if f.code == "null-coordinates"]
    assert sum(p.rows for p in report.partitions) + (nulls[0].details["rows"] if nulls else 0) == 6


def test_custom_column_names(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    data = pa.table({"t": ["x", "x"], "p": pa.array([0, 0], pa.int32()), "o": pa.array([1, 1], pa.int64())})
    write_deltalake(str(table), data)
    report = verify_table(table, topic_column="t", partition_column="p", offset_column="o")
    assert report.partitions[0].duplicated_offsets == 1


def test_large_table_is_vectorised(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    n = 200_000
    stream_commit(table, QID, 0, raw_rows("big", 0, range(n)))
    stream_commit(table, QID, 1, raw_rows("big", 0, range(n - 10, n + 5)))
    (p,) = verify_table(table, expected=[OffsetRange(TopicPartition("big", 0), 0, n + 10)]).partitions
    assert (p.rows, p.duplicated_offsets, p.missing_offsets, p.missing_ranges) == (n + 15, 10, 5, ((n + 5, n + 10),))


def test_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(
        TableNotFoundError, match=rf"^{re.escape(str(tmp_path))} is not a Delta table: no _delta_log folder"
    ):
        verify_table(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("events:0:0-100", OffsetRange(TopicPartition("events", 0), 0, 100)),
        ("my:topic:3:5-5", OffsetRange(TopicPartition("my:topic", 3), 5, 5)),
    ],
)
def test_parse_range(text: str, expected: OffsetRange) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["events", "events:0", "events:x:0-1", "events:0:5-1", "events:0:10", ":0:0-1"])
def test_parse_range_errors(text: str) -> None:
    with pytest.raises(OptionError, match="--range"):
        parse_range(text)


@pytest.mark.parametrize("shape", ["runs", "shuffled", "sparse"])
def test_counts_match_a_plain_python_count(tmp_path: Path, shape: str) -> None:
    """Grouping by runs or by sort, counting by bincount or by sort: the same numbers as counting row by row."""
    import random

    rng = random.Random(7)
    rows: list[tuple[str, int, int]] = []
    for topic in ("a", "bb"):
        for partition in range(3):
            gap = 10**9 if shape == "sparse" else 1
            offsets = [i * gap for i in range(300) if rng.random() > 0.05]
            offsets += rng.sample(offsets, 20)  # duplicates
            rows += [(topic, partition, o) for o in offsets]
    if shape != "runs":
        rng.shuffle(rows)
    table = tmp_path / "raw"
    for start in range(0, len(rows), 700):
        chunk = rows[start : start + 700]
        data = pa.table(
            {
                "topic": [r[0] for r in chunk],
                "partition": pa.array([r[1] for r in chunk], pa.int32()),
                "offset": pa.array([r[2] for r in chunk], pa.int64()),
            }
        )
        write_deltalake(str(table), data, mode="append")
    end = 300 * (10**9 if shape == "sparse" else 1)
    expected = [OffsetRange(TopicPartition(t, p), 0, end) for t in ("a", "bb") for p in range(3)]
    report = verify_table(table, expected=expected)
    for p in report.partitions:
        mine = [o for t, q, o in rows if (t, q) == (p.topic, p.partition)]
        counts: dict[int, int] = {}
        for o in mine:
            counts[o] = counts.get(o, 0) + 1
        dups = sorted(o for o, c in counts.items() if c > 1)
        assert p.rows == len(mine) and p.distinct_offsets == len(counts)
        assert (p.min_offset, p.max_offset) == (min(mine), max(mine))
        assert p.duplicated_offsets == len(dups) and [d.offset for d in p.duplicates] == dups
        assert all(d.count == counts[d.offset] == len(d.files) for d in p.duplicates)
        assert p.missing_offsets == end - len(counts)


@pytest.mark.parametrize("name", ["dv-partitioned-with-checkpoint", "dv-with-columnmapping"])
def test_rows_deleted_by_deletion_vectors_are_not_counted(fixtures_dir: Path, name: str) -> None:
    """Delta's golden DV tables: rows ``(x % 10, x, "foo" + x % 5)`` for x in 0..49, then the even x below 30
    deleted one by one with deletion vectors. Read as (topic = col2, partition = part, offset = col1)."""
    report = verify_table(
        fixtures_dir / "delta-tables" / name, topic_column="col2", partition_column="part", offset_column="col1"
    )
    live = [x for x in range(50) if not (x % 2 == 0 and x < 30)]
    assert report.rows_scanned == len(live) == 35
    got = {(p.topic, p.partition): (p.rows, p.min_offset, p.max_offset, p.duplicate_rows) for p in report.partitions}
    want: dict[tuple[str, int], tuple[int, int, int, int]] = {}
    for part in range(10):
        xs = [x for x in live if x % 10 == part]
        want[(f"foo{part % 5}", part)] = (len(xs), min(xs), max(xs), 0)
    assert got == want
    assert [f.code for f in report.findings if f.code == "deletion-vectors"] == []
