"""The retries sparkonce makes itself, each logged at WARNING under one stable prefix so that a log tells how
often each happened: ``sparkonce retry <kind>: <what failed>; <what happens next>``.

Python data sources cannot report custom metrics to Spark's query progress (``pyspark.sql.datasource`` has no
metrics hook in PySpark 4.x), so the log line is where a retry shows: the Kafka source's offset requests and the
Delta sink's commit run in Python processes that Spark starts for the query, whose standard error goes to the
driver's (a WARNING reaches it even without a logging configuration, through :mod:`logging`'s last-resort
handler). :func:`count_retries` counts the lines of a log, as the chaos harness does for its report. Runs anywhere
(driver, the Python processes of a query, the CLI); no Spark.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from typing import Literal, get_args

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


def count_retries(lines: Iterable[str]) -> Counter[str]:
    """How many retries of each kind the log ``lines`` name (one per line written by :func:`log_retry`, whatever
    a log format put before it)."""
    found: Counter[str] = Counter()
    for line in lines:
        match = _LINE.search(line)
        if match is not None:
            found[match.group(1)] += 1
    return found


__all__ = ["RETRY_KINDS", "RETRY_PREFIX", "RetryKind", "count_retries", "log_retry"]
