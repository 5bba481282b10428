"""Creating a local SparkSession that can run sparkonce's Python data sources."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(
    *,
    app_name: str = "sparkonce",
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Build (or get) a SparkSession whose Python workers run this interpreter, with sparkonce registered.

    Python workers must import ``sparkonce``; from a virtualenv that only works when they run the driver's
    interpreter, so ``spark.pyspark.python`` and ``PYSPARK_PYTHON`` are set to ``sys.executable``.
    """
    from pyspark.sql import SparkSession

    import sparkonce
    from sparkonce.crash import ENV_PGID, ENV_POINT

    if os.environ.get(ENV_POINT):
        # Python workers inherit the JVM's environment, which inherits ours: tell them whom to kill.
        os.environ.setdefault(ENV_PGID, str(os.getpgrp()))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sparkonce.register(spark)
    return spark


__all__ = ["local_session"]
