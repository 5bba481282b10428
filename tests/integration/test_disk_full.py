"""A full disk under a running stream (issue 26): the Delta table's data files, the Spark checkpoint, or the
``_delta_log`` on a small tmpfs filled to the last byte. The batch must fail (the query stops with the disk's
error), nothing of it may be committed, and once space is freed a restart completes the table exactly once.

Needs ``mount -t tmpfs`` (root, or a user namespace that allows it): skipped with the reason when the mount is
refused, never simulated.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from sparkonce.delta.log.delta_log import DeltaLog
from tests.integration.conftest import delta_ids, write_input_files

pytestmark = pytest.mark.spark

SCHEMA = "id long, device string, value double"
SIZE = "4m"


class TinyDisk:
    """A tmpfs mounted for one test; :meth:`fill` takes every free byte, :meth:`free` gives it back."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self.filler = mountpoint / ".filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (65536, 4096, 512, 1):  # unbuffered, down to the last byte
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError as err:
                    assert err.errno == errno.ENOSPC, err
        finally:
            os.close(fd)
        assert os.statvfs(self.mountpoint).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()


def _mount(where: Path) -> TinyDisk:
    where.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)], capture_output=True, text=True
        )
    except OSError as err:  # no mount command
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() or done.returncode}")
    return TinyDisk(where)


@pytest.fixture
def mounts() -> Iterator[list[TinyDisk]]:
    disks: list[TinyDisk] = []
    yield disks
    for disk in disks:
        subprocess.run(["umount", "-l", str(disk.mountpoint)], check=False)


def _run(spark: SparkSession, inputs: Path, checkpoint: Path, table: Path) -> None:
    query = (
        spark.readStream.format("json")
        .schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()


@pytest.mark.parametrize("place", ["data-files", "checkpoint", "delta-log"])
def test_a_full_disk_fails_the_batch_commits_nothing_and_a_restart_is_exact(
    spark: SparkSession, tmp_path: Path, mounts: list[TinyDisk], place: str
) -> None:
    inputs, checkpoint, table = tmp_path / "in", tmp_path / "ck", tmp_path / "events"
    if place == "data-files":
        disk = _mount(tmp_path / "disk")
        table = disk.mountpoint / "events"
    elif place == "checkpoint":
        disk = _mount(tmp_path / "disk")
        checkpoint = disk.mountpoint / "ck"
    else:
        disk = _mount(table / "_delta_log")
    mounts.append(disk)
    first = write_input_files(inputs, files=1, rows_per_file=50)
    _run(spark, inputs, checkpoint, table)
    assert delta_ids(table) == first
    before = DeltaLog(table).latest_version()

    rest = write_input_files(inputs, files=2, rows_per_file=50, start=50)
    disk.fill()
    with pytest.raises(StreamingQueryException, match=r"^\[STREAM_FAILED\] (?s:.*)No space left on device"):
        _run(spark, inputs, checkpoint, table)
    assert DeltaLog(table).latest_version() == before  # no Delta commit of the failed batch
    assert delta_ids(table) == first

    disk.free()
    _run(spark, inputs, checkpoint, table)
    assert delta_ids(table) == first + rest  # each row once: nothing lost, nothing twice
    log = DeltaLog(table)
    batches = [e.batch_id for e in log.history() if e.batch_id is not None]
    assert sorted(batches) == [0, 1, 2]
