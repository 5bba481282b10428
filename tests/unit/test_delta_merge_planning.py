"""Driver-side planning of merge and compaction, without Spark: equality keys found in merge conditions, and
bin-packing of small files."""

from __future__ import annotations

import pytest

from sparkonce.delta.ops.merge import equi_keys
from sparkonce.delta.ops.optimize import bin_pack
from sparkonce.delta.ops.rewrite import TableFile


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("t.id = s.id", [("id", "id")]),
        ("s.key = t.id AND t.day = s.day", [("id", "key"), ("day", "day")]),
        ("(t.id = s.id) and t.n > 3", [("id", "id")]),
        ("`t`.`id` = `s`.`id`", [("id", "id")]),
        ("t.id = s.id OR t.n = s.n", []),  # not a conjunction of equalities: no pruning
        ("t.id = t.n", []),
        ("t.missing = s.id", []),
        ("id = s.id", []),
    ],
)
def test_equi_keys(condition: str, expected: list[tuple[str, str]]) -> None:
    assert equi_keys(condition, "t", ["id", "day", "n"], ["id", "key", "day", "n"]) == expected


def test_equi_keys_needs_a_target_alias_and_sql_text() -> None:
    assert equi_keys("t.id = s.id", None, ["id"], ["id"]) == []


def _file(path: str, size: int, part: str | None = None) -> TableFile:
    return TableFile(path, size, {"p": part} if part is not None else {}, 1, {}, {})


def test_bin_pack_per_partition_smallest_first_single_files_left_alone() -> None:
    files = [
        _file("a1", 40, "a"),
        _file("a2", 30, "a"),
        _file("a3", 50, "a"),
        _file("a4", 100, "a"),  # not below the target: never compacted
        _file("b1", 10, "b"),  # alone in its partition: nothing to pack it with
    ]
    bins = bin_pack(files, ["p"], 100)
    assert [[f.path for f in b] for b in bins] == [["a2", "a1"]]  # a3 would overflow the bin and stays alone
    assert [[f.path for f in b] for b in bin_pack(files, ["p"], 1000)] == [["a2", "a1", "a3", "a4"]]
    assert bin_pack([_file("x", 5), _file("y", 5), _file("z", 5)], [], 10) == [[_file("x", 5), _file("y", 5)]]


def _dv_file(path: str, size: int, rows: int, deleted: int) -> TableFile:
    from sparkonce.delta.table.deletion_vectors import DeletionVector

    dv = DeletionVector("i", None, "", 0, 0, deleted)
    return TableFile(path, size, {}, rows, {}, {}, deletion_vector={"storageType": "i"}, deletion_vector_rows=dv)


def test_bin_pack_rewrites_a_file_whose_deletion_vector_deletes_over_5_percent() -> None:
    big_mostly_deleted = _dv_file("big", 1000, 100, 6)
    big_few_deleted = _dv_file("few", 1000, 100, 5)
    small_alone = _dv_file("small", 10, 100, 50)
    assert big_mostly_deleted.live_records == 94
    bins = bin_pack([big_mostly_deleted, big_few_deleted], [], 100)
    assert [[f.path for f in b] for b in bins] == [["big"]]
    assert [[f.path for f in b] for b in bin_pack([small_alone], [], 100)] == [["small"]]


def test_rewrite_snapshot_of_a_column_mapped_table_keys_files_by_logical_names(fixtures_dir) -> None:  # type: ignore[no-untyped-def]
    """Partition values and stats come out of the log under logical names (the log keys them by physical
    name), the ``remove`` of a file keys them by physical name again, and the files to write get the mapping."""
    from sparkonce.delta.ops.rewrite import open_snapshot

    table = fixtures_dir / "delta-tables" / "dv-with-columnmapping"
    snapshot = open_snapshot(str(table), operation="DELETE")
    assert snapshot.column_mapping is not None and snapshot.column_mapping.mode == "name"
    physical_part = snapshot.column_mapping.physical_name("part")
    assert physical_part.startswith("col-")
    assert sorted({f.partition_values["part"] for f in snapshot.files}) == list(range(10))
    assert all(set(f.min_values) <= {"col1", "col2"} and f.min_values for f in snapshot.files)
    some = snapshot.files[0]
    assert some.removed().partition_values == {physical_part: str(some.partition_values["part"])}
