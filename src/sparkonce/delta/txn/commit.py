"""Driver side: one Delta commit per batch, carrying the batch's files and its ``txn`` action.

This is where exactly-once lives. For a batch with ``(app_id, txn_version)``:

1. read the newest table snapshot (sparkonce's own, from the newest checkpoint, kept between batches and brought
   up to date by reading only the commits since: :mod:`sparkonce.delta.log.table_view`); if the table's
   ``txn_version(app_id) >= txn_version`` the batch is already in the table: skip it (and delete the files this
   attempt wrote that no Delta commit references: :mod:`sparkonce.delta.txn.cleanup`);
2. otherwise commit the files and ``txn(app_id, txn_version)`` as table version ``read_version + 1``, with no
   automatic rebase: sparkonce writes the commit file itself (as Delta writes it, :mod:`sparkonce.delta.log.log_entry`),
   and the store's put-if-absent makes exactly one writer win that version;
3. when the commit fails, first ask whether it landed all the same: every commit carries a fresh
   ``commitInfo.txnId``, and a commit since the first read that carries it is this call's (the store applied the
   log file's PUT and lost its answer, or the retried PUT found the file this call wrote). Then it is done.
   Otherwise, on a lost race, wait a jittered backoff, reload and go back to 1. A concurrent run of the same batch
   that won makes this one skip; an unrelated writer that won makes this one retry on top of it, unless its commit
   conflicts with what this one read by Delta's rules (:mod:`sparkonce.delta.txn.conflicts`).

The first write to a new table is table version 0, as with Delta's JVM connector: protocol, metadata, the files
and the txn in one commit, put-if-absent like any other. Of writers racing to create the table exactly one
wins; the others find the table and go on at step 1 (a replayed batch 0 is then skipped).

:class:`Transaction` is the one commit engine, under every Delta commit sparkonce makes: the attempts, the
put-if-absent, the check whether an attempt that reported a failure landed all the same, Delta's conflict rules
against the winners of a lost race, the jittered backoff and the ``delta_commit`` retry line. :func:`commit_files`
plans the commits of every writer on it (txn check, the first commit, the files, checkpoint and log cleanup after),
and ALTER TABLE its metadata commits (:mod:`sparkonce.delta.ops.alter`).

Why one module of ~1,100 lines: the engine, :func:`commit_files` and the protocol, metadata and add/cdc actions it
writes belong to one set of invariants.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import quote, unquote

import pyarrow as pa

from sparkonce._types import TableVersion
from sparkonce.delta.log.actions import (
    Action,
    AddAction,
    AddFile,
    CdcAction,
    CommitInfo,
    DeletionVectorDescriptor,
    Metadata,
    PartitionValues,
    Protocol,
    RemoveAction,
    RemoveFile,
    encode_actions,
)
from sparkonce.delta.log.delta_log import DeltaLog, Snapshot, advance
from sparkonce.delta.log.log_checkpoint import write_checkpoint
from sparkonce.delta.log.log_entry import (
    BLIND_APPENDS,
    Operation,
    WrittenFile,
    check_writable,
    commit_info,
    file_metrics,
    new_table_metadata,
    overwrite_metrics,
)
from sparkonce.delta.log.table_view import AnyTable, LogTable, current_table, existing_table, remember_table
from sparkonce.delta.table import type_widening
from sparkonce.delta.table.column_mapping import mapping_mode, new_table_columns, replaced_columns, with_new_columns
from sparkonce.delta.table.identity import IDENTITY_WRITING_REWRITES, REWRITES_KEEPING_VALUES, IdentityPlan
from sparkonce.delta.table.properties import new_table_protocol
from sparkonce.delta.table.protocol import upgraded
from sparkonce.delta.table.schema import (
    delta_fields,
    delta_schema_string,
    merge_fields,
    reconcile,
    table_fields,
    table_schema_string,
)
from sparkonce.delta.txn.cleanup import find_commit, remove_unreferenced_files
from sparkonce.delta.txn.conflicts import ReadSet, check_winners
from sparkonce.delta.txn.log_cleanup import cleanup_expired_logs
from sparkonce.delta.txn.restores import restored_app_id, undone_batch
from sparkonce.errors import (
    CommitConflictError,
    CommitRetriesExceededError,
    ConcurrentDeleteReadError,
    DeltaLogError,
    OptionError,
    SchemaMismatchError,
    SinkError,
    SqlError,
    StorageError,
    TableNotFoundError,
)
from sparkonce.retries import log_retry
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

CommitMode = Literal["append", "overwrite"]


@dataclass(frozen=True)
class BatchTxn:
    """The Delta ``txn`` action of a batch: ``appId`` and ``version``."""

    app_id: str
    txn_version: int


@dataclass(frozen=True)
class CommitResult:
    """What the driver-side commit did."""

    table_version: TableVersion | None
    """The Delta commit made for these files, or None when the batch was skipped."""
    skipped: bool
    """True when the table already held this batch's txn (a replayed batch), or mode ``ignore`` found a table."""
    attempts: int
    files_added: int
    rows_added: int
    files_removed: int = 0


@dataclass(frozen=True)
class RemovedFile:
    """A data file of the table that a Delta commit removes (a rewrite such as a merge replaces it)."""

    path: str
    """As the table's ``add`` action names it, relative to the table root."""
    size: int
    partition_values: PartitionValues
    deletion_vector: DeletionVectorDescriptor | None = None
    """The ``deletionVector`` descriptor of the file's ``add`` action: the ``remove`` must carry it, since a Delta
    reader matches an ``add`` and its ``remove`` on (path, deletion vector)."""


