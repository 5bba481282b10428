"""Makes the modules named in ``SPARKONCE_BLOCK_IMPORTS`` (comma-separated top-level names) unimportable.

Put this folder first on ``PYTHONPATH``: every Python process started with that environment (a test's child
driver and the Python workers its Spark starts) imports it at startup, as an interpreter without those packages
would behave. Used by tests/unit/test_packaging.py and tests/integration/test_without_extras.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

BLOCKED = frozenset(filter(None, os.environ.get("SPARKONCE_BLOCK_IMPORTS", "").split(",")))


class _Blocker:
    """A meta path finder that refuses the blocked packages and everything under them."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by tests/blocked_imports)", name=name)
        return None


if BLOCKED:
    sys.meta_path.insert(0, _Blocker())
