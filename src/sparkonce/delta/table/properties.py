"""Delta table properties (``metaData.configuration``): which ``delta.*`` keys exist, their values, and what a new
table's protocol needs for them.

A write that creates a table takes its properties from the writer's ``delta.*`` options over the session's
``spark.databricks.delta.properties.defaults.*`` (as Delta does); an unknown ``delta.*`` key is refused by name, as
Delta refuses it. Runs on the driver.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sparkonce.delta.log.actions import Protocol
from sparkonce.errors import OptionError, UnsupportedFeatureError

SESSION_DEFAULTS_PREFIX = "spark.databricks.delta.properties.defaults."
"""Session configuration keys that give new tables a property: ``<prefix>appendOnly`` -> ``delta.appendOnly``."""

_BOOLEAN = "boolean"
_INTEGER = "integer"
_INTERVAL = "interval"
_TEXT = "text"

KNOWN_PROPERTIES: dict[str, str] = {
    "delta.appendOnly": _BOOLEAN,
    "delta.autoOptimize.autoCompact": _TEXT,
    "delta.autoOptimize.optimizeWrite": _BOOLEAN,
    "delta.checkpoint.writeStatsAsJson": _BOOLEAN,
    "delta.checkpoint.writeStatsAsStruct": _BOOLEAN,
    "delta.checkpointInterval": _INTEGER,
    "delta.checkpointPolicy": _TEXT,
    "delta.checkpointRetentionDuration": _INTERVAL,
    "delta.columnMapping.maxColumnId": _INTEGER,
    "delta.columnMapping.mode": _TEXT,
    "delta.compatibility.symlinkFormatManifest.enabled": _BOOLEAN,
    "delta.dataSkippingNumIndexedCols": _INTEGER,
    "delta.dataSkippingStatsColumns": _TEXT,
    "delta.deletedFileRetentionDuration": _INTERVAL,
    "delta.enableChangeDataFeed": _BOOLEAN,
    "delta.enableDeletionVectors": _BOOLEAN,
    "delta.enableExpiredLogCleanup": _BOOLEAN,
    "delta.enableInCommitTimestamps": _BOOLEAN,
    "delta.enableRowTracking": _BOOLEAN,
    "delta.enableTypeWidening": _BOOLEAN,
    "delta.isolationLevel": _TEXT,
    "delta.logRetentionDuration": _INTERVAL,
    "delta.minReaderVersion": _INTEGER,
    "delta.minWriterVersion": _INTEGER,
    "delta.randomizeFilePrefixes": _BOOLEAN,
    "delta.randomPrefixLength": _INTEGER,
    "delta.setTransactionRetentionDuration": _INTERVAL,
    "delta.targetFileSize": _TEXT,
    "delta.tuneFileSizesForRewrites": _BOOLEAN,
}
"""Delta's table properties (``DeltaConfigs``), canonical spelling -> kind of value."""

_UNSUPPORTED_AT_CREATION = {
    "delta.enableRowTracking": "row tracking (sparkonce does not assign row ids)",
    "delta.enableInCommitTimestamps": "in-commit timestamps (sparkonce does not write them)",
}
"""Properties whose enabled value asks a protocol feature of every writer that sparkonce does not implement."""

_INTERVAL_RE = re.compile(r"^\s*interval\s+\d+\s+[a-z]+(\s+\d+\s+[a-z]+)*\s*$", re.IGNORECASE)


def canonical_key(key: str) -> str | None:
    """The canonical spelling of a ``delta.*`` property (keys are case-insensitive), or None when unknown."""
    lowered = key.lower()
    for known in KNOWN_PROPERTIES:
        if known.lower() == lowered:
            return known
    if lowered.startswith("delta.feature.") or lowered.startswith("delta.constraints."):
        return key
    return None


def table_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``delta.*`` entries of ``options`` as table properties (canonical keys, checked values).

    Raises:
        OptionError: an unknown ``delta.*`` key ("Unknown configuration was specified"), or a value of the wrong
            kind, naming the key.
    """
    found: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith("delta."):
            continue
        name = canonical_key(key)
        if name is None:
            raise OptionError(key, value, f"Unknown configuration was specified: {key}")
        found[name] = _checked(name, str(value))
    return found


def session_defaults(conf: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The session's ``spark.databricks.delta.properties.defaults.X`` settings as ``delta.X`` table properties.

    Raises:
        OptionError: an unknown property or a bad value, naming the session setting.
    """
    found: dict[str, str] = {}
    for key, value in conf:
        if not key.startswith(SESSION_DEFAULTS_PREFIX):
            continue
        try:
            found.update(table_properties({"delta." + key[len(SESSION_DEFAULTS_PREFIX) :]: value}))
        except OptionError as err:
            raise OptionError(key, value, str(err)) from err
    return found


