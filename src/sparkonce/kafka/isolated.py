"""Reading a range with the Kafka client in a forked child process, so that a crash of the client ends the child;
:func:`read_range`, the source's one entry to reading a range, picks that or the in-process reader
(:func:`sparkonce.kafka.reader.read_range_in_process`) by platform.

Runs on Spark executors. librdkafka 2.5.0 and later (through confluent-kafka 2.16.1, the newest) kill the whole
process with SIGSEGV when a Fetch answer names a partition by an all-zero topic id with a current leader, as the
embedded broker (tansu) answers a fetch of a topic it deleted: the client's leader-discovery update then looks the
topic up by a name it does not have (docs/kafka.md, *A crash of the Kafka client*). In a Spark Python worker that
crash fails the task whatever ``failOnDataLoss`` says. Here the consumer lives in a child forked for the range; the
child sends its Arrow batches over a pipe and this process yields them. If the child dies without finishing, this
process asks the broker whether the partition still exists: gone, the rest of the range is reported as data loss
(an error with ``failOnDataLoss=true``, a warning otherwise, as Spark's source does for a deleted topic); still
there (a recreated topic, or another crash), the rest of the range is read once more in a new child, and a second
death fails the task with a ``BrokerError`` (Spark retries it).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Generic, TypeVar

from sparkonce.crash import crash_point
from sparkonce.errors import BrokerError
from sparkonce.extras import require
from sparkonce.kafka.offsets import OffsetRange
from sparkonce.kafka.reader import (
    ReadSettings,
    current_batch_id,
    partition_exists,
    read_range_in_process,
    report_deleted,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_BATCH = b"B"
_END = b"E"
_ERROR = b"X"
_HEADER = struct.Struct(">cQ")
"""One frame on the pipe: its kind and the length of its payload."""

T = TypeVar("T")

_REAPED_ELSEWHERE = -1
"""Wait status standing for a child this process could not wait for."""

_ATTEMPTS = 2
"""Children per range: the first, and one more for the rest of the range when the partition still exists."""


def can_isolate() -> bool:
    """Whether this platform can fork a reading child (POSIX). Used on executors."""
    return hasattr(os, "fork")


def read_range(settings: ReadSettings, rng: OffsetRange, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[rng.start, rng.end)`` of ``rng.tp`` as Arrow batches matching ``schema``.

    The Kafka client runs in a forked child process where the platform can fork (:func:`read_range_isolated`): a
    crash of the client there (librdkafka's SIGSEGV on a topic deleted under a fetch) ends the child, and this
    process decides per ``failOnDataLoss``; elsewhere in this process
    (:func:`~sparkonce.kafka.reader.read_range_in_process`). Runs on executors.

    Raises:
        SourceOffsetError: records of the range are gone (deleted topic, start below the earliest offset) and
            ``failOnDataLoss`` is true.
        BrokerError: the broker failed, no record arrived for ``kafkaConsumer.pollTimeoutMs``, or the client
            crashed twice on a topic that still exists.
    """
    if can_isolate():
        return read_range_isolated(settings, rng, schema)
    return read_range_in_process(settings, rng, schema)


