"""A Python streaming sink that drops what it receives: the ceiling of any Python data source sink.

Shared by the benchmarks; :func:`drop_sink` registers this module to be pickled by value, so executors need not
import it.
"""

from __future__ import annotations

import sys
from typing import Any


def drop_sink() -> type:
    """A Python streaming sink that receives the batch's Arrow batches and drops them: what any Python data source
    sink pays before doing anything (Spark's JVM -> Arrow -> Python worker hand-over, the Python data source round
    trips). Its module is pickled by value, so the workers need not import it."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class DropWriter(DataSourceStreamArrowWriter):
        """Runs on executors (``write``) and the driver (``commit``)."""

        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages: Any, batchId: int) -> None:
            pass

        def abort(self, messages: Any, batchId: int) -> None:
            pass

    class DropSink(DataSource):
        """Driver only."""

        @classmethod
        def name(cls) -> str:
            return "bench_drop"

        def streamWriter(self, schema: Any, overwrite: bool) -> DropWriter:
            return DropWriter()

    return DropSink


__all__ = ["drop_sink"]
