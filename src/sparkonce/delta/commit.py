"""Driver side: one Delta commit per batch, carrying the batch's files and its ``txn`` action.

This is where exactly-once lives. For a batch with ``(app_id, txn_version)``:

1. load the newest table snapshot; if the table's ``txn_version(app_id) >= txn_version`` the batch is already in
   the table: skip it (and delete the files this attempt wrote that no Delta commit references:
   :mod:`sparkonce.delta.cleanup`);
2. otherwise commit the files and ``txn(app_id, txn_version)`` as table version ``read_version + 1``, with no
   automatic rebase (delta-rs ``max_commit_retries=0``): the log's put-if-absent makes exactly one writer win that
   version;
3. when the commit fails, first ask whether it landed all the same: every commit carries a fresh
   ``commitInfo.txnId``, and a commit since the first read that carries it is this call's (the store applied the
   log file's PUT and lost its answer, or the retried PUT found the file this call wrote). Then it is done.
   Otherwise, on a lost race, reload and go back to 1. A concurrent run of the same batch that won makes this one
   skip; an unrelated writer that won makes this one retry on top of it.

The first write to a new table is table version 0, as with Delta's JVM connector: protocol, metadata, the files
and the txn in one commit, put-if-absent like any other. Of writers racing to create the table exactly one
wins; the others find the table and go on at step 1 (a replayed batch 0 is then skipped).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from sparkonce._types import TableVersion
from sparkonce.delta.cleanup import COMMIT_ID_KEY, find_commit, remove_unreferenced_files
from sparkonce.delta.files import WrittenFile
from sparkonce.delta.schema import delta_fields, reconcile, table_fields
from sparkonce.errors import (
    CommitConflictError,
    DeltaLogError,
    OptionError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from deltalake import DeltaTable, Schema

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
    partition_values: dict[str, str | None]
    deletion_vector: dict[str, Any] | None = None
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
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError
    from deltalake.exceptions import TableNotFoundError as RsTableNotFound

    from sparkonce.errors import TableNotFoundError

    location = table_location(table)
    try:
        return DeltaTable(location.uri, version=table_version, storage_options=location.options() or None)
    except RsTableNotFound as err:
        raise TableNotFoundError(f"{location} is not a Delta table (no _delta_log commits found)") from err
    except OSError as err:
        raise location.store_error(err) from err
    except DeltaError as err:
        where = f" at table version {table_version}" if table_version is not None else ""
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise _diagnose_log(location) or DeltaLogError(
            f"cannot read the Delta log of {location}{where}: {first_line}"
        ) from err


def committed_txn_version(table: DeltaTable, txn: BatchTxn) -> int | None:
    """The one "is this batch already in the table" check.

    Returns:
        The table's ``txn_version`` for ``txn.app_id`` when it is ``>= txn.txn_version`` (the batch, or a later
        one of the same app, is already committed), else None.
    """
    committed = table.transaction_version(txn.app_id)
    return int(committed) if committed is not None and committed >= txn.txn_version else None


def table_committed_txn_version(table: str | TableLocation, txn: BatchTxn) -> int | None:
    """:func:`committed_txn_version` on the newest table version; None when there is no table yet."""
    location = table_location(table)
    if not table_exists(location):
        return None
    return committed_txn_version(load_table(location), txn)


def _diagnose_log(location: TableLocation) -> DeltaLogError | None:
    """After delta-rs failed to load a log, find the commit file that is broken (newest first) to name it."""
    from sparkonce.delta.log import DeltaLog

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
    snapshot: DeltaTable | None = None,
    written_after: int | None = None,
) -> CommitResult:
    """Commit ``files`` (already written under the table root) in one Delta commit, exactly once per ``txn``.

    Creates the table from ``data_schema`` and ``partition_by`` when it does not exist yet. ``removes`` (append
    mode only) are files of the table that the same Delta commit removes: a rewrite replaces them with ``files``.
    Each attempt checks that they are still active; a concurrent writer that removed one is a conflict, while
    a concurrent append is not (the commit is remade on top of it). ``data_change=False`` marks every ``add`` and
    ``remove`` as a rearrangement of rows already in the table (compaction), so streaming readers skip them.
    ``snapshot``: the table, loaded moments ago by the caller; the first attempt uses it instead of loading the
    table again. A stale one costs nothing but a retry: the commit of its next table version fails if that version
    exists, and the retry loads the table afresh (txn check included). ``written_after``: the table version read
    before ``files`` were written (default: the version this call reads first); only later commits can name them.

    Raises:
        SchemaMismatchError: the data does not fit the table and no schema option allows the change.
        CommitConflictError: lost ``max_attempts`` races in a row, or a file to remove is gone.
    """
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, RemoveAction

    files = list(files)
    removes = list(removes)
    if removes and mode != "append":
        raise OptionError("mode", mode, "removes go with mode append (an overwrite removes every file already)")
    location = table_location(table)
    location.check_commit_safety()
    table_uri = str(location)
    partition_by = tuple(partition_by)
    commit_id = str(uuid.uuid4())
    custom_metadata = {**(custom_metadata or {}), COMMIT_ID_KEY: commit_id}
    rows = sum(f.num_records for f in files)

    def landed(attempt: int) -> CommitResult | None:
        """This call's commit, when an attempt that reported a failure made it all the same."""
        assert written_after is not None
        table_version = find_commit(location, commit_id, after=written_after)
        if table_version is None:
            return None
        log.warning(
            "Delta commit table_version %s on %s landed although attempt %d reported a failure (txn %s): done",
            table_version,
            table_uri,
            attempt,
            txn,
        )
        return CommitResult(TableVersion(table_version), False, attempt, len(files), rows, len(removes))

    for attempt in range(1, max_attempts + 1):
        if snapshot is None or attempt > 1:
            if not table_exists(location):
                if written_after is None:
                    written_after = -1
                created = _create_with_first_commit(
                    location, files, data_schema, partition_by, txn, custom_metadata, data_change, attempt
                )
                if created is not None:
                    return created
                if (done := landed(attempt)) is not None:
                    return done
                continue  # another writer created the table first: commit on top of it (or skip the batch)
            snapshot = load_table(location)
        read_version = snapshot.version()
        if written_after is None:
            written_after = read_version
        if txn is not None:
            committed = committed_txn_version(snapshot, txn)
            if committed is not None:
                cleanup = remove_unreferenced_files(
                    location,
                    (f.path for f in files),
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
                return CommitResult(None, True, attempt, 0, 0)
        table_partitions = tuple(snapshot.metadata().partition_columns)
        if partition_by and table_partitions != partition_by:
            raise SchemaMismatchError(
                f"partition columns {list(partition_by)} do not match the table's {list(table_partitions)} "
                f"at {table_uri}"
            )
        schema = _schema_for_commit(snapshot, table_uri, data_schema, mode, merge_schema, overwrite_schema)
        actions: list[Any] = [
            AddAction(f.path, f.size, f.partition_values, f.modification_time, data_change, f.stats) for f in files
        ]
        if any(r.deletion_vector is not None for r in removes):
            base_version = int(snapshot.version())  # after a mergeSchema metadata commit, if one was made
            try:
                made = _commit_with_deletion_vectors(
                    location, base_version, files, removes, txn, custom_metadata, data_change, attempt
                )
            except Exception:
                if (done := landed(attempt)) is not None:  # the store may have applied the PUT it failed on
                    return done
                raise
            if made:
                return CommitResult(TableVersion(base_version + 1), False, attempt, len(files), rows, len(removes))
            if (done := landed(attempt)) is not None:
                return done
            continue
        if removes:
            _check_still_active(snapshot, table_uri, read_version, removes)
            now = int(time.time() * 1000)
            actions += [RemoveAction(r.path, data_change, now, r.size, r.partition_values) for r in removes]
        properties = CommitProperties(
            custom_metadata=dict(custom_metadata or {}),
            max_commit_retries=0,
            app_transactions=[Transaction(txn.app_id, txn.txn_version, int(time.time() * 1000))] if txn else None,
        )
        try:
            snapshot.create_write_transaction(
                actions, mode, schema, partition_by=list(table_partitions), commit_properties=properties
            )
        except Exception as err:
            # The store may have applied the log file's PUT whatever the error says (a lost answer, a retried
            # conditional PUT finding the file this attempt wrote): look for this call's commit first.
            if (done := landed(attempt)) is not None:
                return done
            if not isinstance(err, CommitFailedError):
                raise
            log.info(
                "Delta commit on %s at table_version %s lost a race (attempt %d, txn %s): %s",
                table_uri,
                read_version + 1,
                attempt,
                txn,
                err,
            )
            continue
        table_version = TableVersion(read_version + 1)
        log.info(
            "Delta commit table_version %s on %s: %d file(s), %d row(s), %d file(s) removed, txn %s",
            table_version,
            table_uri,
            len(files),
            rows,
            len(removes),
            txn,
        )
        return CommitResult(table_version, False, attempt, len(files), rows, len(removes))
    raise CommitConflictError(
        f"gave up committing to {table_uri} after {max_attempts} attempts lost to concurrent writers (txn {txn})"
    )


def _check_still_active(table: DeltaTable, table_uri: str, read_version: int, removes: list[RemovedFile]) -> None:
    import pyarrow as pa

    active = set(pa.table(table.get_add_actions(flatten=False)).column("path").to_pylist())
    gone = [r.path for r in removes if r.path not in active]
    if gone:
        raise CommitConflictError(
            f"{len(gone)} file(s) to remove from {table_uri} are no longer in table_version {read_version} "
            f"(a concurrent writer rewrote them), e.g. {gone[0]}"
        )


COMMIT_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "columnMapping",
        "deletionVectors",
        "invariants",
        "timestampNtz",
        "vacuumProtocolCheck",
        "v2Checkpoint",
    }
)
"""Writer features a commit that sparkonce writes itself (removing files with deletion vectors) honours: none of
them asks anything of a commit of plain ``add`` and ``remove`` actions (``columnMapping`` asks for physical names
in the files, their stats and ``partitionValues``, which the file writer gives them:
:class:`sparkonce.delta.column_mapping.ColumnMapping`)."""


