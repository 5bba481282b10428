"""The quick-start class archive: HotSpot's class data sharing (CDS) for short-lived drivers.

A Spark driver loads ~13,000 classes from its jars before its first batch, and parses and verifies each. A dynamic
CDS archive holds the classes of a warmed-up driver already parsed and verified; a JVM started with it maps them
instead. :func:`build_class_archive` starts a quick-start driver that records what it loads, runs a small
workload through sparkonce's reads, writes, streams and SQL, and has the JVM dump its classes (``jcmd <pid> VM.cds
dynamic_dump``, JDK 17 or later) into :func:`sparkonce.spark.quick_start_archive`'s file: a temporary sibling,
renamed into place once complete. Every later ``local_session(jvm="quick-start")`` with the same Java and classpath
maps it (``-XX:SharedArchiveFile``); a JVM that finds the archive does not match its own build or classpath starts
without it. Measured in the README ("How it works").

Runs on the machine that starts the JVM (the CLI: ``sparkonce jars archive``; ``scripts/setup.sh``); nothing here
runs on executors.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkonce.errors import JarsError
from sparkonce.spark import java_executable, local_session, quick_start_archive, splits_cleanly

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ClassArchive", "build_class_archive"]

_RECORD = "-XX:+RecordDynamicDumpInfo -Xlog:cds*=error"
"""Has the JVM keep what a later ``jcmd VM.cds dynamic_dump`` needs (JDK 17 or later), and print only its errors
about the dump (not a warning per class it leaves out: signed jars, old class files)."""


@dataclass(frozen=True)
class ClassArchive:
    """Where the quick-start class archive is, and whether this call built it."""

    path: Path
    size_bytes: int
    built: bool
    """False when it was there already (and ``force`` was not given)."""


def build_class_archive(*, force: bool = False, s3a: bool | None = None) -> ClassArchive:
    """Build the class archive that quick-start drivers with this Java and classpath map, unless it exists (or
    ``force``). Starts, and stops, this process's Spark driver. Runs on the driver's machine.

    ``s3a``: as :func:`sparkonce.spark.local_session`'s (by default the S3A jars are on the classpath when they
    were fetched, and so in the archive).

    Raises:
        JarsError: the archive's path has whitespace, quotes or backslashes (Java options cannot name it), a Spark
            session already runs in this process (its JVM cannot record what it loaded), the Java has no ``jcmd``
            (a JRE, not a JDK), or the JVM did not write the archive (the message has ``jcmd``'s words; a Java older
            than 17 cannot).
    """
    from pyspark import SparkContext

    target = quick_start_archive(s3a=s3a)
    if target.is_file() and not force:
        return ClassArchive(target, target.stat().st_size, built=False)
    if not splits_cleanly(target):
        raise JarsError(
            f"class archive {target}: a driver's Java options cannot name a path with whitespace, quotes or "
            "backslashes; set SPARKONCE_CLASS_ARCHIVES to a directory without them"
        )
    if SparkContext._active_spark_context is not None:
        raise JarsError(
            f"class archive {target}: this process already runs a Spark driver, whose JVM did not record the classes "
            "it loaded; build the archive from a new process (`sparkonce jars archive`)"
        )
    jcmd = Path(os.path.realpath(java_executable())).parent / "jcmd"
    if not jcmd.is_file():
        raise JarsError(
            f"class archive {target}: the Java at {java_executable()} has no jcmd beside it; a JDK (17 or later) "
            "builds the archive"
        )
    target.unlink(missing_ok=True)  # a driver started with the old archive cannot dump a new one
    target.parent.mkdir(parents=True, exist_ok=True)
    spark = local_session(
        app_name="sparkonce-class-archive",
        jvm="quick-start",
        s3a=s3a,
        extra_conf={"spark.driver.extraJavaOptions": _RECORD},
    )
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(prefix="sparkonce-class-archive-") as work:
            _warm_up(spark, Path(work))
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
        done = subprocess.run(
            [str(jcmd), str(pid), "VM.cds", "dynamic_dump", str(partial)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            said = " ".join((done.stdout + done.stderr).split())[-500:]
            raise JarsError(f"class archive {target}: the JVM did not write it (jcmd: {said})")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        spark.stop()
    return ClassArchive(target, target.stat().st_size, built=True)


def _warm_up(spark: SparkSession, work: Path) -> None:
    """Run what a short-lived sparkonce driver runs, so that its classes are loaded when the JVM dumps them: a Delta
    write and native read, SQL over the table, a stream from the table into another with a checkpoint, a
    ``foreachBatch`` stream and a JSON parse."""
    import pyspark.sql.functions as F

    first, second = str(work / "first"), str(work / "second")
    rows = spark.range(100).select(
        F.col("id"),
        (F.col("id") % 3).alias("k"),
        F.col("id").cast("string").alias("s"),
        F.current_timestamp().alias("t"),
    )
    rows.write.format("delta").partitionBy("k").save(first)
    rows.write.format("delta").mode("append").save(first)
    spark.read.format("delta").load(first).where("id > 5").groupBy("k").count().collect()
    spark.sql(f"SELECT k, max(s) FROM delta.`{first}` WHERE id < 50 GROUP BY k").collect()
    spark.sql(f"DESCRIBE HISTORY delta.`{first}`").collect()
    stream = (
        spark.readStream.format("delta")
        .load(first)
        .writeStream.format("delta")
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start(second)
    )
    stream.awaitTermination()

    def batch(frame: DataFrame, batch_id: int) -> None:
        frame.select(F.from_json(F.col("json"), "a INT, b STRING")).collect()

    parsed = (
        spark.readStream.format("delta")
        .load(second)
        .select(F.to_json(F.struct("id", "s")).alias("json"))
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint-json"))
        .trigger(availableNow=True)
        .start()
    )
    parsed.awaitTermination()
