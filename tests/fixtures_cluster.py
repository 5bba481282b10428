"""The session-wide standalone Spark cluster (a master and two 1-core workers on loopback) for cluster tests.

Registered in ``tests/conftest.py`` through ``pytest_plugins``. Only one SparkContext fits in a process and the
test session's is local, so cluster tests run their drivers as subprocesses (``--master`` the fixture's URL).
Tests that use it carry the ``cluster`` marker (``-m 'not cluster'`` skips them in a quick run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkonce_local.services.cluster import ClusterInfo, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    state_dir: Path = tmp_path_factory.mktemp("cluster")
    try:
        info = start_cluster(state_dir=state_dir, workers=2, worker_cores=1, worker_memory="2g")
        yield info
    finally:
        stop_cluster(state_dir=state_dir)
