"""Exactly-once reading from Kafka across a real crash: SIGKILL the driver mid-batch, restart, count every offset.

The driver (Python + JVM) is killed by the ``mid_read`` crash point inside an executor's read of batch N, after
part of that batch's records were handed to Spark and before anything of the batch was committed. The restart
re-plans batch N from ``offsets/N`` and reads the identical ranges; the sink must then hold every offset once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkonce_local.chaos import DriverRun, run_driver
from tests.conftest import REPO
from tests.fixtures_broker import EmbeddedBroker, numbered

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]

DRIVER = ["-m", "tests.integration.drivers.kafka_to_sink"]
PARTITIONS = 3
RECORDS = 300
MAX_OFFSETS = 100


def _run(broker: EmbeddedBroker, topic: str, tmp_path: Path, sink: str, crash_at: str | None = None) -> DriverRun:
    args = [
        *DRIVER,
        broker.bootstrap,
        topic,
        str(tmp_path / "out"),
        str(tmp_path / "ck"),
        "--format",
        sink,
        "--max-offsets",
        str(MAX_OFFSETS),
    ]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=300)


def _sink_offsets(spark: SparkSession, out: Path, sink: str) -> list[tuple[int, int]]:
    if sink == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(str(out)).to_pyarrow_table(columns=["partition", "offset"])
        return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    # Spark's reader honours _spark_metadata, so files of an uncommitted batch stay invisible.
    return [(row["partition"], row["offset"]) for row in spark.read.parquet(str(out)).collect()]


@pytest.mark.sampled(keep=2)
@pytest.mark.parametrize(
    ("sink", "batch_id"), [("parquet", 0), ("parquet", 1), ("delta", 1)], ids=["parquet-0", "parquet-1", "delta-1"]
)
def test_every_offset_exactly_once_across_a_crash_mid_read(
    spark: SparkSession, broker: EmbeddedBroker, tmp_path: Path, sink: str, batch_id: int
) -> None:
    topic = broker.create_topic(partitions=PARTITIONS)
    # Multi-record producer batches (where tansu, the broker before Kafka, answered ListOffsets short).
    broker.produce(topic, numbered(RECORDS), partitions=PARTITIONS, linger_ms=20, batch_num_messages=50)
    expected = sorted((p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS))

    crashed = _run(broker, topic, tmp_path, sink, crash_at=f"mid_read:{batch_id}")
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    # Batch N was planned (offsets/N) and never committed (no commits/N).
    assert (ck / "offsets" / str(batch_id)).exists()
    assert not (ck / "commits" / str(batch_id)).exists()

    finished = _run(broker, topic, tmp_path, sink)
    assert finished.returncode == 0 and "DONE" in finished.stdout, finished.stderr[-3000:]
    assert (ck / "commits" / str(RECORDS // MAX_OFFSETS - 1)).exists()

    counts = Counter(_sink_offsets(spark, tmp_path / "out", sink))
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert not duplicates, f"offsets written more than once: {sorted(duplicates)[:10]}"
    assert sorted(counts) == expected
