"""MERGE into a Delta table, rewriting only the files that hold changed rows.

One engine, :func:`merge_into`, runs both the gold stage's rule (:func:`merge_latest`: the latest row per key)
and ``DeltaTable.merge(...)``'s builder. For one merge (optionally with ``txn(app_id, txn_version)``):

1. driver: skip it when the table's ``txn_version(app_id) >= txn_version`` (a replayed batch);
2. driver: pick the *candidate* files. With equality keys in the condition (``t.k = s.k AND ...``, or the gold
   rule's keys), executors count the source and take its first key's min and max, and only files whose key
   min/max stats or partition values overlap them stay. Then, for a source of at most :data:`KEYS_ON_DRIVER`
   rows, its key values come to the driver (keys only, a bounded set) and only files whose statistics may hold
   one of them are read (no target file is opened to decide); for a larger source, executors join its distinct
   keys with the key columns of the remaining files and only the matching files' paths reach the driver, as
   delta-spark finds the files a merge touches. Files without stats are candidates. Without keys, or with
   ``whenNotMatchedBySource`` clauses, every file is a candidate;
3. executors: read the candidate files (each row tagged with its file and position) and join them with the
   source on the condition; the first clause whose condition holds decides each pair: update, delete, insert;
4. only the files holding a target row that a clause updates or deletes are *touched*: their other rows are
   copied, and the touched files are replaced by new files (range-partitioned by the keys, so file key ranges
   stay narrow and step 2 stays selective) holding the copies, the updated rows and the inserted rows. On a table
   with deletion vectors enabled, the updated and deleted target rows are marked deleted in their files instead
   (:func:`sparkonce.delta.ops.row_deletion.mark_deleted`) and the new files hold only the updated and inserted rows;
5. driver: ONE Delta commit of ``remove`` (touched files) + ``add`` (new files) (+ ``cdc`` files of every changed
   row when the table has the change data feed on, :mod:`sparkonce.delta.write.cdf`) + ``txn`` through
   :func:`sparkonce.delta.ops.rewrite.commit_rewrite`, with Delta's ``MERGE`` parameters and metrics. A merge that
   changes nothing still commits its ``txn`` (no file action) so a replay is skipped.

So the cost of a merge grows with the files its keys touch, not with the table.

Identity columns (:mod:`sparkonce.delta.table.identity`): insert clauses that leave one out get its values, numbered
densely in the Spark plan after step 3 (:func:`_fill_identity`); the commit moves the high-water marks of those columns
only.

Why one module of ~770 lines: MERGE's planning (clauses, target-file pruning), the join, the clause evaluation,
schema evolution, generated columns, change data and the commit are the steps of one operation over shared column
conventions (the clause, file and row marker columns); each step is its own function.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sparkonce._types import TableVersion
from sparkonce.delta.ops.rewrite import (
    FILE_COLUMN,
    ROW_COLUMN,
    MarkedRows,
    TableFile,
    TableSnapshot,
    as_column,
    commit_rewrite,
    open_snapshot,
    read_rows,
    sql_text,
    write_rows,
)
from sparkonce.delta.ops.row_deletion import mark_deleted, writes_deletion_vectors
from sparkonce.delta.table.column_mapping import ColumnMapping, with_new_columns
from sparkonce.delta.table.generated import GeneratedColumns, regenerate
from sparkonce.delta.table.identity import (
    TASK_BITS,
    IdentityColumn,
    IdentityPlan,
    check_not_updated,
    explicit_insert_error,
)
from sparkonce.delta.table.schema import arrow_schema_for_spark, delta_fields, table_fields
from sparkonce.delta.txn.commit import BatchTxn, load_table, table_committed_txn_version
from sparkonce.delta.write.cdf import cdf_enabled, with_change_type, write_change_data
from sparkonce.errors import OptionError, SchemaMismatchError
from sparkonce.storage import table_location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

ClauseKind = Literal["update", "delete", "insert"]
ClauseWhen = Literal["matched", "notMatched", "notMatchedBySource"]

KEYS_ON_DRIVER = 10_000
"""The most source rows whose keys a MERGE takes to the driver to pick its candidate files by the log's statistics
alone. A larger source keeps its keys on executors: they are joined with the target's key columns there, and only
file paths come back."""

_T_PRESENT = "_sparkonce_target_row"
_S_PRESENT = "_sparkonce_source_row"
_CLAUSE = "_sparkonce_clause"
_ROW_ID = "_sparkonce_row_id"
"""Spark's ``monotonically_increasing_id`` (task << 33 | row) of the action rows whose identity values the merge
generates, counted over those rows only (null on the others)."""


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN [NOT] MATCHED [BY SOURCE] [AND condition] THEN ...`` clause of a merge. Runs on the driver."""

    when: ClauseWhen
    kind: ClauseKind
    condition: str | Column | None = None
    assignments: Mapping[str, str | Column] | None = None
    """Target column -> SQL expression or Column; None for ``UPDATE SET *`` / ``INSERT *`` (columns by name)."""

    def describe(self) -> dict[str, str]:
        """The clause as Delta records it in ``operationParameters`` (``matchedPredicates``, ...): ``UPDATE SET *`` and
        ``INSERT *`` are ``update`` and ``insert`` there too (delta-spark resolves the star before it records)."""
        out: dict[str, str] = {"actionType": self.kind}
        if self.condition is not None:
            out["predicate"] = sql_text(self.condition)
        return out


