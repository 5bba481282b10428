"""The Delta Lake data source (``format("delta")``): reader, streaming source, batch writer, streaming sink, the
driver-side commit, merge, ``DESCRIBE HISTORY`` (:mod:`sparkonce.delta.read.history`) and vacuum
(:mod:`sparkonce.delta.ops.vacuum`).

The public functions are re-exported by the package root: ``sparkonce.history(spark, path)``,
``sparkonce.vacuum(path)``, ``sparkonce.merge_latest(...)``. ``sparkonce.delta.DeltaTable`` (also
``sparkonce.DeltaTable``) is delta-spark's ``delta.tables.DeltaTable`` API (:mod:`sparkonce.delta.tables`),
imported on first use so that executors importing this package do not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkonce.delta.tables import DeltaTable

__all__ = ["DeltaTable"]


def __getattr__(name: str) -> Any:
    """Import ``DeltaTable`` on first use (PEP 562)."""
    if name != "DeltaTable":
        raise AttributeError(f"module 'sparkonce.delta' has no attribute {name!r}")
    value = importlib.import_module("sparkonce.delta.tables").DeltaTable
    globals()[name] = value
    return value
