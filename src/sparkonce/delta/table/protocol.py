"""Delta's protocol as a set of table features: what a ``protocol`` action supports, the weakest protocol that
supports a set of features, and the merge of protocols that every upgrade is (Delta's ``Protocol.merge``,
``normalized``, ``denormalized``, ``implicitlyAndExplicitlySupportedFeatures``).

A legacy protocol (``minWriterVersion`` < 7) supports the legacy features its versions imply; a table-features
protocol (writer 7) supports the features it names. An upgrade merges the table's protocol with what is asked
for (versions, features, what the metadata needs): the union of their features, written in the weakest form
that holds exactly that union. So asking for lower versions than the table has is a no-op, as in Delta
(``delta.protocol.downgradeIgnored``), and a legacy protocol stays legacy while it can.

Delta's test-only features (``testRemovableWriter``, ``testReaderWriter``, ...) exist only when the environment
variable ``DELTA_TESTING`` is set, as in Delta (its own Python tests run so); they ask nothing of writers.

Pure functions on ``protocol`` action dicts; run on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkonce.delta.log.actions import Protocol
from sparkonce.delta.log.log_entry import delta_testing

log = logging.getLogger(__name__)

TABLE_FEATURES_WRITER_VERSION = 7
TABLE_FEATURES_READER_VERSION = 3


@dataclass(frozen=True)
class Feature:
    """One table feature: its name, the versions it needs, and how Delta drops it."""

    name: str
    min_reader: int
    min_writer: int
    reader_writer: bool
    legacy: bool = False
    removable: bool = False
    history_protection: bool = False
    """Dropping it must first take its traces out of the history readers may read (reader-writer features)."""


def _legacy(name: str, reader: int, writer: int, *, removable: bool = False) -> Feature:
    return Feature(name, reader, writer, reader >= 2, legacy=True, removable=removable)


def _writer(name: str, *, removable: bool = False) -> Feature:
    return Feature(name, 1, TABLE_FEATURES_WRITER_VERSION, False, removable=removable)


def _reader_writer(name: str, *, removable: bool = False, history_protection: bool = False) -> Feature:
    return Feature(
        name,
        TABLE_FEATURES_READER_VERSION,
        TABLE_FEATURES_WRITER_VERSION,
        True,
        removable=removable,
        history_protection=history_protection,
    )


_FEATURES = (
    _legacy("appendOnly", 1, 2),
    _legacy("invariants", 1, 2),
    _legacy("checkConstraints", 1, 3, removable=True),
    _legacy("changeDataFeed", 1, 4),
    _legacy("generatedColumns", 1, 4),
    _legacy("columnMapping", 2, 5, removable=True),
    _legacy("identityColumns", 1, 6),
    _writer("domainMetadata"),
    _writer("rowTracking"),
    _writer("inCommitTimestamp", removable=True),
    _writer("clustering"),
    _writer("icebergCompatV1"),
    _writer("icebergCompatV2"),
    _writer("allowColumnDefaults", removable=True),
    _writer("checkpointProtection"),  # Delta drops it with TRUNCATE HISTORY only; sparkonce does not
    _reader_writer("deletionVectors", removable=True, history_protection=True),
    _reader_writer("timestampNtz"),
    _reader_writer("v2Checkpoint", removable=True, history_protection=True),
    _reader_writer("vacuumProtocolCheck", removable=True, history_protection=True),
    _reader_writer("typeWidening", removable=True, history_protection=True),
    _reader_writer("typeWidening-preview", removable=True, history_protection=True),
    _reader_writer("variantType"),
    _reader_writer("variantType-preview"),
    _reader_writer("geospatial"),  # removable in Delta once no column is geometry or geography; not by sparkonce
    _reader_writer("geospatial-dev"),
)
"""Delta's table features (``TableFeature.allSupportedFeaturesMap``) that sparkonce knows."""

_TEST_FEATURES = (
    _writer("testWriter"),
    _writer("testRemovableWriter", removable=True),
    _reader_writer("testReaderWriter"),
    _reader_writer("testRemovableReaderWriter", removable=True, history_protection=True),
)
"""Delta's test-only features (``DELTA_TESTING``): the ones delta-spark's Python tests use."""


def known_features() -> dict[str, Feature]:
    """The features this process knows, by lower-case name (Delta's names are case-insensitive)."""
    features = _FEATURES + (_TEST_FEATURES if delta_testing() else ())
    return {f.name.lower(): f for f in features}


