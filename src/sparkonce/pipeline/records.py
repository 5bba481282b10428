"""Where a stage records its batches, checked against the batches its checkpoint committed: what ``verify`` reports
per target (:class:`TargetCheck`), and the ``txn`` actions of a Delta table (:func:`txn_versions`). Each stage kind
checks its own targets with these (:meth:`sparkonce.pipeline.kinds.base.Kind.verify`);
:mod:`sparkonce.pipeline.verify` runs them over a pipeline. Runs on the driver (no Spark).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sparkonce.delta.log.delta_log import DeltaLog
from sparkonce.delta.txn.commit import table_exists


@dataclass(frozen=True)
class TargetCheck:
    """One place a stage writes, checked against the stage's committed batches."""

    stage: str
    target: str
    """A Delta table path, or ``postgresql:<table>``."""
    record_id: str
    """The txn app id or ledger app id the batches are recorded under."""
    committed_batches: int
    missing: tuple[int, ...]
    """Batches the checkpoint committed that the target does not record (lost)."""
    duplicated: tuple[int, ...]
    """Batches the target records more than once."""
    row_difference: int | None = None
    """PostgreSQL append mode: target rows minus the rows the ledger says were moved (0 when exact)."""
    state_differences: int | None = None
    """A changes-fed merge stage (``input_mode = "changes"``): keys lost, extra, mismatched or duplicated against
    its input's rows at ``input_table_version`` (:mod:`sparkonce.pipeline.feed_state`); None: not compared."""
    input_table_version: int | None = None
    """The input's table version the newest recorded batch read the change data feed through."""

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicated and not self.row_difference and not self.state_differences


def check_delta_target(stage: str, table: str, record_id: str, committed: set[int]) -> TargetCheck:
    """The batches ``committed`` against the txn actions of ``table`` recorded under ``record_id``."""
    counts = Counter(txn_versions(table, record_id))
    return TargetCheck(
        stage=stage,
        target=table,
        record_id=record_id,
        committed_batches=len(committed),
        missing=tuple(sorted(committed - set(counts))),
        duplicated=tuple(sorted(v for v, n in counts.items() if n > 1)),
    )


def txn_versions(table: str, app_id: str) -> list[int]:
    """Every txn version the table's Delta log records for ``app_id`` (one per Delta commit carrying it)."""
    if not table_exists(table):
        return []
    log = DeltaLog(table)
    found: list[int] = []
    for table_version in log.commit_versions():
        for action in log.read_actions(table_version):
            txn = action.get("txn")
            if isinstance(txn, dict) and txn.get("appId") == app_id:
                found.append(int(txn["version"]))
    return found


__all__ = ["TargetCheck", "check_delta_target", "txn_versions"]
