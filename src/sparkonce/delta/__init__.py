"""The Delta Lake data source (``format("delta")``) and table housekeeping.

Public API: :func:`history` (``DESCRIBE HISTORY`` as a DataFrame), :func:`vacuum` and :class:`VacuumResult`.
The names shadow their modules on purpose (``sparkonce.delta.history`` is the function); import the modules'
other names with ``from sparkonce.delta.history import ...``.
"""

from __future__ import annotations

from sparkonce.delta.history import history
from sparkonce.delta.vacuum import VacuumResult, vacuum

__all__ = ["VacuumResult", "history", "vacuum"]
