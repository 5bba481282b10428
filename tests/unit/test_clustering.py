"""The ``delta.clustering`` domain without Spark: physical names under column mapping, and the checks."""

from __future__ import annotations

import json

import pytest

from sparkonce.delta.table.clustering import check_columns, clustering_columns, domain_action, with_features
from sparkonce.errors import SqlError

MAPPED = [
    {"name": "id", "type": "long", "metadata": {"delta.columnMapping.physicalName": "col-1"}},
    {"name": "day", "type": "string", "metadata": {"delta.columnMapping.physicalName": "col-2"}},
    {"name": "info", "type": {"type": "struct", "fields": []}, "metadata": {}},
]


def test_domain_uses_physical_names_and_reads_back_logical_ones() -> None:
    action = domain_action(["day", "id"], MAPPED)["domainMetadata"]
    assert action == {
        "domain": "delta.clustering",
        "configuration": '{"clusteringColumns":[["col-2"],["col-1"]]}',
        "removed": False,
    }
    assert clustering_columns({"delta.clustering": action}, MAPPED) == ("day", "id")
    assert clustering_columns({}, MAPPED) is None
    nested = {"domain": "delta.clustering", "configuration": json.dumps({"clusteringColumns": [["info", "x"]]})}
    with pytest.raises(SqlError, match="nested column"):
        clustering_columns({"delta.clustering": nested}, MAPPED)


def test_checks_and_protocol() -> None:
    assert check_columns(["DAY"], MAPPED, (), table="t") == ("day",)
    with pytest.raises(SqlError, match="DELTA_CLUSTERING_COLUMN_MISSING_STATS"):
        check_columns(["info"], MAPPED, (), table="t")
    with pytest.raises(SqlError, match="DELTA_CLUSTERING_COLUMN_MISSING_STATS"):
        check_columns(["day"], MAPPED, (), table="t", configuration={"delta.dataSkippingStatsColumns": "id"})
    with pytest.raises(SqlError, match="given twice"):
        check_columns(["id", "ID"], MAPPED, (), table="t")
    assert with_features({"minReaderVersion": 1, "minWriterVersion": 2}) == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "clustering", "domainMetadata", "invariants"],
    }
