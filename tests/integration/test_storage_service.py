"""The embedded object store (SeaweedFS) itself: buckets, Delta tables through storage options, conditional
puts, restarts that keep the data, and stops that leave no process behind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from sparkonce.cli.main import cli
from sparkonce.errors import StorageError
from sparkonce_local.services.process import alive, port_open
from sparkonce_local.services.storage import (
    restart_storage,
    s3_request,
    start_storage,
    stop_storage,
    storage_status,
)
from tests.fixtures_storage import EmbeddedStore

pytestmark = pytest.mark.s3


def _ids(uri: str, options: dict[str, str]) -> list[int]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=["id"])["id"].to_pylist())


def _append(uri: str, options: dict[str, str], start: int, count: int) -> None:
    from deltalake import write_deltalake

    ids = pa.array(range(start, start + count), type=pa.int64())
    payload = pa.array([f"row-{i:08d}" * 8 for i in range(start, start + count)])
    write_deltalake(uri, pa.table({"id": ids, "payload": payload}), mode="append", storage_options=options)


def test_buckets_are_created_listed_and_checked(object_store: EmbeddedStore) -> None:
    uri = object_store.new_bucket("fresh")
    name = uri.removeprefix("s3://")
    assert name in object_store.info.list_buckets()
    assert object_store.info.create_bucket(name, exist_ok=True) == uri
    with pytest.raises(StorageError, match=name):
        object_store.info.create_bucket(name)
    with pytest.raises(StorageError, match="not a valid bucket name"):
        object_store.info.create_bucket("Bad_Name")


def test_delta_table_round_trips_through_the_storage_options(object_store: EmbeddedStore, s3_uri: str) -> None:
    from deltalake import DeltaTable

    options = object_store.storage_options
    _append(s3_uri, options, 0, 200_000)  # a few MB: large enough for multipart uploads
    _append(s3_uri, options, 200_000, 10)
    assert _ids(s3_uri, options) == list(range(200_010))
    assert DeltaTable(s3_uri, storage_options=options).version() == 1


def test_conditional_put_over_an_existing_key_answers_412(object_store: EmbeddedStore, s3_uri: str) -> None:
    key = s3_uri.removeprefix("s3://") + "/_delta_log/00000000000000000000.json"
    first = s3_request(object_store.info, "PUT", f"/{key}", body=b"first", headers={"If-None-Match": "*"})
    second = s3_request(object_store.info, "PUT", f"/{key}", body=b"second", headers={"If-None-Match": "*"})
    assert (first.status, second.status) == (200, 412)
    assert s3_request(object_store.info, "GET", f"/{key}").body == b"first"


def test_restart_keeps_data_and_stop_leaves_no_process(tmp_path: Path) -> None:
    state = tmp_path / "store"
    info = start_storage(state_dir=state)
    pids = [info.pid]
    try:
        uri = info.create_bucket("restart-test") + "/table"
        options = info.storage_options()
        _append(uri, options, 0, 1000)

        info = restart_storage(state_dir=state)
        pids.append(info.pid)
        assert info.storage_options() == options  # same ports and keys: clients keep working
        assert _ids(uri, options) == list(range(1000))
        _append(uri, options, 1000, 1000)

        info = restart_storage(state_dir=state, crash=True)  # SIGKILL: acknowledged writes survive
        pids.append(info.pid)
        assert _ids(uri, options) == list(range(2000))
        assert storage_status(state_dir=state).buckets == ["restart-test"]
    finally:
        result = stop_storage(state_dir=state)
    assert result.was_running and result.pid == pids[-1]
    assert not any(alive(pid) for pid in pids)
    assert not any(port_open(port) for port in vars(info.ports).values())
    assert not storage_status(state_dir=state).running
    assert not stop_storage(state_dir=state).was_running


def test_cli_start_status_stop(tmp_path: Path) -> None:
    state = str(tmp_path / "cli-store")
    runner = CliRunner()
    started = runner.invoke(cli, ["storage", "start", "--state-dir", state, "--bucket", "cli-bucket", "--json"])
    try:
        assert started.exit_code == 0, started.output
        payload = json.loads(started.output)
        assert payload["buckets"] == ["s3://cli-bucket"]
        assert payload["storage_options"]["conditional_put"] == "etag"
        status = runner.invoke(cli, ["storage", "status", "--state-dir", state, "--json"])
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["buckets"] == ["cli-bucket"]
    finally:
        stopped = runner.invoke(cli, ["storage", "stop", "--state-dir", state])
    assert stopped.exit_code == 0, stopped.output
    assert "stopped" in stopped.output
    after = runner.invoke(cli, ["storage", "status", "--state-dir", state])
    assert after.exit_code == 3
    assert "no object store running" in after.output


def test_missing_binary_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKONCE_WEED_BIN", str(tmp_path / "no-weed"))
    with pytest.raises(StorageError, match="SPARKONCE_WEED_BIN"):
        start_storage(state_dir=tmp_path / "store")
