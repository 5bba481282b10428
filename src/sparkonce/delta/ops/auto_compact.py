"""Auto compaction: after a streaming batch's commit, compact the small files of the partitions it wrote to.

Delta's post-commit hook ``AutoCompact``, as sparkonce's sink runs it. Runs on the driver (in the process that
commits the batch). Whether it runs, by Delta's priority:

1. the session conf ``spark.databricks.delta.autoCompact.enabled`` (``true``/``false``), when set;
2. else the table property ``delta.autoOptimize.autoCompact`` (``true``/``false``; unset: off).

When on, after each batch that added files: the partitions the batch added files to are counted in the table as
it is after the commit; a partition holding at least ``spark.databricks.delta.autoCompact.minNumFiles`` (default
50) files smaller than ``spark.databricks.delta.autoCompact.minFileSize`` (default half of
``spark.databricks.delta.autoCompact.maxFileSize``, 128 MiB) is compacted: its files below the minimum size are
bin-packed into files of at most ``maxFileSize`` (the OPTIMIZE bin-packing of :mod:`sparkonce.delta.ops.optimize`) and
committed as Delta commits auto compaction: operation ``OPTIMIZE`` with ``auto: true``, every ``add`` and
``remove`` ``dataChange=false`` (downstream streams skip it). Delta keeps the counts in the driver's memory (and
so compacts a partition on its first write after a driver start); sparkonce counts the files in the table itself,
which gives the same answer after a restart.

A compaction that fails (a concurrent DELETE removed a file it compacted, a store error) is logged and dropped:
the batch's commit stands, as in Delta. The rewrite runs in the committing process, not in Spark tasks: a Python
data source's ``commit`` runs in a process of the driver with no Spark session to start tasks from. A compaction
reads and writes at most ``maxFileSize`` bytes per output file, one bin after the other.

``delta.autoOptimize.optimizeWrite`` / ``spark.databricks.delta.optimizeWrite.enabled`` (Delta: a shuffle by the
partition columns before the write, so each partition value goes to one task) cannot be honoured by a Python data
source sink: it receives the rows of the query's tasks as Spark planned them and cannot ask for a distribution.
The sink logs a warning when it is on (:func:`optimize_write_requested`); auto compaction, or
``repartition(*partition_columns)`` before ``writeStream``, gives fewer files per batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkonce.delta.table.properties import property_value
from sparkonce.delta.txn.conflicts import PartitionKey, partition_key
from sparkonce.errors import OptionError
from sparkonce.storage import TableLocation

if TYPE_CHECKING:
    from sparkonce.delta.log.log_entry import WrittenFile
    from sparkonce.delta.ops.optimize import OptimizeResult

log = logging.getLogger(__name__)

ENABLED_CONF = "spark.databricks.delta.autoCompact.enabled"
MIN_NUM_FILES_CONF = "spark.databricks.delta.autoCompact.minNumFiles"
MAX_FILE_SIZE_CONF = "spark.databricks.delta.autoCompact.maxFileSize"
MIN_FILE_SIZE_CONF = "spark.databricks.delta.autoCompact.minFileSize"
OPTIMIZE_WRITE_CONF = "spark.databricks.delta.optimizeWrite.enabled"
SESSION_CONFS = (ENABLED_CONF, MIN_NUM_FILES_CONF, MAX_FILE_SIZE_CONF, MIN_FILE_SIZE_CONF, OPTIMIZE_WRITE_CONF)
"""The session confs the writer shim hands to the sink (a data source cannot read the session's conf)."""
AUTO_COMPACT_PROPERTY = "delta.autoOptimize.autoCompact"
OPTIMIZE_WRITE_PROPERTY = "delta.autoOptimize.optimizeWrite"

DEFAULT_MIN_NUM_FILES = 50
"""Delta's ``spark.databricks.delta.autoCompact.minNumFiles`` default."""
DEFAULT_MAX_FILE_SIZE = 128 * 1024 * 1024
"""Delta's ``spark.databricks.delta.autoCompact.maxFileSize`` default (128 MiB)."""


@dataclass(frozen=True)
class AutoCompactSettings:
    """The session's auto compaction confs (Delta's names), checked. Runs on the driver."""

    enabled: bool | None = None
    """``spark.databricks.delta.autoCompact.enabled``; None when unset (the table property decides)."""
    min_num_files: int = DEFAULT_MIN_NUM_FILES
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    min_file_size: int | None = None
    """Files below it are compacted; None: half of ``max_file_size``, as in Delta."""
    optimize_write: bool | None = None
    """``spark.databricks.delta.optimizeWrite.enabled``; None when unset."""

    @property
    def small_file_size(self) -> int:
        """Files strictly smaller than this are small (compacted and counted)."""
        return self.max_file_size // 2 if self.min_file_size is None else self.min_file_size

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> AutoCompactSettings:
        """The settings from session conf entries (other keys ignored).

        Raises:
            OptionError: a value Delta refuses, naming the conf.
        """
        enabled = _boolean(conf, ENABLED_CONF)
        optimize_write = _boolean(conf, OPTIMIZE_WRITE_CONF)
        min_num_files = _non_negative(conf, MIN_NUM_FILES_CONF)
        max_file_size = _non_negative(conf, MAX_FILE_SIZE_CONF)
        return cls(
            enabled,
            DEFAULT_MIN_NUM_FILES if min_num_files is None else min_num_files,
            DEFAULT_MAX_FILE_SIZE if max_file_size is None else max_file_size,
            _non_negative(conf, MIN_FILE_SIZE_CONF),
            optimize_write,
        )

    def enabled_for(self, configuration: Mapping[str, Any]) -> bool:
        """True when auto compaction runs on a table with these properties: the session conf first, then
        ``delta.autoOptimize.autoCompact``.

        Raises:
            OptionError: the table property is neither ``true`` nor ``false`` (Delta's "invalid auto-compact type").
        """
        if self.enabled is not None:
            return self.enabled
        value = property_value(configuration, AUTO_COMPACT_PROPERTY)
        if value is None:
            return False
        text = value.strip().lower()
        if text not in ("true", "false"):
            raise OptionError(
                AUTO_COMPACT_PROPERTY,
                value,
                "[DELTA_INVALID_AUTO_COMPACT_TYPE] Invalid auto-compact type: the allowed values are true and false",
            )
        return text == "true"


def optimize_write_requested(settings: AutoCompactSettings, configuration: Mapping[str, Any]) -> bool:
    """True when the session conf or else the table property asks for optimized writes (which the sink cannot
    honour: see the module's docstring)."""
    if settings.optimize_write is not None:
        return settings.optimize_write
    value = property_value(configuration, OPTIMIZE_WRITE_PROPERTY)
    return value is not None and value.strip().lower() == "true"


def partitions_to_compact(
    files: Iterable[tuple[Mapping[str, str | None], int]],
    touched: Iterable[Mapping[str, str | None]],
    settings: AutoCompactSettings,
) -> set[PartitionKey]:
    """Of the ``touched`` partitions (``partitionValues`` as the log writes them), those holding at least
    ``min_num_files`` small files among ``files`` (each ``(partitionValues, size)``, the table's active files)."""
    wanted = {partition_key(p) for p in touched}
    counts: dict[PartitionKey, int] = {}
    for values, size in files:
        key = partition_key(values)
        if key in wanted and size < settings.small_file_size:
            counts[key] = counts.get(key, 0) + 1
    return {key for key, count in counts.items() if count >= max(settings.min_num_files, 2)}


def compact_after_commit(
    location: TableLocation, added: Sequence[WrittenFile], settings: AutoCompactSettings
) -> OptimizeResult | None:
    """Delta's auto compaction after a commit that added ``added``: the partitions they went to that hold enough
    small files are compacted in one OPTIMIZE commit (``auto: true``). Never raises: a failure (a conflict with a
    concurrent DELETE, a store error) is logged and the batch's commit stands.

    Returns:
        What the compaction did, or None when nothing was due or it failed.
    """
    if not added:
        return None
    try:
        return _compact(location, added, settings)
    except Exception as err:  # the batch's commit has landed; a compaction is only an optimisation
        log.warning(
            "auto compaction of %s failed (%s: %s); the batch's commit stands, the next batch tries again",
            location,
            type(err).__name__,
            err,
        )
        return None


def _compact(
    location: TableLocation, added: Sequence[WrittenFile], settings: AutoCompactSettings
) -> OptimizeResult | None:
    from sparkonce.delta.log.table_view import current_table
    from sparkonce.delta.ops.optimize import bin_pack, commit_compaction, rewrite_bins_in_process
    from sparkonce.delta.ops.rewrite import open_snapshot

    started = time.monotonic()
    # The process's kept snapshot, brought up to date with the commits after it (the batch's own commit is already
    # in it): not the newest checkpoint read again, whose tombstones grow with every compaction.
    table = current_table(location)
    if table is None:
        return None
    active = ((dict(a.get("partitionValues") or {}), int(a.get("size") or 0)) for a in table.snapshot.files.values())
    chosen = partitions_to_compact(active, (f.partition_values for f in added), settings)
    if not chosen:
        return None
    snapshot = open_snapshot(location, operation="OPTIMIZE")
    considered = [f for f in snapshot.files if partition_key(f.removed().partition_values) in chosen]
    bins = bin_pack(
        considered, snapshot.partition_columns, settings.max_file_size, min_file_size=settings.small_file_size
    )
    if not bins:
        return None
    removed = [f for b in bins for f in b]
    written = rewrite_bins_in_process(snapshot, bins)
    params = {
        "predicate": _predicate_json(sorted(chosen)),
        "zOrderBy": [],
        "clusterBy": "[]",
        "auto": True,
    }
    result = commit_compaction(snapshot, considered, removed, written, params, started=started)
    log.info(
        "auto compaction of %s: table_version %s, %d file(s) into %d in %d partition(s)",
        location,
        result.table_version,
        result.files_removed,
        result.files_added,
        result.partitions_optimized,
    )
    return result


def _predicate_json(partitions: Sequence[PartitionKey]) -> str:
    """The ``predicate`` parameter: the partitions compacted, as one SQL predicate (``[]`` unpartitioned)."""
    import json

    branches = []
    for key in partitions:
        if not key:
            continue
        terms = [f"({name} <=> {_literal(value)})" for name, value in key]
        branches.append(" AND ".join(terms) if len(terms) == 1 else "(" + " AND ".join(terms) + ")")
    return json.dumps([" OR ".join(branches)] if branches else [])


def _literal(value: str | None) -> str:
    return "NULL" if value is None else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _boolean(conf: Mapping[str, str], name: str) -> bool | None:
    raw = conf.get(name)
    if raw is None:
        return None
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(name, raw, f'"{name}" must be one of: (false,true)')
    return text == "true"


def _non_negative(conf: Mapping[str, str], name: str) -> int | None:
    raw = conf.get(name)
    if raw is None:
        return None
    text = str(raw).strip()
    if not text.isdigit():
        raise OptionError(name, raw, "must be a non-negative whole number")
    return int(text)


__all__ = [
    "AUTO_COMPACT_PROPERTY",
    "AutoCompactSettings",
    "ENABLED_CONF",
    "MAX_FILE_SIZE_CONF",
    "MIN_FILE_SIZE_CONF",
    "MIN_NUM_FILES_CONF",
    "OPTIMIZE_WRITE_CONF",
    "OPTIMIZE_WRITE_PROPERTY",
    "SESSION_CONFS",
    "compact_after_commit",
    "optimize_write_requested",
    "partitions_to_compact",
]
