"""Upsert of the latest row per key into a Delta table, rewriting only the files that hold changed keys.

For one batch with ``txn(app_id, txn_version)`` (the gold stage's ``foreachBatch``):

1. driver: skip the batch when the table's ``txn_version(app_id) >= txn_version`` (a replayed batch);
2. Spark: keep the latest row per key of the batch (by ``order_by``, descending);
3. driver: collect the batch's distinct keys and pick the *candidate* files whose key min/max stats (the ``add``
   actions' stats) may hold one of them; files without stats are candidates;
4. executors: read only the candidate files, join them with the batch: a batch row *wins* when its key is new, or
   its ``order_by`` is later than the stored row's, or equal with different values. Only the files holding a
   winning key's old row are *touched*; candidates without one are left alone;
5. executors: write the touched files' surviving rows plus the winning rows into new files (range-partitioned
   by key, so file key ranges stay narrow and step 3 stays selective);
6. driver: ONE Delta commit of ``remove`` (touched files) + ``add`` (new files) + ``txn`` through
   :func:`sparkonce.delta.commit.commit_files` (check-then-commit loop), with operation metrics recorded in
   commitInfo. A batch that changes nothing still commits its ``txn`` (no file action).

So a batch applied twice (under another app id) changes nothing and rewrites nothing; the cost of a batch grows
with the files its keys touch, not with the table.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkonce._types import TableVersion
from sparkonce.delta.commit import BatchTxn, RemovedFile, commit_files, load_table, table_exists
from sparkonce.delta.files import FileWriterOptions, TableFileWriter
from sparkonce.delta.schema import arrow_schema_for_spark
from sparkonce.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

FILE_COLUMN = "_sparkonce_file"
_NO_FILES = pa.table(
    {"path": pa.array([], pa.string()), "size_bytes": pa.array([], pa.int64()), "num_records": pa.array([], pa.int64())}
)
_WRITTEN_SCHEMA = "path string, size long, modification_time long, num_records long, stats string"


@dataclass(frozen=True)
class MergeResult:
    """What one merge did (the numbers also go to the Delta commit's ``operationMetrics``)."""

    table_version: TableVersion | None
    """The Delta commit made, or None when the batch was already in the table (skipped)."""
    skipped: bool
    source_rows: int
    """Rows of the batch after keeping the latest per key (= distinct keys)."""
    table_files: int
    """Active files of the table before the merge."""
    candidate_files: int
    """Files read because their key stats may hold a batch key."""
    files_removed: int
    """Files rewritten (removed and replaced)."""
    files_added: int
    rows_updated: int
    rows_inserted: int
    rows_copied: int
    """Unchanged rows of the rewritten files, copied into the new files."""


def latest_per_key(batch: DataFrame, keys: Sequence[str], order_by: Sequence[str]) -> DataFrame:
    """The latest row of each key by ``order_by`` (descending; ``_offset`` breaks ties when present)."""
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    order = [F.col(c).desc() for c in order_by]
    if "_offset" in batch.columns and "_offset" not in order_by:
        order.append(F.col("_offset").desc())
    window = Window.partitionBy(*keys).orderBy(*order)
    return (
        batch.withColumn("_sparkonce_rank", F.row_number().over(window))
        .where("_sparkonce_rank = 1")
        .drop("_sparkonce_rank")
    )


def merge_latest(
    batch: DataFrame,
    table_uri: str,
    *,
    keys: Sequence[str],
    order_by: Sequence[str],
    txn: BatchTxn,
    merge_schema: bool = False,
    target_file_rows: int = 100_000,
    custom_metadata: Mapping[str, Any] | None = None,
) -> MergeResult:
    """Upsert the latest row per key of ``batch`` into the Delta table at ``table_uri``, once per ``txn``.

    Runs on the driver; the reads and writes of data files run on executors.

    Raises:
        SchemaMismatchError: the batch lacks a column of the table, has new ones without ``merge_schema``, or
            the table is partitioned.
        CommitConflictError: lost the commit race too often, or a concurrent writer rewrote a touched file.
    """
    import pyspark.sql.functions as F

    from sparkonce.delta.writer import commit_metadata

    root = _local_root(table_uri)
    exists = table_exists(table_uri)
    table = load_table(table_uri) if exists else None
    if table is not None:
        committed = table.transaction_version(txn.app_id)
        if committed is not None and committed >= txn.txn_version:
            log.info(
                "merge into %s: batch already in the table (txn app_id=%s txn_version=%s >= %s, table_version %s)",
                table_uri,
                txn.app_id,
                committed,
                txn.txn_version,
                table.version(),
            )
            return MergeResult(None, True, 0, 0, 0, 0, 0, 0, 0, 0)
        _check_columns(table, table_uri, batch.columns, merge_schema)

    spark = batch.sparkSession
    latest = latest_per_key(batch, keys, order_by).persist()
    try:
        batch_keys = latest.select(*keys).toArrow()
        source_rows = batch_keys.num_rows
        files = _active_files(table) if table is not None else _NO_FILES
        candidates = _candidates(files, batch_keys, keys)
        data_schema = arrow_schema_for_spark(latest.schema)
        sizes = dict(zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist()))
        records = dict(zip(files.column("path").to_pylist(), files.column("num_records").to_pylist()))

        if candidates:
            existing = _read_files(spark, root, candidates, latest.schema)
            winners = _winners(latest, existing, keys, order_by).persist()
        else:
            winners = latest.withColumn(FILE_COLUMN, F.lit(None).cast("string")).persist()
        try:
            per_file = {row[0]: int(row[1]) for row in winners.groupBy(FILE_COLUMN).count().collect()}
            inserted = per_file.pop(None, 0)
            touched = sorted(per_file)
            updated = sum(per_file.values())
            written: list[Any] = []
            copied = 0
            if touched or inserted:
                changed = winners.drop(FILE_COLUMN)
                if touched:
                    kept = (
                        existing.where(F.col(FILE_COLUMN).isin(touched))
                        .drop(FILE_COLUMN)
                        .join(changed.select(*keys), on=list(keys), how="left_anti")
                    )
                    output = kept.unionByName(changed)
                    copied = sum(int(records.get(p) or 0) for p in touched) - updated
                else:
                    output = changed
                rows = copied + updated + inserted
                n_files = max(1, math.ceil(rows / target_file_rows))
                written = _write_files(output.repartitionByRange(n_files, *keys).sortWithinPartitions(*keys), root)
        finally:
            winners.unpersist()
    finally:
        latest.unpersist()

    metrics = {
        "numSourceRows": source_rows,
        "numTargetFilesBefore": int(files.num_rows),
        "numCandidateFiles": len(candidates),
        "numTargetFilesRemoved": len(touched),
        "numTargetFilesAdded": len(written),
        "numTargetRowsUpdated": updated,
        "numTargetRowsInserted": inserted,
        "numTargetRowsCopied": copied,
    }
    params = {"keys": list(keys), "orderBy": list(order_by), "txnAppId": txn.app_id, "txnVersion": txn.txn_version}
    metadata = commit_metadata("MERGE", params, None, operationMetrics=metrics, batchId=txn.txn_version)
    metadata.update(custom_metadata or {})
    result = commit_files(
        table_uri,
        written,
        data_schema=data_schema,
        mode="append",
        txn=txn,
        merge_schema=merge_schema,
        custom_metadata=metadata,
        removes=[RemovedFile(p, int(sizes.get(p) or 0), {}) for p in touched],
    )
    log.info(
        "merge into %s batch %s (app_id %s): table_version %s, %s",
        table_uri,
        txn.txn_version,
        txn.app_id,
        result.table_version,
        json.dumps(metrics),
    )
    if result.skipped:
        return MergeResult(None, True, source_rows, int(files.num_rows), len(candidates), 0, 0, 0, 0, 0)
    return MergeResult(
        table_version=result.table_version,
        skipped=False,
        source_rows=source_rows,
        table_files=int(files.num_rows),
        candidate_files=len(candidates),
        files_removed=len(touched),
        files_added=len(written),
        rows_updated=updated,
        rows_inserted=inserted,
        rows_copied=copied,
    )


