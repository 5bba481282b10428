"""``verify``: reconcile a raw table's ``topic``/``partition``/``offset`` columns with the source's offsets.

Per topic-partition it reports the offset range the table covers, offsets present more than once (with the
table versions and files they came from) and offsets missing from the expected range. Only the snapshot's
active files are read, only the three columns are projected, and all counting is done with Arrow compute and
NumPy (no Python loop over rows). Runs in the CLI process; no Spark needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sparkonce.delta.log import DeltaLog, Snapshot
from sparkonce.errors import DeltaLogError, OptionError
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.ops.findings import Finding, Severity, worst_severity

__all__ = [
    "DuplicateOffset",
    "expected_from_watermarks",
    "PartitionReport",
    "VerifyReport",
    "parse_range",
    "verify_table",
]

_MAX_DETAILS = 100


@dataclass(frozen=True)
class DuplicateOffset:
    """One offset present ``count`` times, with the table versions and files of its copies."""

    offset: int
    count: int
    table_versions: tuple[int | None, ...]
    files: tuple[str, ...]


@dataclass(frozen=True)
class PartitionReport:
    """The reconciliation of one topic-partition."""

    topic: str
    partition: int
    expected_start: int | None
    expected_end: int | None
    min_offset: int | None
    max_offset: int | None
    rows: int
    distinct_offsets: int
    duplicated_offsets: int
    """How many offsets appear more than once."""
    duplicate_rows: int
    """Rows beyond the first copy of each offset (what a de-duplication would delete)."""
    missing_offsets: int
    missing_ranges: tuple[tuple[int, int], ...]
    """Missing offsets as ``(start, end)`` ranges, end exclusive (the first 100)."""
    unexpected_offsets: int
    """Rows whose offset is at or beyond the expected end (cannot come from the source as given)."""
    duplicates: tuple[DuplicateOffset, ...]
    """The first 100 duplicated offsets with where they came from."""

    @property
    def ok(self) -> bool:
        """True when nothing is duplicated, missing or unexpected."""
        return not (self.duplicated_offsets or self.missing_offsets or self.unexpected_offsets)


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify_table` (JSON schema in ``docs/doctor.md``)."""

    table_path: str
    table_version: int
    files_read: int
    rows_scanned: int
    partitions: tuple[PartitionReport, ...]
    findings: tuple[Finding, ...]

    @property
    def severity(self) -> Severity | None:
        """The worst severity among the findings."""
        return worst_severity(self.findings)


def parse_range(text: str) -> OffsetRange:
    """Parse ``topic:partition:start-end`` (end exclusive, like Kafka offsets).

    Raises:
        OptionError: The text does not have that shape or ``end < start``.
    """
    topic, sep, rest = text.rpartition(":")
    head, sep2, partition = topic.rpartition(":")
    try:
        if not sep or not sep2 or not head:
            raise ValueError("expected topic:partition:start-end")
        start_s, dash, end_s = rest.partition("-")
        if not dash:
            raise ValueError("expected start-end after the partition")
        result = OffsetRange(TopicPartition(head, int(partition)), int(start_s), int(end_s))
    except ValueError as err:
        raise OptionError("--range", text, f"{err}; e.g. events:0:0-1000 (end exclusive)") from err
    if result.end < result.start or result.start < 0:
        raise OptionError("--range", text, "end must be >= start >= 0")
    return result


def _physical_names(snapshot: Snapshot, columns: Sequence[str]) -> dict[str, str]:
    """Map logical column names to the names in the Parquet files (column mapping mode ``name``/``id``)."""
    mode = snapshot.configuration.get("delta.columnMapping.mode", "none")
    names = {c: c for c in columns}
    if mode == "none":
        return names
    try:
        schema = json.loads(snapshot.metadata.get("schemaString") or "{}")
    except json.JSONDecodeError as err:
        raise DeltaLogError(f"table version {snapshot.table_version}: schemaString is not JSON") from err
    for f in schema.get("fields", []):
        physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName")
        if f.get("name") in names and physical:
            names[f["name"]] = physical
    return names


def _file_versions(log: DeltaLog, snapshot: Snapshot) -> dict[str, int]:
    """Map each active file's raw path to the table version whose Delta commit added it (when still in
    the log)."""
    versions: dict[str, int] = {}
    wanted = set(snapshot.files)
    for v in log.commit_versions():
        if v > snapshot.table_version:
            break
        for action in log.read_actions(v):
            add = action.get("add")
            if add is not None and add.get("path") in wanted:
                versions[add["path"]] = v
    return versions


