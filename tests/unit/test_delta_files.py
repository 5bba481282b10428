"""The executors' Parquet files: dictionary encoding only where the first rows repeat."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter, dictionary_columns
from sparkonce.storage import table_location


def _encodings(path: Path) -> dict[str, set[str]]:
    meta = pq.ParquetFile(path).metadata
    found: dict[str, set[str]] = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            found.setdefault(column.path_in_schema, set()).update(column.encodings)
    return found


def test_dictionary_only_for_columns_whose_first_rows_repeat(tmp_path: Path) -> None:
    n = 10_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "device": pa.array([f"device-{i % 100}" for i in range(n)]),
            "flag": pa.array([i % 2 == 0 for i in range(n)]),
            "payload": pa.array([f"{i:08d}-payload" for i in range(n)]),
            "tags": pa.array([["a"]] * n, pa.list_(pa.string())),
        }
    )
    assert dictionary_columns(table) == ["device", "flag"]
    assert dictionary_columns(table.slice(0, 10)) is True  # too few rows to judge: pyarrow's default

    writer = TableFileWriter(FileWriterOptions(location=table_location(str(tmp_path))))
    for offset in range(0, n, 2_500):  # as Spark hands them over: several Arrow batches, one row group each
        writer.write(table.slice(offset, 2_500))
    [written] = writer.close()
    encodings = _encodings(tmp_path / written.path)
    assert any("DICTIONARY" in e for e in encodings["device"])
    assert not any("DICTIONARY" in e for e in encodings["id"] | encodings["payload"])
    assert pq.read_table(tmp_path / written.path).equals(table)  # same rows back


def test_a_failing_task_leaves_no_file_behind(tmp_path: Path) -> None:
    """As a context manager the writer deletes what it wrote when the block raises; otherwise close() reports it."""
    import pytest

    table = pa.table({"id": pa.array(range(10), pa.int64()), "p": pa.array(["a", "b"] * 5)})
    options = FileWriterOptions(location=table_location(str(tmp_path)), partition_by=("p",), max_records_per_file=2)
    with pytest.raises(RuntimeError, match="task failed"), TableFileWriter(options) as writer:
        writer.write(table)
        writer.close()  # even closed files: the driver never heard of them
        raise RuntimeError("task failed")
    assert sorted(p.name for p in tmp_path.rglob("*.parquet")) == []
    with TableFileWriter(options) as writer:
        writer.write(table)
        files = writer.close()
    assert len(files) == 6 and sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet")) == sorted(
        f.path for f in files
    )
