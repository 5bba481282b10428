"""sparkonce: exactly-once streaming for PySpark and Delta Lake, without the JVM connectors.

``sparkonce.register(spark)`` registers the Python data sources with a SparkSession:

* ``delta`` (unless the Delta JVM connector already provides it) and ``sparkonce.delta``: Delta Lake tables for
  batch and streaming reads and writes, with exactly-once streaming commits (one Delta commit per batch
  carrying ``txn(appId = query id, version = batch id)``);
* ``sparkonce.kafka``: a Kafka source faithful to Spark's own.

The rest of the public API is re-exported here (imported on first use, so ``import sparkonce`` stays cheap):
:class:`DeltaTable` (delta-spark's API),
:class:`FanOutWriter` and :class:`PostgresSink` (exactly-once ``foreachBatch`` sinks), :func:`merge_latest`
(upsert by key), :func:`history` (``DESCRIBE HISTORY``), :func:`vacuum`, :func:`diagnose` (the doctor), and
the error tree, the commit conflicts also under delta-spark's names (``ConcurrentAppendException``, ...;
:mod:`sparkonce.delta.exceptions`).
"""

from __future__ import annotations

import functools
import importlib
import weakref
from typing import TYPE_CHECKING, Any

from sparkonce._version import __version__
from sparkonce.errors import (
    BrokerError,
    CheckpointError,
    CommitConflictError,
    CommitRetriesExceededError,
    ConcurrentAppendError,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadError,
    ConcurrentDeleteReadException,
    ConcurrentTransactionError,
    ConcurrentTransactionException,
    ConcurrentWriteError,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    DeltaLogError,
    MetadataChangedError,
    MetadataChangedException,
    MissingExtraError,
    OptionError,
    PipelineConfigError,
    ProtocolChangedError,
    ProtocolChangedException,
    SchemaMismatchError,
    SinkError,
    SourceOffsetError,
    SparkonceError,
    StorageError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkonce.delta.ops.merge import MergeResult, merge_latest
    from sparkonce.delta.ops.vacuum import VacuumResult, vacuum
    from sparkonce.delta.read.history import history
    from sparkonce.delta.table.identity import IdentityGenerator
    from sparkonce.delta.tables import DeltaTable
    from sparkonce.delta.txn.commit import BatchTxn
    from sparkonce.ops.doctor import DoctorReport, diagnose
    from sparkonce.sinks.fanout import FanOutResult, FanOutTarget, FanOutWriter
    from sparkonce.sinks.postgres import PostgresSink
    from sparkonce.storage import TableLocation, table_location

_LAZY = {
    "BatchTxn": "sparkonce.delta.txn.commit",
    "DeltaTable": "sparkonce.delta.tables",
    "DoctorReport": "sparkonce.ops.doctor",
    "FanOutResult": "sparkonce.sinks.fanout",
    "FanOutTarget": "sparkonce.sinks.fanout",
    "FanOutWriter": "sparkonce.sinks.fanout",
    "IdentityGenerator": "sparkonce.delta.table.identity",
    "MergeResult": "sparkonce.delta.ops.merge",
    "PostgresSink": "sparkonce.sinks.postgres",
    "TableLocation": "sparkonce.storage",
    "VacuumResult": "sparkonce.delta.ops.vacuum",
    "diagnose": "sparkonce.ops.doctor",
    "history": "sparkonce.delta.read.history",
    "merge_latest": "sparkonce.delta.ops.merge",
    "table_location": "sparkonce.storage",
    "vacuum": "sparkonce.delta.ops.vacuum",
}


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sparkonce' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register(spark: SparkSession) -> list[str]:
    """Register sparkonce's data sources with ``spark`` and return the format names now served by them.

    ``delta`` is registered only when the Delta JVM connector is not on the classpath, so code written for Delta
    keeps using the connector where it exists; ``sparkonce.delta`` and ``sparkonce.kafka`` always point here.
    With classic PySpark it lets ``partitionBy(...)`` and the ``error``/``ignore`` save modes reach the Delta sink
    (Spark refuses them for Python data sources otherwise; see :mod:`sparkonce.delta.patches`).
    It reads the session storage options, the Spark conf entries ``spark.sparkonce.storage.<NAME>``, now (set
    them before calling it; call it again after changing them): the Delta sources get them for every read and
    write under the explicit ``storage.<NAME>`` options, and so do the table locations this process parses
    (:func:`sparkonce.table_location`); the environment comes last.
    Without the Delta JVM connector it also makes ``spark.sql`` run Delta's statements (``DESCRIBE HISTORY``,
    ``MERGE INTO``, ``CREATE TABLE ... USING delta``, ...) and read Delta tables by path (``delta.`/path```) and by
    name (:mod:`sparkonce.sql`, docs/sql.md).
    It also turns on ``spark.sql.python.filterPushdown.enabled`` (the Delta reader prunes files by partition
    filters and needs Spark to pass them), except inside a Spark Declarative Pipeline's definitions, where session
    confs cannot be set: there it belongs in the pipeline spec's ``configuration`` (``docs/sdp.md``).
    """
    from pyspark.sql.datasource import DataSource

    from sparkonce.delta.source import DeltaDataSource, SparkonceDeltaDataSource, with_session_storage
    from sparkonce.kafka.source import KafkaDataSource
    from sparkonce.pipeline.raw_ingest import RawFilesDataSource
    from sparkonce.storage import set_session_storage_options, storage_options_from_conf

    _enable_filter_pushdown(spark)
    storage_options = storage_options_from_conf(spark.conf.getAll)
    set_session_storage_options(storage_options)
    deltas: list[type[DeltaDataSource]] = [SparkonceDeltaDataSource]
    if not _jvm_delta_available(spark):
        deltas.insert(0, DeltaDataSource)
    sources: list[type[DataSource]] = [with_session_storage(d, storage_options) for d in deltas]
    sources.append(KafkaDataSource)
    sources.append(RawFilesDataSource)
    names = []
    for source in sources:
        _register_source(spark, source)
        names.append(source.name())
    from sparkonce.delta.read.history import DeltaHistoryDataSource

    _register_source(spark, DeltaHistoryDataSource)  # DESCRIBE HISTORY, read by executors
    if getattr(spark, "_jvm", None) is not None:
        from sparkonce.delta import patches

        patches.install(n for n in names if n in ("delta", "sparkonce.delta"))
        _REGISTERED[spark] = (*names, DeltaHistoryDataSource.name())
        _register_new_sessions()
    else:  # Spark Connect: the session's dynamic partition overwrite mode reaches the writes as an option
        from sparkonce.delta import patches

        patches.install_connect(n for n in names if n in ("delta", "sparkonce.delta"))
    if DeltaDataSource in deltas:  # with Delta's JVM connector, its SQL extension answers Delta's statements
        from sparkonce.sql import install

        install(spark)
    return names


_REGISTERED: weakref.WeakKeyDictionary[SparkSession, tuple[str, ...]] = weakref.WeakKeyDictionary()
"""The classic sessions :func:`register` ran on, with the names of the sources it registered: their
``newSession()`` children are registered too."""
_NEW_SESSIONS_WRAPPED = False
SPARKONCE_CONF_PREFIX = "spark.sparkonce."


def _register_new_sessions() -> None:
    """Make ``newSession()`` of a registered session return a registered session (once per process).

    Spark's ``newSession()`` shares the parent's SparkContext and external catalog, not its Python data sources: the
    child's session state has a data source manager of its own, empty, so the catalog's entry of a sparkonce table
    (``USING delta``) and every write failed with ``DATA_SOURCE_NOT_FOUND``; registering them again through the
    child's ``dataSource`` does not reach that manager (Spark 4.3 answers ``DATA_SOURCE_ALREADY_EXISTS``). So the
    child's manager gets the parent's sources, then the parent's ``spark.sparkonce.*`` settings (the warehouse, the
    storage options: sparkonce reads them per process) and :func:`register` (its ``spark.sql``, the mirror of the
    tables in its session catalog): it sees the same tables by name, through the catalog API, views and SQL.
    """
    global _NEW_SESSIONS_WRAPPED
    if _NEW_SESSIONS_WRAPPED:
        return
    from pyspark.sql import SparkSession

    original = SparkSession.newSession

    @functools.wraps(original)
    def newSession(self: SparkSession) -> SparkSession:
        child = original(self)
        sources = _REGISTERED.get(self)
        if sources is not None:
            parent = self._jsparkSession.sessionState().dataSourceManager()
            own = child._jsparkSession.sessionState().dataSourceManager()
            for name in sources:
                if parent.dataSourceExists(name) and not own.dataSourceExists(name):
                    own.registerDataSource(name, parent.lookupDataSource(name))
            for key, value in self.conf.getAll.items():
                if key.startswith(SPARKONCE_CONF_PREFIX):
                    child.conf.set(key, value)
            register(child)
        return child

    SparkSession.newSession = newSession  # type: ignore[method-assign]
    _NEW_SESSIONS_WRAPPED = True


def _register_source(spark: SparkSession, source: Any) -> None:
    """Register one data source. Through a session made by ``newSession()`` of a registered session Spark refuses
    them with ``DATA_SOURCE_ALREADY_EXISTS`` (its ``dataSource`` reaches the parent's registry); the wrapped
    ``newSession`` has copied the parent's, sparkonce's, into the session's own (:func:`_register_new_sessions`)."""
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(source)
    except AnalysisException as err:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(err):
            raise


FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_SDP_MUTATION = "SESSION_MUTATION_IN_DECLARATIVE_PIPELINE"


def _enable_filter_pushdown(spark: SparkSession) -> None:
    """Turn on partition-filter pushdown for Python sources, unless already on or the session forbids it (SDP)."""
    import logging

    from pyspark.errors import PySparkException

    if str(spark.conf.get(FILTER_PUSHDOWN_CONF, "false")).lower() == "true":
        return
    try:
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    except PySparkException as err:
        if not (err.getCondition() or "").startswith(_SDP_MUTATION):
            raise
        # Spark Declarative Pipelines load definitions with session mutations blocked. Reads stay correct;
        # they only read every file of a partitioned table instead of pruning by partition filters.
        logging.getLogger(__name__).warning(
            "sparkonce.register: inside a Spark Declarative Pipeline %s cannot be set; add it to the pipeline "
            "spec's configuration so Delta reads prune files by partition filters",
            FILTER_PUSHDOWN_CONF,
        )


def _jvm_delta_available(spark: SparkSession) -> bool:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM here to ask; the server has no Delta unless configured.
        return False
    try:
        jvm.java.lang.Class.forName("org.apache.spark.sql.delta.sources.DeltaDataSource")
    except Exception:
        return False
    return True


__all__ = [
    "BatchTxn",
    "DeltaTable",
    "BrokerError",
    "CheckpointError",
    "CommitConflictError",
    "DeltaLogError",
    "DoctorReport",
    "FanOutResult",
    "FanOutTarget",
    "FanOutWriter",
    "IdentityGenerator",
    "MergeResult",
    "MissingExtraError",
    "OptionError",
    "PipelineConfigError",
    "PostgresSink",
    "SchemaMismatchError",
    "SinkError",
    "SourceOffsetError",
    "SparkonceError",
    "StorageError",
    "TableLocation",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "VacuumResult",
    "__version__",
    "diagnose",
    "history",
    "merge_latest",
    "register",
    "table_location",
    "vacuum",
    "CommitRetriesExceededError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentTransactionError",
    "ConcurrentWriteError",
    "MetadataChangedError",
    "ProtocolChangedError",
    "VersionNotFoundError",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "DeltaConcurrentModificationException",
    "MetadataChangedException",
    "ProtocolChangedException",
]
