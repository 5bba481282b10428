"""``doctor``: explain a streaming query's exactly-once state from its checkpoint and its tables' files.

:func:`diagnose` reads a checkpoint directory (and optionally Delta or file-sink tables and a Kafka
broker) and
returns a :class:`DoctorReport`: what the next start will do, in plain words, and a list of findings with a
severity, a stable code and a one-line fix. It never prints and never raises for bad files (they become
findings); it raises only when the checkpoint directory, a table path or the broker cannot be reached at all.
Runs in the CLI process; no Spark needed.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from sparkonce.checkpoint.file_log import read_file_log
from sparkonce.checkpoint.reader import CheckpointState, read_checkpoint
from sparkonce.delta.log import CommitEntry, DeltaLog, Snapshot, dv_relative_path
from sparkonce.errors import DeltaLogError, TableNotFoundError
from sparkonce.ops.findings import Finding, Severity, worst_severity
from sparkonce.ops.kafka_offsets import TopicPartition, WatermarkFetcher, fetch_watermarks, kafka_offsets

__all__ = [
    "BatchRow",
    "DoctorReport",
    "KafkaPartitionState",
    "TableReport",
    "diagnose",
    "parse_interval_ms",
]

HistoryScan = Literal["auto", "full", "window"]
_MAX_FILE_FINDINGS = 20
_TXN_RETENTION_KEY = "delta.setTransactionRetentionDuration"


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

    @property
    def severity(self) -> Severity | None:
        """The worst severity among the findings (``None`` when there are none)."""
        return worst_severity(self.findings)

    @property
    def healthy(self) -> bool:
        """True when no finding is a warning or an error."""
        return self.severity in (None, "info")


# ----------------------------------------------------------------------------------------------- helpers
_INTERVAL_UNITS_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}


def parse_interval_ms(text: str) -> int | None:
    """Parse a Delta interval property such as ``"interval 7 days"`` into milliseconds (``None`` if
    unparsable)."""
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        return None
    total = 0
    for amount, unit in zip(words[::2], words[1::2]):
        unit = unit.rstrip("s")
        if unit not in _INTERVAL_UNITS_MS:
            return None
        try:
            total += int(float(amount) * _INTERVAL_UNITS_MS[unit])
        except ValueError:
            return None
    return total


def _range_text(ids: Sequence[int]) -> str:
    """Render sorted ids compactly: ``3, 5-9, 12``."""
    parts: list[str] = []
    start = prev = None
    for i in ids:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    shown = parts[:10]
    return ", ".join(shown) + (f", ... ({len(parts) - 10} more ranges)" if len(parts) > 10 else "")


def _missing(ids: Sequence[int]) -> list[int]:
    if not ids:
        return []
    present = set(ids)
    return [i for i in range(ids[0], ids[-1] + 1) if i not in present]


# ----------------------------------------------------------------------------------------------- checkpoint
def _checkpoint_findings(state: CheckpointState) -> list[Finding]:
    findings: list[Finding] = []
    cp = str(state.checkpoint_dir)
    if not state.metadata_present and not state.is_empty:
        findings.append(
            Finding(
                "metadata-missing",
                "error",
                "the checkpoint has batches but no metadata file: the next start creates a new query id, "
                "so a Delta sink no longer recognises the batches it already wrote (txn app id changes) "
                "and re-running a planned batch duplicates it",
                f'recreate {cp}/metadata with the old query id (the table\'s txn app id): {{"id":"<query id>"}}',
                path=f"{cp}/metadata",
            )
        )
    for problem in state.problems[:_MAX_FILE_FINDINGS]:
        code = "metadata-corrupt" if problem.path.name == "metadata" else "file-malformed"
        findings.append(
            Finding(
                code,
                "error",
                problem.problem,
                "restore the file from a backup, or rebuild it with `sparkonce` from the table's commits",
                path=str(problem.path),
            )
        )
    if len(state.problems) > _MAX_FILE_FINDINGS:
        findings.append(
            Finding(
                "file-malformed",
                "error",
                f"{len(state.problems) - _MAX_FILE_FINDINGS} more unreadable checkpoint files not listed",
                "run with --json to see every file",
                path=cp,
                details={"files": [str(p.path) for p in state.problems]},
            )
        )
    offsets, commits = list(state.offset_ids), list(state.commit_ids)
    gaps = _missing(offsets)
    if gaps:
        findings.append(
            Finding(
                "offsets-gap",
                "error",
                f"offsets/ has gaps: no offsets file for batch(es) {_range_text(gaps)} between "
                f"{offsets[0]} and {offsets[-1]}",
                "restore the missing offsets files from a backup; do not restart until they exist",
                path=f"{cp}/offsets",
                details={"missing": gaps},
            )
        )
    lp = state.last_planned
    if lp is not None and lp > 0 and offsets[0] == lp and lp not in state.commit_ids:
        findings.append(
            Finding(
                "offsets-previous-missing",
                "error",
                f"batch {lp} is planned but not committed and offsets/{lp - 1} is missing: Spark needs "
                f"batch {lp - 1}'s end offsets as batch {lp}'s start and will fail to start",
                f"restore {cp}/offsets/{lp - 1} from a backup",
                path=f"{cp}/offsets/{lp - 1}",
            )
        )
    commit_gaps = _missing(commits)
    if commit_gaps:
        findings.append(
            Finding(
                "commits-gap",
                "warning",
                f"commits/ has gaps: batches {_range_text(commit_gaps)} have no checkpoint commit",
                "check the table holds those batches (sparkonce history); then the gaps are harmless",
                path=f"{cp}/commits",
                details={"missing": commit_gaps},
            )
        )
    orphan_commits = sorted(set(commits) - set(offsets))
    if offsets:
        orphan_commits = [c for c in orphan_commits if c >= offsets[0]]
    if orphan_commits:
        ahead = [c for c in orphan_commits if lp is None or c > lp]
        findings.append(
            Finding(
                "commits-ahead" if ahead else "commit-without-offsets",
                "error",
                f"checkpoint commits exist for batches {_range_text(orphan_commits)} that have no "
                f"offsets file"
                + (" (commits ahead of offsets: another query may share this checkpoint)" if ahead else ""),
                "make sure only one query uses this checkpoint; restore offsets/ from a backup",
                path=f"{cp}/commits",
                details={"batches": orphan_commits},
            )
        )
    lc = state.last_committed
    if lp is not None and lc is not None and lp - lc > 1:
        findings.append(
            Finding(
                "uncommitted-batches",
                "warning",
                f"batches {lc + 1}-{lp} are planned but only batch {lc} is committed: Spark re-runs batch "
                f"{lp} only and treats batches {lc + 1}-{lp - 1} as done",
                "check with --table that the table holds those batches; otherwise their data is lost",
                path=f"{cp}/offsets",
                details={"planned_not_committed": list(range(lc + 1, lp + 1))},
            )
        )
    elif lp is not None and lc is None and lp > min(offsets):
        findings.append(
            Finding(
                "no-commits",
                "warning",
                f"batches {offsets[0]}-{lp} are planned but commits/ is empty",
                "a Spark 2.1 checkpoint has no commits/; otherwise restore commits/ from a backup",
                path=f"{cp}/commits",
            )
        )
    # Signs of two queries sharing this checkpoint.
    by_target: dict[str, set[str]] = defaultdict(set)
    for tmp in state.temp_files:
        by_target[f"{tmp.path.parent.name}/{tmp.target}"].add(tmp.writer)
    shared = {t: w for t, w in by_target.items() if len(w) > 1}
    if shared:
        findings.append(
            Finding(
                "concurrent-writers",
                "error",
                "several writers left temporary files for the same checkpoint file ("
                + ", ".join(sorted(shared)[:5])
                + "): two queries (or two runs) wrote this checkpoint at the same time",
                "stop every query using this checkpoint but one; give each query its own checkpoint",
                path=cp,
                details={"targets": {t: sorted(w) for t, w in shared.items()}},
            )
        )
    if state.temp_files:
        findings.append(
            Finding(
                "temp-files",
                "info",
                f"{len(state.temp_files)} leftover .tmp file(s) (a writer crashed mid-write or is "
                f"writing now): " + ", ".join(str(t.path) for t in state.temp_files[:3]),
                "harmless once no query runs; delete them after stopping the query",
                path=cp,
                details={"files": [str(t.path) for t in state.temp_files]},
            )
        )
    planned = sorted(state.offsets.items())
    backwards = [
        (a, b)
        for (a, fa), (b, fb) in itertools.pairwise(planned)
        if fa.metadata
        and fb.metadata
        and fb.metadata.batch_timestamp_ms
        and fa.metadata.batch_timestamp_ms
        and fb.metadata.batch_timestamp_ms < fa.metadata.batch_timestamp_ms
    ]
    if backwards:
        findings.append(
            Finding(
                "timestamps-interleaved",
                "warning",
                "batch timestamps go backwards ("
                + ", ".join(f"offsets/{b} is older than offsets/{a}" for a, b in backwards[:3])
                + "): batches were planned by different runs that overlapped in time",
                "make sure only one query uses this checkpoint at a time",
                path=f"{cp}/offsets",
                details={"pairs": [list(p) for p in backwards]},
            )
        )
    counts = sorted({len(f.sources) for f in state.offsets.values()})
    if len(counts) > 1:
        findings.append(
            Finding(
                "sources-changed",
                "warning",
                f"offsets files hold different numbers of sources ({counts}): the query's sources changed "
                "or an offsets file is truncated",
                "Spark refuses a restart whose sources differ from the checkpoint's; use a new checkpoint",
                path=f"{cp}/offsets",
            )
        )
    return findings


# ----------------------------------------------------------------------------------------------- tables
@dataclass
class _DeltaFacts:
    log: DeltaLog
    snapshot: Snapshot
    entries: list[CommitEntry]
    full_scan: bool
    txn_table_version: int | None = None


def _scan_history(
    log: DeltaLog, snapshot: Snapshot, app_id: str | None, window_start: int | None, mode: HistoryScan
) -> tuple[list[CommitEntry], bool]:
    """Read Delta commits newest first: all of them, or just enough to cover the timeline window."""
    full = mode == "full" or (mode == "auto" and len(snapshot.txns) > 1)
    entries: list[CommitEntry] = []
    if not full and (app_id is None or app_id not in snapshot.txns or window_start is None):
        return entries, False
    for entry in log.iter_history():
        entries.append(entry)
        if full:
            continue
        window_covered = window_start is not None and entry.batch_id is not None and entry.batch_id <= window_start
        if entry.query_id == app_id and window_covered:
            break
    return entries, full


def _delta_findings(
    state: CheckpointState,
    table: Path,
    facts: _DeltaFacts,
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
                path=str(log_dir(table)),
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
                    f"{table}: batches {_range_text(common)} were written under two app ids, {a} and {b} "
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
                f"{_range_text(sorted(b for b, _ in mismatched))} differ from the checkpoint's offsets "
                f"files: "
                "another run rewrote the checkpoint (two queries share it, or it was replaced)",
                "give each query its own checkpoint; compare offsets with `sparkonce history --json`",
                path=str(table),
                details={"batches": [{"batch_id": b, "table_version": v} for b, v in mismatched]},
            )
        )
    # Txn retention.
    retention_text = snap.configuration.get(_TXN_RETENTION_KEY)
    if retention_text and app:
        retention = parse_interval_ms(retention_text)
        last = snap.txns.get(app)
        expired = (
            retention is not None
            and last is not None
            and last.last_updated is not None
            and last.last_updated + retention < now_ms
        )
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
    orphans, orphan_bytes, orphan_list = _orphans(facts.log, snap)
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


def log_dir(table: Path) -> Path:
    """The ``_delta_log`` folder of ``table``."""
    return table / "_delta_log"


def _walk_data_files(root: Path) -> Iterable[tuple[str, int]]:
    """Yield ``(relative path, bytes)`` of data files, skipping ``_``/``.`` names (logs, checksums, CDC)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                yield os.path.relpath(entry.path, root), entry.stat().st_size


