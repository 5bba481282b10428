"""Spark's own Kafka connector (``format("kafka")``) in a Spark process of its own: the oracle of the
``sparkonce.kafka`` tests and the baseline of its benchmark.

The connector is a JVM jar that sparkonce's sessions never load: :class:`SparkKafkaProcess` starts a second Python
interpreter (this one, same virtualenv) whose SparkSession has the connector's jars on ``spark.jars``, and sends it
JSON requests, one a line, on its standard input: a batch read with options (answer: the rows) or a stream with the
availableNow trigger into a checkpoint directory (answer: the rows, or none with the ``noop`` sink; the progress of
every batch; the seconds the query ran; its error). The caller reads the checkpoint's files itself. One process
serves any number of requests, so a test session pays one JVM start.

The jars (the connector, ``spark-token-provider-kafka``, ``kafka-clients``, ``commons-pool2``; the rest is in
pyspark) are resolved by Maven from ``scripts/jars/spark-sql-kafka.xml`` into :data:`JARS_DIR` by
``scripts/oracle_jars.sh`` (``scripts/setup.sh`` runs it). Maven Central has no connector for Spark 4.3 yet, so
the pom names the newest one (4.2.0), which runs on pyspark 4.3's Spark (docs/kafka.md).

:func:`read_batch`, :func:`load`, :func:`run_stream` and :func:`kafka_rows` are the same code on both sides: the
oracle process runs them on ``format("kafka")``, a test on ``format("sparkonce.kafka")``, so their answers compare as
values.

Everything here runs on the machine that starts the oracle (a test session, a benchmark), never on executors.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from sparkonce.errors import DriverError
from sparkonce_local.services.process import log_tail

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JARS_DIR = Path(sys.prefix) / "share" / "sparkonce" / "spark-sql-kafka"
"""Where ``scripts/oracle_jars.sh`` puts the connector's jars (inside the virtualenv)."""

JARS_ENV = "SPARKONCE_SPARK_KAFKA_JARS"
"""Overrides :data:`JARS_DIR`."""

Header = tuple[str, bytes | None]
KafkaRow = tuple[bytes | None, bytes | None, str, int, int, int, int, tuple[Header, ...] | None]
"""(key, value, topic, partition, offset, timestamp in microseconds since the epoch, timestampType, headers or None
when the read has no ``headers`` column)."""

Sink = Literal["rows", "noop"]


def connector_jars(directory: Path | None = None) -> list[Path]:
    """The connector's jars in ``directory`` (default: ``SPARKONCE_SPARK_KAFKA_JARS``, else :data:`JARS_DIR`).

    Raises:
        DriverError: no ``spark-sql-kafka`` jar there (``scripts/oracle_jars.sh`` resolves them).
    """
    folder = directory or Path(os.environ.get(JARS_ENV) or JARS_DIR)
    jars = sorted(folder.glob("*.jar"))
    if not any(jar.name.startswith("spark-sql-kafka") for jar in jars):
        raise DriverError(f"no spark-sql-kafka jar in {folder}: run scripts/oracle_jars.sh (scripts/setup.sh does)")
    return jars


# -- the same code in both processes ----------------------------------------------------------------------------------


def load(spark: SparkSession, source_format: str, options: Mapping[str, str], *, stream: bool) -> DataFrame:
    """``spark.read`` (or ``readStream``) of ``source_format`` with ``options``."""
    reader = spark.readStream if stream else spark.read
    return reader.format(source_format).options(**dict(options)).load()


def kafka_rows(df: DataFrame) -> list[KafkaRow]:
    """Every row of a Kafka DataFrame (Spark's schema) as a :data:`KafkaRow`, sorted by topic, partition, offset."""
    columns = ["key", "value", "topic", "partition", "offset", "unix_micros(timestamp) AS ts", "timestampType"]
    with_headers = "headers" in df.columns
    if with_headers:
        columns.append("headers")
    rows: list[KafkaRow] = []
    for row in df.selectExpr(*columns).collect():
        headers = row["headers"] if with_headers else None
        rows.append(
            (
                row["key"],
                row["value"],
                row["topic"],
                row["partition"],
                row["offset"],
                row["ts"],
                row["timestampType"],
                None if headers is None else tuple((h["key"], h["value"]) for h in headers),
            )
        )
    return sorted(rows, key=lambda r: (r[2], r[3], r[4]))