def table_exists(table: str | TableLocation) -> bool:
    """True when ``table`` holds a Delta table (a ``_delta_log`` with commits)."""
    from deltalake import DeltaTable

    location = table_location(table)
    try:
        return bool(DeltaTable.is_deltatable(location.uri, storage_options=location.options() or None))
    except OSError as err:
        raise location.store_error(err) from err


def load_table(table: str | TableLocation, *, table_version: int | None = None) -> DeltaTable:
    """Open a Delta table, turning delta-rs errors into sparkonce errors naming the table.

    Raises:
        StorageError: ``table`` is not a valid table location.
        TableNotFoundError: no Delta table there.
        DeltaLogError: the log cannot be read (the message names the broken commit file when it can).
        VersionNotFoundError: ``table_version`` is beyond the latest or was removed by log cleanup.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError
    from deltalake.exceptions import TableNotFoundError as RsTableNotFound

    location = table_location(table)
    try:
        return DeltaTable(location.uri, version=table_version, storage_options=location.options() or None)
    except RsTableNotFound as err:
        if table_version is not None:  # a table whose log starts later (log cleanup), or ends earlier
            _check_table_version(location, table_version)
        raise TableNotFoundError(f"{location} is not a Delta table (no _delta_log commits found)") from err
    except OSError as err:
        raise location.store_error(err) from err
    except DeltaError as err:
        if table_version is not None:
            _check_table_version(location, table_version)
        where = f" at table version {table_version}" if table_version is not None else ""
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise _diagnose_log(location) or DeltaLogError(
            f"cannot read the Delta log of {location}{where}: {first_line}"
        ) from err
    except BaseException as err:
        # delta-rs panics (pyo3's PanicException, a BaseException) on some damaged Parquet checkpoints, e.g. the
        # parquet crate's "Decoder for dict should have been set": a damaged log, not a crash of the caller.
        if type(err).__name__ != "PanicException":
            raise
        panic = str(err).splitlines()[0] if str(err) else "panic"
        raise _diagnose_log(location) or DeltaLogError(
            f"cannot read the Delta log of {location}: delta-rs failed on it ({panic})"
        ) from err


def _check_table_version(location: TableLocation, table_version: int) -> None:
    """Raise Delta's ``DELTA_VERSION_NOT_FOUND`` when ``table_version`` is outside the versions the log can rebuild.

    Raises:
        VersionNotFoundError: it is (the message names the available range and, after log cleanup, the retention).
    """
    from sparkonce.delta.log.delta_log import DeltaLog

    try:
        delta_log = DeltaLog(location)
    except (TableNotFoundError, StorageError):
        return  # the caller's own error says it better
    delta_log.check_table_version(table_version)


def committed_txn_version(table: AnyTable, txn: BatchTxn) -> int | None:
    """The one "is this batch already in the table" check.

    Returns:
        The table's ``txn_version`` for ``txn.app_id`` when it is ``>= txn.txn_version`` (the batch, or a later
        one of the same app, is already committed), else None.
    """
    committed = table.transaction_version(txn.app_id)
    return int(committed) if committed is not None and committed >= txn.txn_version else None


def refuse_undone_batch(location: TableLocation, read_version: int, txn: BatchTxn) -> None:
    """Refuse to skip a batch whose txn the table holds only because a RESTORE kept it (its rows were undone).

    Called where :func:`committed_txn_version` found the batch "already in the table"; reads the Delta commits from
    ``read_version`` down to the one that wrote the batch (:func:`~sparkonce.delta.txn.restores.undone_batch`).

    Raises:
        SinkError: a RESTORE undid the batch and it was not written again under the safe app id; the message gives
            that app id (:func:`~sparkonce.delta.txn.restores.restored_app_id`).
    """
    undone = undone_batch(DeltaLog(location), read_version, txn.app_id, txn.txn_version)
    if undone is None or undone.rewritten:
        return
    safe = restored_app_id(txn.app_id, undone.restore_table_version)
    raise SinkError(
        f"batch {txn.txn_version} of app id {txn.app_id} is not in {location}: the RESTORE at table version "
        f"{undone.restore_table_version} (to table version {undone.restored_table_version}) undid its commit (table "
        f"version(s) {', '.join(map(str, undone.table_versions))}), but a RESTORE keeps the txn, so the table "
        f"would skip it and its rows would be lost (delta-io/delta#1813). Nothing was written. Write the undone "
        f"batches {', '.join(map(str, undone.batch_ids))} again under a new app id: a batch write with "
        f".option('txnAppId', '{safe}').option('txnVersion', <batch id>) for each (sparkonce doctor names their "
        f"offsets); a stream whose query id is {txn.app_id} goes on under that id once they are written"
    )


def table_committed_txn_version(table: str | TableLocation, txn: BatchTxn) -> int | None:
    """:func:`committed_txn_version` on the newest table version (the snapshot this process keeps, brought up to
    date: :func:`sparkonce.delta.log.table_view.current_table`); None when there is no table yet.

    Raises:
        SinkError: the batch's txn is there but a RESTORE undid its rows (:func:`refuse_undone_batch`).
    """
    current = current_table(table)
    committed = None if current is None else committed_txn_version(current, txn)
    if committed is not None:
        assert current is not None
        refuse_undone_batch(table_location(table), int(current.version()), txn)
    return committed


def _diagnose_log(location: TableLocation) -> DeltaLogError | None:
    """After delta-rs failed to load a log, find the commit file that is broken (newest first) to name it."""
    from sparkonce.delta.log.delta_log import DeltaLog

    try:
        delta_log = DeltaLog(location)
        for table_version in reversed(delta_log.commit_versions()):
            delta_log.read_actions(table_version)
    except DeltaLogError as found:
        return found
    except Exception:  # the diagnosis is best effort; the caller raises its own error
        return None
    return None


def commit_files(
    table: str | TableLocation,
    files: Iterable[WrittenFile],
    *,
    data_schema: pa.Schema,
    partition_by: tuple[str, ...] = (),
    mode: CommitMode = "append",
    txn: BatchTxn | None = None,
    merge_schema: bool = False,
    overwrite_schema: bool = False,
    custom_metadata: Mapping[str, Any] | None = None,
    max_attempts: int = 100,
    removes: Iterable[RemovedFile] = (),
    data_change: bool = True,
    snapshot: AnyTable | None = None,
    written_after: int | None = None,
    new_table_properties: Mapping[str, str] | None = None,
    replace_configuration: Mapping[str, str] | None = None,
    table_description: str | None = None,
    new_table_clustering: tuple[str, ...] = (),
    identity: IdentityPlan | None = None,
    change_files: Iterable[WrittenFile] = (),
    read: ReadSet | None = None,
    checkpoint_part_size: int | None = None,
    create_only: bool = False,
    readded: Iterable[AddFile] = (),
    deletion_vector_files: Iterable[str] = (),
) -> CommitResult:
    """Commit ``files`` (already written under the table root) in one Delta commit, exactly once per ``txn``.

    Creates the table from ``data_schema`` and ``partition_by`` when it does not exist yet (its first commit holds
    the protocol, the metadata and the files). ``removes`` (append mode only) are files of the table that the same
    Delta commit removes: a rewrite replaces them with ``files``. Each attempt checks that they are still active
    with the deletion vector they were read with; a concurrent writer that removed or changed one is a conflict,
    while a blind append is not (the commit is remade on top of it). ``data_change=False`` marks every ``add``
    and ``remove`` as a rearrangement of rows already in the table (compaction), so streaming readers skip them.
    ``custom_metadata`` names the operation (:func:`sparkonce.delta.log.log_entry.commit_metadata`); the commit is
    written as Delta writes that operation (:mod:`sparkonce.delta.log.log_entry`). ``snapshot``: the table, loaded
    moments ago by the caller; the first attempt uses it instead of loading the table again. A stale one costs nothing
    but a retry: the commit of its next table version fails if that version exists, and the retry loads the table afresh
    (txn check included). ``written_after``: the table version read before ``files`` were written (default: the
    version this call reads first); only later commits can name them. ``new_table_properties``: the
    ``metaData.configuration`` of the table when this commit creates it (:mod:`sparkonce.delta.table.properties`).
    ``replace_configuration``: the table's new ``metaData.configuration`` when this commit replaces the table
    (``overwriteSchema``; Delta's ``REPLACE TABLE`` with its properties); None keeps the table's.
    ``table_description``: the table's comment (``metaData.description``) when this commit creates the table or
    replaces its schema (``overwriteSchema``); None keeps the comment the table has. ``new_table_clustering``: the
    clustering columns of the table when this commit creates it (:mod:`sparkonce.delta.table.clustering`). ``identity``:
    the identity columns the files' writers filled (:func:`sparkonce.delta.table.identity.plan_identity`); the commit
    moves their high-water marks, and is a conflict when a concurrent commit moved them first. ``change_files``: change
    data files (``_change_data/``, :mod:`sparkonce.delta.write.cdf`) the commit records as ``cdc`` actions. ``read``:
    what the transaction read (a rewrite: its table version, files and partitions); every commit after its
    ``read_version`` is checked against it by Delta's rules (:mod:`sparkonce.delta.txn.conflicts`) before this commit
    is made on top. None: a blind append, which read the table version this call loads first.
    ``checkpoint_part_size``: Delta's ``spark.databricks.delta.checkpoint.partSize``, the most actions per file
    of a checkpoint this commit writes (None: one file). ``create_only``: commit only when this commit creates the
    table; a table found there (another writer created it first) is left as it is and the call is skipped.
    ``readded``: ``add`` actions of files of the table that ``removes`` also names, committed again with a new
    deletion vector (a DELETE, UPDATE or MERGE that marks rows deleted); ``deletion_vector_files``: the new deletion
    vector files they name (relative to the table root), deleted with ``files`` when this call commits nothing.

    Raises:
        SchemaMismatchError: the data does not fit the table and no schema option allows the change.
        UnsupportedFeatureError: the table's protocol asks something of writers that sparkonce does not do.
        CommitConflictError: a concurrent commit conflicts by Delta's rules (its subclasses,
            ``ConcurrentAppendError``, ...), or a file to remove is gone or changed (``ConcurrentDeleteReadError``).
        CommitRetriesExceededError: lost ``max_attempts`` races in a row to commits that did not conflict.
    """
    files = list(files)
    removes = list(removes)
    if removes and mode != "append":
        raise OptionError("mode", mode, "removes go with mode append (an overwrite removes every file already)")
    location = table_location(table)
    location.check_commit_safety()
    table_uri = str(location)
    partition_by = tuple(partition_by)
    operation = Operation.from_metadata(custom_metadata)
    adds = [_add_action(f, data_change) for f in files] + [AddAction(add=a) for a in readded]
    change_files = list(change_files)
    cdcs = [_cdc_action(f) for f in change_files]
    rows = sum(f.num_records for f in files)
    attempt_files = [f.path for f in [*files, *change_files]] + list(deletion_vector_files)
    """What this call wrote before committing, deleted when it commits nothing."""
    if written_after is None and read is not None:
        written_after = read.read_version
    transaction = Transaction(
        location,
        what=f"{operation.name}, txn {txn}",
        read=read,
        removes=[r.path for r in removes],
        changes_metadata=merge_schema or overwrite_schema,
        max_attempts=max_attempts,
        written_after=written_after,
    )
    skipped_at: int | None = None
    """The attempt that found the batch in the table already."""
    made: tuple[AnyTable, CommitInfo, list[Action], Protocol] | None = None
    """What the last attempt planned on: its snapshot, commitInfo, other actions and protocol (the table's)."""

    def plan(attempt: int) -> PlannedCommit | None:
        nonlocal snapshot, written_after, skipped_at, made
        now = int(time.time() * 1000)
        if snapshot is None or attempt > 1:
            snapshot = current_table(location)
            if snapshot is None:
                if written_after is None:
                    written_after = -1
                entry = _first_commit(
                    location,
                    adds,
                    data_schema,
                    partition_by,
                    operation,
                    txn,
                    transaction.commit_id,
                    now,
                    new_table_properties or {},
                    table_description,
                    new_table_clustering,
                )
                made = None
                return PlannedCommit(-1, entry)
        if create_only:
            skipped_at = attempt
            return None
        read_version = int(snapshot.version())
        if written_after is None:
            written_after = read_version
        if txn is not None:
            committed = committed_txn_version(snapshot, txn)
            if committed is not None:
                try:
                    refuse_undone_batch(location, read_version, txn)
                except SinkError:
                    remove_unreferenced_files(
                        location,
                        attempt_files,
                        written_after=written_after,
                        purpose=f"refused batch (txn {txn.app_id} {txn.txn_version})",
                    )
                    raise
                cleanup = remove_unreferenced_files(
                    location,
                    attempt_files,
                    written_after=written_after,
                    purpose=f"skipped batch (txn {txn.app_id} {txn.txn_version})",
                )
                log.info(
                    "skipping batch: table %s already holds txn(app_id=%s, txn_version=%s) >= %s "
                    "(table_version %s); removed %d unreferenced file(s) of this attempt",
                    table_uri,
                    txn.app_id,
                    committed,
                    txn.txn_version,
                    read_version,
                    cleanup.removed,
                )
                skipped_at = attempt
                return None
        try:
            transaction.check_conflicts(read_version)
        except CommitConflictError as conflict:  # this call commits nothing: its files are garbage
            remove_unreferenced_files(
                location,
                attempt_files,
                written_after=written_after,
                purpose=f"conflicting {operation.name} ({type(conflict).__name__})",
            )
            raise
        metadata = snapshot.metadata()
        table_partitions = tuple(metadata.partition_columns)
        replacing = mode == "overwrite" and overwrite_schema  # Delta: the table's partitioning becomes the given one
        if partition_by and table_partitions != partition_by and not replacing:
            raise SchemaMismatchError(
                f"partition columns {list(partition_by)} do not match the table's {list(table_partitions)} "
                f"at {table_uri}"
            )
        schema_string = table_schema_string(snapshot)
        protocol = protocol_action(snapshot)
        check_writable(
            protocol,
            dict(metadata.configuration),
            schema_string,
            table=table_uri,
            operation=operation.name,
            removes_rows=data_change and (mode == "overwrite" or bool(removes)),
            identity_handled=replacing or identity is not None or operation.name in REWRITES_KEEPING_VALUES,
        )
        new_schema, new_configuration = _schema_change(
            snapshot, table_uri, data_schema, mode, merge_schema, overwrite_schema
        )
        replacement: list[Action] = []
        configuration = dict(metadata.configuration)
        if replacing and replace_configuration is not None:
            configuration = dict(replace_configuration)
        if replacing and new_schema is not None:
            new_schema, replacement = _replacement(
                location,
                read_version,
                protocol,
                configuration,
                new_schema,
                partition_by,
                new_table_clustering,
                files,
            )
        if identity is not None:  # the identity columns' new high-water marks (a conflict if another writer moved them)
            moved = identity.updated_fields(json.loads(new_schema or schema_string)["fields"], files, table=table_uri)
            if moved is not None:
                new_schema = json.dumps({"type": "struct", "fields": moved}, separators=(",", ":"))
        if replacing and (
            table_partitions != partition_by
            or table_description not in (None, metadata.description)
            or configuration != dict(metadata.configuration)
        ):
            new_schema = new_schema or schema_string
        removals = _removals(location, snapshot, mode, removes, data_change, now)
        actions: list[Action] = [a for a in replacement if "protocol" in a]
        if new_schema is not None:
            partitions = partition_by if replacing else None
            comment = table_description if replacing else None
            action = metadata_action(
                metadata,
                new_schema,
                _chosen_configuration(new_configuration, configuration if replacing else None),
                partition_columns=partitions,
                description=comment,
            )
            actions.append({"metaData": action})
        actions += [a for a in replacement if "protocol" not in a]
        if txn is not None:
            actions.append({"txn": {"appId": txn.app_id, "version": txn.txn_version, "lastUpdated": now}})
        actions += [*removals, *adds, *cdcs]
        reads_anything = transaction.read is not None and transaction.read.reads_anything
        blind = operation.name in BLIND_APPENDS and mode == "append" and not removes and not reads_anything
        metrics = (
            operation.metrics
            if operation.metrics is not None
            else overwrite_metrics(
                operation,
                file_metrics(operation.name, [a["add"] for a in adds], len(removals)),
                [r["remove"] for r in removals],
            )
        )
        # Delta's readVersion: the table version the transaction read, kept when a retry commits on top of winners.
        first_read = transaction.read.read_version if transaction.read is not None else read_version
        info = commit_info(
            operation,
            commit_id=transaction.commit_id,
            read_version=first_read,
            blind_append=blind,
            metrics=metrics,
            now_ms=now,
        )
        made = (snapshot, info, actions, protocol)
        return PlannedCommit(read_version, [{"commitInfo": info}, *actions])

    done = transaction.run(plan)
    if done is None:
        assert skipped_at is not None
        return CommitResult(None, True, skipped_at, 0, 0)
    removed = len(removes)
    if done.planned is not None and made is not None:  # this call's PUT made it: the state after, a checkpoint
        base, info, actions, protocol = made
        removed = sum(1 for a in actions if "remove" in a)
        log.info(
            "Delta commit table_version %s on %s (%s): %d file(s), %d row(s), %d file(s) removed, txn %s",
            done.table_version,
            table_uri,
            operation.name,
            len(files),
            rows,
            removed,
            txn,
        )
        after_commit: Snapshot | None = None
        if isinstance(base, LogTable):  # the state after this commit, without reading the log again
            after_commit = advance(base.snapshot, done.table_version, [{"commitInfo": info}, *actions])
            remember_table(location, after_commit)
        checkpoint_if_due(
            location,
            done.table_version,
            dict(base.metadata().configuration),
            protocol,
            snapshot=after_commit,
            part_size=checkpoint_part_size,
        )
    elif done.planned is not None:
        log.info(
            "Delta commit table_version 0 on %s (table created): %d file(s), %d row(s), txn %s",
            table_uri,
            len(files),
            rows,
            txn,
        )
        removed = 0
    return CommitResult(done.table_version, False, done.attempt, len(files), rows, removed)


@dataclass(frozen=True)
class PlannedCommit:
    """What one attempt of a :class:`Transaction` commits: its actions (``commitInfo`` first, carrying the
    transaction's ``txnId``) as the table version after ``read_version``, the snapshot the attempt read (-1: there
    is no table yet; the commit creates it as table version 0)."""

    read_version: int
    actions: list[Action]


@dataclass(frozen=True)
class Committed:
    """The Delta commit a :class:`Transaction` made."""

    table_version: TableVersion
    attempt: int
    planned: PlannedCommit | None
    """The attempt whose commit file this call wrote; None when an attempt reported a failure and the commit was
    then found in the log, carrying the transaction's ``txnId`` (it landed all the same)."""


class Transaction:
    """One Delta commit, retried until it lands: sparkonce's one commit engine. Runs on the driver.

    Every Delta commit sparkonce makes goes through it: streaming batches, batch writes and rewrites
    (:func:`commit_files`), and the metadata commits of ALTER TABLE (:mod:`sparkonce.delta.ops.alter`: properties,
    protocol upgrades, columns, constraints, features, clustering). :meth:`run` calls the caller's
    ``plan(attempt)``, which reads the newest snapshot, calls :meth:`check_conflicts` with its table version, and
    returns the commit (or None: nothing to commit, e.g. a batch already in the table). The engine writes it
    put-if-absent as the next table version; when the store reports a failure, or another writer made that
    version first, it looks for the transaction's ``commitInfo.txnId`` in the log (the attempt may have landed all
    the same: the store applied the PUT and lost its answer). Otherwise a lost race is logged
    (:func:`sparkonce.retries.log_retry`, kind ``delta_commit``), followed by a jittered exponential backoff
    (:func:`retry_delay`), and the next attempt plans again on the new snapshot, where :meth:`check_conflicts`
    holds the winners against what the transaction read by Delta's rules (:mod:`sparkonce.delta.txn.conflicts`).
    """

    def __init__(
        self,
        location: TableLocation,
        *,
        what: str,
        read: ReadSet | None = None,
        removes: Sequence[str] = (),
        changes_metadata: bool = False,
        max_attempts: int = 100,
        written_after: int | None = None,
    ) -> None:
        """``what``: the operation, as log lines and errors name it. ``read``: what the transaction read (None: a
        blind append, which reads the table version of its first attempt). ``removes``: the paths its commit
        removes; ``changes_metadata``: its commit changes the protocol or metadata (Delta's rules then hold a
        winner's protocol or metadata change against it). ``written_after``: a table version before the first
        read after which the commit may be found (files written before the first attempt)."""
        self.location = location
        self.what = what
        self.read = read
        self.removes = list(removes)
        self.changes_metadata = changes_metadata
        self.max_attempts = max_attempts
        self.written_after = written_after
        self.commit_id = str(uuid.uuid4())
        """The ``commitInfo.txnId`` of every attempt: how the engine finds the commit in the log."""
        self._checked_through = read.read_version if read is not None else None
        self._first_read: int | None = None

    def check_conflicts(self, read_version: int) -> None:
        """Hold every commit after the table version checked last, through ``read_version`` (the snapshot this
        attempt read), against what the transaction read, by Delta's rules; the first call of a blind append
        only notes ``read_version`` as what it read.

        Raises:
            CommitConflictError: a winner conflicts (its subclass names Delta's exception).
            DeltaLogError: a winner's commit file cannot be read.
        """
        if self.read is None or self._checked_through is None:
            self.read = self.read or ReadSet(read_version)
            self._checked_through = self.read.read_version
        check_winners(
            self.location,
            self.read,
            after=self._checked_through,
            through=read_version,
            removes=self.removes,
            changes_metadata=self.changes_metadata,
        )
        self._checked_through = read_version

    def run(self, plan: Callable[[int], PlannedCommit | None]) -> Committed | None:
        """Commit what ``plan(attempt)`` gives, attempt after attempt (1-based), until a commit lands; None when a
        plan has nothing to commit.

        Raises:
            CommitRetriesExceededError: lost ``max_attempts`` races in a row to commits that did not conflict.
            CommitConflictError: from :meth:`check_conflicts`.
            StorageError: the store failed and the commit did not land.
        """
        for attempt in range(1, self.max_attempts + 1):
            planned = plan(attempt)
            if planned is None:
                return None
            if planned.read_version >= 0:
                assert self._checked_through == planned.read_version, "plan() must check_conflicts() on its read"
            if self._first_read is None:
                self._first_read = planned.read_version
            target = planned.read_version + 1
            try:
                made = self.location.put_if_absent(f"_delta_log/{target:020d}.json", encode_actions(planned.actions))
            except Exception:
                if (done := self._landed(attempt)) is not None:  # the store may have applied the PUT it failed on
                    return done
                raise
            if made:
                return Committed(TableVersion(target), attempt, planned)
            if (done := self._landed(attempt)) is not None:
                return done
            pause = retry_delay(attempt)
            log_retry(
                log,
                "delta_commit",
                "attempt %d of %d to commit table_version %s on %s (%s) lost the race to another writer; again on "
                "top of it in %.3fs",
                attempt,
                self.max_attempts,
                target,
                self.location,
                self.what,
                pause,
            )
            time.sleep(pause)
        raise CommitRetriesExceededError(
            str(self.location), self.max_attempts, f"{self.what}, first read table_version {self._first_read}"
        )

    def _landed(self, attempt: int) -> Committed | None:
        """The transaction's commit, when an attempt that reported a failure (or lost) made it all the same."""
        assert self._first_read is not None
        after = self._first_read if self.written_after is None else min(self.written_after, self._first_read)
        table_version = find_commit(self.location, self.commit_id, after=after)
        if table_version is None:
            return None
        log.warning(
            "Delta commit table_version %s on %s (%s) landed although attempt %d reported a failure: done",
            table_version,
            self.location,
            self.what,
            attempt,
        )
        return Committed(TableVersion(table_version), attempt, None)


RETRY_BASE_SECONDS = 0.005
RETRY_CAP_SECONDS = 0.5


def retry_delay(attempt: int) -> float:
    """The pause after losing the race for a table version on ``attempt``: "full jitter" exponential backoff,
    uniform in ``[0, min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2**(attempt - 1))]``. Many writers that lost the
    same race then spread out instead of all reloading and retrying the next version at once."""
    return random.uniform(0.0, min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** min(attempt - 1, 16)))


