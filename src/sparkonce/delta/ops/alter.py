"""``ALTER TABLE``: one Delta commit of the table's new ``metaData`` as Delta writes it: ``SET TBLPROPERTIES`` /
``UNSET TBLPROPERTIES`` change its ``configuration`` (and upgrade the protocol when a property needs it), ``ADD
COLUMNS`` appends nullable columns to its schema, ``CLUSTER BY`` changes the clustering columns, ``ADD CONSTRAINT`` /
``DROP CONSTRAINT`` change the table's CHECK constraints (:mod:`sparkonce.delta.table.constraints` evaluates them),
``DROP FEATURE`` narrows its protocol.

Runs on the driver.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparkonce._types import TableVersion
from sparkonce.delta.log.actions import Action, Protocol
from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.log.log_checkpoint import write_checkpoint
from sparkonce.delta.log.log_entry import (
    Operation,
    check_writable,
    commit_info,
)
from sparkonce.delta.log.table_view import existing_table, remember_table
from sparkonce.delta.table import constraints, protocol, type_widening
from sparkonce.delta.table.column_mapping import (
    MAX_ID_PROPERTY,
    MODE_PROPERTY,
    assign_columns,
    configured_mode,
    max_column_id,
)
from sparkonce.delta.table.properties import new_table_protocol, table_properties
from sparkonce.delta.table.schema import table_arrow_schema
from sparkonce.delta.txn.commit import (
    PlannedCommit,
    Transaction,
    checkpoint_if_due,
    load_table,
    metadata_action,
    protocol_action,
)
from sparkonce.delta.txn.log_cleanup import RETENTION_PROPERTY, cleanup_expired_logs
from sparkonce.errors import (
    ConcurrentWriteError,
    OptionError,
    SqlError,
    UnsupportedFeatureError,
)
from sparkonce.storage import TableLocation, table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
        CommitConflictError: a concurrent commit changed the protocol or the metadata (``ProtocolChangedError``,
            ``MetadataChangedError``, as Delta).
        CommitRetriesExceededError: lost ``max_attempts`` races in a row.
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
    # Delta records the feature properties asked for with lower-case keys (DeltaConfigs.validateConfiguration)
    asked = {k.lower(): v for k, v in given.items() if k.lower().startswith("delta.feature.")}
    given = {k: v for k, v in given.items() if not k.lower().startswith("delta.feature.")}
    properties = table_properties({k: v for k, v in given.items() if k.lower() not in _PROTOCOL_KEYS})
    properties.update({k: str(v) for k, v in given.items() if not k.lower().startswith("delta.")})
    location = table_location(table)
    location.check_commit_safety()
    implied = []
    if any(k.lower() == MODE_PROPERTY.lower() for k in [*properties, *unset]):
        current = protocol_action(existing_table(location))
        if int(current["minWriterVersion"]) >= 7 and configured_mode(properties) != "none":
            implied.append("columnMapping")  # a table-features protocol names the feature
    features += implied
    operation = (
        Operation(
            "SET TBLPROPERTIES",
            {"properties": {**given, **asked, **{f"delta.feature.{f}": "supported" for f in implied}}},
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
        schema_string = mapped_schema(snapshot, configuration, location)
        return configuration, schema_string, protocol_request

    return _commit_metadata(location, operation, change, max_attempts, features=features)


def mapped_schema(snapshot: Any, configuration: dict[str, str], location: TableLocation) -> str:
    """The table's schema string under its new ``configuration``: when column mapping is turned on (``none`` ->
    ``name``, the one change Delta allows), every field gets an id and its own name as physical name (the files
    already name their columns so) and ``configuration`` the ``delta.columnMapping.maxColumnId``.

    Raises:
        UnsupportedFeatureError: another change of mode (Delta's ``DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE``),
            or column mapping metadata already in a schema without it.
    """
    schema_string = str(snapshot.schema().to_json())
    old = configured_mode(snapshot.metadata().configuration)
    new = configured_mode(configuration)
    if old == new:
        return schema_string
    if not (old == "none" and new == "name"):
        raise UnsupportedFeatureError(
            f"[DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE] Changing column mapping mode from '{old}' to '{new}' "
            f"is not supported. ({location}; nothing was written)"
        )
    schema = json.loads(schema_string)
    if '"delta.columnMapping.' in schema_string:
        raise UnsupportedFeatureError(
            "[DELTA_ENABLING_COLUMN_MAPPING_DISALLOWED_WHEN_COLUMN_MAPPING_METADATA_ALREADY_EXISTS] Enabling column "
            "mapping when column mapping metadata is already present in schema is not supported.\nTo use column "
            f"mapping, create a new table and reload the data into it. ({location})"
        )
    fields, top = assign_columns(
        schema["fields"], table=str(location), after_id=max_column_id(configuration, []), reuse_names=True
    )
    configuration[MAX_ID_PROPERTY] = str(top)
    return json.dumps({**schema, "fields": fields}, separators=(",", ":"))


def commit_schema(
    location: TableLocation,
    operation: Operation,
    change: Callable[[Any], tuple[dict[str, str], str, Mapping[str, int]]],
    *,
    max_attempts: int = 100,
    partition_columns: Callable[[Any], tuple[str, ...]] | None = None,
) -> TableVersion:
    """One Delta commit of the table's new ``metaData`` as ``change(snapshot)`` gives it (configuration, schema
    string, protocol versions asked for), made on the newest snapshot: the column statements of
    :mod:`sparkonce.delta.ops.alter_columns`. ``partition_columns(snapshot)``: the table's partition columns after
    the change (a renamed partition column). Runs on the driver."""
    return _commit_metadata(location, operation, change, max_attempts, partition_columns=partition_columns)


READER_WRITER_FEATURES = frozenset(
    {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening",
     "typeWidening-preview", "variantType", "variantType-preview", "geospatial", "geospatial-dev"}
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


def drop_feature(
    table: str | TableLocation,
    feature: str,
    *,
    truncate_history: bool = False,
    spark: SparkSession | None = None,
) -> TableVersion:
    """``ALTER TABLE t DROP FEATURE f [TRUNCATE HISTORY]``: remove a feature Delta can drop from the protocol in
    one ``DROP FEATURE`` commit, which leaves the weakest protocol holding the remaining features, with Delta's
    checks in Delta's order (``AlterTableDropFeatureDeltaCommand``): a feature the protocol lacks, one Delta
    cannot drop, one Delta does not know; ``TRUNCATE HISTORY`` only for a feature whose traces must leave the
    history. Writer features: ``checkConstraints`` once the table has no constraint, ``inCommitTimestamp`` with
    its properties, Delta's test features (``DELTA_TESTING``). A reader-writer feature is dropped only when it
    leaves no trace in the table's files or history (Delta's test feature); ``typeWidening`` as Delta drops it
    (:func:`_drop_type_widening`, the files rewritten by ``spark``'s executors: the active session when None); the
    others need their traces rewritten and the history truncated, which sparkonce does not do.

    Raises:
        OptionError: the feature is not in the table's protocol (``DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT``), or
            Delta has no such feature (``DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE``).
        UnsupportedFeatureError: a feature Delta cannot drop (``DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE``),
            ``truncate_history`` for one that needs no truncation
            (``DELTA_FEATURE_DROP_HISTORY_TRUNCATION_NOT_ALLOWED``), a reader-writer feature sparkonce cannot
            clean, or constraints still on the table; nothing is written.
    """
    location = table_location(table)
    current = protocol_action(existing_table(location))
    present = {f.lower(): f for f in protocol.supported_features(current)}
    known = protocol.feature(feature)
    if known is not None and known.name.lower() not in present:
        raise OptionError(
            "featureName",
            feature,
            f"[DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT] Cannot drop {feature} from this table because it is not "
            f"currently present in the table's protocol. ({location})",
        )
    if known is None:
        raise OptionError(
            "featureName",
            feature,
            f"[DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE] Cannot drop {feature} because it is not supported "
            "by this Delta version. Consider using Delta with a higher version.",
        )
    if not known.removable:
        raise UnsupportedFeatureError(
            f"[DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE] Cannot drop {known.name} because dropping this feature is "
            f"not supported. ({location}; nothing was written)"
        )
    if truncate_history and not known.history_protection:
        raise UnsupportedFeatureError(
            "[DELTA_FEATURE_DROP_HISTORY_TRUNCATION_NOT_ALLOWED] The particular feature does not require history "
            f"truncation. ({known.name} on {location}; nothing was written)"
        )
    name = known.name
    if name in type_widening.FEATURES:
        return _drop_type_widening(location, name, truncate_history=truncate_history, spark=spark)
    if name in _DROPPABLE_WITH_HISTORY:
        raise UnsupportedFeatureError(
            f"DROP FEATURE {name} on {location}: dropping a reader-writer feature removes its traces from the files "
            "and truncates the history older readers could read; sparkonce does neither (nothing was written)"
        )
    if name == "columnMapping":
        raise UnsupportedFeatureError(
            f"DROP FEATURE columnMapping on {location}: the files must be rewritten with the logical column names "
            "first; sparkonce does not (nothing was written)"
        )
    if name == "allowColumnDefaults":
        raise UnsupportedFeatureError(
            f"DROP FEATURE allowColumnDefaults on {location}: sparkonce does not check the columns' defaults "
            "(nothing was written)"
        )
    operation = Operation("DROP FEATURE", {"featureName": name, "truncateHistory": str(truncate_history).lower()})

    def change(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = dict(snapshot.metadata().configuration)
        if name not in protocol.supported_features(protocol_action(snapshot)):
            raise OptionError(
                "featureName",
                name,
                f"[DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT] Cannot drop {name} from this table because it is not "
                f"currently present in the table's protocol. ({location})",
            )
        if name == "checkConstraints":
            names = sorted(k for k in configuration if k.lower().startswith(constraints.PREFIX))
            if names:
                raise UnsupportedFeatureError(
                    "[DELTA_CANNOT_DROP_CHECK_CONSTRAINT_FEATURE] Cannot drop the CHECK constraints table feature. "
                    f"The following constraints must be dropped first: {', '.join(names)}."
                )
        elif name == "inCommitTimestamp":
            configuration = {k: v for k, v in configuration.items() if k not in _ICT_PROPERTIES}
        return configuration, snapshot.schema().to_json(), {}

    return _commit_metadata(location, operation, change, 100, downgrade=lambda p: protocol.without(p, name))


CHECKPOINT_PROTECTION = "checkpointProtection"
CHECKPOINT_PROTECTION_PROPERTY = "delta.requireCheckpointProtectionBeforeVersion"
"""Delta's ``checkpointProtection`` writer feature and the table version before which its checkpoints are kept."""
BARRIER_CHECKPOINTS = 3
"""Delta's ``DropTableFeatureUtils.NUMBER_OF_BARRIER_CHECKPOINTS``: checkpoints made before a fast drop."""
TRUNCATE_HISTORY_RETENTION_PROPERTY = "delta.dropFeatureTruncateHistory.retentionDuration"
DEFAULT_TRUNCATE_HISTORY_RETENTION_MS = 24 * 3600 * 1000
"""Delta's default ``delta.dropFeatureTruncateHistory.retentionDuration`` (24 hours)."""


def _drop_type_widening(
    location: TableLocation, name: str, *, truncate_history: bool, spark: SparkSession | None
) -> TableVersion:
    """``DROP FEATURE typeWidening [TRUNCATE HISTORY]`` as Delta 4 runs it (``AlterTableDropFeatureDeltaCommand``,
    ``TypeWideningPreDowngradeCommand``).

    First the feature's traces leave the table (:func:`_remove_type_widening_traces`): an ``UNSET TBLPROPERTIES``
    commit of ``delta.enableTypeWidening``, a ``REORG`` commit rewriting the files written before a type change,
    and a ``DROP FEATURE`` commit of the schema without ``delta.typeChanges``. Then, without ``TRUNCATE HISTORY``
    (Delta's fast drop), three ``Empty Commit`` commits, each checkpointed, and the ``DROP FEATURE`` commit of the
    protocol without the feature and with ``checkpointProtection`` (``delta.requireCheckpointProtectionBeforeVersion``
    = its table version), checkpointed too: readers never replay the commits before those checkpoints. With
    ``TRUNCATE HISTORY``, one checkpointed ``Empty Commit``; when traces were just removed the command stops with
    Delta's ``DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD``; run again once the log older than
    ``delta.dropFeatureTruncateHistory.retentionDuration`` (24 hours) is gone (sparkonce's log cleanup removes the
    commits older than that first, as Delta's does), it drops the feature when no commit left in the log records
    a type change, else fails with ``DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST``.

    Raises:
        UnsupportedFeatureError: Delta's two refusals above, after the commits made.
    """
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise UnsupportedFeatureError(
            f"DROP FEATURE {name} on {location}: rewriting the files of old types needs a Spark session"
        )
    changed = _remove_type_widening_traces(session, location)
    if not truncate_history:
        for _ in range(BARRIER_CHECKPOINTS):
            _checkpoint(location, _empty_commit(location))

        def protected(current: Protocol) -> Protocol:
            features = protocol.supported_features(protocol.without(current, name)) | {CHECKPOINT_PROTECTION}
            return protocol.weakest_protocol(features)

        def barrier(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
            _check_no_type_widening(snapshot, name, location)
            configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
            configuration[CHECKPOINT_PROTECTION_PROPERTY] = str(int(snapshot.version()) + 1)
            return configuration, snapshot.schema().to_json(), {}

        operation = Operation("DROP FEATURE", {"featureName": name, "truncateHistory": "false"})
        done = _commit_metadata(location, operation, barrier, 100, downgrade=protected)
        _checkpoint(location, done)
        return done
    _checkpoint(location, _empty_commit(location))
    if changed:
        raise UnsupportedFeatureError(
            f"[DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD] Dropping {name} was partially successful. The feature is "
            "now no longer used in the current version of the table. However, the feature is still present in "
            "historical versions of the table. The table feature cannot be dropped from the table protocol until "
            "these historical versions have expired. To drop the table feature from the protocol, please wait for "
            f"the historical versions to expire, and then repeat this command. The retention period for historical "
            f"versions is currently configured as delta.logRetentionDuration={_log_retention(location)}. "
            "Alternatively, please wait for the TRUNCATE HISTORY retention period to expire (24 hours) and then run: "
            f"ALTER TABLE table_name DROP FEATURE feature_name TRUNCATE HISTORY ({location})"
        )
    _truncate_history(location)
    if _history_records_type_changes(location):
        raise UnsupportedFeatureError(
            f"[DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST] Cannot drop {name} because the Delta log contains "
            "historical versions that use the feature. Please wait until the history retention period "
            f"(delta.logRetentionDuration={_log_retention(location)}) has passed since the feature was last active. "
            "Alternatively, please wait for the TRUNCATE HISTORY retention period to expire (24 hours) and then run: "
            f"ALTER TABLE table_name DROP FEATURE feature_name TRUNCATE HISTORY ({location})"
        )

    def downgraded(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        _check_no_type_widening(snapshot, name, location)
        configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
        return configuration, snapshot.schema().to_json(), {}

    operation = Operation("DROP FEATURE", {"featureName": name, "truncateHistory": "true"})
    return _commit_metadata(location, operation, downgraded, 100, downgrade=lambda p: protocol.without(p, name))


def _remove_type_widening_traces(spark: SparkSession, location: TableLocation) -> bool:
    """Delta's ``TypeWideningPreDowngradeCommand.removeFeatureTracesIfNeeded``: nothing when type widening is off
    and the schema records no type change; else ``delta.enableTypeWidening`` unset (its own commit), the files of
    old types rewritten (:func:`sparkonce.delta.ops.optimize.rewrite_type_widened_files`, a ``REORG`` commit) and
    the schema's ``delta.typeChanges`` removed (a ``DROP FEATURE`` commit naming the fields in ``columns``). True
    when files were rewritten or type changes removed (traces the history still holds)."""
    from sparkonce.delta.ops.optimize import rewrite_type_widened_files

    snapshot = existing_table(location)
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    fields = json.loads(snapshot.schema().to_json())["fields"]
    recorded = any(True for _ in type_widening.recorded_changes(fields))
    if not type_widening.enabled(configuration) and not recorded:
        return False
    if any(k.lower() == type_widening.ENABLE_PROPERTY.lower() for k in configuration):
        alter_properties(location, unset=[type_widening.ENABLE_PROPERTY], if_exists=True)
    if not recorded:
        return False
    rewritten = rewrite_type_widened_files(spark, location).files_removed
    _, removed = type_widening.without_type_changes(fields)

    def cleaned(current: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        kept = {str(k): str(v) for k, v in current.metadata().configuration.items() if v is not None}
        schema, _ = type_widening.without_type_changes(json.loads(current.schema().to_json())["fields"])
        return kept, json.dumps({"type": "struct", "fields": schema}, separators=(",", ":")), {}

    columns = json.dumps(removed, separators=(",", ":"))
    _commit_metadata(location, Operation("DROP FEATURE", {"columns": columns}), cleaned, 100)
    log.info("DROP FEATURE: %s file(s) of %s rewritten, type changes removed from %s", rewritten, location, columns)
    return True


def _check_no_type_widening(snapshot: Any, name: str, location: TableLocation) -> None:
    """Delta's ``validateDropInvariants`` on the snapshot the protocol downgrade commits on.

    Raises:
        UnsupportedFeatureError: a concurrent commit enabled type widening again or recorded a type change
            (``DELTA_FEATURE_DROP_CONFLICT_REVALIDATION_FAIL``).
    """
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    fields = json.loads(snapshot.schema().to_json())["fields"]
    if type_widening.enabled(configuration) or any(True for _ in type_widening.recorded_changes(fields)):
        raise UnsupportedFeatureError(
            "[DELTA_FEATURE_DROP_CONFLICT_REVALIDATION_FAIL] Cannot drop feature because a concurrent transaction "
            f"modified the table. Please try the operation again. ({name} on {location}; the protocol is unchanged)"
        )


def _empty_commit(location: TableLocation) -> TableVersion:
    """Delta's ``Empty Commit``: a commit of its ``commitInfo`` alone (a table version to checkpoint)."""

    def unchanged(snapshot: Any) -> tuple[dict[str, str], str, Mapping[str, int]]:
        configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
        return configuration, snapshot.schema().to_json(), {}

    return _commit_metadata(location, Operation("Empty Commit", {}), unchanged, 100)


def _checkpoint(location: TableLocation, table_version: TableVersion) -> None:
    """A classic checkpoint of ``table_version`` (the newest), whatever ``delta.checkpointInterval`` says."""
    snapshot = existing_table(location).snapshot
    if snapshot.table_version != int(table_version):  # a writer committed meanwhile: checkpoint the one made
        snapshot = DeltaLog(location).snapshot(int(table_version))
    written = write_checkpoint(location, snapshot)
    remember_table(location, written.snapshot)


def _log_retention(location: TableLocation) -> str:
    configuration = existing_table(location).metadata().configuration
    found = next((v for k, v in configuration.items() if k.lower() == "delta.logretentionduration"), None)
    return str(found or "interval 30 days")


def _truncate_history(location: TableLocation) -> None:
    """Delta's ``cleanUpExpiredLogs`` with the ``TRUNCATE HISTORY`` retention: the log files older than
    ``delta.dropFeatureTruncateHistory.retentionDuration`` (24 hours) before the newest checkpoint go."""
    snapshot = existing_table(location)
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    key = TRUNCATE_HISTORY_RETENTION_PROPERTY.lower()
    raw = next((v for k, v in configuration.items() if k.lower() == key), None)
    retention_ms = (
        DEFAULT_TRUNCATE_HISTORY_RETENTION_MS
        if raw is None
        else parse_interval_ms(raw, name=TRUNCATE_HISTORY_RETENTION_PROPERTY)
    )
    configuration = {k: v for k, v in configuration.items() if k.lower() != RETENTION_PROPERTY.lower()}
    configuration[RETENTION_PROPERTY] = f"interval {retention_ms} milliseconds"
    cleanup_expired_logs(location, configuration, protocol_action(snapshot), granularity_ms=60_000)


def _history_records_type_changes(location: TableLocation) -> bool:
    """Delta's ``historyContainsFeature`` for type widening: a ``metaData`` recording a type change in a commit
    the log still holds, from its oldest checkpoint on."""
    delta_log = DeltaLog(location)
    for table_version in delta_log.commit_versions():
        for action in delta_log.read_actions(table_version):
            if "metaData" not in action:
                continue
            fields = json.loads(action["metaData"].get("schemaString") or "{}").get("fields") or []
            if any(True for _ in type_widening.recorded_changes(fields)):
                return True
    return False


def _feature(key: str, value: str) -> str:
    """The feature of a ``delta.feature.<name> = supported`` property.

    Raises:
        OptionError: another value, or a feature Delta does not have.
    """
    name = key[len("delta.feature.") :]
    if str(value).strip().lower() != "supported":
        raise OptionError(key, value, "a table feature property takes the value 'supported'")
    known = protocol.feature(name)
    if known is None:
        raise OptionError(
            key,
            value,
            "[DELTA_UNSUPPORTED_FEATURES_IN_CONFIG] Table features configured in the following Spark configs or Delta "
            f"table properties are not recognized by this version of Delta Lake: {key}. (unknown table feature "
            f"{name!r})",
        )
    return known.name


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
    current = protocol_action(existing_table(location))
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
    downgrade: Callable[[Protocol], Protocol] | None = None,
    more_actions: Callable[[Any], list[Action]] | None = None,
    partition_columns: Callable[[Any], tuple[str, ...]] | None = None,
) -> TableVersion:
    """One Delta commit of a new ``metaData`` (and protocol, when the change needs a newer one), made on the newest
    snapshot through the commit engine (:class:`sparkonce.delta.txn.commit.Transaction`: backoff, Delta's conflict
    rules, the landed-anyway check): ``change(snapshot)`` gives the new configuration, schema string and protocol
    versions asked for. ``downgrade(protocol)``: the new protocol instead (``DROP FEATURE``). The ``metaData``
    action is written only when the configuration or schema changes. ``more_actions(snapshot)``: actions the
    commit adds (a ``domainMetadata``).

    The transaction reads no data files, and changes the table's metadata: a concurrent append, blind or not, is
    no conflict (the next attempt is made on top of it), while a concurrent commit of a new protocol or metadata
    is, as in Delta (``ProtocolChangedError`` / ``MetadataChangedError``).

    Raises:
        CommitConflictError: a concurrent commit changed the protocol or the metadata.
        CommitRetriesExceededError: lost ``max_attempts`` races in a row.
    """
    transaction = Transaction(location, what=operation.name, changes_metadata=True, max_attempts=max_attempts)
    planned: tuple[dict[str, str], Protocol] | None = None
    """The configuration and protocol of the last attempt."""

    def plan(attempt: int) -> PlannedCommit:
        nonlocal planned
        snapshot = existing_table(location)
        read_version = int(snapshot.version())
        transaction.check_conflicts(read_version)
        configuration, schema_string, protocol_request = change(snapshot)
        current = protocol_action(snapshot)
        if downgrade is not None:
            new_protocol = downgrade(current)
        else:
            new_protocol = protocol.upgraded(
                current,
                new_table_protocol(schema_string, configuration),
                protocol_request,
                table=str(location),
                features=features,
            )
        check_writable(  # no rows written: identity columns keep the snapshot's high-water marks
            new_protocol,
            configuration,
            schema_string,
            table=str(location),
            operation=operation.name,
            removes_rows=False,
            identity_handled=True,
        )
        now = int(time.time() * 1000)
        info = commit_info(
            operation,
            commit_id=transaction.commit_id,
            read_version=read_version,
            blind_append=False,
            metrics={},
            now_ms=now,
        )
        actions: list[Action] = [{"commitInfo": info}]
        if new_protocol != current:
            actions.append({"protocol": new_protocol})
        metadata = snapshot.metadata()
        partitions = partition_columns(snapshot) if partition_columns is not None else None
        if (
            configuration != dict(metadata.configuration)
            or schema_string != snapshot.schema().to_json()
            or (partitions is not None and list(partitions) != list(metadata.partition_columns))
        ):
            action = metadata_action(metadata, schema_string, configuration, partition_columns=partitions)
            actions.append({"metaData": action})
        if more_actions is not None:
            actions += more_actions(snapshot)
        planned = (configuration, new_protocol)
        return PlannedCommit(read_version, actions)

    done = transaction.run(plan)
    assert done is not None, "an ALTER always has a commit to make"
    if done.planned is not None and planned is not None:
        log.info("Delta commit table_version %s on %s (%s)", done.table_version, location, operation.name)
        checkpoint_if_due(location, done.table_version, *planned)
    return done.table_version


def alter_clustering(
    table: str | TableLocation, columns: Sequence[str], *, max_attempts: int = 100
) -> TableVersion | None:
    """``ALTER TABLE t CLUSTER BY (columns)`` (``CLUSTER BY NONE``: no columns): one ``CLUSTER BY`` commit of the
    ``delta.clustering`` domain (and the clustering features when the table was not clustered); None when nothing
    changes (``NONE`` on a table that is not clustered, as Delta skips it).

    Raises:
        SqlError: the table is partitioned, or a column is not a top-level column of the table.
        CommitRetriesExceededError: lost ``max_attempts`` races in a row.
    """
    from sparkonce.delta.table import clustering

    location = table_location(table)
    location.check_commit_safety()
    snapshot = existing_table(location)
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

    def domain(current: Any) -> list[Action]:
        return [clustering.domain_action(names, json.loads(current.schema().to_json())["fields"])]

    return _commit_metadata(
        location, operation, unchanged, max_attempts, features=clustering.FEATURES, more_actions=domain
    )


def add_constraint(
    spark: SparkSession, table: str | TableLocation, name: str, expression: str, *, shown: str | None = None
) -> TableVersion:
    """``ALTER TABLE ... ADD CONSTRAINT name CHECK (expression)``: one ``ADD CONSTRAINT`` commit (the protocol
    upgraded to writer 3, or the ``checkConstraints`` feature); its table version.

    Raises:
        SqlError: a constraint of that name exists (``DELTA_CONSTRAINT_ALREADY_EXISTS``), rows of the table
            violate it (``DELTA_NEW_CHECK_CONSTRAINT_VIOLATION``), or it is not boolean.
        UnsupportedFeatureError: sparkonce cannot evaluate the expression.
        ConcurrentWriteError: the table changed while its rows were checked.
    """
    location = table_location(table)
    shown = shown or str(table)
    key = constraints.PREFIX + name.lower()
    snapshot = load_table(location)
    checked_version = int(snapshot.version())
    configuration = {str(k): str(v) for k, v in snapshot.metadata().configuration.items() if v is not None}
    old = next((v for k, v in configuration.items() if k.lower() == key), None)
    if old is not None:
        raise SqlError(
            f"[DELTA_CONSTRAINT_ALREADY_EXISTS] Constraint '{name.lower()}' already exists. Please delete the old "
            f"constraint first.\nOld constraint:\n{old}"
        )
    constraints.parse_constraint(name.lower(), expression, table_arrow_schema(snapshot), shown)
    rows = (
        spark.read.format("sparkonce.delta")
        .option("versionAsOf", checked_version)
        .load(location.uri)
        .where(f"NOT ({expression}) OR ({expression}) IS NULL")
        .count()
    )
    if rows:
        raise SqlError(
            f"[DELTA_NEW_CHECK_CONSTRAINT_VIOLATION] {rows} rows in {shown} violate the new CHECK constraint "
            f"({expression})"
        )

    def change(current: Any) -> dict[str, str]:
        if int(current.version()) != checked_version:
            raise ConcurrentWriteError(
                f"[DELTA_CONCURRENT_WRITE] ADD CONSTRAINT {name} on {shown}: the table changed (table_version "
                f"{current.version()}) while its rows at table_version {checked_version} were checked; run the "
                "statement again"
            )
        return {**configuration, key: expression}

    return commit_configuration(
        location, "ADD CONSTRAINT", {"name": name.lower(), "expr": expression}, change, feature=constraints.FEATURE,
        writer_version=constraints.MIN_WRITER_VERSION,
    )  # fmt: skip


def drop_constraint(
    spark: SparkSession, table: str | TableLocation, name: str, *, if_exists: bool, shown: str | None = None
) -> TableVersion | None:
    """``ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name``: one ``DROP CONSTRAINT`` commit; None when there was
    no such constraint and ``if_exists`` (Delta still commits nothing then).

    Raises:
        SqlError: no such constraint, without ``IF EXISTS`` (``DELTA_CONSTRAINT_DOES_NOT_EXIST``).
    """
    location = table_location(table)
    shown = shown or str(table)
    key = constraints.PREFIX + name.lower()
    configuration = {str(k): str(v) for k, v in load_table(location).metadata().configuration.items() if v is not None}
    old = next((v for k, v in configuration.items() if k.lower() == key), None)
    if old is None:
        assume = str(spark.conf.get(constraints.ASSUME_IF_EXISTS_CONF, "false")).lower() == "true"
        if if_exists or assume:
            return None
        raise SqlError(
            f"[DELTA_CONSTRAINT_DOES_NOT_EXIST] Cannot drop nonexistent constraint {name.lower()} from table {shown}. "
            "To avoid throwing an error, provide the parameter IF EXISTS or set the SQL session configuration "
            f"{constraints.ASSUME_IF_EXISTS_CONF} to true."
        )

    def change(current: Any) -> dict[str, str]:
        now = {str(k): str(v) for k, v in current.metadata().configuration.items() if v is not None}
        return {k: v for k, v in now.items() if k.lower() != key}

    return commit_configuration(location, "DROP CONSTRAINT", {"name": name.lower(), "expr": old}, change)


def _version(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise OptionError(key, value, "must be a protocol version (a whole number)") from None


__all__ = [
    "READER_WRITER_FEATURES",
    "WRITER_FEATURES",
    "add_constraint",
    "alter_clustering",
    "alter_properties",
    "drop_constraint",
    "commit_configuration",
    "commit_schema",
    "mapped_schema",
    "drop_feature",
]
