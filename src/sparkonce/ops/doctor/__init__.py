"""``doctor``: explain a streaming query's exactly-once state from its checkpoint and its tables' files.

:func:`diagnose` reads a checkpoint directory (and optionally Delta or file-sink tables and a Kafka
broker) and returns a :class:`DoctorReport`: what the next start will do, in plain words, and a list of findings with a
severity, a stable code and a one-line fix. It never prints and never raises for bad files (they become
findings); it raises only when the checkpoint directory, a table path or the broker cannot be reached at all.
Runs in the CLI process; no Spark needed.

Modules, one per part: :mod:`.checkpoint` (the checkpoint's own files), :mod:`.delta` and :mod:`.orphans` (Delta
sink tables), :mod:`.file_sink`, :mod:`.kafka`, :mod:`.next_start`, :mod:`.timeline`; :mod:`.report` holds the
result types.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from sparkonce.checkpoint.reader import read_checkpoint
from sparkonce.delta.log import DeltaLog
from sparkonce.errors import DeltaLogError, TableNotFoundError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.kafka.watermarks import WatermarkFetcher, fetch_watermarks
from sparkonce.ops.doctor.checkpoint import checkpoint_findings
from sparkonce.ops.doctor.delta import DeltaFacts, delta_findings, scan_history
from sparkonce.ops.doctor.file_sink import file_sink_findings
from sparkonce.ops.doctor.kafka import kafka_findings
from sparkonce.ops.doctor.next_start import next_start_text
from sparkonce.ops.doctor.ranges import newest_ids
from sparkonce.ops.doctor.report import (
    BatchRow,
    CheckpointScan,
    DoctorReport,
    HistoryScan,
    KafkaPartitionState,
    TableReport,
)
from sparkonce.ops.doctor.timeline import timeline
from sparkonce.ops.findings import Finding
from sparkonce.storage import TableLocation, table_location

__all__ = [
    "BatchRow",
    "CheckpointScan",
    "DoctorReport",
    "HistoryScan",
    "KafkaPartitionState",
    "TableReport",
    "diagnose",
]


def diagnose(
    checkpoint_dir: str | os.PathLike[str],
    *,
    tables: Sequence[str | os.PathLike[str] | TableLocation] = (),
    kafka_bootstrap: str | None = None,
    watermarks: WatermarkFetcher | None = None,
    history_scan: HistoryScan = "auto",
    checkpoint_scan: CheckpointScan = "window",
    timeline_batches: int = 200,
    now_ms: int | None = None,
) -> DoctorReport:
    """Diagnose one streaming query from its checkpoint directory (and its sink tables, and Kafka).

    Args:
        checkpoint_dir: The query's checkpoint location.
        tables: Sink folders to cross-check: Delta tables (txn, history, orphans, retention) or file-sink
            folders with ``_spark_metadata``.
        kafka_bootstrap: Kafka bootstrap servers; checks the next batch's start offsets against the broker's
            earliest and latest offsets.
        watermarks: Replaces the broker look-up (for tests or other clients).
        history_scan: How much Delta history to read: ``auto`` reads every commit only when several app ids
            hold txns (to name the table versions of duplicated batches), else just the timeline window;
            ``full`` always reads all; ``window`` never more than the window.
        checkpoint_scan: Which ``offsets/`` and ``commits/`` files to read: ``window`` the timeline's newest
            batches (every file is still listed, so gaps are found; Spark keeps 100 batches by default and reads
            only the newest on restart), ``full`` all of them (finds damage in old files too).
        timeline_batches: How many of the newest batches the timeline shows (at least 2 are always read).
        now_ms: The current time in ms (for retention checks); defaults to the clock.

    Raises:
        CheckpointError: ``checkpoint_dir`` is not a folder.
        TableNotFoundError: A table path is neither a Delta table nor a file-sink folder.
        BrokerError: The broker is unreachable.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    newest = None if checkpoint_scan == "full" else max(timeline_batches, 2)
    state = read_checkpoint(checkpoint_dir, newest_batches=newest)
    findings = checkpoint_findings(state)
    reports: list[TableReport] = []
    delta: dict[str, DeltaFacts] = {}
    ids = newest_ids(state.offset_ids, state.commit_ids, timeline_batches)
    window_start = ids[0] if ids else None
    for table_arg in tables:
        location = table_location(table_arg)
        table = str(location)
        if location.check_reachable(for_write=False):
            try:
                log = DeltaLog(location)
                snap = log.snapshot()
                entries, full = scan_history(log, snap, state.query_id, window_start, history_scan)
            except DeltaLogError as err:
                findings.append(
                    Finding(
                        "table-unreadable",
                        "error",
                        str(err),
                        "repair the named Delta log file (restore it from a backup)",
                        path=str(table),
                    )
                )
                continue
            facts = DeltaFacts(log, snap, entries, full)
            delta[table] = facts
            table_findings, report = delta_findings(state, table, facts, now)
        elif location.is_local and os.path.isdir(os.path.join(table, "_spark_metadata")):
            table_findings, report = file_sink_findings(Path(table))
        else:
            raise TableNotFoundError(f"{table} is neither a Delta table (_delta_log) nor a file sink (_spark_metadata)")
        findings.extend(table_findings)
        reports.append(report)
    kafka_states: list[KafkaPartitionState] = []
    if kafka_bootstrap is not None or watermarks is not None:
        if watermarks is not None:
            fetch = watermarks
        else:
            bootstrap = str(kafka_bootstrap)

            def fetch(partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
                return fetch_watermarks(bootstrap, partitions)

        found, kafka_states = kafka_findings(state, fetch)
        findings.extend(found)
    return DoctorReport(
        checkpoint_dir=str(state.checkpoint_dir),
        query_id=state.query_id,
        last_planned=state.last_planned,
        last_committed=state.last_committed,
        next_start=next_start_text(state, delta),
        findings=tuple(findings),
        tables=tuple(reports),
        kafka=tuple(kafka_states),
        timeline=timeline(state, delta, timeline_batches),
        generated_at_ms=now,
        unread_checkpoint_files=state.unread_batches,
    )
