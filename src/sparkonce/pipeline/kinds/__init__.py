"""The stage kinds: one module each (its parsing, tables, streaming query, verify and replay), all implementing
:class:`~sparkonce.pipeline.kinds.base.Kind`. Adding a kind: a model class in :mod:`sparkonce.pipeline.model`
(with its ``kind`` name), a module here, and its entry in :data:`KINDS`.

Runs on the driver.
"""

from __future__ import annotations

from typing import Any

from sparkonce.pipeline.kinds.base import Kind
from sparkonce.pipeline.kinds.bronze import BronzeKind
from sparkonce.pipeline.kinds.merge import MergeKind
from sparkonce.pipeline.kinds.postgres import PostgresKind
from sparkonce.pipeline.kinds.raw import RawKind
from sparkonce.pipeline.kinds.transform import TransformKind
from sparkonce.pipeline.model import Stage

KINDS: dict[str, Kind[Any]] = {
    kind.name: kind for kind in (RawKind(), BronzeKind(), MergeKind(), TransformKind(), PostgresKind())
}
"""Every stage kind by its ``kind`` name, in the order error messages list them."""


def kind_of(stage: Stage) -> Kind[Any]:
    """The behaviour of ``stage``'s kind."""
    return KINDS[stage.kind]


__all__ = ["KINDS", "Kind", "kind_of"]
