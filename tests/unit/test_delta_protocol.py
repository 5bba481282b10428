"""Delta's protocol algebra (sparkonce.delta.table.protocol): what a protocol supports, the weakest protocol for a set
of features, and merges (every upgrade) and removals (DROP FEATURE) as Delta's ``Protocol.merge`` / ``normalized`` /
``removeFeature`` compute them. The cases are those delta-spark's ``test_protocolUpgrade``,
``test_addFeatureSupport`` and ``test_dropFeatureSupport`` walk through, and the issue's ADD CONSTRAINT on a
writer-6 table."""

from __future__ import annotations

import pytest

from sparkonce.delta.table.protocol import feature, merged, supported_features, weakest_protocol, without


def legacy(reader: int, writer: int) -> dict[str, int]:
    return {"minReaderVersion": reader, "minWriterVersion": writer}


def test_lower_versions_are_a_no_op() -> None:
    assert merged(legacy(1, 2), legacy(1, 3)) == legacy(1, 3)
    assert merged(legacy(1, 3), legacy(1, 2)) == legacy(1, 3)  # upgradeTableProtocol(1, 2) after (1, 3)
    # ADD CONSTRAINT asks for writer 3; a table with identity and generated columns is at writer 6
    assert merged(legacy(1, 6), legacy(1, 3)) == legacy(1, 6)


def test_legacy_features_stay_legacy_and_new_ones_switch_to_table_features() -> None:
    assert merged(legacy(1, 2), weakest_protocol(["appendOnly"])) == legacy(1, 2)
    assert merged(legacy(1, 2), weakest_protocol(["deletionVectors"])) == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["appendOnly", "deletionVectors", "invariants"],
    }
    assert merged(legacy(1, 2), weakest_protocol(["domainMetadata"])) == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "domainMetadata", "invariants"],
    }
    # a table-features protocol names exactly what it supports; writer 7 with legacy versions is normalized back
    assert merged(legacy(1, 2), legacy(1, 7)) == legacy(1, 2)


def test_supported_features_of_legacy_and_table_features_protocols() -> None:
    assert supported_features(legacy(1, 2)) == {"appendOnly", "invariants"}
    assert supported_features(legacy(2, 5)) == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
    }
    assert supported_features(legacy(1, 5)) == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
    }  # column mapping needs reader 2 too
    assert supported_features({"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly"]}) == {
        "appendOnly"
    }


def test_weakest_protocol_is_legacy_only_for_exactly_a_legacy_set() -> None:
    assert weakest_protocol(["appendOnly", "invariants", "checkConstraints"]) == legacy(1, 3)
    assert weakest_protocol(["checkConstraints"]) == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["checkConstraints"],
    }
    assert weakest_protocol([]) == legacy(1, 1)


def test_dropping_a_feature_leaves_the_weakest_protocol() -> None:
    with_constraints = merged(legacy(1, 2), legacy(1, 3))
    assert without(with_constraints, "checkConstraints") == legacy(1, 2)
    with_ict = merged(legacy(1, 2), weakest_protocol(["inCommitTimestamp"]))
    assert without(with_ict, "inCommitTimestamp") == legacy(1, 2)


def test_delta_test_features_exist_only_under_delta_testing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELTA_TESTING", raising=False)
    assert feature("testRemovableWriter") is None
    monkeypatch.setenv("DELTA_TESTING", "1")
    writer = feature("testremovablewriter")  # names are case-insensitive
    assert writer is not None and (writer.name, writer.removable, writer.history_protection) == (
        "testRemovableWriter",
        True,
        False,
    )
    rw = feature("testRemovableReaderWriter")
    assert rw is not None and (rw.reader_writer, rw.removable, rw.history_protection) == (True, True, True)
    fixed = feature("testReaderWriter")
    assert fixed is not None and not fixed.removable
    added = merged(legacy(1, 2), weakest_protocol(["testRemovableReaderWriter"]))
    assert added == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["testRemovableReaderWriter"],
        "writerFeatures": ["appendOnly", "invariants", "testRemovableReaderWriter"],
    }
    assert without(added, "testRemovableReaderWriter") == legacy(1, 2)
