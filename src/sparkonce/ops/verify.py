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
from typing import Any

from sparkonce.delta.log.actions import AddFile
from sparkonce.delta.log.delta_log import DeltaLog, Snapshot
from sparkonce.errors import DeltaLogError, OptionError
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.ops.findings import Finding, Severity, worst_severity
from sparkonce.storage import TableLocation

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
            if "add" in action and action["add"]["path"] in wanted:
                versions[action["add"]["path"]] = v
    return versions


def verify_table(
    table_path: str | os.PathLike[str] | TableLocation,
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

    log = DeltaLog(table_path)
    snapshot = log.snapshot(table_version)
    columns = [topic_column, partition_column, offset_column]
    physical = _physical_names(snapshot, columns)
    partition_cols = set(snapshot.metadata.get("partitionColumns") or [])
    paths = sorted(snapshot.files)
    findings: list[Finding] = []

    # Each file is read (only the three columns, the topic dictionary-encoded) and grouped by topic-partition on
    # a small thread pool: Parquet decoding and NumPy release the GIL, so reading one file overlaps grouping another.
    def read_one(raw: str) -> _FileRows:
        fs_path = log.data_file_fs_path(raw)
        if fs_path is None:
            raise DeltaLogError(f"{table_path}: file {raw} is outside the table's store")
        return _read_file(
            fs_path,
            log,
            snapshot.files[raw],
            [topic_column, partition_column, offset_column],
            physical,
            partition_cols,
        )

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(4, max(1, len(paths))), thread_name_prefix="verify-read") as pool:
        per_file = list(pool.map(read_one, paths))
    topic_codes: dict[str, int] = {}
    offsets: list[np.ndarray] = []
    groups: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    """(topic code, partition) -> (file index, row selector) pieces."""
    rows = nulls = 0
    for index, found in enumerate(per_file):
        codes = [topic_codes.setdefault(name, len(topic_codes)) for name in found.topics]
        for (local_code, partition), selector in found.groups:
            groups.setdefault((codes[local_code], partition), []).append((index, selector))
        offsets.append(found.offsets)
        rows += found.rows
        nulls += found.nulls
    if nulls:
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
    topics = {code: name for name, code in topic_codes.items()}
    expected_map: dict[TopicPartition, OffsetRange] = {r.tp: r for r in expected}
    slices = {TopicPartition(topics[code], partition): g for (code, partition), g in groups.items()}
    versions: dict[str, int] | None = None
    reports: list[PartitionReport] = []
    for tp in sorted(set(slices) | set(expected_map)):
        parts = slices.get(tp, [])
        offs = np.concatenate([offsets[f][s] for f, s in parts]) if parts else np.array([], np.int64)
        distinct, run_counts = _offset_counts(offs)
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
            if versions is None:
                versions = _file_versions(log, snapshot)
            shown = dup_values[:_MAX_DETAILS]
            hit_offsets = np.concatenate([offsets[f][s] for f, s in parts])
            file_of = np.concatenate([np.full(_count(s), f, dtype=np.int64) for f, s in parts])
            hit = np.isin(hit_offsets, shown)
            by_offset: dict[int, list[int]] = {}
            for o, f in zip(hit_offsets[hit].tolist(), file_of[hit].tolist()):
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
                min_offset=int(distinct[0]) if len(distinct) else None,
                max_offset=int(distinct[-1]) if len(distinct) else None,
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


@dataclass(frozen=True)
class _FileRows:
    """One data file's Kafka coordinates, grouped (plain data; built in :func:`_read_file`)."""

    topics: list[str]
    """The file's topic names; group keys hold indexes into it."""
    groups: list[tuple[tuple[int, int], Any]]
    """((topic index, partition), row selector) for each run or group of rows."""
    offsets: Any
    """The offsets of the rows with no null coordinate (an int64 NumPy array)."""
    rows: int
    nulls: int


