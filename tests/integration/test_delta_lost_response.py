"""A Delta commit whose PUT the object store applied but whose answer was lost (issue 21).

A fault proxy (:class:`sparkonce_local.services.faultproxy.FaultProxy`) sits between the writers and the embedded
SeaweedFS: armed, it lets the store apply the PUT of a ``_delta_log`` commit file and closes the client's
connection instead of answering. object_store retries the conditional PUT, which the store refuses (412: the file
exists), so the writer sees "another writer made this version". The commit that landed must be taken as made:
no second commit of the same rows, no skip that deletes the commit's files, every row exactly once, a table that
delta-rs reads, and the fault must have fired.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location
from sparkonce_local.services.faultproxy import FaultProxy
from tests.fixtures_storage import EmbeddedStore, through_proxy

pytestmark = pytest.mark.s3

LOG_PUT = r"_delta_log/\d{20}\.json$"
SCHEMA = pa.schema([("id", pa.int64())])


def _commits(object_store: EmbeddedStore, uri: str) -> list[list[dict]]:
    """Every JSON commit of the table, read from the store directly (not through the proxy)."""
    location = table_location(uri, storage_options=object_store.storage_options)
    fs = location.filesystem()
    names = sorted(i.path for i in fs.get_file_info(pafs.FileSelector("_delta_log")) if i.path.endswith(".json"))
    commits = []
    for name in names:
        with fs.open_input_file(name) as handle:
            commits.append([json.loads(line) for line in handle.read().decode().splitlines() if line.strip()])
    return commits


def _check_table(object_store: EmbeddedStore, uri: str, expected: list[int]) -> None:
    """Each row once, no file added twice, every referenced file there, read by delta-rs from the store."""
    location = table_location(uri, storage_options=object_store.storage_options)
    added = [unquote(a["add"]["path"]) for c in _commits(object_store, uri) for a in c if "add" in a]
    assert [p for p, n in Counter(added).items() if n > 1] == []
    fs = location.filesystem()
    assert [p for p in added if fs.get_file_info(p).type != pafs.FileType.File] == []
    ids = DeltaTable(uri, storage_options=object_store.storage_options).to_pyarrow_table().column("id").to_pylist()
    assert sorted(ids) == sorted(expected)


def test_the_proxy_lets_the_store_apply_a_put_and_loses_its_answer(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    through = table_location(s3_uri, storage_options=through_proxy(object_store, proxy))
    direct = table_location(s3_uri, storage_options=object_store.storage_options)
    assert through.put_if_absent("_delta_log/a.json", b"first\n")  # unarmed: forwarded both ways
    rule = proxy.lose_responses("PUT", r"_delta_log/b\.json$")
    # object_store retries the conditional PUT after the lost answer; the store refuses it (412): "exists".
    assert not through.put_if_absent("_delta_log/b.json", b"second\n")
    assert (rule.fired, rule.remaining) == (1, 0)
    with direct.filesystem().open_input_file("_delta_log/b.json") as handle:
        assert handle.read() == b"second\n"  # the store applied the PUT whose answer was lost
    assert not through.put_if_absent("_delta_log/b.json", b"third\n")  # disarmed after one: a plain 412


def test_commit_files_takes_a_landed_commit_as_made(
    object_store: EmbeddedStore, proxy: FaultProxy, s3_uri: str
) -> None:
    location = table_location(s3_uri, storage_options=through_proxy(object_store, proxy))

    def write(ids: list[int]) -> list:
        writer = TableFileWriter(FileWriterOptions(location=location))
        writer.write(pa.table({"id": ids}, schema=SCHEMA))
        return writer.close()

    for table_version, (ids, txn) in enumerate([([0, 1], None), ([2, 3], BatchTxn("q", 1)), ([4], None)]):
        rule = proxy.lose_responses("PUT", LOG_PUT)
        result = commit_files(location, write(ids), data_schema=SCHEMA, txn=txn)
        assert rule.fired == 1 and rule.paths is not None and rule.paths[0].endswith(f"{table_version:020d}.json")
        assert (result.table_version, result.skipped) == (table_version, False)
    replay = write([2, 3])  # batch 1 replayed: skipped by its txn, and only the replay's own files removed
    assert commit_files(location, replay, data_schema=SCHEMA, txn=BatchTxn("q", 1)).skipped
    assert len(_commits(object_store, s3_uri)) == 3
    _check_table(object_store, s3_uri, [0, 1, 2, 3, 4])


@pytest.mark.spark
def test_stream_batch_and_fanout_writes_through_a_lost_answer(
    spark, object_store: EmbeddedStore, proxy: FaultProxy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from sparkonce.sinks.fanout import FanOutTarget, FanOutWriter

    options = {f"storage.{k}": v for k, v in through_proxy(object_store, proxy).items()}  # Delta write options
    # A stream of three batches; the answer to batch 1's Delta commit is lost.
    source = tmp_path / "source"
    for v in range(3):
        write_deltalake(str(source), pa.table({"id": list(range(v * 10, v * 10 + 10))}, schema=SCHEMA), mode="append")
    stream_uri = object_store.unique_uri("lost-stream")
    rule = proxy.lose_responses("PUT", r"_delta_log/0{19}1\.json$")
    writer = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(str(source)).writeStream
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.format("delta").option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
    query.start(stream_uri).awaitTermination(300)
    assert rule.fired == 1
    assert len(_commits(object_store, stream_uri)) == 3  # one Delta commit per batch
    _check_table(object_store, stream_uri, list(range(30)))

    # A batch write without a txn: the landed commit is not made a second time.
    batch_uri = object_store.unique_uri("lost-batch")
    rule = proxy.lose_responses("PUT", LOG_PUT)
    frame = spark.range(0, 20, numPartitions=2)
    batch = frame.write.format("delta").mode("append")
    for key, value in options.items():
        batch = batch.option(key, value)
    batch.save(batch_uri)
    assert rule.fired == 1 and len(_commits(object_store, batch_uri)) == 1
    _check_table(object_store, batch_uri, list(range(20)))

    # The fan-out: the first table's commit answer is lost; both tables get the batch once.
    uris = [object_store.unique_uri("lost-fan-a"), object_store.unique_uri("lost-fan-b")]
    fanout = FanOutWriter([FanOutTarget(u, options=options) for u in uris], app_id="fan")
    rule = proxy.lose_responses("PUT", LOG_PUT)
    fanout.write_batch(frame, 0)
    fanout.write_batch(frame, 0)  # a replay of batch 0: skipped by both tables' txns
    assert rule.fired == 1
    for uri in uris:
        assert len(_commits(object_store, uri)) == 1
        _check_table(object_store, uri, list(range(20)))
