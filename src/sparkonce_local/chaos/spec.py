"""What the chaos driver program runs: a JSON file the harness writes before each round."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkonce_local.chaos.plan import NaiveKind

if TYPE_CHECKING:
    from sparkonce.sinks.postgres.options import CommitProtocol


@dataclass(frozen=True)
class DriverSpec:
    """What the driver program runs (written as JSON by the harness). Runs on the driver."""

    pipeline: str
    naive: NaiveKind | None = None
    postgres_dsn: str | None = None
    postgres_table: str = "chaos_bronze"
    postgres_checkpoint: str | None = None
    postgres_commit_protocol: CommitProtocol = "staging"
    """The PostgreSQL sink's ``commit_protocol``: ``staging`` or ``two-phase``."""
    postgres_max_files: int | None = None
    """The PostgreSQL stage's ``maxFilesPerTrigger`` on its Delta source (None: the source's default, 1000; a soak
    sets :data:`~sparkonce_local.chaos.soak.SOAK_POSTGRES_MAX_FILES`)."""
    file_sink_dir: str | None = None
    file_sink_checkpoint: str | None = None
    master: str = "local[2,4]"
    """Two cores; a task may be tried 4 times, so a killed executor Python worker costs a task retry."""
    soak_stop: str | None = None
    """Soak mode: run the stages pass after pass in one Spark session (``availableNow`` until one such pass
    succeeds or every stage's checkpoint holds a committed batch, then every stage at once on a ``processingTime``
    trigger; a pass that fails, e.g. while a service is down, is followed by the next) until this file exists; then
    exit 0 after an ``availableNow`` pass that succeeds."""

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> DriverSpec:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


__all__ = ["DriverSpec"]