@dataclass(frozen=True)
class MergeResult:
    """What one merge did (the numbers also go to the Delta commit's ``operationMetrics``)."""

    table_version: TableVersion | None
    """The Delta commit made, or None when the merge was already in the table (skipped)."""
    skipped: bool
    source_rows: int
    table_files: int
    """Active files of the table before the merge."""
    candidate_files: int
    """Files read because their key stats may hold a source key."""
    files_removed: int
    """Files rewritten (removed and replaced)."""
    files_added: int
    rows_updated: int
    rows_inserted: int
    rows_copied: int
    """Unchanged rows of the rewritten files, copied into the new files."""
    rows_deleted: int = 0
    metrics: dict[str, int] = field(default_factory=dict)
    """Delta's ``MERGE`` operation metrics, as committed."""


def _skipped(source_rows: int = 0, table_files: int = 0, candidates: int = 0) -> MergeResult:
    return MergeResult(None, True, source_rows, table_files, candidates, 0, 0, 0, 0, 0)


def merge_into(
    source: DataFrame,
    table_uri: str,
    condition: str | Column,
    clauses: Sequence[MergeClause],
    *,
    target_alias: str | None = None,
    keys: Sequence[tuple[str, str]] | None = None,
    txn: BatchTxn | None = None,
    schema_evolution: bool = False,
    target_file_rows: int = 100_000,
    parameters: Mapping[str, Any] | None = None,
    custom_metadata: Mapping[str, Any] | None = None,
    create_from_source: bool = False,
) -> MergeResult:
    """Merge ``source`` into the Delta table at ``table_uri`` (Delta's ``MERGE INTO`` semantics), once per ``txn``.

    Runs on the driver; reading and writing data files runs on executors.

    Args:
        source: The source rows (aliased as the condition names them).
        table_uri: The target table.
        condition: The join condition, SQL text or a Column.
        clauses: In order; within each kind of match the first clause whose condition holds applies.
        target_alias: The name the condition and clauses use for the target table.
        keys: ``(target column, source column)`` pairs the condition equates; found in a SQL condition of
            ``alias.col = alias.col`` conjuncts when None. They prune the files read and lay out new files.
        txn: Skip the merge when the table's ``txn_version(app_id) >= txn_version``; commit the txn with it.
        schema_evolution: ``UPDATE SET *`` / ``INSERT *`` add the source's new columns to the table.
        target_file_rows: About this many rows per new file.
        parameters: Extra ``operationParameters`` for the commit.
        custom_metadata: Extra commitInfo fields.
        create_from_source: Create the table from the source's schema when it does not exist (the gold stage).

    Raises:
        SchemaMismatchError: an ``*`` clause lacks a target column in the source, or adds columns without
            ``schema_evolution``; two source rows modify one target row.
        CommitConflictError: a concurrent writer rewrote a touched file.
        CommitRetriesExceededError: too many lost races.
    """
    import pyspark.sql.functions as F

    started = time.monotonic()
    committed = table_committed_txn_version(table_uri, txn) if txn is not None else None
    if committed is not None and txn is not None:
        log.info(
            "merge into %s: already in the table (txn app_id=%s txn_version=%s >= %s)",
            table_uri,
            txn.app_id,
            committed,
            txn.txn_version,
        )
        return _skipped()
    _check_clauses(clauses)
    from sparkonce.delta.txn.commit import table_exists

    spark = source.sparkSession
    snapshot: TableSnapshot | None = None
    if table_exists(table_uri) or not create_from_source:
        snapshot = open_snapshot(table_uri, operation="MERGE")
        target_schema = snapshot.spark_schema()
        partition_by: tuple[str, ...] = snapshot.partition_columns
        location = snapshot.location
    else:
        target_schema = source.schema
        partition_by = ()
        location = table_location(table_uri)
    files = list(snapshot.files) if snapshot is not None else []
    target_columns = [f.name for f in target_schema.fields]
    generated = snapshot.generated.names() if snapshot is not None and snapshot.generated is not None else frozenset()
    new_columns = _new_columns(source, target_columns, clauses, schema_evolution, table_uri, generated)
    column_mapping = snapshot.column_mapping if snapshot is not None else None
    if new_columns and snapshot is not None and column_mapping is not None:
        column_mapping = _evolved_mapping(snapshot, column_mapping, new_columns)
    identity = snapshot.identity if snapshot is not None else ()
    generating = _identity_clauses(identity, clauses, source.columns, target_columns)
    if keys is None:
        keys = equi_keys(condition, target_alias, target_columns, source.columns)

    cached_by_caller = source.is_cached
    source = source.persist()
    try:
        source_rows, candidates = _candidates(spark, snapshot, source, files, keys, clauses, partition_by)
        scan_started = time.monotonic()
        target = read_rows(spark, snapshot, candidates) if snapshot is not None else _empty_target(spark, target_schema)
        target = target.withColumn(_T_PRESENT, F.lit(True))
        if target_alias:
            target = target.alias(target_alias)
        marked = source.withColumn(_S_PRESENT, F.lit(True))
        cond = F.expr(condition) if isinstance(condition, str) else condition
        joined = target.join(marked, on=cond, how=_join_type(clauses))
        actions = _actions(joined, target, marked, clauses, target_schema, new_columns)
        if snapshot is not None and snapshot.generated is not None:
            actions = _regenerate(actions, snapshot.generated, clauses, marked.columns, target_columns)
        if generating:
            # Numbered rows only: the id's counter moves only where the CASE takes its branch (Spark evaluates a
            # branch's value only for the rows that take it), so each task numbers its generating rows 0, 1, ...
            numbering = F.coalesce(F.col(_CLAUSE).isin(_numbered_clauses(generating)), F.lit(False))
            actions = actions.withColumn(_ROW_ID, F.when(numbering, F.monotonically_increasing_id()))
        actions = actions.persist()
        cached = actions
        try:
            per_file = _count_actions(actions, clauses)
            scan_ms = int((time.monotonic() - scan_started) * 1000)
            counts = _tally(per_file, clauses)
            if generating and counts.inserted:
                actions = _fill_identity(actions, generating)
            touched_paths = sorted(counts.touched)
            by_path = {f.path: f for f in candidates}
            touched = [by_path[p] for p in touched_paths]
            rewrite_started = time.monotonic()
            written: list[Any] = []
            change_files: list[Any] = []
            deleted = MarkedRows()
            columns = [*target_columns, *[c.name for c in new_columns]]
            copied = sum(f.live_records for f in touched) - counts.target_rows_changed
            if touched and snapshot is not None and writes_deletion_vectors(spark, snapshot, "MERGE"):
                # the updated and deleted target rows are marked deleted where they are; nothing is copied
                modified = actions.where(F.col(FILE_COLUMN).isNotNull())
                deleted = mark_deleted(spark, snapshot, modified, touched)
                touched, copied = [], 0
            if touched or deleted.removed or counts.inserted:
                changed = actions.where(F.col(_CLAUSE).isin(counts.writing_clauses)).select(*columns)
                output = changed
                if touched:
                    modified = actions.where(F.col(FILE_COLUMN).isNotNull()).select(FILE_COLUMN, ROW_COLUMN)
                    kept = (
                        target.where(F.col(FILE_COLUMN).isin(touched_paths))
                        .join(modified, on=[FILE_COLUMN, ROW_COLUMN], how="left_anti")
                        .select(*target_columns, *[F.lit(None).cast(c.dataType).alias(c.name) for c in new_columns])
                    )
                    output = kept.unionByName(changed)
                rows = copied + counts.updated + counts.inserted
                n_files = max(1, math.ceil(rows / target_file_rows))
                key_columns = [t for t, _ in keys]
                if key_columns:
                    output = output.repartitionByRange(n_files, *key_columns).sortWithinPartitions(*key_columns)
                else:
                    output = output.repartition(n_files)
                written = write_rows(
                    output,
                    location,
                    partition_by,
                    column_mapping=column_mapping,
                    generated=snapshot.generated if snapshot is not None else None,
                    constraints=snapshot.constraints if snapshot is not None else None,
                    stats_columns=snapshot.stats_columns() if snapshot is not None else None,
                )
                if snapshot is not None and cdf_enabled(snapshot.configuration):
                    change_files = write_change_data(
                        _changes(actions, target, clauses, target_columns, new_columns),
                        location,
                        partition_by,
                        column_mapping=column_mapping,
                    )
            rewrite_ms = int((time.monotonic() - rewrite_started) * 1000)
        finally:
            cached.unpersist()
    finally:
        if not cached_by_caller:
            source.unpersist()

    removed_whole = deleted.removed_whole
    metrics = {
        "numSourceRows": source_rows,
        "numTargetRowsInserted": counts.inserted,
        "numTargetRowsUpdated": counts.updated,
        "numTargetRowsMatchedUpdated": counts.matched_updated,
        "numTargetRowsNotMatchedBySourceUpdated": counts.updated - counts.matched_updated,
        "numTargetRowsDeleted": counts.deleted,
        "numTargetRowsMatchedDeleted": counts.matched_deleted,
        "numTargetRowsNotMatchedBySourceDeleted": counts.deleted - counts.matched_deleted,
        "numTargetRowsCopied": copied,
        "numOutputRows": copied + counts.updated + counts.inserted,
        "numTargetFilesAdded": len(written),
        "numTargetFilesRemoved": len(touched) + len(removed_whole),
        "numTargetBytesAdded": sum(f.size for f in written),
        "numTargetBytesRemoved": sum(f.size for f in [*touched, *removed_whole]),
        "numTargetChangeFilesAdded": len(change_files),
        "numTargetFilesBefore": len(files),
        "numCandidateFiles": len(candidates),
        "executionTimeMs": int((time.monotonic() - started) * 1000),
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": rewrite_ms,
        **deleted.metrics("Target"),
    }
    params: dict[str, Any] = {
        "predicate": json.dumps([sql_text(condition)]),
        # Compact JSON, as Delta writes it.
        **{
            f"{when}Predicates": json.dumps([c.describe() for c in clauses if c.when == when], separators=(",", ":"))
            for when in ("matched", "notMatched", "notMatchedBySource")
        },
    }
    if txn is not None:
        params.update(txnAppId=txn.app_id, txnVersion=txn.txn_version)
    params.update(parameters or {})
    result = commit_rewrite(
        table_uri,
        written,
        touched,
        data_schema=arrow_schema_for_spark(_output_schema(target_schema, new_columns)),
        operation="MERGE",
        parameters=params,
        metrics=metrics,
        txn=txn,
        merge_schema=bool(new_columns),
        custom_metadata=custom_metadata,
        change_files=change_files,
        read=snapshot.read_set(candidates, whole_table=True) if snapshot is not None else None,
        identity=IdentityPlan.tracking(generating) if identity else None,
        marked=deleted,
    )
    log.info("merge into %s (txn %s): table_version %s, %s", table_uri, txn, result.table_version, json.dumps(metrics))
    if result.skipped:
        return _skipped(source_rows, len(files), len(candidates))
    return MergeResult(
        table_version=result.table_version,
        skipped=False,
        source_rows=source_rows,
        table_files=len(files),
        candidate_files=len(candidates),
        files_removed=len(touched) + len(removed_whole),
        files_added=len(written),
        rows_updated=counts.updated,
        rows_inserted=counts.inserted,
        rows_copied=copied,
        rows_deleted=counts.deleted,
        metrics=metrics,
    )