def check_rewrite_supported(location: TableLocation, table: DeltaTable, table_uri: str, operation: str) -> None:
    """Refuse, before any data moves, a rewrite (DELETE, UPDATE, MERGE, OPTIMIZE) that sparkonce cannot commit.

    Raises:
        UnsupportedFeatureError: the table's protocol asks something of a writer that removes rows and that
            sparkonce does not do.
        StorageError: the store cannot make the commit atomic.
    """
    location.check_commit_safety()
    metadata = table.metadata()
    check_writable(
        protocol_action(table),
        dict(metadata.configuration),
        table.schema().to_json(),
        table=table_uri,
        operation=operation,
        removes_rows=operation != "OPTIMIZE",
        identity_handled=operation in REWRITES_KEEPING_VALUES or operation in IDENTITY_WRITING_REWRITES,
    )


def protocol_action(table: AnyTable) -> Protocol:
    """The table's ``protocol`` action as the log holds it (feature lists only with reader 3 / writer 7)."""
    protocol = table.protocol()
    out: Protocol = {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
    }
    if protocol.min_reader_version >= 3:
        out["readerFeatures"] = sorted(protocol.reader_features or [])
    if protocol.min_writer_version >= 7:
        out["writerFeatures"] = sorted(protocol.writer_features or [])
    return out


