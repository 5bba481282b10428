"""The delta-spark oracle: Delta Lake's own JVM connector, in a process of its own, answering the test suite.

Run by the oracle virtualenv's interpreter (``.venv-delta/bin/python tests/oracle/runner.py``, made by
``scripts/setup_delta_oracle.sh``: PySpark 4.2 and delta-spark's jars), never imported by sparkonce. It starts one
SparkSession with Delta's SQL extension and catalog and keeps it for the whole pytest session (one JVM start per
pytest-xdist worker). Requests come one JSON object a line on stdin, answers go one JSON object a line on the
original stdout (``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``); everything else the process
or its JVM prints goes to stderr. Operations:

- ``sql``: ``statement`` (and ``conf``: session settings for that statement only; ``hold``: a flag path, see
  below); the result's rows.
- ``read``: the rows of the Delta table at ``path`` (``options``: the reader's, e.g. ``versionAsOf``,
  ``readChangeFeed``).
- ``append``: write ``rows`` (JSON objects) of ``schema`` (a DDL string) to ``path`` with ``options`` (e.g.
  ``txnAppId``/``txnVersion``), mode append.
- ``stream``: an ``availableNow`` stream from the Delta table at ``path`` (``options``) into the Delta table at
  ``target`` (``sink_options``) with ``checkpoint``; returns the last progress's ``numInputRows`` sum.
- ``fan_out``: the articles' ``foreachBatch`` into several tables with ``txnAppId``/``txnVersion``
  (:func:`run_fan_out`); returns the query's error text or None.
- ``replay``: the articles' time-travel replay (:func:`replay`).
- ``history_sql``: ``statement`` over the temporary view ``oracle_history``, delta-spark's
  ``DeltaTable.forPath(path).history()`` (its SQL has no ``FROM (DESCRIBE HISTORY t)``); the result's rows.

SQL statements may call ``oracle_pause(flag, column)`` (:func:`pause`): a statement stops there, after delta-spark
started its transaction, until the test lets it go; that is how a test makes delta-spark lose a race. A statement
that runs no user code (OPTIMIZE) is held instead (``sql`` with ``hold``: :func:`run_held`): its Spark jobs wait
behind one that takes every task slot, until the test lets it go.

Runs on its own driver (the oracle's JVM); the test process only talks to it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PAUSE_TIMEOUT_S = 300.0
HOLD_GROUP = "oracle-hold"


def to_json_value(value: Any) -> Any:
    """A value Spark returned (``Row``, list, dict, date, decimal, bytes) as plain JSON, the same on both engines.

    Imported by the test process too (tests/fixtures_delta_oracle.py), so the two sides' rows compare as equals.
    """
    if hasattr(value, "asDict"):
        return {key: to_json_value(item) for key, item in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(item) for item in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return value


def wait_for_go(flag: str) -> None:
    """Poll until ``<flag>.go`` exists, at most :data:`PAUSE_TIMEOUT_S` (any process: the oracle's driver or its
    Python workers)."""
    go = flag + ".go"
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {PAUSE_TIMEOUT_S:.0f} s")
        time.sleep(0.02)


def pause(flag: str, _value: Any) -> bool:
    """``oracle_pause(flag, column)``, true for every row: the first call makes ``<flag>.waiting`` and every call
    waits until ``<flag>.go`` exists (polling, at most :data:`PAUSE_TIMEOUT_S`). Runs in the oracle's Python
    workers, on the rows of a statement whose transaction delta-spark has started (its snapshot is read)."""
    if os.path.exists(flag + ".go"):
        return True
    with open(flag + ".waiting", "a"):
        pass
    wait_for_go(flag)
    return True


def run_held(spark: Any, flag: str, run: Callable[[], Any]) -> Any:
    """``run()`` (a statement) with its Spark jobs held until ``<flag>.go`` exists: a job of the group
    :data:`HOLD_GROUP` first takes every task slot (its tasks wait in the Python workers), then ``run`` starts in a
    thread; when a job of its own is waiting for a slot, ``<flag>.waiting`` is made. A statement whose first job
    comes after it started its transaction (delta-spark's OPTIMIZE on a table whose snapshot is cached: the test
    reads the table first) is thus stopped between its read and its commit. Runs on the oracle's driver."""
    sc = spark.sparkContext
    slots = sc.defaultParallelism
    held = flag + ".held"

    def occupy(index: int, rows: Any) -> Any:
        with open(f"{held}.{index}", "a"):
            pass
        wait_for_go(flag)
        return iter([])

    answers: dict[str, Any] = {}

    def in_thread(name: str, work: Callable[[], Any]) -> threading.Thread:
        def target() -> None:
            try:
                answers[name] = work()
            except BaseException as err:  # handed to the request's thread
                answers[name + " error"] = err

        thread = threading.Thread(target=target, name=f"oracle-{name}")
        thread.start()
        return thread

    def hold() -> None:
        sc.setJobGroup(HOLD_GROUP, "slots held for a race", interruptOnCancel=False)
        sc.parallelize(range(slots), slots).mapPartitionsWithIndex(occupy).count()

    holder = in_thread("hold", hold)
    try:
        deadline = time.monotonic() + PAUSE_TIMEOUT_S
        while sum(os.path.exists(f"{held}.{i}") for i in range(slots)) < slots:
            if not holder.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the holding job did not take the {slots} task slots: {answers}")
            time.sleep(0.02)
        statement = in_thread("statement", run)
        tracker = sc.statusTracker()
        while not set(tracker.getActiveJobsIds()) - set(tracker.getJobIdsForGroup(HOLD_GROUP)):
            if not statement.is_alive():
                raise RuntimeError(f"the held statement ended without a Spark job: {answers}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the held statement started no Spark job within {PAUSE_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        with open(flag + ".waiting", "a"):
            pass
        statement.join(timeout=2 * PAUSE_TIMEOUT_S)
    finally:
        holder.join(timeout=2 * PAUSE_TIMEOUT_S)
    if "statement error" in answers:
        raise answers["statement error"]
    if "hold error" in answers:
        raise answers["hold error"]
    return answers["statement"]


def fan_out(targets: list[str], *, app_id: str, fail_flag: str | None = None) -> Callable[[Any, int], None]:
    """The articles' ``foreachBatch`` function: each micro-batch appended to every Delta table of ``targets`` with
    ``txnAppId`` = ``app_id`` and ``txnVersion`` = the batch id (Delta's idempotent writes), in order. When the
    file ``fail_flag`` exists and holds the batch id, it is removed and the function fails after the first table (a
    crash between two tables of one batch). The same function on both engines (runs on each one's driver)."""

    def write(batch: Any, batch_id: int) -> None:
        for index, target in enumerate(targets):
            writer = batch.write.format("delta").mode("append")
            writer.option("txnAppId", app_id).option("txnVersion", str(batch_id)).save(target)
            if index == 0 and fail_flag and os.path.exists(fail_flag):
                with open(fail_flag) as handle:
                    failing = handle.read().strip() == str(batch_id)
                if failing:
                    os.remove(fail_flag)
                    raise RuntimeError(f"injected failure after {target} in batch {batch_id}")

    return write


def run_fan_out(
    spark: Any, *, source: str, targets: list[str], checkpoint: str, app_id: str, fail_flag: str | None = None
) -> str | None:
    """An ``availableNow`` stream from the Delta table ``source`` (one file a batch) through :func:`fan_out`; the
    query's error text, None when it ended normally. The same code on both engines."""
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(source)
        .writeStream.foreachBatch(fan_out(targets, app_id=app_id, fail_flag=fail_flag))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception as err:  # the query's failure is the answer
        return f"{type(err).__name__}: {err}"
    return None


def replay(spark: Any, *, source: str, options: dict[str, str], select: list[str], target: str) -> None:
    """The articles' replay: read ``source`` as of a version or timestamp (``options``), transform (``select``),
    overwrite ``target``. The same code on both engines."""
    frame = spark.read.format("delta").options(**options).load(source).selectExpr(*select)
    frame.write.format("delta").mode("overwrite").save(target)


def _session() -> Any:
    from pyspark.sql import SparkSession

    jars = os.environ["SPARKONCE_ORACLE_JARS"]
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("delta-oracle")
        .config("spark.jars", ",".join(os.path.join(jars, name) for name in sorted(os.listdir(jars))))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Delta rebuilds a snapshot's state (checkpoints, DESCRIBE DETAIL) in 50 partitions by default: a minute
        # for a 5-commit table on a busy 2-core machine.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # VACUUM lists the table's folders in this many tasks (Spark's default: 10,000): ~37 s for a 2-file table.
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", os.environ["SPARKONCE_ORACLE_WAREHOUSE"])
        .config("spark.driver.extraJavaOptions", os.environ.get("SPARKONCE_ORACLE_JAVA_OPTIONS", ""))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.udf.register("oracle_pause", pause, "boolean")
    return spark


def _rows(frame: Any) -> dict[str, Any]:
    return {"columns": frame.columns, "rows": [to_json_value(row) for row in frame.collect()]}


def _handle(spark: Any, request: dict[str, Any]) -> Any:
    op = request["op"]
    if op == "sql":
        conf = request.get("conf") or {}
        for key, value in conf.items():
            spark.conf.set(key, value)
        try:
            if request.get("hold"):
                return run_held(spark, request["hold"], lambda: _rows(spark.sql(request["statement"])))
            return _rows(spark.sql(request["statement"]))
        finally:
            for key in conf:
                spark.conf.unset(key)
    if op == "read":
        return _rows(spark.read.format("delta").options(**(request.get("options") or {})).load(request["path"]))
    if op == "append":
        frame = spark.createDataFrame(request["rows"], request["schema"])
        frame.write.format("delta").mode("append").options(**(request.get("options") or {})).save(request["path"])
        return None
    if op == "stream":
        query = (
            spark.readStream.format("delta")
            .options(**(request.get("options") or {}))
            .load(request["path"])
            .writeStream.format("delta")
            .options(**(request.get("sink_options") or {}))
            .option("checkpointLocation", request["checkpoint"])
            .trigger(availableNow=True)
            .start(request["target"])
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return sum(int(p["numInputRows"]) for p in query.recentProgress)
    if op == "fan_out":
        return run_fan_out(
            spark,
            source=request["source"],
            targets=request["targets"],
            checkpoint=request["checkpoint"],
            app_id=request["app_id"],
            fail_flag=request.get("fail_flag"),
        )
    if op == "history_sql":
        from delta.tables import DeltaTable

        DeltaTable.forPath(spark, request["path"]).history().createOrReplaceTempView("oracle_history")
        return _rows(spark.sql(request["statement"]))
    if op == "replay":
        replay(
            spark,
            source=request["source"],
            options=request["options"],
            select=request["select"],
            target=request["target"],
        )
        return None
    raise ValueError(f"unknown oracle operation {op!r}")


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM and py4j print to fd 1: keep the answer channel for answers
    spark = _session()
    answers.write(json.dumps({"ok": True, "result": {"spark": spark.version}}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        started = time.monotonic()
        try:
            answer = {"ok": True, "result": _handle(spark, request)}
        except Exception as err:  # every failure goes back to the test that asked, with Delta's message
            answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        took = time.monotonic() - started
        print(
            f"oracle: {request['op']} {request.get('statement') or request.get('path')} {took:.1f} s", file=sys.stderr
        )
        answers.write(json.dumps(answer) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
