"""Creating a SparkSession that can run sparkonce's Python data sources, locally or on a standalone cluster."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import urlsplit

from sparkonce.errors import ClusterError, OptionError
from sparkonce.jars import S3A

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


JvmMode = Literal["default", "quick-start"]
"""``quick-start``: JIT compile with C1 only and use the serial collector (see :data:`QUICK_START_JAVA_OPTIONS`)."""

JVM_ENV = "SPARKONCE_JVM"
"""The environment variable that chooses the :data:`JvmMode` of sessions built without ``jvm=``."""

QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for short-lived drivers: C1 only (C2's compiler threads compete for the cores while Spark starts)
and the serial collector (no parallel GC threads). A driver starts in about 55 % of the JVM CPU time (README);
long runs lose some steady-state speed of JVM-side code, so this is not the default. A quick-start driver also maps
its classes from the class archive when one was built for its Java and classpath (:func:`class_archive_file`)."""

CLASS_ARCHIVES_ENV = "SPARKONCE_CLASS_ARCHIVES"
"""The environment variable naming the directory of the quick-start class archives (:func:`class_archive_file`)."""

CHECKPOINT_FILE_MANAGER = (
    "spark.sql.streaming.checkpointFileManagerClass",
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
)
"""How :func:`local_session` has Spark write its checkpoint files (``offsets/N``, ``commits/N``, ``metadata``):
through Hadoop's ``FileSystem`` rather than its ``FileContext`` (Spark's default).

Both write a ``.<name>.<uuid>.tmp`` file and rename it into place only when the target does not exist. On a local
disk without Hadoop's native library (the pyspark wheel has none), Hadoop starts a process for ``chmod`` of each
file and its ``.crc`` either way, and ``FileContext`` also for ``readlink``, several times a rename: a 10-batch
file stream started 322 processes with ``FileContext`` and 74 with ``FileSystem``; a checkpoint file takes 35-40 ms
with the first and ~12 ms with the second; in the 800k-record pipeline benchmark the processes took 1.85
core-seconds of ~17 (``benchmarks/README.md``). The rename is as atomic as the file system's either way: HDFS refuses
to rename onto an existing file in both, a local disk checks and renames in both, an object store copies in both. A
value of the key in ``extra_conf`` wins."""


ARROW_MAX_BYTES_PER_BATCH = ("spark.sql.execution.arrow.maxBytesPerBatch", "2147483647")
"""How :func:`local_session` sizes the Arrow batches Spark hands to Python workers (``mapInArrow``, Python data
source writes: every sink and fan-out of sparkonce): by ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000
rows) alone, as Spark did before SPARK-51316.

That change added a byte limit (64 MB by default in Spark 4.3) that Spark checks after every row by asking each
Arrow vector of the batch for its size: O(columns) per row. In the bronze stage's batch (12 columns) that check
took 17% of the tasks' CPU. At ``2147483647`` (its largest value) Spark skips it. A batch then holds at most
10,000 rows whatever their size: with records of 1 MB (Kafka's default largest message) that is 10 GB on a Python
worker, so for large rows set ``maxRecordsPerBatch`` lower or give this key another value in ``extra_conf`` (it
wins)."""


def jvm_mode(jvm: str | None = None) -> JvmMode:
    """The JVM mode ``jvm``, or the one in ``SPARKONCE_JVM`` when None (``default`` when unset).

    Raises:
        OptionError: the mode is not one of :data:`JvmMode`'s.
    """
    value = jvm if jvm is not None else (os.environ.get(JVM_ENV) or "default")
    modes: tuple[str, ...] = get_args(JvmMode)
    if value not in modes:
        source = "jvm" if jvm is not None else JVM_ENV
        raise OptionError(source, value, f"not a JVM mode; use one of {list(modes)}")
    return value  # type: ignore[return-value]


def java_executable() -> str:
    """The Java that Spark starts for a local driver: ``$JAVA_HOME/bin/java``, else ``java`` on the ``PATH`` (as
    ``spark-class`` picks it)."""
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or "java"