def _add_action(f: WrittenFile, data_change: bool) -> AddAction:
    """The ``add`` action of a written file; its path URL-encoded as the protocol's URIs are (``%`` of Hive-escaped
    partition values included), readable back with ``unquote``."""
    add: AddFile = {
        "path": quote(f.path, safe=_PATH_SAFE),
        "partitionValues": f.partition_values,
        "size": f.size,
        "modificationTime": f.modification_time,
        "dataChange": data_change,
        "stats": f.stats,
    }
    if f.clustering_provider is not None:
        add["clusteringProvider"] = f.clustering_provider
    return {"add": add}


def _cdc_action(f: WrittenFile) -> CdcAction:
    """The ``cdc`` action of a change data file (protocol: "Add CDC File"); never a data change itself."""
    return {
        "cdc": {
            "path": quote(f.path, safe=_PATH_SAFE),
            "partitionValues": f.partition_values,
            "size": f.size,
            "dataChange": False,
        }
    }


_PATH_SAFE = "/!$&'()*+,;=:@"
"""Characters a URI path keeps as they are (RFC 3986 ``pchar`` and ``/``); everything else, ``%`` included, is
percent-encoded."""


def _removals(
    location: TableLocation,
    snapshot: AnyTable,
    mode: CommitMode,
    removes: list[RemovedFile],
    data_change: bool,
    now: int,
) -> list[RemoveAction]:
    """The ``remove`` actions: every active file for an overwrite, else ``removes`` (each checked still active with
    the deletion vector it was read with)."""
    if mode != "overwrite" and not removes:
        return []
    read_version = snapshot.version()
    active = (
        snapshot.snapshot.files
        if isinstance(snapshot, LogTable)
        else existing_table(location, table_version=read_version).snapshot.files
    )
    if mode == "overwrite":
        removes = [
            RemovedFile(
                path, int(add.get("size") or 0), dict(add.get("partitionValues") or {}), add.get("deletionVector")
            )
            for path, add in active.items()
        ]
    else:
        by_path = {unquote(k): v.get("deletionVector") for k, v in active.items()}
        changed = [r.path for r in removes if by_path.get(unquote(r.path), False) != r.deletion_vector]
        if changed:
            raise ConcurrentDeleteReadError(
                f"[DELTA_CONCURRENT_DELETE_READ] {len(changed)} file(s) to remove from {location} changed in "
                f"table_version {read_version} (a concurrent writer rewrote them or deleted rows of them), "
                f"e.g. {changed[0]}; read the table again and retry the operation"
            )
    actions: list[RemoveAction] = []
    for r in removes:
        remove: RemoveFile = {
            "path": r.path,
            "deletionTimestamp": now,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": r.partition_values,
            "size": r.size,
        }
        if r.deletion_vector is not None:
            remove["deletionVector"] = r.deletion_vector
        actions.append({"remove": remove})
    return actions


