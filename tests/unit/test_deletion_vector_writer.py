"""The deletion vector writer (sparkonce.delta.table.deletion_vectors, write side): bitmaps in Delta's portable
RoaringBitmapArray format, framed in ``deletion_vector_<uuid>.bin`` files, read back by the reader; every bitmap the
Delta JVM wrote into the fixture tables re-encodes byte for byte."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.ops.row_deletion import wide_bounds_stats
from sparkonce.delta.table.deletion_vectors import (
    PORTABLE_MAGIC,
    DeletionVector,
    DeletionVectorFile,
    deleted_rows,
    deletion_vectors_writable,
    dv_relative_path,
    parse_bitmap_array,
    random_prefix_length,
    serialize_bitmap_array,
    serialized_bitmap,
    z85_decode,
    z85_encode,
)
from sparkonce.storage import table_location

SETS = {
    "empty": np.zeros(0, np.uint64),
    "few": np.array([0, 3, 17], np.uint64),
    "run": np.arange(10, 9000, dtype=np.uint64),
    "dense": np.arange(0, 200_000, 2, dtype=np.uint64),
    "beyond 32 bits": np.array([5, (1 << 32) + 7, (3 << 32) + 1], np.uint64),
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_a_bitmap_round_trips_through_the_reader(name: str) -> None:
    rows = SETS[name]
    data = serialize_bitmap_array(rows)
    assert struct.unpack("<i", data[:4]) == (PORTABLE_MAGIC,)
    assert parse_bitmap_array(data).tolist() == rows.tolist()


def test_z85_round_trips() -> None:
    data = bytes(range(16))
    assert z85_decode(z85_encode(data), 16) == data
    assert len(z85_encode(data)) == 20
    assert z85_decode(z85_encode(b"\x01\x02\x03"), 3) == b"\x01\x02\x03"  # padded to 4 bytes, cut back


@pytest.mark.parametrize("prefix_length", [0, 2])
def test_a_deletion_vector_file_holds_several_bitmaps_the_reader_finds(tmp_path: Path, prefix_length: int) -> None:
    location = table_location(str(tmp_path))
    dv_file = DeletionVectorFile(prefix_length=prefix_length)
    first = dv_file.add(SETS["few"])
    second = dv_file.add(SETS["run"])
    dv_file.store(location)
    assert first["offset"] == 1 and second["offset"] == 1 + 4 + first["sizeInBytes"] + 4
    stored = (tmp_path / dv_file.relative_path).read_bytes()
    assert stored[:1] == b"\x01" and len(stored) == second["offset"] + 4 + second["sizeInBytes"] + 4
    for descriptor, rows in ((first, SETS["few"]), (second, SETS["run"])):
        assert descriptor["storageType"] == "u" and descriptor["cardinality"] == len(rows)
        assert len(descriptor["pathOrInlineDv"]) == 20 + prefix_length
        assert dv_relative_path(descriptor) == dv_file.relative_path
        vector = DeletionVector.from_action(descriptor, location, data_file="part-0.parquet")
        assert deleted_rows(vector).tolist() == rows.tolist()
        bitmap = serialized_bitmap(vector)
        at = descriptor["offset"] + 4
        assert stored[at + len(bitmap) : at + len(bitmap) + 4] == struct.pack(">I", zlib.crc32(bitmap))


@pytest.mark.parametrize(
    "table",
    [
        "delta-tables/dv-partitioned-with-checkpoint",
        "delta-tables/dv-with-columnmapping",
        "delta-rs-tables/cdf-table-with-cdc-and-dvs",
    ],
)
def test_bitmaps_the_delta_jvm_wrote_re_encode_byte_for_byte(fixtures_dir: Path, table: str) -> None:
    """Delta's writer runs its bitmaps through runOptimize before serializing them; so does ours, and CRoaring and
    Java's RoaringBitmap choose the same containers: the bytes are the same."""
    location = table_location(str(fixtures_dir / table))
    delta_log = DeltaLog(location)
    checked = 0
    for table_version in range(delta_log.latest_version() + 1):
        for action in delta_log.read_actions(table_version):
            add = action.get("add") or {}
            if add.get("deletionVector"):
                vector = DeletionVector.from_action(add["deletionVector"], location, data_file=add["path"])
                data = serialized_bitmap(vector)
                assert serialize_bitmap_array(parse_bitmap_array(data)) == data, (table_version, add["path"])
                checked += 1
    assert checked >= 10


def test_deletion_vectors_are_written_only_where_the_protocol_and_the_property_allow() -> None:
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": ["deletionVectors"]}
    assert deletion_vectors_writable(protocol, {"delta.enableDeletionVectors": "true"})
    assert not deletion_vectors_writable(protocol, {"delta.enableDeletionVectors": "false"})
    assert not deletion_vectors_writable(protocol, {})
    assert not deletion_vectors_writable({"writerFeatures": []}, {"delta.enableDeletionVectors": "true"})
    assert random_prefix_length({}) == 0
    assert random_prefix_length({"delta.randomizeFilePrefixes": "true"}) == 2
    assert random_prefix_length({"delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "4"}) == 4


def test_statistics_of_a_file_with_deleted_rows_have_wide_bounds() -> None:
    """As Delta's updateStatsToWideBounds: numRecords and min/max kept, tightBounds false, and a column null in every
    live row (null count = live rows while tight) gets the file's row count as its null count."""
    stats = {
        "numRecords": 10,
        "minValues": {"a": 1},
        "maxValues": {"a": 9},
        "nullCount": {"a": 0, "b": 10, "s": {"c": 4}},
    }
    wide = json.loads(wide_bounds_stats({"stats": json.dumps(stats)}, 10, 0))
    assert wide == {**stats, "tightBounds": False}
    stats_with_dv = {**stats, "nullCount": {"a": 0, "b": 7, "s": {"c": 7}}, "tightBounds": True}
    wide = json.loads(wide_bounds_stats({"stats": json.dumps(stats_with_dv)}, 10, 3))
    assert wide["nullCount"] == {"a": 0, "b": 10, "s": {"c": 10}} and wide["tightBounds"] is False
    already_wide = {**stats_with_dv, "tightBounds": False}
    assert json.loads(wide_bounds_stats({"stats": json.dumps(already_wide)}, 10, 3))["nullCount"]["b"] == 7