# -- driver helpers ----------------------------------------------------------------------------------------------


def _check_columns(table: Any, table_uri: str, columns: Sequence[str], merge_schema: bool) -> None:
    if table.metadata().partition_columns:
        raise SchemaMismatchError(f"{table_uri}: merge supports unpartitioned tables only")
    table_columns = [f.name for f in table.schema().fields]
    lost = [c for c in table_columns if c not in columns]
    if lost:
        raise SchemaMismatchError(f"{table_uri}: the batch lacks the table's column(s) {lost}; a merge keeps them all")
    new = [c for c in columns if c not in table_columns]
    if new and not merge_schema:
        raise SchemaMismatchError(
            f'{table_uri}: the batch has new column(s) {new} not in the table; set drift = "add" to add them'
        )


def _active_files(table: Any) -> pa.Table:
    return pa.table(table.get_add_actions(flatten=True))


def _candidates(files: pa.Table, batch_keys: pa.Table, keys: Sequence[str]) -> list[str]:
    """Files whose min/max stats of every key column may hold one of the batch's keys (no stats: candidate)."""
    if files.num_rows == 0 or batch_keys.num_rows == 0:
        return []
    tuples = sorted(zip(*(batch_keys.column(k).to_pylist() for k in keys)), key=_sort_key)
    first = [t[0] for t in tuples]
    paths = files.column("path").to_pylist()
    bounds = []
    for k in keys:
        lows = files.column(f"min.{k}").to_pylist() if f"min.{k}" in files.column_names else [None] * len(paths)
        highs = files.column(f"max.{k}").to_pylist() if f"max.{k}" in files.column_names else [None] * len(paths)
        bounds.append((lows, highs))
    chosen = []
    for i, path in enumerate(paths):
        lo, hi = bounds[0][0][i], bounds[0][1][i]
        try:
            if lo is None or hi is None:
                chosen.append(path)
                continue
            start, end = bisect.bisect_left(first, lo), bisect.bisect_right(first, hi)
            if start >= end:
                continue
            if len(keys) == 1 or any(
                all(bounds[j][0][i] is None or bounds[j][0][i] <= t[j] <= bounds[j][1][i] for j in range(1, len(keys)))
                for t in tuples[start:end]
            ):
                chosen.append(path)
        except TypeError:  # stats of a type that does not compare with the keys: read the file
            chosen.append(path)
    return chosen


