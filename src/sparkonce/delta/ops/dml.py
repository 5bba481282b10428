"""DELETE and UPDATE on a Delta table, rewriting only the files that hold matching rows.

Runs on the driver; reading and writing data runs on executors. For one operation:

1. driver: skip it when ``txn`` is given and the table's ``txn_version(app_id) >= txn_version``;
2. driver: when the condition names partition columns only, it is evaluated over the files' partition values
   (Delta log metadata): a DELETE then removes whole files without reading them, an UPDATE reads only the
   matching partitions. Otherwise every file is a candidate;
3. executors: read the candidates and find the files with at least one matching row (the *touched* files);
4. executors: write each touched file's rows, minus the deleted ones or with the updated values, into new files;
5. driver: ONE Delta commit of ``remove`` (touched files) + ``add`` (new files) (+ ``cdc``: the deleted rows,
   or the updated rows' pre- and post-images, when the table has the change data feed on,
   :mod:`sparkonce.delta.write.cdf`) (+ ``txn``) with Delta's
   ``DELETE``/``UPDATE`` parameters and metrics. An operation that matches nothing still commits (no file
   action), so it shows in the history and its ``txn`` makes a replay a no-op.

On a table with deletion vectors enabled (:func:`sparkonce.delta.ops.row_deletion.writes_deletion_vectors`), steps 3
and 4 mark the matched rows deleted instead (:func:`sparkonce.delta.ops.row_deletion.mark_deleted`): each touched file
is removed with its old deletion vector and added again with the new one, an UPDATE writes only the updated rows,
nothing is copied.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sparkonce._types import TableVersion
from sparkonce.delta.ops.rewrite import (
    FILE_COLUMN,
    MarkedRows,
    TableFile,
    TableSnapshot,
    as_column,
    commit_rewrite,
    files_by_partition_predicate,
    open_snapshot,
    partition_condition,
    read_rows,
    sql_text,
    write_rows,
)
from sparkonce.delta.ops.row_deletion import mark_deleted, writes_deletion_vectors
from sparkonce.delta.table.generated import regenerate
from sparkonce.delta.table.identity import check_not_updated
from sparkonce.delta.table.schema import arrow_schema_for_spark
from sparkonce.delta.txn.commit import BatchTxn, table_committed_txn_version
from sparkonce.delta.txn.conflicts import ReadSet
from sparkonce.delta.write.cdf import cdf_enabled, with_change_type, write_change_data
from sparkonce.delta.write.files import WrittenFile
from sparkonce.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

_MATCHED = "_sparkonce_matched"


@dataclass(frozen=True)
class DmlResult:
    """What a DELETE or UPDATE did (the numbers also go to the Delta commit's ``operationMetrics``)."""

    table_version: TableVersion | None
    """The Delta commit made, or None when ``txn`` was already in the table (skipped)."""
    skipped: bool
    files_removed: int
    files_added: int
    rows_changed: int
    """Rows deleted or updated."""
    rows_copied: int
    metrics: dict[str, int] = field(default_factory=dict)


def delete_rows(
    spark: SparkSession,
    table_uri: str,
    condition: str | Column | None = None,
    *,
    txn: BatchTxn | None = None,
    target_file_rows: int = 1_000_000,
) -> DmlResult:
    """Delete the rows matching ``condition`` (all rows when None) from the table at ``table_uri``."""
    return _rewrite(spark, table_uri, "DELETE", condition, None, txn, target_file_rows)


def update_rows(
    spark: SparkSession,
    table_uri: str,
    condition: str | Column | None,
    assignments: Mapping[str, str | Column],
    *,
    txn: BatchTxn | None = None,
    target_file_rows: int = 1_000_000,
) -> DmlResult:
    """Set ``assignments`` (column -> SQL expression or Column) on the rows matching ``condition`` (all when None).

    Raises:
        SchemaMismatchError: an assignment names a column the table lacks.
        SqlError: an assignment names an identity column (Delta's ``DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED``).
    """
    return _rewrite(spark, table_uri, "UPDATE", condition, assignments, txn, target_file_rows)


def _rewrite(
    spark: SparkSession,
    table_uri: str,
    operation: Literal["DELETE", "UPDATE"],
    condition: str | Column | None,
    assignments: Mapping[str, str | Column] | None,
    txn: BatchTxn | None,
    target_file_rows: int,
) -> DmlResult:
    started = time.monotonic()
    if txn is not None and table_committed_txn_version(table_uri, txn) is not None:
        log.info("%s on %s: txn %s already in the table, skipped", operation, table_uri, txn)
        return DmlResult(None, True, 0, 0, 0, 0)
    snapshot = open_snapshot(table_uri, operation=operation)
    columns = [f.name for f in snapshot.spark_schema().fields]
    if assignments is not None:
        check_not_updated(snapshot.identity, assignments)  # Delta: no identity column may be assigned (any case)
        unknown = [c for c in assignments if c not in columns]
        if unknown:
            raise SchemaMismatchError(f"UPDATE on {table_uri}: column(s) {unknown} are not in the table {columns}")

    rewrite = rewrite_rows(
        spark,
        snapshot,
        condition,
        assignments,
        target_file_rows=target_file_rows,
        deletion_vectors=writes_deletion_vectors(spark, snapshot, operation),
    )
    touched, written, change_files = rewrite.removed, rewrite.written, rewrite.change_files
    changed, copied, scan_ms = rewrite.changed, rewrite.copied, rewrite.scan_ms
    marked = rewrite.marked
    # Delta's numbers: a file kept with a new deletion vector is neither removed nor added, nor are its bytes
    metrics = {
        "numRemovedFiles": len(touched) + marked.files_removed,
        "numAddedFiles": len(written),
        "numCopiedRows": copied,
        "numRemovedBytes": sum(f.size for f in touched),
        "numAddedBytes": sum(f.size for f in written),
        "numAddedChangeFiles": len(change_files),
        "executionTimeMs": int((time.monotonic() - started) * 1000),
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": int((time.monotonic() - started) * 1000) - scan_ms,
        **marked.metrics(),
    }
    metrics["numDeletedRows" if operation == "DELETE" else "numUpdatedRows"] = changed
    params: dict[str, Any] = {"predicate": json.dumps([] if condition is None else [sql_text(condition)])}
    if txn is not None:
        params.update(txnAppId=txn.app_id, txnVersion=txn.txn_version)
    result = commit_rewrite(
        table_uri,
        written,
        touched,
        data_schema=arrow_schema_for_spark(snapshot.spark_schema()),
        operation=operation,
        parameters=params,
        metrics=metrics,
        txn=txn,
        change_files=change_files,
        read=rewrite.read,
        marked=marked,
    )
    log.info("%s on %s (txn %s): table_version %s, %s", operation, table_uri, txn, result.table_version, metrics)
    if result.skipped:
        return DmlResult(None, True, 0, 0, 0, 0)
    removed = len(touched) + marked.files_removed
    return DmlResult(result.table_version, False, removed, len(written), changed, copied, metrics)


@dataclass(frozen=True)
class RowRewrite:
    """What :func:`rewrite_rows` wrote before the commit: nothing is visible until a Delta commit names it."""

    removed: list[TableFile]
    """The files the commit removes: those holding matched rows (and, for a DELETE by partition values only,
    every file of the matched partitions, removed whole without being read)."""
    written: list[WrittenFile]
    """The new data files: the unmatched rows of the removed files (and, for an UPDATE, the updated rows)."""
    change_files: list[WrittenFile]
    """Change data files (``_change_data/``) of the changed rows, when the table has the change data feed on."""
    changed: int
    """Rows deleted or updated."""
    copied: int
    """Unmatched rows of the removed files, written again."""
    scan_ms: int
    read: ReadSet
    """What the rewrite read, for the conflict check of its commit."""
    marked: MarkedRows = field(default_factory=MarkedRows)
    """The files whose matched rows deletion vectors mark deleted instead (``deletion_vectors``); not in
    ``removed``."""


def rewrite_rows(
    spark: SparkSession,
    snapshot: TableSnapshot,
    condition: str | Column | None,
    assignments: Mapping[str, str | Column] | None,
    *,
    target_file_rows: int = 1_000_000,
    deletion_vectors: bool = False,
) -> RowRewrite:
    """Delete (``assignments`` None) or update the rows of ``snapshot`` matching ``condition`` (all when None):
    write the new files on executors and return them with the files they replace, for ONE Delta commit (a DELETE,
    an UPDATE, or the delete half of a ``replaceWhere`` overwrite). Runs on the driver; rows stay on executors.

    ``deletion_vectors``: the matched rows are marked deleted by deletion vectors
    (:func:`sparkonce.delta.ops.row_deletion.mark_deleted`) instead of their files being rewritten; an UPDATE
    writes only the updated rows. A condition on partition columns only still removes a DELETE's files whole.
    """
    import pyspark.sql.functions as F

    columns = [f.name for f in snapshot.spark_schema().fields]
    operation = "DELETE" if assignments is None else "UPDATE"
    whole_files: list[TableFile] = []  # removed without reading (a DELETE whose condition covers them)
    by_partition: list[TableFile] | None = None
    if condition is None:
        candidates = list(snapshot.files)
        if operation == "DELETE":
            whole_files, candidates = candidates, []
    else:
        by_partition = files_by_partition_predicate(spark, snapshot, condition)
        candidates = list(snapshot.files) if by_partition is None else by_partition
        if by_partition is not None and operation == "DELETE":
            whole_files, candidates = candidates, []

    # what the rewrite read, for its conflict check: the partitions the condition selects, files or not (Delta's
    # read predicate: a concurrent non-blind append into one of them conflicts), else the whole table
    partitions = partition_condition(spark, snapshot, condition)
    scan_started = time.monotonic()
    written: list[WrittenFile] = []
    change_files: list[WrittenFile] = []
    touched: list[TableFile] = []
    changed = 0
    copied = 0
    marked = MarkedRows()
    if candidates and deletion_vectors:
        marked, written, change_files = _mark_rows(
            spark, snapshot, candidates, condition, assignments, target_file_rows
        )
        changed = marked.rows
    elif candidates:
        rows = read_rows(spark, snapshot, candidates).persist()
        try:
            matches = F.lit(True) if condition is None else F.coalesce(as_column(condition), F.lit(False))
            # Rows per file counted as read (deletion vectors applied), never from the log's stats: a file's
            # stats may be missing, and then its unmatched rows would not be copied.
            totals = rows.groupBy(FILE_COLUMN).agg(
                F.count(F.lit(1)).alias("rows"), F.sum(F.when(matches, 1).otherwise(0)).alias("matched")
            )
            per_file = {r[0]: (int(r[1]), int(r[2])) for r in totals.where("matched > 0").collect()}
            by_path = {f.path: f for f in candidates}
            touched = [by_path[p] for p in sorted(per_file)]
            changed = sum(matched for _, matched in per_file.values())
            copied = sum(total - matched for total, matched in per_file.values())
            if touched:
                kept = rows.where(F.col(FILE_COLUMN).isin(sorted(per_file)))
                if assignments is None:
                    output = kept.where(~matches).select(*columns)
                    changes = with_change_type(kept.where(matches), columns, "delete")
                else:
                    output = _updated(snapshot, kept, matches, assignments)
                    changes = with_change_type(kept.where(matches), columns, "update_preimage").unionByName(
                        with_change_type(output.where(F.col(_MATCHED)).select(*columns), columns, "update_postimage")
                    )
                    output = output.drop(_MATCHED)
                if cdf_enabled(snapshot.configuration):
                    change_files = write_change_data(
                        changes,
                        snapshot.location,
                        snapshot.partition_columns,
                        column_mapping=snapshot.column_mapping,
                    )
                out_rows = copied + (changed if assignments is not None else 0)
                n_files = max(1, math.ceil(max(out_rows, 1) / target_file_rows))
                if out_rows > 0 or assignments is not None:
                    written = _write_table_rows(snapshot, output.repartition(n_files))
        finally:
            rows.unpersist()
    scan_ms = int((time.monotonic() - scan_started) * 1000)
    if whole_files:
        changed += sum(f.live_records for f in whole_files)
        touched = whole_files + touched
    return RowRewrite(
        removed=touched,
        written=written,
        change_files=change_files,
        changed=changed,
        copied=copied,
        scan_ms=scan_ms,
        read=snapshot.read_set([*whole_files, *candidates], whole_table=partitions is None, partitions=partitions),
        marked=marked,
    )


def _write_table_rows(snapshot: TableSnapshot, output: DataFrame) -> list[WrittenFile]:
    """Write ``output`` (the table's columns) into new data files of ``snapshot``'s table, laid out, generated and
    checked as the table says; on executors."""
    return write_rows(
        output,
        snapshot.location,
        snapshot.partition_columns,
        column_mapping=snapshot.column_mapping,
        generated=snapshot.generated,
        constraints=snapshot.constraints,
        stats_columns=snapshot.stats_columns(),
    )


def _updated(
    snapshot: TableSnapshot, rows: DataFrame, matches: Column, assignments: Mapping[str, str | Column]
) -> DataFrame:
    """``rows`` in the table's columns with ``assignments`` applied where ``matches`` holds (generated columns whose
    sources change recomputed), and :data:`_MATCHED`. Runs on the driver (plans only)."""
    import pyspark.sql.functions as F

    columns = [f.name for f in snapshot.spark_schema().fields]
    types = {f.name: f.dataType for f in snapshot.spark_schema().fields}
    output = rows.select(
        *[
            F.when(matches, as_column(assignments[c]).cast(types[c])).otherwise(F.col(c)).alias(c)
            if c in assignments
            else F.col(c)
            for c in columns
        ],
        matches.alias(_MATCHED),
    )
    assigned = {c.lower() for c in assignments}
    for column in snapshot.generated.columns if snapshot.generated is not None else ():
        if column.name.lower() not in assigned and column.sources & assigned:
            output = regenerate(output, column, F.col(_MATCHED))
    return output


def _mark_rows(
    spark: SparkSession,
    snapshot: TableSnapshot,
    candidates: list[TableFile],
    condition: str | Column | None,
    assignments: Mapping[str, str | Column] | None,
    target_file_rows: int,
) -> tuple[MarkedRows, list[WrittenFile], list[WrittenFile]]:
    """A DELETE or UPDATE by deletion vectors: executors mark the matched rows of ``candidates`` deleted and, for an
    UPDATE, write the updated rows (only those) into new files; with the change data feed on, the deleted rows or
    the updated rows' pre- and post-images into change data files. Returns (marked files, new data files, change
    data files). Runs on the driver; rows stay on executors."""
    import pyspark.sql.functions as F

    columns = [f.name for f in snapshot.spark_schema().fields]
    matches = F.lit(True) if condition is None else F.coalesce(as_column(condition), F.lit(False))
    matched = read_rows(spark, snapshot, candidates).where(matches).persist()
    try:
        marked = mark_deleted(spark, snapshot, matched, candidates)
        if not marked.removed:
            return marked, [], []
        written: list[WrittenFile] = []
        if assignments is None:
            changes = with_change_type(matched, columns, "delete")
        else:
            output = _updated(snapshot, matched, F.lit(True), assignments).drop(_MATCHED)
            changes = with_change_type(matched, columns, "update_preimage").unionByName(
                with_change_type(output, columns, "update_postimage")
            )
            written = _write_table_rows(snapshot, output.repartition(max(1, math.ceil(marked.rows / target_file_rows))))
        change_files: list[WrittenFile] = []
        if cdf_enabled(snapshot.configuration):
            change_files = write_change_data(
                changes, snapshot.location, snapshot.partition_columns, column_mapping=snapshot.column_mapping
            )
        return marked, written, change_files
    finally:
        matched.unpersist()


__all__ = ["DmlResult", "RowRewrite", "delete_rows", "rewrite_rows", "update_rows"]
