"""Small helpers on sorted batch ids for the doctor's messages (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["missing_ids", "newest_ids", "range_text"]


def newest_ids(a: Sequence[int], b: Sequence[int], count: int) -> list[int]:
    """The ``count`` largest ids of the union of two sorted sequences, ascending (without sorting them whole)."""
    if count <= 0:
        return []
    return sorted(set(a[-count:]) | set(b[-count:]))[-count:]


def range_text(ids: Sequence[int]) -> str:
    """Render sorted ids compactly: ``3, 5-9, 12``."""
    parts: list[str] = []
    start = prev = None
    for i in ids:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    shown = parts[:10]
    return ", ".join(shown) + (f", ... ({len(parts) - 10} more ranges)" if len(parts) > 10 else "")


def missing_ids(ids: Sequence[int]) -> list[int]:
    """The ids missing between the first and the last of sorted, distinct ``ids``."""
    if not ids or ids[-1] - ids[0] + 1 == len(ids):
        return []
    present = set(ids)
    return [i for i in range(ids[0], ids[-1] + 1) if i not in present]
