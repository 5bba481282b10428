"""Batch reads of the change data feed through Spark's own Parquet scan.

:func:`sparkonce.delta.read.changes.plan_change_read` plans the read on the driver as the Python data source's
does (range, each commit's change files, Delta's ``CDCReader`` rules). Here Spark then reads those files itself: one
fixed file set (:class:`ChangeFileIndex`, the files of every commit of the range, each listed once) scanned with the
table's latest schema plus the change data files' own ``_change_type`` column (null in data files), every row tagged
with its file (``_metadata.file_path``) and position (``_metadata.row_index``). A small broadcast table of *change
entries*, one per (commit, file), gives each row its commit's ``_commit_version``, ``_commit_timestamp`` and, for a
data file read whole, its ``insert``/``delete``; a file that two commits name (added in one, removed in a later one)
joins both of its entries. Deletion vectors apply per entry, by (entry, row index), with the indexes expanded on
executors (only they cross into Python, never the table's rows):

* a data file with a deletion vector: the rows it deletes are dropped (an anti-join);
* a file re-added with another deletion vector in one commit: only the rows whose state changed are kept (a semi
  join with the rows one vector deletes and the other does not).

Column pruning, the vectorized reader and row-group filter pushdown come with the scan; data skipping applies to
filters on the table's columns. What stays on the Python data source (:func:`native_change_frame` returns None):
what the native batch read leaves there (sessions without py4j, stores Spark cannot read here,
``spark.sparkonce.nativeReads=false``), and a ``remove`` without its file size (optional in Delta's log; Spark's
scan needs each file's length).

Runs on the driver; executors run Spark's Parquet reader.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparkonce.delta.read.changes import (
    ChangeFeedOptions,
    ChangeFile,
    change_feed_schema,
    plan_change_read,
)
from sparkonce.delta.read.native import (
    FILE_URI_COLUMN,
    FileSetIndex,
    expanded_rows,
    latest_snapshot,
    reads_natively,
)
from sparkonce.delta.table.deletion_vectors import DeletionVector
from sparkonce.delta.table.schema import spark_schema
from sparkonce.delta.write.cdf import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
from sparkonce.errors import SparkonceError, analysis_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

_ENTRY = "_sparkonce_change_entry"
_ROW = "_sparkonce_row_index"
_KIND = "_sparkonce_change_kind"
_VERSION = "_sparkonce_change_version"
_MILLIS = "_sparkonce_change_millis"
_SELECTIVE = "_sparkonce_change_selective"
_SELECTED = "_sparkonce_change_selected"


class ChangeFileIndex(FileSetIndex):
    """The file set of a change data feed read: its data files and change data files, with ``_change_type`` read
    from the files that have it. Made on the driver."""

    extra_fields = ({"name": CHANGE_TYPE_COLUMN, "type": "string", "nullable": True, "metadata": {}},)


def native_change_frame(spark: SparkSession, options: Mapping[str, str]) -> DataFrame | None:
    """The change data feed read of ``options`` through Spark's Parquet scan, or None when the native path cannot
    read it (see the module's documentation); the caller then reads through the Python data source. Runs on the
    driver.

    Raises:
        SqlError: also PySpark's ``AnalysisException``: the range is wrong or not recorded, the table needs a
            reader feature sparkonce cannot honour, a change file of the range is gone (each with Delta's error
            class, as the Python data source's planning raises them).
    """
    try:
        feed = ChangeFeedOptions.parse(options)
        if not reads_natively(spark, feed.location):
            return None
        plan, scan = plan_change_read(feed)
    except SparkonceError as err:
        raise _as_analysis_error(err) from err
    schema = change_feed_schema(spark_schema(scan.output))
    files = plan.files
    if not files:
        empty: DataFrame = spark.createDataFrame([], schema)
        return empty
    entries: dict[str, Mapping[str, Any]] = {}
    for change in files:
        action = change.data_file.action
        if action is None or action.get("size") is None:
            log.info("change data feed of %s: a file without its size in the log; read by the Python source", feed.path)
            return None
        entries.setdefault(str(action["path"]), action)
    snapshot = latest_snapshot(feed.location)
    label = f"change data feed, table_version {plan.start} to {plan.end}"
    index = ChangeFileIndex(spark, feed.location, snapshot, entries, label)
    frame = _change_rows(spark, index, files, feed.location)
    ordered = frame.select(*[f"`{name}`" for name in schema.names])
    log.info("%s of %s: %d file(s) read by Spark's Parquet scan", label, feed.path, len(entries))
    return ordered


def _as_analysis_error(err: SparkonceError) -> SparkonceError:
    """``err`` as PySpark's ``AnalysisException`` too, as the Python data source's planning errors reach the user
    (and delta-spark raises ``DeltaAnalysisException``), when its message names Delta's error class."""
    found = _ERROR_CLASS.search(str(err))
    return err if found is None else analysis_error(found.group(1), str(err))


_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+)\]")


