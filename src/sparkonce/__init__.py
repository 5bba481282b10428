"""sparkonce: exactly-once streaming for PySpark and Delta Lake, without the JVM connectors.

``sparkonce.register(spark)`` registers the Python data sources with a SparkSession:

* ``delta`` (unless the Delta JVM connector already provides it) and ``sparkonce.delta``: Delta Lake tables for
  batch and streaming reads and writes, with exactly-once streaming commits (one Delta commit per batch
  carrying ``txn(appId = query id, version = batch id)``);
* ``sparkonce.kafka``: a Kafka source faithful to Spark's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    TableNotFoundError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    "BrokerError",
    "CheckpointError",
    "CommitConflictError",
    "DeltaLogError",
    "OptionError",
    "PipelineConfigError",
    "SchemaMismatchError",
    "SinkError",
    "SourceOffsetError",
    "SparkonceError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "__version__",
    "register",
]
