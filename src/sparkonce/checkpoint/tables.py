"""The tables a query reads and writes, recorded in its checkpoint: ``<checkpoint_dir>/_sparkonce_tables/``.

Runs on the driver (or in the CLI process). Spark's checkpoint holds a query's offsets but not where its sink and its
Delta sources live, so ``doctor`` could not examine a table it was not told about. sparkonce's Delta sink and the
``writeStream...start()`` of a session where sparkonce is registered record them here, one small JSON file per
table::

    _sparkonce_tables/sink-<hash>.json    {"role": "sink", "format": "delta", "location": "/data/events", ...}
    _sparkonce_tables/source-<hash>.json  {"role": "source", "format": "sparkonce.kafka",
                                           "location": "localhost:9092", "options": {"subscribe": "events"}, ...}

Spark's checkpoint reader touches only ``metadata``, ``offsets/``, ``commits/``, ``sources/`` and ``state/`` (and
``async_offsets/``/``async_commits/`` under async progress tracking); it never lists the checkpoint's root, so
the folder travels with the checkpoint and changes nothing for Spark. Each file is created once (put-if-absent,
like Spark's own checkpoint files), so two writers never overwrite each other and a record is never rewritten per
batch. The record is advisory: ``doctor``, ``verify`` and the retention guard read it; a restart never does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sparkonce.checkpoint.fs import checkpoint_fs
from sparkonce.errors import CheckpointError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_FORMATS",
    "RECORDED_OPTIONS",
    "TABLES_DIR",
    "RecordedTable",
    "TableRole",
    "read_recorded_tables",
    "record_tables",
]

log = logging.getLogger(__name__)

TABLES_DIR = "_sparkonce_tables"
"""The folder in the checkpoint's root holding one file per recorded table (Spark never reads it)."""

TableRole = Literal["sink", "source"]

DELTA_FORMATS = frozenset({"delta", "sparkonce.delta"})
"""The format names of a Delta table in a record (a pipeline stage's tables are recorded as ``delta``)."""

RECORDED_OPTIONS = frozenset(
    {
        "subscribe",
        "subscribepattern",
        "assign",
        "kafka.group.id",
        "groupidprefix",
        "commitoffsetstogroup",
        "readchangefeed",
        "startingversion",
        "startingtimestamp",
    }
)
"""The source options worth recording (lower case): which topics and consumer group, and whether a Delta source reads
the change feed. Nothing else is kept: credentials (``kafka.sasl.*``, storage keys) never reach the checkpoint."""

_RECORDED_HERE: set[tuple[str, str]] = set()
"""(checkpoint, record file name) this process has recorded or found: the sink records once, not every batch."""


@dataclass(frozen=True)
class RecordedTable:
    """One table (or topic set) a query reads or writes, as recorded in its checkpoint.

    Attributes:
        role: ``sink`` (the query writes it) or ``source`` (the query reads it).
        format: The data source's name (``delta``, ``sparkonce.delta``, ``sparkonce.kafka``, ``foreachBatch``).
        location: The table's path or URI; for a Kafka source, its bootstrap servers.
        options: The recorded options (:data:`RECORDED_OPTIONS`), e.g. the Kafka topics.
        recorded_at_ms: When the record was written (ms since the epoch).
    """

    role: TableRole
    format: str
    location: str
    options: Mapping[str, str] = field(default_factory=dict)
    recorded_at_ms: int = 0

    @property
    def is_delta(self) -> bool:
        """True for a Delta table (a Delta source or sink; a Kafka source is not)."""
        return self.format.lower() in DELTA_FORMATS

    def file_name(self) -> str:
        """The record's file name: its role and a hash of its format and location."""
        digest = hashlib.sha256(f"{self.format.lower()}\n{self.location}".encode()).hexdigest()[:16]
        return f"{self.role}-{digest}.json"

    def to_json(self) -> str:
        """The record's file text."""
        data = {
            "role": self.role,
            "format": self.format,
            "location": self.location,
            "options": dict(self.options),
            "recordedAtMs": self.recorded_at_ms,
        }
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def from_json(text: str, *, path: str) -> RecordedTable:
        """Parse a record file.

        Raises:
            CheckpointError: not a record (the message names ``path``).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise CheckpointError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from err
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: not a JSON object")
        role, fmt, location = data.get("role"), data.get("format"), data.get("location")
        if role not in ("sink", "source") or not isinstance(fmt, str) or not isinstance(location, str):
            raise CheckpointError(f"{path}: needs role (sink or source), format and location")
        options = data.get("options") or {}
        if not isinstance(options, dict):
            raise CheckpointError(f"{path}: options is not a JSON object")
        at = data.get("recordedAtMs")
        return RecordedTable(
            role=role,
            format=fmt,
            location=location,
            options={str(k): str(v) for k, v in options.items()},
            recorded_at_ms=at if isinstance(at, int) else 0,
        )


def record_tables(
    checkpoint_dir: str | os.PathLike[str],
    tables: Iterable[RecordedTable],
    *,
    spark: SparkSession | None = None,
) -> None:
    """Record ``tables`` in ``checkpoint_dir`` (each once: an existing record is kept as it is).

    Runs on the driver. A checkpoint on a Hadoop file system is written through ``spark``'s (or the active
    session's) Hadoop file system.

    Raises:
        CheckpointError: a record cannot be written (the message names the file).
        StorageError: a non-local checkpoint without a Spark session.
    """
    fs = None
    key = os.fspath(checkpoint_dir)
    for table in tables:
        name = table.file_name()
        if (key, name) in _RECORDED_HERE:
            continue
        if fs is None:
            fs = checkpoint_fs(checkpoint_dir, spark=spark)
        path = fs.join(fs.root, TABLES_DIR, name)
        if not fs.exists(path):
            stamped = RecordedTable(
                table.role, table.format, table.location, dict(table.options), int(time.time() * 1000)
            )
            try:
                fs.create(path, stamped.to_json().encode("utf-8"))
            except CheckpointError:
                if not fs.exists(path):  # not another writer that recorded the same table first
                    raise
            log.info("checkpoint %s: recorded %s %s (%s)", key, table.role, table.location, table.format)
        _RECORDED_HERE.add((key, name))


def read_recorded_tables(
    checkpoint_dir: str | os.PathLike[str], *, spark: SparkSession | None = None
) -> tuple[list[RecordedTable], list[str]]:
    """The tables recorded in ``checkpoint_dir`` (sinks first, then sources, each by location), and the problems
    of record files that cannot be read (each naming its file). No folder: nothing recorded.

    Raises:
        StorageError: a non-local checkpoint without a Spark session.
    """
    fs = checkpoint_fs(checkpoint_dir, spark=spark)
    folder = fs.join(fs.root, TABLES_DIR)
    found: list[RecordedTable] = []
    problems: list[str] = []
    for name in sorted(fs.names(folder)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = fs.join(folder, name)
        try:
            text = fs.read_bytes(path).decode("utf-8")
            found.append(RecordedTable.from_json(text, path=path))
        except CheckpointError as err:
            problems.append(str(err))
        except (OSError, UnicodeDecodeError) as err:
            problems.append(f"{path}: cannot read: {err}")
    found.sort(key=lambda t: (t.role != "sink", t.location))
    return found, problems
