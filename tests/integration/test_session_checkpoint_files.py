"""How a ``local_session``'s streams write their checkpoint files: through Hadoop's ``FileSystem``
(``sparkonce.spark.CHECKPOINT_FILE_MANAGER``), in the layout Spark's default writes, read back by sparkonce."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sparkonce.checkpoint import read_checkpoint
from sparkonce.spark import CHECKPOINT_FILE_MANAGER

pytestmark = [pytest.mark.spark]


def test_a_local_sessions_stream_writes_its_checkpoint_through_the_file_system(
    spark: SparkSession, tmp_path: Path
) -> None:
    key, manager = CHECKPOINT_FILE_MANAGER
    assert spark.conf.get(key) == manager
    assert spark._jvm is not None
    spark._jvm.java.lang.Class.forName(manager)  # the class exists in this Spark (a rename would fail here)

    source = tmp_path / "in"
    source.mkdir()
    for i in range(2):
        (source / f"{i}.json").write_text(f'{{"a": {i}}}\n')
    checkpoint = tmp_path / "ck"
    query = (
        spark.readStream.schema("a int")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()  # never left running in the shared session, even when it outlives the wait
    assert query.exception() is None

    # Spark's default (FileContext) leaves exactly these files too: a renamed file and its checksum per batch.
    for folder in ("offsets", "commits"):
        assert sorted(os.listdir(checkpoint / folder)) == [".0.crc", ".1.crc", "0", "1"], folder
    state = read_checkpoint(str(checkpoint))
    assert state.query_id == query.id
    assert (state.last_planned, state.last_committed) == (1, 1)
    assert state.problems == () and state.temp_files == ()
