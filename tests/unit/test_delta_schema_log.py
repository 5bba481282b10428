"""The schema log of a Delta stream with a ``schemaTrackingLocation`` (sparkonce.delta.table.schema_log): its entries'
format (Delta's ``PersistedMetadata`` behind a ``v1`` line), its sequence, the rules of what changed and what
unblocks it, and the offsets of a metadata change barrier. No Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkonce.delta.read.stream import DeltaSourceOffset
from sparkonce.delta.table.schema_log import (
    UNBLOCK_DROP_CONF,
    UNBLOCK_RENAME_AND_DROP_CONF,
    UNBLOCK_RENAME_CONF,
    UNBLOCK_TYPE_CHANGE_CONF,
    PersistedMetadata,
    SchemaLog,
    check_unblocked,
    check_under_checkpoint,
    checkpoint_hash,
    log_folder,
    schema_change,
    tracking_root,
)
from sparkonce.errors import OptionError, SchemaTrackingError, SourceOffsetError


def _field(name: str, kind: Any, physical: str | None = None, column_id: int | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if physical is not None:
        metadata = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical}
    return {"name": name, "type": kind, "nullable": True, "metadata": metadata}


def _metadata(fields: list[dict[str, Any]], partitions: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "id": "t-1",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields}, separators=(",", ":")),
        "partitionColumns": list(partitions),
        "configuration": {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"},
    }


PROTOCOL = {"minReaderVersion": 2, "minWriterVersion": 5}
V1 = [_field("id", "long", "col-a", 1), _field("v", "string", "col-b", 2), _field("n", "integer", "col-c", 3)]
RENAMED = [_field("id", "long", "col-a", 1), _field("w", "string", "col-b", 2), _field("n", "integer", "col-c", 3)]
DROPPED = [_field("id", "long", "col-a", 1), _field("n", "integer", "col-c", 3)]
WIDENED = [_field("id", "long", "col-a", 1), _field("v", "string", "col-b", 2), _field("n", "long", "col-c", 3)]


def _entry(fields: list[dict[str, Any]], version: int, path: str = "file:/ck/sources/0") -> PersistedMetadata:
    return PersistedMetadata.of("t-1", version, _metadata(fields), PROTOCOL, path)


def test_an_entry_is_a_v1_line_then_deltas_persisted_metadata(tmp_path: Path) -> None:
    schema_log = SchemaLog(str(tmp_path / "_schema_log_t-1"), "t-1")
    schema_log.append(_entry(V1, 0))
    text = (tmp_path / "_schema_log_t-1" / "0").read_text()
    head, body = text.split("\n", 1)
    assert head == "v1"
    data = json.loads(body)
    assert list(data) == [
        "tableId",
        "deltaCommitVersion",
        "dataSchemaJson",
        "partitionSchemaJson",
        "sourceMetadataPath",
        "tableConfigurations",
        "protocolJson",
    ]
    assert data["tableId"] == "t-1" and data["deltaCommitVersion"] == 0
    assert json.loads(data["dataSchemaJson"]) == {"type": "struct", "fields": V1}
    assert json.loads(data["partitionSchemaJson"]) == {"type": "struct", "fields": []}
    assert data["sourceMetadataPath"] == "file:/ck/sources/0"
    assert data["tableConfigurations"]["delta.columnMapping.mode"] == "name"
    assert json.loads(data["protocolJson"]) == {"protocol": PROTOCOL}
    assert schema_log.latest() == (0, _entry(V1, 0))


def test_an_entry_keeps_the_partition_schema_and_reads_back_its_columns() -> None:
    fields = [_field("id", "long"), _field("day", "date")]
    entry = PersistedMetadata.of("t-1", 3, _metadata(fields, ("day",)), PROTOCOL, "")
    assert json.loads(entry.partition_schema_json)["fields"] == [fields[1]]
    assert entry.partition_columns == ("day",)
    parsed = PersistedMetadata.from_json(json.loads(entry.serialized().decode().split("\n", 1)[1]), where="x")
    assert parsed == entry
    assert entry.metadata_action({"id": "t-1", "name": "kept"})["name"] == "kept"
    assert entry.metadata_action({})["partitionColumns"] == ["day"]


def test_entries_follow_each_other_and_a_replacement_points_before_the_newest(tmp_path: Path) -> None:
    schema_log = SchemaLog(str(tmp_path / "log"), "t-1")
    assert schema_log.latest() is None and schema_log.previous() is None
    schema_log.append(_entry(V1, 0))
    schema_log.append(_entry(RENAMED, 4))
    assert schema_log.sequence_numbers() == [0, 1]
    assert schema_log.previous() == _entry(V1, 0)
    schema_log.append(_entry(RENAMED, 4))  # the same entry again is not written
    assert schema_log.sequence_numbers() == [0, 1]
    schema_log.append(_entry(DROPPED, 6), replace_current=True)
    latest = schema_log.latest()
    assert latest is not None and latest[0] == 2 and latest[1].previous_metadata_seq_num == 0
    assert schema_log.previous() == _entry(V1, 0)
    (tmp_path / "log" / "notes.txt").write_text("ignored, as Delta's HDFSMetadataLog ignores it")
    assert schema_log.sequence_numbers() == [0, 1, 2]


def test_a_lost_race_for_the_next_entry_is_delta_s_location_conflict(tmp_path: Path) -> None:
    schema_log = SchemaLog(str(tmp_path / "log"), "t-1")
    schema_log.append(_entry(V1, 0))
    # The name of entry 1 is taken by something the listing does not count as an entry (as a rival stream's file
    # is, between this stream's listing and its write): the put-if-absent of entry 1 loses.
    (tmp_path / "log" / "1").mkdir()
    with pytest.raises(SchemaTrackingError, match=r"DELTA_STREAMING_SCHEMA_LOCATION_CONFLICT"):
        schema_log.append(_entry(RENAMED, 4))
    assert schema_log.sequence_numbers() == [0]


def test_a_log_of_another_table_or_a_broken_entry_is_refused(tmp_path: Path) -> None:
    SchemaLog(str(tmp_path / "log"), "t-1").append(_entry(V1, 0))
    with pytest.raises(
        SchemaTrackingError, match=r"INCOMPATIBLE_DELTA_TABLE_ID.*Persisted table id: t-1, Table id: t-2"
    ):
        SchemaLog(str(tmp_path / "log"), "t-2").latest()
    (tmp_path / "log" / "1").write_text("")
    with pytest.raises(SchemaTrackingError, match=r"DELTA_STREAMING_SCHEMA_LOG_DESERIALIZE_FAILED"):
        SchemaLog(str(tmp_path / "log"), "t-1").latest()
    (tmp_path / "log" / "1").write_text('v1\n{"tableId":"t-1","deltaCommitVersion":"two"}')
    with pytest.raises(
        SchemaTrackingError, match=r"DELTA_STREAMING_SCHEMA_LOG_PARSE_SCHEMA_FAILED.*deltaCommitVersion"
    ):
        SchemaLog(str(tmp_path / "log"), "t-1").latest()


def test_the_log_folder_and_its_place_under_the_checkpoint(tmp_path: Path) -> None:
    assert log_folder("/ck/schema/", "t-1", None) == "/ck/schema/_schema_log_t-1"
    assert log_folder("/ck/schema", "t-1", "left") == "/ck/schema/_schema_log_t-1_left"
    check_under_checkpoint(str(tmp_path / "ck" / "schema" / "_schema_log_t-1"), str(tmp_path / "ck"))
    check_under_checkpoint("file:" + str(tmp_path / "ck" / "s"), str(tmp_path / "ck") + "/")
    for outside in (tmp_path / "elsewhere", tmp_path / "ck2" / "s"):
        with pytest.raises(OptionError, match=r"schemaTrackingLocation.*must be placed under checkpoint location"):
            check_under_checkpoint(str(outside), str(tmp_path / "ck"))
    assert tracking_root({"schemaLocation": "/ck/s"}) == "/ck/s"
    assert tracking_root({"SCHEMATRACKINGLOCATION": "/ck/t", "schemaLocation": "/ck/s"}) == "/ck/t"
    assert tracking_root({}) is None
    with pytest.raises(OptionError, match=r"schemaTrackingLocation"):
        tracking_root({"schemaTrackingLocation": " "})


def test_the_checkpoint_hash_is_javas_string_hash_code() -> None:
    assert checkpoint_hash("") == 0
    assert checkpoint_hash("hello") == 99162322
    assert checkpoint_hash("polygenelubricants") == -(2**31)
    assert checkpoint_hash("file:/tmp/ck/sources/0") == _java_hash("file:/tmp/ck/sources/0")


def _java_hash(text: str) -> int:
    value = 0
    for char in text:
        value = (value * 31 + ord(char)) % 2**32
    return value - 2**32 if value >= 2**31 else value


def test_what_changed_is_matched_by_physical_name() -> None:
    assert schema_change(V1, RENAMED).renamed == (("v", "w"),)
    assert schema_change(V1, RENAMED).name == "RENAME COLUMN"
    assert schema_change(V1, DROPPED).dropped == ("v",)
    assert schema_change(V1, WIDENED).widened == (("n", "INT", "BIGINT"),)
    assert schema_change(V1, [*V1, _field("x", "string", "col-d", 4)]).non_additive is False
    narrowed = schema_change(WIDENED, V1)
    assert narrowed.incompatible and not narrowed.non_additive
    dropped_and_added = [*DROPPED, _field("v", "integer", "col-e", 5)]
    assert schema_change(V1, dropped_and_added).dropped == ("v",)  # a drop, not a type change
    nested = [_field("s", {"type": "struct", "fields": [_field("p", "string", "col-p", 2)]}, "col-s", 1)]
    renamed_inside = [_field("s", {"type": "struct", "fields": [_field("q", "string", "col-p", 2)]}, "col-s", 1)]
    assert schema_change(nested, renamed_inside).renamed == (("s.p", "s.q"),)
    renamed_outside = [_field("t", {"type": "struct", "fields": [_field("p", "string", "col-p", 2)]}, "col-s", 1)]
    assert schema_change(nested, renamed_outside).renamed == (("s", "t"),)


@pytest.mark.parametrize(
    ("after", "unblocking"),
    [(RENAMED, [UNBLOCK_RENAME_CONF]), (DROPPED, [UNBLOCK_DROP_CONF]), (WIDENED, [UNBLOCK_TYPE_CHANGE_CONF])],
    ids=["rename", "drop", "widening"],
)
def test_a_non_additive_change_waits_for_the_user(after: list[dict[str, Any]], unblocking: list[str]) -> None:
    path = "file:/tmp/ck/sources/0"
    ckpt = checkpoint_hash(path)
    before, now = _entry(V1, 0, path), _entry(after, 4, path)
    with pytest.raises(SchemaTrackingError) as err:
        check_unblocked(before, now, options={}, confs={}, metadata_path=path)
    text = str(err.value)
    assert text.startswith("[DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION]")
    assert "between Delta version 0 and 4" in text
    for conf in unblocking:
        assert f"SET {conf}.ckpt_{ckpt} = 4;" in text
        assert f'SET {conf}.ckpt_{ckpt} = "always";' in text
        assert f'SET {conf} = "always";' in text
    option = unblocking[0].rsplit(".", 1)[1]
    assert f'.option("{option}", "4")' in text
    for options, confs in [
        ({option: "always"}, {}),
        ({option.lower(): "4"}, {}),
        ({}, {unblocking[0]: "always"}),
        ({}, {f"{unblocking[0]}.ckpt_{ckpt}": "4"}),
        ({}, {f"{unblocking[0]}.ckpt_{ckpt}": '"always"'}),
    ]:
        check_unblocked(before, now, options=options, confs=confs, metadata_path=path)
    for options, confs in [
        ({option: "3"}, {}),
        ({}, {f"{unblocking[0]}.ckpt_{ckpt + 1}": "always"}),
        ({}, {unblocking[0]: "4"}),  # a global conf takes "always" only
    ]:
        with pytest.raises(
            SchemaTrackingError, match=r"^\[DELTA_STREAMING_CANNOT_CONTINUE_PROCESSING_POST_SCHEMA_EVOLUTION\]"
        ):
            check_unblocked(before, now, options=options, confs=confs, metadata_path=path)


def test_rename_and_drop_share_one_conf_and_an_additive_change_needs_none() -> None:
    both = [_field("id", "long", "col-a", 1), _field("w", "string", "col-b", 2)]
    with pytest.raises(SchemaTrackingError, match=r"RENAME AND DROP COLUMN") as err:
        check_unblocked(_entry(V1, 0), _entry(both, 2), options={}, confs={}, metadata_path="p")
    assert UNBLOCK_RENAME_AND_DROP_CONF in str(err.value)
    confs = {UNBLOCK_RENAME_AND_DROP_CONF: "always"}
    check_unblocked(_entry(V1, 0), _entry(both, 2), options={}, confs=confs, metadata_path="p")
    check_unblocked(
        _entry(V1, 0), _entry([*V1, _field("x", "long", "col-d", 4)], 2), options={}, confs={}, metadata_path="p"
    )
    with pytest.raises(SchemaTrackingError, match=r"no widening"):
        check_unblocked(_entry(WIDENED, 0), _entry(V1, 2), options={}, confs={}, metadata_path="p")


def test_barrier_offsets_are_source_version_3_and_sort_between_the_base_and_the_files() -> None:
    base = DeltaSourceOffset("t-1", 4, -1, False)
    barrier = DeltaSourceOffset("t-1", 4, -20, False)
    post = DeltaSourceOffset("t-1", 4, -19, False)
    first = DeltaSourceOffset("t-1", 4, 0, False)
    assert base.key < barrier.key < post.key < first.key < DeltaSourceOffset("t-1", 5, -1, False).key
    assert base.to_json()["sourceVersion"] == 1 and barrier.to_json()["sourceVersion"] == 3
    assert DeltaSourceOffset.from_json(barrier.to_json()) == barrier
    assert DeltaSourceOffset.from_json(post.to_json()) == post
    with pytest.raises(SourceOffsetError, match=r"DELTA_INVALID_SOURCE_OFFSET_FORMAT"):
        DeltaSourceOffset.from_json({**first.to_json(), "sourceVersion": 3})
    with pytest.raises(SourceOffsetError, match=r"DELTA_INVALID_SOURCE_OFFSET_FORMAT"):
        DeltaSourceOffset.from_json({**barrier.to_json(), "sourceVersion": 1})
    with pytest.raises(SourceOffsetError, match=r"DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION"):
        DeltaSourceOffset.from_json({**first.to_json(), "sourceVersion": 4})
    with pytest.raises(SourceOffsetError, match=r"DELTA_INVALID_SOURCE_VERSION\] sourceVersion\(2\)"):
        DeltaSourceOffset.from_json({**first.to_json(), "sourceVersion": 2})


def _planned_table(tmp_path: Path) -> Path:
    """A table of two appends (table versions 0, 1), column mapping turned on (2), a rename (3): written by
    delta-rs and sparkonce's ALTER TABLE, no Spark."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from sparkonce.delta.ops.alter import alter_properties
    from sparkonce.delta.ops.alter_columns import rename_column

    table = tmp_path / "source"
    for rows in ([1, 2], [3]):
        data = pa.table({"id": pa.array(rows, pa.int64()), "v": pa.array([str(r) for r in rows])})
        write_deltalake(str(table), data, mode="append")
    alter_properties(str(table), set={"delta.columnMapping.mode": "name"})
    rename_column(str(table), ["v"], "w")
    return table


