"""The session-wide embedded S3-compatible object store (SeaweedFS) for integration tests.

Registered in ``tests/conftest.py`` through ``pytest_plugins``. The ``object_store`` fixture starts one store per
test session in a temporary state directory, with one bucket, and stops it at the end; ``s3_uri`` gives each test
a fresh prefix in that bucket (``s3://sparkonce-tests/<test>-<random>``). Tests that use them carry the ``s3``
marker.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sparkonce.storage import TableLocation
from sparkonce_local.services.faultproxy import FaultProxy
from sparkonce_local.services.storage import StorageInfo, restart_storage, start_storage, stop_storage

BUCKET = "sparkonce-tests"


@dataclass
class EmbeddedStore:
    """A running test store: its endpoint, storage options, and helpers for buckets, prefixes and restarts."""

    info: StorageInfo
    bucket: str = BUCKET
    _names: Iterator[int] = field(default_factory=lambda: itertools.count())

    @property
    def endpoint(self) -> str:
        return self.info.endpoint

    @property
    def storage_options(self) -> dict[str, str]:
        """delta-rs storage options reaching this store (endpoint, keys, ``conditional_put=etag``)."""
        return self.info.storage_options()

    def unique_uri(self, prefix: str = "t") -> str:
        """A fresh ``s3://`` prefix in the session bucket that no other test uses."""
        name = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:40] or "t"
        return f"s3://{self.bucket}/{name}-{next(self._names)}-{uuid.uuid4().hex[:6]}"

    def new_bucket(self, prefix: str = "b") -> str:
        """Create a fresh bucket and return its URI ``s3://name``."""
        return self.info.create_bucket(f"{prefix}-{next(self._names)}-{uuid.uuid4().hex[:8]}")

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or SIGKILL with ``crash``) and start the store again on the same ports and data."""
        self.info = restart_storage(state_dir=self.info.state_dir, crash=crash)


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStore]:
    state_dir: Path = tmp_path_factory.mktemp("storage")
    info = start_storage(state_dir=state_dir)
    try:
        info.create_bucket(BUCKET)
        yield EmbeddedStore(info)
    finally:
        stop_storage(state_dir=state_dir)


@pytest.fixture
def s3_uri(object_store: EmbeddedStore, request: pytest.FixtureRequest) -> str:
    """A fresh ``s3://sparkonce-tests/<test>-<random>`` prefix for this test."""
    return object_store.unique_uri(request.node.name)


@pytest.fixture
def proxy(object_store: EmbeddedStore) -> Iterator[FaultProxy]:
    """A fault proxy in front of the embedded store's S3 port (stopped after the test)."""
    endpoint = urlsplit(object_store.endpoint)
    assert endpoint.hostname is not None and endpoint.port is not None
    with FaultProxy(endpoint.hostname, endpoint.port) as running:
        yield running


def through_proxy(object_store: EmbeddedStore, proxy: FaultProxy) -> dict[str, str]:
    """The store's storage options with the S3 endpoint replaced by the proxy's."""
    return {**object_store.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}


def copy_table_to_store(source: Path, location: TableLocation) -> None:
    """Copy the local table folder ``source`` (every file, log and data) to ``location`` in an object store."""
    import pyarrow.fs as pafs

    local = pafs.LocalFileSystem()
    for info in local.get_file_info(pafs.FileSelector(str(source), recursive=True)):
        if info.type == pafs.FileType.File:
            pafs.copy_files(
                info.path,
                location.fs_path(Path(info.path).relative_to(source).as_posix()),
                source_filesystem=local,
                destination_filesystem=location.filesystem(),
            )
