"""Driver program for cluster tests: write a Delta table through sparkonce on a cluster, read it back.

Usage: python -m tests.integration.drivers.cluster_delta MASTER TABLE [--rows N] [--executor-python PATH]

Connects to MASTER (the session probes the executors first), appends ids 0..N-1 in 4 partitions to TABLE, reads
the table back through sparkonce and prints one JSON line: the executors that answered the probe and the count
and distinct count read back.
"""

from __future__ import annotations

import argparse
import json
import os

from sparkonce.spark import local_session, probe_executors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("table")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--executor-python", default=None, help="Interpreter for the executors' Python workers.")
    args = parser.parse_args()

    extra = {}
    if args.executor_python:
        # PySpark ships Python functions to the interpreter named by the driver's PYSPARK_PYTHON.
        os.environ["PYSPARK_PYTHON"] = args.executor_python
        extra = {
            "spark.pyspark.python": args.executor_python,
            "spark.executorEnv.PYSPARK_PYTHON": args.executor_python,
            "spark.executorEnv.PYTHONPATH": "",
        }
    spark = local_session(app_name="cluster-delta", master=args.master, extra_conf=extra)
    probes = probe_executors(spark)
    # Executors registered with the driver (the driver itself is in the list too).
    tracker = spark.sparkContext._jsc.sc().statusTracker()  # type: ignore[union-attr]
    executors = len(tracker.getExecutorInfos()) - 1
    spark.range(args.rows).repartition(4).write.format("delta").mode("append").save(args.table)
    back = spark.read.format("delta").load(args.table)
    counts = back.selectExpr("count(*) AS n", "count(DISTINCT id) AS d").first()
    assert counts is not None
    result = {"executors": executors, "probes": len(probes), "count": counts["n"], "distinct": counts["d"]}
    print(json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