def check_dv_commit_supported(location: TableLocation, table: DeltaTable, table_uri: str, operation: str) -> None:
    """Refuse, before any data moves, a rewrite of a table with deletion vectors that sparkonce cannot commit.

    delta-rs cannot write a ``remove`` carrying a deletion vector, so such commits are written by sparkonce
    (:func:`_commit_with_deletion_vectors`) with an atomic put-if-absent of the log file
    (:meth:`TableLocation.put_if_absent`: a hard link on local disks, a conditional create on object stores; S3
    needs ``conditional_put=etag``), and only with writer features that ask nothing of such a commit.

    Raises:
        UnsupportedFeatureError: an S3 table without ``conditional_put``, or another writer feature.
    """
    from sparkonce.errors import StorageError, UnsupportedFeatureError

    try:
        location.check_put_if_absent(f"{operation} of files with deletion vectors")
    except StorageError as err:
        raise UnsupportedFeatureError(str(err)) from err
    others = sorted(set(table.protocol().writer_features or []) - COMMIT_WRITER_FEATURES)
    if others:
        raise UnsupportedFeatureError(
            f"{operation} on {table_uri}: the table has writer feature(s) {others}, which sparkonce cannot honour "
            "in a commit that rewrites files with deletion vectors"
        )


def _commit_with_deletion_vectors(
    location: TableLocation,
    read_version: int,
    files: list[WrittenFile],
    removes: list[RemovedFile],
    txn: BatchTxn | None,
    custom_metadata: Mapping[str, Any] | None,
    data_change: bool,
    attempt: int,
) -> bool:
    """Write table version ``read_version + 1`` with sparkonce's own log entry: commitInfo, txn, the adds and the
    removes with their deletion vectors, put-if-absent. False when another writer took that version first (its
    log file is left as it is; the caller reloads and decides again).

    Raises:
        CommitConflictError: a file to remove is gone, or carries another deletion vector than the one read
            (a concurrent writer deleted more of its rows).
    """
    from urllib.parse import unquote

    from sparkonce import __version__
    from sparkonce.delta.log import DeltaLog

    files_now = DeltaLog(location).snapshot(read_version).files
    active = {unquote(k): v.get("deletionVector") for k, v in files_now.items()}
    changed = [r.path for r in removes if active.get(unquote(r.path), False) != r.deletion_vector]
    if changed:
        raise CommitConflictError(
            f"{len(changed)} file(s) to remove from {location} changed in table_version {read_version} "
            f"(a concurrent writer rewrote them or deleted rows of them), e.g. {changed[0]}"
        )
    now = int(time.time() * 1000)
    info = dict(custom_metadata or {})
    own_info = info.get("sparkonce")
    own: dict[str, Any] = own_info if isinstance(own_info, dict) else {}
    commit_info = {
        "timestamp": now,
        "operation": own.get("operation", "WRITE"),
        "operationParameters": {
            k: v if isinstance(v, str) else json.dumps(v) for k, v in dict(own.get("operationParameters") or {}).items()
        },
        "readVersion": read_version,
        "isolationLevel": "Serializable",
        "isBlindAppend": False,
        "engineInfo": f"sparkonce/{__version__}",
        **info,
    }
    actions: list[dict[str, Any]] = [{"commitInfo": commit_info}]
    if txn is not None:
        actions.append({"txn": {"appId": txn.app_id, "version": txn.txn_version, "lastUpdated": now}})
    for f in files:
        add = {
            "path": f.path,
            "partitionValues": f.partition_values,
            "size": f.size,
            "modificationTime": f.modification_time,
            "dataChange": data_change,
            "stats": f.stats,
        }
        actions.append({"add": add})
    for r in removes:
        remove: dict[str, Any] = {
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
    payload = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode("utf-8")
    if not location.put_if_absent(f"_delta_log/{read_version + 1:020d}.json", payload):
        log.info(
            "Delta commit on %s at table_version %s lost a race (attempt %d, txn %s): the log file exists",
            location,
            read_version + 1,
            attempt,
            txn,
        )
        return False
    log.info(
        "Delta commit table_version %s on %s (written by sparkonce: removes carry deletion vectors): %d file(s) "
        "added, %d removed, txn %s",
        read_version + 1,
        location,
        len(files),
        len(removes),
        txn,
    )
    return True


def _schema_for_commit(
    table: DeltaTable,
    table_uri: str,
    data_schema: pa.Schema,
    mode: CommitMode,
    merge_schema: bool,
    overwrite_schema: bool,
) -> Schema:
    """The schema to commit with; adds merged columns first (a metadata-only Delta commit) when allowed."""
    from deltalake import Schema

    if mode == "overwrite" and overwrite_schema:
        return Schema.from_arrow(data_schema)
    current = table_fields(table)
    new_fields = reconcile(
        current,
        delta_fields(data_schema),
        merge_schema=merge_schema,
        table_id=str(table.metadata().id),
        table_path=table_uri,
    )
    if new_fields:
        from deltalake.schema import Field

        from sparkonce.delta.column_mapping import mapping_mode

        if mapping_mode(table) != "none":
            raise UnsupportedFeatureError(
                f"adding column(s) {[f['name'] for f in new_fields]} to {table_uri}: the table uses column mapping "
                f"({mapping_mode(table)}); sparkonce cannot give new columns physical names yet"
            )

        table.alter.add_columns([Field.from_json(json.dumps(f)) for f in new_fields])
        log.info("added column(s) %s to %s (mergeSchema)", [f["name"] for f in new_fields], table_uri)
        table.update_incremental()
    return table.schema()


def _create_with_first_commit(
    location: TableLocation,
    files: list[WrittenFile],
    data_schema: pa.Schema,
    partition_by: tuple[str, ...],
    txn: BatchTxn | None,
    custom_metadata: Mapping[str, Any] | None,
    data_change: bool,
    attempt: int,
) -> CommitResult | None:
    """Create the table with the files in table version 0; None when another writer created it first."""
    from deltalake import CommitProperties, Schema, Transaction
    from deltalake.transaction import AddAction, create_table_with_add_actions

    unknown = [c for c in partition_by if c not in data_schema.names]
    if unknown:
        raise SchemaMismatchError(f"partition column(s) {unknown} are not columns of the data {data_schema.names}")
    actions = [AddAction(f.path, f.size, f.partition_values, f.modification_time, data_change, f.stats) for f in files]
    properties = CommitProperties(
        custom_metadata=dict(custom_metadata or {}),
        max_commit_retries=0,
        app_transactions=[Transaction(txn.app_id, txn.txn_version, int(time.time() * 1000))] if txn else None,
    )
    try:
        create_table_with_add_actions(
            location.uri,
            Schema.from_arrow(data_schema),
            actions,
            mode="error",
            partition_by=list(partition_by) or None,
            storage_options=location.options() or None,
            commit_properties=properties,
        )
    except Exception as err:  # delta-rs: "already exists" / a lost put-if-absent of table version 0
        if table_exists(location):
            log.info("Delta table %s was created by another writer first (attempt %d, txn %s)", location, attempt, txn)
            return None
        raise DeltaLogError(f"cannot create the Delta table at {location}: {err}") from err
    rows = sum(f.num_records for f in files)
    log.info(
        "Delta commit table_version 0 on %s (table created): %d file(s), %d row(s), txn %s",
        location,
        len(files),
        rows,
        txn,
    )
    return CommitResult(TableVersion(0), False, attempt, len(files), rows)


__all__ = [
    "BatchTxn",
    "CommitMode",
    "CommitResult",
    "RemovedFile",
    "check_dv_commit_supported",
    "commit_files",
    "committed_txn_version",
    "table_committed_txn_version",
    "load_table",
    "table_exists",
]
