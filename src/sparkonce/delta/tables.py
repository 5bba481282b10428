"""``DeltaTable``: delta-spark's Python API (``delta.tables``) for the common subset, on sparkonce.

Code written for Delta's JVM connector runs with its import changed::

    from sparkonce.delta import DeltaTable       # instead of: from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, "/data/events")
    table.alias("t").merge(updates.alias("s"), "t.id = s.id") \\
        .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

Same method names, arguments and semantics as delta-spark; every operation is one Delta commit whose operation
name, parameters and metrics are Delta's (recorded in commitInfo's ``sparkonce`` object, shown by
:meth:`DeltaTable.history`). Idempotent DML as in Delta: with the session confs
``spark.databricks.delta.write.txnAppId`` and ``spark.databricks.delta.write.txnVersion`` set (e.g. inside
``foreachBatch``), ``delete``, ``update`` and ``merge`` commit that ``txn`` and are skipped when the table's
``txn_version(app_id) >= txnVersion`` already. See docs/delta.md ("The DeltaTable API") for the differences.

The table builders: ``DeltaTable.create / createIfNotExists / replace / createOrReplace(spark)`` return a
:class:`DeltaTableBuilder`; ``.tableName``, ``.location``, ``.addColumn(s)``, ``.partitionedBy``, ``.clusterBy``,
``.property``, ``.comment`` then ``.execute()`` make the table (:func:`sparkonce.delta.ops.create.create_table`, the
same as ``CREATE TABLE ... USING delta``) and return its :class:`DeltaTable`. Arguments are checked as delta-spark
checks them (a ``TypeError`` with delta-spark's message, before anything is written). ``addColumn(...,
generatedAlwaysAs=expr)`` makes a generated column (:mod:`sparkonce.delta.table.generated`); a generation expression
sparkonce cannot evaluate is refused at ``execute()`` with ``UnsupportedFeatureError``.

Why one module of ~900 lines: delta-spark's ``DeltaTable`` is one public class by contract (its users call its
methods), and its builders return it while it returns them, so both live here as in delta-spark's ``tables.py``;
each method is a few lines over the module that does the work (merge, dml, optimize, vacuum, history, alter,
create).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from sparkonce.delta.ops.create import CreateMode, CreateRequest, create_table
from sparkonce.delta.ops.merge import MergeClause, merge_into
from sparkonce.delta.table.identity import IdentityGenerator, column_metadata
from sparkonce.delta.txn.commit import BatchTxn, table_exists
from sparkonce.errors import (
    OptionError,
    TableNotFoundError,
    UnsupportedFeatureError,
    unsupported_operation_error,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

log = logging.getLogger(__name__)

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
MAX_FILE_SIZE_CONF = "spark.databricks.delta.optimize.maxFileSize"
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
AUTO_MERGE_CONF = "spark.databricks.delta.schema.autoMerge.enabled"
IGNORE_MISSING_FILES_CONF = "spark.sql.files.ignoreMissingFiles"

DETAIL_SCHEMA = (
    "format STRING, id STRING, name STRING, description STRING, location STRING, createdAt TIMESTAMP, "
    "lastModified TIMESTAMP, partitionColumns ARRAY<STRING>, clusteringColumns ARRAY<STRING>, numFiles BIGINT, "
    "sizeInBytes BIGINT, properties MAP<STRING, STRING>, minReaderVersion INT, minWriterVersion INT, "
    "tableFeatures ARRAY<STRING>, statistics MAP<STRING, STRING>"
)
RESTORE_SCHEMA = (
    "table_size_after_restore BIGINT, num_of_files_after_restore BIGINT, num_removed_files BIGINT, "
    "num_restored_files BIGINT, removed_files_size BIGINT, restored_files_size BIGINT"
)
MERGE_SCHEMA = "num_affected_rows BIGINT, num_updated_rows BIGINT, num_deleted_rows BIGINT, num_inserted_rows BIGINT"
COMPACTION_SCHEMA = (
    "path STRING, metrics STRUCT<numFilesAdded: BIGINT, numFilesRemoved: BIGINT, "
    "filesAdded: STRUCT<min: BIGINT, max: BIGINT, avg: DOUBLE, totalFiles: BIGINT, totalSize: BIGINT>, "
    "filesRemoved: STRUCT<min: BIGINT, max: BIGINT, avg: DOUBLE, totalFiles: BIGINT, totalSize: BIGINT>, "
    "partitionsOptimized: BIGINT, zOrderStats: STRUCT<strategyName: STRING, inputCubeFiles: STRUCT<num: BIGINT, "
    "size: BIGINT>, inputOtherFiles: STRUCT<num: BIGINT, size: BIGINT>, inputNumCubes: BIGINT, mergedFiles: "
    "STRUCT<num: BIGINT, size: BIGINT>, numOutputCubes: BIGINT, mergedNumCubes: BIGINT>, numBatches: BIGINT, "
    "totalConsideredFiles: BIGINT, totalFilesSkipped: BIGINT>"
)


def dml_txn(spark: SparkSession) -> BatchTxn | None:
    """The txn of idempotent DML from Delta's session confs (both or neither).

    Raises:
        OptionError: only one of the two is set, or the version is not a non-negative integer.
    """
    app_id = spark.conf.get(TXN_APP_ID_CONF, None)
    raw_version = spark.conf.get(TXN_VERSION_CONF, None)
    if app_id is None and raw_version is None:
        return None
    if app_id is None or raw_version is None:
        missing = TXN_APP_ID_CONF if app_id is None else TXN_VERSION_CONF
        raise OptionError(
            missing, None, f"both {TXN_APP_ID_CONF} and {TXN_VERSION_CONF} must be set for idempotent DML"
        )
    try:
        version = int(raw_version)
    except ValueError:
        raise OptionError(TXN_VERSION_CONF, raw_version, "must be a non-negative integer") from None
    if version < 0:
        raise OptionError(TXN_VERSION_CONF, raw_version, "must be a non-negative integer")
    return BatchTxn(app_id, version)


class DeltaTable:
    """A Delta table at a path, with delta-spark's operations. Runs on the driver (the data work runs on executors)."""

    def __init__(self, spark: SparkSession, path: str, alias: str | None = None) -> None:
        self._spark = spark
        self._path = path
        self._alias = alias

    # -- creation --------------------------------------------------------------------------------------------

    @classmethod
    def forPath(cls, sparkSession: SparkSession, path: str, hadoopConf: Mapping[str, str] | None = None) -> DeltaTable:
        """The Delta table at ``path``.

        ``hadoopConf``: the Hadoop file system settings delta-spark passes to its Hadoop configuration. sparkonce has
        no Hadoop file system: settings that have no storage option counterpart (``fs.<scheme>.impl``, caches,
        buffers, ...) are accepted and ignored (logged at debug level); one that names a credential or an endpoint
        (:func:`sparkonce.storage.hadoop_storage_options`) is refused, naming the storage option to set instead.

        Raises:
            TableNotFoundError: ``path`` is not a Delta table (``... is not a Delta table``).
            OptionError: a ``hadoopConf`` entry that maps onto a storage option.
        """
        if hadoopConf:
            from sparkonce.storage import hadoop_storage_options

            mapped, ignored = hadoop_storage_options(hadoopConf)
            if mapped:
                key, name = next(iter(mapped.items()))
                raise OptionError(
                    f"hadoopConf[{key!r}]",
                    hadoopConf[key],
                    f"is sparkonce's storage option {name}: set it as spark.sparkonce.storage.{name} in the session "
                    "(a DeltaTable does not carry storage options of its own)",
                )
            log.debug("DeltaTable.forPath(%s): hadoopConf %s ignored (no Hadoop file system)", path, sorted(ignored))
        text = os.fspath(path)
        if not table_exists(text):
            raise TableNotFoundError(f"{text} is not a Delta table")
        import sparkonce

        sparkonce.register(sparkSession)
        return cls(sparkSession, text)

    @classmethod
    def create(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:
        """A builder of a new table (fails at ``execute()`` when the table exists)."""
        return _builder(sparkSession, "create")

    @classmethod
    def createIfNotExists(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:
        """A builder of a table made only when it does not exist yet."""
        return _builder(sparkSession, "createIfNotExists")

    @classmethod
    def replace(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:
        """A builder replacing an existing table (fails at ``execute()`` when there is none)."""
        return _builder(sparkSession, "replace")

    @classmethod
    def createOrReplace(cls, sparkSession: SparkSession | None = None) -> DeltaTableBuilder:
        """A builder replacing the table, or creating it."""
        return _builder(sparkSession, "createOrReplace")

    @classmethod
    def forName(cls, sparkSession: SparkSession, tableOrViewName: str) -> DeltaTable:
        """The Delta table named ``tableOrViewName`` in sparkonce's catalog (``CREATE TABLE``, ``saveAsTable``,
        ``toTable``; see :mod:`sparkonce.delta.table.catalog`).

        Raises:
            TableNotFoundError: no Delta table of that name (``... is not a Delta table``).
            TypeError: the name is not a string.
        """
        if not isinstance(tableOrViewName, str):
            raise TypeError(f"tableOrViewName must be a str, not {type(tableOrViewName).__name__}")
        import sparkonce
        from sparkonce.delta.table.catalog import find_table
        from sparkonce.sqltext.grammar import parse_format_path, parse_name

        sparkonce.register(sparkSession)
        path = parse_format_path(tableOrViewName, "delta")
        if path is not None:
            return cls.forPath(sparkSession, path)  # delta.`path`, as delta-spark takes it
        entry = find_table(sparkSession, parse_name(tableOrViewName))
        if entry is None or not table_exists(entry.location):
            raise TableNotFoundError(f"`{tableOrViewName}` is not a Delta table.")
        return cls(sparkSession, entry.location)

    @classmethod
    def convertToDelta(
        cls, sparkSession: SparkSession, identifier: str, partitionSchema: str | StructType | None = None
    ) -> DeltaTable:
        """Make the Parquet files at ``identifier`` (``parquet.`/path```) a Delta table in place (one ``CONVERT``
        commit); ``partitionSchema`` (DDL text or a ``StructType``) names Hive-style partition columns.

        Raises:
            TypeError: an argument of the wrong type.
            OptionError: the identifier is not ``parquet.`path```.
            SqlError: the conversion failed.
        """
        from pyspark.sql.types import StructType

        from sparkonce.delta.ops.create import convert_parquet
        from sparkonce.sqltext.grammar import parse_format_path

        if not isinstance(identifier, str):
            raise TypeError(f"identifier must be a str such as parquet.`/path`, not {type(identifier).__name__}")
        if partitionSchema is not None and not isinstance(partitionSchema, str | StructType):
            raise TypeError(f"partitionSchema must be a str or a StructType, not {type(partitionSchema).__name__}")
        path = parse_format_path(identifier, "parquet")
        if path is None:
            raise OptionError("identifier", identifier, "convertToDelta takes parquet.`/path` (a Parquet directory)")
        schema = (
            sparkSession.createDataFrame([], partitionSchema).schema
            if isinstance(partitionSchema, str)
            else partitionSchema
        )
        convert_parquet(path, partition_schema=schema)
        import sparkonce

        sparkonce.register(sparkSession)
        return cls(sparkSession, path)

    @classmethod
    def isDeltaTable(cls, sparkSession: SparkSession, identifier: str) -> bool:
        """True when ``identifier`` (a path) holds a Delta table."""
        return table_exists(os.fspath(identifier))

    def alias(self, aliasName: str) -> DeltaTable:
        """This table under ``aliasName`` (for merge conditions and :meth:`toDF`)."""
        return DeltaTable(self._spark, self._path, aliasName)

    def toDF(self) -> DataFrame:
        """The table's newest snapshot as a DataFrame (read on executors)."""
        frame: DataFrame = self._spark.read.format("sparkonce.delta").load(self._path)
        return frame.alias(self._alias) if self._alias else frame

    # -- reading the log -------------------------------------------------------------------------------------

    def history(self, limit: int | None = None) -> DataFrame:
        """The newest ``limit`` commits (all when None), newest first, with ``DESCRIBE HISTORY``'s columns."""
        from sparkonce.delta.read.history import history

        return history(self._spark, self._path, limit=limit)

    def detail(self) -> DataFrame:
        """One row with ``DESCRIBE DETAIL``'s columns (format, id, location, numFiles, sizeInBytes, ...)."""
        from sparkonce.delta.log.table_view import existing_table
        from sparkonce.delta.read.history import history_rows
        from sparkonce.delta.table.clustering import table_clustering
        from sparkonce.delta.table.protocol import supported_features
        from sparkonce.delta.txn.commit import protocol_action

        table = existing_table(self._path)  # sparkonce's log reader: features delta-rs does not know are shown too
        metadata = table.metadata()
        protocol = table.protocol()
        sizes = [int(add.get("size") or 0) for add in table.snapshot.files.values()]
        newest = history_rows(self._path, limit=1)[0]
        created = dt.datetime.fromtimestamp(metadata.created_time / 1000, dt.UTC) if metadata.created_time else None
        features = sorted(supported_features(protocol_action(table)))  # a legacy protocol's implied ones too
        row: tuple[Any, ...] = (
            "delta",
            metadata.id,
            metadata.name,
            metadata.description,
            _uri(self._path),
            created,
            newest[1],
            list(metadata.partition_columns),
            list(table_clustering(self._path, table.version()) or ()),
            len(sizes),
            int(sum(sizes)),
            {str(k): str(v) for k, v in metadata.configuration.items() if v is not None},
            protocol.min_reader_version,
            protocol.min_writer_version,
            features,
            {},
        )
        return self._spark.createDataFrame([row], DETAIL_SCHEMA)

    # -- maintenance -----------------------------------------------------------------------------------------

    def vacuum(self, retentionHours: float | None = None) -> DataFrame:
        """Delete files no table version within ``retentionHours`` references (default: the table's
        ``delta.deletedFileRetentionDuration``, 168 hours unless set); returns their paths.

        The retention guard is Delta's: a retention below the table's ``delta.deletedFileRetentionDuration`` is
        refused unless ``spark.databricks.delta.retentionDurationCheck.enabled`` is ``false``.
        """
        from sparkonce.delta.ops.vacuum import vacuum

        enforce = str(self._spark.conf.get(RETENTION_CHECK_CONF, "true")).lower() != "false"
        result = vacuum(
            self._path,
            retention_hours=None if retentionHours is None else float(retentionHours),
            dry_run=False,
            enforce_retention_duration=enforce,
        )
        root = _uri(self._path)
        return self._spark.createDataFrame([(f"{root}/{f}",) for f in result.files], "path STRING")

    def generate(self, mode: str) -> None:
        """Write the table's ``symlink_format_manifest`` (the only mode Delta has): manifests listing the newest
        snapshot's data files, for Presto, Trino, Athena and Hive.

        Raises:
            OptionError: another mode.
        """
        from sparkonce.delta.ops.manifest import generate_symlink_manifest

        if mode != "symlink_format_manifest":
            raise OptionError("mode", mode, "the only generate mode is symlink_format_manifest")
        generate_symlink_manifest(self._path)

    def upgradeTableProtocol(self, readerVersion: int, writerVersion: int) -> None:
        """Raise the table's protocol to at least ``readerVersion`` / ``writerVersion`` (one commit; never down).

        Raises:
            ValueError: a version that is not an integer (delta-spark's message).
        """
        from sparkonce.delta.ops.alter import alter_properties

        if type(readerVersion) is not int:
            raise ValueError(f"The readerVersion needs to be an integer but got '{type(readerVersion)}'.")
        if type(writerVersion) is not int:
            raise ValueError(f"The writerVersion needs to be an integer but got '{type(writerVersion)}'.")
        alter_properties(
            self._path,
            set={"delta.minReaderVersion": str(readerVersion), "delta.minWriterVersion": str(writerVersion)},
        )

    def addFeatureSupport(self, featureName: str) -> None:
        """Add the table feature ``featureName`` to the table's protocol (one commit; table features protocol).

        Raises:
            ValueError: the name is not a string (delta-spark's message).
            OptionError: a feature Delta does not have.
            UnsupportedFeatureError: a feature whose writers must do what sparkonce does not.
        """
        from sparkonce.delta.ops.alter import alter_properties

        _check_str(featureName, "featureName")
        alter_properties(self._path, set={f"delta.feature.{featureName}": "supported"})

    def dropFeatureSupport(self, featureName: str, truncateHistory: bool | None = None) -> None:
        """Drop a feature Delta can drop from the table's protocol, which becomes the weakest protocol holding the
        remaining features (one ``DROP FEATURE`` commit; ``typeWidening`` after its traces are removed, as Delta
        does: :func:`sparkonce.delta.ops.alter.drop_feature`).

        Raises:
            ValueError: ``featureName`` is not a string, ``truncateHistory`` not a bool (delta-spark's messages).
            OptionError: an unknown feature, or one the table does not have.
            UnsupportedFeatureError: a feature Delta cannot drop, ``truncateHistory`` for one that needs no
                truncation, a reader-writer feature whose traces sparkonce cannot remove, or constraints still on
                the table (nothing is written); Delta's ``DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD`` /
                ``DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST`` for ``typeWidening`` with ``truncateHistory``.
        """
        from sparkonce.delta.ops.alter import drop_feature

        _check_str(featureName, "featureName")
        if truncateHistory is not None and not isinstance(truncateHistory, bool):
            raise ValueError(f"truncateHistory needs to be a boolean but got '{type(truncateHistory)}'.")
        drop_feature(self._path, featureName, truncate_history=bool(truncateHistory), spark=self._spark)

    def optimize(self) -> DeltaOptimizeBuilder:
        """A builder for ``OPTIMIZE``: ``.where(partition predicate)`` then ``.executeCompaction()``."""
        return DeltaOptimizeBuilder(self._spark, self._path)

    def restoreToVersion(self, version: int) -> DataFrame:
        """Restore the table's content to table version ``version`` (one ``RESTORE`` commit:
        :func:`sparkonce.delta.ops.restore.restore_table`); returns its metrics."""
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"version needs to be an int but got '{type(version)}'.")
        return self._restore(version, None)

    def restoreToTimestamp(self, timestamp: str) -> DataFrame:
        """Restore the table's content as of ``timestamp`` (the newest table version committed at or before it).

        Raises:
            ValueError: ``timestamp`` is not a string (delta-spark's message).
            SqlError: ``timestamp`` is not a timestamp (Delta's ``DELTA_TIMESTAMP_INVALID``, an
                ``AnalysisException``).
        """
        if not isinstance(timestamp, str):
            raise ValueError(f"timestamp needs to be a string but got '{type(timestamp)}'.")
        return self._restore(None, timestamp)

    def _restore(self, table_version: int | None, timestamp: str | None) -> DataFrame:
        from sparkonce.delta.ops.restore import RESTORE_METRICS, restore_table

        ignore_missing = str(self._spark.conf.get(IGNORE_MISSING_FILES_CONF, "false")).strip().lower() == "true"
        done = restore_table(
            self._path, table_version=table_version, timestamp=timestamp, ignore_missing_files=ignore_missing
        )
        return self._spark.createDataFrame([tuple(done.metrics[k] for k in RESTORE_METRICS)], RESTORE_SCHEMA)

    # -- DML -------------------------------------------------------------------------------------------------

    def delete(self, condition: str | Column | None = None) -> None:
        """Delete the rows matching ``condition`` (all rows when None); rewrites only files holding such rows."""
        from sparkonce.delta.ops.dml import delete_rows

        delete_rows(self._spark, self._path, _condition(condition), txn=dml_txn(self._spark))

    def update(self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None) -> None:
        """Set ``set`` (column -> SQL expression or Column) on the rows matching ``condition`` (all when None).

        Raises:
            ValueError: ``set`` is None (it is required; None exists only for delta-spark's argument order).
            TypeError: an argument of the wrong type (delta-spark's messages).
        """
        from sparkonce.delta.ops.dml import update_rows

        assignments = _mapping(set, "'set'")
        update_rows(self._spark, self._path, _condition(condition), assignments, txn=dml_txn(self._spark))

    def merge(self, source: DataFrame, condition: str | Column) -> DeltaMergeBuilder:
        """A builder merging ``source`` into this table on ``condition`` (see :class:`DeltaMergeBuilder`)."""
        from pyspark.sql import DataFrame as SparkDataFrame

        if source is None:
            raise ValueError("'source' in merge cannot be None")
        if not isinstance(source, SparkDataFrame):
            raise TypeError("Type of 'source' in merge must be DataFrame.")
        if condition is None:
            raise ValueError("'condition' in merge cannot be None")
        checked = _condition(condition)
        assert checked is not None
        return DeltaMergeBuilder(self._spark, self._path, self._alias, source, checked)


@dataclass(frozen=True)
class DeltaMergeBuilder:
    """``MERGE INTO`` as delta-spark builds it; each ``when...`` returns a new builder. Runs on the driver.

    Within matched, not-matched and not-matched-by-source rows, the first clause (in the order given) whose
    condition holds applies; every clause but the last of each kind needs a condition.
    """

    _spark: SparkSession
    _path: str
    _alias: str | None
    _source: DataFrame
    _condition: str | Column
    _clauses: tuple[MergeClause, ...] = ()
    _schema_evolution: bool = False

    def _add(self, clause: MergeClause) -> DeltaMergeBuilder:
        if clause.assignments is not None and self._alias:
            prefix = f"{self._alias}.".lower()  # delta-spark takes set={"t.key": ...} for the target's column key
            assignments = {
                k[len(prefix) :] if k.lower().startswith(prefix) else k: v for k, v in clause.assignments.items()
            }
            clause = replace(clause, assignments=assignments)
        return replace(self, _clauses=(*self._clauses, clause))

    def whenMatchedUpdate(
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None
    ) -> DeltaMergeBuilder:
        """Update matched target rows (where ``condition`` holds) with ``set``: column -> expression."""
        assignments = _mapping(set, "'set' in whenMatchedUpdate")  # delta-spark checks set before condition
        return self._add(MergeClause("matched", "update", _condition(condition), assignments))

    def whenMatchedUpdateAll(self, condition: str | Column | None = None) -> DeltaMergeBuilder:
        """Update every column of matched target rows from the source column of the same name."""
        return self._add(MergeClause("matched", "update", _condition(condition), None))

    def whenMatchedDelete(self, condition: str | Column | None = None) -> DeltaMergeBuilder:
        """Delete matched target rows (where ``condition`` holds)."""
        return self._add(MergeClause("matched", "delete", _condition(condition), None))

    def whenNotMatchedInsert(
        self, condition: str | Column | None = None, values: Mapping[str, str | Column] | None = None
    ) -> DeltaMergeBuilder:
        """Insert source rows without a match: ``values`` column -> expression (other columns null)."""
        assignments = _mapping(values, "'values' in whenNotMatchedInsert")
        return self._add(MergeClause("notMatched", "insert", _condition(condition), assignments))

    def whenNotMatchedInsertAll(self, condition: str | Column | None = None) -> DeltaMergeBuilder:
        """Insert source rows without a match, every column from the source column of the same name."""
        return self._add(MergeClause("notMatched", "insert", _condition(condition), None))

    def whenNotMatchedBySourceUpdate(
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None
    ) -> DeltaMergeBuilder:
        """Update target rows no source row matches (where ``condition`` holds) with ``set``."""
        assignments = _mapping(set, "'set' in whenNotMatchedBySourceUpdate")
        return self._add(MergeClause("notMatchedBySource", "update", _condition(condition), assignments))

    def whenNotMatchedBySourceDelete(self, condition: str | Column | None = None) -> DeltaMergeBuilder:
        """Delete target rows no source row matches (where ``condition`` holds)."""
        return self._add(MergeClause("notMatchedBySource", "delete", _condition(condition), None))

    def withSchemaEvolution(self) -> DeltaMergeBuilder:
        """Let ``UpdateAll``/``InsertAll`` add the source's new columns to the table."""
        return replace(self, _schema_evolution=True)

    def execute(self) -> DataFrame:
        """Run the merge (one Delta commit); returns ``num_affected_rows``, ``num_updated_rows``,
        ``num_deleted_rows`` and ``num_inserted_rows``.

        Raises:
            OptionError: no clause was given.
            SchemaMismatchError: two source rows modify one target row, or columns do not fit the table.
        """
        if not self._clauses:
            raise OptionError("merge", "execute", "needs at least one whenMatched/whenNotMatched clause")
        result = merge_into(
            self._source,
            self._path,
            self._condition,
            self._clauses,
            target_alias=self._alias,
            txn=dml_txn(self._spark),
            schema_evolution=self._schema_evolution
            or str(self._spark.conf.get(AUTO_MERGE_CONF, "false")).lower() == "true",
        )
        counts = (result.rows_updated, result.rows_deleted, result.rows_inserted)
        return self._spark.createDataFrame([(sum(counts), *counts)], MERGE_SCHEMA)


@dataclass(frozen=True)
class DeltaOptimizeBuilder:
    """``OPTIMIZE`` as delta-spark builds it. Runs on the driver."""

    _spark: SparkSession
    _path: str
    _where: str | None = None

    def where(self, partitionFilter: str) -> DeltaOptimizeBuilder:
        """Only the partitions matching ``partitionFilter`` (a predicate on partition columns)."""
        return replace(self, _where=partitionFilter)

    def executeCompaction(self) -> DataFrame:
        """Bin-pack small files into larger ones (one ``OPTIMIZE`` commit, ``dataChange=false``); returns the
        table path and the metrics. Target size: ``spark.databricks.delta.optimize.maxFileSize`` (default 1 GiB)."""
        return self._execute(())

    def executeZOrderBy(self, *cols: str | list[str] | tuple[str, ...]) -> DataFrame:
        """Rewrite every file of the selected partitions into one file per partition whose rows follow a Z-order
        curve of ``cols`` (one ``OPTIMIZE`` commit, ``dataChange=false``); returns the path and the metrics.

        Raises:
            TypeError: a column that is not a string (delta-spark's message).
            OptionError: an unknown column or a partition column.
        """
        names: Any = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        for c in names:
            if type(c) is not str:
                raise TypeError(f"Z-order column must be str. Found {c} with type {type(c)}")
        return self._execute(tuple(names))

    def _execute(self, zorder_by: tuple[str, ...]) -> DataFrame:
        from sparkonce.delta.ops.optimize import DEFAULT_TARGET_FILE_SIZE, compact
        from sparkonce.options import get_bytes

        raw = self._spark.conf.get(MAX_FILE_SIZE_CONF, None)
        size = get_bytes({MAX_FILE_SIZE_CONF: raw} if raw else {}, MAX_FILE_SIZE_CONF, DEFAULT_TARGET_FILE_SIZE)
        assert size is not None
        result = compact(self._spark, self._path, where=self._where, target_file_size=size, zorder_by=zorder_by)
        m = result.metrics
        added = (m.get("minFileSize"), m.get("maxFileSize"), _avg(result.bytes_added, result.files_added))
        removed_avg = _avg(result.bytes_removed, result.files_removed)
        rewritten = (result.files_removed, result.bytes_removed)
        # Z-order's "all" strategy, as Delta's: every file of a selected partition is merged into that partition's
        # one output cube; a compaction has no zOrderStats
        zorder_stats = (
            ("all", (0, 0), rewritten, 0, rewritten, result.partitions_optimized, None) if zorder_by else None
        )
        metrics = (
            result.files_added,
            result.files_removed,
            (*added, result.files_added, result.bytes_added),
            (None, None, removed_avg, result.files_removed, result.bytes_removed),
            result.partitions_optimized,
            zorder_stats,
            1 if result.files_added else 0,
            result.considered_files,
            result.considered_files - result.files_removed,
        )
        return self._spark.createDataFrame([(_uri(self._path), metrics)], COMPACTION_SCHEMA)


def _check_str(value: Any, name: str) -> None:
    """delta-spark's ``_verify_type_str``.

    Raises:
        ValueError: ``value`` is not a string (delta-spark's message).
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} needs to be a string but got '{type(value)}'.")


def _condition(condition: Any, argname: str = "'condition'") -> str | Column | None:
    """A condition as delta-spark takes it: None, a SQL string or a Column.

    Raises:
        TypeError: anything else (delta-spark's message).
    """
    from pyspark.sql import Column

    if condition is None or isinstance(condition, str | Column):
        return condition
    raise TypeError(
        f"{argname} must be a Spark SQL Column or a string (expression in SQL syntax), found to be of type "
        f"{type(condition)}"
    )


def _mapping(mapping: Any, argname: str) -> dict[str, str | Column]:
    """``set`` / ``values`` as delta-spark takes them: a dict of column name -> SQL string or Column.

    Raises:
        ValueError: None. TypeError: not a dict, a key not a string, or a value neither a string nor a Column.
    """
    from pyspark.sql import Column

    if mapping is None:
        raise ValueError(f"{argname} cannot be None")
    if type(mapping) is not dict:
        raise TypeError(f"{argname} must be a dict, found to be {type(mapping)}")
    for column, value in mapping.items():
        if type(column) is not str:
            raise TypeError(
                f"Keys of dict in {argname} must contain only strings with column names, found '{column}' of type "
                f"'{type(column)}"
            )
        if not isinstance(value, str | Column):
            raise TypeError(
                f"Values of dict in {argname} must contain only Spark SQL Columns or strings (expressions in SQL "
                f"syntax) as values, found '{value}' of type '{type(value)}'"
            )
    return dict(mapping)


class DeltaTableBuilder:
    """How to create or replace a Delta table (delta-spark's ``DeltaTableBuilder``). Runs on the driver."""

    def __init__(self, spark: SparkSession, mode: CreateMode) -> None:
        self._spark = spark
        self._mode = mode
        self._name: str | None = None
        self._location: str | None = None
        self._fields: list[StructField] = []
        self._partitioned_by: tuple[str, ...] = ()
        self._properties: dict[str, str] = {}
        self._unsupported: list[str] = []
        self._comment: str | None = None
        self._cluster_by: tuple[str, ...] = ()

    @staticmethod
    def _raise_type_error(message: str, objects: Iterable[Any]) -> NoReturn:
        raise TypeError(message + "".join(f" Found {obj} with type {type(obj)}" for obj in objects))

    def tableName(self, identifier: str) -> DeltaTableBuilder:
        """The table's name, ``[database.]table``."""
        if type(identifier) is not str:
            self._raise_type_error("Identifier must be str.", [identifier])
        self._name = identifier
        return self

    def location(self, location: str) -> DeltaTableBuilder:
        """Where the table's files are (a path or an object-store URI)."""
        if type(location) is not str:
            self._raise_type_error("Location must be str.", [location])
        self._location = location
        return self

    def comment(self, comment: str) -> DeltaTableBuilder:
        """The table's comment (``metaData.description``, ``DESCRIBE DETAIL``'s ``description``)."""
        if type(comment) is not str:
            self._raise_type_error("Table comment must be str.", [comment])
        self._comment = comment
        return self

    def addColumn(
        self,
        colName: str,
        dataType: str | DataType,
        nullable: bool = True,
        generatedAlwaysAs: str | IdentityGenerator | None = None,
        generatedByDefaultAs: IdentityGenerator | None = None,
        comment: str | None = None,
    ) -> DeltaTableBuilder:
        """One column: its name, a type (DDL text such as ``"INT"`` or a ``DataType``), nullability, an identity
        (``generatedAlwaysAs`` / ``generatedByDefaultAs`` an
        :class:`~sparkonce.delta.table.identity.IdentityGenerator`), comment. Checked as delta-spark checks it, in its
        order.

        Raises:
            TypeError: an argument of the wrong type. ValueError: both generations, or an identity step of 0.
            ParseException: a type Spark cannot parse (PySpark's, from Spark's parser).
            UnsupportedFeatureError: an identity column that is not BIGINT (also PySpark's
                ``UnsupportedOperationException``, as delta-spark raises it).
        """
        from pyspark.sql.types import DataType, LongType, StructField, _parse_datatype_string

        if type(colName) is not str:
            self._raise_type_error("Column name must be str.", [colName])
        if type(dataType) is not str and not isinstance(dataType, DataType):
            self._raise_type_error("Column data type must be str or DataType.", [dataType])
        if type(nullable) is not bool:
            self._raise_type_error("Column nullable must be bool.", [nullable])
        identity: dict[str, Any] = {}
        generation: str | None = None
        if generatedAlwaysAs is not None and generatedByDefaultAs is not None:
            raise ValueError(
                "generatedByDefaultAs and generatedAlwaysAs cannot both be set.",
                [generatedByDefaultAs, generatedAlwaysAs],
            )
        if isinstance(generatedAlwaysAs, IdentityGenerator):
            identity = column_metadata(generatedAlwaysAs.start, generatedAlwaysAs.step, allow_explicit_insert=False)
        elif generatedAlwaysAs is not None:
            if type(generatedAlwaysAs) is not str:
                self._raise_type_error(
                    "Generated always as expression must be str or IdentityGenerator.", [generatedAlwaysAs]
                )
            generation = generatedAlwaysAs
        elif generatedByDefaultAs is not None:
            if not isinstance(generatedByDefaultAs, IdentityGenerator):
                self._raise_type_error(
                    "Generated by default expression must be IdentityGenerator.", [generatedByDefaultAs]
                )
            identity = column_metadata(
                generatedByDefaultAs.start, generatedByDefaultAs.step, allow_explicit_insert=True
            )
        if comment is not None and type(comment) is not str:
            self._raise_type_error("Column comment must be str.", [comment])
        parsed = _parse_datatype_string(dataType) if isinstance(dataType, str) else dataType
        if identity and not isinstance(parsed, LongType):  # delta-spark's column builder refuses it at once
            raise unsupported_operation_error(
                "DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE",
                f"DataType {parsed.typeName()} is not supported for IDENTITY columns.",
            )
        metadata: dict[str, Any] = {**identity, **({"comment": comment} if comment else {})}
        if generation is not None:
            metadata["delta.generationExpression"] = generation
        self._fields.append(StructField(colName, parsed, nullable, metadata))
        return self

    def addColumns(self, cols: StructType | list[StructField]) -> DeltaTableBuilder:
        """Columns from an existing schema (a ``StructType`` or a list of ``StructField``)."""
        from pyspark.sql.types import StructField, StructType

        if isinstance(cols, list):
            for col in cols:
                if type(col) is not StructField:
                    self._raise_type_error("Column in existing schema must be StructField.", [col])
            cols = StructType(cols)
        if type(cols) is not StructType:
            self._raise_type_error("Schema must be StructType or a list of StructField.", [cols])
        self._fields.extend(cols.fields)
        return self

    def partitionedBy(self, *cols: str | list[str] | tuple[str, ...]) -> DeltaTableBuilder:
        """The partition columns."""
        names: Iterable[Any] = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        for c in names:
            if type(c) is not str:
                self._raise_type_error("Partitioning column must be str.", [c])
        self._partitioned_by = tuple(names)
        return self

    def clusterBy(self, *cols: str | list[str] | tuple[str, ...]) -> DeltaTableBuilder:
        """The clustering columns (liquid clustering, :mod:`sparkonce.delta.table.clustering`)."""
        names: Iterable[Any] = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        for c in names:
            if type(c) is not str:
                self._raise_type_error("Clustering column must be str.", [c])
        self._cluster_by = tuple(names)
        return self

    def property(self, key: str, value: str) -> DeltaTableBuilder:
        """A table property (``delta.*`` properties are checked at :meth:`execute`)."""
        if type(key) is not str or type(value) is not str:
            self._raise_type_error("Key and value of property must be string.", [key, value])
        self._properties[key] = value
        return self

    def execute(self) -> DeltaTable:
        """Create (or replace) the table; its :class:`~sparkonce.delta.tables.DeltaTable`.

        Raises:
            OptionError: neither a name nor a location was given; a bad ``delta.*`` property.
            UnsupportedFeatureError: a generation expression sparkonce cannot evaluate.
            SqlError: the name is taken, a table to replace is missing, or the location holds another table.
        """
        from pyspark.sql.types import StructType

        from sparkonce.sqltext.grammar import parse_name

        if self._unsupported:
            raise UnsupportedFeatureError(
                f"DeltaTable.{self._mode}: {', '.join(self._unsupported)} is not supported by sparkonce; nothing was "
                "written"
            )
        if self._name is None and self._location is None:
            raise OptionError(
                "tableName", None, "Table name or location has to be specified (tableName(...) or location(...))"
            )
        import sparkonce

        sparkonce.register(self._spark)
        created = create_table(
            self._spark,
            CreateRequest(
                mode=self._mode,
                name=parse_name(self._name) if self._name is not None else None,
                location=self._location,
                schema=StructType(self._fields) if self._fields else None,
                partitioned_by=self._partitioned_by,
                properties=self._properties,
                comment=self._comment,
                shown=self._name or f"delta.`{self._location}`",
                cluster_by=self._cluster_by,
            ),
        )
        return DeltaTable(self._spark, created.location)


def _builder(spark: SparkSession | None, mode: CreateMode) -> DeltaTableBuilder:
    from pyspark.sql import SparkSession

    if spark is None:
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise OptionError("sparkSession", None, "no active SparkSession: pass one")
    elif not isinstance(spark, SparkSession):
        raise TypeError(f"sparkSession must be a SparkSession, not {type(spark).__name__}")
    return DeltaTableBuilder(spark, mode)


def _avg(total: int, count: int) -> float | None:
    return total / count if count else None


def _uri(path: str) -> str:
    if "://" in path:
        return path
    return "file:" + os.path.abspath(path)


__all__ = ["DeltaMergeBuilder", "DeltaOptimizeBuilder", "DeltaTable", "DeltaTableBuilder", "dml_txn"]
