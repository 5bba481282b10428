"""Work directories that ``demo`` and ``quickstart`` wipe and recreate: only ones they created themselves.

A work directory gets a marker file when sparkonce creates it. Wiping is allowed only for a folder that holds
that marker, is empty, or does not exist, so ``--work-dir .`` (or any folder of the user's) is refused instead of
deleted. Runs on the driver (or in the CLI process).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sparkonce.errors import OptionError

__all__ = ["MARKER", "fresh_work_dir"]

MARKER = ".sparkonce-work-dir"
"""The file sparkonce writes into each work directory it creates."""


def fresh_work_dir(work_dir: Path, *, command: str) -> Path:
    """Empty ``work_dir`` (or create it) and mark it as sparkonce's; return its absolute path.

    Args:
        work_dir: The folder the user gave (``--work-dir``).
        command: The command creating it (``demo``, ``quickstart``), written into the marker.

    Raises:
        OptionError: ``work_dir`` is a file, or a non-empty folder without the marker (sparkonce did not create
            it): nothing is deleted.
    """
    path = work_dir.absolute()
    if path.exists() and not path.is_dir():
        raise OptionError("--work-dir", str(work_dir), "is a file, not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not (path / MARKER).is_file():
            raise OptionError(
                "--work-dir",
                str(work_dir),
                f"is not empty and was not created by sparkonce (no {MARKER} file in it): refusing to delete "
                "its contents; give a new or empty folder",
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text(f"created by `sparkonce {command}`; the folder is wiped by its next run\n")
    return path
