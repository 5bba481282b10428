"""Shared fixtures. One local SparkSession per test run; real Delta tables in tmp dirs; fixture files from
tests/fixtures (Delta's and Spark's Apache-2.0 test resources, see its README; SPARKONCE_FIXTURES points elsewhere)."""

from __future__ import annotations

import datetime as dt
import os
import random
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
# Crash matrices run a seeded sample (marker ``sampled``): the seed is the UTC date unless given, so every day's runs
# cover other points and a failure is reproduced with its seed; SPARKONCE_SAMPLE=all runs every point.
SAMPLE_SEED = os.environ.get("SPARKONCE_SAMPLE_SEED") or dt.datetime.now(dt.UTC).date().isoformat()
SAMPLE_ALL = os.environ.get("SPARKONCE_SAMPLE") == "all"
# Tests that cannot share the machine with a copy of themselves in another pytest-xdist worker: spark-pipelines binds
# port 15002; each cluster test would otherwise start a second standalone cluster; the spark_kafka and oracle tests
# would start a second oracle JVM (tests/fixtures_spark_kafka.py, tests/fixtures_delta_oracle.py).
SERIAL_GROUPS = ("sdp", "cluster", "spark_kafka", "oracle")

pytest_plugins: list[str] = [
    "tests.fixtures_broker",
    "tests.fixtures_postgres",
    "tests.fixtures_storage",
    "tests.fixtures_cluster",
    "tests.fixtures_spark_kafka",
    "tests.fixtures_delta_oracle",
]


def _sample_line() -> str:
    if SAMPLE_ALL:
        return "crash matrices: every point (SPARKONCE_SAMPLE=all)"
    return f"crash matrices: seeded sample, SPARKONCE_SAMPLE_SEED={SAMPLE_SEED} (SPARKONCE_SAMPLE=all runs every point)"


def pytest_report_header(config: pytest.Config) -> str:
    return _sample_line()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The sample's seed also at the end, where ``-q`` (CI) shows it, to reproduce a failure."""
    terminalreporter.write_line(_sample_line())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a seeded sample of each ``sampled`` group; pin the SERIAL_GROUPS markers to one xdist worker each.

    ``@pytest.mark.sampled(keep=k)`` on a parametrised test keeps ``k`` of its cases; ``group="name"`` pools several
    tests into one draw. The draw depends only on the seed and the sorted node ids, so every xdist worker
    deselects the same items.
    """
    for item in items:
        for group in SERIAL_GROUPS:
            # Without pytest-xdist (``-p no:xdist``) its marker is unknown and --strict-markers would refuse it.
            if item.get_closest_marker(group) is not None and config.pluginmanager.hasplugin("xdist"):
                item.add_marker(pytest.mark.xdist_group(group))
    if SAMPLE_ALL:
        return
    groups: dict[str, tuple[int, list[pytest.Item]]] = {}
    for item in items:
        mark = item.get_closest_marker("sampled")
        if mark is not None:
            name = mark.kwargs.get("group") or item.nodeid.partition("[")[0]
            keep = int(mark.kwargs["keep"])
            previous = groups.setdefault(name, (keep, []))
            if previous[0] != keep:
                raise pytest.UsageError(f"sampled group {name!r}: keep={keep} and keep={previous[0]}")
            previous[1].append(item)
    dropped: set[str] = set()
    for name, (keep, members) in groups.items():
        ids = sorted(item.nodeid for item in members)
        chosen = set(random.Random(f"{SAMPLE_SEED}:{name}").sample(ids, min(keep, len(ids))))
        dropped.update(set(ids) - chosen)
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in dropped])
        items[:] = [item for item in items if item.nodeid not in dropped]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixture folder {FIXTURES} is missing (tests/fixtures is part of the repository)")
    return FIXTURES


@pytest.fixture(scope="session", autouse=True)
def fixtures_stay_unchanged() -> Iterator[None]:
    """The fixture tables are read, never written: a test that streams one registers its query in the table's log
    (the retention guard's ``_delta_log/_sparkonce/``), so it must stream a copy. Checked when the session ends."""
    yield
    written = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("**/_delta_log/_sparkonce"))
    assert not written, f"tests wrote into fixture tables (stream a copy in tmp_path instead): {written}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from sparkonce.spark import local_session

    session = local_session(app_name="sparkonce-tests")
    yield session
    session.stop()
