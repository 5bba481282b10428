"""Helpers for integration tests: input files for file-stream drivers, reading Delta tables back."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sparkonce.ops.demo import write_json_batches


def write_input_files(directory: Path, files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
    """Write ``files`` JSON files of ``rows_per_file`` rows with consecutive ids; return all ids."""
    return write_json_batches(directory, files, rows_per_file, start=start)


def delta_ids(table: Path) -> list[int]:
    """All ids of a Delta table read through delta-rs (independent of our reader), sorted."""
    from deltalake import DeltaTable

    data = pa.table(DeltaTable(str(table)).to_pyarrow_table(columns=["id"]))
    return sorted(data.column("id").to_pylist())


@pytest.fixture
def input_files(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
        return write_input_files(tmp_path / "input", files, rows_per_file, start=start)

    return make
