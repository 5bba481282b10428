"""Schema tracking for Delta streams: the ``schemaTrackingLocation`` of ``readStream.format("delta")``.

Under column mapping a column can be renamed or dropped, and under type widening its type can widen. A stream that
read the old schema cannot simply go on: its query (and its sink) were analyzed with the old columns. Delta's
answer, followed here, is a *schema log* per source (``DeltaSourceMetadataTrackingLog``):

* the log lives in ``<schemaTrackingLocation>/_schema_log_<tableId>`` (``_<streamingSourceTrackingId>`` appended
  when given), which must be under the query's checkpoint location
  (``DELTA_STREAMING_SCHEMA_LOCATION_NOT_UNDER_CHECKPOINT`` otherwise); ``schemaLocation`` is an alias;
* its entries are files ``0``, ``1``, ... each holding ``v1``, a newline and one :class:`PersistedMetadata` as JSON
  (Delta's ``JsonSchemaSerializer``): the table id, the table version the entry is valid from, the data and
  partition schemas, the table configuration and protocol, the source's checkpoint folder, and for an entry that
  replaces the one before it, the sequence number of the entry before that;
* the stream reads with the newest entry's schema; the first entry is written when the stream starts (the schema
  of the table version it starts reading at);
* a commit whose schema, partitioning, ``delta.*`` configuration or protocol differs from the entry's is a barrier:
  the batch before it ends at the commit (offset index ``-20``, Delta's ``METADATA_CHANGE_INDEX``), the commit's
  metadata is appended to the log once that batch is done, and the query fails with
  ``DELTA_STREAMING_METADATA_EVOLUTION`` asking for a restart;
* the restarted query reads with the new schema, unless the change is non-additive (a rename, a drop, a type
  widening) and nothing unblocks it: then it stops with
  ``DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION``, naming the reader options
  (``allowSourceColumnRename`` / ``Drop`` / ``TypeChange`` = ``always`` or the table version) and SQL confs
  (``spark.databricks.delta.streaming.allowSourceColumn{Rename,Drop,RenameAndDrop,TypeChange}``, for all streams
  or, suffixed ``.ckpt_<hash>``, for one checkpoint) that do.

This module holds the log (driver or the Python source's planning worker; no Spark) and the rules; the planning is
:mod:`sparkonce.delta.read.stream`, the checks at the query's start :mod:`sparkonce.delta.patches`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.fs as pafs

from sparkonce.delta.log.actions import Metadata, Protocol
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.table.column_mapping import PHYSICAL_NAME_KEY
from sparkonce.delta.table.type_widening import sql_name, widens_to
from sparkonce.errors import DeltaLogError, OptionError, SchemaTrackingError
from sparkonce.options import lookup
from sparkonce.storage import TableLocation, table_location

log = logging.getLogger(__name__)

SCHEMA_TRACKING_LOCATION_OPTION = "schemaTrackingLocation"
SCHEMA_TRACKING_LOCATION_ALIAS = "schemaLocation"
SOURCE_TRACKING_ID_OPTION = "streamingSourceTrackingId"
ALLOW_RENAME_OPTION = "allowSourceColumnRename"
ALLOW_DROP_OPTION = "allowSourceColumnDrop"
ALLOW_TYPE_CHANGE_OPTION = "allowSourceColumnTypeChange"

CONF_PREFIX = "spark.databricks.delta.streaming."
UNBLOCK_RENAME_AND_DROP_CONF = CONF_PREFIX + "allowSourceColumnRenameAndDrop"
UNBLOCK_RENAME_CONF = CONF_PREFIX + "allowSourceColumnRename"
UNBLOCK_DROP_CONF = CONF_PREFIX + "allowSourceColumnDrop"
UNBLOCK_TYPE_CHANGE_CONF = CONF_PREFIX + "allowSourceColumnTypeChange"
UNBLOCK_CONFS = (UNBLOCK_RENAME_AND_DROP_CONF, UNBLOCK_RENAME_CONF, UNBLOCK_DROP_CONF, UNBLOCK_TYPE_CHANGE_CONF)
ALLOW_OUTSIDE_CHECKPOINT_CONF = CONF_PREFIX + "allowSchemaLocationOutsideCheckpointLocation"

METADATA_CHANGE_INDEX = -20
"""Offset index of a metadata change barrier (Delta's ``METADATA_CHANGE_INDEX``; ``sourceVersion`` 3)."""
POST_METADATA_CHANGE_INDEX = -19
"""Offset index right after a barrier (Delta's ``POST_METADATA_CHANGE_INDEX``; ``sourceVersion`` 3)."""

SERDE_VERSION = 1
_DOC_LINK = "https://docs.delta.io/latest/versioning.html#column-mapping"


@dataclass(frozen=True)
class PersistedMetadata:
    """One entry of a schema log: Delta's ``PersistedMetadata``, the metadata a stream reads files with from
    ``delta_commit_version`` on. Driver (or the Python source's planning worker)."""

    table_id: str
    delta_commit_version: int
    data_schema_json: str
    partition_schema_json: str
    source_metadata_path: str
    table_configurations: dict[str, str] | None = None
    protocol_json: str | None = None
    previous_metadata_seq_num: int | None = None

    @classmethod
    def of(
        cls,
        table_id: str,
        table_version: int,
        metadata: Mapping[str, Any],
        protocol: Mapping[str, Any],
        source_metadata_path: str,
    ) -> PersistedMetadata:
        """The entry of a table's ``metaData`` and ``protocol`` actions at ``table_version``."""
        schema = json.loads(str(metadata.get("schemaString") or '{"type":"struct","fields":[]}'))
        partitions = [str(c) for c in metadata.get("partitionColumns") or []]
        by_name = {str(f["name"]).lower(): f for f in schema.get("fields") or []}
        partition_schema = {
            "type": "struct",
            "fields": [by_name[c.lower()] for c in partitions if c.lower() in by_name],
        }
        return cls(
            table_id=table_id,
            delta_commit_version=table_version,
            data_schema_json=_compact(schema),
            partition_schema_json=_compact(partition_schema),
            source_metadata_path=source_metadata_path,
            table_configurations={str(k): str(v) for k, v in (metadata.get("configuration") or {}).items()},
            protocol_json=_compact({"protocol": dict(protocol)}),
        )

    @property
    def fields(self) -> list[dict[str, Any]]:
        """The data schema's fields (Delta schema JSON)."""
        return list(_parse_schema(self.data_schema_json).get("fields") or [])

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(str(f["name"]) for f in _parse_schema(self.partition_schema_json).get("fields") or [])

    @property
    def protocol(self) -> dict[str, Any]:
        """The ``protocol`` action's content (empty when the entry has none)."""
        if self.protocol_json is None:
            return {}
        return dict(json.loads(self.protocol_json).get("protocol") or {})

    def metadata_action(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """``base`` (a ``metaData`` action's content) with this entry's schema, partitioning and configuration, as
        Delta's source builds its read snapshot from an entry."""
        out = dict(base)
        out["schemaString"] = self.data_schema_json
        out["partitionColumns"] = list(self.partition_columns)
        if self.table_configurations is not None:
            out["configuration"] = dict(self.table_configurations)
        return out

    def to_json(self) -> dict[str, Any]:
        """The entry as Delta serializes it (absent optional fields left out)."""
        out: dict[str, Any] = {
            "tableId": self.table_id,
            "deltaCommitVersion": self.delta_commit_version,
            "dataSchemaJson": self.data_schema_json,
            "partitionSchemaJson": self.partition_schema_json,
            "sourceMetadataPath": self.source_metadata_path,
        }
        if self.table_configurations is not None:
            out["tableConfigurations"] = self.table_configurations
        if self.protocol_json is not None:
            out["protocolJson"] = self.protocol_json
        if self.previous_metadata_seq_num is not None:
            out["previousMetadataSeqNum"] = self.previous_metadata_seq_num
        return out

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> PersistedMetadata:
        """Parse an entry; ``where`` names it in errors.

        Raises:
            SchemaTrackingError: ``DELTA_STREAMING_SCHEMA_LOG_PARSE_SCHEMA_FAILED`` (a field missing or mistyped).
        """
        try:
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            configurations = data.get("tableConfigurations")
            previous = data.get("previousMetadataSeqNum")
            entry = cls(
                table_id=_typed(data, "tableId", str),
                delta_commit_version=_typed(data, "deltaCommitVersion", int),
                data_schema_json=_typed(data, "dataSchemaJson", str),
                partition_schema_json=_typed(data, "partitionSchemaJson", str),
                source_metadata_path=_typed(data, "sourceMetadataPath", str),
                table_configurations=None
                if configurations is None
                else {str(k): str(v) for k, v in configurations.items()},
                protocol_json=None if data.get("protocolJson") is None else str(data["protocolJson"]),
                previous_metadata_seq_num=None if previous is None else int(previous),
            )
            _parse_schema(entry.data_schema_json)
            _parse_schema(entry.partition_schema_json)
        except (TypeError, ValueError, AttributeError) as err:
            raise SchemaTrackingError(
                "[DELTA_STREAMING_SCHEMA_LOG_PARSE_SCHEMA_FAILED] Failed to parse the schema from the Delta streaming "
                f"source schema log. The schema log may have been corrupted. Please pick a new schema location. "
                f"({where}: {err})"
            ) from err
        return entry

    def serialized(self) -> bytes:
        """The entry's file content: ``v1``, a newline, the JSON (Delta's ``JsonSchemaSerializer``)."""
        return f"v{SERDE_VERSION}\n{json.dumps(self.to_json(), separators=(',', ':'))}".encode()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _parse_schema(text: str) -> dict[str, Any]:
    schema = json.loads(text)
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise ValueError(f"not a struct schema: {text[:200]}")
    return schema


def _typed(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if type(value) is not kind:
        raise TypeError(f"{key!r} must be a JSON {kind.__name__}, not {value!r}")
    return value


def tracking_root(options: Mapping[str, str]) -> str | None:
    """The ``schemaTrackingLocation`` (or its alias ``schemaLocation``) a stream's options give, None without."""
    given = lookup(options, SCHEMA_TRACKING_LOCATION_OPTION)
    if given is None:
        given = lookup(options, SCHEMA_TRACKING_LOCATION_ALIAS)
    if given is not None and not given.strip():
        raise OptionError(SCHEMA_TRACKING_LOCATION_OPTION, given, "must name a folder under the checkpoint location")
    return given


def log_folder(root: str, table_id: str, tracking_id: str | None) -> str:
    """``<root>/_schema_log_<tableId>[_<trackingId>]`` (Delta's ``fullMetadataTrackingLocation``)."""
    suffix = f"_schema_log_{table_id}" + (f"_{tracking_id}" if tracking_id else "")
    return root.rstrip("/") + "/" + suffix


class SchemaLog:
    """A source's schema log (Delta's ``DeltaSourceMetadataTrackingLog``). Driver, or the Python source's planning
    worker; no Spark.

    Args:
        folder: ``<schemaTrackingLocation>/_schema_log_<tableId>[_<id>]``.
        table_id: The source table's id; an entry of another table is refused.
        storage_options: For a folder on an object store.
    """

    def __init__(self, folder: str, table_id: str, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.folder = folder
        self.table_id = table_id
        self._location: TableLocation = table_location(folder, storage_options=dict(storage_options or {}))

    def sequence_numbers(self) -> list[int]:
        """The entries' sequence numbers, in order (file names that are not numbers are ignored, as Delta does)."""
        filesystem = self._location.filesystem()
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(self._location.fs_path(""), allow_not_found=True))
        except OSError as err:
            raise self._location.store_error(err) from err
        names = [os.path.basename(i.path) for i in infos if i.type == pafs.FileType.File]
        return sorted(int(n) for n in names if n.isdigit())

    def entry(self, seq: int) -> PersistedMetadata:
        """The entry ``seq``.

        Raises:
            SchemaTrackingError: the file is empty or not a ``v1`` entry
                (``DELTA_STREAMING_SCHEMA_LOG_DESERIALIZE_FAILED``), or names another table
                (``DELTA_STREAMING_SCHEMA_LOG_INCOMPATIBLE_DELTA_TABLE_ID``).
        """
        path = self._location.fs_path(str(seq))
        try:
            with self._location.filesystem().open_input_stream(path) as handle:
                text = handle.read().decode("utf-8")
        except OSError as err:
            raise self._location.store_error(err) from err
        head, _, body = text.partition("\n")
        if head.strip() != f"v{SERDE_VERSION}":
            raise SchemaTrackingError(
                "[DELTA_STREAMING_SCHEMA_LOG_DESERIALIZE_FAILED] Incomplete log file in the Delta streaming source "
                f"schema log at '{self.folder}'. The schema log may have been corrupted. Please pick a new schema "
                f"location. (entry {seq} starts with {head[:20]!r}, not 'v{SERDE_VERSION}')"
            )
        try:
            data = json.loads(body.strip() or "{}")
        except json.JSONDecodeError as err:
            raise SchemaTrackingError(
                "[DELTA_STREAMING_SCHEMA_LOG_DESERIALIZE_FAILED] Incomplete log file in the Delta streaming source "
                f"schema log at '{self.folder}'. The schema log may have been corrupted. Please pick a new schema "
                f"location. (entry {seq}: {err})"
            ) from err
        entry = PersistedMetadata.from_json(data, where=f"{self.folder}/{seq}")
        if entry.table_id != self.table_id:
            raise SchemaTrackingError(
                "[DELTA_STREAMING_SCHEMA_LOG_INCOMPATIBLE_DELTA_TABLE_ID] Detected incompatible Delta table id when "
                f"trying to read Delta stream. Persisted table id: {entry.table_id}, Table id: {self.table_id}. The "
                f"schema log might have been reused. Please pick a new schema location. ({self.folder})"
            )
        return entry

    def latest(self) -> tuple[int, PersistedMetadata] | None:
        """The newest entry and its sequence number, None for an empty log."""
        numbers = self.sequence_numbers()
        if not numbers:
            return None
        return numbers[-1], self.entry(numbers[-1])

    def previous(self) -> PersistedMetadata | None:
        """The entry logically before the newest (its ``previousMetadataSeqNum``, else the one before it)."""
        latest = self.latest()
        if latest is None:
            return None
        seq, entry = latest
        before = entry.previous_metadata_seq_num if entry.previous_metadata_seq_num is not None else seq - 1
        if before < 0 or before not in self.sequence_numbers():
            return None
        return self.entry(before)

    def append(self, entry: PersistedMetadata, *, replace_current: bool = False) -> PersistedMetadata:
        """Write ``entry`` as the next entry (put-if-absent); ``replace_current`` makes it point at the entry before
        the newest, so it stands in the newest's place (Delta's ``writeNewMetadata(replaceCurrent = true)``). An
        entry equal to the newest is not written again.

        Raises:
            SchemaTrackingError: another stream wrote the same sequence number
                (``DELTA_STREAMING_SCHEMA_LOCATION_CONFLICT``).
            StorageError: the store failed.
        """
        latest = self.latest()
        if latest is not None and replace_current:
            seq, current = latest
            before = current.previous_metadata_seq_num if current.previous_metadata_seq_num is not None else seq - 1
            entry = replace(entry, previous_metadata_seq_num=before)
        if latest is not None and latest[1] == entry:
            log.warning("schema log %s: the schema did not change; entry %d kept", self.folder, latest[0])
            return entry
        seq = 0 if latest is None else latest[0] + 1
        if not self._location.put_if_absent(str(seq), entry.serialized()):
            raise SchemaTrackingError(
                f"[DELTA_STREAMING_SCHEMA_LOCATION_CONFLICT] Detected conflicting schema location '{self.folder}' "
                "while streaming from table or table located at the same table. Another stream may be reusing the "
                "same schema location, which is not allowed. Please provide a new unique `schemaTrackingLocation` "
                "path or `streamingSourceTrackingId` as a reader option for one of the streams from this table."
            )
        log.info("schema log %s: entry %d written (table_version %s)", self.folder, seq, entry.delta_commit_version)
        return entry


# -- the query's checkpoint ---------------------------------------------------------------------------------------


def qualified(path: str) -> str:
    """A checkpoint or tracking path as Spark qualifies a local one (``file:/abs/path``; URIs kept), no trailing
    slash."""
    text = path.rstrip("/") or "/"
    if "://" in text or text.startswith("file:"):
        if text.startswith("file://"):
            text = "file:" + text[len("file://") :]
        return text
    return "file:" + os.path.abspath(text)


def check_under_checkpoint(folder: str, checkpoint: str) -> None:
    """A schema log folder must be inside the query's checkpoint location (Delta's
    ``assertSchemaTrackingLocationUnderCheckpoint``).

    Raises:
        OptionError: naming ``schemaTrackingLocation``, with ``DELTA_STREAMING_SCHEMA_LOCATION_NOT_UNDER_CHECKPOINT``.
    """
    inner, outer = qualified(folder), qualified(checkpoint)
    if not inner.startswith(outer.rstrip("/") + "/"):
        raise OptionError(
            SCHEMA_TRACKING_LOCATION_OPTION,
            folder,
            f"[DELTA_STREAMING_SCHEMA_LOCATION_NOT_UNDER_CHECKPOINT] Schema location '{folder}' must be placed under "
            f"checkpoint location '{checkpoint}'.",
        )


def source_metadata_path(checkpoint: str, source_index: int) -> str:
    """The folder Spark gives source ``source_index`` of a query: ``<checkpoint>/sources/<i>``, qualified."""
    return f"{qualified(checkpoint)}/sources/{source_index}"


def checkpoint_hash(metadata_path: str) -> int:
    """Java's ``String.hashCode`` of the source's checkpoint folder (Delta's ``getCheckpointHash``), which the
    per-checkpoint unblock confs carry (``.ckpt_<hash>``)."""
    value = 0
    for unit in metadata_path.encode("utf-16-be").hex(" ", 2).split():
        value = (31 * value + int(unit, 16)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


# -- what changed between two entries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaChange:
    """The non-additive part of a schema change (Delta's ``SchemaChangeType``): renamed and dropped columns (by
    physical name), widened types."""

    renamed: tuple[tuple[str, str], ...] = ()
    dropped: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()
    """(column, old SQL type, new SQL type)."""
    incompatible: tuple[str, ...] = field(default=())
    """Type changes that are no widening (never unblocked)."""

    @property
    def name(self) -> str:
        """Delta's name of the change: ``RENAME COLUMN``, ``DROP COLUMN``, ``TYPE WIDENING`` or a combination."""
        kinds = (bool(self.renamed), bool(self.dropped), bool(self.widened))
        return {
            (True, False, False): "RENAME COLUMN",
            (False, True, False): "DROP COLUMN",
            (False, False, True): "TYPE WIDENING",
            (True, True, False): "RENAME AND DROP COLUMN",
            (True, False, True): "RENAME AND TYPE WIDENING",
            (False, True, True): "DROP AND TYPE WIDENING",
            (True, True, True): "RENAME, DROP AND TYPE WIDENING",
        }.get(kinds, "")

    @property
    def non_additive(self) -> bool:
        return bool(self.renamed or self.dropped or self.widened)

    def confs(self) -> list[str]:
        """The SQL confs that unblock it (Delta's ``sqlConfsUnblock``)."""
        if self.renamed and self.dropped:
            out = [UNBLOCK_RENAME_AND_DROP_CONF]
        elif self.renamed:
            out = [UNBLOCK_RENAME_CONF]
        elif self.dropped:
            out = [UNBLOCK_DROP_CONF]
        else:
            out = []
        return out + ([UNBLOCK_TYPE_CHANGE_CONF] if self.widened else [])

    def reader_options(self) -> list[str]:
        """The reader options that unblock it (Delta's ``readerOptionsUnblock``)."""
        out = [ALLOW_RENAME_OPTION] if self.renamed else []
        out += [ALLOW_DROP_OPTION] if self.dropped else []
        return out + ([ALLOW_TYPE_CHANGE_OPTION] if self.widened else [])

    def details(self) -> str:
        """The changed columns, as Delta lists them."""
        lines = []
        if self.renamed:
            lines += ["Columns renamed:", *(f"'{a}' -> '{b}'" for a, b in self.renamed)]
        if self.dropped:
            lines += ["Columns dropped:", ", ".join(f"'{c}'" for c in self.dropped)]
        if self.widened:
            lines += ["Columns with widened types:", *(f"'{c}': {a} -> {b}" for c, a, b in self.widened)]
        return "\n".join(lines)


def _columns(fields: Sequence[Mapping[str, Any]]) -> dict[tuple[str, ...], tuple[tuple[str, ...], Any]]:
    """Every field's physical path -> (its logical path, its type), nested struct fields included (through arrays
    and maps: ``element``, ``key``, ``value``)."""
    out: dict[tuple[str, ...], tuple[tuple[str, ...], Any]] = {}

    def visit_type(kind: Any, physical: tuple[str, ...], logical: tuple[str, ...]) -> None:
        if not isinstance(kind, dict):
            return
        if kind.get("type") == "struct":
            visit(kind.get("fields") or [], physical, logical)
        elif kind.get("type") == "array":
            visit_type(kind.get("elementType"), (*physical, "element"), (*logical, "element"))
        elif kind.get("type") == "map":
            visit_type(kind.get("keyType"), (*physical, "key"), (*logical, "key"))
            visit_type(kind.get("valueType"), (*physical, "value"), (*logical, "value"))

    def visit(items: Sequence[Mapping[str, Any]], physical: tuple[str, ...], logical: tuple[str, ...]) -> None:
        for f in items:
            name = str((f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, f["name"]))
            path, shown = (*physical, name), (*logical, str(f["name"]))
            out[path] = (shown, f["type"])
            visit_type(f["type"], path, shown)

    visit(fields, (), ())
    return out


def _atomic(kind: Any) -> Any:
    """A type without its nested fields (compared field by field on their own)."""
    if isinstance(kind, dict):
        if kind.get("type") == "struct":
            return "struct"
        if kind.get("type") == "array":
            return ("array", _atomic(kind.get("elementType")))
        if kind.get("type") == "map":
            return ("map", _atomic(kind.get("keyType")), _atomic(kind.get("valueType")))
    return kind


def schema_change(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> SchemaChange:
    """What changed from the fields ``old`` to ``new`` (Delta's ``determineNonAdditiveSchemaChangeType``): columns
    whose physical name is under another logical name (renamed), physical names gone (dropped), types that widened,
    and type changes that are no widening (matched by physical name: a column dropped and added again with another
    type is a drop, as in Delta)."""
    before, after = _columns(old), _columns(new)
    renamed, dropped, widened, incompatible = [], [], [], []
    for physical, (logical, kind) in before.items():
        if physical not in after:
            parent = physical[:-1]
            if not parent or parent in after:  # report the top of a dropped subtree only
                dropped.append(".".join(logical))
            continue
        new_logical, new_kind = after[physical]
        if [p.lower() for p in new_logical] != [p.lower() for p in logical] and (
            not physical[:-1] or before[physical[:-1]][0] == after[physical[:-1]][0]
        ):
            renamed.append((".".join(logical), ".".join(new_logical)))
        old_atomic, new_atomic = _atomic(kind), _atomic(new_kind)
        if old_atomic != new_atomic and isinstance(old_atomic, str) and isinstance(new_atomic, str):
            if widens_to(kind, new_kind):
                widened.append((".".join(new_logical), sql_name(kind), sql_name(new_kind)))
            else:
                incompatible.append(f"{'.'.join(new_logical)}: {sql_name(kind)} -> {sql_name(new_kind)}")
    return SchemaChange(tuple(renamed), tuple(dropped), tuple(widened), tuple(incompatible))


def _unblocked_by_confs(conf: str, confs: Mapping[str, str], ckpt_hash: int, version: int) -> bool:
    def get(key: str) -> str | None:
        value = confs.get(key)
        return None if value is None else str(value).strip().strip('"').lower()

    per_checkpoint = get(f"{conf}.ckpt_{ckpt_hash}")
    return get(conf) == "always" or per_checkpoint in ("always", str(version))


def check_unblocked(
    previous: PersistedMetadata,
    current: PersistedMetadata,
    *,
    options: Mapping[str, str],
    confs: Mapping[str, str],
    metadata_path: str,
) -> None:
    """A query restarted after its schema log took a new entry goes on only when the change from ``previous`` to
    ``current`` is additive, or the reader options or SQL confs unblock it (Delta's
    ``validateIfSchemaChangeCanBeUnblocked``). Runs on the driver at the query's start.

    Raises:
        SchemaTrackingError: ``DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION`` naming the options
            and confs that unblock the change; a type change that is no widening (never unblocked).
    """
    change = schema_change(previous.fields, current.fields)
    version = current.delta_commit_version
    if change.incompatible:
        raise SchemaTrackingError(
            "[DELTA_SCHEMA_CHANGED_WITH_VERSION] Detected incompatible schema change(s) in the Delta streaming "
            f"source between table version {previous.delta_commit_version} and {version}: "
            f"{'; '.join(change.incompatible)}. These type changes are no widening and cannot be read by the stream: "
            "restart it with a new checkpoint location"
        )
    if not change.non_additive:
        return
    ckpt = checkpoint_hash(metadata_path)

    def by_option(option: str) -> bool:
        value = lookup(options, option)
        return value is not None and value.strip().lower() in ("always", str(version))

    def by_conf(*names: str) -> bool:
        return any(_unblocked_by_confs(n, confs, ckpt, version) for n in names)

    blocked_rename = change.renamed and not (
        by_option(ALLOW_RENAME_OPTION) or by_conf(UNBLOCK_RENAME_CONF, UNBLOCK_RENAME_AND_DROP_CONF)
    )
    blocked_drop = change.dropped and not (
        by_option(ALLOW_DROP_OPTION) or by_conf(UNBLOCK_DROP_CONF, UNBLOCK_RENAME_AND_DROP_CONF)
    )
    blocked_type = change.widened and not (by_option(ALLOW_TYPE_CHANGE_OPTION) or by_conf(UNBLOCK_TYPE_CHANGE_CONF))
    if not (blocked_rename or blocked_drop or blocked_type):
        log.info(
            "schema tracking: the %s at table_version %s is unblocked for the source at %s",
            change.name,
            version,
            metadata_path,
        )
        return
    raise SchemaTrackingError(cannot_continue_message(change, previous.delta_commit_version, version, ckpt))


def cannot_continue_message(change: SchemaChange, previous_version: int, version: int, ckpt_hash: int) -> str:
    """Delta's ``DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION`` text."""
    options, confs = change.reader_options(), change.confs()
    lines = [
        "[DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION] We've detected one or more non-additive "
        f"schema change(s) ({change.name}) between Delta version {previous_version} and {version} in the Delta "
        "streaming source.",
        "Changes: ",
        change.details(),
        "Please check if you want to manually propagate the schema change(s) to the sink table before we proceed "
        f"with stream processing using the finalized schema at version {version}.",
        "Once you have fixed the schema of the sink table or have decided there is no need to fix, you can set the "
        "following configuration(s) to unblock the non-additive schema change(s) and continue stream processing.",
        "",
        "Using dataframe reader option(s):",
        "To unblock for this particular stream just for this series of schema change(s):",
        *(f'  .option("{o}", "{version}")' for o in options),
        "To unblock for this particular stream:",
        *(f'  .option("{o}", "always")' for o in options),
        "",
        "Using SQL configuration(s):",
        "To unblock for this particular stream just for this series of schema change(s):",
        *(f"  SET {c}.ckpt_{ckpt_hash} = {version};" for c in confs),
        "To unblock for this particular stream:",
        *(f'  SET {c}.ckpt_{ckpt_hash} = "always";' for c in confs),
        "To unblock for all streams:",
        *(f'  SET {c} = "always";' for c in confs),
    ]
    return "\n".join(lines)


def evolution_message(entry: PersistedMetadata) -> str:
    """Delta's ``DELTA_STREAMING_METADATA_EVOLUTION`` text for a new entry."""
    return (
        "[DELTA_STREAMING_METADATA_EVOLUTION] The schema, table configuration or protocol of your Delta table has "
        "changed during streaming. The schema or metadata tracking log has been updated. Please restart the stream "
        "to continue processing using the updated metadata. "
        f"Updated schema: {entry.data_schema_json}. "
        f"Updated table configurations: {json.dumps(entry.table_configurations or {})}. "
        f"Updated table protocol: {json.dumps(entry.protocol)} (table version {entry.delta_commit_version})"
    )


def differs(entry: PersistedMetadata, metadata: Mapping[str, Any] | None, protocol: Mapping[str, Any] | None) -> bool:
    """True when a commit's ``metaData`` / ``protocol`` (None: the commit has none) differ from what ``entry`` reads
    with: the schema, the partition columns, the ``delta.*`` configuration, the protocol (Delta's
    ``hasMetadataOrProtocolChangeComparedToStreamMetadata``)."""
    if (
        protocol is not None
        and entry.protocol_json is not None
        and _protocol_key(protocol) != _protocol_key(entry.protocol)
    ):
        return True
    if metadata is None:
        return False
    schema = json.loads(str(metadata.get("schemaString") or '{"type":"struct","fields":[]}'))
    if schema != _parse_schema(entry.data_schema_json):
        return True
    if tuple(str(c) for c in metadata.get("partitionColumns") or []) != entry.partition_columns:
        return True
    if entry.table_configurations is None:
        return False
    return _delta_conf(metadata.get("configuration") or {}) != _delta_conf(entry.table_configurations)


def merged_consecutive(entry: PersistedMetadata, delta_log: DeltaLog) -> PersistedMetadata | None:
    """Delta's look-ahead when a stream is defined (``mergeConsecutiveSchemaChanges``, on by default): from the
    entry's table version on, commits that change metadata or the protocol and no file, one after another, are taken
    as one change; the entry for the last of them, or None when there is none after the entry's own commit. A commit
    that cannot be read ends the look-ahead."""
    version = entry.delta_commit_version
    latest = delta_log.latest_version()
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    last = None
    while version <= latest:
        try:
            actions = delta_log.read_actions(version, only=(b"metaData", b"protocol", b"add", b"remove", b"cdc"))
        except DeltaLogError:
            break
        if any(k in a for a in actions for k in ("add", "remove", "cdc")):
            break
        found_metadata = next((a["metaData"] for a in actions if "metaData" in a), None)
        found_protocol = next((a["protocol"] for a in actions if "protocol" in a), None)
        if found_metadata is None and found_protocol is None:
            break
        metadata = found_metadata if found_metadata is not None else metadata
        protocol = found_protocol if found_protocol is not None else protocol
        last = version
        version += 1
    if last is None or last == entry.delta_commit_version:
        return None
    merged = PersistedMetadata.of(
        entry.table_id,
        last,
        metadata if metadata is not None else entry.metadata_action({}),
        protocol if protocol is not None else entry.protocol,
        entry.source_metadata_path,
    )
    log.info("schema log: metadata-only commits up to table_version %s read as one change", last)
    return merged


def _protocol_key(protocol: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        int(protocol.get("minReaderVersion", 1)),
        int(protocol.get("minWriterVersion", 2)),
        tuple(sorted(protocol.get("readerFeatures") or [])),
        tuple(sorted(protocol.get("writerFeatures") or [])),
    )


def _delta_conf(configuration: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in configuration.items() if str(k).startswith("delta.")}


__all__ = [
    "ALLOW_DROP_OPTION",
    "ALLOW_OUTSIDE_CHECKPOINT_CONF",
    "ALLOW_RENAME_OPTION",
    "ALLOW_TYPE_CHANGE_OPTION",
    "METADATA_CHANGE_INDEX",
    "POST_METADATA_CHANGE_INDEX",
    "SCHEMA_TRACKING_LOCATION_ALIAS",
    "SCHEMA_TRACKING_LOCATION_OPTION",
    "SOURCE_TRACKING_ID_OPTION",
    "UNBLOCK_CONFS",
    "PersistedMetadata",
    "SchemaChange",
    "SchemaLog",
    "cannot_continue_message",
    "check_unblocked",
    "check_under_checkpoint",
    "checkpoint_hash",
    "differs",
    "evolution_message",
    "log_folder",
    "merged_consecutive",
    "qualified",
    "schema_change",
    "source_metadata_path",
    "tracking_root",
]
