"""``DESCRIBE HISTORY`` as a Spark DataFrame: the driver lists ``_delta_log``, executors read the commits.

``sparkonce.history(spark, path)`` returns one row per Delta commit, newest first, with Delta's column names
(``version``, ``timestamp``, ``operation``, ``operationParameters``, ...) plus the ``txn`` of each commit
(``txnAppId``, ``txnVersion``), so checks written against ``DESCRIBE HISTORY`` run on it as SQL::

    sparkonce.history(spark, path).createOrReplaceTempView("table_history")
    spark.sql("SELECT operationParameters.txnVersion AS epoch FROM table_history WHERE operation = 'STREAMING UPDATE'")

Streaming commits (Delta-JVM ``STREAMING UPDATE`` or sparkonce's sink) carry both key pairs in
``operationParameters``: Delta's ``queryId``/``epochId`` and ``txnAppId``/``txnVersion`` (the names the usual
duplicate-epoch checks use).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkonce.delta.log import CommitEntry, DeltaLog
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

HISTORY_SCHEMA = (
    "version BIGINT, timestamp TIMESTAMP, userId STRING, userName STRING, operation STRING, "
    "operationParameters MAP<STRING, STRING>, job STRUCT<jobId: STRING, jobName: STRING, jobRunId: STRING, "
    "runId: STRING, jobOwnerId: STRING, triggerType: STRING>, notebook STRUCT<notebookId: STRING>, "
    "clusterId STRING, readVersion BIGINT, isolationLevel STRING, isBlindAppend BOOLEAN, "
    "operationMetrics MAP<STRING, STRING>, userMetadata STRING, engineInfo STRING, txnAppId STRING, txnVersion BIGINT"
)
"""Delta's ``DESCRIBE HISTORY`` columns in Delta's order, then sparkonce's ``txnAppId`` and ``txnVersion``."""
_JOB_FIELDS = ("jobId", "jobName", "jobRunId", "runId", "jobOwnerId", "triggerType")
STREAMING_UPDATE = "STREAMING UPDATE"


def history_rows(path: str | os.PathLike[str] | TableLocation, *, limit: int | None = None) -> list[tuple[Any, ...]]:
    """Return the rows of :func:`history` as tuples in :data:`HISTORY_SCHEMA` order, newest first.

    Runs on the driver; reads only the ``limit`` newest JSON commits, and of each only its ``commitInfo`` and
    ``txn`` lines.

    Raises:
        TableNotFoundError: ``path`` is not a Delta table.
        DeltaLogError: a JSON commit in range is corrupt (the message names the file and table version).
    """
    _check_limit(limit)
    delta_log = DeltaLog(table_location(path))
    versions = sorted(delta_log.commit_versions(), reverse=True)
    if limit is not None:
        versions = versions[:limit]
    return [_row(entry) for entry in delta_log.commit_summaries(versions)]


def history(
    spark: SparkSession, path: str | os.PathLike[str] | TableLocation, *, limit: int | None = None
) -> DataFrame:
    """Return the Delta commits of the table at ``path`` as a DataFrame shaped like ``DESCRIBE HISTORY``.

    Needs :func:`sparkonce.register` (which registers :class:`DeltaHistoryDataSource`). The driver lists
    ``_delta_log`` once; executors read the commits (:class:`DeltaHistoryDataSource`, in chunks of
    table versions), so a history of 100,000 commits is read in parallel and never passes through the driver. The
    DataFrame is pinned to the table versions listed now: every action on it shows the same commits.

    Args:
        spark: The session to build the DataFrame in.
        path: The table root: a path, a URI, or a location with storage options (:func:`sparkonce.table_location`).
        limit: The number of newest commits to return (all when None), like ``DESCRIBE HISTORY t LIMIT n``.

    Returns:
        One row per table version, newest first, with Delta's columns (:data:`HISTORY_SCHEMA`: ``version``,
        ``timestamp``, ``userId``, ``userName``, ``operation``, ``operationParameters``, ``job``, ``notebook``,
        ``clusterId``, ``readVersion``, ``isolationLevel``, ``isBlindAppend``, ``operationMetrics``,
        ``userMetadata``, ``engineInfo``; the maps ``map<string,string>``), then ``txnAppId`` and ``txnVersion``
        (the commit's first ``txn`` action, null when it has none).

    Raises:
        TableNotFoundError: ``path`` is not a Delta table.
        OptionError: ``limit`` is not positive.
    """
    _check_limit(limit)
    location = table_location(path)
    versions = DeltaLog(location).commit_versions()
    reader = spark.read.format(DeltaHistoryDataSource.name()).option("path", location.uri)
    for name, value in location.storage_options:
        reader = reader.option(f"storage.{name}", value)
    reader = reader.option("upTo", str(versions[-1] if versions else -1))
    if limit is not None:
        reader = reader.option("limit", str(limit))
    return reader.load()


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        from sparkonce.errors import OptionError

        raise OptionError("limit", limit, "must be a positive number of commits, or None for all")


