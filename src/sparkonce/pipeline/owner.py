"""Who owns a checkpoint: ``<checkpoint_dir>/_sparkonce_owner.json``. Runs on the driver (no Spark).

Two jobs sharing a checkpoint corrupt each other's offsets, and a moved checkpoint may silently restart
from the wrong place. So the first run of a stage records in its checkpoint::

    {"pipeline": "/abs/pipeline.toml", "stage": "bronze", "checkpoint_dir": "/abs/checkpoints/bronze",
     "created_at": "...", "starting_version": null}

and every later run refuses the checkpoint when another pipeline file or stage claims it, or when it now lives at
another absolute path than recorded (it was moved or copied). ``starting_version`` is set by ``replay``: the input
table version a fresh checkpoint starts streaming from.

Spark ignores files it does not know in a checkpoint directory, so the record travels with the checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sparkonce.errors import CheckpointError

OWNER_FILE = "_sparkonce_owner.json"


@dataclass(frozen=True)
class CheckpointOwner:
    """The owner record of one stage checkpoint."""

    pipeline: str
    stage: str
    checkpoint_dir: str
    created_at: str
    starting_version: int | None = None
    """When set, a new streaming query on this checkpoint reads its input table from this table version on."""


def read_owner(checkpoint_dir: str) -> CheckpointOwner | None:
    """The owner record of ``checkpoint_dir``, or None when there is none.

    Raises:
        CheckpointError: the record exists but is not valid.
    """
    path = os.path.join(checkpoint_dir, OWNER_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return CheckpointOwner(
            pipeline=str(data["pipeline"]),
            stage=str(data["stage"]),
            checkpoint_dir=str(data["checkpoint_dir"]),
            created_at=str(data.get("created_at", "")),
            starting_version=data.get("starting_version"),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: not a valid owner record ({err}); restore it or remove it") from err


def write_owner(owner: CheckpointOwner) -> None:
    """Write the owner record (atomically: temporary file, then rename)."""
    os.makedirs(owner.checkpoint_dir, exist_ok=True)
    path = os.path.join(owner.checkpoint_dir, OWNER_FILE)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(asdict(owner), handle, indent=2)
    os.replace(temporary, path)


def new_owner(
    pipeline: str, stage: str, checkpoint_dir: str, *, starting_version: int | None = None
) -> CheckpointOwner:
    return CheckpointOwner(
        pipeline=pipeline,
        stage=stage,
        checkpoint_dir=os.path.abspath(checkpoint_dir),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        starting_version=starting_version,
    )


def claim_checkpoint(pipeline: str, stage: str, checkpoint_dir: str) -> CheckpointOwner:
    """Make sure ``checkpoint_dir`` belongs to ``stage`` of the pipeline file ``pipeline``; record it if new.

    Raises:
        CheckpointError: the checkpoint belongs to another pipeline or stage, was moved, or holds a Spark
            checkpoint without an owner record.
    """
    current = os.path.abspath(checkpoint_dir)
    owner = read_owner(current)
    if owner is None:
        if any(os.path.exists(os.path.join(current, name)) for name in ("metadata", "offsets", "commits")):
            raise CheckpointError(
                f"checkpoint_dir {current} holds a Spark checkpoint that no sparkonce pipeline claimed "
                f"(no {OWNER_FILE}); it may belong to another job: give stages.{stage}.checkpoint a new path"
            )
        claimed = new_owner(pipeline, stage, current)
        write_owner(claimed)
        return claimed
    if os.path.abspath(owner.checkpoint_dir) != current:
        raise CheckpointError(
            f"checkpoint_dir {current} was created at {owner.checkpoint_dir} and has been moved or copied: its "
            "offsets may no longer match the tables it wrote (a job must always restart with the path it was started "
            f"with). Move it back, or if this is intended, delete {os.path.join(current, OWNER_FILE)} to adopt it"
        )
    if owner.pipeline != pipeline or owner.stage != stage:
        raise CheckpointError(
            f"checkpoint_dir {current} belongs to stage {owner.stage!r} of pipeline {owner.pipeline}; refusing to "
            f"share it with stage {stage!r} of {pipeline}: each streaming query needs its own checkpoint"
        )
    return owner


__all__ = ["OWNER_FILE", "CheckpointOwner", "claim_checkpoint", "new_owner", "read_owner", "write_owner"]
