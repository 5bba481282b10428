"""Driver side: Delta's conflict rules for a commit that lost the race for its table version.

sparkonce commits with put-if-absent of the next ``_delta_log/N.json`` (:mod:`sparkonce.delta.txn.commit`). A writer
that finds its version taken reloads the table and tries again on top of the winners, but only after checking
every winning commit since the table version it read against what it read, as Delta's ``ConflictChecker`` does
under the isolation level ``WriteSerializable`` (Databricks' default; delta-spark itself knows only ``Serializable``,
where blind appends conflict too: docs/delta.md, "Checked against delta-spark"). In Delta's order, per winning
commit:

1. a ``protocol`` action -> :class:`~sparkonce.errors.ProtocolChangedError` (``DELTA_PROTOCOL_CHANGED``);
2. a ``metaData`` action -> :class:`~sparkonce.errors.MetadataChangedError` (``DELTA_METADATA_CHANGED``);
3. data files it added that this transaction should have read -> :class:`~sparkonce.errors.ConcurrentAppendError`
   (``DELTA_CONCURRENT_APPEND``). Which added files count: none under ``SnapshotIsolation`` (a commit that
   changes no data, e.g. OPTIMIZE); under ``WriteSerializable`` every add of a winner that is not a blind append
   (``commitInfo.isBlindAppend`` absent counts as not blind, as in Delta; an OPTIMIZE's ``dataChange`` false adds
   count, as Delta counts them), and of every winner when this transaction changes the metadata itself. They
   conflict when they fall in the read predicate: the whole table, the partitions read, or the partitions a
   condition over partition columns selects, whether they held a file or not (Delta's ``DeltaTableReadPredicate``:
   a ``replaceWhere`` / DELETE / UPDATE on ``day = 3`` read partition 3 even where it was empty;
   :class:`PartitionPredicate`);
4. a file it removed that this transaction read -> :class:`~sparkonce.errors.ConcurrentDeleteReadError`
   (``DELTA_CONCURRENT_DELETE_READ``);
5. a file it removed that this transaction removes -> :class:`~sparkonce.errors.ConcurrentDeleteDeleteError`
   (``DELTA_CONCURRENT_DELETE_DELETE``);
6. a ``txn`` of an ``appId`` whose version this transaction read ->
   :class:`~sparkonce.errors.ConcurrentTransactionError` (``DELTA_CONCURRENT_TRANSACTION``).

A transaction that read nothing (a blind append: a streaming batch, an append write) skips 1 and 2 unless its own
commit changes the metadata (``mergeSchema``): its retry re-checks the new protocol and schema, and fails only
when they no longer take its files (:func:`sparkonce.delta.log.log_entry.check_writable`, the schema check). That is
the "changes that matter" relaxation; Delta's JVM writer fails such an append on any concurrent metadata change.
A streaming batch's own ``txn`` keeps sparkonce's rule instead of 6: a winner holding the batch (same ``appId``,
``version >=``) makes the batch skip, an older batch of the same app is committed on top of.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol
from urllib.parse import unquote

from sparkonce.delta.log.actions import Action, CommitInfo
from sparkonce.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    ProtocolChangedError,
)
from sparkonce.storage import TableLocation

PartitionKey = tuple[tuple[str, str | None], ...]
"""A file's ``partitionValues`` (as the log writes them: physical names, strings) in a comparable form."""

Isolation = Literal["WriteSerializable", "SnapshotIsolation"]
ReadPredicate = Literal["nothing", "whole_table"] | frozenset[PartitionKey]


def partition_key(values: Mapping[str, str | None]) -> PartitionKey:
    """The comparable form of a ``partitionValues`` map."""
    return tuple(sorted((str(k), None if v is None else str(v)) for k, v in values.items()))


class PartitionPredicate(Protocol):
    """A transaction's condition over partition columns, as the partitions it read: every partition whose values
    satisfy it, whether it held a file at the read or not (Delta's read predicate). Made by the rewrite that read
    (:class:`sparkonce.delta.ops.rewrite.PartitionCondition`). Runs on the driver."""

    @property
    def text(self) -> str:
        """The condition, as an error message shows it."""
        ...

    def first_match(self, partitions: Sequence[Mapping[str, str | None]]) -> int | None:
        """The index of the first of ``partitions`` (``partitionValues`` maps as the log writes them: physical
        names, strings) that satisfies the condition; None when none does."""
        ...