def _referenced(log: DeltaLog, paths: Iterable[str], dvs: Iterable[Any], into: set[str]) -> None:
    for raw in paths:
        local = log.data_file_path(raw)
        if local is not None:
            into.add(os.path.normpath(str(local)))
    for dv in dvs:
        if isinstance(dv, dict) and (rel := dv_relative_path(dv)) is not None:
            into.add(os.path.normpath(str(log.table_path / rel)))


def _orphans(log: DeltaLog, snap: Snapshot) -> tuple[int, int, list[str]]:
    """Files under the table root that no table version still in ``_delta_log`` references."""
    referenced: set[str] = set()
    dvs = [a.get("deletionVector") for a in snap.files.values()] + list(snap.tombstone_dvs)
    _referenced(log, (*snap.files, *snap.tombstones), dvs, referenced)
    candidates = {
        rel: nbytes
        for rel, nbytes in _walk_data_files(log.table_path)
        if os.path.normpath(str(log.table_path / rel)) not in referenced
    }
    if candidates and snap.checkpoint_version is not None:
        # Older JSON commits still in the log may reference them (e.g. superseded deletion vectors).
        for v in log.commit_versions():
            if v > snap.checkpoint_version:
                break
            actions = [a.get("add") or a.get("remove") for a in log.read_actions(v)]
            files = [a for a in actions if isinstance(a, dict)]
            _referenced(log, (str(a.get("path")) for a in files), (a.get("deletionVector") for a in files), referenced)
        candidates = {
            rel: n for rel, n in candidates.items() if os.path.normpath(str(log.table_path / rel)) not in referenced
        }
    return len(candidates), sum(candidates.values()), sorted(candidates)


