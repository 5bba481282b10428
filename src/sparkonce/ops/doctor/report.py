"""The result types of ``doctor``: :class:`DoctorReport` and what it holds (plain data).

Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from sparkonce.checkpoint.tables import RecordedTable
from sparkonce.ops.findings import Finding, Severity, worst_severity

__all__ = [
    "BatchRow",
    "CheckpointScan",
    "DoctorReport",
    "HistoryScan",
    "KafkaPartitionState",
    "TableOrigin",
    "TableReport",
]

HistoryScan = Literal["auto", "full", "window"]
TableOrigin = Literal["given", "recorded", "none"]
"""Where the examined tables came from: ``--table``, the checkpoint's record of the query's tables, or nowhere."""
CheckpointScan = Literal["window", "full"]


@dataclass(frozen=True)
class BatchRow:
    """One batch on the timeline: planned (``offsets/N``), committed (``commits/N``) and what the table
    holds."""

    batch_id: int
    planned: bool
    committed: bool
    batch_timestamp_ms: int | None
    table_versions: tuple[int, ...]
    rows: int | None


@dataclass(frozen=True)
class TableReport:
    """What one ``--table`` holds for this query."""

    table_path: str
    kind: Literal["delta", "file-sink"]
    table_version: int | None
    txn_version: int | None
    """The table's ``txn_version`` for this query's id (the last batch id the Delta sink wrote), if any."""
    txn_table_version: int | None
    """The table version that committed ``txn_version``, when found in the scanned history."""
    app_ids: dict[str, int]
    """Every ``app_id`` with a txn in the table -> its ``txn_version``."""
    orphan_files: int
    orphan_bytes: int
    damaged_files: int = 0
    """Files the newest table version references that are missing or of another size than the log records."""


@dataclass(frozen=True)
class KafkaPartitionState:
    """A Kafka partition read by the query: where the next batch starts and what the broker still holds."""

    topic: str
    partition: int
    next_start_offset: int
    earliest: int | None
    latest: int | None


@dataclass(frozen=True)
class DoctorReport:
    """The result of :func:`diagnose` (its JSON form is documented in ``docs/doctor.md``)."""

    checkpoint_dir: str
    query_id: str | None
    last_planned: int | None
    last_committed: int | None
    next_start: str
    findings: tuple[Finding, ...]
    tables: tuple[TableReport, ...]
    kafka: tuple[KafkaPartitionState, ...]
    timeline: tuple[BatchRow, ...]
    generated_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    unread_checkpoint_files: int = 0
    """``offsets/``/``commits/`` files older than the timeline window, listed but not read (``window`` scan)."""
    table_origin: TableOrigin = "given"
    """Where ``tables`` came from: ``--table``, the checkpoint's record, or nowhere (no table examined)."""
    recorded_tables: tuple[RecordedTable, ...] = ()
    """Every table and topic set the checkpoint records (sinks and sources), examined or not."""

    @property
    def severity(self) -> Severity | None:
        """The worst severity among the findings (``None`` when there are none)."""
        return worst_severity(self.findings)

    @property
    def healthy(self) -> bool:
        """True when no finding is a warning or an error."""
        return self.severity in (None, "info")