# -- the gold rule -----------------------------------------------------------------------------------------------


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

    The gold stage's rule on :func:`merge_into`: a batch row replaces the stored row of its key when its
    ``order_by`` is later, or equal with different values; a new key is inserted. A batch applied twice (under
    another app id) changes nothing and rewrites nothing.

    Raises:
        SchemaMismatchError: the batch lacks a column of the table, has new ones without ``merge_schema``, or
            the table is partitioned.
        CommitConflictError: a concurrent writer rewrote a touched file.
        CommitRetriesExceededError: lost the commit race too often.
    """
    import pyspark.sql.functions as F

    from sparkonce.delta.txn.commit import load_table, table_exists

    committed = table_committed_txn_version(table_uri, txn)
    if committed is not None:
        log.info(
            "merge into %s: batch already in the table (txn app_id=%s txn_version=%s >= %s)",
            table_uri,
            txn.app_id,
            committed,
            txn.txn_version,
        )
        return _skipped()
    table_columns = list(batch.columns)
    if table_exists(table_uri):
        table = load_table(table_uri)
        _check_columns(table, table_uri, batch.columns, merge_schema)
        table_columns = [f.name for f in table.schema().fields]
    latest = latest_per_key(batch, keys, order_by).alias("s")
    new_order = F.struct(*[F.col(f"s.`{c}`") for c in order_by])
    old_order = F.struct(*[F.col(f"t.`{c}`") for c in order_by])
    same_row = F.lit(True)
    for c in latest.columns:
        old = F.col(f"t.`{c}`") if c in table_columns else F.lit(None)
        same_row = same_row & F.col(f"s.`{c}`").eqNullSafe(old)
    wins = (new_order > old_order) | ((new_order == old_order) & ~same_row)
    condition = F.lit(True)
    for k in keys:
        condition = condition & (F.col(f"t.`{k}`") == F.col(f"s.`{k}`"))
    return merge_into(
        latest,
        table_uri,
        condition,
        [MergeClause("matched", "update", wins), MergeClause("notMatched", "insert")],
        target_alias="t",
        keys=[(k, k) for k in keys],
        txn=txn,
        schema_evolution=merge_schema,
        target_file_rows=target_file_rows,
        parameters={"keys": list(keys), "orderBy": list(order_by)},
        custom_metadata=custom_metadata,
        create_from_source=True,
    )


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


# -- planning (driver) -------------------------------------------------------------------------------------------

_IDENT = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_EQUALITY = re.compile(rf"^\s*\(?\s*({_IDENT})\.({_IDENT})\s*=\s*({_IDENT})\.({_IDENT})\s*\)?\s*$")


def equi_keys(
    condition: str | Column, target_alias: str | None, target_columns: Sequence[str], source_columns: Sequence[str]
) -> list[tuple[str, str]]:
    """``(target column, source column)`` pairs of the ``t.a = s.b`` conjuncts of a SQL merge condition (the
    target side named by ``target_alias``); empty for a Column or when none is found."""
    if not isinstance(condition, str) or not target_alias:
        return []
    pairs = []
    for conjunct in re.split(r"\s+and\s+", condition, flags=re.IGNORECASE):
        match = _EQUALITY.match(conjunct)
        if match is None:
            continue
        a_alias, a_col, b_alias, b_col = (g.strip("`") for g in match.groups())
        if a_alias == target_alias and b_alias != target_alias:
            pair = (a_col, b_col)
        elif b_alias == target_alias and a_alias != target_alias:
            pair = (b_col, a_col)
        else:
            continue
        if pair[0] in target_columns and pair[1] in source_columns:
            pairs.append(pair)
    return pairs


def _check_clauses(clauses: Sequence[MergeClause]) -> None:
    for when in ("matched", "notMatched", "notMatchedBySource"):
        group = [c for c in clauses if c.when == when]
        for clause in group[:-1]:
            if clause.condition is None:
                raise OptionError(
                    "merge clauses",
                    when,
                    "only the last clause of each kind (whenMatched, whenNotMatched, whenNotMatchedBySource) "
                    "may omit its condition",
                )


def _new_columns(
    source: DataFrame,
    target_columns: Sequence[str],
    clauses: Sequence[MergeClause],
    evolve: bool,
    table_uri: str,
    generated: frozenset[str] = frozenset(),
) -> list[Any]:
    """Source columns that ``*`` clauses add to the table, as nullable columns (schema evolution only; without it
    they are ignored, as in Delta), after checking that the source has every column of the table but its generated
    ones (``generated``, lower case: computed when missing)."""
    star = [c for c in clauses if c.assignments is None and c.kind != "delete"]
    if not star:
        return []
    missing = [c for c in target_columns if c not in source.columns and c.lower() not in generated]
    if missing and not evolve:
        raise SchemaMismatchError(
            f"MERGE into {table_uri}: UPDATE SET * / INSERT * need every target column in the source; missing {missing}"
        )
    if not evolve:
        return []  # as Delta: ``*`` means the table's columns; the source's others are ignored
    from pyspark.sql.types import StructField

    # nullable: the table's rows from before have no value for them (Delta adds them so; a NOT NULL source column
    # would declare the old rows' nulls impossible)
    return [
        StructField(f.name, f.dataType, True, f.metadata)
        for f in source.schema.fields
        if f.name not in target_columns and not f.name.startswith("_sparkonce_")
    ]


def _candidates(
    spark: Any,
    snapshot: TableSnapshot | None,
    source: DataFrame,
    files: list[TableFile],
    keys: Sequence[tuple[str, str]],
    clauses: Sequence[MergeClause],
    partition_by: Sequence[str],
) -> tuple[int, list[TableFile]]:
    """(source rows, the files to read). Runs on the driver; the source's rows stay on executors, and its keys too
    past :data:`KEYS_ON_DRIVER` rows."""
    import pyspark.sql.functions as F

    if not keys:
        return source.count(), list(files)
    first = _quoted(keys[0][1])
    # As Arrow, as the keys below: values compare with the statistics as they do (timestamps in UTC)
    summary = source.agg(F.count(F.lit(1)), F.min(first), F.max(first)).toArrow()
    rows, low, high = (summary.column(i)[0].as_py() for i in range(3))
    if any(c.when == "notMatchedBySource" for c in clauses):
        return rows, list(files)
    if not files or snapshot is None or low is None:  # no row, or every first key null: nothing can match
        return rows, []
    files = [f for f in files if _may_hold(_bounds(f, keys[0][0], partition_by), low, high)]
    if not files:
        return rows, []
    if rows <= KEYS_ON_DRIVER:
        return rows, _by_statistics(source.select(*[_quoted(s) for _, s in keys]).toArrow(), files, keys, partition_by)
    return rows, _by_join(spark, snapshot, source, files, keys)


def _quoted(column: str) -> Any:
    """A Spark column by its plain name (dots and spaces as they are)."""
    import pyspark.sql.functions as F

    return F.col("`" + column.replace("`", "``") + "`")


def _bounds(f: TableFile, column: str, partition_by: Sequence[str]) -> tuple[Any, Any]:
    """(min, max) of ``column`` in ``f`` from its partition value or statistics; None where not known."""
    if column in partition_by:
        value = f.partition_values.get(column)
        return value, value
    return f.min_values.get(column), f.max_values.get(column)


def _may_hold(bounds: tuple[Any, Any], low: Any, high: Any) -> bool:
    """Whether a file of key ``bounds`` may hold a key in ``[low, high]`` (unknown bounds, or bounds that do not
    compare with the keys: it may)."""
    lo, hi = bounds
    if lo is None or hi is None:
        return True
    try:
        return not (hi < low or lo > high)
    except TypeError:
        return True


def _by_statistics(
    source_keys: pa.Table, files: list[TableFile], keys: Sequence[tuple[str, str]], partition_by: Sequence[str]
) -> list[TableFile]:
    """The files whose key statistics may hold one of the (few) ``source_keys``. Runs on the driver."""
    # A null key equals nothing, so it matches no file.
    distinct = set(zip(*(source_keys.column(i).to_pylist() for i in range(len(keys)))))
    tuples = sorted((t for t in distinct if None not in t), key=_sort_key)
    if not tuples:
        return []
    first = [t[0] for t in tuples]
    target_keys = [t for t, _ in keys]
    chosen = []
    for f in files:
        bounds = [_bounds(f, k, partition_by) for k in target_keys]
        lo, hi = bounds[0]
        try:
            if lo is None or hi is None:
                chosen.append(f)
                continue
            start, end = bisect.bisect_left(first, lo), bisect.bisect_right(first, hi)
            if start >= end:
                continue
            if len(keys) == 1 or any(
                all(
                    bounds[j][0] is None or bounds[j][1] is None or bounds[j][0] <= t[j] <= bounds[j][1]
                    for j in range(1, len(keys))
                )
                for t in tuples[start:end]
            ):
                chosen.append(f)
        except TypeError:  # stats of a type that does not compare with the keys: read the file
            chosen.append(f)
    return chosen


def _by_join(
    spark: Any, snapshot: TableSnapshot, source: DataFrame, files: list[TableFile], keys: Sequence[tuple[str, str]]
) -> list[TableFile]:
    """The files holding a row whose keys equal a source row's: executors join the source's distinct keys with the
    files' key columns; only the paths of the matching files come to the driver."""
    target = read_rows(spark, snapshot, files).select(
        FILE_COLUMN, *[_quoted(t).alias(f"_sparkonce_key{i}") for i, (t, _) in enumerate(keys)]
    )
    source_keys = source.select(*[_quoted(s).alias(f"_sparkonce_source_key{i}") for i, (_, s) in enumerate(keys)])
    on = [target[f"_sparkonce_key{i}"] == source_keys[f"_sparkonce_source_key{i}"] for i in range(len(keys))]
    matching = target.join(source_keys.distinct(), on=on, how="left_semi").select(FILE_COLUMN).distinct()
    paths = {row[0] for row in matching.collect()}
    return [f for f in files if f.path in paths]


