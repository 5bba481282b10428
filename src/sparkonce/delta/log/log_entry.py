"""What a Delta commit written by sparkonce holds: its actions, as Delta's JVM connector writes them.

sparkonce writes its Delta commits itself (one JSON file, put-if-absent: :meth:`TableLocation.put_if_absent`), so
that every engine reading the table sees what happened: ``commitInfo.operation`` is Delta's operation name
(``STREAMING UPDATE``, ``WRITE``, ``MERGE``, ``DELETE``, ``UPDATE``, ``OPTIMIZE``, ...), ``operationParameters``
Delta's parameters (string values, lists and maps JSON-encoded, as Delta writes them), ``operationMetrics`` Delta's
metric names with string values, ``txnId`` a fresh UUID per commit (:data:`sparkonce.delta.txn.cleanup.COMMIT_ID_KEY`),
and a ``sparkonce`` object with what only sparkonce records (the streaming batch id, the checkpoint location and
the text of ``offsets/N``, from which a lost checkpoint is rebuilt). Then, in this order: ``protocol`` and
``metaData`` when the commit creates the table or changes its schema, the batch's ``txn``, the ``remove`` actions
and the ``add`` actions.

Before writing to an existing table, :func:`check_writable` refuses a table whose protocol asks something of a
writer that sparkonce does not do (row tracking, invariants, a write that would not keep identity columns right,
...), naming the feature, before any data moves.

Runs on the driver.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sparkonce._version import __version__
from sparkonce.delta.log.actions import AddFile, CommitInfo, Metadata, RemoveFile
from sparkonce.errors import UnsupportedFeatureError

ENGINE_INFO = f"sparkonce/{__version__}"

BLIND_APPENDS = frozenset({"WRITE", "STREAMING UPDATE"})
"""Operations that, in mode append and without removes, only add rows without reading the table (Delta's
``isBlindAppend``)."""

SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "vacuumProtocolCheck",
        "v2Checkpoint",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "typeWidening",
        "typeWidening-preview",
        "geospatial",
        "domainMetadata",
        "clustering",
        "checkpointProtection",
    }
)
"""Writer features sparkonce may commit to; some only while the table does not use them (:func:`check_writable`;
``geospatial``: a table with geometry or geography columns is made, but its columns take no rows from sparkonce's
writers, :func:`sparkonce.delta.writer.write_task`; ``checkpointProtection``: sparkonce's log cleanup keeps every log
file of such a table, :mod:`sparkonce.delta.txn.log_cleanup`)."""

DELTA_TESTING_ENV = "DELTA_TESTING"
"""Set (to anything): Delta's test-only table features exist, as in Delta (``DeltaUtils.isTesting``)."""
TEST_WRITER_FEATURES = frozenset({"testWriter", "testRemovableWriter", "testReaderWriter", "testRemovableReaderWriter"})
"""Delta's test-only features known under ``DELTA_TESTING`` (:mod:`sparkonce.delta.table.protocol`): they ask nothing of
writers."""


def delta_testing() -> bool:
    """True when ``DELTA_TESTING`` is set in the environment (Delta's test-only table features exist)."""
    return os.environ.get(DELTA_TESTING_ENV) is not None


LEGACY_WRITER_FEATURES: dict[int, frozenset[str]] = {  # the features each legacy minWriterVersion implies
    1: frozenset(),
    2: frozenset({"appendOnly", "invariants"}),
    3: frozenset({"appendOnly", "invariants", "checkConstraints"}),
    4: frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}),
    5: frozenset(
        {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"}
    ),
    6: frozenset(
        {
            "appendOnly",
            "invariants",
            "checkConstraints",
            "changeDataFeed",
            "generatedColumns",
            "columnMapping",
            "identityColumns",
        }
    ),
}
"""The features a legacy ``minWriterVersion`` (before table features, version 7) implies."""


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file written by a task (a data file, or a change data file), described as its ``add`` (or
    ``cdc``) action needs it: executors make them (:mod:`sparkonce.delta.write.files`), the driver commits them."""

    path: str
    """Relative to the table root, ``/``-separated, not URL-encoded (delta-rs encodes it in the log)."""
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    num_records: int
    stats: str
    clustering_provider: str | None = None
    """The ``add`` action's ``clusteringProvider``: set on files a clustering ``OPTIMIZE`` wrote."""


