"""sparkonce's Delta tables in Spark's own session catalog, so that what users build on a name keeps working.

sparkonce's catalog (:mod:`sparkonce.delta.table.catalog`, JSON entries in the warehouse) stays the truth, shared by
every session and process. This module mirrors its entries into the session's Spark catalog and points Spark's
resolution of each name at sparkonce's read:

* each table becomes an *external* catalog table (``CREATE TABLE db.t (...) USING delta PARTITIONED BY (...)
  LOCATION '...'``): ``spark.catalog.listTables()``, ``tableExists``, ``getTable``, ``listColumns``, ``SHOW
  COLUMNS`` and ``SHOW TABLES`` know it; dropping the entry never touches the table's files;
* Spark keeps, per table name, the plan it resolved the name to (its relation cache, which a data source table's
  name goes through); sparkonce puts the DataFrame of ``spark.read.format("delta").load(location)`` there. On the
  native read path (:mod:`sparkonce.delta.read.native`) that plan's file index re-reads the Delta log at every query, so
  ``SELECT``, ``CACHE TABLE`` and views made over the name (by SQL or ``createOrReplaceTempView``) see the table's
  state at each query, as delta-spark's do.

Spark drops a cached plan on ``REFRESH TABLE`` and when a table's schema changes; :func:`sync_table` puts it back,
and sparkonce's ``spark.sql``, ``spark.table`` and the catalog API call it before they use a name. Needs a classic
(py4j) session; with Spark Connect the names are sparkonce's alone, as before.

Runs on the driver.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from sparkonce.delta.log.table_view import current_table
from sparkonce.delta.read.native import native_frame
from sparkonce.delta.table.catalog import DEFAULT_DATABASE, CatalogTable, DeltaCatalog
from sparkonce.delta.table.options import ReadOptions
from sparkonce.errors import SparkonceError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["HELPER_VIEW_PREFIX", "forget_stale", "forget_table", "sync_all", "sync_table"]

HELPER_VIEW_PREFIX = "__sparkonce_"
"""The names of the temporary views sparkonce's SQL reads tables through (hidden from SHOW TABLES and the catalog
API's ``listTables``)."""

_synced: dict[tuple[int, str, str], tuple[str, str]] = {}
"""(session, database, table) -> the location and the schema and partitioning the Spark catalog entry and the
cached plan were made with: the entries this module made (it never drops another)."""
_lock = threading.Lock()


def _usable(spark: SparkSession) -> bool:
    return getattr(spark, "_jsparkSession", None) is not None and getattr(spark, "_jvm", None) is not None


def _spark_sql(spark: SparkSession) -> Any:
    """Spark's own ``sql`` (under sparkonce's :class:`~sparkonce.sql.runner.DeltaSql`, when installed)."""
    return getattr(spark.sql, "spark_sql", spark.sql)


def sync_all(spark: SparkSession) -> int:
    """Mirror every table of sparkonce's catalog (every database) into ``spark``'s catalog; the number mirrored.

    A table that cannot be mirrored (unreadable, on a store Spark has no file system for) is logged and skipped:
    sparkonce's own SQL still resolves it.
    """
    if not _usable(spark):
        return 0
    catalog = DeltaCatalog.of(spark)
    count = 0
    present = set()
    for database in catalog.databases():
        for entry in catalog.tables(database):
            present.add((entry.database, entry.name))
            if sync_table(spark, entry):
                count += 1
    with _lock:
        stale = [(db, name) for (session, db, name) in _synced if session == id(spark) and (db, name) not in present]
    for database, name in stale:  # the warehouse changed (spark.sparkonce.warehouse.dir) or another session dropped it
        forget_table(spark, database, name)
    return count


def forget_stale(spark: SparkSession, database: str, name: str) -> None:
    """Drop ``database.name`` from ``spark``'s catalog when this module put it there and sparkonce's catalog no
    longer holds it (a name must never resolve to a table the warehouse no longer has)."""
    with _lock:
        ours = (id(spark), database.lower(), name.lower()) in _synced
    if ours:
        forget_table(spark, database, name)