def test_the_planner_ends_a_batch_at_the_change_and_logs_it_when_the_batch_is_done(tmp_path: Path) -> None:
    """The offsets a stream with schema tracking plans over a rename (driver-side planning only, no Spark)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.delta.read.stream import DeltaStreamReader
    from sparkonce.delta.table.options import StreamReadOptions

    table = _planned_table(tmp_path)
    snapshot = DeltaLog(str(table)).snapshot(2)
    table_id = str(snapshot.metadata["id"])
    root = str(tmp_path / "ck" / "_schema")
    schema_log = SchemaLog(log_folder(root, table_id, None), table_id)
    schema_log.append(PersistedMetadata.of(table_id, 2, snapshot.metadata, snapshot.protocol, "file:/ck/sources/0"))
    options = StreamReadOptions.parse({"path": str(table), "schemaTrackingLocation": root, "startingVersion": "1"})
    old = StructType([StructField("id", LongType()), StructField("v", StringType())])
    reader = DeltaStreamReader(options, old)

    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {
        "sourceVersion": 3,
        "reservoirId": table_id,
        "reservoirVersion": 3,
        "index": -20,
        "isStartingVersion": False,
    }
    assert [f.table_version for f in reader.batch_files(start, end)] == [1]  # the batch before the rename
    post = reader.latestOffset(end, ReadAllAvailable())
    assert (post["sourceVersion"], post["index"]) == (3, -19)
    assert reader.latestOffset(end, ReadAllAvailable()) == post  # planned again: the same
    with pytest.raises(SchemaTrackingError, match=r"DELTA_STREAMING_METADATA_EVOLUTION.*\"name\":\"w\""):
        reader.commit(end)
    latest = schema_log.latest()
    assert latest is not None and latest[0] == 1
    assert latest[1].delta_commit_version == 3 and [f["name"] for f in latest[1].fields] == ["id", "w"]
    assert latest[1].source_metadata_path == "file:/ck/sources/0"

    new = StructType([StructField("id", LongType()), StructField("w", StringType())])
    restarted = DeltaStreamReader(options, new)
    assert restarted.latestOffset(post, ReadAllAvailable()) == post  # nothing after the rename yet
    restarted.commit(end)  # the barrier is behind the entry now: nothing to do
    assert schema_log.sequence_numbers() == [0, 1]


def test_a_barrier_committed_before_its_entry_was_written_is_logged_at_the_next_offset(tmp_path: Path) -> None:
    """A driver killed between ``offsets/N+1`` (the post-barrier offset) and the barrier's commit: after the
    restart, the next ``latestOffset`` from the post-barrier offset writes the entry and stops the query."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.delta.read.stream import DeltaStreamReader
    from sparkonce.delta.table.options import StreamReadOptions

    table = _planned_table(tmp_path)
    snapshot = DeltaLog(str(table)).snapshot(2)
    table_id = str(snapshot.metadata["id"])
    root = str(tmp_path / "ck" / "_schema")
    schema_log = SchemaLog(log_folder(root, table_id, None), table_id)
    schema_log.append(PersistedMetadata.of(table_id, 2, snapshot.metadata, snapshot.protocol, ""))
    options = StreamReadOptions.parse({"path": str(table), "schemaTrackingLocation": root, "startingVersion": "2"})
    reader = DeltaStreamReader(options, StructType([StructField("id", LongType()), StructField("v", StringType())]))
    post = {
        "sourceVersion": 3,
        "reservoirId": table_id,
        "reservoirVersion": 3,
        "index": -19,
        "isStartingVersion": False,
    }
    with pytest.raises(SchemaTrackingError, match=r"DELTA_STREAMING_METADATA_EVOLUTION"):
        reader.latestOffset(post, ReadAllAvailable())
    assert schema_log.sequence_numbers() == [0, 1]