def _file_sink_findings(table: Path) -> tuple[list[Finding], TableReport]:
    findings: list[Finding] = []
    sink_log = read_file_log(table / "_spark_metadata")
    for problem in sink_log.problems:
        findings.append(
            Finding(
                "file-malformed",
                "error",
                problem.problem,
                "restore the file from a backup; Spark cannot list the sink's output without it",
                path=str(problem.path),
            )
        )
    if sink_log.missing_batches:
        findings.append(
            Finding(
                "file-sink-log-gap",
                "error",
                f"{table}/_spark_metadata misses batches {_range_text(list(sink_log.missing_batches))}: "
                "their output files are invisible to readers of the sink",
                "restore the missing log files from a backup",
                path=str(table / "_spark_metadata"),
            )
        )
    listed: set[str] = set()
    for raw in sink_log.paths():
        parsed = urlparse(raw)
        local = unquote(parsed.path) if parsed.scheme in ("file", "") else None
        if local is not None:
            listed.add(os.path.normpath(local))
    count = size = 0
    names: list[str] = []
    on_disk: set[str] = set()
    for rel, nbytes in _walk_data_files(table):
        full = os.path.normpath(str(table.resolve() / rel))
        on_disk.add(full)
        if full not in listed and os.path.normpath(str(table / rel)) not in listed:
            count += 1
            size += nbytes
            names.append(rel)
    if count:
        findings.append(
            Finding(
                "file-sink-unlisted",
                "warning",
                f"{table}: {count} file(s), {size} bytes, are not in _spark_metadata (partial writes of "
                f"failed "
                "batches): reading the folder with a glob or a partition subfolder includes them "
                "(duplicates)",
                "read the sink folder itself (not a glob or subfolder), or delete the unlisted files",
                path=str(table),
                details={"files": sorted(names)[:100], "count": count, "bytes": size},
            )
        )
    absent = sorted(p for p in listed if p.startswith(str(table.resolve())) and p not in on_disk)
    if absent:
        findings.append(
            Finding(
                "file-sink-missing-files",
                "error",
                f"{table}: {len(absent)} file(s) listed in _spark_metadata are missing from disk",
                "restore them; Spark fails reading the sink while they are listed",
                path=str(table),
                details={"files": absent[:100]},
            )
        )
    report = TableReport(
        table_path=str(table),
        kind="file-sink",
        table_version=sink_log.latest_batch_id,
        txn_version=None,
        txn_table_version=None,
        app_ids={},
        orphan_files=count,
        orphan_bytes=size,
    )
    return findings, report


