"""Helpers for integration tests: input files for file-stream drivers, reading Delta tables back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest


def write_input_files(directory: Path, files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
    """Write ``files`` JSON files of ``rows_per_file`` rows with consecutive ids; return all ids."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        lines = []
        for r in range(rows_per_file):
            row_id = start + f * rows_per_file + r
            ids.append(row_id)
            lines.append(json.dumps({"id": row_id, "device": f"dev-{row_id % 4}", "value": row_id / 10}))
        (directory / f"input-{start + f:06d}.json").write_text("\n".join(lines) + "\n")
    return ids


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