def _first_commit(
    location: TableLocation,
    adds: list[AddAction],
    data_schema: pa.Schema,
    partition_by: tuple[str, ...],
    operation: Operation,
    txn: BatchTxn | None,
    commit_id: str,
    now: int,
    properties: Mapping[str, str],
    description: str | None = None,
    clustering: tuple[str, ...] = (),
) -> list[Action]:
    """The actions of table version 0: the caller's operation, with the protocol and metadata of the new table.

    Raises:
        SchemaMismatchError: a partition column is not a data column.
        UnsupportedFeatureError: a property asks every writer for what sparkonce does not do.
    """

    unknown = [c for c in partition_by if c not in data_schema.names]
    if unknown:
        raise SchemaMismatchError(f"partition column(s) {unknown} are not columns of the data {data_schema.names}")
    # column mapping: the ids and physical names the files' writers used (sparkonce.delta.writer.new_table_mapping)
    schema_string, properties = new_table_columns(delta_schema_string(data_schema), properties, table=str(location))
    metrics = (
        operation.metrics
        if operation.metrics is not None
        else overwrite_metrics(operation, file_metrics(operation.name, [a["add"] for a in adds], 0), [])
    )
    parameters = dict(operation.parameters)
    if operation.name == "WRITE":
        parameters["partitionBy"] = list(partition_by)
    info = commit_info(
        Operation(operation.name, parameters, metrics, operation.user_metadata, operation.extras, operation.other),
        commit_id=commit_id,
        read_version=None,
        blind_append=operation.name in BLIND_APPENDS,
        metrics=metrics,
        now_ms=now,
    )
    protocol = new_table_protocol(schema_string, properties)
    domains: list[Action] = []
    if clustering:  # a clustered table (sparkonce.delta.table.clustering): the features and the domain's columns
        from sparkonce.delta.table.clustering import check_columns, domain_action, with_features

        fields = json.loads(schema_string)["fields"]
        columns = check_columns(clustering, fields, partition_by, table=str(location), configuration=properties)
        protocol = with_features(protocol)
        domains.append(domain_action(columns, fields))
    actions: list[Action] = [
        {"commitInfo": info},
        {"protocol": protocol},
        {"metaData": new_table_metadata(schema_string, partition_by, properties, description=description)},
        *domains,
    ]
    if txn is not None:
        actions.append({"txn": {"appId": txn.app_id, "version": txn.txn_version, "lastUpdated": now}})
    return actions + adds