def _change_rows(
    spark: SparkSession, index: ChangeFileIndex, files: Sequence[ChangeFile], location: TableLocation
) -> DataFrame:
    """Every change row of ``files``: the table's columns, ``_change_type``, ``_commit_version`` and
    ``_commit_timestamp``."""
    from pyspark.sql import functions as F

    frame = index.frame()
    table_columns = [c for c in frame.columns if c != CHANGE_TYPE_COLUMN]
    tagged = frame.select(
        *[F.col(f"`{c}`") for c in frame.columns],
        F.col("_metadata.file_path").alias(FILE_URI_COLUMN),
        F.col("_metadata.row_index").alias(_ROW),
    )
    uris = index.file_uris()
    rows = []
    dropped: list[tuple[int, DeletionVector, DeletionVector | None]] = []
    selected: list[tuple[int, DeletionVector, DeletionVector | None]] = []
    for entry, change in enumerate(files):
        data_file = change.data_file
        assert data_file.action is not None  # checked by the caller
        rows.append(
            (
                uris[str(data_file.action["path"])],
                entry,
                change.kind,
                change.table_version,
                change.timestamp_ms,
                data_file.selected_rows is not None,
            )
        )
        if data_file.selected_rows is not None:
            selected.append((entry, *data_file.selected_rows))
        elif data_file.deletion_vector is not None:
            dropped.append((entry, data_file.deletion_vector, None))
    entries = spark.createDataFrame(
        rows,
        f"`{FILE_URI_COLUMN}` string, `{_ENTRY}` long, `{_KIND}` string, `{_VERSION}` long, `{_MILLIS}` long, "
        f"`{_SELECTIVE}` boolean",
    )
    joined = tagged.join(F.broadcast(entries), FILE_URI_COLUMN)
    if dropped:
        joined = joined.join(_entry_rows(spark, dropped), [_ENTRY, _ROW], "left_anti")
    if selected:
        marked = _entry_rows(spark, selected).withColumn(_SELECTED, F.lit(True))
        joined = joined.join(marked, [_ENTRY, _ROW], "left").where(~F.col(_SELECTIVE) | F.col(_SELECTED).isNotNull())
    change_type = F.when(F.col(_KIND) == "cdc", F.col(CHANGE_TYPE_COLUMN)).otherwise(F.col(_KIND))
    result: DataFrame = joined.select(
        *[F.col(f"`{c}`") for c in table_columns],
        change_type.alias(CHANGE_TYPE_COLUMN),
        F.col(_VERSION).alias(COMMIT_VERSION_COLUMN),
        F.timestamp_millis(F.col(_MILLIS)).alias(COMMIT_TIMESTAMP_COLUMN),
    )
    return result


def _entry_rows(spark: SparkSession, sets: Sequence[tuple[int, DeletionVector, DeletionVector | None]]) -> DataFrame:
    """(entry, row index) of the rows each set's first deletion vector deletes and its second does not."""
    return expanded_rows(spark, sets, key_column=_ENTRY, key_type="long", row_column=_ROW)


__all__ = ["ChangeFileIndex", "native_change_frame"]
