"""Delta's log actions, typed: what one line of a Delta commit (``_delta_log/N.json``) or one row of a checkpoint holds.

Each action is a ``TypedDict`` with the protocol's field names (PROTOCOL.md "Actions"), optional fields
``NotRequired``: at run time an action is the plain ``dict`` that ``json`` reads and writes, so a commit file
sparkonce writes is byte for byte what it wrote before the types, and a field another engine writes that the type
does not name is kept as read. A line of the log is one of the wrappers (``{"add": {...}}``, ...), :data:`Action`;
they are ``@final`` so that ``if "add" in action`` tells the type checker which one it is.

One parser, :func:`parse_action` (a log line to an :data:`Action`, with the checks every reader relies on), and one
writer, :func:`encode_actions` (actions to a commit file's bytes). What stays free-form is free-form in Delta too:
``commitInfo``'s ``operationParameters``, ``operationMetrics`` and engine-specific fields, ``stats`` (a JSON string),
``tags``.

Runs on the driver and on executors (no I/O).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, TypeAlias, TypedDict, cast, final

__all__ = [
    "Action",
    "ActionParseError",
    "AddAction",
    "AddCDCFile",
    "AddFile",
    "CdcAction",
    "CheckpointMetadata",
    "CheckpointMetadataAction",
    "CommitInfo",
    "CommitInfoAction",
    "DeletionVectorDescriptor",
    "DomainMetadata",
    "DomainMetadataAction",
    "Format",
    "LastCheckpoint",
    "Metadata",
    "MetadataAction",
    "PartitionValues",
    "Protocol",
    "ProtocolAction",
    "RemoveAction",
    "RemoveFile",
    "SetTransaction",
    "Sidecar",
    "SidecarAction",
    "TxnAction",
    "action_problem",
    "encode_actions",
    "parse_action",
]

PartitionValues: TypeAlias = dict[str, str | None]
"""A file's ``partitionValues``: partition column (physical name) -> the value as a string, None for null."""


class DeletionVectorDescriptor(TypedDict):
    """A ``deletionVector`` descriptor (PROTOCOL.md "Deletion Vector Descriptor Schema")."""

    storageType: str
    pathOrInlineDv: str
    offset: NotRequired[int | None]
    sizeInBytes: int
    cardinality: int
    maxRowIndex: NotRequired[int | None]


class AddFile(TypedDict):
    """The content of an ``add`` action: a data file of the table (its path URL-encoded, relative or absolute)."""

    path: str
    partitionValues: PartitionValues
    size: int
    modificationTime: int
    dataChange: bool
    stats: NotRequired[str | None]
    tags: NotRequired[dict[str, str | None] | None]
    deletionVector: NotRequired[DeletionVectorDescriptor | None]
    baseRowId: NotRequired[int | None]
    defaultRowCommitVersion: NotRequired[int | None]
    clusteringProvider: NotRequired[str | None]


class RemoveFile(TypedDict):
    """The content of a ``remove`` action: a file the commit takes out of the table (a tombstone until VACUUM)."""

    path: str
    deletionTimestamp: NotRequired[int | None]
    dataChange: bool
    extendedFileMetadata: NotRequired[bool | None]
    partitionValues: NotRequired[PartitionValues | None]
    size: NotRequired[int | None]
    tags: NotRequired[dict[str, str | None] | None]
    deletionVector: NotRequired[DeletionVectorDescriptor | None]
    baseRowId: NotRequired[int | None]
    defaultRowCommitVersion: NotRequired[int | None]
    stats: NotRequired[str | None]


class AddCDCFile(TypedDict):
    """The content of a ``cdc`` action: a change data file (``_change_data/``), never a data change itself."""

    path: str
    partitionValues: PartitionValues
    size: int
    dataChange: bool
    tags: NotRequired[dict[str, str | None] | None]


class Format(TypedDict):
    """``metaData.format``: always ``parquet``."""

    provider: str
    options: NotRequired[dict[str, str]]


class Metadata(TypedDict):
    """The content of a ``metaData`` action: the table's id, schema, partitioning and properties."""

    id: str
    name: NotRequired[str | None]
    description: NotRequired[str | None]
    format: Format
    schemaString: str
    partitionColumns: list[str]
    configuration: dict[str, str]
    createdTime: NotRequired[int | None]


class Protocol(TypedDict):
    """The content of a ``protocol`` action (feature lists with reader version 3 / writer version 7)."""

    minReaderVersion: int
    minWriterVersion: int
    readerFeatures: NotRequired[list[str]]
    writerFeatures: NotRequired[list[str]]


class SetTransaction(TypedDict):
    """The content of a ``txn`` action: the newest ``version`` (for sparkonce, the batch id) of an ``appId``."""

    appId: str
    version: int
    lastUpdated: NotRequired[int | None]


class CommitInfo(TypedDict, total=False):
    """The content of a ``commitInfo`` action: informational, and free-form by the protocol (each engine writes its
    own fields); the fields sparkonce writes or reads are named here."""

    timestamp: int
    inCommitTimestamp: int
    operation: str
    operationParameters: dict[str, Any]
    """Delta writes each value as a string (JSON-encoded unless a string); other engines write JSON values."""
    readVersion: int
    isolationLevel: str
    isBlindAppend: bool
    operationMetrics: dict[str, Any]
    userMetadata: str
    engineInfo: str
    txnId: str
    sparkonce: dict[str, Any]
    """What only sparkonce records (:mod:`sparkonce.delta.log.log_entry`): free-form, by design."""