@dataclass(frozen=True)
class Operation:
    """The Delta operation a commit records (``commitInfo``), as
    :func:`commit_metadata` describes it."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    """Delta's metric names; None: derived from the commit's files (``WRITE``, ``STREAMING UPDATE``)."""
    user_metadata: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    """sparkonce's own fields (``batchId``, ``checkpointLocation``, ``offsetsLog``, ...): the ``sparkonce`` object."""
    other: dict[str, Any] = field(default_factory=dict)
    """Other top-level ``commitInfo`` fields the caller gave."""

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> Operation:
        """Read the ``custom_metadata`` that callers give :func:`sparkonce.delta.txn.commit.commit_files`."""
        given = dict(metadata or {})
        ours = given.pop("sparkonce", None)
        ours = dict(ours) if isinstance(ours, Mapping) else {}
        user = given.pop("userMetadata", None)
        metrics = ours.pop("operationMetrics", None)
        return cls(
            name=str(ours.pop("operation", "WRITE")),
            parameters=dict(ours.pop("operationParameters", None) or {}),
            metrics=dict(metrics) if isinstance(metrics, Mapping) else None,
            user_metadata=str(user) if user is not None else None,
            extras=ours,
            other=given,
        )


def commit_metadata(
    operation: str, parameters: dict[str, Any], user_metadata: str | None, **extra: Any
) -> dict[str, Any]:
    """What a Delta commit records of its operation: Delta's ``operation`` name and ``operationParameters`` (and
    ``operationMetrics`` when given in ``extra``), ``userMetadata``, and sparkonce's own fields (``extra``), as
    :func:`sparkonce.delta.txn.commit.commit_files` takes them (``custom_metadata``) and writes them
    (:mod:`sparkonce.delta.log.log_entry`)."""
    info: dict[str, Any] = {
        "operation": operation,
        "operationParameters": parameters,
        "engine": ENGINE_INFO,
    }
    info.update(extra)
    metadata: dict[str, Any] = {"sparkonce": info}
    if user_metadata is not None:
        metadata["userMetadata"] = user_metadata
    return metadata


def parameter_string(value: Any) -> str:
    """One ``operationParameters`` value as Delta writes it: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def commit_info(
    operation: Operation,
    *,
    commit_id: str,
    read_version: int | None,
    blind_append: bool,
    metrics: Mapping[str, Any],
    now_ms: int,
) -> CommitInfo:
    """The ``commitInfo`` action: Delta's fields first, in Delta's order, then sparkonce's."""
    info: dict[str, Any] = {  # CommitInfo, with the caller's other top-level fields
        "timestamp": now_ms,
        "operation": operation.name,
        "operationParameters": {k: parameter_string(v) for k, v in operation.parameters.items()},
    }
    if read_version is not None:
        info["readVersion"] = read_version
    info["isolationLevel"] = "Serializable"
    info["isBlindAppend"] = blind_append
    info["operationMetrics"] = {k: parameter_string(v) for k, v in metrics.items()}
    if operation.user_metadata is not None:
        info["userMetadata"] = operation.user_metadata
    info["engineInfo"] = ENGINE_INFO
    info["txnId"] = commit_id
    for key, value in operation.other.items():
        info.setdefault(key, value)
    info["sparkonce"] = {"engine": ENGINE_INFO, **{k: v for k, v in operation.extras.items() if k != "engine"}}
    return cast(CommitInfo, info)


def file_metrics(operation: str, added: Sequence[Mapping[str, Any]], removed: int) -> dict[str, str]:
    """Delta's metrics of a commit that writes or clears rows (``WRITE``, ``STREAMING UPDATE``, ``TRUNCATE``), from
    its ``add`` actions and the number of files it removes."""
    if operation == "TRUNCATE":
        return {"numRemovedFiles": str(removed)}
    rows = sum(_num_records(a) for a in added)
    size = sum(int(a.get("size") or 0) for a in added)
    if operation == "STREAMING UPDATE":
        return {
            "numRemovedFiles": str(removed),
            "numOutputRows": str(rows),
            "numOutputBytes": str(size),
            "numAddedFiles": str(len(added)),
        }
    return {"numFiles": str(len(added)), "numOutputRows": str(rows), "numOutputBytes": str(size)}


