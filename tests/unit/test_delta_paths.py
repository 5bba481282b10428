"""The one resolver of the file paths ``add``/``remove`` actions name (no Spark, no I/O)."""

from __future__ import annotations

import pytest

from sparkonce.delta.log.paths import data_file_fs_path, data_file_uri, require_fs_path
from sparkonce.errors import DeltaLogError
from sparkonce.storage import table_location


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("part-0.parquet", "/data/t/part-0.parquet"),
        ("p=a%20b/part-0.parquet", "/data/t/p=a b/part-0.parquet"),  # percent-encoded, as the protocol says
        ("p=a%2520b/part-0.parquet", "/data/t/p=a%20b/part-0.parquet"),  # a '%' in the name, encoded once
        ("file:/data/t/x.parquet", "/data/t/x.parquet"),
        ("file:///data/t/p=a%20b/x.parquet", "/data/t/p=a b/x.parquet"),
        ("file://localhost/data/other/x.parquet", "/data/other/x.parquet"),  # absolute: anywhere on this host
        ("file://otherhost/data/t/x.parquet", None),  # another machine's disk
        ("s3://bucket/t/x.parquet", None),  # another store
    ],
)
def test_paths_of_a_local_table(raw: str, expected: str | None) -> None:
    assert data_file_fs_path(table_location("/data/t"), raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("part-0.parquet", "part-0.parquet"),
        ("p=a%20b/part-0.parquet", "p=a b/part-0.parquet"),
        ("s3://bucket/t/p=a%20b/x.parquet", "p=a b/x.parquet"),  # absolute, inside the table
        ("s3://bucket/t2/x.parquet", None),  # a sibling prefix, not the table
        ("s3://other/t/x.parquet", None),
        ("file:/data/t/x.parquet", None),
    ],
)
def test_paths_of_an_object_store_table(raw: str, expected: str | None) -> None:
    assert data_file_fs_path(table_location("s3://bucket/t"), raw) == expected


def test_a_file_outside_the_table_is_refused_by_name_and_uris_are_sparks() -> None:
    with pytest.raises(DeltaLogError, match=r"s3://bucket/t: the Delta log names the data file s3://other/x\.parquet"):
        require_fs_path(table_location("s3://bucket/t"), "s3://other/x.parquet")
    assert data_file_uri(table_location("/data/t"), "/data/t/x.parquet") == "file:/data/t/x.parquet"
    assert data_file_uri(table_location("s3://bucket/t"), "p=1/x.parquet") == "s3://bucket/t/p=1/x.parquet"
