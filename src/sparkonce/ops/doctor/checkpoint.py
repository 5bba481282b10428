"""Findings about the checkpoint itself: metadata, gaps in ``offsets/`` and ``commits/``, shared writers.

Runs on the driver (or in the CLI process); reads nothing itself (works on a :class:`CheckpointState`).
"""

from __future__ import annotations

import itertools
import posixpath
from collections import defaultdict

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.ops.doctor.ranges import missing_ids, range_text
from sparkonce.ops.findings import Finding

__all__ = ["checkpoint_findings", "first_batch_rerun"]

_MAX_FILE_FINDINGS = 20


def checkpoint_findings(state: CheckpointState) -> list[Finding]:
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
        code = "metadata-corrupt" if posixpath.basename(problem.path) == "metadata" else "file-malformed"
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
    gaps = missing_ids(offsets)
    if gaps:
        findings.append(
            Finding(
                "offsets-gap",
                "error",
                f"offsets/ has gaps: no offsets file for batch(es) {range_text(gaps)} between "
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
    rerun = first_batch_rerun(state)
    if rerun is not None:
        findings.append(rerun)
    commit_gaps = missing_ids(commits)
    if commit_gaps:
        findings.append(
            Finding(
                "commits-gap",
                "warning",
                f"commits/ has gaps: batches {range_text(commit_gaps)} have no checkpoint commit",
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
                f"checkpoint commits exist for batches {range_text(orphan_commits)} that have no "
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
        by_target[f"{posixpath.basename(posixpath.dirname(tmp.path))}/{tmp.target}"].add(tmp.writer)
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


def first_batch_rerun(state: CheckpointState) -> Finding | None:
    """``batch0-rerun`` (info): batch 0 is planned, not committed; its start offsets are not in the checkpoint.

    A normal state after a crash in the first batch: Spark asks the sources for their initial offsets again,
    and sparkonce's sources derive them from the end saved in ``offsets/0`` (issue 13).
    """
    planned = state.offsets.get(0)
    if planned is None or 0 in state.commit_ids or state.last_planned != 0:
        return None
    cp = str(state.checkpoint_dir)
    ends = {source: planned.source_offset(source) for source in planned.sources}
    delta = [s for s, end in ends.items() if isinstance(end, dict) and "reservoirId" in end]
    said = [
        f"source {s} (Delta table id {ends[s]['reservoirId']}) re-reads up to table version "
        f"{ends[s]['reservoirVersion']}, index {ends[s]['index']}"
        + (" of its initial snapshot" if ends[s].get("isStartingVersion") else "")
        for s in delta
    ]
    return Finding(
        "batch0-rerun",
        "info",
        "batch 0 is planned but not committed: Spark re-runs it from the sources' initial offsets, which it does "
        "not checkpoint; sparkonce's Delta and Kafka sources derive them from the end in offsets/0, so the re-run "
        "reads exactly what batch 0 planned, whatever the inputs received since"
        + (f" ({'; '.join(said)})" if said else ""),
        "nothing to do: start the query again",
        path=f"{cp}/offsets/0",
        details={"end_offsets": ends},
    )
