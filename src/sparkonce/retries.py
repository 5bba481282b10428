"""The retries sparkonce makes itself, each logged at WARNING under one stable prefix so that a log tells how
often each happened: ``sparkonce retry <kind>: <what failed>; <what happens next>``.

Python data sources cannot report custom metrics to Spark's query progress (``pyspark.sql.datasource`` has no
metrics hook in PySpark 4.x), so the log line is where a retry shows: the Kafka source's offset requests and the
Delta sink's commit run in Python processes that Spark starts for the query, whose standard error goes to the
driver's (a WARNING reaches it even without a logging configuration, through :mod:`logging`'s last-resort
handler). :func:`count_retries` counts the lines of a log, as the chaos harness does for its report. Runs anywhere
(driver, the Python processes of a query, the CLI); no Spark.

The simple retry loops (a Kafka source's offset requests, the PostgreSQL sink's connections) run through
:func:`call_with_retries`, which is tenacity's loop (``tenacity`` comes with the ``kafka`` and ``postgres``
extras). Every Delta commit keeps its own engine (:class:`sparkonce.delta.txn.commit.Transaction`, under the writers'
:func:`~sparkonce.delta.txn.commit.commit_files` and ALTER TABLE's commits): each lost race is followed by a check
whether the attempt landed after all and by Delta's conflict rules, which a generic retry cannot express.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal, TypeVar, get_args

if TYPE_CHECKING:
    import tenacity

T = TypeVar("T")

RetryKind = Literal["kafka_offsets", "postgres_connect", "delta_commit"]
"""``kafka_offsets``: the Kafka source asked the broker for offsets and failed, and asks again with new clients
(``fetchOffset.numRetries`` attempts, ``fetchOffset.retryIntervalMs`` apart); ``postgres_connect``: the PostgreSQL
sink's driver side could not open a connection and tries again (4 attempts, doubling pauses from 0.5 s);
``delta_commit``: a Delta commit lost the race for its table version to another writer and commits again on top of
it (jittered exponential backoff, 100 attempts)."""
RETRY_KINDS: tuple[RetryKind, ...] = get_args(RetryKind)
RETRY_PREFIX = "sparkonce retry"
"""Every retry's log line starts with this, then the kind and a colon."""

_LINE = re.compile(rf"{RETRY_PREFIX} ({'|'.join(RETRY_KINDS)}): ")


def log_retry(logger: logging.Logger, kind: RetryKind, message: str, *args: object) -> None:
    """Log one retry of ``kind`` at WARNING: ``sparkonce retry <kind>: <message % args>``."""
    logger.warning("%s %s: " + message, RETRY_PREFIX, kind, *args)


def call_with_retries(
    body: Callable[[], T],
    *,
    logger: logging.Logger,
    kind: RetryKind,
    retry_on: type[Exception] | tuple[type[Exception], ...],
    attempts: int,
    pause: Callable[[int], float],
    message: Callable[[int, BaseException, float], str],
    before_retry: Callable[[], None] | None = None,
) -> T:
    """``body()``, called again after an error of ``retry_on``, at most ``attempts`` times in all (tenacity).

    Between two attempts: one :func:`log_retry` line of ``kind``, whose text is ``message(attempt, error,
    pause_s)``, then ``before_retry()`` (e.g. new clients), then the pause ``pause(attempt)`` (seconds, after
    the failed ``attempt``, 1-based). Any other error passes through at once. Runs where the caller runs.

    Raises:
        The last attempt's error, as it was raised (the caller wraps it in its own error).
    """
    import tenacity  # the kafka and postgres extras, where every caller lives

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        assert error is not None, "tenacity sleeps only after a failed attempt"
        log_retry(logger, kind, "%s", message(state.attempt_number, error, state.upcoming_sleep))
        if before_retry is not None:
            before_retry()

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(retry_on),
        stop=tenacity.stop_after_attempt(attempts),
        wait=lambda state: pause(state.attempt_number),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(body)


def count_retries(lines: Iterable[str]) -> Counter[str]:
    """How many retries of each kind the log ``lines`` name (one per line written by :func:`log_retry`, whatever
    a log format put before it)."""
    found: Counter[str] = Counter()
    for line in lines:
        match = _LINE.search(line)
        if match is not None:
            found[match.group(1)] += 1
    return found


__all__ = ["RETRY_KINDS", "RETRY_PREFIX", "RetryKind", "call_with_retries", "count_retries", "log_retry"]
