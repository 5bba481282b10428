"""sparkonce's Delta commits as Delta writes them: operation names, parameters and metrics other engines read.

Real tables on disk; what delta-rs's own history reports is the check. No Spark.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparkonce.delta.log.log_entry import WrittenFile, commit_metadata
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.errors import UnsupportedFeatureError
from sparkonce.storage import table_location

SCHEMA = pa.schema([("id", pa.int64()), ("device", pa.string())])


def _write(table: Path, ids: list[int], *, partitioned: bool = False) -> list[WrittenFile]:
    options = FileWriterOptions(location=table_location(str(table)), partition_by=("device",) if partitioned else ())
    writer = TableFileWriter(options)
    writer.write(pa.table({"id": ids, "device": [f"d{i % 2}" for i in ids]}, schema=SCHEMA))
    return writer.close()


def _actions(table: Path, table_version: int) -> list[dict]:
    text = (table / "_delta_log" / f"{table_version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _stream_batch(table: Path, batch_id: int, ids: list[int]) -> None:
    metadata = commit_metadata(
        "STREAMING UPDATE",
        {"outputMode": "Append", "queryId": "q-1", "epochId": str(batch_id)},
        None,
        batchId=batch_id,
        checkpointLocation="/ck",
        offsetsLog="v1\n{}\n{}",
    )
    commit_files(
        str(table),
        _write(table, ids, partitioned=True),
        data_schema=SCHEMA,
        partition_by=("device",),
        txn=BatchTxn("q-1", batch_id),
        custom_metadata=metadata,
    )


def test_streaming_batches_are_streaming_updates_to_every_reader(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _stream_batch(table, 0, [0, 1, 2])
    _stream_batch(table, 1, [3])

    first = _actions(table, 0)
    assert [next(iter(a)) for a in first] == ["commitInfo", "protocol", "metaData", "txn", "add", "add"]
    info = first[0]["commitInfo"]
    assert info["operation"] == "STREAMING UPDATE"
    assert info["operationParameters"] == {"outputMode": "Append", "queryId": "q-1", "epochId": "0"}
    assert "readVersion" not in info and info["isBlindAppend"] is True
    assert info["operationMetrics"]["numOutputRows"] == "3" and info["operationMetrics"]["numAddedFiles"] == "2"
    assert info["sparkonce"]["batchId"] == 0 and info["sparkonce"]["offsetsLog"] == "v1\n{}\n{}"
    assert "operation" not in info["sparkonce"]  # said once, where every engine reads it
    assert first[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    second = _actions(table, 1)[0]["commitInfo"]
    assert second["readVersion"] == 0 and second["operationParameters"]["epochId"] == "1"

    # delta-rs reads the same history: the articles' `operation = 'STREAMING UPDATE'` finds both batches.
    history = DeltaTable(str(table)).history()
    assert sorted((h["version"], h["operation"]) for h in history) == [(0, "STREAMING UPDATE"), (1, "STREAMING UPDATE")]
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3]


def test_writes_overwrites_and_schema_changes(tmp_path: Path) -> None:
    table = tmp_path / "t"
    commit_files(
        str(table),
        _write(table, [1, 2]),
        data_schema=SCHEMA,
        custom_metadata=commit_metadata("WRITE", {"mode": "ErrorIfExists", "partitionBy": []}, "first load"),
    )
    info = _actions(table, 0)[0]["commitInfo"]
    assert (info["operation"], info["operationParameters"]) == ("WRITE", {"mode": "ErrorIfExists", "partitionBy": "[]"})
    assert info["operationMetrics"] == {
        "numFiles": "1",
        "numOutputRows": "2",
        "numOutputBytes": info["operationMetrics"]["numOutputBytes"],
    }
    assert info["userMetadata"] == "first load"

    wider = pa.schema([*SCHEMA, ("extra", pa.string())])
    writer = TableFileWriter(FileWriterOptions(location=table_location(str(table))))
    writer.write(pa.table({"id": [3], "device": ["d1"], "extra": ["x"]}, schema=wider))
    commit_files(str(table), writer.close(), data_schema=wider, merge_schema=True)
    merged = _actions(table, 1)
    assert [next(iter(a)) for a in merged] == ["commitInfo", "metaData", "add"]  # one commit, as Delta makes it
    assert [f["name"] for f in json.loads(merged[1]["metaData"]["schemaString"])["fields"]] == ["id", "device", "extra"]
    assert merged[1]["metaData"]["id"] == _actions(table, 0)[2]["metaData"]["id"]

    commit_files(
        str(table),
        _write(table, [9]),
        data_schema=SCHEMA,
        mode="overwrite",
        custom_metadata=commit_metadata("WRITE", {"mode": "Overwrite", "partitionBy": []}, None),
    )
    overwrite = _actions(table, 2)
    assert sorted(next(iter(a)) for a in overwrite) == ["add", "commitInfo", "remove", "remove"]
    assert overwrite[0]["commitInfo"]["isBlindAppend"] is False
    read = DeltaTable(str(table)).to_pyarrow_table()
    assert read.column("id").to_pylist() == [9] and read.column("extra").to_pylist() == [None]
    assert [h["operation"] for h in sorted(DeltaTable(str(table)).history(), key=lambda h: h["version"])] == [
        "WRITE",
        "WRITE",
        "WRITE",
    ]


def test_a_checkpoint_every_tenth_table_version(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for batch_id in range(12):
        _stream_batch(table, batch_id, [batch_id])
    log = table / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [f"{10:020d}.checkpoint.parquet"]
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 10
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == list(range(12))


@pytest.mark.parametrize(
    ("configuration", "feature"),
    [
        ({"delta.appendOnly": "true"}, "append-only"),
    ],
)
def test_a_table_feature_sparkonce_does_not_honour_is_refused_before_anything_is_written(
    tmp_path: Path, configuration: dict[str, str], feature: str
) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": [1], "device": ["a"]}, schema=SCHEMA), configuration=configuration)
    commit_files(str(table), _write(table, [2]), data_schema=SCHEMA)  # appends stay allowed; removing rows is not
    before = sorted(p.name for p in (table / "_delta_log").iterdir())
    with pytest.raises(UnsupportedFeatureError, match=feature):
        commit_files(str(table), _write(table, [3]), data_schema=SCHEMA, mode="overwrite")
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == before
