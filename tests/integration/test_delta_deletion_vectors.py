"""Deletion vectors, read side, on real tables written by Delta's JVM connector (issue 12 item 3).

The reference is the golden generator (delta-io/delta ``GoldenTables.scala``, "dv-partitioned-with-checkpoint"
and "dv-with-columnmapping"): rows ``(x % 10, x, "foo" + x % 5)`` for x in 0..49, then table versions 1..15 each
``DELETE ... WHERE col1 = 2 * (version - 1)``. So table version v holds exactly the rows whose ``col1`` is not an
even number below ``2 * v``, independent of how the deletes are stored.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession

from sparkonce.delta.table.deletion_vectors import DeletionVector, serialized_bitmap, z85_encode

pytestmark = pytest.mark.spark

DV_TABLES = ["dv-partitioned-with-checkpoint", "dv-with-columnmapping"]


def golden_rows(table_version: int) -> list[tuple[int, int, str]]:
    deleted = {2 * n for n in range(table_version)}
    return sorted((x % 10, x, f"foo{x % 5}") for x in range(50) if x not in deleted)


def read_rows(spark: SparkSession, path: Path, **options: str) -> list[tuple[int, int, str]]:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted((r["part"], r["col1"], r["col2"]) for r in reader.load(str(path)).collect())


@pytest.mark.parametrize("name", DV_TABLES)
def test_latest_table_version_drops_deleted_rows(spark: SparkSession, fixtures_dir: Path, name: str) -> None:
    rows = read_rows(spark, fixtures_dir / "delta-tables" / name)
    assert len(rows) == 35
    assert rows == golden_rows(15)


@pytest.mark.parametrize("name", DV_TABLES)
def test_every_table_version_by_time_travel(spark: SparkSession, fixtures_dir: Path, name: str) -> None:
    path = fixtures_dir / "delta-tables" / name
    for table_version in range(16):
        assert read_rows(spark, path, versionAsOf=str(table_version)) == golden_rows(table_version), table_version


def test_partition_pruning_and_filters_keep_the_deletes(spark: SparkSession, fixtures_dir: Path) -> None:
    path = str(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint")
    got = sorted(r["col1"] for r in spark.read.format("delta").load(path).where("part = 6 and col1 > 10").collect())
    assert got == [36, 46]


def test_the_streaming_source_reads_the_snapshot_without_deleted_rows(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path
) -> None:
    path = str(tmp_path / "dv")  # a copy: the stream registers itself in its source's log (the retention guard)
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", path)
    query = (
        spark.readStream.format("delta")
        .load(path)
        .writeStream.format("memory")
        .queryName("dv_stream")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        rows = sorted((r["part"], r["col1"], r["col2"]) for r in spark.table("dv_stream").collect())
    finally:
        query.stop()
    assert rows == golden_rows(15)


def _rewrite_dv(commit: Path, table: Path, storage: str) -> None:
    """Rewrite the deletion vector of the add in ``commit`` as an inline (``i``) or absolute-path (``p``) one."""
    lines = commit.read_text().splitlines()
    out = []
    for line in lines:
        action: dict[str, Any] = json.loads(line)
        dv = action.get("add", {}).get("deletionVector")
        if dv:
            resolved = DeletionVector.from_action(dv, str(table), data_file=action["add"]["path"])
            if storage == "i":
                data = serialized_bitmap(resolved)
                action["add"]["deletionVector"] = {
                    "storageType": "i",
                    "pathOrInlineDv": z85_encode(data),
                    "sizeInBytes": len(data),
                    "cardinality": dv["cardinality"],
                }
            else:
                assert resolved.file is not None
                moved = table / "elsewhere" / "dv.bin"
                moved.parent.mkdir(exist_ok=True)
                shutil.copy(resolved.file, moved)
                action["add"]["deletionVector"] = {**dv, "storageType": "p", "pathOrInlineDv": moved.as_uri()}
        out.append(json.dumps(action))
    commit.write_text("\n".join(out) + "\n")


def test_inline_and_absolute_path_deletion_vectors(spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> None:
    """The same deletes stored the two other ways the protocol allows read back the same rows."""
    table = tmp_path / "dv"
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", table)
    log = table / "_delta_log"
    _rewrite_dv(log / "00000000000000000014.json", table, "i")
    _rewrite_dv(log / "00000000000000000015.json", table, "p")
    for name in ("00000000000000000014.json", "00000000000000000015.json"):
        assert "deletionVector" in (log / name).read_text()
    assert '"storageType": "i"' in (log / "00000000000000000014.json").read_text()
    assert '"storageType": "p"' in (log / "00000000000000000015.json").read_text()
    assert read_rows(spark, table) == golden_rows(15)


def test_a_corrupt_deletion_vector_fails_naming_the_file(
    spark: SparkSession, fixtures_dir: Path, tmp_path: Path
) -> None:
    table = tmp_path / "dv"
    shutil.copytree(fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint", table)
    commit = json.loads(
        next(
            line
            for line in (table / "_delta_log" / "00000000000000000015.json").read_text().splitlines()
            if '"add"' in line
        )
    )
    dv_file = DeletionVector.from_action(commit["add"]["deletionVector"], str(table), data_file="x").file
    assert dv_file is not None
    raw = bytearray(Path(dv_file).read_bytes())
    raw[10] ^= 0xFF
    Path(dv_file).write_bytes(bytes(raw))
    with pytest.raises(
        PythonException, match=rf"DeltaLogError: deletion vector \S*/{Path(dv_file).name} @ 1 fails its CRC32"
    ):
        spark.read.format("delta").load(str(table)).collect()


def test_metadata_row_index_is_the_row_position_in_its_file(spark: SparkSession, fixtures_dir: Path) -> None:
    """``_metadata.row_index`` counts the rows a deletion vector deletes too, as Spark's does: each row read is the
    Parquet file's row at that position."""
    import pyarrow.parquet as pq

    path = fixtures_dir / "delta-tables" / "dv-partitioned-with-checkpoint"
    frame = spark.read.format("delta").option("metadataColumn", "true").load(str(path))
    rows = frame.select("col1", "_metadata.file_path", "_metadata.row_index").collect()
    assert len(rows) == 35
    by_file: dict[str, list[int]] = {}
    for r in rows:
        by_file.setdefault(r.file_path, [])
        column = by_file[r.file_path] or pq.read_table(r.file_path.removeprefix("file:")).column("col1").to_pylist()
        by_file[r.file_path] = column
        assert column[r.row_index] == r.col1
    assert any(len(column) > sum(1 for r in rows if r.file_path == f) for f, column in by_file.items())
