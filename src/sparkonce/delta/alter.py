"""``ALTER TABLE``: one Delta commit of the table's new ``metaData`` as Delta writes it: ``SET TBLPROPERTIES`` /
``UNSET TBLPROPERTIES`` change its ``configuration`` (and upgrade the protocol when a property needs it), ``ADD
COLUMNS`` appends nullable columns to its schema, ``CLUSTER BY`` changes the clustering columns.

Runs on the driver.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkonce._types import TableVersion
from sparkonce.delta.cleanup import find_commit
from sparkonce.delta.commit import (
    checkpoint_if_due,
    load_table,
    metadata_action,
    protocol_action,
)
from sparkonce.delta.log_entry import (
    LEGACY_WRITER_FEATURES,
    Operation,
    check_writable,
    commit_info,
    encode_entry,
    writer_features,
)
from sparkonce.delta.properties import new_table_protocol, table_properties
from sparkonce.errors import CommitConflictError, OptionError, SqlError, UnsupportedFeatureError
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
    dropped = [k for k in unset if k.lower().startswith("delta.feature.")]
    if dropped:
        raise OptionError(dropped[0], None, "dropping a table feature (ALTER TABLE ... DROP FEATURE) is not supported")
    features = [_feature(k, v) for k, v in given.items() if k.lower().startswith("delta.feature.")]
    given = {k: v for k, v in given.items() if not k.lower().startswith("delta.feature.")}
    properties = table_properties({k: v for k, v in given.items() if k.lower() not in _PROTOCOL_KEYS})
    properties.update({k: str(v) for k, v in given.items() if not k.lower().startswith("delta.")})
    location = table_location(table)
    location.check_commit_safety()
    operation = (
        Operation(
            "SET TBLPROPERTIES", {"properties": {**given, **{f"delta.feature.{f}": "supported" for f in features}}}
        )
        if given or features
        else Operation("UNSET TBLPROPERTIES", {"properties": list(unset), "ifExists": if_exists})
    )

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
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
        return configuration, snapshot.schema().to_json(), protocol_request

    return _commit_metadata(location, operation, change, max_attempts, features=features)


READER_WRITER_FEATURES = frozenset(
    {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening",
     "typeWidening-preview", "variantType", "variantType-preview"}
)  # fmt: skip
"""Table features that readers must understand too (``readerFeatures`` and ``writerFeatures``)."""
WRITER_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns",
     "rowTracking", "domainMetadata", "inCommitTimestamp", "clustering", "icebergCompatV1", "icebergCompatV2"}
)  # fmt: skip
"""Table features only writers must understand."""


_ICT_PROPERTIES = (
    "delta.enableInCommitTimestamps",
    "delta.inCommitTimestampEnablementVersion",
    "delta.inCommitTimestampEnablementTimestamp",
)
_DROPPABLE_WITH_HISTORY = frozenset(
    {"deletionVectors", "v2Checkpoint", "columnMapping", "vacuumProtocolCheck", "typeWidening", "typeWidening-preview"}
)
"""Reader-writer features Delta can drop: their traces must first leave the history readers may still read."""


def drop_feature(table: str | TableLocation, feature: str, *, truncate_history: bool = False) -> TableVersion:
    """``ALTER TABLE t DROP FEATURE f``: remove a writer feature Delta can drop (``checkConstraints`` once the
    table has no constraint, ``inCommitTimestamp`` with its properties) from the protocol in one Delta commit,
    downgraded to the lowest protocol that holds the remaining features, as Delta does.

    Raises:
        OptionError: a feature Delta does not have, or one the table's protocol does not hold.
        UnsupportedFeatureError: a feature Delta cannot drop; a reader-writer feature (sparkonce truncates no
            history and writes no checkpoint protection); constraints still on the table.
    """
    location = table_location(table)
    known = {f.lower(): f for f in READER_WRITER_FEATURES | WRITER_FEATURES}
    name = known.get(feature.lower())
    if name is None:
        raise OptionError("featureName", feature, "[DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE] unknown feature")
    if name in _DROPPABLE_WITH_HISTORY:
        raise UnsupportedFeatureError(
            f"DROP FEATURE {name} on {location}: dropping a reader-writer feature removes its traces from the files "
            "and truncates the history older readers could read; sparkonce does neither (nothing was written)"
        )
    if name not in ("checkConstraints", "inCommitTimestamp"):
        raise UnsupportedFeatureError(
            f"[DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE] Cannot drop {name}: Delta cannot remove this feature from "
            f"a table's protocol ({location}; nothing was written)"
        )
    operation = Operation("DROP FEATURE", {"featureName": name, "truncateHistory": str(truncate_history).lower()})

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = dict(snapshot.metadata().configuration)
        if name not in writer_features(protocol_action(snapshot)):
            raise OptionError(
                "featureName",
                name,
                f"[DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT] Cannot drop {name} from {location} because it is not "
                "currently present in the table's protocol",
            )
        if name == "checkConstraints":
            constraints = sorted(k for k in configuration if k.lower().startswith("delta.constraints."))
            if constraints:
                raise UnsupportedFeatureError(
                    "[DELTA_CANNOT_DROP_CHECK_CONSTRAINT_FEATURE] Cannot drop the CHECK constraints table feature. "
                    f"The following constraints must be dropped first: {', '.join(constraints)}."
                )
        else:
            configuration = {k: v for k, v in configuration.items() if k not in _ICT_PROPERTIES}
        return configuration, snapshot.schema().to_json(), {}

    return _commit_metadata(location, operation, change, 100, downgrade=lambda p: _without(p, name))


def _without(protocol: Mapping[str, Any], feature: str) -> dict[str, Any]:
    """``protocol`` without ``feature``: the lowest legacy protocol that holds the remaining features, else table
    features at writer 7 (reader 3 only while a reader-writer feature remains)."""
    remaining = set(writer_features(protocol)) - {feature}
    reader_features = set(protocol.get("readerFeatures") or ()) - {feature}
    if int(protocol["minReaderVersion"]) == 2:
        reader_features.add("columnMapping")
    for version, implied in sorted(LEGACY_WRITER_FEATURES.items()):
        if remaining == implied and reader_features <= {"columnMapping"}:
            return {"minReaderVersion": 2 if reader_features else 1, "minWriterVersion": version}
    out: dict[str, Any] = {"minReaderVersion": 3 if reader_features else 1, "minWriterVersion": 7}
    if reader_features:
        out["readerFeatures"] = sorted(reader_features)
    out["writerFeatures"] = sorted(remaining)
    return out


def _feature(key: str, value: str) -> str:
    """The feature of a ``delta.feature.<name> = supported`` property.

    Raises:
        OptionError: another value, or a feature Delta does not have.
    """
    name = key[len("delta.feature.") :]
    known = {f.lower(): f for f in READER_WRITER_FEATURES | WRITER_FEATURES}
    if str(value).strip().lower() != "supported":
        raise OptionError(key, value, "a table feature property takes the value 'supported'")
    if name.lower() not in known:
        raise OptionError(key, value, f"[DELTA_UNSUPPORTED_FEATURES_IN_CONFIG] unknown table feature {name!r}")
    return known[name.lower()]


def add_columns(
    table: str | TableLocation, columns: Sequence[Mapping[str, Any]], *, max_attempts: int = 100
) -> TableVersion:
    """Add ``columns`` (Spark/Delta schema JSON fields: ``name``, ``type``, ``nullable``, ``metadata``) at the end
    of the table's schema in one Delta commit (``ADD COLUMNS``); its table version.

    Raises:
        OptionError: a column the table has already (names compared case-insensitively), or a NOT NULL column
            (existing rows would break it, as Delta says).
        UnsupportedFeatureError: a column-mapped table (sparkonce does not assign physical names yet).
    """
    location = table_location(table)
    location.check_commit_safety()
    added = [dict(c) for c in columns]
    for column in added:
        if not column.get("nullable", True):
            raise OptionError(
                str(column["name"]),
                "NOT NULL",
                f"[DELTA_ADD_COLUMN_NOT_NULL] {location}: a column added to an existing table must be nullable",
            )
    operation = Operation("ADD COLUMNS", {"columns": [{"column": c} for c in added]})

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
        mode = next((v for k, v in configuration.items() if k.lower() == "delta.columnmapping.mode"), "none")
        if mode.lower() != "none":
            raise UnsupportedFeatureError(
                f"ADD COLUMNS on {location}: the table uses column mapping ({mode}); sparkonce does not assign "
                "physical names to new columns yet; nothing was written"
            )
        schema = json.loads(snapshot.schema().to_json())
        have = {str(f["name"]).lower() for f in schema["fields"]}
        for column in added:
            if str(column["name"]).lower() in have:
                raise OptionError(
                    str(column["name"]), None, f"[FIELD_ALREADY_EXISTS] {location} already has a column of that name"
                )
            have.add(str(column["name"]).lower())
        schema["fields"] = [*schema["fields"], *added]
        return configuration, json.dumps(schema, separators=(",", ":")), {}

    return _commit_metadata(location, operation, change, max_attempts)


def commit_configuration(
    location: TableLocation,
    operation: str,
    parameters: Mapping[str, Any],
    change: Callable[[Any], dict[str, str]],
    *,
    feature: str | None = None,
    writer_version: int = 0,
    max_attempts: int = 100,
) -> TableVersion:
    """One Delta commit of the table's configuration as ``change(snapshot)`` gives it (``ADD CONSTRAINT``, ``DROP
    CONSTRAINT``), the protocol upgraded to ``writer_version`` or, on a table-features protocol, to ``feature``."""
    location.check_commit_safety()
    current = protocol_action(load_table(location))
    table_features = int(current["minWriterVersion"]) >= 7 and feature is not None
    # A table already at a higher writer version (an identity column's 6) keeps it: only an upgrade is asked for.
    upgrade = not table_features and writer_version > int(current["minWriterVersion"])
    request = {"minWriterVersion": writer_version} if upgrade else {}

    def full(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        return change(snapshot), snapshot.schema().to_json(), request

    features = [feature] if table_features and feature is not None else []
    return _commit_metadata(location, Operation(operation, dict(parameters)), full, max_attempts, features=features)


def _commit_metadata(
    location: TableLocation,
    operation: Operation,
    change: Callable[[Any], tuple[dict[str, str], str, Mapping[str, int]]],
    max_attempts: int,
    *,
    features: Sequence[str] = (),
    downgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    more_actions: Callable[[Any], list[dict[str, Any]]] | None = None,
) -> TableVersion:
    """One Delta commit of a new ``metaData`` (and protocol, when the change needs a newer one), made on the newest
    snapshot: ``change(snapshot)`` gives the new configuration, schema string and protocol versions asked for.
    ``downgrade(protocol)``: the new protocol instead (``DROP FEATURE``). The ``metaData`` action is written only
    when the configuration or schema changes. ``more_actions(snapshot)``: actions the commit adds (a
    ``domainMetadata``)."""
    commit_id = str(uuid.uuid4())
    for attempt in range(1, max_attempts + 1):
        snapshot = load_table(location)
        read_version = int(snapshot.version())
        configuration, schema_string, protocol_request = change(snapshot)
        current = protocol_action(snapshot)
        if downgrade is not None:
            protocol = downgrade(current)
        else:
            protocol = _upgraded(
                current, new_table_protocol(schema_string, configuration), protocol_request, location, features
            )
        check_writable(  # no rows written: identity columns keep the snapshot's high-water marks
            protocol,
            configuration,
            schema_string,
            table=str(location),
            operation=operation.name,
            removes_rows=False,
            identity_handled=True,
        )
        now = int(time.time() * 1000)
        info = commit_info(
            operation, commit_id=commit_id, read_version=read_version, blind_append=False, metrics={}, now_ms=now
        )
        actions: list[dict[str, Any]] = [{"commitInfo": info}]
        if protocol != current:
            actions.append({"protocol": protocol})
        metadata = snapshot.metadata()
        if configuration != dict(metadata.configuration) or schema_string != snapshot.schema().to_json():
            actions.append({"metaData": metadata_action(metadata, schema_string, configuration)})
        if more_actions is not None:
            actions += more_actions(snapshot)
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
    raise CommitConflictError(f"gave up committing {operation.name} to {location} after {max_attempts} attempts")


def alter_clustering(
    table: str | TableLocation, columns: Sequence[str], *, max_attempts: int = 100
) -> TableVersion | None:
    """``ALTER TABLE t CLUSTER BY (columns)`` (``CLUSTER BY NONE``: no columns): one ``CLUSTER BY`` commit of the
    ``delta.clustering`` domain (and the clustering features when the table was not clustered); None when nothing
    changes (``NONE`` on a table that is not clustered, as Delta skips it).

    Raises:
        SqlError: the table is partitioned, or a column is not a top-level column of the table.
        CommitConflictError: lost ``max_attempts`` races in a row.
    """
    from sparkonce.delta import clustering

    location = table_location(table)
    location.check_commit_safety()
    snapshot = load_table(location)
    fields = json.loads(snapshot.schema().to_json())["fields"]
    if snapshot.metadata().partition_columns:
        raise SqlError(
            "[DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED] ALTER TABLE CLUSTER BY cannot be applied "
            f"to a partitioned table ({location})."
        )
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    names = clustering.check_columns(columns, fields, (), table=str(location), configuration=configuration)
    old = clustering.table_clustering(location, int(snapshot.version()))
    if old is None and not names:
        log.info("ALTER TABLE CLUSTER BY NONE on %s: not a clustered table, nothing to do", location)
        return None
    operation = Operation(
        "CLUSTER BY", {"oldClusteringColumns": ",".join(old or ()), "newClusteringColumns": ",".join(names)}
    )

    def unchanged(current: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = {str(k): str(v) for k, v in current.metadata().configuration.items() if v is not None}
        return configuration, current.schema().to_json(), {}

    def domain(current: Any) -> list[dict[str, Any]]:
        return [clustering.domain_action(names, json.loads(current.schema().to_json())["fields"])]

    return _commit_metadata(
        location, operation, unchanged, max_attempts, features=clustering.FEATURES, more_actions=domain
    )


def _version(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise OptionError(key, value, "must be a protocol version (a whole number)") from None


def _upgraded(
    current: dict[str, Any],
    needed: dict[str, Any],
    requested: Mapping[str, int],
    location: TableLocation,
    features: Sequence[str] = (),
) -> dict[str, Any]:
    """The protocol that supports ``current``, ``needed``, the versions asked for and the table ``features`` asked
    for (which need table features: writer 7, and reader 3 for a reader-writer feature), never lower."""
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
    if features:
        writer = 7
        if any(f in READER_WRITER_FEATURES for f in features):
            reader = 3
    if writer < 7:
        return {"minReaderVersion": reader, "minWriterVersion": writer}
    all_writer = set(writer_features(current)) | set(needed.get("writerFeatures") or ()) | set(features)
    if int(current["minWriterVersion"]) < 7 and int(needed["minWriterVersion"]) < 7:
        all_writer |= set(writer_features({"minWriterVersion": max(int(needed["minWriterVersion"]), 2)}))
    out: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": 7}
    if reader >= 3:
        reader_features = set(current.get("readerFeatures") or ()) | set(needed.get("readerFeatures") or ())
        reader_features |= {f for f in all_writer if f in READER_WRITER_FEATURES}
        if int(current["minReaderVersion"]) == 2:
            reader_features.add("columnMapping")  # what reader version 2 implied
        out["readerFeatures"] = sorted(reader_features)
    out["writerFeatures"] = sorted(all_writer)
    return out


__all__ = [
    "READER_WRITER_FEATURES",
    "WRITER_FEATURES",
    "add_columns",
    "alter_properties",
    "commit_configuration",
    "drop_feature",
]
