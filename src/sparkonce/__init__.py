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
the error tree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sparkonce.errors import (
    BrokerError,
    CheckpointError,
    CommitConflictError,
    DeltaLogError,
    OptionError,
    PipelineConfigError,
    SchemaMismatchError,
    SinkError,
    SourceOffsetError,
    SparkonceError,
    StorageError,
    TableNotFoundError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkonce.delta.commit import BatchTxn
    from sparkonce.delta.history import history
    from sparkonce.delta.merge import MergeResult, merge_latest
    from sparkonce.delta.tables import DeltaTable
    from sparkonce.delta.vacuum import VacuumResult, vacuum
    from sparkonce.ops.doctor import DoctorReport, diagnose
    from sparkonce.sinks.fanout import FanOutResult, FanOutTarget, FanOutWriter
    from sparkonce.sinks.postgres import PostgresSink
    from sparkonce.storage import TableLocation, table_location

_LAZY = {
    "BatchTxn": "sparkonce.delta.commit",
    "DeltaTable": "sparkonce.delta.tables",
    "DoctorReport": "sparkonce.ops.doctor",
    "FanOutResult": "sparkonce.sinks.fanout",
    "FanOutTarget": "sparkonce.sinks.fanout",
    "FanOutWriter": "sparkonce.sinks.fanout",
    "MergeResult": "sparkonce.delta.merge",
    "PostgresSink": "sparkonce.sinks.postgres",
    "TableLocation": "sparkonce.storage",
    "VacuumResult": "sparkonce.delta.vacuum",
    "diagnose": "sparkonce.ops.doctor",
    "history": "sparkonce.delta.history",
    "merge_latest": "sparkonce.delta.merge",
    "table_location": "sparkonce.storage",
    "vacuum": "sparkonce.delta.vacuum",
}


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sparkonce' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"


def register(spark: SparkSession) -> list[str]:
    """Register sparkonce's data sources with ``spark`` and return the format names now served by them.

    ``delta`` is registered only when the Delta JVM connector is not on the classpath, so code written for Delta
    keeps using the connector where it exists; ``sparkonce.delta`` and ``sparkonce.kafka`` always point here.
    With classic PySpark it lets ``partitionBy(...)`` and the ``error``/``ignore`` save modes reach the Delta sink
    (Spark refuses them for Python data sources otherwise; see :mod:`sparkonce.delta._compat`).
    It also turns on ``spark.sql.python.filterPushdown.enabled`` (the Delta reader prunes files by partition
    filters and needs Spark to pass them).
    """
    from sparkonce.delta.source import DeltaDataSource, SparkonceDeltaDataSource
    from sparkonce.kafka.source import KafkaDataSource

    # The Delta reader prunes files with partition filters; Spark hands Python sources filters only with this on.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    names = []
    if not _jvm_delta_available(spark):
        spark.dataSource.register(DeltaDataSource)
        names.append(DeltaDataSource.name())
    for source in (SparkonceDeltaDataSource, KafkaDataSource):
        spark.dataSource.register(source)
        names.append(source.name())
    if getattr(spark, "_jvm", None) is not None:
        from sparkonce.delta import _compat

        _compat.install(n for n in names if n in ("delta", "sparkonce.delta"))
    return names


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
    "MergeResult",
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
]
