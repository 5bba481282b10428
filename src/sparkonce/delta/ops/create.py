"""Creating and replacing Delta tables by name or path: one place for ``CREATE [OR REPLACE] TABLE ... USING delta``
(:mod:`sparkonce.sql`) and delta-spark's builders ``DeltaTable.create / createIfNotExists / replace /
createOrReplace`` (:class:`sparkonce.delta.tables.DeltaTableBuilder`).

Runs on the driver (an ``AS SELECT`` query's rows are written by executors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sparkonce.delta.table.catalog import DeltaCatalog, table_key
from sparkonce.delta.table.clustering import CLUSTERING_OPTION, check_columns, table_clustering
from sparkonce.delta.table.identity import check_new_columns as check_identity_columns
from sparkonce.delta.table.options import TABLE_PROPERTIES_OPTION
from sparkonce.delta.table.schema import has_geo_columns
from sparkonce.errors import SqlError, UnsupportedFeatureError, analysis_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

CreateMode = Literal["create", "createIfNotExists", "replace", "createOrReplace"]
FORMAT = "sparkonce.delta"


@dataclass(frozen=True)
class CreateRequest:
    """What to create: a named table (``name``, optionally at ``location``) or a table at ``location`` only."""

    mode: CreateMode
    name: tuple[str, ...] | None = None
    location: str | None = None
    schema: StructType | None = None
    query: DataFrame | None = None
    """The rows of ``CREATE TABLE ... AS SELECT`` (then ``schema`` is None)."""
    partitioned_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    comment: str | None = None
    """The table's comment (``metaData.description``)."""
    shown: str = ""
    """The table as the user named it, for messages."""
    cluster_by: tuple[str, ...] = ()
    """``CLUSTER BY`` / ``clusterBy``: the clustering columns (:mod:`sparkonce.delta.table.clustering`)."""


@dataclass(frozen=True)
class Created:
    location: str
    """Where the table is."""
    wrote: bool
    """False when the table existed and nothing was written (``createIfNotExists``, or a name registered for an
    existing table)."""


def create_table(spark: SparkSession, request: CreateRequest) -> Created:
    """Create, replace or register the table ``request`` describes, as Delta does for ``mode``.

    Raises:
        SqlError: the name is taken (``TABLE_OR_VIEW_ALREADY_EXISTS``, also by a table of Spark's own catalog), a
            table to replace is missing, the location holds a table with another schema, or a property is not
            Delta's.
        OptionError: an unknown or malformed ``delta.*`` property.
    """
    from sparkonce.delta.log.table_view import existing_table
    from sparkonce.delta.txn.commit import table_exists

    shown = request.shown or ".".join(request.name or ()) or str(request.location)
    replace = request.mode in ("replace", "createOrReplace")
    catalog = DeltaCatalog.of(spark) if request.name is not None else None
    key: tuple[str, str] | None = None
    existing = None
    if catalog is not None:
        assert request.name is not None
        key = table_key(spark, request.name)
        if key is None:
            raise SqlError(f"{shown}: sparkonce's catalog takes [spark_catalog.]database.table names")
        existing = catalog.get(*key)
        if existing is None and _spark_has_table(spark, *key):
            raise analysis_error(
                "TABLE_OR_VIEW_ALREADY_EXISTS",
                f"Cannot create table or view `{key[0]}`.`{key[1]}` because it already exists in Spark's catalog "
                "(not a sparkonce Delta table).",
            )
    if existing is not None:
        if request.mode == "createIfNotExists":
            return Created(existing.location, False)
        if request.mode == "create":
            assert key is not None
            raise analysis_error(
                "TABLE_OR_VIEW_ALREADY_EXISTS",
                f"Cannot create table or view `{key[0]}`.`{key[1]}` because it already exists.",
            )
        if request.location is not None and request.location != existing.location:
            raise SqlError(f"{shown}: the location {request.location} differs from the table's {existing.location}")
        location = existing.location
    elif request.location is not None:
        location = request.location
    else:
        assert catalog is not None and key is not None
        location = catalog.managed_location(*key)
    if request.mode == "replace" and key is not None and existing is None:
        # REPLACE of a name the catalog lacks: Spark's CannotReplaceMissingTableException
        raise analysis_error("TABLE_OR_VIEW_NOT_FOUND", f"The table or view `{key[0]}`.`{key[1]}` cannot be found.")
    exists = table_exists(location)
    if request.mode == "replace" and not exists:
        raise analysis_error(
            "DELTA_CANNOT_REPLACE_MISSING_TABLE",
            f"Table {shown} cannot be replaced as it does not exist. Use CREATE OR REPLACE TABLE to create the table.",
        )
    properties = _table_properties(request.properties)
    frame = request.query
    if frame is None and request.schema is not None:
        from sparkonce.delta.table.generated import check_spark_schema

        check_spark_schema(request.schema, shown=shown)
        frame = spark.createDataFrame([], request.schema)
    wrote = True
    if exists and not replace:
        if request.name is None and request.mode == "createIfNotExists":
            return Created(location, False)
        if request.query is not None:
            raise SqlError(
                f"[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table {shown}: {location} already "
                "holds a Delta table"
            )
        if request.name is None:
            raise analysis_error("DELTA_TABLE_ALREADY_EXISTS", f"Table {shown} already exists.")
        if frame is not None:
            have = spark_schema(existing_table(location)).simpleString()
            want = frame.schema.simpleString()
            if have.lower() != want.lower():
                raise SqlError(
                    f"[DELTA_CREATE_TABLE_SCHEME_MISMATCH] The specified schema {want} does not match the existing "
                    f"schema {have} at {location}"
                )
        if properties or request.partitioned_by or request.cluster_by or request.comment is not None:
            raise SqlError(
                f"{shown} at {location}: the table exists there; its properties, partitioning, clustering and "
                "comment are the table's (change properties with ALTER TABLE ... SET TBLPROPERTIES)"
            )
        wrote = False
    else:
        if frame is None:
            raise SqlError(f"{shown}: {location} holds no Delta table, and no columns or query were given")
        if exists and request.partitioned_by and table_clustering(location) is not None:
            raise SqlError(
                "[DELTA_CLUSTERING_REPLACE_TABLE_WITH_PARTITIONED_TABLE] Replacing a clustered Delta table with a "
                "partitioned table is not allowed."
            )
        check_columns(
            request.cluster_by,
            frame.schema.jsonValue()["fields"],
            request.partitioned_by,
            table=shown,
            configuration=properties,
        )
        check_identity_columns(frame.schema.jsonValue()["fields"], request.partitioned_by, table=shown)
        _check_geo_columns(spark, frame.schema)
        writer = frame.write.format(FORMAT).mode("overwrite" if exists else "append")
        if request.cluster_by:
            writer = writer.option(CLUSTERING_OPTION, json.dumps(list(request.cluster_by)))
        if exists:
            writer = writer.option("overwriteSchema", "true")
        if request.partitioned_by:
            writer = writer.partitionBy(*request.partitioned_by)
        writer = writer.option(TABLE_PROPERTIES_OPTION, json.dumps(properties))
        if request.comment is not None:
            writer = writer.option("description", request.comment)
        writer.save(location)
    if catalog is not None and existing is None:
        assert key is not None
        catalog.add(*key, location, managed=request.location is None)
    return Created(location, wrote)