def history_schema() -> StructType:
    """:data:`HISTORY_SCHEMA` as a ``StructType``, built without a JVM (Python workers have none)."""
    from pyspark.sql.types import BooleanType, LongType, MapType, StringType, StructField, StructType, TimestampType

    text, long_, strings = StringType(), LongType(), MapType(StringType(), StringType())
    job = StructType([StructField(f, text) for f in _JOB_FIELDS])
    kinds: list[tuple[str, Any]] = [
        ("version", long_),
        ("timestamp", TimestampType()),
        ("userId", text),
        ("userName", text),
        ("operation", text),
        ("operationParameters", strings),
        ("job", job),
        ("notebook", StructType([StructField("notebookId", text)])),
        ("clusterId", text),
        ("readVersion", long_),
        ("isolationLevel", text),
        ("isBlindAppend", BooleanType()),
        ("operationMetrics", strings),
        ("userMetadata", text),
        ("engineInfo", text),
        ("txnAppId", text),
        ("txnVersion", long_),
    ]
    return StructType([StructField(name, kind) for name, kind in kinds])


class DeltaHistoryDataSource(DataSource):
    """``DESCRIBE HISTORY`` read by executors: options ``path`` (and ``storage.<NAME>``), ``upTo`` (the newest
    table version to show) and ``limit``. The schema is :func:`history_schema`."""

    @classmethod
    def name(cls) -> str:
        return "sparkonce.delta.history"

    def schema(self) -> StructType:  # driver
        return history_schema()

    def reader(self, schema: StructType) -> DataSourceReader:  # planner
        return _HistoryReader(dict(self.options))


@dataclass
class _Versions(InputPartition):
    """Table versions, newest first, read by one task."""

    versions: list[int]

    def __init__(self, versions: list[int]) -> None:
        super().__init__(None)
        self.versions = versions


class _HistoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:  # planner
        from sparkonce.options import get_int
        from sparkonce.storage import storage_options_from

        self.location = table_location(options.get("path") or "", storage_options=storage_options_from(options))
        up_to = get_int(options, "upTo", None)
        limit = get_int(options, "limit", None, minimum=1)
        versions = sorted(
            (v for v in DeltaLog(self.location).commit_versions() if up_to is None or v <= up_to), reverse=True
        )
        self.versions = versions[:limit] if limit is not None else versions

    def partitions(self) -> list[InputPartition]:  # planner
        chunk = max(2000, -(-len(self.versions) // 8))
        parts = [_Versions(self.versions[i : i + chunk]) for i in range(0, len(self.versions), chunk)]
        return list(parts) or [_Versions([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        assert isinstance(partition, _Versions)
        if partition.versions:
            rows = [_row(e) for e in DeltaLog(self.location).commit_summaries(partition.versions)]
            yield from _arrow_table(rows).to_batches()


def _arrow_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    """``rows`` as an Arrow table of :func:`history_schema` (no JVM needed)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(history_schema(), timezone="UTC", prefers_large_types=False)
    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in schema]
    arrays = []
    for field, values in zip(schema, columns, strict=True):
        if pa.types.is_map(field.type):
            values = [list(v.items()) if v is not None else None for v in values]
        elif pa.types.is_struct(field.type):
            names = [f.name for f in field.type]
            values = [dict(zip(names, v, strict=True)) if v is not None else None for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _row(entry: CommitEntry) -> tuple[Any, ...]:
    params = {str(k): _text(v) for k, v in entry.operation_parameters.items()}
    if entry.operation == STREAMING_UPDATE and entry.query_id is not None and entry.batch_id is not None:
        params.setdefault("queryId", entry.query_id)
        params.setdefault("epochId", str(entry.batch_id))
        params.setdefault("txnAppId", entry.query_id)
        params.setdefault("txnVersion", str(entry.batch_id))
    txn = entry.txns[0] if entry.txns else None
    timestamp = dt.datetime.fromtimestamp(entry.timestamp_ms / 1000, dt.UTC) if entry.timestamp_ms is not None else None
    info = entry.commit_info
    job = info.get("job") if isinstance(info.get("job"), dict) else None
    notebook = info.get("notebook") if isinstance(info.get("notebook"), dict) else None
    return (
        entry.table_version,
        timestamp,
        _text(info.get("userId")),
        _text(info.get("userName")),
        entry.operation,
        params,
        tuple(_text(job.get(f)) for f in _JOB_FIELDS) if job else None,
        (_text(notebook.get("notebookId")),) if notebook else None,
        _text(info.get("clusterId")),
        entry.read_version,
        _text(info.get("isolationLevel")),
        entry.is_blind_append,
        {str(k): _text(v) for k, v in entry.operation_metrics.items()},
        entry.user_metadata,
        entry.engine_info,
        txn.app_id if txn else None,
        txn.txn_version if txn else None,
    )


def _text(value: Any) -> str | None:
    """A map value as Delta shows it: strings as they are, other values as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


__all__ = ["HISTORY_SCHEMA", "DeltaHistoryDataSource", "history", "history_rows", "history_schema"]
