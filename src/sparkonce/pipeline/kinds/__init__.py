"""The stage kinds: one module each (its parsing, tables, streaming query, verify and replay), all implementing
:class:`~sparkonce.pipeline.kinds.base.Kind`. Adding a kind: a model class in :mod:`sparkonce.pipeline.model`
(with its ``kind`` name), a module here, and its entry in :data:`KINDS` (filled here; the registry and
:func:`kind_of` live in :mod:`~sparkonce.pipeline.kinds.base`, so a kind that asks about its input's kind, and the
stream helpers every kind uses, find it without importing this package's modules: no import circle).

Runs on the driver.
"""

from __future__ import annotations

from sparkonce.pipeline.kinds.base import KINDS, Kind, kind_of
from sparkonce.pipeline.kinds.bronze import BronzeKind
from sparkonce.pipeline.kinds.merge import MergeKind
from sparkonce.pipeline.kinds.postgres import PostgresKind
from sparkonce.pipeline.kinds.raw import RawKind
from sparkonce.pipeline.kinds.transform import TransformKind

KINDS.update({kind.name: kind for kind in (RawKind(), BronzeKind(), MergeKind(), TransformKind(), PostgresKind())})

__all__ = ["KINDS", "Kind", "kind_of"]
