"""OPTIMIZE (compaction): bin-pack a Delta table's small files into larger ones, in one Delta commit.

Runs on the driver; reading and writing data runs on executors. As in Delta:

1. the driver groups the active files by partition (optionally only the partitions a ``where`` predicate on
   partition columns selects) and packs the files smaller than ``target_file_size`` into bins of at most that
   many bytes (smallest first); bins of a single file are left alone;
2. executors rewrite each bin into one new file (one Spark task per bin); ``ZORDER BY`` (and clustering) puts a
   partition's rows along a Z-order curve and writes them into files of about ``target_file_size`` bytes, each a
   narrow range of the Z-order columns for data skipping;
3. the driver makes ONE Delta commit that removes the bins' files and adds the new ones, every action with
   ``dataChange=false``: the rows did not change, so streaming readers of the table skip the commit.

It runs alongside writers: the commit is made on top of whatever they committed meanwhile (appends never
conflict with it); only a concurrent rewrite or delete of one of the compacted files is a conflict
(:class:`~sparkonce.errors.CommitConflictError`), as in Delta.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce._types import TableVersion
from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.ops.rewrite import (
    TableFile,
    TableSnapshot,
    commit_rewrite,
    files_by_partition_predicate,
    open_snapshot,
    sql_text,
)
from sparkonce.delta.read.reader import DataFile, ScanSchema, has_other_types, read_files
from sparkonce.delta.table.clustering import PROVIDER, table_clustering
from sparkonce.delta.table.schema import arrow_schema_for_spark
from sparkonce.delta.write.files import (
    WRITTEN_FILES_DDL,
    FileWriterOptions,
    TableFileWriter,
    written_batch,
    written_files,
)
from sparkonce.errors import OptionError, SqlError, analysis_error
from sparkonce.sqltext.expression import catalyst_string, column_references, parse_expression
from sparkonce.storage import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 1024 * 1024 * 1024
"""Delta's ``spark.databricks.delta.optimize.maxFileSize`` default (1 GiB)."""
MAX_DELETED_ROWS_RATIO = 0.05
"""Delta's ``spark.databricks.delta.optimize.maxDeletedRowsRatio`` default: a file whose deletion vector deletes
more of its rows is rewritten (its deleted rows purged) even when it is large or alone in its partition."""


@dataclass(frozen=True)
class OptimizeResult:
    """What a compaction did (the numbers also go to the Delta commit's ``operationMetrics``)."""

    table_path: str
    table_version: TableVersion | None
    """The Delta commit made, or None when there was nothing to compact (no commit)."""
    files_removed: int
    files_added: int
    bytes_removed: int
    bytes_added: int
    partitions_optimized: int
    considered_files: int
    rows: int
    """Rows rewritten."""
    planned_table_version: int = -1
    """The table version whose files were planned; the commit lands later when writers committed meanwhile."""
    added_paths: tuple[str, ...] = ()
    metrics: dict[str, int] = field(default_factory=dict)


def bin_pack(
    files: Sequence[TableFile],
    partition_columns: Sequence[str],
    target_file_size: int,
    *,
    min_file_size: int | None = None,
) -> list[list[TableFile]]:
    """Bins of files to rewrite together: per partition, files below ``min_file_size`` (default
    ``target_file_size``; smallest first) packed into bins of at most ``target_file_size`` bytes; bins holding a
    single file are dropped, unless its deletion vector deletes more than :data:`MAX_DELETED_ROWS_RATIO` of its
    rows (Delta purges those, whatever their size)."""
    below = target_file_size if min_file_size is None else min_file_size
    groups: dict[tuple[Any, ...], list[TableFile]] = {}
    for f in files:
        if f.size < below or _mostly_deleted(f):
            groups.setdefault(tuple(repr(f.partition_values.get(c)) for c in partition_columns), []).append(f)
    bins: list[list[TableFile]] = []
    for key in sorted(groups):
        current: list[TableFile] = []
        size = 0
        for f in sorted(groups[key], key=lambda f: (f.size, f.path)):
            if current and size + f.size > target_file_size:
                bins.append(current)
                current, size = [], 0
            current.append(f)
            size += f.size
        if current:
            bins.append(current)
    return [b for b in bins if len(b) > 1 or _mostly_deleted(b[0])]


