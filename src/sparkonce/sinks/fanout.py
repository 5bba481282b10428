"""Fan-out: one micro-batch written to several Delta tables from ``foreachBatch``, each idempotent on its own.

A ``foreachBatch`` function that writes one batch to two tables is not exactly-once by itself: if the driver dies
after the Delta commit to the first table and before the checkpoint commit (``commits/N``), Spark re-runs batch N
on restart and the first table would get the rows twice. :class:`FanOutWriter` gives every table its own Delta
``txn``: app id ``f"{app_id}:{target.name}"`` and txn version ``batch_id``. On the re-run the first table's txn
already holds the batch, so its write is skipped, and the tables that the crash did not reach are written::

    writer = FanOutWriter(
        [FanOutTarget("/lake/events"), FanOutTarget("/lake/alerts", select=lambda df: df.where("value > 9"))],
        checkpoint_dir="/ck/fanout",  # the query's checkpoint: app_id = its query id (or pass app_id=...)
    )
    query = (
        stream.writeStream.foreachBatch(writer)
        .option("checkpointLocation", "/ck/fanout")
        .start()
    )

Executors write the data files; the driver makes one Delta commit per table (``df.write.format("delta")`` with
``txnAppId``/``txnVersion``). A batch read by two or more tables is persisted once and unpersisted afterwards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sparkonce.errors import OptionError, SinkError, SparkonceError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

CRASH_POINT = "between_fanout_tables"

_RESERVED_OPTIONS = {"txnappid", "txnversion", "path"}


@dataclass(frozen=True)
class FanOutTarget:
    """One Delta table of a fan-out and how the batch is shaped for it (configuration; lives on the driver)."""

    path: str
    """The Delta table path (created by the first write when missing)."""
    name: str | None = None
    """A stable name, unique in the fan-out, used in the txn app id; the last path component when None.
    Changing it makes the table look unwritten to a re-run batch, as a new app id would."""
    select: Callable[[DataFrame], DataFrame] | None = None
    """Turns the batch into this table's rows (filter, projection); the whole batch when None."""
    partition_by: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    """Extra Delta write options (``mergeSchema``, ``userMetadata``, ...); txnAppId/txnVersion are set here."""

    @property
    def table_name(self) -> str:
        return self.name if self.name is not None else os.path.basename(self.path.rstrip("/"))


@dataclass(frozen=True)
class TargetOutcome:
    """What happened to one table for one batch."""

    name: str
    path: str
    txn_app_id: str
    status: Literal["written", "skipped"]
    table_version: int | None
    """The table version after the write (or the current one when skipped); None if unknown."""


@dataclass(frozen=True)
class FanOutResult:
    """What :meth:`FanOutWriter.write_batch` did for one batch."""

    batch_id: int
    app_id: str
    targets: tuple[TargetOutcome, ...]

    @property
    def written(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.targets if t.status == "written")

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.targets if t.status == "skipped")