def feature(name: str) -> Feature | None:
    """The feature called ``name`` (any case), or None when Delta has no such feature (here)."""
    return known_features().get(name.lower())


def supported_features(protocol: Mapping[str, Any]) -> set[str]:
    """The features ``protocol`` supports: those it names, and the legacy features its versions imply (Delta's
    ``implicitlyAndExplicitlySupportedFeatures``)."""
    reader = int(protocol.get("minReaderVersion") or 1)
    writer = int(protocol.get("minWriterVersion") or 1)
    named = {str(f) for f in protocol.get("readerFeatures") or ()} | {
        str(f) for f in protocol.get("writerFeatures") or ()
    }
    if writer >= TABLE_FEATURES_WRITER_VERSION:  # a table-features protocol implies nothing
        return named
    return named | {f.name for f in _FEATURES if f.legacy and f.min_reader <= reader and f.min_writer <= writer}


def weakest_protocol(features: Iterable[str]) -> Protocol:
    """The weakest protocol that supports exactly ``features`` (Delta's ``normalized``): the legacy versions when
    those imply exactly these features, else table features at writer 7 (reader 3 when a reader-writer feature
    that is not legacy is among them)."""
    wanted = set(features)
    known = known_features()
    reader, writer = 1, 1
    for name in wanted:
        f = known.get(name.lower())
        reader = max(reader, f.min_reader if f is not None else TABLE_FEATURES_READER_VERSION)
        writer = max(writer, f.min_writer if f is not None else TABLE_FEATURES_WRITER_VERSION)
    if writer < TABLE_FEATURES_WRITER_VERSION:
        legacy: Protocol = {"minReaderVersion": reader, "minWriterVersion": writer}
        if supported_features(legacy) == wanted:
            return legacy
    out: Protocol = {"minReaderVersion": reader, "minWriterVersion": TABLE_FEATURES_WRITER_VERSION}
    if reader >= TABLE_FEATURES_READER_VERSION:
        out["readerFeatures"] = sorted(n for n in wanted if (known.get(n.lower()) or _unknown(n)).reader_writer)
    out["writerFeatures"] = sorted(wanted)
    return out


def merged(*protocols: Mapping[str, Any]) -> Protocol:
    """Delta's ``Protocol.merge``: the weakest protocol supporting every feature of ``protocols``."""
    features: set[str] = set()
    for protocol in protocols:
        features |= supported_features(protocol)
    return weakest_protocol(features)


def without(protocol: Mapping[str, Any], name: str) -> Protocol:
    """``protocol`` without the feature ``name``, in its weakest form (Delta's ``removeFeature``)."""
    return weakest_protocol(supported_features(protocol) - {name})


def upgraded(
    current: Protocol,
    needed: Protocol,
    requested: Mapping[str, int],
    *,
    table: str,
    features: Sequence[str] = (),
) -> Protocol:
    """The protocol after an upgrade, as Delta makes it (:func:`merged`): ``current`` merged with what the metadata
    ``needs``, the versions ``requested`` (``delta.minReaderVersion`` / ``delta.minWriterVersion``,
    ``upgradeTableProtocol``) and the table ``features`` asked for. Versions below the table's ask for nothing new:
    a no-op, never a downgrade (Delta's ``delta.protocol.downgradeIgnored``). ``table``: named in the log line of
    an upgrade."""
    asked: Protocol = {
        "minReaderVersion": requested.get("minReaderVersion", int(current["minReaderVersion"])),
        "minWriterVersion": requested.get("minWriterVersion", int(current["minWriterVersion"])),
    }
    result = merged(current, needed, asked, weakest_protocol(features))
    if result != current:
        log.info("%s: protocol %s -> %s", table, _versions(current), _versions(result))
    return result


def _versions(action: Mapping[str, Any]) -> str:
    return f"({action['minReaderVersion']}, {action['minWriterVersion']})"


def _unknown(name: str) -> Feature:
    return _reader_writer(name)


__all__ = [
    "TABLE_FEATURES_READER_VERSION",
    "TABLE_FEATURES_WRITER_VERSION",
    "Feature",
    "feature",
    "known_features",
    "merged",
    "supported_features",
    "upgraded",
    "weakest_protocol",
    "without",
]