class DomainMetadata(TypedDict):
    """The content of a ``domainMetadata`` action: a named domain's configuration (a JSON string)."""

    domain: str
    configuration: str
    removed: bool


class Sidecar(TypedDict):
    """The content of a ``sidecar`` action of a V2 checkpoint: a file holding more of its actions."""

    path: str
    sizeInBytes: NotRequired[int]
    modificationTime: NotRequired[int]
    tags: NotRequired[dict[str, str] | None]


class CheckpointMetadata(TypedDict):
    """The content of a ``checkpointMetadata`` action of a V2 checkpoint."""

    version: int
    tags: NotRequired[dict[str, str] | None]


class LastCheckpoint(TypedDict):
    """``_delta_log/_last_checkpoint``: where the newest checkpoint is (a hint; the listing decides)."""

    version: int
    size: NotRequired[int]
    parts: NotRequired[int]
    sizeInBytes: NotRequired[int]
    numOfAddFiles: NotRequired[int]
    v2Checkpoint: NotRequired[dict[str, Any]]
    """The V2 checkpoint's top-level file (``path``, ...), as the hint names it."""
    checksum: NotRequired[str]


@final
class AddAction(TypedDict):
    add: AddFile


@final
class RemoveAction(TypedDict):
    remove: RemoveFile


@final
class CdcAction(TypedDict):
    cdc: AddCDCFile


@final
class MetadataAction(TypedDict):
    metaData: Metadata


@final
class ProtocolAction(TypedDict):
    protocol: Protocol


@final
class TxnAction(TypedDict):
    txn: SetTransaction


@final
class CommitInfoAction(TypedDict):
    commitInfo: CommitInfo


@final
class DomainMetadataAction(TypedDict):
    domainMetadata: DomainMetadata


@final
class SidecarAction(TypedDict):
    sidecar: Sidecar


@final
class CheckpointMetadataAction(TypedDict):
    checkpointMetadata: CheckpointMetadata


Action: TypeAlias = (
    AddAction
    | RemoveAction
    | CdcAction
    | MetadataAction
    | ProtocolAction
    | TxnAction
    | CommitInfoAction
    | DomainMetadataAction
    | SidecarAction
    | CheckpointMetadataAction
)
"""One line of a Delta commit, or one action of a checkpoint. An action of a kind the protocol adds later is read as
it is (:func:`parse_action`) and ignored by every reader, as the protocol asks."""


def action_problem(action: Mapping[str, Any]) -> str | None:
    """What makes a log action unusable (a field the readers rely on is missing or of the wrong type), if anything."""

    def not_int(value: Any) -> bool:
        return isinstance(value, bool) or not isinstance(value, int)

    for key in ("add", "remove"):
        if key in action:
            file = action[key]
            if not isinstance(file, dict) or not isinstance(file.get("path"), str):
                return f"{key!r} action has no string 'path'"
            if file.get("size") is not None and not_int(file["size"]):
                return f"{key!r} action for {file['path']} has a non-integer 'size'"
            for field, kind in (("partitionValues", dict), ("deletionVector", dict), ("stats", str)):
                if file.get(field) is not None and not isinstance(file[field], kind):
                    return f"{key!r} action for {file['path']} has a malformed {field!r}"
    if "txn" in action:
        txn = action["txn"]
        if not isinstance(txn, dict) or not isinstance(txn.get("appId"), str) or not_int(txn.get("version")):
            return "'txn' action needs a string 'appId' and an integer 'version'"
    for key in ("metaData", "protocol", "commitInfo"):
        if key in action and not isinstance(action[key], dict):
            return f"{key!r} action is not a JSON object"
    if "domainMetadata" in action and not (
        isinstance(action["domainMetadata"], dict) and isinstance(action["domainMetadata"].get("domain"), str)
    ):
        return "'domainMetadata' action has no string 'domain'"
    if "sidecar" in action and not (
        isinstance(action["sidecar"], dict) and isinstance(action["sidecar"].get("path"), str)
    ):
        return "'sidecar' action has no string 'path'"
    return None


class ActionParseError(ValueError):
    """A log line that is no usable action; ``str()`` says why, for the caller to name the file and the line."""

    def __init__(self, why: str, *, malformed: bool) -> None:
        super().__init__(why)
        self.malformed = malformed
        """True: the line is not a JSON object at all; False: an action with a field readers cannot use."""


def parse_action(line: bytes | str) -> Action:
    """One line of a Delta commit (or of a JSON checkpoint) as its action.

    Raises:
        ActionParseError: the line is not JSON (``is not valid JSON (...)``), not a JSON object (``is not a JSON
            object``), or an action a reader cannot use (:func:`action_problem`).
    """
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ActionParseError(f"is not valid JSON ({err})", malformed=True) from err
    if not isinstance(value, dict):
        raise ActionParseError("is not a JSON object", malformed=True)
    problem = action_problem(value)
    if problem is not None:
        raise ActionParseError(problem, malformed=False)
    return cast(Action, value)


def encode_actions(actions: Iterable[Action]) -> bytes:
    """A Delta commit file: one JSON object per line, compact, in the order given."""
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode("utf-8")