def _replacement(
    location: TableLocation,
    read_version: int,
    protocol: Protocol,
    configuration: dict[str, str],
    new_schema: str,
    partition_by: tuple[str, ...],
    clustering: tuple[str, ...],
    files: Sequence[WrittenFile],
) -> tuple[str, list[Action]]:
    """The schema and the extra actions of a commit that replaces the table (``CREATE OR REPLACE``, ``REPLACE``,
    ``overwriteSchema``), as Delta writes them: identity columns of the new schema start afresh (their high-water
    marks from the rows this commit writes, none without rows); the protocol goes up to what the new schema and
    clustering need (never down: Delta keeps the features); a clustered table keeps being clustered, by the new
    ``clustering`` columns or by none (Delta's "Replace clustered table with non-clustered table"). Runs on the
    driver.

    Raises:
        SqlError: a clustered table replaced by a partitioned one (Delta's
            ``DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE``), or clustering columns the new schema lacks.
    """
    from sparkonce.delta.table import clustering as liquid
    from sparkonce.delta.table.identity import HIGH_WATER_MARK, identity_columns

    fields = json.loads(new_schema)["fields"]
    for f in fields:
        if HIGH_WATER_MARK in (f.get("metadata") or {}):
            f["metadata"] = {k: v for k, v in f["metadata"].items() if k != HIGH_WATER_MARK}
    fresh = identity_columns(fields)
    if fresh and files:
        marked = IdentityPlan.tracking(fresh).updated_fields(fields, files, table=str(location))
        fields = marked if marked is not None else fields
    schema_string = json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))
    extra: list[Action] = []
    old = liquid.table_clustering(location, read_version)
    if old is not None and partition_by:
        raise SqlError(
            "[DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE] Replacing a clustered Delta table with a "
            "partitioned table is not allowed."
        )
    features: tuple[str, ...] = ()
    if clustering:
        names = liquid.check_columns(clustering, fields, partition_by, table=str(location), configuration=configuration)
        extra.append(liquid.domain_action(names, fields))
        features = liquid.FEATURES
    elif old:
        extra.append(liquid.domain_action((), fields))
    new_protocol = upgraded(
        protocol, new_table_protocol(schema_string, configuration), {}, table=str(location), features=features
    )
    if _normal(new_protocol) != _normal(protocol):
        extra.insert(0, {"protocol": new_protocol})
    return schema_string, extra