def _sort_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v) for v in values)


def _local_root(table_uri: str) -> str:
    if table_uri.startswith("file://"):
        return table_uri[len("file://") :]
    if "://" in table_uri:
        raise SchemaMismatchError(f"{table_uri}: merge supports local tables only")
    return os.path.abspath(table_uri)


# -- Spark plans -------------------------------------------------------------------------------------------------


def _read_files(spark: Any, root: str, paths: list[str], schema: Any) -> DataFrame:
    """The rows of ``paths`` (read on executors) in ``schema``, with the file each row came from."""
    from pyspark.sql.types import StringType, StructField, StructType

    out_schema = StructType([*schema.fields, StructField(FILE_COLUMN, StringType())])
    arrow_schema = arrow_schema_for_spark(schema)
    slices = max(1, min(len(paths), spark.sparkContext.defaultParallelism))
    listing = spark.createDataFrame([(p,) for p in paths], "path string").repartition(slices)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _read_task(batches, root, arrow_schema)

    existing: DataFrame = listing.mapInArrow(read, out_schema)
    return existing


def _read_task(batches: Iterator[pa.RecordBatch], root: str, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Executor side: read whole data files, conform them to ``arrow_schema`` and tag each row with its file."""
    import pyarrow.parquet as pq

    for listing in batches:
        for path in listing.column(0).to_pylist():
            data = pq.read_table(os.path.join(root, path))
            columns = []
            for field in arrow_schema:
                if field.name in data.column_names:
                    columns.append(data.column(field.name).cast(field.type))
                else:
                    columns.append(pa.nulls(data.num_rows, field.type))
            columns.append(pa.array([path] * data.num_rows, pa.string()))
            names = [*arrow_schema.names, FILE_COLUMN]
            yield from pa.Table.from_arrays(columns, names=names).to_batches()


def _winners(latest: DataFrame, existing: DataFrame, keys: Sequence[str], order_by: Sequence[str]) -> DataFrame:
    """Batch rows that change the table, with the file holding the key's current row (null for a new key)."""
    import pyspark.sql.functions as F

    columns = latest.columns
    stored = existing.select(*[F.col(c).alias(f"_old_{c}") for c in columns], F.col(FILE_COLUMN))
    condition = [F.col(k) == F.col(f"_old_{k}") for k in keys]
    joined = latest.join(stored, on=condition, how="left")
    new_order = F.struct(*[F.col(c) for c in order_by])
    old_order = F.struct(*[F.col(f"_old_{c}") for c in order_by])
    same_row = F.lit(True)
    for c in columns:
        same_row = same_row & F.col(c).eqNullSafe(F.col(f"_old_{c}"))
    wins = F.col(FILE_COLUMN).isNull() | (new_order > old_order) | ((new_order == old_order) & ~same_row)
    return joined.where(wins).select(*columns, FILE_COLUMN)


def _write_files(output: DataFrame, root: str) -> list[Any]:
    """Write ``output`` into new data files under ``root`` (on executors); return them for the Delta commit."""
    from sparkonce.delta.files import WrittenFile

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _write_task(batches, root)

    rows = output.mapInArrow(write, _WRITTEN_SCHEMA).collect()
    return [WrittenFile(r.path, r.size, {}, r.modification_time, r.num_records, r.stats) for r in rows]


def _write_task(batches: Iterator[pa.RecordBatch], root: str) -> Iterator[pa.RecordBatch]:
    """Executor side: one task's rows into Parquet files; yields their descriptions (nothing visible yet)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    writer = TableFileWriter(FileWriterOptions(table_root=root), task_id=context.partitionId() if context else 0)
    try:
        for batch in batches:
            if batch.num_rows:
                writer.write(batch)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    if files:
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "path": f.path,
                    "size": f.size,
                    "modification_time": f.modification_time or int(time.time() * 1000),
                    "num_records": f.num_records,
                    "stats": f.stats,
                }
                for f in files
            ],
            schema=pa.schema(
                [
                    ("path", pa.string()),
                    ("size", pa.int64()),
                    ("modification_time", pa.int64()),
                    ("num_records", pa.int64()),
                    ("stats", pa.string()),
                ]
            ),
        )


__all__ = ["FILE_COLUMN", "MergeResult", "latest_per_key", "merge_latest"]
