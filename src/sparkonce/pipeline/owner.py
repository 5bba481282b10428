"""Who owns a checkpoint: ``<checkpoint_dir>/_sparkonce_owner.json``. Runs on the driver (no Spark).

Two jobs sharing a checkpoint corrupt each other's offsets, and a moved checkpoint may silently restart
from the wrong place. So the first run of a stage records in its checkpoint::

    {"pipeline": "/abs/pipeline.toml", "stage": "bronze", "checkpoint_dir": "/abs/checkpoints/bronze",
     "created_at": "...", "starting_version": null}

and every later run refuses the checkpoint when another pipeline file or stage claims it, or when it now lives at
another absolute path than recorded (it was moved or copied). ``starting_version`` is set by ``replay``: the input
table version a fresh checkpoint starts streaming from.

Spark ignores files it does not know in a checkpoint directory, so the record travels with the checkpoint.

While ``sparkonce run`` runs a stage it holds an exclusive ``flock`` on ``<checkpoint_dir>/_sparkonce_run.lock``
(which names the process: pid, host, start time). The operating system releases it when the process ends, however
it ends, so ``sparkonce status`` tells a running stage from a stopped one by trying the lock
(:func:`run_holder`), and a second ``sparkonce run`` of the same stage is refused before it starts.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sparkonce.errors import CheckpointError

OWNER_FILE = "_sparkonce_owner.json"
RUN_LOCK_FILE = "_sparkonce_run.lock"


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


@dataclass(frozen=True)
class RunHolder:
    """The process running a stage now (what it wrote into the run lock file)."""

    pid: int | None
    host: str
    started_at: str
    pipeline: str
    stage: str


class RunLock:
    """The held run lock of one stage's checkpoint; :meth:`release` (or process exit) frees it. Runs on the driver."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Free the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def lock_run(pipeline: str, stage: str, checkpoint_dir: str) -> RunLock:
    """Take the run lock of ``stage``'s checkpoint for this process (creating the directory when new).

    Raises:
        CheckpointError: another process runs the stage now (naming its pid and host).
    """
    directory = os.path.abspath(checkpoint_dir)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, RUN_LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = run_holder(directory)
        who = f"pid {holder.pid} on {holder.host} since {holder.started_at}" if holder else "another process"
        raise CheckpointError(
            f"stage {stage!r}: its checkpoint_dir {directory} is in use by a running sparkonce run ({who}); "
            "stop that run first (two queries on one checkpoint corrupt its offsets)"
        ) from None
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "pipeline": pipeline,
        "stage": stage,
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
    return RunLock(path, fd)


def run_holder(checkpoint_dir: str) -> RunHolder | None:
    """The process running the stage of ``checkpoint_dir`` now, or None when no process holds its run lock."""
    path = os.path.join(os.path.abspath(checkpoint_dir), RUN_LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: read who holds it
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        try:
            data = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError):
            data = {}
        pid = data.get("pid")
        return RunHolder(
            pid=pid if isinstance(pid, int) else None,
            host=str(data.get("host", "?")),
            started_at=str(data.get("started_at", "?")),
            pipeline=str(data.get("pipeline", "?")),
            stage=str(data.get("stage", "?")),
        )
    finally:
        os.close(fd)


__all__ = [
    "OWNER_FILE",
    "RUN_LOCK_FILE",
    "CheckpointOwner",
    "RunHolder",
    "RunLock",
    "claim_checkpoint",
    "lock_run",
    "new_owner",
    "read_owner",
    "run_holder",
    "write_owner",
]
