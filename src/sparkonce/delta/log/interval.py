"""Delta's interval table properties (``delta.deletedFileRetentionDuration``, ``delta.logRetentionDuration``,
``delta.setTransactionRetentionDuration``, ...): ``"interval 7 days"``, ``"interval 1 hour 30 minutes"``.

The one parser of these values; runs wherever it is called (driver or CLI), no Spark needed.
"""

from __future__ import annotations

from sparkonce.errors import DeltaLogError

__all__ = ["parse_interval_ms"]

_UNITS_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}


def parse_interval_ms(text: str, *, name: str) -> int:
    """Parse an interval such as ``"interval 7 days"`` or ``"1 hour 30 minutes"`` into milliseconds.

    Amounts are non-negative numbers; units are milliseconds to weeks, singular or plural, case-insensitive; the
    ``interval`` keyword is optional.

    Args:
        text: The property's value.
        name: The table property (or option) it came from, named in the error.

    Raises:
        DeltaLogError: ``text`` is not such an interval (the message names ``name`` and the value).
    """
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    problem = "" if words and len(words) % 2 == 0 else "expected pairs of amount and unit"
    total = 0.0
    for amount, unit in zip(words[::2], words[1::2]):
        if problem:
            break
        factor = _UNITS_MS.get(unit[:-1] if unit.endswith("s") else unit)
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if factor is None:
            problem = f"unknown unit {unit!r}"
        elif not value >= 0 or value == float("inf"):
            problem = f"{amount!r} is not a non-negative number"
        else:
            total += value * factor
    if problem:
        raise DeltaLogError(f"table property {name} = {text!r} is not an interval like 'interval 7 days' ({problem})")
    return int(total)