@dataclass(frozen=True)
class BatchRead:
    """What a batch read returned: its rows and the number of Spark partitions (tasks) it was planned in."""

    rows: list[KafkaRow]
    partitions: int


def read_batch(spark: SparkSession, source_format: str, options: Mapping[str, str]) -> BatchRead:
    """A batch read of ``source_format`` with ``options``: every row and the number of partitions."""
    df = load(spark, source_format, options, stream=False)
    return BatchRead(rows=kafka_rows(df), partitions=df.rdd.getNumPartitions())


@dataclass(frozen=True)
class StreamRun:
    """What one availableNow run of a stream did: its rows (``rows`` sink), each batch's progress, its error."""

    rows: list[KafkaRow]
    progress: list[dict[str, Any]]
    """``StreamingQueryProgress.json`` of every batch, parsed."""
    seconds: float
    """From ``start()`` to the query's end."""
    error: str | None
    """The query's exception (``StreamingQueryException`` text), None when it ended normally."""


def run_stream(df: DataFrame, checkpoint_dir: Path, *, sink: Sink = "rows", timeout: float = 300.0) -> StreamRun:
    """Run the stream ``df`` with the availableNow trigger into ``sink`` until it ends.

    ``rows`` collects each batch's rows with ``foreachBatch`` (a memory sink cannot resume from a checkpoint, and
    resuming is what these runs are for); ``noop`` is Spark's sink that drops them.
    """
    from pyspark.errors import StreamingQueryException

    rows: list[KafkaRow] = []
    writer = df.writeStream.option("checkpointLocation", str(checkpoint_dir)).trigger(availableNow=True)
    if sink == "rows":
        writer = writer.foreachBatch(lambda batch, _batch_id: rows.extend(kafka_rows(batch)))
    else:
        writer = writer.format("noop")
    started = time.monotonic()
    query = writer.start()
    error: str | None = None
    try:
        if not query.awaitTermination(int(timeout)):
            raise DriverError(f"stream did not end within {timeout:.0f}s (checkpoint {checkpoint_dir})")
    except StreamingQueryException as err:
        error = str(err)
    finally:
        seconds = time.monotonic() - started
        query.stop()
    progress = [json.loads(p.json) for p in query.recentProgress]
    rows.sort(key=lambda r: (r[2], r[3], r[4]))
    return StreamRun(rows=rows, progress=progress, seconds=seconds, error=error)


# -- the client -------------------------------------------------------------------------------------------------------


def _encode_row(row: KafkaRow) -> list[Any]:
    key, value, topic, partition, offset, ts, ts_type, headers = row
    return [
        None if key is None else key.hex(),
        None if value is None else value.hex(),
        topic,
        partition,
        offset,
        ts,
        ts_type,
        None if headers is None else [[k, None if v is None else v.hex()] for k, v in headers],
    ]


def _decode_row(row: list[Any]) -> KafkaRow:
    key, value, topic, partition, offset, ts, ts_type, headers = row
    return (
        None if key is None else bytes.fromhex(key),
        None if value is None else bytes.fromhex(value),
        topic,
        partition,
        offset,
        ts,
        ts_type,
        None if headers is None else tuple((k, None if v is None else bytes.fromhex(v)) for k, v in headers),
    )