def zorder_bins(files: Sequence[TableFile], partition_columns: Sequence[str]) -> list[list[TableFile]]:
    """Bins for ``ZORDER BY``: every file of each partition in one bin (the partition's rows are ordered together)."""
    groups: dict[tuple[Any, ...], list[TableFile]] = {}
    for f in files:
        groups.setdefault(tuple(repr(f.partition_values.get(c)) for c in partition_columns), []).append(f)
    return [sorted(groups[key], key=lambda f: f.path) for key in sorted(groups)]


def zorder_file_rows(num_rows: int, input_bytes: int, target_file_size: int | None) -> int | None:
    """Rows per file of a Z-ordered bin of ``num_rows`` rows read from files of ``input_bytes``: files of about
    ``target_file_size`` bytes (as Delta writes Z-ordered files of ``maxFileSize``), judged on the bytes per row
    of the files read; None (one file) without a target or when the bin fits in one file."""
    if not target_file_size or num_rows <= 0 or input_bytes <= target_file_size:
        return None
    return max(1, -(-num_rows * target_file_size // input_bytes))


def zorder(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``table``'s rows along a Z-order curve of ``columns``. Runs on executors. Each column's dense rank (nulls
    last) scaled to the same number of bits, the bits interleaved into one key, the rows sorted by it. Rows close
    in every column end up close in the file, so min/max statistics skip more files and row groups."""
    import numpy as np
    import pyarrow.compute as pc

    if table.num_rows < 2 or not columns:
        return table
    bits = min(16, 63 // len(columns))
    scaled = []
    for name in columns:
        rank = pc.rank(table.column(name).combine_chunks(), sort_keys="ascending", null_placement="at_end",
                       tiebreaker="dense").to_numpy().astype(np.uint64) - np.uint64(1)  # fmt: skip
        top = int(rank.max()) or 1
        scaled.append((rank * np.uint64((1 << bits) - 1)) // np.uint64(top))
    key = np.zeros(table.num_rows, dtype=np.uint64)
    for bit in range(bits - 1, -1, -1):
        for values in scaled:
            key = (key << np.uint64(1)) | ((values >> np.uint64(bit)) & np.uint64(1))
    return table.take(pa.array(np.argsort(key, kind="stable")))


def _mostly_deleted(f: TableFile) -> bool:
    return f.deleted_rows > MAX_DELETED_ROWS_RATIO * int(f.num_records or 0)


def compact(
    spark: SparkSession,
    table: str | TableLocation,
    *,
    where: str | Column | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    zorder_by: Sequence[str] = (),
) -> OptimizeResult:
    """Compact the small files of ``table`` (``OPTIMIZE table [WHERE ...]``), or with ``zorder_by`` rewrite every
    file of each selected partition into one file whose rows follow a Z-order curve of those columns
    (``OPTIMIZE ... ZORDER BY``; a partition's rows are ordered in one task, so its size bounds the memory used).

    Args:
        spark: The session whose executors rewrite the files.
        table: The table: a path, a URI or a parsed location (with its storage options).
        where: A predicate on partition columns only: compact the matching partitions.
        target_file_size: Bytes; files below it are compacted into files of about this size.
        zorder_by: Data columns (not partition columns) to Z-order by.

    Raises:
        SqlError: ``where`` references a column that is not a partition column, or a Z-order column is a
            partition column (Delta's ``DELTA_NON_PARTITION_COLUMN_REFERENCE`` and
            ``DELTA_ZORDERING_ON_PARTITION_COLUMN``, ``AnalysisException``s).
        OptionError: the size is not positive; a Z-order column that is unknown; a predicate Spark cannot
            evaluate on the partition values.
        TableNotFoundError: not a Delta table.
        CommitConflictError: a concurrent writer removed one of the compacted files.
    """
    started = time.monotonic()
    if target_file_size <= 0:
        raise OptionError("target_file_size", target_file_size, "must be a positive number of bytes")
    snapshot = open_snapshot(table, operation="OPTIMIZE")
    table_uri = snapshot.table_uri
    files = list(snapshot.files)
    predicate = _partition_predicate(where, snapshot.partition_columns) if isinstance(where, str) else None
    if where is not None:
        chosen = files_by_partition_predicate(spark, snapshot, where)
        if chosen is None:
            raise OptionError(
                "where",
                sql_text(where),
                f"must reference partition columns only (the table's are {list(snapshot.partition_columns)})",
            )
        files = chosen
    zorder_by = tuple(zorder_by)
    clustered_by = table_clustering(snapshot.location, snapshot.table_version)
    if clustered_by is not None:  # a clustered table: OPTIMIZE clusters by its clustering columns
        if zorder_by:
            raise SqlError(
                "[DELTA_CLUSTERING_WITH_ZORDER_BY] OPTIMIZE command for Delta table with clustering cannot specify "
                f"ZORDER BY. Please remove ZORDER BY ({', '.join(zorder_by)})."
            )
        zorder_by = clustered_by
    columns = [f.name for f in snapshot.spark_schema().fields]
    for name in zorder_by:
        if name in snapshot.partition_columns:
            raise analysis_error(
                "DELTA_ZORDERING_ON_PARTITION_COLUMN",
                f"{name} is a partition column. Z-Ordering can only be performed on data columns ({table_uri})",
            )
        if name not in columns:
            raise OptionError("zOrderBy", name, f"is not a column of {table_uri} ({columns})")
    bins = (
        zorder_bins(files, snapshot.partition_columns)
        if zorder_by
        else bin_pack(files, snapshot.partition_columns, target_file_size)
    )
    removed = [f for b in bins for f in b]
    if not bins:
        log.info("optimize %s at table_version %s: nothing to compact", table_uri, snapshot.table_version)
        return OptimizeResult(table_uri, None, 0, 0, 0, 0, 0, len(files), 0, snapshot.table_version)
    written = _rewrite_bins(spark, snapshot, bins, zorder_by=zorder_by, target_file_size=target_file_size)
    if clustered_by:
        written = [dataclasses.replace(f, clustering_provider=PROVIDER) for f in written]
    params = {
        "predicate": json.dumps([] if where is None else [predicate or sql_text(where)]),
        "zOrderBy": [] if clustered_by is not None else list(zorder_by),  # compact JSON, as Delta writes it
        "clusterBy": json.dumps(list(clustered_by or ()), separators=(",", ":")),
        "auto": False,
        "targetFileSize": target_file_size,
    }
    return commit_compaction(snapshot, files, removed, written, params, started=started)


def _partition_predicate(where: str, partition_columns: Sequence[str]) -> str | None:
    """Check ``OPTIMIZE ... WHERE`` as Delta does before reading anything (``verifyPartitionPredicates``): only
    partition columns may be referenced. Returns the predicate as Delta records it in ``operationParameters``
    (:func:`sparkonce.sqltext.expression.catalyst_string`); None when sparkonce's expression parser does not read
    it (Spark evaluates it all the same, and refuses other columns then).

    Raises:
        SqlError: a column that is not a partition column (Delta's ``DELTA_NON_PARTITION_COLUMN_REFERENCE``, an
            ``AnalysisException``).
    """
    try:
        expr = parse_expression(where)
    except SqlError:
        return None
    partitions = {c.lower() for c in partition_columns}
    for name in column_references(expr):
        if name.lower() not in partitions:
            raise analysis_error(
                "DELTA_NON_PARTITION_COLUMN_REFERENCE",
                f"Predicate references non-partition column '{name}'. Only the partition columns may be referenced: "
                f"[{', '.join(partition_columns)}]",
            )
    return catalyst_string(expr)


def commit_compaction(
    snapshot: TableSnapshot,
    considered: Sequence[TableFile],
    removed: Sequence[TableFile],
    written: Sequence[WrittenFile],
    params: dict[str, Any],
    *,
    started: float,
    operation: str = "OPTIMIZE",
    metric_names: Sequence[str] | None = None,
) -> OptimizeResult:
    """The OPTIMIZE commit of a compaction planned on ``snapshot``: ``removed`` replaced by ``written``, every
    action ``dataChange=false``, Delta's ``operationMetrics``; conflicts checked by Delta's rules (only a concurrent
    removal of a compacted file conflicts). ``operation``, ``metric_names``: another operation's name and metrics
    (``REORG``). Runs on the driver.

    Raises:
        CommitConflictError: a concurrent writer removed or changed one of the compacted files.
    """
    table_uri = snapshot.table_uri
    sizes = sorted(f.size for f in written)
    removed_sizes = sorted(f.size for f in removed)
    partitions = len({tuple(repr(f.partition_values.get(c)) for c in snapshot.partition_columns) for f in removed})
    metrics = {
        "numRemovedFiles": len(removed),
        "numRemovedBytes": sum(removed_sizes),
        "numAddedFiles": len(written),
        "numAddedBytes": sum(sizes),
        "minFileSize": sizes[0] if sizes else 0,
        "p25FileSize": _percentile(sizes, 0.25),
        "p50FileSize": _percentile(sizes, 0.5),
        "p75FileSize": _percentile(sizes, 0.75),
        "maxFileSize": sizes[-1] if sizes else 0,
        "numDeletionVectorsRemoved": sum(1 for f in removed if f.deletion_vector is not None),
        "partitionsOptimized": partitions,
        "numBatches": 1,
        "totalConsideredFiles": len(considered),
        "totalFilesSkipped": len(considered) - len(removed),
        "executionTimeMs": 0,
    }
    metrics["executionTimeMs"] = int((time.monotonic() - started) * 1000)
    if metric_names is not None:
        metrics = {name: metrics[name] for name in metric_names}
    result = commit_rewrite(
        snapshot.location,
        written,
        removed,
        data_schema=arrow_schema_for_spark(snapshot.spark_schema()),
        operation=operation,
        parameters=params,
        metrics=metrics,
        data_change=False,
        read=snapshot.read_set(removed, whole_table=False, data_change=False),
    )
    log.info("%s %s: table_version %s, %s", operation.lower(), table_uri, result.table_version, metrics)
    return OptimizeResult(
        table_path=table_uri,
        table_version=result.table_version,
        files_removed=len(removed),
        files_added=len(written),
        bytes_removed=sum(removed_sizes),
        bytes_added=sum(sizes),
        partitions_optimized=partitions,
        considered_files=len(considered),
        rows=sum(f.num_records for f in written),
        planned_table_version=snapshot.table_version,
        added_paths=tuple(f.path for f in written),
        metrics=metrics,
    )


REORG_METRICS = (
    "numRemovedFiles",
    "numRemovedBytes",
    "p25FileSize",
    "numDeletionVectorsRemoved",
    "minFileSize",
    "p75FileSize",
    "p50FileSize",
    "numAddedBytes",
    "numAddedFiles",
    "maxFileSize",
)
"""The ``operationMetrics`` of Delta's ``REORG`` commit."""


def rewrite_type_widened_files(spark: SparkSession, table: str | TableLocation) -> OptimizeResult:
    """Delta's ``REORG`` of type widening (``DeltaRewriteTypeWideningOperation``, run by ``DROP FEATURE
    typeWidening``): every file holding a column or field of another Parquet type than the table's (written before
    a type change; footers read on the executors) is read with the table's types and written again, the files of a
    partition packed into files of up to :data:`DEFAULT_TARGET_FILE_SIZE`, in one ``REORG`` commit
    (``dataChange=false``, Delta's parameters and metrics). No commit when no file needs it.

    Raises:
        TableNotFoundError: not a Delta table.
        CommitConflictError: a concurrent writer removed one of the rewritten files.
    """
    started = time.monotonic()
    snapshot = open_snapshot(table, operation="REORG")
    files = list(snapshot.files)
    stale = _files_with_other_types(spark, snapshot, files)
    if not stale:
        log.info("reorg %s at table_version %s: no file of another type", snapshot.table_uri, snapshot.table_version)
        return OptimizeResult(snapshot.table_uri, None, 0, 0, 0, 0, 0, len(files), 0, snapshot.table_version)
    bins = bin_pack(stale, snapshot.partition_columns, DEFAULT_TARGET_FILE_SIZE, min_file_size=2**62)
    packed = {f.path for b in bins for f in b}
    bins += [[f] for f in stale if f.path not in packed]  # a partition's only file is rewritten too
    written = _rewrite_bins(spark, snapshot, bins)
    params = {"predicate": "[]", "applyPurge": True}
    return commit_compaction(
        snapshot, files, stale, written, params, started=started, operation="REORG", metric_names=REORG_METRICS
    )


def _files_with_other_types(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[TableFile]
) -> list[TableFile]:
    """The files whose footers hold another type than the table's (:func:`sparkonce.delta.read.reader.has_other_types`),
    read by Spark tasks."""
    if not files:
        return []
    plan = [f.data_file(snapshot.location) for f in files]
    scan, location = snapshot.scan, snapshot.location

    def check(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for listing in batches:
            stale = [i for i in listing.column(0).to_pylist() if has_other_types(plan[i], scan, location)]
            yield pa.RecordBatch.from_arrays([pa.array(stale, pa.int64())], names=["index"])

    tasks = max(1, min(len(files), spark.sparkContext.defaultParallelism))
    rows = spark.range(0, len(files), 1, tasks).mapInArrow(check, "index long").collect()
    return [files[int(row["index"])] for row in rows]


def optimize_table(
    table: str | TableLocation, *, where: str | None = None, target_file_size: int = DEFAULT_TARGET_FILE_SIZE
) -> OptimizeResult:
    """:func:`compact` in the active Spark session, or in a local one started for it and stopped after
    (``sparkonce optimize``)."""
    from pyspark.sql import SparkSession

    from sparkonce.spark import local_session

    active = SparkSession.getActiveSession()
    spark = active or local_session(app_name="sparkonce-optimize")
    try:
        return compact(spark, table, where=where, target_file_size=target_file_size)
    finally:
        if active is None:
            spark.stop()


def _percentile(sorted_sizes: list[int], q: float) -> int:
    if not sorted_sizes:
        return 0
    return sorted_sizes[min(len(sorted_sizes) - 1, int(q * len(sorted_sizes)))]


def _rewrite_bins(
    spark: SparkSession,
    snapshot: TableSnapshot,
    bins: list[list[TableFile]],
    *,
    zorder_by: Sequence[str] = (),
    target_file_size: int | None = None,
) -> list[WrittenFile]:
    """Executors: each bin (one task each) of ``snapshot``'s files read and written into one new file (with the
    table's partitioning, column mapping and statistics columns); with ``zorder_by``, its rows Z-ordered and written
    into files of about ``target_file_size`` bytes along the curve (:func:`zorder_file_rows`), so that each file
    holds a small range of the Z-order columns and data skipping drops the others."""
    location, scan = snapshot.location, snapshot.scan
    plan = [[f.data_file(location) for f in b] for b in bins]
    options = FileWriterOptions(
        location=location,
        partition_by=tuple(snapshot.partition_columns),
        file_prefix="part-optimized",
        column_mapping=snapshot.column_mapping,
        stats_columns=snapshot.stats_columns(),
    )

    def rewrite(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _bin_task(batches, plan, scan, options, tuple(zorder_by), target_file_size)

    rows = spark.range(0, len(bins), 1, len(bins)).mapInArrow(rewrite, WRITTEN_FILES_DDL).collect()
    return written_files(rows)


def rewrite_bins_in_process(snapshot: TableSnapshot, bins: list[list[TableFile]]) -> list[WrittenFile]:
    """Each bin read and written into one new file in this process, one bin after the other (what a Spark task
    of :func:`_rewrite_bins` does). For the sink's auto compaction: a Python data source's commit runs in a
    process of the driver that has no Spark session to start tasks from."""
    plan = [[f.data_file(snapshot.location) for f in b] for b in bins]
    options = FileWriterOptions(
        location=snapshot.location,
        partition_by=tuple(snapshot.partition_columns),
        file_prefix="part-optimized",
        column_mapping=snapshot.column_mapping,
        stats_columns=snapshot.stats_columns(),
    )
    indexes = pa.RecordBatch.from_arrays([pa.array(range(len(bins)), pa.int64())], names=["id"])
    written: list[WrittenFile] = []
    for batch in _bin_task(iter([indexes]), plan, snapshot.scan, options):
        written += written_files([SimpleNamespace(**row) for row in batch.to_pylist()])
    return written


def _bin_task(
    batches: Iterator[pa.RecordBatch],
    plan: list[list[DataFile]],
    scan: ScanSchema,
    options: FileWriterOptions,
    zorder_by: tuple[str, ...] = (),
    target_file_size: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Executor side: read this task's bins and write each into one file (Z-ordered bins into files of about
    ``target_file_size`` bytes); yields the files' descriptions."""
    for listing in batches:
        for index in listing.column(0).to_pylist():
            rows: Iterator[pa.RecordBatch] = read_files(plan[index], scan, options.location)
            task_options = options
            if zorder_by:
                table = zorder(pa.Table.from_batches(list(rows), schema=scan.output), zorder_by)
                rows = iter(table.to_batches(max_chunksize=65536))
                per_file = zorder_file_rows(table.num_rows, sum(f.size for f in plan[index]), target_file_size)
                task_options = dataclasses.replace(options, max_records_per_file=per_file)
            with TableFileWriter(task_options, task_id=int(index)) as writer:
                writer.write_batches(rows)
                files = writer.close()
            if files:
                yield written_batch(files)


__all__ = [
    "DEFAULT_TARGET_FILE_SIZE",
    "REORG_METRICS",
    "OptimizeResult",
    "bin_pack",
    "compact",
    "optimize_table",
    "rewrite_type_widened_files",
    "zorder",
    "zorder_bins",
    "zorder_file_rows",
]
