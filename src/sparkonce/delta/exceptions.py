"""delta-spark's ``delta.exceptions``: the commit conflicts under Delta's names.

Each name is the class of :mod:`sparkonce.errors` that sparkonce raises for that conflict (the same class, not a
copy), so code ported from delta-spark keeps its ``except`` clauses::

    from sparkonce.delta.exceptions import ConcurrentAppendException

    try:
        table.delete("part = 'a'")
    except ConcurrentAppendException:
        ...  # a concurrent commit added files to the partition this DELETE read

delta-spark's name -> sparkonce's class (Delta's error class):

- ``DeltaConcurrentModificationException`` -> :class:`~sparkonce.errors.CommitConflictError` (every conflict);
- ``ConcurrentWriteException`` -> :class:`~sparkonce.errors.ConcurrentWriteError` (``DELTA_CONCURRENT_WRITE``);
- ``MetadataChangedException`` -> :class:`~sparkonce.errors.MetadataChangedError` (``DELTA_METADATA_CHANGED``);
- ``ProtocolChangedException`` -> :class:`~sparkonce.errors.ProtocolChangedError` (``DELTA_PROTOCOL_CHANGED``);
- ``ConcurrentAppendException`` -> :class:`~sparkonce.errors.ConcurrentAppendError` (``DELTA_CONCURRENT_APPEND``);
- ``ConcurrentDeleteReadException`` -> :class:`~sparkonce.errors.ConcurrentDeleteReadError`
  (``DELTA_CONCURRENT_DELETE_READ``);
- ``ConcurrentDeleteDeleteException`` -> :class:`~sparkonce.errors.ConcurrentDeleteDeleteError`
  (``DELTA_CONCURRENT_DELETE_DELETE``);
- ``ConcurrentTransactionException`` -> :class:`~sparkonce.errors.ConcurrentTransactionError`
  (``DELTA_CONCURRENT_TRANSACTION``).

As in Delta's Scala classes (``io.delta.exceptions``), every conflict is a ``DeltaConcurrentModificationException``
(delta-spark's Python classes are siblings). They are :class:`~sparkonce.errors.SparkonceError`, not PySpark's
``PySparkException``: sparkonce raises them in Python, they do not come through the JVM. Where they are raised:
:mod:`sparkonce.delta.txn.conflicts`. Giving up after too many lost races is not a conflict:
:class:`~sparkonce.errors.CommitRetriesExceededError`.
"""

from __future__ import annotations

from sparkonce.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)

__all__ = [
    "DeltaConcurrentModificationException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
]