def test_consecutive_metadata_only_commits_are_one_change_when_the_stream_is_defined(tmp_path: Path) -> None:
    """Delta's ``mergeConsecutiveSchemaChanges``: an entry followed by metadata-only commits (column mapping turned
    on, then a rename, then a drop) is replaced, when the stream is defined, by the entry of the last of them,
    pointing at the entry before the one it replaces; a commit with files ends the look-ahead."""
    from sparkonce.delta.log.delta_log import DeltaLog
    from sparkonce.delta.ops.alter_columns import drop_columns
    from sparkonce.delta.read.stream import tracked_entry
    from sparkonce.delta.table.options import StreamReadOptions

    table = _planned_table(tmp_path)
    drop_columns(str(table), [["w"]])  # table version 4, metadata only
    delta_log = DeltaLog(str(table))
    table_id = str(delta_log.snapshot(1).metadata["id"])
    root = str(tmp_path / "ck" / "_schema")
    schema_log = SchemaLog(log_folder(root, table_id, None), table_id)
    first = delta_log.snapshot(1)
    schema_log.append(PersistedMetadata.of(table_id, 1, first.metadata, first.protocol, ""))
    options = StreamReadOptions.parse({"path": str(table), "schemaTrackingLocation": root})
    assert tracked_entry(options, table_id) == schema_log.entry(0)  # table version 1 added files: no look-ahead

    second = delta_log.snapshot(2)
    schema_log.append(PersistedMetadata.of(table_id, 2, second.metadata, second.protocol, ""))
    merged = tracked_entry(options, table_id)
    assert merged is not None and merged.delta_commit_version == 4
    assert [f["name"] for f in merged.fields] == ["id"]
    assert merged.previous_metadata_seq_num == 0
    assert schema_log.sequence_numbers() == [0, 1, 2]
    assert schema_log.previous() == schema_log.entry(0)
    assert tracked_entry(options, table_id) == merged  # defined again: nothing more to merge
