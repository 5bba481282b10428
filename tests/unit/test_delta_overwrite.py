"""What an overwrite replaces, from its options and the session's settings (:mod:`sparkonce.delta.overwrite`), as
Delta's ``DeltaOptions`` reads them; no Spark."""

from __future__ import annotations

import pytest

from sparkonce.delta.overwrite import (
    DYNAMIC_OVERWRITE_ENABLED_CONF,
    PARTITION_OVERWRITE_MODE_CONF,
    SelectiveOverwrite,
    wants_selective_overwrite,
)
from sparkonce.delta.table.options import WriteOptions
from sparkonce.errors import OptionError, UnsupportedFeatureError


def _options(**given: str) -> WriteOptions:
    return WriteOptions.parse({"path": "/tmp/t", **given})


def test_replace_where_and_dynamic_mode_from_options_and_session() -> None:
    assert SelectiveOverwrite.of(_options(), {}) is None  # a whole-table overwrite
    assert SelectiveOverwrite.of(_options(partitionOverwriteMode="STATIC"), {}) is None
    chosen = SelectiveOverwrite.of(_options(replaceWhere="day = 2"), {})
    assert chosen is not None and (chosen.replace_where, chosen.dynamic) == ("day = 2", False)
    assert chosen.data_columns and chosen.check_rows
    assert chosen.parameters() == {"predicate": "day = 2"}
    by_session = SelectiveOverwrite.of(_options(), {PARTITION_OVERWRITE_MODE_CONF: "DYNAMIC"})
    assert by_session is not None and by_session.dynamic
    assert by_session.parameters() == {"isDynamicPartitionOverwrite": True}
    # the option wins over the session's mode
    assert (
        SelectiveOverwrite.of(_options(partitionOverwriteMode="static"), {PARTITION_OVERWRITE_MODE_CONF: "dynamic"})
        is None
    )


def test_bad_settings_and_disabled_dynamic_overwrite_are_refused() -> None:
    with pytest.raises(OptionError, match="partitionOverwriteMode"):
        _options(partitionOverwriteMode="sometimes")
    with pytest.raises(OptionError, match="replaceWhere"):
        _options(replaceWhere=" ")
    with pytest.raises(UnsupportedFeatureError, match="DELTA_DYNAMIC_PARTITION_OVERWRITE_DISABLED"):
        SelectiveOverwrite.of(_options(partitionOverwriteMode="dynamic"), {DYNAMIC_OVERWRITE_ENABLED_CONF: "false"})
    with pytest.raises(OptionError, match=DYNAMIC_OVERWRITE_ENABLED_CONF):
        SelectiveOverwrite.of(_options(partitionOverwriteMode="dynamic"), {DYNAMIC_OVERWRITE_ENABLED_CONF: "maybe"})


def test_which_overwrites_the_writer_shim_hands_to_the_driver() -> None:
    assert not wants_selective_overwrite({}, {})
    assert wants_selective_overwrite({"REPLACEWHERE": "a = 1"}, {})
    assert wants_selective_overwrite({"partitionOverwriteMode": "static"}, {})  # checked there, before data moves
    assert wants_selective_overwrite({}, {PARTITION_OVERWRITE_MODE_CONF: "dynamic"})
    assert not wants_selective_overwrite({}, {PARTITION_OVERWRITE_MODE_CONF: "STATIC"})