def read_range_isolated(settings: ReadSettings, rng: OffsetRange, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as :func:`read_range` does, read by forked children.

    Runs on executors.

    Raises:
        SourceOffsetError: records of the range are gone and ``failOnDataLoss`` is true.
        BrokerError: the broker failed, or the child died twice while the partition still exists.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if rng.size <= 0:
        return
    # What every forked child needs is loaded once in this worker and inherited: the Kafka client (~30 ms a child)
    # and pyarrow's conversion from Python lists, which loads its pandas shim on first use (~190 ms a child).
    require("kafka", "the sparkonce.kafka source")
    import confluent_kafka  # noqa: F401

    pa.array([b""], type=pa.binary())

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    batch_id = current_batch_id()
    next_offset = rng.start
    for attempt in range(1, _ATTEMPTS + 1):
        remaining = OffsetRange(rng.tp, next_offset, rng.end)
        pid, pipe = _fork_reader(settings, remaining, schema, batch_id)
        finished = False
        try:
            while True:
                header = pipe.read(_HEADER.size)
                if len(header) < _HEADER.size:
                    break  # the child died
                kind, size = _HEADER.unpack(header)
                payload = pipe.read(size)
                if len(payload) < size:
                    break
                if kind == _END:
                    finished = True
                    break
                if kind == _ERROR:
                    finished = True
                    raise pickle.loads(payload)  # our own child's exception, over our own pipe
                batch = pa.ipc.read_record_batch(pa.py_buffer(payload), arrow_schema)
                if batch.num_rows:
                    next_offset = batch.column(4)[-1].as_py() + 1
                yield batch
                # A crash point for exactly-once tests: part of the batch was handed to Spark, nothing committed.
                crash_point("mid_read", batch_id)
        finally:
            pipe.close()
            status = _reap(pid, kill=not finished)
        if finished:
            return
        cause = _describe(status)
        if next_offset >= rng.end:
            return  # every record arrived; the child died on its way out
        if not partition_exists(settings, rng.tp):
            report_deleted(settings, rng, next_offset, f"the Kafka client {cause}")
            return
        if attempt < _ATTEMPTS:
            log.warning(
                "the Kafka client reading %s %s at offset %d; %s still exists: reading the rest again",
                rng,
                cause,
                next_offset,
                rng.tp,
            )
    raise BrokerError(
        f"the Kafka client reading {rng} {cause} at offset {next_offset}, {_ATTEMPTS} times, while {rng.tp} "
        "still exists"
    )


def _fork(child: Callable[[IO[bytes]], None]) -> tuple[int, int]:
    """Fork a child that runs ``child`` on the writing end of a pipe and exits (1 when it raised: the parent sees
    the early end and decides); return its pid and the pipe's reading end (a file descriptor)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        code = 0
        try:
            with os.fdopen(write_fd, "wb") as out:
                child(out)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


_LEFT_OPEN: list[Any] = []
"""In a forked reading child: its consumer, kept referenced until the child's ``os._exit``."""


def _fork_reader(
    settings: ReadSettings, rng: OffsetRange, schema: StructType, batch_id: int | None
) -> tuple[int, IO[bytes]]:
    """Fork a child that reads ``rng`` and writes frames to a pipe; return its pid and the pipe's reading end."""
    pid, read_fd = _fork(lambda out: _child_main(settings, rng, schema, batch_id, out))
    return pid, os.fdopen(read_fd, "rb")


def _child_main(
    settings: ReadSettings, rng: OffsetRange, schema: StructType, batch_id: int | None, out: IO[bytes]
) -> None:
    """Runs in the forked child: read the range, one frame per batch, then the end or the error. The consumer is
    left open (:data:`_LEFT_OPEN` holds it, so it is not freed either): the child exits (``os._exit``) as soon as
    the end is sent, without waiting for librdkafka's close."""
    try:
        for batch in read_range_in_process(settings, rng, schema, crash_points=False, left_open=_LEFT_OPEN):
            _send(out, _BATCH, batch.serialize().to_pybytes())
            # A crash point for tests: the client dies with part of its range handed over (as on a librdkafka crash).
            crash_point("kafka_client_read", batch_id)
    except Exception as err:  # handed to the parent, which raises it
        try:
            payload = pickle.dumps(err)
        except Exception:  # an unpicklable error still reaches the parent, as text
            payload = pickle.dumps(BrokerError(f"reading {rng} failed: {type(err).__name__}: {err}"))
        _send(out, _ERROR, payload)
        return
    _send(out, _END, b"")


def _send(out: IO[bytes], kind: bytes, payload: bytes) -> None:
    out.write(_HEADER.pack(kind, len(payload)))
    out.write(payload)
    out.flush()


def _reap(pid: int, *, kill: bool) -> int:
    """Wait for the child (killed first when ``kill``: Spark stopped reading early); return its wait status."""
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return _REAPED_ELSEWHERE  # a SIGCHLD handler of the host process took it
    return status


def _describe(status: int) -> str:
    if status == _REAPED_ELSEWHERE:
        return "ended early (its exit status was taken by another handler)"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return f"crashed ({signal.Signals(number).name})"
    return f"ended early (exit status {os.waitstatus_to_exitcode(status)})"


@dataclass(frozen=True)
class ChildOutcome(Generic[T]):
    """What a forked call gave: its ``value``, or ``died`` (how the child ended without an answer)."""

    value: T | None = None
    died: str | None = None


def call_forked(fn: Callable[[], T], *, timeout_s: float) -> ChildOutcome[T]:
    """Run ``fn`` in a forked child and return its (picklable) value; re-raise the exception it raised.

    The caller must hold no Kafka client across the fork (librdkafka's threads do not follow it, their locks do).
    A child that dies (a crash of the client) or gives no answer within ``timeout_s`` seconds (it is killed) gives
    a :class:`ChildOutcome` with ``died`` set. Runs on the driver (the planner's confirmation fetch) or executors.
    """

    def answer(out: IO[bytes]) -> None:
        try:
            result: tuple[str, object] = ("value", fn())
        except Exception as err:  # handed to the parent, which raises it
            result = ("error", err)
        try:
            payload = pickle.dumps(result)
        except Exception as err:  # an unpicklable answer still reaches the parent, as text
            payload = pickle.dumps(("error", BrokerError(f"{type(err).__name__}: {err}")))
        out.write(payload)

    pid, read_fd = _fork(answer)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                timed_out = True
                break
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    status = _reap(pid, kill=timed_out)
    if timed_out:
        return ChildOutcome(died=f"gave no answer within {timeout_s:g} s")
    data = b"".join(chunks)
    if not data:
        return ChildOutcome(died=_describe(status))
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return ChildOutcome(value=value)


__all__ = ["ChildOutcome", "call_forked", "can_isolate", "read_range", "read_range_isolated"]
