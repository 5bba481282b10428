"""How far a stage is behind its input: Kafka records per partition, Delta table versions and bytes. Runs on the
driver (``sparkonce run``'s monitor) or in the CLI process (``sparkonce status``); never on executors, no Spark.

Python data sources cannot report custom source metrics to Spark (``pyspark.sql.datasource`` has no metrics
hook), so the lag is computed here from a source's end offset (in a query's progress, or in the checkpoint's
``offsets/N``) and the input's latest position (the broker's end offsets, the table's latest table version).

Delta offsets have the shape of Delta's ``DeltaSourceOffset`` (:mod:`sparkonce.delta.read.stream`): ``(v, -1, false)``
means nothing of table version ``v`` is read yet; ``(v, i, false)`` means file ``i`` of the changes of ``v`` was
the last read; ``(v, i, true)`` is inside the initial snapshot of ``v``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparkonce.errors import SparkonceError

BASE_INDEX = -1


@dataclass(frozen=True)
class PartitionLag:
    """How far a stage is behind one Kafka partition."""

    topic: str
    partition: int
    position: int | None
    """The next offset the query will read (end of its last batch), None before the first batch."""
    latest: int | None
    """The partition's end offset on the broker."""

    @property
    def lag(self) -> int | None:
        """Records behind: the broker's end offset minus the position (None when the end is unknown)."""
        if self.latest is None:
            return None
        return self.latest - (self.position or 0)


@dataclass(frozen=True)
class DeltaLag:
    """How far a stage is behind its input Delta table."""

    latest_table_version: int
    """The input table's latest table version."""
    versions_behind: int
    """Table versions with changes not read yet (a table version partly read is not counted)."""
    bytes_behind: int
    """Sum of the ``size`` of the data files (``dataChange`` adds) not read yet: the rest of a table version partly
    read, then every later table version."""


def kafka_positions(end: Any) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offset`` of a Kafka source's end offset JSON (``{"topic": {"0": 12}}``); empty when
    ``end`` is not in that shape."""
    if isinstance(end, str):
        try:
            end = json.loads(end)
        except json.JSONDecodeError:
            return {}
    if not isinstance(end, dict):
        return {}
    out: dict[tuple[str, int], int] = {}
    for topic, partitions in end.items():
        if not isinstance(partitions, dict):
            return {}
        for partition, offset in partitions.items():
            try:
                out[(str(topic), int(partition))] = int(offset)
            except (TypeError, ValueError):
                return {}
    return out


def partition_lags(
    positions: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]
) -> tuple[PartitionLag, ...]:
    """One :class:`PartitionLag` per partition known to either side, sorted by topic and partition."""
    keys = sorted(set(positions) | set(latest))
    return tuple(PartitionLag(t, p, positions.get((t, p)), latest.get((t, p))) for t, p in keys)


def is_delta_offset(end: Any) -> bool:
    """Whether ``end`` (decoded JSON) is a Delta source offset."""
    return isinstance(end, dict) and "reservoirVersion" in end


class DeltaLagReader:
    """Computes :class:`DeltaLag` of a Delta input table; keeps the bytes added per table version (commits never
    change) so a monitor refreshing every second reads each commit once. Runs on the driver.

    Args:
        table: The input table's location.
        storage_options: Its storage options (object stores).
    """

    def __init__(self, table: str, *, storage_options: dict[str, str] | None = None) -> None:
        self.table = table
        self.storage_options = storage_options or {}
        self._added: dict[int, tuple[int, ...]] = {}
        """table_version -> sizes of its ``dataChange`` adds, in commit order."""
        self._snapshot: tuple[int, tuple[int, ...]] | None = None

    def lag(self, end: Any) -> DeltaLag:
        """The lag of a stage whose last batch ended at ``end`` (a Delta source offset, decoded JSON).

        Raises:
            SparkonceError: the table or a commit cannot be read (TableNotFoundError, DeltaLogError, StorageError),
                or ``end`` is not a Delta source offset (SourceOffsetError).
        """
        from sparkonce.delta.log.delta_log import DeltaLog
        from sparkonce.errors import SourceOffsetError
        from sparkonce.storage import table_location

        if not is_delta_offset(end):
            raise SourceOffsetError(f"not a Delta source offset: {end!r}")
        version, index = int(end["reservoirVersion"]), int(end.get("index", BASE_INDEX))
        in_snapshot = bool(end.get("isStartingVersion", False))
        delta_log = DeltaLog(table_location(self.table, storage_options=self.storage_options))
        latest = delta_log.latest_version()
        behind_bytes = 0
        if in_snapshot:
            behind_bytes += sum(self._snapshot_sizes(delta_log, version)[index + 1 :])
            first_full = version + 1
        elif index != BASE_INDEX:
            behind_bytes += sum(self._sizes(delta_log, version)[index + 1 :])
            first_full = version + 1
        else:
            first_full = version
        for table_version in range(max(first_full, 0), latest + 1):
            behind_bytes += sum(self._sizes(delta_log, table_version))
        for old in [v for v in self._added if v < version]:
            del self._added[old]
        return DeltaLag(latest, max(0, latest - first_full + 1), behind_bytes)

    def _sizes(self, delta_log: Any, table_version: int) -> tuple[int, ...]:
        cached = self._added.get(table_version)
        if cached is None:
            actions = delta_log.read_actions(table_version, only=(b"add",))
            cached = tuple(
                int(a["add"].get("size") or 0) for a in actions if "add" in a and a["add"].get("dataChange", True)
            )
            self._added[table_version] = cached
        return cached

    def _snapshot_sizes(self, delta_log: Any, table_version: int) -> tuple[int, ...]:
        """Sizes of the snapshot's files in the order the stream reads them (modification time, path)."""
        if self._snapshot is None or self._snapshot[0] != table_version:
            adds = sorted(
                delta_log.snapshot(table_version).files.values(),
                key=lambda a: (int(a.get("modificationTime") or 0), a["path"]),
            )
            self._snapshot = (table_version, tuple(int(a.get("size") or 0) for a in adds))
        return self._snapshot[1]


def delta_lag_or_none(reader: DeltaLagReader | None, end: Any) -> DeltaLag | None:
    """:meth:`DeltaLagReader.lag`, or None when there is no reader, no Delta offset, or the table cannot be read
    (for displays, which must not fail on a lag they cannot compute)."""
    if reader is None or not is_delta_offset(end):
        return None
    try:
        return reader.lag(end)
    except SparkonceError:
        return None


__all__ = [
    "DeltaLag",
    "DeltaLagReader",
    "PartitionLag",
    "delta_lag_or_none",
    "is_delta_offset",
    "kafka_positions",
    "partition_lags",
]
