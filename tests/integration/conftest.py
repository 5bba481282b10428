"""Helpers for integration tests: input files for file-stream drivers, reading Delta tables back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkonce.delta.table.catalog import WAREHOUSE_CONF
from sparkonce.delta.txn.readers import RegisteredReader, read_readers
from sparkonce.sql import DeltaSql
from sparkonce.storage import TableLocation
from sparkonce_local.demo import table_ids, write_json_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def write_input_files(directory: Path, files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
    """Write ``files`` JSON files of ``rows_per_file`` rows with consecutive ids; return all ids."""
    return write_json_batches(directory, files, rows_per_file, start=start)


INPUT_SCHEMA = "id long, device string, value double"
"""The rows :func:`write_input_files` writes."""


def stream_input_files(spark: SparkSession, inputs: Path, checkpoint: Path, table: Path, **options: str) -> str:
    """Stream the JSON files of :func:`write_input_files` into the Delta table at ``table``, one file a batch,
    ``availableNow`` (sink ``options`` added); wait for it to end and return the query id."""
    query = (
        spark.readStream.format("json")
        .schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .options(**options)
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    assert query.exception() is None
    return str(query.id)


def delta_ids(table: Path) -> list[int]:
    """All ids of a Delta table read through delta-rs (independent of our reader), sorted."""
    return sorted(table_ids(table))


@pytest.fixture
def sql(spark: SparkSession, tmp_path: Path) -> Iterator[DeltaSql]:
    """``spark.sql`` as registered, with sparkonce's catalog and managed tables in this test's folder."""
    assert isinstance(spark.sql, DeltaSql)
    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "warehouse"))
    yield spark.sql
    spark.conf.unset(WAREHOUSE_CONF)


@pytest.fixture
def input_files(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(files: int, rows_per_file: int, *, start: int = 0) -> list[int]:
        return write_input_files(tmp_path / "input", files, rows_per_file, start=start)

    return make


def missing_referenced_files(table: Path) -> list[str]:
    """The data files that any JSON commit of the table adds and that do not exist (relative, decoded)."""
    import json
    from urllib.parse import unquote

    missing = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add") if line.strip() else None
            if add is not None and not (table / unquote(add["path"])).is_file():
                missing.append(unquote(add["path"]))
    return missing


def operation_metrics(commit_info: dict) -> dict:
    """A ``commitInfo``'s ``operationMetrics`` with numbers as numbers (Delta writes every value as a string)."""

    def number(value: object) -> object:
        text = str(value)
        return int(text) if text.lstrip("-").isdigit() else value

    return {k: number(v) for k, v in (commit_info.get("operationMetrics") or {}).items()}


def registered_reader(table: str | Path | TableLocation, query_id: str, table_version: int) -> RegisteredReader:
    """The query's reader registration on ``table`` once it names ``table_version``.

    The streaming query listener moves a registration on from the listener bus, after ``awaitTermination`` or
    ``processAllAvailable`` return: its events come late, so a test waits for them (up to a minute) and then
    asserts the exact table version.
    """
    location = table if isinstance(table, TableLocation) else str(table)
    deadline = time.monotonic() + 60
    while True:
        readers, problems = read_readers(location)
        assert problems == []
        mine = [r for r in readers if r.query_id == query_id]
        if len(mine) == 1 and mine[0].table_version == table_version:
            return mine[0]
        assert time.monotonic() < deadline, f"the registration of {query_id} on {table} is still {mine}"
        time.sleep(0.2)