def _sort_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v) for v in values)


def _join_type(clauses: Sequence[MergeClause]) -> str:
    inserts = any(c.when == "notMatched" for c in clauses)
    by_source = any(c.when == "notMatchedBySource" for c in clauses)
    if inserts and by_source:
        return "full_outer"
    if inserts:
        return "right_outer"
    if by_source:
        return "left_outer"
    return "inner"


def _empty_target(spark: Any, schema: StructType) -> DataFrame:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    full = StructType([*schema.fields, StructField(FILE_COLUMN, StringType()), StructField(ROW_COLUMN, LongType())])
    empty: DataFrame = spark.createDataFrame([], full)
    return empty


def _evolved_mapping(snapshot: TableSnapshot, mapping: ColumnMapping, new_columns: list[Any]) -> ColumnMapping | None:
    """The column mapping of a column-mapped table with the columns schema evolution adds, as the commit gives
    them (:func:`sparkonce.delta.table.column_mapping.with_new_columns`). Runs on the driver."""
    from pyspark.sql.types import StructType

    table = load_table(snapshot.location, table_version=snapshot.table_version)
    added = delta_fields(arrow_schema_for_spark(StructType(list(new_columns))))
    fields, _ = with_new_columns(
        table_fields(table), added, table.metadata().configuration, table=str(snapshot.location)
    )
    return ColumnMapping.from_schema(mapping.mode, json.dumps({"type": "struct", "fields": fields}))


