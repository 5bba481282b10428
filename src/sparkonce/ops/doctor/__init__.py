"""``doctor``: explain a streaming query's exactly-once state from its checkpoint and its tables' files.

:func:`diagnose` reads a checkpoint directory (and optionally Delta or file-sink tables and a Kafka
broker) and returns a :class:`DoctorReport`: what the next start will do, in plain words, and a list of findings with a
severity, a stable code and a one-line fix. It never prints and never raises for bad files (they become
findings); it raises only when the checkpoint directory, a table path or the broker cannot be reached at all.
Runs in the CLI process; no Spark needed.

Modules, one per part: :mod:`.checkpoint` (the checkpoint's own files), :mod:`.delta` and :mod:`.orphans` (Delta
sink tables), :mod:`.file_sink`, :mod:`.kafka`, :mod:`.readers` (the query's reader registrations on its Delta
sources), :mod:`.next_start`, :mod:`.timeline`; :mod:`.report` holds the
result types.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from sparkonce.checkpoint.reader import read_checkpoint
from sparkonce.checkpoint.tables import TABLES_DIR, RecordedTable, read_recorded_tables
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.errors import DeltaLogError, TableNotFoundError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.kafka.watermarks import WatermarkFetcher, fetch_watermarks
from sparkonce.ops.doctor.checkpoint import checkpoint_findings
from sparkonce.ops.doctor.delta import DeltaFacts, delta_findings, scan_history
from sparkonce.ops.doctor.file_sink import file_sink_findings
from sparkonce.ops.doctor.kafka import kafka_findings
from sparkonce.ops.doctor.next_start import next_start_text
from sparkonce.ops.doctor.ranges import newest_ids
from sparkonce.ops.doctor.readers import reader_findings
from sparkonce.ops.doctor.report import (
    BatchRow,
    CheckpointScan,
    DoctorReport,
    HistoryScan,
    KafkaPartitionState,
    TableOrigin,
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
    "TableOrigin",
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
    storage_options: Mapping[str, str] | None = None,
) -> DoctorReport:
    """Diagnose one streaming query from its checkpoint directory (and its sink tables, and Kafka).

    Args:
        checkpoint_dir: The query's checkpoint location.
        tables: Sink folders to cross-check: Delta tables (txn, history, orphans, retention) or file-sink
            folders with ``_spark_metadata``. None given: the sink tables recorded in the checkpoint
            (:mod:`sparkonce.checkpoint.tables`); none there either: a ``no-table-examined`` finding says so.
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
        storage_options: The store's options for recorded tables on an object store (``--storage-option``).

    Raises:
        CheckpointError: ``checkpoint_dir`` is not a folder.
        TableNotFoundError: A table path given is neither a Delta table nor a file-sink folder (a recorded one
            becomes a ``recorded-table-missing`` finding).
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
    given = [table_location(t) for t in tables]
    recorded, record_problems = read_recorded_tables(state.checkpoint_dir)
    findings.extend(_record_findings(state.checkpoint_dir, record_problems))
    findings.extend(reader_findings(state.query_id, recorded, now_ms=now, storage_options=storage_options))
    origin: TableOrigin = "given" if given else "recorded"
    if not given:
        given = [table_location(t.location, storage_options=storage_options) for t in recorded if t.role == "sink"]
        if not given:
            origin = "none"
    for location in given:
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
        elif origin == "recorded":
            findings.append(_recorded_table_gone(table, state.last_committed))
            continue
        else:
            raise TableNotFoundError(f"{table} is neither a Delta table (_delta_log) nor a file sink (_spark_metadata)")
        findings.extend(table_findings)
        reports.append(report)
    if not reports:
        findings.append(_no_table_examined(state.checkpoint_dir, origin, recorded))
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
        table_origin=origin,
        recorded_tables=tuple(recorded),
    )


def _record_findings(checkpoint_dir: str, problems: list[str]) -> list[Finding]:
    """A warning for record files of the checkpoint's tables that cannot be read."""
    if not problems:
        return []
    return [
        Finding(
            "tables-record-unreadable",
            "warning",
            f"{len(problems)} file(s) of {TABLES_DIR}/, where sparkonce records the query's tables, cannot be read: "
            + "; ".join(problems[:3]),
            "delete the named file(s): the query records its tables again at its next start; meanwhile name the "
            "sink with --table",
            path=os.path.join(checkpoint_dir, TABLES_DIR),
            details={"problems": problems[:100]},
        )
    ]


def _recorded_table_gone(table: str, last_committed: int | None) -> Finding:
    """The recorded sink is not (or no longer) a table: normal before the query's first commit, else a loss."""
    if last_committed is None:
        return Finding(
            "recorded-table-missing",
            "info",
            f"the query's sink {table} (recorded in the checkpoint) holds no Delta table yet, and no batch is "
            "committed: the first batch creates it",
            "nothing to do",
            path=table,
        )
    return Finding(
        "recorded-table-missing",
        "error",
        f"the query's sink {table} (recorded in the checkpoint) is neither a Delta table nor a file sink, but the "
        f"checkpoint has committed batches up to {last_committed}: the table was deleted or moved, and a restart "
        "writes only new batches to it (everything before is lost)",
        "restore the table from a backup, or rebuild it from the source (sparkonce reset CHECKPOINT --table TABLE "
        "--yes); if it moved, name its new place with --table",
        path=table,
        details={"last_committed": last_committed},
    )


def _no_table_examined(checkpoint_dir: str, origin: TableOrigin, recorded: list[RecordedTable]) -> Finding:
    """Say plainly that the report covers the checkpoint's own files only, and how to name a table."""
    if origin == "none":
        why = (
            "the checkpoint records no sink table (the query was started before sparkonce recorded its tables, or "
            "its sink is not sparkonce's Delta sink or a pipeline stage) and none was named with --table"
        )
    else:
        why = "no named or recorded sink table could be read"
    sources = [t for t in recorded if t.role == "source"]
    also = (
        f"; it records the sources {', '.join(f'{t.location} ({t.format})' for t in sources[:3])}, which are read, "
        "not written"
        if sources
        else ""
    )
    return Finding(
        "no-table-examined",
        "info",
        f"No table was examined: {why}{also}. The findings cover the checkpoint's own files only, not whether the "
        "sink's data matches it (txn, duplicates, missing data files)",
        f"name the sink: sparkonce doctor {checkpoint_dir} --table TABLE (a Delta table or a file-sink folder; "
        "repeatable)",
        path=checkpoint_dir,
        details={"recorded": [t.location for t in recorded]},
    )
