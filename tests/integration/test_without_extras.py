"""The library without any extra: a streaming write into Delta with real Spark in a driver process where
confluent-kafka, psycopg and the local tooling layer cannot be imported (nor in its Python workers:
tests/blocked_imports/sitecustomize.py is on their PYTHONPATH too), as after ``pip install sparkonce``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
BLOCKED = "confluent_kafka,psycopg,sparkonce_local"

DRIVER = r"""
import json, sys
from pathlib import Path

import deltalake

from sparkonce.spark import local_session

work = Path(sys.argv[1])
(work / "in").mkdir()
for n in range(3):
    rows = [{"id": n * 10 + i, "name": f"r{n}-{i}"} for i in range(4)]
    (work / "in" / f"part-{n}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

spark = local_session(app_name="sparkonce-without-extras")
query = (
    spark.readStream.format("json").schema("id long, name string").option("maxFilesPerTrigger", 1)
    .load(str(work / "in"))
    .writeStream.format("delta").option("checkpointLocation", str(work / "ck"))
    .trigger(availableNow=True).start(str(work / "table"))
)
query.awaitTermination()

def worker_import(_: object) -> list[str]:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as err:
        return [type(err).__name__]
    return ["imported"]

try:
    spark.read.format("sparkonce.kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option(
        "subscribe", "t").load()
    kafka_error = ""
except Exception as err:
    kafka_error = str(err)

table = deltalake.DeltaTable(str(work / "table"))
print(json.dumps({
    "rows": sorted((r["id"], r["name"]) for r in table.to_pyarrow_table().to_pylist()),
    "version": table.version(),
    "blocked_in_driver": [m for m in ("confluent_kafka", "psycopg", "sparkonce_local")
                          if m in sys.modules],
    "worker_import": spark.sparkContext.parallelize([0], 1).flatMap(worker_import).collect(),
    "kafka_error": kafka_error,
}))
spark.stop()
"""


def test_a_streaming_write_into_delta_needs_no_extra(tmp_path: Path) -> None:
    env = {**os.environ, "SPARKONCE_BLOCK_IMPORTS": BLOCKED}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests" / "blocked_imports"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [[n * 10 + i, f"r{n}-{i}"] for n in range(3) for i in range(4)]
    assert result["version"] == 2  # one Delta commit per micro-batch, one file per batch
    assert result["blocked_in_driver"] == []
    assert result["worker_import"] == ["ModuleNotFoundError"]
    assert "pip install 'sparkonce[kafka]'" in result["kafka_error"]