@dataclass(frozen=True)
class ReadSet:
    """What a transaction read, for the conflict check of its commit. Runs on the driver.

    ``predicate``: ``"nothing"`` (a blind append), ``"whole_table"``, or the partitions read (each as
    :func:`partition_key`). ``files``: the table-relative paths of the data files read (URL-decoded).
    ``app_ids``: the ``txn`` app ids whose version the transaction read and depends on. ``isolation``:
    ``SnapshotIsolation`` for a commit that changes no data (OPTIMIZE), as Delta picks it. ``partitions``: the
    condition over partition columns the transaction read by, when it had one: an added file in a partition it
    selects conflicts even where ``predicate`` (the partitions of the files read) does not name that partition.
    """

    read_version: int
    predicate: ReadPredicate = "nothing"
    files: frozenset[str] = field(default_factory=frozenset)
    app_ids: frozenset[str] = field(default_factory=frozenset)
    isolation: Isolation = "WriteSerializable"
    partitions: PartitionPredicate | None = field(default=None, compare=False)

    @classmethod
    def of_files(
        cls,
        read_version: int,
        files: Iterable[tuple[str, Mapping[str, str | None]]],
        *,
        whole_table: bool,
        isolation: Isolation = "WriteSerializable",
        partitions: PartitionPredicate | None = None,
    ) -> ReadSet:
        """The read set of a rewrite that read ``files`` (path, ``partitionValues``): the whole table, the
        partitions ``partitions`` selects (a condition over partition columns, files or not), or else just the
        partitions of those files (a scan pruned by partition values)."""
        files = list(files)
        predicate: ReadPredicate = "whole_table"
        if not whole_table:
            predicate = frozenset() if partitions is not None else frozenset(partition_key(v) for _, v in files)
        return cls(
            read_version,
            predicate,
            frozenset(unquote(p) for p, _ in files),
            isolation=isolation,
            partitions=None if whole_table else partitions,
        )

    @property
    def reads_anything(self) -> bool:
        return self.predicate != "nothing" or bool(self.files) or bool(self.app_ids) or self.partitions is not None

    def first_read(self, added: Sequence[Mapping[str, str | None]]) -> Mapping[str, str | None] | None:
        """The first of ``added`` (files' partition values) that falls in what this transaction read, or None."""
        hit = next((values for values in added if self.matches(values)), None)
        if hit is None and self.partitions is not None and added:
            index = self.partitions.first_match(added)
            hit = added[index] if index is not None else None
        return hit

    def matches(self, values: Mapping[str, str | None]) -> bool:
        """True when an added file with these partition values falls in what this transaction read."""
        if self.predicate == "nothing":
            return False
        if self.predicate == "whole_table":
            return True
        return partition_key(values) in self.predicate


@dataclass(frozen=True)
class WinningCommit:
    """The actions of a commit that won a table version after this transaction's read. Runs on the driver."""

    table_version: int
    operation: str
    blind_append: bool
    protocol_changed: bool
    metadata_changed: bool
    data_adds: tuple[Mapping[str, str | None], ...]
    """The ``partitionValues`` of each ``add``, ``dataChange`` false ones too: Delta's ``changedDataAddedFiles`` are
    every ``add`` of a winner that is not a blind append, so a reader of a partition OPTIMIZE rewrote fails with
    ``DELTA_CONCURRENT_APPEND`` before the check of the files it removed."""
    removed: frozenset[str]
    app_ids: frozenset[str]

    @classmethod
    def from_actions(cls, table_version: int, actions: Sequence[Action]) -> WinningCommit:
        info: CommitInfo = {}
        adds: list[Mapping[str, str | None]] = []
        removed: set[str] = set()
        app_ids: set[str] = set()
        protocol = metadata = False
        for action in actions:
            if "commitInfo" in action:
                info = action["commitInfo"] or {}
            elif "add" in action:
                adds.append(dict(action["add"].get("partitionValues") or {}))
            elif "remove" in action:
                removed.add(unquote(action["remove"]["path"]))
            elif "protocol" in action:
                protocol = True
            elif "metaData" in action:
                metadata = True
            elif "txn" in action:
                app_ids.add(str(action["txn"].get("appId")))
        return cls(
            table_version,
            str(info.get("operation", "UNKNOWN")),
            info.get("isBlindAppend") is True,
            protocol,
            metadata,
            tuple(adds),
            frozenset(removed),
            frozenset(app_ids),
        )