def _output_schema(target_schema: StructType, new_columns: list[Any]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([*target_schema.fields, *new_columns])


# -- the Spark plan ----------------------------------------------------------------------------------------------


def _actions(
    joined: DataFrame,
    target: DataFrame,
    source: DataFrame,
    clauses: Sequence[MergeClause],
    target_schema: StructType,
    new_columns: list[Any],
) -> DataFrame:
    """One row per (target row, source row) pair that a clause acts on: the clause index, the target row's file
    and position (null for an insert) and the row's new values (the old ones for a delete)."""
    import pyspark.sql.functions as F

    t_present = F.col(_T_PRESENT).isNotNull()
    s_present = F.col(_S_PRESENT).isNotNull()
    situation = {
        "matched": t_present & s_present,
        "notMatched": ~t_present & s_present,
        "notMatchedBySource": t_present & ~s_present,
    }
    chooser = None
    for index, clause in enumerate(clauses):
        test = situation[clause.when]
        if clause.condition is not None:
            test = test & as_column(clause.condition)
        chooser = F.when(test, F.lit(index)) if chooser is None else chooser.when(test, F.lit(index))
    clause_col = chooser if chooser is not None else F.lit(None).cast("int")

    def value(clause: MergeClause, name: str, data_type: Any, in_target: bool) -> Column:
        old = target[name] if in_target else F.lit(None)
        if clause.kind == "delete":
            return old
        if clause.assignments is None:
            if name in source.columns:
                return source[name]
            return old if clause.kind == "update" else F.lit(None)
        if name in clause.assignments:
            return as_column(clause.assignments[name])
        return old if clause.kind == "update" else F.lit(None)

    outputs = []
    fields = [(f, True) for f in target_schema.fields] + [(f, False) for f in new_columns]
    for data_field, in_target in fields:
        expr = None
        for index, clause in enumerate(clauses):
            v = value(clause, data_field.name, data_field.dataType, in_target)
            expr = F.when(F.col(_CLAUSE) == index, v) if expr is None else expr.when(F.col(_CLAUSE) == index, v)
        column = expr if expr is not None else F.lit(None)
        outputs.append(column.cast(data_field.dataType).alias(data_field.name))
    for clause in clauses:
        if clause.assignments is not None:
            unknown = [c for c in clause.assignments if c not in [f.name for f, _ in fields]]
            if unknown:
                raise SchemaMismatchError(f"MERGE: column(s) {unknown} of a {clause.kind} clause are not in the table")
    return (
        joined.withColumn(_CLAUSE, clause_col)
        .where(F.col(_CLAUSE).isNotNull())
        .select(F.col(_CLAUSE), target[FILE_COLUMN].alias(FILE_COLUMN), target[ROW_COLUMN].alias(ROW_COLUMN), *outputs)
    )


def _changes(
    actions: DataFrame,
    target: DataFrame,
    clauses: Sequence[MergeClause],
    target_columns: Sequence[str],
    new_columns: list[Any],
) -> DataFrame:
    """The change rows of a merge (Delta's change data feed): ``insert`` for inserted rows, ``update_preimage`` (as
    read from the table) and ``update_postimage`` for updated rows, ``delete`` for deleted rows (once per target
    row, however many source rows matched it). Runs on the driver (plans only)."""
    import pyspark.sql.functions as F

    columns = [*target_columns, *[c.name for c in new_columns]]
    kinds = {kind: [i for i, c in enumerate(clauses) if c.kind == kind] for kind in ("insert", "update", "delete")}
    acted = F.col(_CLAUSE)
    updated = actions.where(acted.isin(kinds["update"]))
    preimage = target.join(updated.select(FILE_COLUMN, ROW_COLUMN), on=[FILE_COLUMN, ROW_COLUMN], how="left_semi")
    preimage = preimage.select(
        *[F.col(f"`{c}`") for c in target_columns], *[F.lit(None).cast(c.dataType).alias(c.name) for c in new_columns]
    )
    deleted = actions.where(acted.isin(kinds["delete"])).dropDuplicates([FILE_COLUMN, ROW_COLUMN])
    return (
        with_change_type(actions.where(acted.isin(kinds["insert"])), columns, "insert")
        .unionByName(with_change_type(preimage, columns, "update_preimage"))
        .unionByName(with_change_type(updated, columns, "update_postimage"))
        .unionByName(with_change_type(deleted, columns, "delete"))
    )


def _regenerate(
    actions: DataFrame,
    generated: GeneratedColumns,
    clauses: Sequence[MergeClause],
    source_columns: Sequence[str],
    target_columns: Sequence[str],
) -> DataFrame:
    """The merge's new rows with each generated column recomputed by Spark for the clauses that do not give it: an
    insert without the column, an update that assigns one of its sources (as Delta does). Runs on the driver."""
    import pyspark.sql.functions as F

    source = {c.lower() for c in source_columns}
    targets = {c.lower() for c in target_columns}
    for column in generated.columns:
        name = column.name.lower()
        recompute = []
        for index, clause in enumerate(clauses):
            if clause.kind == "delete":
                continue
            assigned = {c.lower() for c in clause.assignments} if clause.assignments is not None else source & targets
            if name in assigned:
                continue
            if clause.kind == "insert" or column.sources & assigned:
                recompute.append(index)
        if recompute:
            actions = regenerate(actions, column, F.col(_CLAUSE).isin(recompute))
    return actions


def _identity_clauses(
    identity: Sequence[IdentityColumn],
    clauses: Sequence[MergeClause],
    source_columns: Sequence[str],
    target_columns: Sequence[str],
) -> dict[IdentityColumn, list[int]]:
    """Each identity column the merge generates -> the insert clauses (indexes) that leave it out, after Delta's
    checks (``PreprocessTableMerge``): no update clause may assign an identity column (``UPDATE SET *`` assigns
    every target column the source has), and no insert clause may give a ``GENERATED ALWAYS`` one (``INSERT *``
    gives every target column the source has). Names match ignoring case. Runs on the driver, before any data moves.

    Raises:
        SqlError: ``DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED`` or
            ``DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED``.
    """
    if not identity:
        return {}
    source = {c.lower() for c in source_columns}
    generating: dict[IdentityColumn, list[int]] = {}
    for index, clause in enumerate(clauses):
        if clause.kind == "delete":
            continue
        given = (
            list(clause.assignments)
            if clause.assignments is not None
            else [c for c in target_columns if c.lower() in source]
        )
        if clause.kind == "update":
            check_not_updated(identity, given)
            continue
        lowered = {g.lower() for g in given}
        for column in identity:
            if column.name.lower() not in lowered:
                generating.setdefault(column, []).append(index)
            elif not column.allow_explicit_insert:
                raise explicit_insert_error(column.name)
    return generating


def _numbered_clauses(generating: Mapping[IdentityColumn, Sequence[int]]) -> list[int]:
    """The insert clauses whose rows get a :data:`_ROW_ID`: those leaving out an identity column the merge generates."""
    return sorted({i for indexes in generating.values() for i in indexes})


def _fill_identity(actions: DataFrame, generating: Mapping[IdentityColumn, Sequence[int]]) -> DataFrame:
    """The actions with each generated identity column's values: the inserted rows of the clauses that leave it out
    are numbered densely (0, 1, ... in :data:`_ROW_ID` order, from per-task counts the driver collects) and get
    ``base + step * n``, ``base`` being the high-water mark read plus step (or start), as one task of Delta's
    write would give them. Executors compute the values; a value beyond BIGINT fails the merge (Spark's ANSI
    overflow). Runs on the driver (plans only, one small Spark job over the cached actions)."""
    import pyspark.sql.functions as F

    numbered = _numbered_clauses(generating)
    task = F.shiftrightunsigned(F.col(_ROW_ID), TASK_BITS)
    per_task = actions.where(F.col(_CLAUSE).isin(numbered)).groupBy(task.alias("task")).count().collect()
    offsets: list[Any] = []
    total = 0
    for row in sorted(per_task, key=lambda r: int(r["task"])):
        offsets += [F.lit(int(row["task"])), F.lit(total).cast("long")]
        total += int(row["count"])
    if not offsets:
        return actions
    position = F.element_at(F.create_map(*offsets), task) + F.col(_ROW_ID).bitwiseAND(F.lit((1 << TASK_BITS) - 1))
    for column, indexes in generating.items():
        value = F.lit(column.base).cast("long") + F.lit(column.step).cast("long") * position
        actions = actions.withColumn(
            column.name, F.when(F.col(_CLAUSE).isin(list(indexes)), value).otherwise(F.col(column.name))
        )
    return actions


@dataclass
class _Counts:
    touched: set[str]
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    matched_updated: int = 0
    matched_deleted: int = 0
    target_rows_changed: int = 0
    writing_clauses: list[int] = field(default_factory=list)


def _count_actions(actions: DataFrame, clauses: Sequence[MergeClause]) -> list[tuple[str | None, int, int, int]]:
    """(file, clause, rows, most source rows on one target row) per file and clause, in one Spark job.

    Inserted rows have no target row (null file); every other action names its target row, and a target row
    acted on by two source rows is Delta's "multiple source rows matched" error (unless only deletes apply)."""
    import pyspark.sql.functions as F

    per_row = actions.groupBy(FILE_COLUMN, ROW_COLUMN).agg(F.count(F.lit(1)).alias("n"), F.min(_CLAUSE).alias(_CLAUSE))
    inserts = actions.where(F.col(FILE_COLUMN).isNull()).groupBy(_CLAUSE).agg(F.count(F.lit(1)).alias("n"))
    per_file = (
        per_row.where(F.col(FILE_COLUMN).isNotNull())
        .groupBy(FILE_COLUMN, _CLAUSE)
        .agg(F.count(F.lit(1)).alias("rows"), F.max("n").alias("most"))
        .unionByName(
            inserts.select(
                F.lit(None).cast("string").alias(FILE_COLUMN), _CLAUSE, F.col("n").alias("rows"), F.lit(1).alias("most")
            )
        )
    )
    rows = per_file.collect()
    out = [(r[FILE_COLUMN], int(r[_CLAUSE]), int(r["rows"]), int(r["most"])) for r in rows]
    deletes_only = all(c.kind == "delete" and c.condition is None for c in clauses if c.when == "matched")
    if any(most > 1 for _, _, _, most in out) and not deletes_only:
        raise SchemaMismatchError(
            "MERGE: multiple source rows matched and attempted to modify the same target row; make the source "
            "hold at most one row per target row (e.g. deduplicate it by the merge keys)"
        )
    return out


def _tally(per_file: list[tuple[str | None, int, int, int]], clauses: Sequence[MergeClause]) -> _Counts:
    counts = _Counts(touched=set())
    counts.writing_clauses = [i for i, c in enumerate(clauses) if c.kind != "delete"]
    changed_rows: dict[str, int] = {}
    for path, index, rows, _ in per_file:
        clause = clauses[index]
        if clause.kind == "insert":
            counts.inserted += rows
            continue
        if path is None:
            continue
        counts.touched.add(path)
        changed_rows[path] = changed_rows.get(path, 0) + rows
        if clause.kind == "update":
            counts.updated += rows
            if clause.when == "matched":
                counts.matched_updated += rows
        else:
            counts.deleted += rows
            if clause.when == "matched":
                counts.matched_deleted += rows
    counts.target_rows_changed = sum(changed_rows.values())
    return counts


__all__ = ["MergeClause", "MergeResult", "equi_keys", "latest_per_key", "merge_into", "merge_latest"]
