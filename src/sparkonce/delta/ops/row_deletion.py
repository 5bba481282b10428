"""Marking rows of a Delta table deleted with deletion vectors: how DELETE, UPDATE and MERGE change a table whose
protocol has ``deletionVectors`` and whose ``delta.enableDeletionVectors`` is true, as delta-spark does
(``DMLWithDeletionVectorsHelper``, ``DeletionVectorBitmapGenerator``, ``DeletionVectorWriter``).

Instead of rewriting each touched file with its unchanged rows copied, the operation:

1. executors: take the matched rows' file and row index (Spark's ``_metadata.row_index`` of the native scan, or the
   Python reader's same count), grouped by file; each task unions each of its files' new row indexes with the
   file's current deletion vector, serializes the set
   (:func:`sparkonce.delta.table.deletion_vectors.serialize_bitmap_array`) and packs all its bitmaps into ONE new
   ``deletion_vector_<uuid>.bin`` file
   (:class:`sparkonce.delta.table.deletion_vectors.DeletionVectorFile`); only the descriptors go to the driver;
2. driver: per touched file, a ``remove`` carrying the deletion vector it was read with and an ``add`` of the same
   path with the new one (statistics kept, ``tightBounds`` false, ``numRecords`` unchanged); a file whose every row
   is now deleted is only removed (no deletion vector is written for it).

The caller writes what the operation adds (an UPDATE's or MERGE's new rows) and makes the one Delta commit
(:func:`sparkonce.delta.ops.rewrite.commit_rewrite` with ``marked``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sparkonce.delta.log.actions import AddFile, DeletionVectorDescriptor
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.paths import require_fs_path
from sparkonce.delta.ops.rewrite import FILE_COLUMN, ROW_COLUMN, MarkedRows, TableFile, TableSnapshot
from sparkonce.delta.table.deletion_vectors import (
    DeletionVector,
    DeletionVectorFile,
    deleted_rows,
    random_prefix_length,
)
from sparkonce.errors import DeltaLogError
from sparkonce.storage import TableLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

PERSISTENT_CONF = "spark.databricks.delta.{operation}.deletionVectors.persistent"
"""Delta's session settings (``delete``, ``update``, ``merge``; default true): false makes that operation rewrite
files on a table with deletion vectors enabled, as without them."""

_RESULT_DDL = "path string, descriptor string, rows long, num_records long, dv_file string"


def writes_deletion_vectors(spark: SparkSession, snapshot: TableSnapshot, operation: str) -> bool:
    """True when ``operation`` (``DELETE``, ``UPDATE``, ``MERGE``) marks rows deleted with deletion vectors on
    ``snapshot``'s table: the table allows them and the session's :data:`PERSISTENT_CONF` does not turn them off."""
    if not snapshot.deletion_vectors_writable:
        return False
    setting = spark.conf.get(PERSISTENT_CONF.format(operation=operation.lower()), "true")
    return str(setting).strip().lower() != "false"


def mark_deleted(
    spark: SparkSession, snapshot: TableSnapshot, matched: DataFrame, files: Sequence[TableFile]
) -> MarkedRows:
    """Mark the rows of ``matched`` (its :data:`FILE_COLUMN` and :data:`ROW_COLUMN`, rows of ``files``; a row
    listed twice counts once) deleted with new deletion vectors that executors write. Runs on the driver; only
    file paths, descriptors and counts come back.

    Raises:
        DeltaLogError: a file's deletion vector or Parquet footer cannot be read.
    """
    by_path = {f.path: f for f in files}
    plan = {f.path: (f.deletion_vector_rows, f.num_records) for f in files}
    location = snapshot.location
    prefix_length = random_prefix_length(snapshot.configuration)
    tasks = max(1, min(len(files), spark.sparkContext.defaultParallelism))

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # executor
        yield from _write_task(batches, plan, location, prefix_length)

    grouped = matched.select(FILE_COLUMN, ROW_COLUMN).repartition(tasks, FILE_COLUMN)
    results = grouped.mapInArrow(write, _RESULT_DDL).collect()
    if not results:
        return MarkedRows()
    adds = DeltaLog(location).snapshot(snapshot.table_version).files
    removed: list[TableFile] = []
    readded: list[AddFile] = []
    added = updated = dropped = rows = 0
    for path, descriptor, new_rows, num_records, _ in sorted(results):
        table_file = by_path[path]
        removed.append(table_file)
        rows += int(new_rows)
        had_one = table_file.deletion_vector is not None
        if descriptor is None:
            dropped += had_one
            continue
        readded.append(_readded(adds[path], json.loads(descriptor), int(num_records), table_file.deleted_rows))
        updated += had_one
        added += not had_one
    dv_files = tuple(sorted({r[4] for r in results if r[1] is not None}))
    log.info(
        "%s: %d row(s) of %d file(s) marked deleted in %d deletion vector file(s); %d file(s) lose every row",
        location,
        rows,
        len(removed),
        len(dv_files),
        len(removed) - len(readded),
    )
    return MarkedRows(tuple(removed), tuple(readded), dv_files, rows, added, updated, dropped)


def _write_task(
    batches: Iterator[pa.RecordBatch],
    plan: Mapping[str, tuple[DeletionVector | None, int | None]],
    location: TableLocation,
    prefix_length: int,
) -> Iterator[pa.RecordBatch]:
    """Executor side: the new deletion vectors of this task's files (every row of a file comes to one task), in one
    new deletion vector file; one result row per file."""
    import pyarrow.compute as pc
    from pyroaring import BitMap64

    found: dict[str, BitMap64] = {}
    for batch in batches:
        paths, indexes = batch.column(0), batch.column(1)
        for path in pc.unique(paths).to_pylist():
            chosen = indexes.filter(pc.equal(paths, path)).to_numpy(zero_copy_only=False)
            found.setdefault(path, BitMap64()).update(chosen.astype(np.uint64))
    if not found:
        return
    dv_file = DeletionVectorFile(prefix_length=prefix_length)
    out: list[tuple[str, str | None, int, int]] = []
    for path, union in found.items():
        old, num_records = plan[path]
        fresh = len(union)  # the scan applied the old deletion vector: none of these rows is in it
        if old is not None:
            previous = BitMap64(deleted_rows(old))
            union |= previous
            fresh = len(union) - len(previous)
        if num_records is None:
            num_records = _footer_rows(location, path)
        if len(union) and union.max() >= num_records:
            raise DeltaLogError(f"row {union.max()} of {path} marked deleted, but it has {num_records} rows")
        if fresh == 0:
            continue
        descriptor = None if len(union) == num_records else json.dumps(dv_file.add(union))
        out.append((path, descriptor, fresh, num_records))
    if any(descriptor is not None for _, descriptor, _, _ in out):
        dv_file.store(location)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([o[0] for o in out], pa.string()),
            pa.array([o[1] for o in out], pa.string()),
            pa.array([o[2] for o in out], pa.int64()),
            pa.array([o[3] for o in out], pa.int64()),
            pa.array([dv_file.relative_path] * len(out), pa.string()),
        ],
        names=["path", "descriptor", "rows", "num_records", "dv_file"],
    )


def _footer_rows(location: TableLocation, path: str) -> int:
    """The rows of a data file whose ``add`` has no statistics, from its Parquet footer. Runs on executors."""
    import pyarrow.parquet as pq

    try:
        with location.filesystem().open_input_file(require_fs_path(location, path)) as source:
            return int(pq.ParquetFile(source).metadata.num_rows)
    except OSError as err:
        raise DeltaLogError(f"cannot read the Parquet footer of {path} in {location}: {err}") from err


def _readded(add: AddFile, descriptor: DeletionVectorDescriptor, num_records: int, old_deleted: int) -> AddFile:
    """The ``add`` action of a file kept with the new deletion vector ``descriptor``: its path, partition values,
    size, time and tags as they were, a data change, statistics with wide bounds."""
    out: AddFile = {
        "path": add["path"],
        "partitionValues": add.get("partitionValues") or {},
        "size": add["size"],
        "modificationTime": add["modificationTime"],
        "dataChange": True,
        "stats": wide_bounds_stats(add, num_records, old_deleted),
    }
    if add.get("tags"):
        out["tags"] = add["tags"]
    out["deletionVector"] = descriptor
    if add.get("baseRowId") is not None:
        out["baseRowId"] = add["baseRowId"]
    if add.get("defaultRowCommitVersion") is not None:
        out["defaultRowCommitVersion"] = add["defaultRowCommitVersion"]
    if add.get("clusteringProvider") is not None:
        out["clusteringProvider"] = add["clusteringProvider"]
    return out


def wide_bounds_stats(add: Mapping[str, Any], num_records: int, old_deleted: int) -> str:
    """An ``add`` action's statistics once rows of its file are marked deleted (Delta's
    ``updateStatsToWideBounds``): ``numRecords`` stays the file's row count, min/max stay (now bounds, no longer
    exact: ``tightBounds`` false), and a column that was null in every live row while the bounds were tight gets
    the file's row count as its null count."""
    raw = add.get("stats")
    if raw is None and isinstance(add.get("stats_parsed"), Mapping):
        raw = add["stats_parsed"]
    stats: dict[str, Any] = dict(json.loads(raw) if isinstance(raw, str) else raw or {})
    stats["numRecords"] = num_records
    tight = stats.get("tightBounds", old_deleted == 0) is True
    if tight and isinstance(stats.get("nullCount"), dict):
        stats["nullCount"] = _all_null_physical(stats["nullCount"], num_records - old_deleted, num_records)
    stats["tightBounds"] = False
    return json.dumps(stats, separators=(",", ":"))


def _all_null_physical(counts: dict[str, Any], logical: int, physical: int) -> dict[str, Any]:
    return {
        name: _all_null_physical(value, logical, physical)
        if isinstance(value, dict)
        else (physical if value == logical else value)
        for name, value in counts.items()
    }


__all__ = ["PERSISTENT_CONF", "mark_deleted", "wide_bounds_stats", "writes_deletion_vectors"]