def check_commit(
    winner: WinningCommit,
    read: ReadSet,
    *,
    table: str,
    removes: Iterable[str] = (),
    changes_metadata: bool = False,
) -> None:
    """Delta's checks of one winning commit against this transaction (the module's rules 1-6).

    ``removes``: the paths this transaction's commit removes. ``changes_metadata``: its commit carries a
    ``metaData`` action.

    Raises:
        ProtocolChangedError, MetadataChangedError, ConcurrentAppendError, ConcurrentDeleteReadError,
        ConcurrentDeleteDeleteError, ConcurrentTransactionError: the winner conflicts (all are
            :class:`~sparkonce.errors.CommitConflictError`).
    """
    where = f"{table}: table_version {winner.table_version} ({winner.operation}) was committed after this "
    where += f"transaction read table_version {read.read_version}"
    retry = "; read the table again and retry the operation"
    matters = read.reads_anything or changes_metadata
    if winner.protocol_changed and matters:
        raise ProtocolChangedError(f"[DELTA_PROTOCOL_CHANGED] {where} and changed the protocol{retry}")
    if winner.metadata_changed and matters:
        raise MetadataChangedError(f"[DELTA_METADATA_CHANGED] {where} and changed the metadata{retry}")
    if read.isolation == "WriteSerializable" and (changes_metadata or not winner.blind_append):
        hit = read.first_read(winner.data_adds)
        if hit is not None:
            part = f"partition {dict(hit)}" if hit else "the table"
            why = f" (its condition {read.partitions.text})" if read.partitions is not None else ""
            raise ConcurrentAppendError(
                f"[DELTA_CONCURRENT_APPEND] {where} and added files to {part}, which this transaction read{why}{retry}"
            )
    read_gone = sorted(read.files & winner.removed)
    if read_gone:
        raise ConcurrentDeleteReadError(
            f"[DELTA_CONCURRENT_DELETE_READ] {where} and removed {len(read_gone)} file(s) this transaction read, "
            f"e.g. {read_gone[0]}{retry}"
        )
    both = sorted({unquote(p) for p in removes} & winner.removed)
    if both:
        raise ConcurrentDeleteDeleteError(
            f"[DELTA_CONCURRENT_DELETE_DELETE] {where} and removed {len(both)} file(s) this transaction removes, "
            f"e.g. {both[0]}{retry}"
        )
    apps = sorted(read.app_ids & winner.app_ids)
    if apps:
        raise ConcurrentTransactionError(
            f"[DELTA_CONCURRENT_TRANSACTION] {where} with a txn of app_id {apps[0]}, whose txn_version this "
            f"transaction read{retry}"
        )


def check_winners(
    location: TableLocation,
    read: ReadSet,
    *,
    after: int,
    through: int,
    removes: Iterable[str] = (),
    changes_metadata: bool = False,
) -> None:
    """:func:`check_commit` for each commit in ``(after, through]``, each read once from the log.

    Raises:
        CommitConflictError: a subclass naming Delta's error class, for the first winner that conflicts.
        DeltaLogError: a winner's commit file cannot be read.
    """
    if through <= after:
        return
    from sparkonce.delta.log.delta_log import DeltaLog

    delta_log = DeltaLog(location)
    removes = list(removes)
    for table_version in range(after + 1, through + 1):
        winner = WinningCommit.from_actions(table_version, delta_log.read_actions(table_version))
        check_commit(winner, read, table=str(location), removes=removes, changes_metadata=changes_metadata)


__all__ = [
    "Isolation",
    "PartitionKey",
    "PartitionPredicate",
    "ReadPredicate",
    "ReadSet",
    "WinningCommit",
    "check_commit",
    "check_winners",
]
