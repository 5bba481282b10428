"""The fault proxy in front of the embedded SeaweedFS: the clients sparkonce uses (object_store through obstore,
pyarrow's S3 file system, delta-rs) work through it unarmed; armed, a lost answer leaves the object applied on the
store while the client saw its connection end, and an error answer leaves the store untouched. Rules fire exactly
``count`` times."""

from __future__ import annotations

import datetime
from typing import Any

import obstore
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from obstore.exceptions import BaseError
from obstore.store import from_url

from sparkonce.storage import table_location
from sparkonce_local.services.faultproxy import FaultProxy
from tests.fixtures_storage import EmbeddedStore, through_proxy

pytestmark = pytest.mark.s3


def _obstore(uri: str, options: dict[str, str], *, retries: int | None = None) -> Any:
    """An object_store client (what delta-rs and sparkonce's log writes use); ``retries=0``: no retry at all."""
    delta_rs_only = {"aws_allow_http", "aws_ec2_metadata_disabled"}  # delta-rs's, not object_store's
    config = {k.lower(): v for k, v in options.items() if k.lower() not in delta_rs_only}
    extra: dict[str, Any] = {}
    if retries is not None:
        extra["retry_config"] = {"max_retries": retries, "retry_timeout": datetime.timedelta(seconds=30)}
    return from_url(uri, config=config, client_options={"allow_http": True}, **extra)


def test_clients_work_through_the_unarmed_proxy(object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str) -> None:
    through = through_proxy(object_store, proxy)
    store = _obstore(s3_uri, through)
    obstore.put(store, "o/a.bin", b"a" * 100_000)
    obstore.put(store, "o/b.json", b"{}", mode="create")
    assert bytes(obstore.get(store, "o/a.bin").bytes()) == b"a" * 100_000
    assert obstore.head(store, "o/b.json")["size"] == 2
    assert sorted(m["path"] for m in obstore.list(store, "o/").collect()) == ["o/a.bin", "o/b.json"]
    obstore.delete(store, "o/a.bin")

    fs = table_location(s3_uri, storage_options=through).filesystem()  # pyarrow's S3 file system, as sparkonce opens it
    with fs.open_output_stream("p/c.parquet") as out, pq.ParquetWriter(out, pa.schema({"s": pa.string()})) as pw:
        pw.write_table(pa.table({"s": ["pyarrow"]}))  # as sparkonce's executors write data files
    assert pq.read_table("p/c.parquet", filesystem=fs).column("s").to_pylist() == ["pyarrow"]
    assert [i.base_name for i in fs.get_file_info(pafs.FileSelector("p"))] == ["c.parquet"]

    table_uri = f"{s3_uri}/table"
    write_deltalake(table_uri, pa.table({"id": [1, 2]}), storage_options=through)
    write_deltalake(table_uri, pa.table({"id": [3]}), mode="append", storage_options=through)
    assert sorted(DeltaTable(table_uri, storage_options=through).to_pyarrow_table().column("id").to_pylist()) == [
        1,
        2,
        3,
    ]
    assert proxy.rules() == []


def test_lost_answers_are_applied_by_the_store_and_fire_exactly_count_times(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    no_retry = _obstore(s3_uri, through_proxy(object_store, proxy), retries=0)
    direct = _obstore(s3_uri, object_store.storage_options)
    rule = proxy.lose_responses("PUT", r"/_delta_log/\d{20}\.json$", count=2)
    obstore.put(no_retry, "t/part-0.parquet", b"data")  # not matched: answered
    for version in range(2):
        with pytest.raises(BaseError, match="error sending request"):  # the connection ended without an answer
            obstore.put(no_retry, f"t/_delta_log/{version:020d}.json", f"commit {version}".encode(), mode="create")
        assert bytes(obstore.get(direct, f"t/_delta_log/{version:020d}.json").bytes()) == f"commit {version}".encode()
    obstore.put(no_retry, "t/_delta_log/00000000000000000002.json", b"commit 2", mode="create")  # spent: answered
    status = rule.status()
    assert (status.fired, status.remaining) == (2, 0)
    assert [p.rsplit("/", 1)[1] for p in status.paths] == [f"{v:020d}.json" for v in range(2)]


def test_an_error_answer_leaves_the_store_untouched(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    through = through_proxy(object_store, proxy)
    direct = _obstore(s3_uri, object_store.storage_options)
    rule = proxy.answer_errors("PUT", r"/slow\.json$", status=503)
    with pytest.raises(BaseError, match="503"):
        obstore.put(_obstore(s3_uri, through, retries=0), "slow.json", b"x", mode="create")
    with pytest.raises(FileNotFoundError, match=r"^Object at location \S*slow\.json not found: .*404 Not Found"):
        obstore.head(direct, "slow.json")
    assert rule.fired == 1
    rule = proxy.answer_errors("PUT", r"/slow\.json$", status=503)
    obstore.put(_obstore(s3_uri, through), "slow.json", b"y", mode="create")  # object_store retries a SlowDown
    assert rule.fired == 1
    assert bytes(obstore.get(direct, "slow.json").bytes()) == b"y"


def test_a_paused_store_is_waited_out_and_a_reset_request_retried_by_delta_rs(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    # store_net_pause and store_net_reset as the chaos harness arms them: any request, whatever it is.
    through = through_proxy(object_store, proxy)
    table_uri = f"{s3_uri}/held"
    write_deltalake(table_uri, pa.table({"id": [1]}), storage_options=through)
    pause = proxy.pause(1.0)
    write_deltalake(table_uri, pa.table({"id": [2]}), mode="append", storage_options=through)  # held, then answered
    assert pause.fired == 1
    reset = proxy.lose_responses("*", "", close="reset")  # applied by the store, the answer reset
    write_deltalake(table_uri, pa.table({"id": [3]}), mode="append", storage_options=through)  # object_store retries
    assert reset.fired == 1
    fs = table_location(s3_uri, storage_options=through).filesystem()  # sparkonce's file system (executors' reads)
    pause = proxy.pause(1.0)
    assert [i.base_name for i in fs.get_file_info(pafs.FileSelector("held/_delta_log"))] == [
        f"{v:020d}.json" for v in range(3)
    ]
    assert pause.fired == 1
    direct = DeltaTable(table_uri, storage_options=object_store.storage_options)  # past the proxy
    assert direct.version() == 2
    assert sorted(direct.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]  # each append once


def test_a_reset_request_without_retries_fails_with_an_error_naming_the_object(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    no_retry = _obstore(s3_uri, through_proxy(object_store, proxy), retries=0)
    proxy.lose_responses("*", "", close="reset")
    with pytest.raises(BaseError, match=r"reset\.json"):
        obstore.put(no_retry, "reset.json", b"x", mode="create")
    assert bytes(obstore.get(_obstore(s3_uri, object_store.storage_options), "reset.json").bytes()) == b"x"
