"""The session-wide Spark Kafka oracle: Spark's own Kafka connector in a Spark process of its own.

Register with ``pytest_plugins = ["tests.fixtures_spark_kafka"]``. The ``spark_kafka`` fixture starts one oracle
process per test session (per pytest-xdist worker), so the suite pays one more JVM start per worker, and only when a
test asks for it. The connector's jars come from ``scripts/oracle_jars.sh`` (run by ``scripts/setup.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkonce_local.services.spark_kafka import SparkKafkaProcess


@pytest.fixture(scope="session")
def spark_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkKafkaProcess]:
    oracle = SparkKafkaProcess.start(log_dir=tmp_path_factory.mktemp("spark-kafka"))
    try:
        yield oracle
    finally:
        oracle.close()