def _checked(name: str, value: str) -> str:
    kind = KNOWN_PROPERTIES.get(name)
    text = value.strip()
    if kind == _BOOLEAN and text.lower() not in ("true", "false"):
        raise OptionError(name, value, "must be true or false")
    if kind == _INTEGER and not text.lstrip("-").isdigit():
        raise OptionError(name, value, "must be an integer")
    if name == "delta.checkpointInterval" and int(text) <= 0:
        raise OptionError(name, value, "must be a positive integer")
    if name == "delta.autoOptimize.autoCompact" and text.lower() not in ("true", "false"):
        raise OptionError(
            name, value, "[DELTA_INVALID_AUTO_COMPACT_TYPE] Invalid auto-compact type: allowed values are true, false"
        )
    if name == "delta.columnMapping.mode" and text.lower() not in ("none", "id", "name"):
        raise OptionError(
            name,
            value,
            f"[DELTA_MODE_NOT_SUPPORTED] Specified mode '{value}' is not supported. Supported modes are: "
            "id, none, name",
        )
    if kind == _INTERVAL and not _INTERVAL_RE.match(text):
        raise OptionError(name, value, "must be an interval such as 'interval 30 days'")
    return text.lower() if kind == _BOOLEAN else text


def check_existing(configuration: Mapping[str, str], given: Mapping[str, str], *, table: str) -> None:
    """A write's ``delta.*`` options on a table that exists: each must be what the table already has.

    Raises:
        OptionError: naming the first that differs and how to change it.
    """
    current = {k.lower(): str(v) for k, v in configuration.items()}
    for key, value in given.items():
        have = current.get(key.lower())
        if have is None or have.strip().lower() != value.strip().lower():
            raise OptionError(
                key,
                value,
                f"the Delta table {table} exists with {key} = {have!r}: a write's delta.* options set the properties "
                "of a table it creates; change an existing table's with ALTER TABLE ... SET TBLPROPERTIES",
            )


def property_value(configuration: Mapping[str, Any], name: str) -> str | None:
    """The table property ``name`` of ``configuration`` (``metaData.configuration``; keys compared
    case-insensitively), or None when it is not set."""
    for key, value in configuration.items():
        if key.lower() == name.lower() and value is not None:
            return str(value)
    return None


def enabled(configuration: Mapping[str, str], name: str) -> bool:
    """True when the boolean property ``name`` is ``true`` (keys compared case-insensitively)."""
    return (property_value(configuration, name) or "").strip().lower() == "true"


def new_table_protocol(schema_string: str, configuration: Mapping[str, str]) -> Protocol:
    """The protocol of a table sparkonce creates with ``configuration``: the lowest that its columns and
    properties need, (1, 2) when nothing more.

    Raises:
        UnsupportedFeatureError: a property that asks every writer for something sparkonce does not do.
    """
    for name, what in _UNSUPPORTED_AT_CREATION.items():
        value = next((v for k, v in configuration.items() if k.lower() == name.lower()), None)
        if value is not None and value.strip().lower() not in ("false", "none"):
            raise UnsupportedFeatureError(f"{name} = {value}: {what}; nothing was written")
    reader_features: set[str] = set()
    writer_features: set[str] = set()
    if '"timestamp_ntz"' in schema_string:
        reader_features.add("timestampNtz")
        writer_features.add("timestampNtz")
    if enabled(configuration, "delta.enableDeletionVectors"):
        reader_features.add("deletionVectors")
        writer_features.add("deletionVectors")
    if '"geometry(' in schema_string or '"geography(' in schema_string:  # Delta's GeoSpatialTableFeature
        reader_features.add("geospatial")
        writer_features.add("geospatial")
    if enabled(configuration, "delta.enableTypeWidening"):  # Delta's TypeWideningTableFeature (reader 3, writer 7)
        reader_features.add("typeWidening")
        writer_features.add("typeWidening")
    reader, writer = 1, 2
    mapped = (property_value(configuration, "delta.columnMapping.mode") or "none").strip().lower() != "none"
    if mapped:  # column mapping: reader 2 and writer 5, or the feature (Delta's ColumnMappingTableFeature)
        reader, writer = 2, 5
    generated = '"delta.generationExpression"' in schema_string  # generated columns: writer 4 or the feature
    if enabled(configuration, "delta.enableChangeDataFeed") or generated:
        writer = max(writer, 4)
    identity = '"delta.identity.start"' in schema_string  # identity columns: writer 6 (sparkonce.delta.table.identity)
    if identity:
        writer = 6
    for key, value in configuration.items():
        if key.lower() == "delta.minreaderversion":
            reader = max(reader, int(value))
        elif key.lower() == "delta.minwriterversion":
            writer = max(writer, int(value))
    if not reader_features and not writer_features and writer < 7:
        return {"minReaderVersion": reader, "minWriterVersion": writer}
    # Table features: every feature the table uses is named (legacy ones included), and those of Delta's default
    # protocol (1, 2), as delta-spark names them in a new table's protocol.
    writer_features |= {"appendOnly", "invariants"}
    if enabled(configuration, "delta.enableChangeDataFeed"):
        writer_features.add("changeDataFeed")
    if enabled(configuration, "delta.appendOnly"):
        writer_features.add("appendOnly")
    if identity:
        writer_features.add("identityColumns")
    if generated:
        writer_features.add("generatedColumns")
    if mapped:
        reader_features.add("columnMapping")
        writer_features.add("columnMapping")
    protocol: Protocol = {"minReaderVersion": 3 if reader_features else max(reader, 1), "minWriterVersion": 7}
    if reader_features:
        protocol["readerFeatures"] = sorted(reader_features)
    protocol["writerFeatures"] = sorted(writer_features)
    return protocol


__all__ = [
    "KNOWN_PROPERTIES",
    "SESSION_DEFAULTS_PREFIX",
    "canonical_key",
    "check_existing",
    "enabled",
    "new_table_protocol",
    "property_value",
    "session_defaults",
    "table_properties",
]
