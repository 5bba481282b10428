"""Which Delta tables have a writer in this process that is catching up on its own source. Driver only.

A streaming writer (a pipeline stage) reports after each of its batches whether that batch stopped short of what
its source had (:func:`report_writer`: its read limit held the rest back). A native Delta stream reading such a
table with ``maxCatchUpDelay`` holds its next batch back while that lasts, for at most the delay since it last
planned a batch or found nothing new (:class:`sparkonce.delta.read.native_stream.NativeDeltaSource`): one batch then
takes in several of the writer's commits, and each batch's fixed cost (planning, job, checkpoint, commit) is paid
less often while the pipeline catches up. A writer that has caught up, stopped or never reported holds nothing back.

Process-local: a writer in another process is never seen (its readers never wait).
"""

from __future__ import annotations

import threading

from sparkonce.storage import TableLocation, table_location

__all__ = ["forget_writer", "report_writer", "writer_catching_up"]

_CATCHING_UP: set[str] = set()
"""The tables (by location) whose writer's last batch stopped short of its source."""
_LOCK = threading.Lock()


def _key(table: str | TableLocation) -> str:
    return table_location(table).uri


def report_writer(table: str | TableLocation, *, catching_up: bool) -> None:
    """Record whether the last batch written into ``table`` left data of its source for later batches."""
    key = _key(table)
    with _LOCK:
        if catching_up:
            _CATCHING_UP.add(key)
        else:
            _CATCHING_UP.discard(key)


def forget_writer(table: str | TableLocation) -> None:
    """The writer of ``table`` stopped: its readers stop waiting for it."""
    report_writer(table, catching_up=False)


def writer_catching_up(table: str | TableLocation) -> bool:
    """Whether a writer of ``table`` in this process reported that it is catching up on its source."""
    key = _key(table)
    with _LOCK:
        return key in _CATCHING_UP
