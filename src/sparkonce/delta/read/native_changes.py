"""The change data feed through Spark's own Parquet scan: batch reads and the stream.

:func:`sparkonce.delta.read.changes.plan_change_read` plans a batch read on the driver as the Python data source's
does (range, each commit's change files, Delta's ``CDCReader`` rules); the stream plans each micro-batch as the
Python change feed stream does (:class:`sparkonce.delta.read.change_stream.ChangeFeedStreamReader`). Here Spark then
reads those files itself: one fixed file set (:class:`ChangeFileIndex`) scanned with the table's latest schema plus
the change data files' own ``_change_type`` column (null in data files). Each file is listed once per *change entry*
(one per commit and file: a file added in one commit of the range and removed in a later one is read twice), and the
scan fills the entry's constants (its number, ``_commit_version``, ``_commit_timestamp`` and, for a data file read
whole, its ``insert``/``delete``) as it fills partition values: no join, and a micro-batch's plan has no leaf but
the scan unless deletion vectors apply. Deletion vectors apply per entry, by (entry, ``_metadata.row_index``), with
the indexes expanded on executors (only they cross into Python, never the table's rows):

* a data file with a deletion vector: the rows it deletes are dropped (an anti-join);
* a file re-added with another deletion vector in one commit: only the rows whose state changed are kept (a semi
  join with the rows one vector deletes and the other does not).

Column pruning, the vectorized reader and row-group filter pushdown come with the scan; data skipping applies to
filters on the table's columns. What stays on the Python data source (the functions return None): what the native
batch read and stream leave there (sessions without py4j, stores Spark cannot read here,
``spark.sparkonce.nativeReads=false``; for streams also no pinned threads).

Runs on the driver; executors run Spark's Parquet reader.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparkonce.delta.read.change_stream import ChangeFeedStreamReader
from sparkonce.delta.read.changes import (
    ChangeFeedOptions,
    ChangeFile,
    change_feed_schema,
    plan_change_read,
)
from sparkonce.delta.read.native import (
    FileSetIndex,
    expanded_rows,
    latest_snapshot,
    reads_natively,
)
from sparkonce.delta.read.native_stream import NativeDeltaSource, prepare_stream
from sparkonce.delta.read.stream import DeltaStreamReader
from sparkonce.delta.table.deletion_vectors import DeletionVector
from sparkonce.delta.table.schema import spark_schema
from sparkonce.delta.write.cdf import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN
from sparkonce.errors import SparkonceError, analysis_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from sparkonce.delta.log.delta_log import Snapshot
    from sparkonce.storage import TableLocation

log = logging.getLogger(__name__)

_ENTRY = "_sparkonce_change_entry"
_ROW = "_sparkonce_row_index"
_KIND = "_sparkonce_change_kind"
_VERSION = "_sparkonce_change_version"
_MILLIS = "_sparkonce_change_millis"
_SELECTIVE = "_sparkonce_change_selective"
_SELECTED = "_sparkonce_change_selected"


def _constant(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


class ChangeFileIndex(FileSetIndex):
    """The file set of a change data feed read: its data files and change data files, with ``_change_type`` read
    from the files that have it, each file listed once per change entry it belongs to (a file added in one commit
    of the range and removed in a later one is read twice), the entry's constants filled by Spark's scan as it
    fills partition values. Made on the driver.

    Args:
        spark: The (classic) session.
        location: The table.
        snapshot: The snapshot whose schema the files are read with.
        files: The range's change files, in order: entry ``i`` is ``files[i]``.
        label: How the set shows in logs and ``explain``.
    """

    extra_fields = (_constant(CHANGE_TYPE_COLUMN, "string"),)
    extra_partition_fields = (
        _constant(_ENTRY, "long"),
        _constant(_KIND, "string"),
        _constant(_VERSION, "long"),
        _constant(_MILLIS, "long"),
        _constant(_SELECTIVE, "boolean"),
    )

    def __init__(
        self,
        spark: SparkSession,
        location: TableLocation,
        snapshot: Snapshot,
        files: Sequence[ChangeFile],
        label: str,
    ) -> None:
        actions: dict[str, Mapping[str, Any]] = {}
        self._entries: dict[str, list[tuple[str, ...]]] = {}
        for entry, change in enumerate(files):
            action = change.data_file.action
            if action is None:
                raise ValueError(f"{change.data_file.path}: a change file without its action")
            path = str(action["path"])
            actions.setdefault(path, action)
            constants = (
                str(entry),
                change.kind,
                str(change.table_version),
                str(change.timestamp_ms),
                str(change.data_file.selected_rows is not None).lower(),
            )
            self._entries.setdefault(path, []).append(constants)
        super().__init__(spark, location, snapshot, actions, label)

    def _partition_keys(self, path: str, add: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        (values,) = super()._partition_keys(path, add)
        return [(*values, *constants) for constants in self._entries[path]]


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
    snapshot = latest_snapshot(feed.location)
    label = f"change data feed, table_version {plan.start} to {plan.end}"
    index = ChangeFileIndex(spark, feed.location, snapshot, files, label)
    ordered = _change_rows(spark, index, files).select(*[f"`{name}`" for name in schema.names])
    log.info("%s of %s: %d file(s) read by Spark's Parquet scan", label, feed.path, len(index.file_uris()))
    return ordered


def native_change_stream_frame(
    spark: SparkSession, options: Mapping[str, str], *, format_name: str
) -> DataFrame | None:
    """The change data feed stream of ``readStream.format(format_name).options(options).load()`` read through
    Spark's Parquet scan (:class:`NativeChangeSource`), or None when the Python data source reads it (as for the
    plain stream: :func:`sparkonce.delta.read.native_stream.prepare_stream`). Runs on the driver.

    Raises:
        OptionError: an option is malformed, or is for batch reads only.
        UnsupportedFeatureError: the table needs a reader feature sparkonce cannot honour.
        TableNotFoundError: there is no Delta table at the path.
    """
    prepared = prepare_stream(spark, options)
    if prepared is None:
        return None
    parsed, snapshot = prepared
    return NativeChangeSource(spark, parsed, snapshot, format_name=format_name, given=options).frame()


class NativeChangeSource(NativeDeltaSource):
    """The change data feed's streaming source, as a py4j proxy of Spark's ``Source`` (driver only). Planning is the
    Python change feed stream's (:class:`sparkonce.delta.read.change_stream.ChangeFeedStreamReader`: offsets,
    admission of whole commits, the initial snapshot as inserts, the feed's checks), so a checkpoint moves between
    the two paths; each micro-batch's change files are read by Spark's Parquet scan as the batch read reads them."""

    def _stream_schema(self, table: DataFrame) -> StructType:
        return change_feed_schema(table.schema)

    def _new_reader(self) -> DeltaStreamReader:
        return ChangeFeedStreamReader(self.options, self.spark_schema)

    def _batch_frame(self, files: list[Any], label: str) -> DataFrame:
        changes: list[ChangeFile] = files
        index = ChangeFileIndex(self.spark, self.options.location, self.snapshot, changes, label)
        return _change_rows(self.spark, index, changes, stream=self).select(
            *[f"`{name}`" for name in self.spark_schema.names]
        )


def _as_analysis_error(err: SparkonceError) -> SparkonceError:
    """``err`` as PySpark's ``AnalysisException`` too, as the Python data source's planning errors reach the user
    (and delta-spark raises ``DeltaAnalysisException``), when its message names Delta's error class."""
    found = _ERROR_CLASS.search(str(err))
    return err if found is None else analysis_error(found.group(1), str(err))


