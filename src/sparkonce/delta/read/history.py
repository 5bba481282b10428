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
import gc
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkonce.delta.log.delta_log import DeltaLog, commit_facts, monotonized
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
    stamps = monotonized(delta_log.commit_mtimes())
    versions = sorted(stamps, reverse=True)
    if limit is not None:
        versions = versions[:limit]
    from pyspark.sql.types import MapType, StructType, TimestampType

    columns = _history_columns(delta_log, versions, stamps)
    for at, field in enumerate(history_schema().fields):  # as Python rows hold them: datetimes, dicts, tuples
        kind, values = field.dataType, columns[at]
        if isinstance(kind, TimestampType):
            columns[at] = [dt.datetime.fromtimestamp(us / 1e6, dt.UTC) if us is not None else None for us in values]
        elif isinstance(kind, MapType):
            columns[at] = [dict(pairs) for pairs in values]
        elif isinstance(kind, StructType):
            columns[at] = [tuple(v.values()) if v is not None else None for v in values]
    return list(zip(*columns, strict=True))


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
    # The newest table version pins what every action on the DataFrame shows; the planner lists the log once.
    latest = DeltaLog(location).latest_version()
    reader = spark.read.format(DeltaHistoryDataSource.name()).option("path", location.uri)
    for name, value in location.storage_options:
        reader = reader.option(f"storage.{name}", value)
    reader = reader.option("upTo", str(latest))
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
        return "sparkonce.delta.read.history"

    def schema(self) -> StructType:  # driver
        return history_schema()

    def reader(self, schema: StructType) -> DataSourceReader:  # planner
        return _HistoryReader(dict(self.options))


@dataclass
class _Versions(InputPartition):
    """Table versions, newest first, read by one task, with the commit file times the driver listed."""

    versions: list[int]
    stamps: dict[int, int]
    """:func:`~sparkonce.delta.log.delta_log.monotonized` modification times (ms) of ``versions``' commits."""

    def __init__(self, versions: list[int], stamps: dict[int, int]) -> None:
        super().__init__(None)
        self.versions = versions
        self.stamps = stamps


class _HistoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:  # planner
        from sparkonce.options import get_int
        from sparkonce.storage import storage_options_from

        self.location = table_location(options.get("path") or "", storage_options=storage_options_from(options))
        up_to = get_int(options, "upTo", None)
        limit = get_int(options, "limit", None, minimum=1)
        listed = DeltaLog(self.location, check=False).commit_mtimes()  # one listing: the versions and their times
        self.stamps = monotonized({v: ms for v, ms in listed.items() if up_to is None or v <= up_to})
        versions = sorted(self.stamps, reverse=True)
        self.versions = versions[:limit] if limit is not None else versions

    def partitions(self) -> list[InputPartition]:  # planner
        chunk = max(2000, -(-len(self.versions) // 8))
        parts = []
        for i in range(0, len(self.versions), chunk):
            versions = self.versions[i : i + chunk]
            parts.append(_Versions(versions, {v: self.stamps[v] for v in versions}))
        return list(parts) or [_Versions([], {})]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # executor
        assert isinstance(partition, _Versions)
        if partition.versions:
            log = DeltaLog(self.location, check=False)
            yield _arrow_batch(_history_columns(log, partition.versions, partition.stamps))


def _history_columns(log: DeltaLog, table_versions: list[int], stamps: dict[int, int]) -> list[list[Any]]:
    """The columns of :data:`HISTORY_SCHEMA` for ``table_versions``, in that order, as Python lists shaped for
    ``pyarrow.array`` (maps as lists of pairs, structs as dicts, timestamps in microseconds).

    Python's cyclic garbage collector is paused meanwhile: about 20 objects are kept per commit and none is in a
    cycle, so each collection would only scan them again (a third of the time otherwise).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _columns(log, table_versions, stamps)
    finally:
        if collecting:
            gc.enable()


def _columns(log: DeltaLog, table_versions: list[int], stamps: dict[int, int]) -> list[list[Any]]:
    columns: list[list[Any]] = [[] for _ in range(17)]
    (
        version,
        timestamp,
        user_id,
        user_name,
        operation,
        parameters,
        job,
        notebook,
        cluster_id,
        read_version,
        isolation,
        blind,
        metrics,
        user_metadata,
        engine,
        app_id,
        txn_version,
    ) = (c.append for c in columns)
    for summary in log.commit_summaries(table_versions):
        info, txns = summary.commit_info, summary.txns
        facts = commit_facts(info, txns)
        params = [(str(k), _text(v)) for k, v in facts.parameters.items()]
        if facts.operation == STREAMING_UPDATE and facts.query_id is not None and facts.batch_id is not None:
            names = {k for k, _ in params}
            for name, value in (
                ("queryId", facts.query_id),
                ("epochId", str(facts.batch_id)),
                ("txnAppId", facts.query_id),
                ("txnVersion", str(facts.batch_id)),
            ):
                if name not in names:
                    params.append((name, value))
        ms = facts.in_commit_timestamp_ms
        if ms is None:
            ms = stamps.get(summary.table_version)
        job_info, notebook_info = info.get("job"), info.get("notebook")
        version(summary.table_version)
        timestamp(ms * 1000 if ms is not None else None)
        user_id(_text(info.get("userId")))
        user_name(_text(info.get("userName")))
        operation(facts.operation)
        parameters(params)
        job({f: _text(job_info.get(f)) for f in _JOB_FIELDS} if isinstance(job_info, dict) else None)
        notebook({"notebookId": _text(notebook_info.get("notebookId"))} if isinstance(notebook_info, dict) else None)
        cluster_id(_text(info.get("clusterId")))
        read = info.get("readVersion")
        read_version(read if isinstance(read, int) and not isinstance(read, bool) else None)
        isolation(_text(info.get("isolationLevel")))
        blind(info.get("isBlindAppend") if isinstance(info.get("isBlindAppend"), bool) else None)
        metrics([(str(k), _text(v)) for k, v in facts.metrics.items()])
        user_metadata(_text(info.get("userMetadata")))
        engine(_text(info.get("engineInfo")))
        app_id(txns[0].app_id if txns else None)
        txn_version(txns[0].txn_version if txns else None)
    return columns


def _arrow_batch(columns: list[list[Any]]) -> pa.RecordBatch:
    """``columns`` (:func:`_history_columns`) as an Arrow batch of :func:`history_schema` (no JVM needed)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(history_schema(), timezone="UTC", prefers_large_types=False)
    arrays = [pa.array(values, type=field.type) for field, values in zip(schema, columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _text(value: Any) -> str | None:
    """A map value as Delta shows it: strings as they are, other values as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


__all__ = ["HISTORY_SCHEMA", "DeltaHistoryDataSource", "history", "history_rows", "history_schema"]
