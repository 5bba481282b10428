"""Findings about a Delta sink table: its txn for this query against the checkpoint, batches written twice or
under two app ids, offsets recorded by the sink, txn retention and orphan files.

Runs on the driver (or in the CLI process); reads the table's ``_delta_log`` through
:class:`~sparkonce.delta.log.delta_log.DeltaLog`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.delta.log.delta_log import CommitEntry, DeltaLog, Snapshot
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.txn.restores import restored_app_id, undone_batches, undone_table_versions
from sparkonce.errors import DeltaLogError
from sparkonce.ops.doctor.orphans import DamagedFile, check_files, trace_origins
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
    damaged_files: int = 0
    """Files the newest table version references that are missing or of another size (``delta-missing-files``,
    ``delta-file-size-mismatch``)."""


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
    undone = undone_table_versions(facts.entries, snap.table_version)  # a RESTORE took their rows out
    for entry in facts.entries:
        if entry.query_id is not None and entry.batch_id is not None and entry.table_version not in undone:
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
    findings.extend(_restore_findings(state, table, facts))
    checked = check_files(facts.log, snap)
    facts.damaged_files = len(checked.damaged)
    if checked.damaged:
        findings.extend(_damaged_files_findings(state, table, facts, checked.damaged))
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
        damaged_files=len(checked.damaged),
    )
    return findings, report


def _damaged_files_findings(
    state: CheckpointState, table: str, facts: DeltaFacts, damaged: list[DamagedFile]
) -> list[Finding]:
    """Errors for the referenced files that are missing (``delta-missing-files``) or of another size
    (``delta-file-size-mismatch``), naming the Delta commits and streaming batches that added them and the way back:
    restore the table to the last table version before the first of them, then write again what the restore undoes.
    """
    newest = facts.snapshot.table_version
    origins = trace_origins(facts.log, newest, (d.key for d in damaged))
    commits = {c.table_version: c for c in origins.commits}
    unknown = [d for d in damaged if d.key not in origins.introduced_at]
    first = min(origins.introduced_at.values(), default=None)
    restore_to = first - 1 if first is not None and first > 0 and not unknown else None
    undone = [c for c in origins.commits if first is not None and c.table_version >= first]
    fix = _damage_fix(state, table, restore_to, newest, unknown, undone)
    findings = []
    for code, group in (
        ("delta-missing-files", [d for d in damaged if d.missing]),
        ("delta-file-size-mismatch", [d for d in damaged if not d.missing]),
    ):
        if not group:
            continue
        versions = sorted({origins.introduced_at[d.key] for d in group if d.key in origins.introduced_at})
        batches = sorted(
            {
                (c.query_id, c.batch_id, c.table_version)
                for v in versions
                if (c := commits[v]).query_id is not None and c.batch_id is not None
            },
            key=lambda b: (str(b[0]), b[1] or 0),
        )
        lost = sum(1 for d in group if d.key not in origins.introduced_at)
        if code == "delta-missing-files":
            what = "are missing"
            examples = ", ".join(d.path for d in group[:3])
            harm = "readers of the table fail"
        else:
            what = "are of another size than the log records"
            examples = ", ".join(
                f"{d.path} ({d.found_size} bytes; the log records {d.size})"
                if d.kind == "data"
                else f"{d.path} ({d.found_size} bytes; its deletion vectors need {d.size})"
                for d in group[:3]
            )
            harm = "readers of the table fail or return wrong rows"
        kinds = _kinds_text(group)
        message = (
            f"{table}: {kinds} that table version {newest} references {what}, e.g. {examples}"
            + (f" (and {len(group) - 3} more)" if len(group) > 3 else "")
            + f": {harm}"
        )
        if versions:
            message += f". Table version(s) {range_text(versions)} added them"
            if batches:
                message += f" ({_batches_text([(q, b) for q, b, _ in batches])})"
        if lost:
            message += (
                f". The Delta commits that added {lost} of them are no longer in _delta_log (log clean-up) or cannot "
                "be read"
            )
        findings.append(
            Finding(
                code,
                "error",
                message,
                fix,
                path=str(table),
                details={
                    "count": len(group),
                    "files": [
                        {
                            "path": d.path,
                            "kind": d.kind,
                            "size": d.size,
                            "found_size": d.found_size,
                            "table_version": origins.introduced_at.get(d.key),
                        }
                        for d in group[:100]
                    ],
                    "table_versions": versions,
                    "batches": [{"query_id": q, "batch_id": b, "table_version": v} for q, b, v in batches],
                    "unknown_origin": lost,
                    "restore_table_version": restore_to,
                    "undone_batches": _batch_ranges(undone),
                    "undone_other_commits": [
                        {"table_version": c.table_version, "operation": c.operation}
                        for c in undone
                        if c.batch_id is None
                    ][:100],
                },
            )
        )
    return findings


def _kinds_text(files: list[DamagedFile]) -> str:
    data = sum(1 for d in files if d.kind == "data")
    vectors = len(files) - data
    parts = [f"{data} data file(s)"] if data else []
    if vectors:
        parts.append(f"{vectors} deletion vector file(s)")
    return " and ".join(parts)


def _batches_text(batches: list[tuple[str | None, int | None]]) -> str:
    """``query Q batch(es) 0-2; query R batch(es) 7``."""
    by_query: dict[str, list[int]] = defaultdict(list)
    for query_id, batch_id in batches:
        if query_id is not None and batch_id is not None:
            by_query[query_id].append(batch_id)
    return "; ".join(f"query {q} batch(es) {range_text(sorted(set(b)))}" for q, b in sorted(by_query.items()))


def _batch_ranges(commits: list[CommitEntry]) -> list[dict[str, object]]:
    """The streaming batches of ``commits`` per query: ``{query_id, first_batch_id, last_batch_id, count}``."""
    by_query: dict[str, set[int]] = defaultdict(set)
    for c in commits:
        if c.query_id is not None and c.batch_id is not None:
            by_query[c.query_id].add(c.batch_id)
    return [
        {"query_id": q, "first_batch_id": min(b), "last_batch_id": max(b), "count": len(b)}
        for q, b in sorted(by_query.items())
    ]


def _damage_fix(
    state: CheckpointState,
    table: str,
    restore_to: int | None,
    newest: int,
    unknown: list[DamagedFile],
    undone: list[CommitEntry],
) -> str:
    """The way back from damaged data files: restore the table to before them and write again what that undoes."""
    rebuild = (
        f"rebuild the table from the source: `sparkonce reset {state.checkpoint_dir} --table {table} --yes` clears it "
        "in one Delta commit and moves the checkpoint aside, and the query's next start reads again from its starting "
        "offsets (the source must still hold them); a pipeline stage that reads a Delta table is rebuilt with "
        "`sparkonce replay` instead"
    )
    if unknown:
        return (
            f"the Delta commits that added {len(unknown)} of these files are no longer in the log, so the last good "
            f"table version is unknown: restore a table version you know holds none of them, or {rebuild}"
        )
    if restore_to is None:
        return f"table version 0 is damaged, so there is no earlier table version to restore: {rebuild}"
    later = range_text(list(range(restore_to + 1, newest + 1)))
    fix = (
        f"restore the table to table version {restore_to}, the last before the damage (RESTORE TABLE delta.`{table}` "
        f"TO VERSION AS OF {restore_to}, or DeltaTable.forPath(spark, path).restoreToVersion({restore_to})); "
        f"that undoes table version(s) {later}"
    )
    ranges = _batch_ranges(undone)
    if ranges:
        parts = []
        for r in ranges:
            q, a, b = r["query_id"], r["first_batch_id"], r["last_batch_id"]
            assert isinstance(a, int) and isinstance(b, int)
            start = "the sources' starting offsets" if a == 0 else f"where batch {a - 1} ended"
            files = f"offsets/{a - 1} and offsets/{b}" if a else f"offsets/{b}"
            where = (
                f" ({files} of this checkpoint)"
                if q == state.query_id
                else " (each Delta commit of sparkonce's sink records its offsets: sparkonce history --json)"
            )
            parts.append(f"of query {q}'s batches {a}-{b}, from {start} to where batch {b} ended{where}")
        fix += (
            ", so write their batches again from the source: a RESTORE keeps the txn, so the running query would "
            "skip them; append the source's records "
            + "; and those ".join(parts)
            + ", in one batch write with a new txnAppId (a pipeline stage that reads a Delta table is rebuilt with "
            "`sparkonce replay` instead of a restore)"
        )
    others = [c for c in undone if c.batch_id is None and c.operation != "OPTIMIZE"]
    if others:
        shown = ", ".join(f"{c.table_version} ({c.operation or 'unknown operation'})" for c in others[-5:])
        fix += f"; repeat the other Delta commits it undoes: table version(s) {shown}" + (
            f" and {len(others) - 5} more" if len(others) > 5 else ""
        )
    return fix


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


def _restore_findings(state: CheckpointState, table: str, facts: DeltaFacts) -> list[Finding]:
    """Per RESTORE in the scanned history and per app id: the batches it undid while the table kept their txn
    (``restore-kept-txn``: a replay under that app id is skipped), or that were written again under the app id of
    :func:`~sparkonce.delta.txn.restores.restored_app_id` (``restore-rewritten``)."""
    findings: list[Finding] = []
    for u in undone_batches(facts.entries, facts.snapshot.table_version, facts.snapshot.txns):
        safe = restored_app_id(u.app_id, u.restore_table_version)
        batches = range_text(list(u.batch_ids))
        details = {
            "app_id": u.app_id,
            "restore_table_version": u.restore_table_version,
            "restored_table_version": u.restored_table_version,
            "batch_ids": list(u.batch_ids),
            "table_versions": list(u.table_versions),
            "safe_app_id": safe,
        }
        if u.rewritten:
            findings.append(
                Finding(
                    "restore-rewritten",
                    "info",
                    f"{table}: the RESTORE at table version {u.restore_table_version} undid batches {batches} of app "
                    f"id {u.app_id}; they were written again under app id {safe}",
                    "nothing to do",
                    path=table,
                    details=details,
                )
            )
            continue
        first, last = u.batch_ids[0], u.batch_ids[-1]
        if u.app_id == state.query_id:
            start = "the sources' starting offsets" if first == 0 else f"offsets/{first - 1}"
            source = f"the source's records from {start} to offsets/{last} of this checkpoint"
        else:
            source = (
                "the source's records of those batches (each sparkonce commit records its offsets: "
                "sparkonce history --json)"
            )
        findings.append(
            Finding(
                "restore-kept-txn",
                "error",
                f"{table}: the RESTORE at table version {u.restore_table_version} (to table version "
                f"{u.restored_table_version}) undid batches {batches} of app id {u.app_id} (table version(s) "
                f"{range_text(list(u.table_versions))}), but a RESTORE keeps the txn: the table still holds "
                f"txn({u.app_id}, {facts.snapshot.txn_version(u.app_id)}), so a replay of those batches under "
                f"{u.app_id} is skipped and their rows stay lost (delta-io/delta#1813)",
                f"write {source} again under a new app id, one batch write per batch: "
                f".option('txnAppId', '{safe}').option('txnVersion', <batch id>); sparkonce's sink refuses the "
                "unsafe replay and names the same app id; a pipeline stage that reads a Delta table is rebuilt "
                "with `sparkonce replay` instead",
                path=table,
                details=details,
            )
        )
    return findings