_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+)\]")


def _change_rows(
    spark: SparkSession, index: ChangeFileIndex, files: Sequence[ChangeFile], *, stream: Any = None
) -> DataFrame:
    """Every change row of ``files``: the table's columns, ``_change_type``, ``_commit_version`` and
    ``_commit_timestamp`` (a streaming micro-batch's when ``stream`` is its source). Each row carries its change
    entry's constants from the scan itself; deletion vectors apply by (entry, row index)."""
    from pyspark.sql import functions as F

    frame = index.frame(stream=stream)
    constants = {str(f["name"]) for f in index.extra_partition_fields}
    table_columns = [c for c in frame.columns if c != CHANGE_TYPE_COLUMN and c not in constants]
    dropped: list[tuple[int, DeletionVector, DeletionVector | None]] = []
    selected: list[tuple[int, DeletionVector, DeletionVector | None]] = []
    for entry, change in enumerate(files):
        if change.data_file.selected_rows is not None:
            selected.append((entry, *change.data_file.selected_rows))
        elif change.data_file.deletion_vector is not None:
            dropped.append((entry, change.data_file.deletion_vector, None))
    rows = frame
    if dropped or selected:
        rows = frame.select(*[F.col(f"`{c}`") for c in frame.columns], F.col("_metadata.row_index").alias(_ROW))
    if dropped:
        rows = rows.join(_entry_rows(spark, dropped), [_ENTRY, _ROW], "left_anti")
    if selected:
        marked = _entry_rows(spark, selected).withColumn(_SELECTED, F.lit(True))
        rows = rows.join(marked, [_ENTRY, _ROW], "left").where(~F.col(_SELECTIVE) | F.col(_SELECTED).isNotNull())
    change_type = F.when(F.col(_KIND) == "cdc", F.col(CHANGE_TYPE_COLUMN)).otherwise(F.col(_KIND))
    result: DataFrame = rows.select(
        *[F.col(f"`{c}`") for c in table_columns],
        change_type.alias(CHANGE_TYPE_COLUMN),
        F.col(_VERSION).alias(COMMIT_VERSION_COLUMN),
        F.timestamp_millis(F.col(_MILLIS)).alias(COMMIT_TIMESTAMP_COLUMN),
    )
    return result


def _entry_rows(spark: SparkSession, sets: Sequence[tuple[int, DeletionVector, DeletionVector | None]]) -> DataFrame:
    """(entry, row index) of the rows each set's first deletion vector deletes and its second does not."""
    return expanded_rows(spark, sets, key_column=_ENTRY, key_type="long", row_column=_ROW)


__all__ = ["ChangeFileIndex", "NativeChangeSource", "native_change_frame", "native_change_stream_frame"]
