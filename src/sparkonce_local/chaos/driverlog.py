"""What the driver logs of a chaos run say about retries: counted for the report from
``WORK_DIR/rounds/NNNN/driver.log`` (every driver run's standard output and error, the Python processes Spark
started for its queries included).

Counted: sparkonce's own retries (``sparkonce retry <kind>:``, :mod:`sparkonce.retries`), Spark's failed task
attempts (each runs again, up to ``spark.task.maxFailures``: the executor's ``ERROR Executor: Exception in task 0.0
in stage 3.0 (TID 7)``, which a local master's driver log holds at the ``ERROR`` log level sparkonce's sessions
set, or the driver's ``WARN TaskSetManager: Lost task ...`` at ``WARN``; one per task id, whichever lines name it)
and the
soak driver's failed passes (``pass N failed after ...``: the queries of the pass failed; the driver stops them,
backs off and starts them again from their checkpoints). Runs in the harness (the CLI process).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkonce.retries import RETRY_KINDS, count_retries

SPARK_TASK = "spark_task"
"""The retry kind of a Spark task attempt that failed (Spark runs the task again until ``spark.task.maxFailures``)."""
REPORTED_KINDS: tuple[str, ...] = (*RETRY_KINDS, SPARK_TASK)
"""The retry kinds of the report, in its order."""

_FAILED_TASK = re.compile(
    r"\b(?:ERROR Executor: Exception in task|WARN TaskSetManager: Lost task) [\d.]+ in stage [\d.]+ \(TID (\d+)\)"
)
_FAILED_PASS = re.compile(r"^pass \d+ failed after ")


def failed_pass_line(passes: int, seconds: float, error: str) -> str:
    """The line the soak driver prints when a pass failed (what :func:`count_log` counts)."""
    return f"pass {passes} failed after {seconds:.1f}s: {error}"


@dataclass(frozen=True)
class LogCounts:
    """The retries and failed passes of some driver log lines."""

    retries_by_kind: dict[str, int]
    """Every kind of :data:`REPORTED_KINDS`, 0 when none."""
    failed_passes: int


def count_log(lines: Iterable[str]) -> LogCounts:
    """Count the retries by kind and the failed passes in the ``lines`` of one driver log (one Spark application:
    its task ids are unique)."""
    kept = list(lines)
    found = count_retries(kept)
    found[SPARK_TASK] = len({m.group(1) for line in kept if (m := _FAILED_TASK.search(line)) is not None})
    failed = sum(1 for line in kept if _FAILED_PASS.match(line))
    return LogCounts({kind: found.get(kind, 0) for kind in REPORTED_KINDS}, failed)


def count_driver_logs(work_dir: Path, runs: Sequence[int]) -> LogCounts:
    """:func:`count_log` over the driver logs of the runs ``runs`` (their ``rounds/NNNN`` index) under
    ``work_dir``; a run without a log counts nothing."""
    total: Counter[str] = Counter()
    failed = 0
    for index in runs:
        path = work_dir / "rounds" / f"{index:04d}" / "driver.log"
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", errors="replace") as log:
            counts = count_log(log)
        total.update(counts.retries_by_kind)
        failed += counts.failed_passes
    return LogCounts({kind: total.get(kind, 0) for kind in REPORTED_KINDS}, failed)


__all__ = ["REPORTED_KINDS", "SPARK_TASK", "LogCounts", "count_driver_logs", "count_log", "failed_pass_line"]