def quick_start_archive(*, s3a: bool | None = None, extra_class_path: str = "") -> Path:
    """The class archive that ``local_session(jvm="quick-start", s3a=s3a)`` maps when its ``extra_conf`` has
    ``spark.driver.extraClassPath = extra_class_path``, built or not (:func:`class_archive_file`)."""
    s3a_class_path = os.pathsep.join(str(jar) for jar in _s3a_jars(s3a))
    return class_archive_file(os.pathsep.join(c for c in (s3a_class_path, extra_class_path) if c))


def _s3a_jars(s3a: bool | None) -> list[Path]:
    """The S3A jars a driver's classpath gets (see :func:`local_session`'s ``s3a``)."""
    return S3A.classpath() if s3a or (s3a is None and S3A.resolved() is not None) else []


def splits_cleanly(path: Path) -> bool:
    """Whether ``path`` goes into ``extraJavaOptions`` as is: Spark splits the options at whitespace and reads quotes
    and backslashes; a class archive under such a path is not given to the JVM."""
    return not any(c.isspace() or c in "'\"\\" for c in str(path))


def class_archive_file(extra_class_path: str = "") -> Path:
    """Where the quick-start class archive of a driver with this extra classpath lives, built or not. Runs on the
    machine that starts the JVM.

    The archive is HotSpot's dynamic class data sharing (CDS) archive of a warmed-up driver: the classes Spark loads
    to start a session and run sparkonce's reads, writes, streams and SQL, parsed and verified once, mapped by
    every later quick-start driver instead of loaded from the jars (:mod:`sparkonce.class_archive` builds it,
    ``sparkonce jars archive``). Its name is a digest of PySpark's version and jars, the Java that Spark starts
    (``$JAVA_HOME/bin/java``, else ``java`` on the ``PATH``, as ``spark-class`` picks it) and the extra classpath,
    in ``$SPARKONCE_CLASS_ARCHIVES``, else ``$XDG_CACHE_HOME/sparkonce/class-archives``, else
    ``~/.cache/sparkonce/class-archives`` (a path without whitespace, quotes or backslashes: :func:`splits_cleanly`).
    The JVM checks the archive against its own build and classpath too, and starts without it, silently, when they
    differ.
    """
    import hashlib

    import pyspark

    override = os.environ.get(CLASS_ARCHIVES_ENV)
    if override:
        home = Path(override).expanduser()
    else:
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkonce" / "class-archives"
    java_real = os.path.realpath(java_executable())
    java_stamp = os.stat(java_real).st_mtime_ns if os.path.exists(java_real) else 0
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    key = "\0".join([pyspark.__version__, str(jars), java_real, str(java_stamp), extra_class_path])
    return home / f"quick-start-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def local_session(
    *,
    app_name: str = "sparkonce",
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
    jvm: JvmMode | None = None,
    s3a: bool | None = None,
) -> SparkSession:
    """Build (or get) a SparkSession whose Python workers run this interpreter, with sparkonce registered.

    Python workers must import ``sparkonce``; from a virtualenv that only works when they run the driver's
    interpreter, so ``spark.pyspark.python`` and ``PYSPARK_PYTHON`` are set to ``sys.executable``.

    On a cluster master (``spark://...``) the executors run on other processes or machines: they get the same
    interpreter path (the shared-environment way: the same virtualenv path on every node, see
    ``docs/cluster.md``), the driver's ``PYTHONPATH`` and crash-point variables, and a probe job checks, before
    any data moves, that they import sparkonce, deltalake and pyarrow.

    ``jvm`` (default: the ``SPARKONCE_JVM`` environment variable, else ``default``) set to ``quick-start`` starts
    the driver JVM (and a cluster's executor JVMs) with :data:`QUICK_START_JAVA_OPTIONS` (and the driver with the class
    archive built for its Java and classpath, when there is one: :func:`class_archive_file`), for drivers that live
    seconds to minutes (tests, crash-and-restart runs, the quickstart); it only applies when this call starts the
    JVM. Java options in ``extra_conf`` come after them.

    ``s3a`` puts the S3A file system's jars (:data:`sparkonce.jars.S3A`: hadoop-aws and the AWS SDK's S3 modules)
    on the driver's (and a cluster's executors') classpath, so checkpoints can live on ``s3a://``: None (default)
    when they were fetched (``sparkonce jars fetch s3a``), True always (an error naming that command when they
    were not), False never. Like ``jvm`` it only applies when this call starts the JVM. The store's endpoint and
    keys are Hadoop conf in ``extra_conf`` (``spark.hadoop.fs.s3a.*``; see :func:`s3a_conf`).

    Streams of the session write their checkpoint files through Hadoop's ``FileSystem``
    (:data:`CHECKPOINT_FILE_MANAGER`): the same files, the same rename, without ``readlink`` processes. Arrow
    batches to Python workers are cut by rows alone (:data:`ARROW_MAX_BYTES_PER_BATCH`), without a size check
    after every row.

    Raises:
        JarsError: ``s3a=True`` and the S3A jars were not fetched.
        ClusterError: on a cluster master, no executor came up in time or an executor cannot import sparkonce.
        OptionError: ``jvm`` or ``SPARKONCE_JVM`` is not a JVM mode.
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
        .config("spark.ui.showConsoleProgress", "false")
        .config(*CHECKPOINT_FILE_MANAGER)
        .config(*ARROW_MAX_BYTES_PER_BATCH)
    )
    clustered = not master.startswith("local")
    conf = cluster_conf(master) if clustered else {}
    jars = _s3a_jars(s3a)
    if jars:
        classpath = os.pathsep.join(str(jar) for jar in jars)
        conf["spark.driver.extraClassPath"] = classpath
        if clustered:
            conf["spark.executor.extraClassPath"] = classpath
    if jvm_mode(jvm) == "quick-start":
        extra_class_path = (extra_conf or {}).get("spark.driver.extraClassPath", "")
        archive = quick_start_archive(s3a=s3a, extra_class_path=extra_class_path)
        archived = f" -XX:SharedArchiveFile={archive}" if archive.is_file() and splits_cleanly(archive) else ""
        conf["spark.driver.extraJavaOptions"] = QUICK_START_JAVA_OPTIONS + archived
        if clustered:
            conf["spark.executor.extraJavaOptions"] = QUICK_START_JAVA_OPTIONS
    for key, value in (extra_conf or {}).items():
        if key.endswith(".extraClassPath") and key in conf:
            value = f"{conf[key]}{os.pathsep}{value}"
        elif key.endswith(".extraJavaOptions") and key in conf:
            value = f"{conf[key]} {value}"
        conf[key] = value
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if clustered:
        try:
            probe_executors(spark)
        except ClusterError:
            spark.stop()
            raise
    sparkonce.register(spark)
    return spark


def s3a_conf(
    *, endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1", path_style: bool = True
) -> dict[str, str]:
    """The Spark conf (``spark.hadoop.fs.s3a.*``) that points the S3A file system at an S3-compatible store.

    Path-style access (``http://host/bucket/key``, as SeaweedFS and MinIO serve it) unless ``path_style`` is
    false; plain HTTP when ``endpoint`` is ``http://``; simple access/secret key credentials.
    """
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": region,
        "spark.hadoop.fs.s3a.path.style.access": str(path_style).lower(),
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https://")).lower(),
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


@dataclass(frozen=True)
class ExecutorProbe:
    """What one probe task saw on an executor."""

    host: str
    pid: int
    python: str
    sparkonce_version: str | None
    sparkonce_file: str | None
    error: str | None
    """``ModuleNotFoundError: ...`` when the executor could not import sparkonce or a dependency."""


def cluster_conf(master: str) -> dict[str, str]:
    """Spark conf for a driver on a cluster ``master``: this interpreter and environment on the executors.

    A loopback master (``spark://127.0.0.1:...``, as ``sparkonce cluster start`` runs) also pins the driver to
    127.0.0.1.
    """
    from sparkonce.crash import ENV_ARM, ENV_PGID, ENV_POINT, ENV_RECORD, ENV_TARGET

    conf = {"spark.executorEnv.PYSPARK_PYTHON": sys.executable}
    host = urlsplit(master.split(",")[0]).hostname or ""
    if host in {"127.0.0.1", "localhost"}:
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    for name in ("PYTHONPATH", ENV_POINT, ENV_TARGET, ENV_PGID, ENV_RECORD, ENV_ARM):
        value = os.environ.get(name)
        if value:
            conf[f"spark.executorEnv.{name}"] = value
    return conf


def probe_executors(spark: SparkSession, *, timeout: float = 300.0) -> list[ExecutorProbe]:
    """Run a tiny job (two tasks per executor core) that imports sparkonce, deltalake and pyarrow on executors.

    Runs on the driver; the probe function is shipped by value, so it runs even where sparkonce is missing.

    Raises:
        ClusterError: no executor ran the probe within ``timeout`` seconds, an executor cannot import one of
            the modules (the message names the host, the interpreter and the fix), or runs another sparkonce
            version than the driver.
    """
    import sparkonce

    sc = spark.sparkContext
    master = sc.master
    group = f"sparkonce-probe-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def probe(_: object) -> tuple[str, int, str, str | None, str | None, str | None]:
        import os as os_
        import socket
        import sys as sys_

        try:
            import deltalake  # noqa: F401
            import pyarrow  # noqa: F401

            import sparkonce as package

            return (socket.gethostname(), os_.getpid(), sys_.executable, package.__version__, package.__file__, None)
        except Exception as err:
            return (socket.gethostname(), os_.getpid(), sys_.executable, None, None, f"{type(err).__name__}: {err}")

    def run() -> None:
        sc.setJobGroup(group, "sparkonce: can executors import sparkonce?", interruptOnCancel=True)
        try:
            tasks = max(2, 2 * sc.defaultParallelism)
            outcome["rows"] = sc.parallelize(range(tasks), tasks).map(probe).collect()
        except Exception as err:
            outcome["error"] = err

    worker = threading.Thread(target=run, name=group, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        sc.cancelJobGroup(group)
        worker.join(30)
        raise ClusterError(
            f"no executor of {master} ran the sparkonce probe within {timeout:.0f}s: are its workers up, with "
            f"free cores and at least spark.executor.memory "
            f"({sc.getConf().get('spark.executor.memory', '1g')}) of free memory? (`sparkonce cluster status`)"
        )
    if "error" in outcome:
        raise ClusterError(f"the sparkonce probe job failed on {master}: {outcome['error']}") from outcome["error"]
    probes = [ExecutorProbe(*row) for row in outcome["rows"]]
    for found in probes:
        if found.error is not None:
            raise ClusterError(
                f"an executor of {master} on {found.host} (Python {found.python}) cannot run sparkonce: "
                f"{found.error}. Executors need sparkonce and its dependencies: install sparkonce into the same "
                f"virtualenv path on every node (the driver sets spark.pyspark.python={sys.executable}), or "
                f"ship it with --py-files / spark.submit.pyFiles; see docs/cluster.md"
            )
        if found.sparkonce_version != sparkonce.__version__:
            raise ClusterError(
                f"an executor of {master} on {found.host} runs sparkonce {found.sparkonce_version} "
                f"({found.sparkonce_file}), the driver {sparkonce.__version__}: install the same version everywhere"
            )
    return probes


__all__ = [
    "ARROW_MAX_BYTES_PER_BATCH",
    "CHECKPOINT_FILE_MANAGER",
    "JVM_ENV",
    "QUICK_START_JAVA_OPTIONS",
    "ExecutorProbe",
    "JvmMode",
    "cluster_conf",
    "jvm_mode",
    "local_session",
    "probe_executors",
    "s3a_conf",
]
