"""``ALTER TABLE ... SET / UNSET TBLPROPERTIES``: a Delta commit that changes the table's ``metaData.configuration``
(and upgrades its protocol when a property needs it), as Delta writes it (operation ``SET TBLPROPERTIES`` /
``UNSET TBLPROPERTIES``).

Runs on the driver.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sparkonce._types import TableVersion
from sparkonce.delta.cleanup import find_commit
from sparkonce.delta.commit import (
    checkpoint_if_due,
    load_table,
    metadata_action,
    protocol_action,
)
from sparkonce.delta.log_entry import Operation, check_writable, commit_info, encode_entry, writer_features
from sparkonce.delta.properties import new_table_protocol, table_properties
from sparkonce.errors import CommitConflictError, OptionError
from sparkonce.storage import TableLocation, table_location

log = logging.getLogger(__name__)

_PROTOCOL_KEYS = {"delta.minreaderversion": "minReaderVersion", "delta.minwriterversion": "minWriterVersion"}


def alter_properties(
    table: str | TableLocation,
    *,
    set: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    if_exists: bool = False,
    max_attempts: int = 100,
) -> TableVersion:
    """Set ``set`` and remove ``unset`` among the table's properties in one Delta commit; its table version.

    ``delta.*`` keys are checked as at creation (unknown keys and wrong values refused by name);
    ``delta.minReaderVersion`` / ``delta.minWriterVersion`` upgrade the protocol instead of being stored, and a
    property that needs a newer protocol (``delta.enableChangeDataFeed``, ``delta.enableDeletionVectors``)
    upgrades it as Delta does. Other keys are the user's and are stored as given.

    Raises:
        OptionError: an unknown or malformed ``delta.*`` property, a property to unset that the table lacks (unless
            ``if_exists``), a protocol downgrade, or nothing to change.
        UnsupportedFeatureError: the new properties ask writers for what sparkonce does not do.
        TableNotFoundError: no Delta table there.
        CommitConflictError: lost ``max_attempts`` races in a row.
    """
    given = dict(set or {})
    if not given and not unset:
        raise OptionError("properties", None, "ALTER TABLE needs at least one property to set or unset")
    protocol_request = {
        _PROTOCOL_KEYS[k.lower()]: _version(k, v) for k, v in given.items() if k.lower() in _PROTOCOL_KEYS
    }
    features = [k for k in [*given, *unset] if k.lower().startswith("delta.feature.")]
    if features:
        raise OptionError(features[0], given.get(features[0]), "table features are not set by sparkonce's ALTER TABLE")
    properties = table_properties({k: v for k, v in given.items() if k.lower() not in _PROTOCOL_KEYS})
    properties.update({k: str(v) for k, v in given.items() if not k.lower().startswith("delta.")})
    location = table_location(table)
    location.check_commit_safety()
    operation = (
        Operation("SET TBLPROPERTIES", {"properties": given})
        if given
        else Operation("UNSET TBLPROPERTIES", {"properties": list(unset), "ifExists": if_exists})
    )
    commit_id = str(uuid.uuid4())
    for attempt in range(1, max_attempts + 1):
        snapshot = load_table(location)
        read_version = int(snapshot.version())
        metadata = snapshot.metadata()
        configuration = {str(k): str(v) for k, v in metadata.configuration.items() if v is not None}
        for key in unset:
            found = next((k for k in configuration if k.lower() == key.lower()), None)
            if found is None and not if_exists:
                raise OptionError(
                    key,
                    None,
                    f"[DELTA_UNSET_NON_EXISTENT_PROPERTY] Attempted to unset non-existent property in {location}",
                )
            configuration.pop(found or key, None)
        for key, value in properties.items():
            for old in [k for k in configuration if k.lower() == key.lower()]:
                del configuration[old]
            configuration[key] = value
        schema_string = snapshot.schema().to_json()
        current = protocol_action(snapshot)
        protocol = _upgraded(current, new_table_protocol(schema_string, configuration), protocol_request, location)
        check_writable(
            protocol, configuration, schema_string, table=str(location), operation=operation.name, removes_rows=False
        )
        now = int(time.time() * 1000)
        info = commit_info(
            operation, commit_id=commit_id, read_version=read_version, blind_append=False, metrics={}, now_ms=now
        )
        actions: list[dict[str, Any]] = [{"commitInfo": info}]
        if protocol != current:
            actions.append({"protocol": protocol})
        actions.append({"metaData": metadata_action(metadata, schema_string, configuration)})
        target = read_version + 1
        try:
            made = location.put_if_absent(f"_delta_log/{target:020d}.json", encode_entry(actions))
        except Exception:
            landed = find_commit(location, commit_id, after=read_version)
            if landed is not None:
                return TableVersion(landed)
            raise
        if made:
            log.info("Delta commit table_version %s on %s (%s)", target, location, operation.name)
            checkpoint_if_due(location, target, configuration, protocol)
            return TableVersion(target)
        landed = find_commit(location, commit_id, after=read_version)
        if landed is not None:
            return TableVersion(landed)
        log.info("%s on %s lost a race at table_version %s (attempt %d)", operation.name, location, target, attempt)
    raise CommitConflictError(f"gave up changing the properties of {location} after {max_attempts} attempts")


def _version(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise OptionError(key, value, "must be a protocol version (a whole number)") from None


def _upgraded(
    current: dict[str, Any], needed: dict[str, Any], requested: Mapping[str, int], location: TableLocation
) -> dict[str, Any]:
    """The protocol that supports both ``current`` and ``needed`` (and the versions asked for), never lower."""
    for name, value in requested.items():
        if value < int(current[name]):
            raise OptionError(
                f"delta.{name}",
                value,
                f"[DELTA_INVALID_PROTOCOL_DOWNGRADE] {location} is at {name} {current[name]}: protocols only go up",
            )
    reader, writer = (
        max(int(current[name]), int(needed[name]), requested.get(name, 0))
        for name in ("minReaderVersion", "minWriterVersion")
    )
    if writer < 7:
        return {"minReaderVersion": reader, "minWriterVersion": writer}
    features = set(writer_features(current)) | set(needed.get("writerFeatures") or ())
    if int(current["minWriterVersion"]) < 7 and int(needed["minWriterVersion"]) < 7:
        features |= set(writer_features({"minWriterVersion": max(int(needed["minWriterVersion"]), 2)}))
    out: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": 7}
    reader_features = set(current.get("readerFeatures") or ()) | set(needed.get("readerFeatures") or ())
    if reader >= 3:
        out["readerFeatures"] = sorted(reader_features)
    out["writerFeatures"] = sorted(features)
    return out


__all__ = ["alter_properties"]