# ----------------------------------------------------------------------------------------------- kafka
def _kafka_next_start(state: CheckpointState) -> dict[TopicPartition, int]:
    """The Kafka offsets the next batch starts from, per topic-partition."""
    lp, lc = state.last_planned, state.last_committed
    if lp is None:
        return {}
    start_batch = lp if (lc is not None and lc >= lp) else lp - 1
    offsets_file = state.offsets.get(start_batch)
    result: dict[TopicPartition, int] = {}
    if offsets_file is not None:
        for source_id in offsets_file.sources:
            parsed = kafka_offsets(offsets_file.source_offset(source_id))
            if parsed:
                result.update(parsed)
    elif start_batch < 0 or start_batch not in state.offset_ids:
        for files in state.sources.values():
            initial = files.get(0)
            parsed = kafka_offsets(initial.offsets) if initial is not None else None
            if parsed:
                result.update(parsed)
    return result


def _kafka_findings(state: CheckpointState, fetch: WatermarkFetcher) -> tuple[list[Finding], list[KafkaPartitionState]]:
    starts = _kafka_next_start(state)
    if not starts:
        return [
            Finding(
                "kafka-no-offsets",
                "info",
                "no Kafka offsets found in the checkpoint's offsets files; nothing to check against the broker",
                "none needed",
            )
        ], []
    marks = fetch(sorted(starts))
    findings: list[Finding] = []
    states: list[KafkaPartitionState] = []
    for (topic, partition), start in sorted(starts.items()):
        low, high = marks.get((topic, partition), (None, None))
        states.append(KafkaPartitionState(topic, partition, start, low, high))
        if low is None or high is None:
            findings.append(
                Finding(
                    "kafka-partition-missing",
                    "error",
                    f"{topic}-{partition} is in the checkpoint but the broker does not have it",
                    "check the topic was not deleted or recreated with fewer partitions",
                    details={"topic": topic, "partition": partition},
                )
            )
        elif start < low:
            findings.append(
                Finding(
                    "kafka-offsets-expired",
                    "error",
                    f"{topic}-{partition}: the next batch starts at offset {start} but the broker's earliest "
                    f"offset is {low}: offsets {start}-{low - 1} ({low - start} records) were deleted by "
                    "retention before being read: data lost",
                    "raise the topic's retention.ms; restart with failOnDataLoss=false to skip the gap",
                    details={"topic": topic, "partition": partition, "start": start, "earliest": low},
                )
            )
        elif start > high:
            findings.append(
                Finding(
                    "kafka-offsets-ahead",
                    "error",
                    f"{topic}-{partition}: the checkpoint's offset {start} is beyond the broker's latest "
                    f"offset "
                    f"{high}: the topic was recreated or truncated",
                    "use a new checkpoint (and decide how to replay the recreated topic)",
                    details={"topic": topic, "partition": partition, "start": start, "latest": high},
                )
            )
    return findings, states