def verify_table(
    table_path: str | os.PathLike[str],
    *,
    expected: Iterable[OffsetRange] = (),
    table_version: int | None = None,
    topic_column: str = "topic",
    partition_column: str = "partition",
    offset_column: str = "offset",
) -> VerifyReport:
    """Reconcile a raw Delta table's Kafka coordinates with the expected offset ranges.

    Args:
        table_path: A Delta table with topic, partition and offset columns (Spark's Kafka source schema).
        expected: The offsets the table should hold, per topic-partition (e.g. a topic's earliest to latest
            offsets). Partitions without an expected range are reported with their coverage only.
        table_version: Verify this table version (default: the latest).
        topic_column: Name of the topic column.
        partition_column: Name of the partition column.
        offset_column: Name of the offset column.

    Raises:
        TableNotFoundError: ``table_path`` is not a Delta table.
        DeltaLogError: The log or a data file cannot be read, or a column is missing.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    log = DeltaLog(table_path)
    snapshot = log.snapshot(table_version)
    columns = [topic_column, partition_column, offset_column]
    physical = _physical_names(snapshot, columns)
    partition_cols = set(snapshot.metadata.get("partitionColumns") or [])
    paths = sorted(snapshot.files)
    findings: list[Finding] = []
    with_dv = [p for p in paths if snapshot.files[p].get("deletionVector")]
    if with_dv:
        findings.append(
            Finding(
                "deletion-vectors",
                "warning",
                f"{len(with_dv)} active file(s) have deletion vectors; rows they delete are still counted",
                "run OPTIMIZE (or REORG TABLE ... APPLY (PURGE)) to materialise the deletes, then verify again",
                path=str(table_path),
            )
        )
    pieces: list[pa.Table] = []
    for index, raw in enumerate(paths):
        add = snapshot.files[raw]
        local = log.data_file_path(raw)
        if local is None:
            raise DeltaLogError(f"{table_path}: file {raw} is not on the local filesystem")
        from_file = [physical[c] for c in columns if c not in partition_cols]
        try:
            data = pq.read_table(local, columns=from_file) if from_file else None
        except Exception as err:  # pyarrow raises ArrowInvalid / OSError subclasses
            raise DeltaLogError(f"{local}: cannot read columns {from_file} ({err})") from err
        n = data.num_rows if data is not None else int(json.loads(add.get("stats") or "{}")["numRecords"])
        arrays: dict[str, pa.Array | pa.ChunkedArray] = {}
        for c in columns:
            if c in partition_cols:
                value = (add.get("partitionValues") or {}).get(c)
                arrays[c] = pa.array([value] * n, pa.string())
            else:
                assert data is not None
                arrays[c] = data.column(physical[c])
        pieces.append(
            pa.table(
                {
                    "t": pc.cast(arrays[topic_column], pa.string()),
                    "p": pc.cast(arrays[partition_column], pa.int32()),
                    "o": pc.cast(arrays[offset_column], pa.int64()),
                    "f": pa.array(np.full(n, index, dtype=np.int32)),
                }
            )
        )
    schema = pa.schema([("t", pa.string()), ("p", pa.int32()), ("o", pa.int64()), ("f", pa.int32())])
    table = pa.concat_tables(pieces) if pieces else schema.empty_table()
    table = table.combine_chunks()
    rows = table.num_rows
    valid = pc.and_(pc.and_(pc.is_valid(table["t"]), pc.is_valid(table["p"])), pc.is_valid(table["o"]))
    nulls = rows - pc.sum(pc.cast(valid, pa.int64())).as_py() if rows else 0
    if nulls:
        table = table.filter(valid)
        findings.append(
            Finding(
                "null-coordinates",
                "warning",
                f"{nulls} row(s) have a null {topic_column}, {partition_column} or {offset_column}; "
                "they cannot be matched to a source offset",
                "check the writer fills the Kafka columns; those rows were left out of the counts",
                path=str(table_path),
                details={"rows": nulls},
            )
        )
    versions = _file_versions(log, snapshot) if rows else {}

    expected_map: dict[TopicPartition, OffsetRange] = {r.tp: r for r in expected}
    # Group rows by topic-partition with one stable argsort of an int64 key, then sort each partition's
    # offsets: duplicates are runs of equal offsets, holes are gaps between distinct ones. All NumPy.
    encoded = pc.dictionary_encode(table["t"]).combine_chunks()
    topics = encoded.dictionary.to_pylist()
    t_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    p_np = table["p"].to_numpy().astype(np.int64)
    o_np = table["o"].to_numpy()
    f_np = table["f"].to_numpy()
    key = (t_codes << 32) | (p_np & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate(([0], bounds)).astype(np.int64) if len(order) else np.array([], np.int64)
    ends = np.concatenate((bounds, [len(order)])).astype(np.int64) if len(order) else np.array([], np.int64)
    slices: dict[TopicPartition, tuple[int, int]] = {}
    for a, b in zip(starts.tolist(), ends.tolist()):
        k = int(sorted_keys[a])
        slices[TopicPartition(topics[k >> 32], int(np.int32(np.int64(k & 0xFFFFFFFF))))] = (a, b)
    reports: list[PartitionReport] = []
    for tp in sorted(set(slices) | set(expected_map)):
        a, b = slices.get(tp, (0, 0))
        rows_idx = order[a:b]
        offs = np.sort(o_np[rows_idx], kind="stable")
        if len(offs):
            run_starts = np.flatnonzero(np.concatenate(([True], offs[1:] != offs[:-1])))
            run_counts = np.diff(np.concatenate((run_starts, [len(offs)])))
            distinct = offs[run_starts]
        else:
            run_counts = distinct = np.array([], np.int64)
        dup_mask = run_counts > 1
        dup_values = distinct[dup_mask]
        want = expected_map.get(tp)
        missing = unexpected = 0
        missing_ranges: list[tuple[int, int]] = []
        if want is not None:
            inside = distinct[(distinct >= want.start) & (distinct < want.end)]
            missing = (want.end - want.start) - len(inside)
            unexpected = int(run_counts[distinct >= want.end].sum())
            if missing:
                edges = np.concatenate(([want.start - 1], inside, [want.end]))
                holes = np.flatnonzero(np.diff(edges) > 1)[:_MAX_DETAILS]
                missing_ranges = [(int(edges[i] + 1), int(edges[i + 1])) for i in holes]
        details: list[DuplicateOffset] = []
        if len(dup_values):
            shown = dup_values[:_MAX_DETAILS]
            hit = rows_idx[np.isin(o_np[rows_idx], shown)]
            by_offset: dict[int, list[int]] = {}
            for o, f in zip(o_np[hit].tolist(), f_np[hit].tolist()):
                by_offset.setdefault(o, []).append(f)
            for o in shown.tolist():
                files = sorted(by_offset[o], key=lambda i: (versions.get(paths[i], -1), paths[i]))
                details.append(
                    DuplicateOffset(
                        offset=o,
                        count=len(files),
                        table_versions=tuple(versions.get(paths[i]) for i in files),
                        files=tuple(paths[i] for i in files),
                    )
                )
        reports.append(
            PartitionReport(
                topic=tp.topic,
                partition=tp.partition,
                expected_start=want.start if want else None,
                expected_end=want.end if want else None,
                min_offset=int(offs[0]) if len(offs) else None,
                max_offset=int(offs[-1]) if len(offs) else None,
                rows=len(offs),
                distinct_offsets=len(distinct),
                duplicated_offsets=int(dup_mask.sum()),
                duplicate_rows=int((run_counts[dup_mask] - 1).sum()),
                missing_offsets=int(missing),
                missing_ranges=tuple(missing_ranges),
                unexpected_offsets=unexpected,
                duplicates=tuple(details),
            )
        )
    findings.extend(_findings(str(table_path), reports))
    return VerifyReport(
        table_path=str(table_path),
        table_version=snapshot.table_version,
        files_read=len(paths),
        rows_scanned=rows,
        partitions=tuple(reports),
        findings=tuple(findings),
    )


def _findings(table: str, reports: list[PartitionReport]) -> list[Finding]:
    findings: list[Finding] = []
    for r in reports:
        name = f"{r.topic}-{r.partition}"
        if r.duplicated_offsets:
            example = r.duplicates[0] if r.duplicates else None
            where = (
                f"; e.g. offset {example.offset} x{example.count} from table versions "
                f"{sorted({v for v in example.table_versions if v is not None})}"
                if example
                else ""
            )
            findings.append(
                Finding(
                    "offsets-duplicated",
                    "error",
                    f"{name}: {r.duplicated_offsets} offset(s) appear more than once ({r.duplicate_rows} "
                    f"extra "
                    f"rows){where}",
                    "delete the extra copies (keep one row per topic, partition, offset); see 'duplicates'",
                    path=table,
                    details={"topic": r.topic, "partition": r.partition},
                )
            )
        if r.missing_offsets:
            first = ", ".join(f"{a}-{b - 1}" for a, b in r.missing_ranges[:3])
            findings.append(
                Finding(
                    "offsets-missing",
                    "error",
                    f"{name}: {r.missing_offsets} offset(s) of [{r.expected_start}, {r.expected_end}) "
                    f"are not "
                    f"in the table (first: {first}); compacted or transactional topics have legitimate holes",
                    "replay the missing ranges from the source into the table",
                    path=table,
                    details={"topic": r.topic, "partition": r.partition},
                )
            )
        if r.unexpected_offsets:
            findings.append(
                Finding(
                    "offsets-unexpected",
                    "warning",
                    f"{name}: {r.unexpected_offsets} row(s) have offsets at or beyond the expected end "
                    f"{r.expected_end}",
                    "check the expected ranges (the topic may have been recreated)",
                    path=table,
                    details={"topic": r.topic, "partition": r.partition},
                )
            )
    return findings


def expected_from_watermarks(
    marks: Mapping[TopicPartition, tuple[int, int]],
) -> list[OffsetRange]:
    """Turn broker watermarks ``{TopicPartition: (earliest, latest)}`` into expected ranges."""
    return [OffsetRange(tp, low, high) for tp, (low, high) in sorted(marks.items())]
