"""Shared fixtures. One local SparkSession per test run; real Delta tables in tmp dirs; fixture files from
tests/fixtures (Delta's and Spark's Apache-2.0 test resources, see its README; SPARKONCE_FIXTURES points elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
# Every driver of the suite (this process's session and the crash tests' child drivers, which inherit the
# environment) lives seconds to minutes: start their JVMs in quick-start mode (sparkonce.spark.JvmMode).
os.environ.setdefault("SPARKONCE_JVM", "quick-start")
FIXTURES = Path(os.environ.get("SPARKONCE_FIXTURES", REPO / "tests" / "fixtures"))

pytest_plugins: list[str] = [
    "tests.fixtures_broker",
    "tests.fixtures_postgres",
    "tests.fixtures_storage",
    "tests.fixtures_cluster",
]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixture folder {FIXTURES} is missing (tests/fixtures is part of the repository)")
    return FIXTURES


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from sparkonce.spark import local_session

    session = local_session(app_name="sparkonce-tests")
    yield session
    session.stop()
