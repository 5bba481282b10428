"""Liquid clustering (Delta's "Clustered Table" feature): ``CLUSTER BY (a, b)`` / ``DeltaTable.create(...)
.clusterBy("a", "b")``, ``ALTER TABLE t CLUSTER BY (..) | NONE``, and ``OPTIMIZE`` that clusters by those columns.

A clustered table has the writer features ``clustering`` and ``domainMetadata`` (writer version 7) and a
``domainMetadata`` action for the system domain ``delta.clustering`` whose configuration is
``{"clusteringColumns": [["a"], ["b"]]}`` (each column a path of physical names, as Delta's
``ClusteringMetadataDomain`` writes it). Clustering and partitioning exclude each other. Writers must keep
statistics for the clustering columns (sparkonce's files carry statistics for the table's statistics
columns, :func:`sparkonce.delta.table.skipping.stats_columns`, and clustering columns must be among them), and files
that ``OPTIMIZE`` clusters carry ``clusteringProvider = "liquid"``.

Runs on the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkonce.delta.log.actions import DomainMetadataAction, Protocol
from sparkonce.delta.table.skipping import top_level_stats_columns
from sparkonce.errors import OptionError, SqlError

DOMAIN = "delta.clustering"
"""The system-controlled metadata domain of clustering columns."""

PROVIDER = "liquid"
"""The ``clusteringProvider`` of files ``OPTIMIZE`` clusters (Delta's liquid clustering)."""

MAX_COLUMNS = 4
"""Delta's default limit of clustering columns (``spark.databricks.delta.clusteredTable.maxNumClusteringColumns``)."""

CLUSTERING_OPTION = "__clustering_columns"
"""The write option that carries the clustering columns of a table the write creates (a JSON list of names), as
Spark's ``DataFrameWriter.clusterBy`` passes them to data sources."""

FEATURES = ("clustering", "domainMetadata")
"""The writer features a clustered table names."""


def parse_option(options: Mapping[str, str]) -> tuple[str, ...]:
    """The clustering columns a write option gives (:data:`CLUSTERING_OPTION`); () when absent.

    Raises:
        OptionError: the value is not a JSON list of names.
    """
    raw = next((v for k, v in options.items() if k.lower() == CLUSTERING_OPTION), None)
    if raw is None or not raw.strip():
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        raise OptionError(CLUSTERING_OPTION, raw, "must be a JSON list of column names") from None
    names: list[str] = []
    for item in value if isinstance(value, list) else [None]:
        if isinstance(item, list) and len(item) == 1:
            item = item[0]
        if not isinstance(item, str):
            raise OptionError(CLUSTERING_OPTION, raw, "must be a JSON list of column names")
        names.append(item)
    return tuple(names)


def check_columns(
    columns: Sequence[str],
    fields: Sequence[Mapping[str, Any]],
    partition_by: Sequence[str],
    *,
    table: str,
    configuration: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """Check clustering columns against a table's top-level schema fields and its properties
    (``configuration``: Delta's statistics columns, ``delta.dataSkippingStatsColumns`` or the first
    ``delta.dataSkippingNumIndexedCols``, 32 by default); their names as the schema spells them.

    Raises:
        SqlError: partition columns too (Delta's ``DELTA_CLUSTER_BY_WITH_PARTITIONED_BY``), more than
            :data:`MAX_COLUMNS`, a column twice, a column that is not a top-level column of the table, or one
            without statistics (a struct, array or map column, or one outside Delta's statistics columns).
        OptionError: the table's statistics column properties are invalid
            (:func:`sparkonce.delta.table.skipping.stats_columns`).
    """
    if not columns:
        return ()
    if partition_by:
        raise SqlError(
            "[DELTA_CLUSTER_BY_WITH_PARTITIONED_BY] Clustering and partitioning cannot both be specified. Please "
            "remove partitionedBy if you want to create a Delta table with clustering."
        )
    if len(columns) > MAX_COLUMNS:
        raise SqlError(
            f"[DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS] CLUSTER BY supports up to {MAX_COLUMNS} clustering columns, "
            f"but the table has {len(columns)} clustering columns. Please remove the extra clustering columns."
        )
    by_name = {str(f["name"]).lower(): f for f in fields}
    indexed = {name.lower() for name in top_level_stats_columns(fields, partition_by, configuration or {})}
    out: list[str] = []
    for name in columns:
        field = by_name.get(name.lower())
        if field is None:
            raise SqlError(
                f"{table}: clustering column {name!r} is not a column of the table "
                f"({[str(f['name']) for f in fields]}); sparkonce clusters by top-level columns"
            )
        if isinstance(field.get("type"), dict) or str(field["name"]).lower() not in indexed:
            raise SqlError(
                f"[DELTA_CLUSTERING_COLUMN_MISSING_STATS] Clustering requires clustering columns to have stats. "
                f"Couldn't find clustering column(s) '{name}' in stats schema of {table} (a nested type has none, and "
                "Delta keeps statistics for delta.dataSkippingStatsColumns or the first "
                "delta.dataSkippingNumIndexedCols columns)"
            )
        if str(field["name"]) in out:
            raise SqlError(f"{table}: clustering column {name!r} is given twice")
        out.append(str(field["name"]))
    return tuple(out)


def _physical(name: str, fields: Iterable[Mapping[str, Any]]) -> str:
    from sparkonce.delta.table.column_mapping import PHYSICAL_NAME_KEY

    for f in fields:
        if f["name"] == name:
            return str((f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, name))
    return name


def _logical(physical: str, fields: Iterable[Mapping[str, Any]]) -> str:
    from sparkonce.delta.table.column_mapping import PHYSICAL_NAME_KEY

    for f in fields:
        if str((f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, f["name"])) == physical:
            return str(f["name"])
    return physical


def domain_action(columns: Sequence[str], fields: Sequence[Mapping[str, Any]]) -> DomainMetadataAction:
    """The ``domainMetadata`` action that makes ``columns`` (logical names, checked) the clustering columns; no
    columns: clustering by nothing (``CLUSTER BY NONE``, still a clustered table, as Delta writes it)."""
    configuration = {"clusteringColumns": [[_physical(c, fields)] for c in columns]}
    return {
        "domainMetadata": {
            "domain": DOMAIN,
            "configuration": json.dumps(configuration, separators=(",", ":")),
            "removed": False,
        }
    }


def with_features(protocol: Mapping[str, Any]) -> Protocol:
    """``protocol`` raised to writer version 7 with the clustering features (the legacy features its writer
    version implied named too, as Delta upgrades a protocol to table features)."""
    from sparkonce.delta.log.log_entry import writer_features

    features = set(writer_features(protocol)) | set(FEATURES)
    out: Protocol = {"minReaderVersion": int(protocol.get("minReaderVersion") or 1), "minWriterVersion": 7}
    if "readerFeatures" in protocol:
        out["readerFeatures"] = list(protocol["readerFeatures"])
    out["writerFeatures"] = sorted(features)
    return out


def clustering_columns(
    domains: Mapping[str, Mapping[str, Any]], fields: Sequence[Mapping[str, Any]]
) -> tuple[str, ...] | None:
    """The table's clustering columns (logical names) from its domain metadata (:attr:`Snapshot.domains`); None
    when the table is not clustered.

    Raises:
        SqlError: the domain's configuration is not Delta's (sparkonce will not guess).
    """
    domain = domains.get(DOMAIN)
    if domain is None or domain.get("removed"):
        return None
    try:
        paths = json.loads(str(domain.get("configuration") or "{}")).get("clusteringColumns", [])
    except (ValueError, AttributeError):
        raise SqlError(f"the {DOMAIN} domain metadata is not valid JSON: {domain.get('configuration')}") from None
    out: list[str] = []
    for path in paths:
        parts = path if isinstance(path, list) else [path]
        if len(parts) != 1 or not isinstance(parts[0], str):
            raise SqlError(f"clustering by nested column {parts} is not supported by sparkonce")
        out.append(_logical(parts[0], fields))
    return tuple(out)


def table_clustering(location: Any, table_version: int | None = None) -> tuple[str, ...] | None:
    """The clustering columns of the table at ``location`` (a path or :class:`TableLocation`); None when it is not
    clustered (:func:`clustering_columns`)."""
    from sparkonce.delta.log.table_view import existing_table

    snapshot = existing_table(location, table_version=table_version).snapshot
    if not snapshot.domains:
        return None
    fields = json.loads(snapshot.metadata.get("schemaString") or '{"fields": []}')["fields"]
    return clustering_columns(snapshot.domains, fields)


__all__ = [
    "CLUSTERING_OPTION",
    "DOMAIN",
    "FEATURES",
    "MAX_COLUMNS",
    "PROVIDER",
    "check_columns",
    "clustering_columns",
    "domain_action",
    "parse_option",
    "table_clustering",
    "with_features",
]