def convert_parquet(path: str, *, partition_schema: StructType | None = None, collect_stats: bool = True) -> bool:
    """``CONVERT TO DELTA parquet.`path```: delta-rs's conversion, one ``CONVERT`` commit listing the Parquet files
    in place (Hive-style partition folders when ``partition_schema`` names the partition columns; their statistics
    unless ``collect_stats`` is False). False when ``path`` holds a Delta table already (nothing to do, as in Delta).

    Raises:
        SqlError: the conversion failed (no Parquet files, a partition folder that does not match, ...).
    """
    from deltalake import Schema, convert_to_deltalake
    from pyspark.sql.pandas.types import to_arrow_schema

    from sparkonce.delta.txn.commit import table_exists
    from sparkonce.storage import table_location

    if table_exists(path):
        return False
    partitions = None
    if partition_schema is not None:
        partitions = Schema.from_arrow(to_arrow_schema(partition_schema, timezone="UTC"))
    location = table_location(path)
    try:
        convert_to_deltalake(
            location.uri,
            partition_by=partitions,
            partition_strategy="hive" if partitions is not None else None,
            storage_options=location.options() or None,
            collect_stats=collect_stats,
        )
    except Exception as err:
        raise SqlError(f"CONVERT TO DELTA parquet.`{path}`: {err}") from err
    return True


GEO_PREVIEW_CONF = "spark.databricks.delta.geo.preview.enabled"
"""Delta's gate on geometry and geography columns (``DeltaSQLConf.DELTA_GEO_PREVIEW_ENABLED``, off by default)."""


def _check_geo_columns(spark: SparkSession, schema: StructType) -> None:
    """A new table's geometry or geography columns need Delta's preview switch, as in Delta.

    Raises:
        UnsupportedFeatureError: Delta's ``DELTA_GEOSPATIAL_NOT_SUPPORTED`` when the switch is off.
    """
    if has_geo_columns(schema.json()) and str(spark.conf.get(GEO_PREVIEW_CONF, "false")).lower() != "true":
        raise UnsupportedFeatureError(
            "[DELTA_GEOSPATIAL_NOT_SUPPORTED] Geospatial types are not supported in this version of Delta Lake. "
            f"(set {GEO_PREVIEW_CONF} = true, as Delta asks)"
        )


def _spark_has_table(spark: SparkSession, database: str, name: str) -> bool:
    try:
        return bool(spark.catalog.tableExists(name, database))
    except Exception:  # the database does not exist in Spark's catalog
        return False


def spark_schema(table: object) -> StructType:
    """A delta-rs table's schema as Spark's ``StructType``."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table.schema().to_json()))  # type: ignore[attr-defined]


def _table_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Properties of a new or replaced table, as Delta takes them at ``CREATE``/``REPLACE``: Delta's ``delta.*``
    properties checked as write options are (canonical keys), every other key the user's, stored as given.

    Raises:
        OptionError: an unknown or malformed ``delta.*`` property.
    """
    from sparkonce.delta.table.properties import table_properties

    checked = table_properties(properties)
    checked.update({str(k): str(v) for k, v in properties.items() if not str(k).lower().startswith("delta.")})
    return checked


__all__ = ["CreateMode", "CreateRequest", "Created", "convert_parquet", "create_table", "spark_schema"]