# ----------------------------------------------------------------------------------------------- next start
def _next_start(state: CheckpointState, delta: dict[Path, _DeltaFacts]) -> str:
    lp, lc, app = state.last_planned, state.last_committed, state.query_id
    if state.is_empty:
        text = "No batch has been planned yet: the next start plans batch 0 from the sources' starting offsets."
        if not state.metadata_present:
            text += " A new query id will be created."
        return text
    if lp is None:
        return (
            f"commits/ holds batches up to {lc} but offsets/ is empty: Spark cannot find the offsets to "
            "resume from and will fail to start, or start over: unsafe."
        )
    sentences: list[str] = []
    if lc is not None and lc >= lp:
        sentences.append(
            f"Batch {lp} is planned and committed: the next start plans batch {lp + 1} from the offsets "
            f"where batch {lp} ended."
        )
        for table, facts in delta.items():
            txn = facts.snapshot.txn_version(app) if app else None
            if txn is None:
                continue
            if txn > lp:
                sentences.append(
                    f"But {table} already holds txn({app}, {txn}): the sink will skip batches "
                    f"{lp + 1}-{txn} with their new data: data lost."
                )
            elif txn == lp:
                sentences.append(f"{table} holds txn({app}, {txn}): checkpoint and table agree: safe.")
        return " ".join(sentences)
    sentences.append(f"Batch {lp} is planned but not committed: Spark will re-run it with the same offsets.")
    if lp > 0 and state.offset_ids[0] == lp:
        sentences.append(f"But offsets/{lp - 1} is missing, so Spark cannot find where it starts: it fails.")
    if lc is not None and lp - lc > 1:
        sentences.append(
            f"Batches {lc + 1}-{lp - 1} are planned but not committed either; Spark treats them as done and "
            "does not re-run them."
        )
    for table, facts in delta.items():
        txn = facts.snapshot.txn_version(app) if app else None
        if txn is None:
            sentences.append(
                f"{table} has no txn for query id {app}: the sink cannot tell whether batch {lp} was written."
            )
            continue
        at = f" at table version {facts.txn_table_version}" if facts.txn_table_version is not None else ""
        if txn >= lp:
            sentences.append(
                f"The table {table} already holds txn({app}, {txn}){at}, so the write will be skipped: safe."
            )
        else:
            sentences.append(
                f"The table {table} holds txn({app}, {txn}){at}, so batch {lp} will be written once: safe."
            )
            if lc is not None and txn < lp - 1:
                sentences.append(f"But batches {txn + 1}-{lp - 1} never reached {table}: data lost.")
    return " ".join(sentences)


