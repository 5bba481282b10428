"""Table properties of new tables: known keys, checked values, session defaults, the protocol they need."""

from __future__ import annotations

import pytest

from sparkonce.delta.table.options import TABLE_DEFAULTS_OPTION, WriteOptions
from sparkonce.delta.table.properties import check_existing, new_table_protocol, session_defaults, table_properties
from sparkonce.errors import OptionError

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def test_delta_options_become_properties_with_canonical_keys_and_unknown_keys_are_refused() -> None:
    found = table_properties({"DELTA.appendonly": "TRUE", "delta.checkpointInterval": "5", "path": "/t"})
    assert found == {"delta.appendOnly": "true", "delta.checkpointInterval": "5"}
    with pytest.raises(OptionError, match=r"delta.foo.*Unknown configuration was specified: delta.foo"):
        table_properties({"delta.foo": "1"})
    with pytest.raises(OptionError, match=r"delta.appendOnly.*true or false"):
        table_properties({"delta.appendOnly": "yes"})
    with pytest.raises(OptionError, match=r"delta.checkpointInterval.*positive"):
        table_properties({"delta.checkpointInterval": "0"})
    with pytest.raises(OptionError, match=r"delta.logRetentionDuration.*interval"):
        table_properties({"delta.logRetentionDuration": "30 days"})
    assert table_properties({"delta.logRetentionDuration": "interval 30 days"}) == {
        "delta.logRetentionDuration": "interval 30 days"
    }


def test_session_defaults_name_the_session_setting_and_options_win() -> None:
    prefix = "spark.databricks.delta.properties.defaults."
    assert session_defaults([(prefix + "enableChangeDataFeed", "true"), ("spark.other", "x")]) == {
        "delta.enableChangeDataFeed": "true"
    }
    with pytest.raises(OptionError, match=r"spark.databricks.delta.properties.defaults.nope"):
        session_defaults([(prefix + "nope", "1")])
    options = WriteOptions.parse(
        {
            "path": "/tmp/t",
            "delta.enableChangeDataFeed": "false",
            TABLE_DEFAULTS_OPTION: f'{{"{prefix}enableChangeDataFeed": "true", "{prefix}appendOnly": "true"}}',
        }
    )
    assert options.new_table_properties() == {"delta.enableChangeDataFeed": "false", "delta.appendOnly": "true"}
    assert dict(options.table_properties) == {"delta.enableChangeDataFeed": "false"}


def test_the_protocol_a_new_table_needs() -> None:
    assert new_table_protocol(SCHEMA, {}) == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert new_table_protocol(SCHEMA, {"delta.enableChangeDataFeed": "true"}) == {
        "minReaderVersion": 1,
        "minWriterVersion": 4,
    }
    assert new_table_protocol(SCHEMA, {"delta.enableDeletionVectors": "true", "delta.appendOnly": "true"}) == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["appendOnly", "deletionVectors", "invariants"],
    }
    for mode in ("name", "id"):  # column mapping: Delta's (2, 5), or the feature beside another one
        assert new_table_protocol(SCHEMA, {"delta.columnMapping.mode": mode}) == {
            "minReaderVersion": 2,
            "minWriterVersion": 5,
        }
    assert new_table_protocol(SCHEMA, {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"}) == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["columnMapping", "deletionVectors"],
        # the legacy writer features a table-features protocol names, as Delta's JVM connector does (the oracle)
        "writerFeatures": ["appendOnly", "columnMapping", "deletionVectors", "invariants"],
    }
    assert new_table_protocol(SCHEMA, {"delta.columnMapping.mode": "none"})["minWriterVersion"] == 2


def test_options_on_an_existing_table_must_match_it() -> None:
    check_existing({"delta.appendOnly": "true"}, {"delta.appendOnly": "TRUE"}, table="/t")
    with pytest.raises(OptionError, match=r"delta.appendOnly.*exists with delta.appendOnly = None.*ALTER TABLE"):
        check_existing({}, {"delta.appendOnly": "true"}, table="/t")