def overwrite_metrics(
    operation: Operation, metrics: Mapping[str, str], removed: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """``metrics`` with what Delta adds to a ``WRITE`` in mode ``Overwrite`` (``OVERWRITE_REMOVES``: the number and
    bytes of the files it removes, 0 on a new table); other commits' as they are. ``removed``: the ``remove``
    actions' contents."""
    found = dict(metrics)
    if operation.name == "WRITE" and operation.parameters.get("mode") == "Overwrite":
        found["numRemovedFiles"] = str(len(removed))
        found["numRemovedBytes"] = str(sum(int(r.get("size") or 0) for r in removed))
    return found


def _num_records(add: Mapping[str, Any]) -> int:
    stats = add.get("stats")
    if not isinstance(stats, str):
        return 0
    try:
        return int(json.loads(stats).get("numRecords") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0


def new_table_metadata(
    schema_string: str,
    partition_by: Sequence[str],
    configuration: Mapping[str, str],
    *,
    description: str | None = None,
) -> Metadata:
    """The ``metaData`` action of a table sparkonce creates (``description``: the table's comment)."""
    metadata = {
        "id": str(uuid.uuid4()),
        **({"description": description} if description is not None else {}),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string,
        "partitionColumns": list(partition_by),
        "configuration": dict(configuration),
        "createdTime": int(time.time() * 1000),
    }
    return cast(Metadata, metadata)


def remove_action(add: AddFile, *, deletion_timestamp: int, data_change: bool) -> RemoveFile:
    """The ``remove`` action of the file an ``add`` action names, with extended file metadata, as Delta writes it
    (``AddFile.removeWithTimestamp``): its tags, deletion vector and row tracking fields carried over, since a reader
    matches a ``remove`` to its ``add`` on path and deletion vector."""
    remove: RemoveFile = {
        "path": add["path"],
        "deletionTimestamp": deletion_timestamp,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": dict(add.get("partitionValues") or {}),
        "size": int(add.get("size") or 0),
    }
    if add.get("tags") is not None:
        remove["tags"] = add.get("tags")
    if add.get("deletionVector") is not None:
        remove["deletionVector"] = add.get("deletionVector")
    if add.get("baseRowId") is not None:
        remove["baseRowId"] = add.get("baseRowId")
    if add.get("defaultRowCommitVersion") is not None:
        remove["defaultRowCommitVersion"] = add.get("defaultRowCommitVersion")
    return remove


def writer_features(protocol: Mapping[str, Any]) -> frozenset[str]:
    """The writer features a protocol names, or that its legacy ``minWriterVersion`` implies."""
    version = int(protocol.get("minWriterVersion") or 1)
    if version >= 7:
        return frozenset(str(f) for f in protocol.get("writerFeatures") or ())
    return LEGACY_WRITER_FEATURES.get(version, LEGACY_WRITER_FEATURES[6])


def check_writable(
    protocol: Mapping[str, Any],
    configuration: Mapping[str, str],
    schema_string: str,
    *,
    table: str,
    operation: str,
    removes_rows: bool,
    identity_handled: bool = False,
) -> None:
    """Refuse, before any data moves, a commit to a table whose protocol asks something sparkonce does not do.

    ``removes_rows``: the commit removes or rewrites rows (an overwrite, a DELETE, UPDATE or MERGE), not a plain
    append or a compaction. ``identity_handled``: the commit keeps identity columns right (a write that filled them
    and moves their high-water marks, or one that writes no new rows: :mod:`sparkonce.delta.table.identity`).

    Raises:
        UnsupportedFeatureError: naming the table, the operation and the feature.
    """
    features = writer_features(protocol)
    supported = SUPPORTED_WRITER_FEATURES | (TEST_WRITER_FEATURES if delta_testing() else frozenset())
    unknown = sorted(features - supported)
    if unknown:
        _refuse(
            table, operation, f"the table's protocol has writer feature(s) {unknown}, which sparkonce cannot honour"
        )
    conf = {k.lower(): str(v).lower() for k, v in configuration.items()}
    if removes_rows and conf.get("delta.appendonly") == "true":
        _refuse(
            table, operation, "the table is append-only (delta.appendOnly = true): rows cannot be removed or changed"
        )
    for marker, what in (
        ("delta.identity.", "identity columns"),
        ("delta.invariants", "column invariants"),
    ):
        if marker == "delta.identity." and identity_handled:
            continue
        if f'"{marker}' in schema_string:
            _refuse(table, operation, f"the table has {what}, which sparkonce does not enforce")


def _refuse(table: str, operation: str, why: str) -> None:
    raise UnsupportedFeatureError(f"{operation} on {table}: {why}; nothing was written")


__all__ = [
    "DELTA_TESTING_ENV",
    "TEST_WRITER_FEATURES",
    "BLIND_APPENDS",
    "overwrite_metrics",
    "LEGACY_WRITER_FEATURES",
    "ENGINE_INFO",
    "SUPPORTED_WRITER_FEATURES",
    "Operation",
    "WrittenFile",
    "check_writable",
    "delta_testing",
    "commit_info",
    "commit_metadata",
    "file_metrics",
    "new_table_metadata",
    "parameter_string",
    "remove_action",
    "writer_features",
]