def sync_table(spark: SparkSession, entry: CatalogTable) -> bool:
    """Make ``spark``'s catalog hold ``entry`` and resolve its name to sparkonce's read of the table's current
    schema; False when it cannot (the name then stays sparkonce's alone)."""
    if not _usable(spark):
        return False
    table = current_table(entry.location)
    if table is None:
        return False
    meta = table.snapshot.metadata
    state = (entry.location, json.dumps([meta.get("schemaString"), meta.get("partitionColumns")]))
    key = (id(spark), entry.database, entry.name)
    j = spark._jsparkSession
    jvm = spark._jvm
    assert jvm is not None
    catalog = j.sessionState().catalog()
    qualified = jvm.org.apache.spark.sql.catalyst.QualifiedTableName("spark_catalog", entry.database, entry.name)
    with _lock:
        known = _synced.get(key)
    exists = _exists(spark, entry)
    if known == state and exists and catalog.getCachedTable(qualified) is not None:
        return True
    try:
        frame = spark.read.format("sparkonce.delta").load(entry.location)
        if not exists or known != state:
            _create_entry(spark, entry, frame.schema, list(table.metadata().partition_columns), replace=exists)
        native = native_frame(
            spark,
            ReadOptions.parse({"path": entry.location}),
            catalog_table=catalog.getTableMetadata(_ident(spark, entry)),
        )
        catalog.cacheTable(qualified, (native if native is not None else frame)._jdf.queryExecution().analyzed())
    except (Py4JError, PySparkException, SparkonceError) as err:  # the name then stays sparkonce's alone
        log.warning("table %s.%s is not in Spark's catalog: %s", entry.database, entry.name, err)
        return False
    with _lock:
        _synced[key] = state
    return True


def forget_table(spark: SparkSession, database: str, name: str) -> None:
    """Drop ``database.name`` from ``spark``'s catalog (an external entry: the table's files stay)."""
    with _lock:
        _synced.pop((id(spark), database.lower(), name.lower()), None)
    if not _usable(spark):
        return
    _spark_sql(spark)(f"DROP TABLE IF EXISTS `{database}`.`{name}`")


def _ident(spark: SparkSession, entry: CatalogTable) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    return jvm.org.apache.spark.sql.catalyst.TableIdentifier(entry.name, jvm.scala.Option.apply(entry.database))


def _exists(spark: SparkSession, entry: CatalogTable) -> bool:
    return bool(spark._jsparkSession.sessionState().catalog().tableExists(_ident(spark, entry)))


def _create_entry(
    spark: SparkSession, entry: CatalogTable, schema: Any, partitions: list[str], *, replace: bool
) -> None:
    sql = _spark_sql(spark)
    if entry.database != DEFAULT_DATABASE:
        sql(f"CREATE DATABASE IF NOT EXISTS `{entry.database}`")
    name = f"`{entry.database}`.`{entry.name}`"
    if replace:
        sql(f"DROP TABLE IF EXISTS {name}")
    # partition columns last, as Spark's catalog keeps a partitioned table's schema (DESCRIBE TABLE then shows its
    # "# Partition Information"); reads resolve to the cached plan, in the table's own column order
    from pyspark.sql.types import StructType

    lowered = [c.lower() for c in partitions]
    ordered = StructType(
        [f for f in schema.fields if f.name.lower() not in lowered]
        + sorted((f for f in schema.fields if f.name.lower() in lowered), key=lambda f: lowered.index(f.name.lower()))
    )
    columns = spark._jvm.org.apache.spark.sql.types.DataType.fromJson(ordered.json()).toDDL()  # type: ignore[union-attr]
    partitioned = f" PARTITIONED BY ({', '.join(f'`{c}`' for c in partitions)})" if partitions else ""
    location = entry.location.replace("'", "\\'")
    sql(f"CREATE TABLE {name} ({columns}) USING delta{partitioned} LOCATION '{location}'")
