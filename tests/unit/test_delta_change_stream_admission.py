"""Issue 24: the change data feed stream admits files as Delta's ``IndexedChangeFileSeq.filterFiles`` does.

Plain adds/removes (appends) are admitted file by file, so an offset may point inside such a commit; a commit
with change data files is admitted whole: first in a batch whatever the limit, later only when it fits
(``AdmissionLimits.admit(Seq)``). The table is written by delta-rs (partitioned, so an append or an UPDATE makes
one file per partition); the source's driver side is called directly (no Spark job).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from deltalake import write_deltalake
from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxFiles
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from sparkonce.delta.read.change_stream import ChangeFeedStreamReader
from sparkonce.delta.table.options import StreamReadOptions
from sparkonce.errors import SourceOffsetError

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("part", StringType()),
        StructField("_change_type", StringType()),
        StructField("_commit_version", LongType()),
        StructField("_commit_timestamp", TimestampType()),
    ]
)


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{i % 3}" for i in ids]})


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    write_deltalake(
        path, _rows([0, 1, 2]), partition_by=["part"], configuration={"delta.enableChangeDataFeed": "true"}
    )  # 0: 3 adds
    write_deltalake(path, _rows([3, 4, 5]), mode="append")  # 1: 3 adds
    RsTable(path).update(updates={"id": "id + 100"}, predicate="id >= 0")  # 2: 3 cdc files
    write_deltalake(path, _rows([6]), mode="append")  # 3: 1 add
    commit = [json.loads(line) for line in (path / "_delta_log" / f"{2:020}.json").read_text().splitlines()]
    assert sum("cdc" in a for a in commit) == 3
    return path


def _reader(table: Path) -> ChangeFeedStreamReader:
    options = {"path": str(table), "readChangeFeed": "true", "startingVersion": "0"}
    return ChangeFeedStreamReader(StreamReadOptions.parse(options), SCHEMA)


def _key(offset: dict[str, object]) -> tuple[object, object, object]:
    return (offset["reservoirVersion"], offset["index"], offset["isStartingVersion"])


def test_appends_are_admitted_file_by_file_and_a_change_data_commit_whole(table: Path) -> None:
    reader = _reader(table)
    offset = reader.initialOffset()
    ends = []
    files = []
    for _ in range(5):
        end = reader.latestOffset(offset, ReadMaxFiles(2))
        files.append(sum(len(p.files) for p in reader.partitions(offset, end)))  # type: ignore[attr-defined]
        ends.append(_key(end))
        offset = end
    assert ends == [(0, 1, False), (1, 0, False), (2, -1, False), (3, -1, False), (4, -1, False)]
    assert files == [2, 2, 2, 3, 1]  # the UPDATE's 3 change files in one batch despite the limit of 2
    assert reader.latestOffset(offset, ReadMaxFiles(2)) == offset


def test_a_later_change_data_commit_joins_a_batch_only_when_it_fits(table: Path) -> None:
    reader = _reader(table)
    start = {**reader.initialOffset(), "reservoirVersion": 1}
    first = reader.latestOffset(start, ReadMaxFiles(4))
    assert _key(first) == (2, -1, False)  # 3 files of table version 1; the UPDATE's 3 do not fit in the 1 left
    second = reader.latestOffset(first, ReadMaxFiles(4))
    assert _key(second) == (4, -1, False)  # the UPDATE whole (first in the batch), then the 1-file append
    assert _key(reader.latestOffset(first, ReadMaxBytes(1))) == (3, -1, False)  # bytes: the UPDATE alone


def test_an_offset_inside_a_change_data_commit_is_refused_and_its_last_index_means_done(table: Path) -> None:
    reader = _reader(table)
    done = {**reader.initialOffset(), "reservoirVersion": 2, "index": 2}  # Delta's offset after the UPDATE
    assert _key(reader.latestOffset(done, ReadMaxFiles(10))) == (4, -1, False)
    inside = {**done, "index": 0}
    with pytest.raises(SourceOffsetError, match=r"points inside the changes of table version 2"):
        reader.latestOffset(inside, ReadMaxFiles(10))


def test_a_column_type_change_mid_stream_stops_it_naming_the_table_version(table: Path) -> None:
    reader = _reader(table)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxFiles(1000))
    changed = pa.table({"id": ["x"], "part": ["p0"]})  # id: long -> string
    write_deltalake(table, changed, mode="overwrite", schema_mode="overwrite", partition_by=["part"])  # 4
    with pytest.raises(SourceOffsetError, match=r"changed incompatibly at table version 4.*'id' changed type"):
        reader.latestOffset(end, ReadMaxFiles(1000))


def test_an_overwrite_split_across_batches_delivers_its_deletes_before_its_inserts(table: Path) -> None:
    reader = _reader(table)
    done = reader.latestOffset(reader.initialOffset(), ReadMaxFiles(1000))
    write_deltalake(table, _rows([100, 101]), mode="overwrite")  # 4: every file removed, 2 added, no change data
    commit = [json.loads(line) for line in (table / "_delta_log" / f"{4:020}.json").read_text().splitlines()]
    assert not any("cdc" in a for a in commit)
    removes = sum("remove" in a for a in commit)
    kinds = []
    offset = done
    while _key(offset) != (5, -1, False):
        end = reader.latestOffset(offset, ReadMaxFiles(1))
        assert end != offset
        kinds += [f.kind for p in reader.partitions(offset, end) for f in p.files]  # type: ignore[attr-defined]
        offset = end
    assert kinds == ["delete"] * removes + ["insert"] * 2
    assert removes > 1