class SparkKafkaProcess:
    """A running oracle process and the requests it answers. Runs in the process that started it.

    Use :meth:`start` (or :func:`spark_kafka_process`), then :meth:`batch` and :meth:`stream`, then :meth:`close`.
    A request that fails in the oracle (a bad option, a Spark error) raises :class:`DriverError` with its text; the
    process goes on serving.
    """

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self._process = process
        self._log = log

    @classmethod
    def start(cls, *, jars_dir: Path | None = None, log_dir: Path, timeout: float = 300.0) -> SparkKafkaProcess:
        """Start the oracle (a SparkSession with the connector's jars) and wait until it answers.

        Raises:
            DriverError: the jars are missing, or the process died or did not answer within ``timeout``.
        """
        jars = connector_jars(jars_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / "spark-kafka-oracle.log"
        env = {**os.environ, JARS_ENV: str(jars[0].parent)}
        with log.open("ab") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "sparkonce_local.services.spark_kafka"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        oracle = cls(process, log)
        try:
            oracle._request({"op": "ping"}, timeout=timeout)
        except BaseException:
            oracle.close()
            raise
        return oracle

    @property
    def pid(self) -> int:
        return self._process.pid

    def batch(self, options: Mapping[str, str], *, timeout: float = 300.0) -> BatchRead:
        """``spark.read.format("kafka").options(options).load()``: its rows and its number of partitions."""
        answer = self._request({"op": "batch", "options": dict(options)}, timeout=timeout)
        return BatchRead(rows=[_decode_row(row) for row in answer["rows"]], partitions=answer["partitions"])

    def stream(
        self, options: Mapping[str, str], checkpoint_dir: Path, *, sink: Sink = "rows", timeout: float = 300.0
    ) -> StreamRun:
        """``readStream.format("kafka")`` with ``options`` run to its end with availableNow (see :func:`run_stream`)."""
        request = {
            "op": "stream",
            "options": dict(options),
            "checkpoint_dir": str(checkpoint_dir),
            "sink": sink,
            "timeout": timeout,
        }
        answer = self._request(request, timeout=timeout + 60)
        return StreamRun(
            rows=[_decode_row(row) for row in answer["rows"]],
            progress=answer["progress"],
            seconds=answer["seconds"],
            error=answer["error"],
        )

    def close(self) -> None:
        """Stop the oracle: end of input, then SIGKILL of its process group after 30 s."""
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, 9)
            self._process.wait(10)

    def _request(self, request: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError as err:
            raise self._died() from err
        line = self._read_line(stdout, timeout)
        answer: dict[str, Any] = json.loads(line)
        if "failure" in answer:
            raise DriverError(f"the Spark Kafka oracle refused {request['op']}: {answer['failure']}")
        return answer

    def _read_line(self, stdout: IO[bytes], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        fd = stdout.fileno()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DriverError(f"the Spark Kafka oracle did not answer within {timeout:.0f}s; log {self._log}")
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._died()
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)

    def _died(self) -> DriverError:
        code = self._process.poll()
        return DriverError(f"the Spark Kafka oracle exited (code {code}); log {self._log}:\n{log_tail(self._log)}")


@contextlib.contextmanager
def spark_kafka_process(*, log_dir: Path | None = None, jars_dir: Path | None = None) -> Iterator[SparkKafkaProcess]:
    """A started :class:`SparkKafkaProcess`, closed on exit (its log in ``log_dir``, default a temporary folder)."""
    with contextlib.ExitStack() as stack:
        folder = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-kafka-")))
        oracle = SparkKafkaProcess.start(jars_dir=jars_dir, log_dir=folder)
        try:
            yield oracle
        finally:
            oracle.close()


# -- the oracle process -----------------------------------------------------------------------------------------------


def serve() -> None:
    """The oracle process: answer requests from standard input until it closes. Runs in the oracle process.

    Standard output carries only the answers: its file descriptor is kept for them and fd 1 becomes fd 2 before
    Spark starts, so nothing the JVM or a library prints mixes in.
    """
    from sparkonce.spark import local_session

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    jars = connector_jars()
    spark = local_session(app_name="spark-kafka-oracle", extra_conf={"spark.jars": ",".join(map(str, jars))})
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                answer = _answer(spark, request)
            except Exception as err:  # the client raises it as a DriverError; the process goes on
                answer = {"failure": f"{type(err).__name__}: {err}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        spark.stop()


def _answer(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "ping":
        return {"spark": spark.version}
    if op == "batch":
        read = read_batch(spark, "kafka", request["options"])
        return {"rows": [_encode_row(row) for row in read.rows], "partitions": read.partitions}
    if op == "stream":
        df = load(spark, "kafka", request["options"], stream=True)
        run = run_stream(df, Path(request["checkpoint_dir"]), sink=request["sink"], timeout=request["timeout"])
        return {
            "rows": [_encode_row(row) for row in run.rows],
            "progress": run.progress,
            "seconds": run.seconds,
            "error": run.error,
        }
    raise ValueError(f"unknown request {op!r}")


if __name__ == "__main__":
    serve()