def _normal(protocol: Mapping[str, Any]) -> dict[str, Any]:
    return {k: sorted(v) if isinstance(v, list) else v for k, v in protocol.items()}


def metadata_action(
    metadata: Any,
    schema_string: str,
    configuration: Mapping[str, str] | None = None,
    *,
    partition_columns: tuple[str, ...] | None = None,
    description: str | None = None,
) -> Metadata:
    """The table's ``metaData`` action with a new schema and, when given, a new ``configuration``, partition
    columns and comment (``description``; everything else as it was)."""
    comment = description if description is not None else metadata.description
    action = {  # Delta's order of keys: id, name, description, format, ...
        "id": metadata.id,
        **({"name": metadata.name} if metadata.name is not None else {}),
        **({"description": comment} if comment is not None else {}),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": list(metadata.partition_columns if partition_columns is None else partition_columns),
        "configuration": dict(metadata.configuration if configuration is None else configuration),
        "createdTime": metadata.created_time,
    }
    return cast(Metadata, action)


def _chosen_configuration(
    schema_configuration: Mapping[str, str] | None, replaced: Mapping[str, str] | None
) -> Mapping[str, str] | None:
    """The configuration of a commit that changes the schema: a REPLACE's properties (``replaced``) when given, with
    the column mapping keys the new schema needs (``schema_configuration``, e.g. ``delta.columnMapping.maxColumnId``)
    over them; else ``schema_configuration`` (None: unchanged)."""
    if replaced is None:
        return schema_configuration
    chosen = dict(replaced)
    if schema_configuration is not None:
        chosen.update({k: v for k, v in schema_configuration.items() if k.startswith("delta.columnMapping.")})
    return chosen


