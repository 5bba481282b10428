"""The work of ``bench_vs_delta_spark.py``, one function per operation, and delta-spark's side of it as a process.

Imported by ``bench_vs_delta_spark.py`` (sparkonce's side: the same functions on sparkonce's session, in the
benchmark's process) and run by the oracle virtualenv's interpreter as delta-spark's side
(``.venv-delta/bin/python benchmarks/delta_spark_worker.py``, made by ``scripts/setup_delta_oracle.sh``: PySpark
4.2 and delta-spark's jars): one SparkSession with Delta's SQL extension and catalog, configured as
:func:`sparkonce.spark.local_session` configures sparkonce's (``local[2]``, 2 shuffle partitions, 2 GB driver, UI
off; and Delta's snapshot state in 2 partitions, not 50). Requests come one JSON object a line on stdin, answers go
one JSON object a line on the original stdout:
``{"ok": true, "seconds": ..., "result": ...}`` with the seconds the operation took inside this process (so the
pipe's round trip is not counted), or ``{"ok": false, "error": "..."}``. ``--start-only`` builds the session, runs
one trivial query, prints ``ready`` and exits (the cold-start figure).

The pipeline benchmark's requests (``bench_pipeline_vs_delta_spark.py``) are those of ``delta_spark_pipeline.py``.

Imports only pyspark (never sparkonce: the oracle virtualenv does not have it). Runs on its own driver.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from delta_spark_pipeline import OPERATIONS as PIPELINE_OPERATIONS

JARS_ENV = "SPARKONCE_ORACLE_JARS"
EXTRA_JARS_ENV = "SPARKONCE_ORACLE_EXTRA_JARS"
"""More jars for the session, ``os.pathsep``-separated: Spark's Kafka connector for the pipeline benchmark."""


def write(spark: Any, *, rows: int, exprs: list[str], files: int, path: str) -> int:
    """Batch write of ``rows`` rows (``range`` projected by ``exprs``) as ``files`` contiguous ``id`` ranges."""
    frame = spark.range(rows).selectExpr(*exprs).repartitionByRange(files, "id").sortWithinPartitions("id")
    frame.write.format("delta").save(path)
    return rows


def read(spark: Any, *, path: str, where: str | None, select: list[str]) -> list[Any]:
    """A batch query of the Delta table at ``path``: optional filter, then ``select``; the collected rows."""
    frame = spark.read.format("delta").load(path)
    if where:
        frame = frame.where(where)
    return [list(row) for row in frame.selectExpr(*select).collect()]


def sql(spark: Any, *, statement: str) -> int:
    """A SQL statement (``MERGE INTO``); the number of rows it answered."""
    return len(spark.sql(statement).collect())


def stream(spark: Any, *, source: str, schema: str, files_per_trigger: int, target: str, checkpoint: str) -> int:
    """An ``availableNow`` stream from the Parquet folder ``source`` into the Delta table ``target``; rows written."""
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(source)
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(int(progress["numInputRows"]) for progress in query.recentProgress)


def source_stream(spark: Any, *, path: str, files_per_trigger: int, checkpoint: str) -> int:
    """An ``availableNow`` stream from the Delta table at ``path`` (the engine's Delta source) into Spark's ``noop``
    sink; rows read."""
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", files_per_trigger)
        .load(path)
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(int(progress["numInputRows"]) for progress in query.recentProgress)


OPERATIONS = {
    "write": write,
    "read": read,
    "sql": sql,
    "stream": stream,
    "source_stream": source_stream,
    "noop": lambda spark: None,
    **PIPELINE_OPERATIONS,
}


def run(spark: Any, request: dict[str, Any]) -> tuple[float, Any]:
    """One request (``op`` and the operation's keyword arguments): its seconds and its result."""
    options = {key: value for key, value in request.items() if key != "op"}
    started = time.perf_counter()
    result = OPERATIONS[request["op"]](spark, **options)
    return time.perf_counter() - started, result


def delta_session() -> Any:
    """delta-spark's session: Delta's extension and catalog, the jars of ``$SPARKONCE_ORACLE_JARS`` and
    ``$SPARKONCE_ORACLE_EXTRA_JARS``."""
    from pyspark.sql import SparkSession

    jars = os.environ[JARS_ENV]
    paths = [os.path.join(jars, name) for name in sorted(os.listdir(jars))]
    paths += [path for path in os.environ.get(EXTRA_JARS_ENV, "").split(os.pathsep) if path]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-delta-spark")
        .config("spark.jars", ",".join(paths))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        # Delta rebuilds a snapshot's state in 50 partitions by default: tens of seconds per new table on 2 cores
        # (tests/oracle/runner.py sets the same); 2 matches the 2 shuffle partitions of both sessions.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM and py4j print to fd 1: keep the answer channel for answers
    spark = delta_session()
    if "--start-only" in sys.argv:
        spark.range(1).collect()
        answers.write("ready\n")
        spark.stop()
        return
    answers.write(json.dumps({"ok": True, "result": {"spark": spark.version}}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            seconds, result = run(spark, json.loads(line))
            answer = {"ok": True, "seconds": seconds, "result": result}
        except Exception as err:  # the benchmark shows delta-spark's message
            answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        answers.write(json.dumps(answer, default=str) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
