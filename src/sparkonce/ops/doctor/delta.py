"""Findings about a Delta sink table: its txn for this query against the checkpoint, batches written twice or
under two app ids, offsets recorded by the sink, txn retention and orphan files.

CLI/driver only; reads the table's ``_delta_log`` through :class:`~sparkonce.delta.log.DeltaLog`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.delta.interval import parse_interval_ms
from sparkonce.delta.log import CommitEntry, DeltaLog, Snapshot
from sparkonce.errors import DeltaLogError
from sparkonce.ops.doctor.orphans import MissingFile, check_files
from sparkonce.ops.doctor.ranges import range_text
from sparkonce.ops.doctor.report import HistoryScan, TableReport
from sparkonce.ops.findings import Finding

__all__ = ["DeltaFacts", "delta_findings", "scan_history"]

_TXN_RETENTION_KEY = "delta.setTransactionRetentionDuration"


@dataclass
class DeltaFacts:
    log: DeltaLog
    snapshot: Snapshot
    entries: list[CommitEntry]
    full_scan: bool
    txn_table_version: int | None = None
    missing_files: int = 0
    """Data files the newest table version references that are missing or of another size (``delta-missing-files``)."""


def scan_history(
    log: DeltaLog, snapshot: Snapshot, app_id: str | None, window_start: int | None, mode: HistoryScan
) -> tuple[list[CommitEntry], bool]:
    """Read Delta commits newest first: all of them, or just enough to cover the timeline window."""
    full = mode == "full" or (mode == "auto" and len(snapshot.txns) > 1)
    entries: list[CommitEntry] = []
    if not full and (app_id is None or app_id not in snapshot.txns or window_start is None):
        return entries, False
    for entry in log.iter_history() if full else _newest_commits(log, snapshot.table_version):
        entries.append(entry)
        if full:
            continue
        window_covered = window_start is not None and entry.batch_id is not None and entry.batch_id <= window_start
        if entry.query_id == app_id and window_covered:
            break
    return entries, full


def _newest_commits(log: DeltaLog, table_version: int) -> Iterator[CommitEntry]:
    """Commit entries from ``table_version`` down, until a JSON commit is gone (removed by log clean-up).

    Asks for each file by name instead of listing ``_delta_log`` (which can hold 100,000s of files) again.
    """
    for v in range(table_version, -1, -1):
        if not log.has_commit(v):
            return
        yield log.commit_entry(v)


def delta_findings(
    state: CheckpointState,
    table: str,
    facts: DeltaFacts,
    now_ms: int,
) -> tuple[list[Finding], TableReport]:
    findings: list[Finding] = []
    snap = facts.snapshot
    app = state.query_id
    lp, lc = state.last_planned, state.last_committed
    txn = snap.txn_version(app) if app else None
    for note in snap.notes:
        findings.append(
            Finding(
                "delta-log-note",
                "warning" if "skipped checkpoint" in note else "info",
                f"{table}: {note}",
                "run a Delta checkpoint (OPTIMIZE or any write) to replace the bad file",
                path=facts.log.location.join("_delta_log"),
            )
        )
    for entry in facts.entries:
        if app and entry.query_id == app and entry.batch_id == txn:
            facts.txn_table_version = entry.table_version
            break
    where = f" at table version {facts.txn_table_version}" if facts.txn_table_version is not None else ""
    if app and lp is not None:
        if txn is None:
            others = {a: t.txn_version for a, t in snap.txns.items()}
            findings.append(
                Finding(
                    "txn-missing",
                    "warning" if lc is not None else "info",
                    f"{table} has no txn for query id {app}"
                    + (
                        f" (it has txns for {', '.join(sorted(others)[:3])})"
                        if others
                        else " (no streaming writer recorded a txn)"
                    )
                    + ": the sink cannot skip batches it already wrote",
                    "check --table is this query's sink; if the checkpoint was recreated, see 'app-ids-overlap'",
                    path=str(table),
                    details={"app_ids": others},
                )
            )
        elif txn > lp:
            findings.append(
                Finding(
                    "txn-ahead",
                    "error",
                    f"{table} holds txn({app}, {txn}){where} but the checkpoint's last planned batch is "
                    f"{lp}: "
                    f"the checkpoint is older than the table (restored from a backup?); batches "
                    f"{lp + 1}-{txn} will be planned with new offsets and skipped by the sink: data lost",
                    "do not restart: restore the newest checkpoint, or rebuild it from the table's commits",
                    path=str(table),
                    details={"txn_version": txn, "last_planned": lp},
                )
            )
        elif lp - txn > 1:
            findings.append(
                Finding(
                    "txn-behind",
                    "error" if lc is not None and lc > txn else "warning",
                    f"{table} holds txn({app}, {txn}){where} but batches up to "
                    f"{lc if lc is not None else lp} "
                    f"are committed in the checkpoint: batches {txn + 1}-{lp - 1} never reached the table "
                    "(lost), unless they were empty",
                    "replay the missing offsets ranges into the table (sparkonce verify shows the holes)",
                    path=str(table),
                    details={"txn_version": txn, "last_planned": lp, "last_committed": lc},
                )
            )
    # Same batch ids under several app ids.
    by_app: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for entry in facts.entries:
        if entry.query_id is not None and entry.batch_id is not None:
            by_app[entry.query_id][entry.batch_id].append(entry.table_version)
    for app_id, batches in by_app.items():
        twice = {b: sorted(v) for b, v in batches.items() if len(v) > 1}
        if twice:
            first = sorted(twice)[:3]
            findings.append(
                Finding(
                    "batch-written-twice",
                    "error",
                    f"{table}: app id {app_id} wrote the same batch more than once ("
                    + "; ".join(f"batch {b} at table versions {twice[b]}" for b in first)
                    + "): duplicates",
                    "delete the duplicate table versions' rows (sparkonce verify lists them)",
                    path=str(table),
                    details={"app_id": app_id, "batches": {str(b): v for b, v in twice.items()}},
                )
            )
    apps = sorted(by_app)
    for i, a in enumerate(apps):
        for b in apps[i + 1 :]:
            common = sorted(set(by_app[a]) & set(by_app[b]))
            if not common:
                continue
            sample = common[:3]
            findings.append(
                Finding(
                    "app-ids-overlap",
                    "error",
                    f"{table}: batches {range_text(common)} were written under two app ids, {a} and {b} "
                    "(checkpoint deleted or recreated): their rows are duplicated; e.g. "
                    + "; ".join(
                        f"batch {x}: table versions {by_app[a][x]} ({a[:8]}) and {by_app[b][x]} ({b[:8]})"
                        for x in sample
                    ),
                    "remove the rows of the older app id's table versions, or verify with `sparkonce verify`",
                    path=str(table),
                    details={
                        "app_ids": [a, b],
                        "batch_ids": common,
                        "table_versions": {
                            a: sorted(v for x in common for v in by_app[a][x]),
                            b: sorted(v for x in common for v in by_app[b][x]),
                        },
                    },
                )
            )
    # Offsets recorded by sparkonce's sink vs the checkpoint's.
    mismatched = []
    for entry in facts.entries:
        ours = entry.commit_info.get("sparkonce")
        if not (isinstance(ours, dict) and app and entry.query_id == app and entry.batch_id is not None):
            continue
        recorded = ours.get("offsetsLog")
        planned = state.offsets.get(entry.batch_id)
        if isinstance(recorded, str) and planned is not None and recorded != planned.raw:
            mismatched.append((entry.batch_id, entry.table_version))
    if mismatched:
        findings.append(
            Finding(
                "offsets-mismatch-table",
                "error",
                f"{table}: the offsets the sink recorded for batches "
                f"{range_text(sorted(b for b, _ in mismatched))} differ from the checkpoint's offsets "
                f"files: "
                "another run rewrote the checkpoint (two queries share it, or it was replaced)",
                "give each query its own checkpoint; compare offsets with `sparkonce history --json`",
                path=str(table),
                details={"batches": [{"batch_id": b, "table_version": v} for b, v in mismatched]},
            )
        )
    findings.extend(_retention_findings(table, snap, app, lp, now_ms))
    checked = check_files(facts.log, snap)
    facts.missing_files = len(checked.missing)
    if checked.missing:
        findings.append(_missing_files_finding(table, facts, checked.missing))
    orphans, orphan_bytes, orphan_list = len(checked.orphans), checked.orphan_bytes, checked.orphans
    if orphans:
        findings.append(
            Finding(
                "orphan-files",
                "info",
                f"{table}: {orphans} file(s), {orphan_bytes} bytes, are not referenced by any table version "
                "(left by failed or aborted writes; may include a batch being written right now)",
                "run VACUUM (or sparkonce's clean-up) once no writer runs; readers of the table ignore them",
                path=str(table),
                details={"files": orphan_list[:100], "count": orphans, "bytes": orphan_bytes},
            )
        )
    report = TableReport(
        table_path=str(table),
        kind="delta",
        table_version=snap.table_version,
        txn_version=txn,
        txn_table_version=facts.txn_table_version,
        app_ids={a: t.txn_version for a, t in snap.txns.items()},
        orphan_files=orphans,
        orphan_bytes=orphan_bytes,
    )
    return findings, report


def _missing_files_finding(table: str, facts: DeltaFacts, missing: list[MissingFile]) -> Finding:
    """An error naming the referenced files that are gone or changed, the Delta commits and streaming batches that
    added them, and the way back: restore the table to before the first of them, replay from there."""
    wanted = {m.path for m in missing}
    added_by: dict[str, CommitEntry] = {}
    for entry in _newest_commits(facts.log, facts.snapshot.table_version):
        for path in entry.added_paths:
            if path in wanted:
                added_by.setdefault(path, entry)
        if len(added_by) == len(wanted):
            break
    versions = sorted({e.table_version for e in added_by.values()})
    batches = sorted({(e.query_id, e.batch_id) for e in added_by.values() if e.batch_id is not None}, key=str)
    gone = [m for m in missing if m.found_size is None]
    resized = [m for m in missing if m.found_size is not None]
    what = []
    if gone:
        what.append(f"{len(gone)} missing")
    if resized:
        what.append(f"{len(resized)} of another size than the log records")
    message = (
        f"{table}: {len(missing)} data file(s) that table version {facts.snapshot.table_version} references are "
        f"not usable ({', '.join(what)}), e.g. {missing[0].path}: readers fail or return wrong rows"
    )
    if versions:
        message += f"; added by table version(s) {range_text(versions)}"
    if batches:
        by_query: dict[str, list[int]] = defaultdict(list)
        for query_id, batch_id in batches:
            assert batch_id is not None
            by_query[str(query_id)].append(batch_id)
        message += " (" + "; ".join(f"query {q} batch(es) {range_text(sorted(b))}" for q, b in by_query.items()) + ")"
    if versions and versions[0] > 0:
        fix = (
            f"restore the table to table version {versions[0] - 1}, the last before the damage (RESTORE TABLE ... TO "
            f"VERSION AS OF {versions[0] - 1}, or DeltaTable.restoreToVersion), then replay from the source every "
            "batch after it (sparkonce replay), so that later batches are written again too"
        )
    else:
        fix = "the table's first version is damaged: write the table again from its source (sparkonce replay)"
    return Finding(
        "delta-missing-files",
        "error",
        message,
        fix,
        path=str(table),
        details={
            "files": [{"path": m.path, "size": m.size, "found_size": m.found_size} for m in missing[:100]],
            "count": len(missing),
            "table_versions": versions,
            "batches": [{"query_id": q, "batch_id": b} for q, b in batches],
        },
    )


def _retention_findings(table: str, snap: Snapshot, app: str | None, lp: int | None, now_ms: int) -> list[Finding]:
    """The txn retention property: a warning when set, an error when this query's txn has expired."""
    findings: list[Finding] = []
    retention_text = snap.configuration.get(_TXN_RETENTION_KEY)
    if not retention_text or not app:
        return findings
    try:
        retention = parse_interval_ms(retention_text, name=_TXN_RETENTION_KEY)
    except DeltaLogError as err:
        return [
            Finding(
                "table-property-invalid",
                "error",
                f"{table}: {err}",
                f"set {_TXN_RETENTION_KEY} to an interval like 'interval 7 days', or unset it",
                path=str(table),
                details={"property": _TXN_RETENTION_KEY, "value": retention_text},
            )
        ]
    last = snap.txns.get(app)
    expired = last is not None and last.last_updated is not None and last.last_updated + retention < now_ms
    findings.append(
        Finding(
            "txn-retention-expired" if expired else "txn-retention",
            "error" if expired else "warning",
            f"{table} sets {_TXN_RETENTION_KEY} = {retention_text!r}: "
            + (
                f"this query's txn was last updated longer ago than that and is dropped at the next "
                f"Delta checkpoint; re-running batch {lp} afterwards writes it twice"
                if expired
                else "if the query pauses longer than that, its txn expires and a re-run batch is written twice"
            ),
            f"unset {_TXN_RETENTION_KEY}, or make it longer than any pause of the query",
            path=str(table),
            details={"retention": retention_text, "retention_ms": retention},
        )
    )
    return findings
