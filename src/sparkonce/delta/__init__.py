"""The Delta Lake data source (``format("delta")``): reader, streaming source, batch writer, streaming sink, the
driver-side commit, merge, ``DESCRIBE HISTORY`` (:mod:`sparkonce.delta.history`) and vacuum
(:mod:`sparkonce.delta.vacuum`).

The public functions are re-exported by the package root: ``sparkonce.history(spark, path)``,
``sparkonce.vacuum(path)``, ``sparkonce.merge_latest(...)``.
"""

from __future__ import annotations

__all__: list[str] = []
