"""The Spark Kafka oracle's jars: found in the folder scripts/oracle_jars.sh fills, or a clear error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.errors import DriverError
from sparkonce_local.services.spark_kafka import JARS_ENV, connector_jars


def test_a_folder_without_the_connector_names_the_script_that_resolves_it(tmp_path: Path) -> None:
    (tmp_path / "kafka-clients-3.9.2.jar").write_bytes(b"")
    with pytest.raises(DriverError, match=rf"no spark-sql-kafka jar in {tmp_path}: run scripts/oracle_jars.sh"):
        connector_jars(tmp_path)


def test_the_environment_variable_points_at_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = [tmp_path / "commons-pool2-2.13.1.jar", tmp_path / "spark-sql-kafka-0-10_2.13-4.2.0.jar"]
    for jar in jars:
        jar.write_bytes(b"")
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    assert connector_jars() == jars