def _read_file(
    fs_path: str,
    log: DeltaLog,
    add: AddFile,
    columns: list[str],
    physical: dict[str, str],
    partition_cols: set[str],
) -> _FileRows:
    """Read one data file's topic, partition and offset columns (``columns`` in that order) and group its rows.

    Raises:
        DeltaLogError: The file cannot be read or lacks a column.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    topic_column, partition_column, offset_column = columns
    from_file = [physical[c] for c in columns if c not in partition_cols]
    as_dictionary = [physical[topic_column]] if topic_column not in partition_cols else []
    try:
        data = (
            pq.read_table(fs_path, columns=from_file, read_dictionary=as_dictionary, filesystem=log.fs)
            if from_file
            else None
        )
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError subclasses
        raise DeltaLogError(f"{log.where(fs_path)}: cannot read columns {from_file} ({err})") from err
    n = data.num_rows if data is not None else int(json.loads(add.get("stats") or "{}")["numRecords"])
    cols: dict[str, Any] = {}
    for c in columns:
        if c in partition_cols:
            values = add.get("partitionValues") or {}  # keyed by physical name in a column-mapped table
            cols[c] = pa.array([values.get(physical[c], values.get(c))] * n, pa.string())
        else:
            assert data is not None
            cols[c] = data.column(physical[c]).combine_chunks()
    topic_col = cols[topic_column]
    if not pa.types.is_dictionary(topic_col.type):
        topic_col = pc.dictionary_encode(topic_col)
    topics = [str(v) for v in topic_col.dictionary.to_pylist()] or [""]
    t_np = topic_col.indices.fill_null(0).to_numpy(zero_copy_only=False) if len(topics) > 1 else None
    p_np = _int_numpy(cols[partition_column])
    o_np = _int_numpy(cols[offset_column])
    bad = [pc.is_valid(c).to_numpy(zero_copy_only=False) for c in (topic_col, *cols.values()) if c.null_count]
    descriptor = add.get("deletionVector")
    keep = None
    if isinstance(descriptor, dict):  # rows a deletion vector deletes are not in the table: not counted
        from sparkonce.delta.table.deletion_vectors import DeletionVector, keep_mask

        where = log.where(fs_path)
        keep = keep_mask(DeletionVector.from_action(descriptor, log.location, data_file=where), n, data_file=where)
    live = int(keep.sum()) if keep is not None else n
    nulls = 0
    if bad or keep is not None:
        valid = np.logical_and.reduce(bad) if bad else np.ones(n, dtype=np.bool_)
        if keep is not None:
            valid &= keep
        nulls = int(live - valid.sum())
        p_np, o_np = p_np[valid], o_np[valid]
        t_np = t_np[valid] if t_np is not None else None
    return _FileRows(topics, _group_rows(0, t_np, p_np), o_np.astype(np.int64, copy=False), live, nulls)


def _int_numpy(col: Any) -> Any:
    """A NumPy copy of an Arrow integer column (strings, from partition values, are parsed; nulls become 0 and
    are masked out by the caller)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_integer(col.type):
        col = pc.cast(col, pa.int64())
    return col.fill_null(0).to_numpy(zero_copy_only=False) if col.null_count else col.to_numpy(zero_copy_only=False)


def _group_rows(code: int, topics: Any, partitions: Any) -> list[tuple[tuple[int, int], Any]]:
    """The rows of one file per (topic code, partition), as row selectors (``slice`` runs or position arrays).

    ``topics`` is ``None`` when the file holds one topic (``code``). Kafka data arrives in long runs of one
    topic-partition (a Spark task reads one partition), so the runs are found in one pass; when the rows are
    shuffled (many short runs) a stable sort groups them instead.
    """
    import numpy as np

    n = len(partitions)
    if not n:
        return []
    change = partitions[1:] != partitions[:-1]
    if topics is not None:
        change |= topics[1:] != topics[:-1]
    bounds = np.flatnonzero(change) + 1
    if len(bounds) <= max(1024, n // 64):
        starts = np.concatenate(([0], bounds)).tolist()
        ends = np.concatenate((bounds, [n])).tolist()
        codes = [code] * len(starts) if topics is None else topics[starts].tolist()
        return [((c, p), slice(a, b)) for c, p, a, b in zip(codes, partitions[starts].tolist(), starts, ends)]
    wide = partitions.astype(np.int64)
    key = wide if topics is None else (topics.astype(np.int64) << 32) | (wide & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    cut = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    out = []
    for a, b in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [n])).tolist()):
        first = int(order[a])
        c = code if topics is None else int(topics[first])
        out.append(((c, int(partitions[first])), order[a:b]))
    return out


def _count(selector: Any) -> int:
    """How many rows a :func:`_group_rows` selector stands for."""
    return selector.stop - selector.start if isinstance(selector, slice) else len(selector)


def _offset_counts(offs: Any) -> tuple[Any, Any]:
    """The distinct offsets (ascending) and how many rows hold each: a count per offset when the offsets are
    dense (the usual case, one linear pass), a sort otherwise (compacted topics, huge gaps)."""
    import numpy as np

    if not len(offs):
        return np.array([], np.int64), np.array([], np.int64)
    low, high = int(offs.min()), int(offs.max())
    if high - low < 4 * len(offs) + 1_000_000:
        counts = np.bincount(offs - low)
        present = np.flatnonzero(counts)
        return present + low, counts[present]
    ordered = np.sort(offs)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.concatenate((starts, [len(ordered)])))


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
