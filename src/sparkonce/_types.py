"""Small shared types: identifiers that must not be mixed up."""

from __future__ import annotations

from typing import NewType

BatchId = NewType("BatchId", int)
"""A Spark micro-batch id (``offsets/N``, ``commits/N``). Never a task or attempt id."""

TableVersion = NewType("TableVersion", int)
"""A Delta log version (``_delta_log/NNN.json``)."""

__all__ = ["BatchId", "TableVersion"]
