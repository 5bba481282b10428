"""Findings shared by ``doctor`` and ``verify``: what is wrong, how bad, and the one-line fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["SEVERITY_RANK", "Finding", "Severity", "worst_severity"]

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Finding:
    """One thing the doctor noticed.

    Attributes:
        code: A stable identifier (e.g. ``"txn-ahead"``), listed in ``docs/doctor.md``; scripts match on it.
        severity: ``info`` (worth knowing), ``warning`` (may lose or duplicate data), ``error`` (will).
        message: What is wrong, in plain words, naming files, batch ids and table versions.
        fix: One line saying what to do about it.
        path: The file or folder concerned, if any.
        details: Machine-readable facts behind the message (batch ids, table versions, offsets...).
    """

    code: str
    severity: Severity
    message: str
    fix: str
    path: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def worst_severity(findings: tuple[Finding, ...] | list[Finding]) -> Severity | None:
    """Return the most severe severity among ``findings``, or ``None`` when there are none."""
    if not findings:
        return None
    worst = max(findings, key=lambda f: SEVERITY_RANK[f.severity])
    return worst.severity