def _schema_change(
    table: AnyTable,
    table_uri: str,
    data_schema: pa.Schema,
    mode: CommitMode,
    merge_schema: bool,
    overwrite_schema: bool,
) -> tuple[str | None, dict[str, str] | None]:
    """The table's new ``schemaString`` when the commit changes the schema (``mergeSchema`` adds columns,
    ``overwriteSchema`` replaces them), else None; and its new configuration when that changes too (a
    column-mapped table's ``maxColumnId``), else None.

    Raises:
        SchemaMismatchError: the data does not fit and no option allows the change.
    """

    if mode == "overwrite" and overwrite_schema:
        if mapping_mode(table) != "none":  # the ids and physical names the files' writers used
            return replaced_columns(
                delta_schema_string(data_schema),
                table_fields(table),
                table.metadata().configuration,
                table=table_uri,
            )
        return delta_schema_string(data_schema), None
    current = table_fields(table)
    data_fields = delta_fields(data_schema)
    widening = type_widening.enabled(table.metadata().configuration)
    new_fields = reconcile(
        current,
        data_fields,
        merge_schema=merge_schema,
        table_id=str(table.metadata().id),
        table_path=table_uri,
        type_widening=widening,
    )
    merged = merge_fields(current, data_fields, widening=widening, implicit=False)
    widened = merged if merged != current else None  # reconcile let a changed type through: mergeSchema
    if widened is not None:
        log.info("widening column(s) of %s to the data's types (mergeSchema, type widening)", table_uri)
        current = widened
    if not new_fields:
        return (
            (None, None)
            if widened is None
            else (json.dumps({"type": "struct", "fields": current}, separators=(",", ":")), None)
        )
    log.info("adding column(s) %s to %s (mergeSchema)", [f["name"] for f in new_fields], table_uri)
    configuration = None
    fields = current + new_fields
    if mapping_mode(table) != "none":  # the ids and physical names the files' writers used (writer.target_mapping)
        fields, configuration = with_new_columns(current, new_fields, table.metadata().configuration, table=table_uri)
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":")), configuration


DEFAULT_CHECKPOINT_INTERVAL = 10
"""Delta's default ``delta.checkpointInterval``: a checkpoint at every table version divisible by it."""


def checkpoint_if_due(
    location: TableLocation,
    table_version: int,
    configuration: dict[str, str],
    protocol: Protocol,
    *,
    snapshot: Snapshot | None = None,
    part_size: int | None = None,
) -> None:
    """Write a Delta checkpoint (classic parquet, multi-part beyond ``part_size`` actions, and ``_last_checkpoint``:
    :mod:`sparkonce.delta.log.log_checkpoint`) at the table versions Delta places them:
    ``table_version % delta.checkpointInterval == 0``, then remove the log files that ``delta.logRetentionDuration``
    lets go (:mod:`sparkonce.delta.txn.log_cleanup`). ``snapshot``: the table's state at ``table_version`` when the
    caller holds it (the commit that made it); else it is read from the log. A failure is logged, never raised: the
    commit has landed, and a missing checkpoint or cleanup only costs readers a longer replay."""
    try:
        interval = int(configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
    except ValueError:
        interval = DEFAULT_CHECKPOINT_INTERVAL
    if interval <= 0 or table_version == 0 or table_version % interval != 0:
        return
    if "v2Checkpoint" in (protocol.get("writerFeatures") or ()):
        return  # sparkonce writes classic checkpoints only
    try:
        if snapshot is None or snapshot.table_version != table_version:
            current = current_table(location)
            if current is not None and current.version() == table_version:
                snapshot = current.snapshot
            else:  # the log moved on already: rebuild that table version
                snapshot = existing_table(location, table_version=table_version).snapshot
        written = write_checkpoint(location, snapshot, part_size=part_size)
        remember_table(location, written.snapshot)  # a running stream's next batch starts from this checkpoint
    except Exception as err:  # the commit stands; readers replay more JSON until the next checkpoint
        log.warning("no Delta checkpoint at table_version %s of %s: %s", table_version, location, err)
        return
    try:
        cleanup_expired_logs(location, configuration, protocol)
    except Exception as err:  # the commit and its checkpoint stand; the next checkpoint tries again
        log.warning("no log cleanup after the checkpoint at table_version %s of %s: %s", table_version, location, err)


__all__ = [
    "BatchTxn",
    "CommitMode",
    "CommitResult",
    "Committed",
    "PlannedCommit",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "RemovedFile",
    "check_rewrite_supported",
    "checkpoint_if_due",
    "commit_files",
    "committed_txn_version",
    "refuse_undone_batch",
    "table_committed_txn_version",
    "load_table",
    "metadata_action",
    "protocol_action",
    "retry_delay",
    "table_exists",
    "Transaction",
]