class FanOutWriter:
    """A ``foreachBatch`` function writing each batch to several Delta tables, exactly once per table.

    Runs on the driver (Spark calls ``foreachBatch`` functions there); the per-table writes run their tasks on
    executors and make their Delta commit on the driver.

    Args:
        targets: the tables, written in this order.
        app_id: the base of the txn app ids. Give it, or give ``checkpoint_dir``.
        checkpoint_dir: the query's checkpoint location; the base app id is then the query id recorded in its
            ``metadata`` file (stable across restarts on the same checkpoint), read at the first batch.

    Raises:
        OptionError: no targets, duplicate table names, both or neither of ``app_id`` / ``checkpoint_dir``,
            or reserved write options.
    """

    def __init__(
        self,
        targets: Sequence[FanOutTarget],
        *,
        app_id: str | None = None,
        checkpoint_dir: str | None = None,
    ) -> None:
        if not targets:
            raise OptionError("targets", [], "a fan-out needs at least one target table")
        names = [t.table_name for t in targets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise OptionError("targets", names, f"table names must be unique (give name=...): {duplicates} repeat")
        for target in targets:
            if not target.table_name:
                raise OptionError("targets", target.path, "cannot derive a table name from the path; give name=")
            reserved = sorted(k for k in target.options if k.lower() in _RESERVED_OPTIONS)
            if reserved:
                raise OptionError(f"targets[{target.table_name}].options", reserved, "are set by the fan-out")
        if (app_id is None) == (checkpoint_dir is None):
            raise OptionError(
                "app_id", app_id, "give exactly one of app_id and checkpoint_dir (the query id is read from it)"
            )
        if app_id is not None and not app_id.strip():
            raise OptionError("app_id", app_id, "must not be empty")
        self.targets = tuple(targets)
        self._app_id = app_id
        self.checkpoint_dir = checkpoint_dir

    @property
    def app_id(self) -> str:
        """The base txn app id: the one given, or the query id from the checkpoint metadata."""
        if self._app_id is None:
            from sparkonce.delta.sink import read_query_id

            assert self.checkpoint_dir is not None
            self._app_id = read_query_id(self.checkpoint_dir)
        return self._app_id

    def txn_app_id(self, target: FanOutTarget) -> str:
        """The Delta txn app id of ``target``: ``f"{app_id}:{table name}"``."""
        return f"{self.app_id}:{target.table_name}"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry point (driver)."""
        self.write_batch(batch_df, batch_id)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> FanOutResult:
        """Write ``batch_df`` to every target not yet holding ``batch_id`` (driver).

        Raises:
            SinkError: a table write failed; the message names the table, app id and batch id. Tables written
                before it keep the batch, and the re-run of the batch skips them.
        """
        if batch_id < 0:
            raise OptionError("batch_id", batch_id, "must be a non-negative micro-batch id")
        pending: list[FanOutTarget] = []
        outcomes: dict[str, TargetOutcome] = {}
        for target in self.targets:
            if _committed_version(target.path, self.txn_app_id(target), batch_id) is None:
                pending.append(target)
            else:
                outcomes[target.table_name] = self._outcome(target, "skipped")
                log.info(
                    "fan-out batch %d of app %s: table %s (%s) already holds it, skipped",
                    batch_id,
                    self.app_id,
                    target.table_name,
                    target.path,
                )
        persisted = len(pending) > 1
        if persisted:
            batch_df.persist()
        try:
            for index, target in enumerate(pending):
                if index > 0:
                    crash_point_between_tables(batch_id)
                outcomes[target.table_name] = self._write(target, batch_df, batch_id)
        finally:
            if persisted:
                batch_df.unpersist()
        return FanOutResult(
            batch_id=batch_id,
            app_id=self.app_id,
            targets=tuple(outcomes[t.table_name] for t in self.targets),
        )

    def _write(self, target: FanOutTarget, batch_df: DataFrame, batch_id: int) -> TargetOutcome:
        txn_app_id = self.txn_app_id(target)
        frame = target.select(batch_df) if target.select is not None else batch_df
        writer = frame.write.format("delta").mode("append")
        for key, value in target.options.items():
            writer = writer.option(key, value)
        writer = writer.option("txnAppId", txn_app_id).option("txnVersion", str(batch_id))
        if target.partition_by:
            writer = writer.partitionBy(*target.partition_by)
        try:
            writer.save(target.path)
        except SparkonceError:
            raise
        except Exception as err:
            raise SinkError(
                f"fan-out write of batch {batch_id} (txn app id {txn_app_id}) to table {target.table_name} "
                f"at {target.path} failed: {str(err).strip().splitlines()[0] if str(err).strip() else err!r}"
            ) from err
        outcome = self._outcome(target, "written")
        log.info(
            "fan-out batch %d of app %s: Delta commit to table %s (%s), table version %s",
            batch_id,
            self.app_id,
            target.table_name,
            target.path,
            outcome.table_version,
        )
        return outcome

    def _outcome(self, target: FanOutTarget, status: Literal["written", "skipped"]) -> TargetOutcome:
        return TargetOutcome(
            name=target.table_name,
            path=target.path,
            txn_app_id=self.txn_app_id(target),
            status=status,
            table_version=_table_version(target.path),
        )


def crash_point_between_tables(batch_id: int) -> None:
    """The ``between_fanout_tables`` crash point: one table of the batch is committed, the next is not."""
    from sparkonce.crash import crash_point

    crash_point(CRASH_POINT, batch_id)


def _committed_version(path: str, txn_app_id: str, batch_id: int) -> int | None:
    """The table's txn version for ``txn_app_id`` when it is ``>= batch_id`` (already written), else None."""
    from sparkonce.delta.commit import load_table, table_exists

    if not table_exists(path):
        return None
    committed = load_table(path).transaction_version(txn_app_id)
    return int(committed) if committed is not None and committed >= batch_id else None


def _table_version(path: str) -> int | None:
    from sparkonce.delta.commit import load_table, table_exists

    return int(load_table(path).version()) if table_exists(path) else None


__all__ = ["CRASH_POINT", "FanOutResult", "FanOutTarget", "FanOutWriter", "TargetOutcome"]
