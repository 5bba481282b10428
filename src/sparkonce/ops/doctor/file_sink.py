"""Findings about a file sink's folder: gaps in ``_spark_metadata``, files it does not list, files it lists that
are gone. Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from sparkonce.checkpoint.file_log import read_file_log
from sparkonce.ops.doctor.orphans import walk_data_files
from sparkonce.ops.doctor.ranges import range_text
from sparkonce.ops.doctor.report import TableReport
from sparkonce.ops.findings import Finding

__all__ = ["file_sink_findings"]


def file_sink_findings(table: Path) -> tuple[list[Finding], TableReport]:
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
                f"{table}/_spark_metadata misses batches {range_text(list(sink_log.missing_batches))}: "
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
    for rel, nbytes in walk_data_files(table):
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
