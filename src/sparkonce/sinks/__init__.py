"""Exactly-once sinks for ``foreachBatch``: fan-out to several Delta tables, and PostgreSQL.

Both are callables Spark invokes on the driver as ``foreachBatch(batch_df, batch_id)``; see ``docs/fanout.md`` and
``docs/postgres.md``.
"""

from __future__ import annotations

from sparkonce.sinks.fanout import BatchValue, FanOutResult, FanOutTarget, FanOutWriter, TargetOutcome
from sparkonce.sinks.postgres import BatchOutcome, PostgresSink, PostgresSinkOptions

__all__ = [
    "BatchOutcome",
    "BatchValue",
    "FanOutResult",
    "FanOutTarget",
    "FanOutWriter",
    "PostgresSink",
    "PostgresSinkOptions",
    "TargetOutcome",
]