# ----------------------------------------------------------------------------------------------- timeline
def _timeline(state: CheckpointState, delta: dict[Path, _DeltaFacts], window: int) -> tuple[BatchRow, ...]:
    ids = sorted(set(state.offset_ids) | set(state.commit_ids))
    if not ids:
        return ()
    ids = ids[-window:]
    versions: dict[int, list[int]] = defaultdict(list)
    rows: dict[int, int] = {}
    app = state.query_id
    for facts in delta.values():
        for entry in facts.entries:
            if entry.query_id == app and entry.batch_id is not None:
                versions[entry.batch_id].append(entry.table_version)
                if entry.added_rows is not None:
                    rows[entry.batch_id] = rows.get(entry.batch_id, 0) + entry.added_rows
    out = []
    committed = set(state.commit_ids)
    for b in ids:
        offsets = state.offsets.get(b)
        ts = offsets.metadata.batch_timestamp_ms if offsets and offsets.metadata else None
        out.append(
            BatchRow(b, b in state.offset_ids, b in committed, ts, tuple(sorted(versions.get(b, []))), rows.get(b))
        )
    return tuple(out)


# ----------------------------------------------------------------------------------------------- entry point
def diagnose(
    checkpoint_dir: str | os.PathLike[str],
    *,
    tables: Sequence[str | os.PathLike[str]] = (),
    kafka_bootstrap: str | None = None,
    watermarks: WatermarkFetcher | None = None,
    history_scan: HistoryScan = "auto",
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
        timeline_batches: How many of the newest batches the timeline shows.
        now_ms: The current time in ms (for retention checks); defaults to the clock.

    Raises:
        CheckpointError: ``checkpoint_dir`` is not a folder.
        TableNotFoundError: A table path is neither a Delta table nor a file-sink folder.
        BrokerError: The broker is unreachable.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    state = read_checkpoint(checkpoint_dir)
    findings = _checkpoint_findings(state)
    reports: list[TableReport] = []
    delta: dict[Path, _DeltaFacts] = {}
    ids = sorted(set(state.offset_ids) | set(state.commit_ids))
    window_start = ids[-timeline_batches:][0] if ids else None
    for table_arg in tables:
        table = Path(table_arg)
        if (table / "_delta_log").is_dir():
            try:
                log = DeltaLog(table)
                snap = log.snapshot()
                entries, full = _scan_history(log, snap, state.query_id, window_start, history_scan)
            except TableNotFoundError:
                raise
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
            facts = _DeltaFacts(log, snap, entries, full)
            delta[table] = facts
            table_findings, report = _delta_findings(state, table, facts, now)
        elif (table / "_spark_metadata").is_dir():
            table_findings, report = _file_sink_findings(table)
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

        kafka_findings, kafka_states = _kafka_findings(state, fetch)
        findings.extend(kafka_findings)
    return DoctorReport(
        checkpoint_dir=str(state.checkpoint_dir),
        query_id=state.query_id,
        last_planned=state.last_planned,
        last_committed=state.last_committed,
        next_start=_next_start(state, delta),
        findings=tuple(findings),
        tables=tuple(reports),
        kafka=tuple(kafka_states),
        timeline=_timeline(state, delta, timeline_batches),
        generated_at_ms=now,
    )
