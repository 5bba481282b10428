"""``DESCRIBE HISTORY`` as a Spark DataFrame, read from ``_delta_log`` on the driver.

``sparkonce.history(spark, path)`` returns one row per Delta commit, newest first, with Delta's column names
(``version``, ``timestamp``, ``operation``, ``operationParameters``, ...) plus the ``txn`` of each commit
(``txnAppId``, ``txnVersion``), so checks written against ``DESCRIBE HISTORY`` run on it as SQL::

    sparkonce.history(spark, path).createOrReplaceTempView("table_history")
    spark.sql("SELECT operationParameters.txnVersion AS epoch FROM table_history WHERE operation = 'STREAMING UPDATE'")

Streaming commits (Delta-JVM ``STREAMING UPDATE`` or sparkonce's sink) carry both key pairs in
``operationParameters``: Delta's ``queryId``/``epochId`` and ``txnAppId``/``txnVersion`` (the names seed 000's
duplicate-epoch checks use).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import TYPE_CHECKING, Any

from sparkonce.delta.log import CommitEntry, DeltaLog
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

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
    if limit is not None and limit < 1:
        from sparkonce.errors import OptionError

        raise OptionError("limit", limit, "must be a positive number of commits, or None for all")
    delta_log = DeltaLog(table_location(path))
    versions = sorted(delta_log.commit_versions(), reverse=True)
    if limit is not None:
        versions = versions[:limit]
    return [_row(entry) for entry in delta_log.commit_summaries(versions)]


def history(
    spark: SparkSession, path: str | os.PathLike[str] | TableLocation, *, limit: int | None = None
) -> DataFrame:
    """Return the Delta commits of the table at ``path`` as a DataFrame shaped like ``DESCRIBE HISTORY``.

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
        DeltaLogError: a JSON commit in range is corrupt.
    """
    return spark.createDataFrame(_arrow_table(history_rows(path, limit=limit)))


def _arrow_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    """``rows`` as an Arrow table of :data:`HISTORY_SCHEMA` (Spark takes it without converting row by row)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    spark_schema = _parse_datatype_string(HISTORY_SCHEMA)
    assert isinstance(spark_schema, StructType)
    schema = to_arrow_schema(spark_schema, timezone="UTC")
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


__all__ = ["HISTORY_SCHEMA", "history", "history_rows"]
