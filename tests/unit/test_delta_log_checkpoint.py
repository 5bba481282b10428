"""Delta log checkpoints sparkonce writes (sparkonce.delta.log.log_checkpoint) next to the ones Delta's JVM writer
wrote.

The table is a real Delta-JVM table (Delta 3.0 on Spark 3.4: partitioned, deletion vectors, 15 DELETEs, a JVM
checkpoint at table version 10; tests/fixtures/delta-tables/dv-partitioned-with-checkpoint) plus one commit adding what
it lacks: a protocol with the domainMetadata feature, table properties, a ``txn``, a ``domainMetadata``, an ``add``
with ``tags`` and a ``remove`` carrying a deletion vector. The checkpoint sparkonce writes of it must have the JVM
checkpoint's Parquet schema, and delta-rs and sparkonce must read the table's state back from it unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from sparkonce.delta.log.clock import CLOCK_VARIABLE, clock_ms
from sparkonce.delta.log.delta_log import DeltaLog, Snapshot
from sparkonce.delta.log.log_checkpoint import _part_table, checkpoint_actions, checkpoint_table, write_checkpoint
from sparkonce.delta.log.table_view import current_table
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location

JVM_TABLE = "delta-tables/dv-partitioned-with-checkpoint"
JVM_CHECKPOINT = "_delta_log/00000000000000000010.checkpoint.parquet"
OURS = "_delta_log/00000000000000000016.checkpoint.parquet"
DV_FILE = "part=8/part-00001-7c58de64-d72f-4373-8d86-dfdc00fb264e.c000.snappy.parquet"
"""The file the JVM's DELETE at table version 15 gave a deletion vector (removed with it by commit 16)."""


def _commit(root: Path, table_version: int, actions: list[dict[str, Any]]) -> None:
    text = "\n".join(json.dumps(a) for a in actions) + "\n"
    (root / "_delta_log" / f"{table_version:020d}.json").write_text(text)


def every_action_table(fixtures_dir: Path, root: Path) -> None:
    """The JVM table copied to ``root`` plus commit 16 with every action kind sparkonce writes in a checkpoint."""
    shutil.copytree(fixtures_dir / JVM_TABLE, root)
    snapshot = DeltaLog(root).snapshot()
    metadata = dict(snapshot.metadata)
    metadata["configuration"] = {
        **metadata["configuration"],
        "delta.deletedFileRetentionDuration": "interval 100000 weeks",  # keeps the JVM's 2023 tombstones
        "delta.checkpointInterval": "16",
    }
    (root / "part=99").mkdir()
    data = pa.table({"col1": pa.array([7, 9], pa.int32()), "col2": ["x", "y"]})
    pq.write_table(data, root / "part=99" / "new.parquet")
    stats = {"numRecords": 2, "minValues": {"col1": 7, "col2": "x"}, "maxValues": {"col1": 9, "col2": "y"}}
    stats["nullCount"] = {"col1": 0, "col2": 0}
    dv_add = snapshot.files[DV_FILE]
    _commit(
        root,
        16,
        [
            {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}},
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["deletionVectors"],
                    "writerFeatures": ["deletionVectors", "domainMetadata"],
                }
            },
            {"metaData": metadata},
            {"txn": {"appId": "stream-a", "version": 7, "lastUpdated": 1_700_000_000_000}},
            {"domainMetadata": {"domain": "sparkonce.test", "configuration": '{"k":1}', "removed": False}},
            {
                "add": {
                    "path": "part=99/new.parquet",
                    "partitionValues": {"part": "99"},
                    "size": (root / "part=99" / "new.parquet").stat().st_size,
                    "modificationTime": 1_700_000_000_000,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                    "tags": {"INSERTION_TIME": "1700000000000000", "OPTIMIZE_TARGET_SIZE": "268435456"},
                }
            },
            {
                "remove": {
                    "path": DV_FILE,
                    "deletionTimestamp": 1_700_000_000_000,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": dv_add["partitionValues"],
                    "size": dv_add["size"],
                    "deletionVector": dv_add["deletionVector"],
                }
            },
        ],
    )


def _leaves(path: Path) -> dict[str, tuple[str, str, int, int]]:
    """The Parquet leaf columns of a checkpoint file: dotted path -> (physical type, logical type, max definition
    level, max repetition level), the optional ``*_parsed`` columns left out."""
    schema = pq.ParquetFile(path).schema
    found = {}
    for i in range(len(schema)):
        column = schema.column(i)
        if any(part.endswith("_parsed") for part in column.path.split(".")):
            continue
        found[column.path] = (
            column.physical_type,
            str(column.logical_type),
            column.max_definition_level,
            column.max_repetition_level,
        )
    return found


def test_a_sparkonce_checkpoint_has_the_parquet_schema_of_a_delta_jvm_checkpoint(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    write_checkpoint(table_location(str(root)), DeltaLog(root).snapshot())
    jvm, ours = _leaves(root / JVM_CHECKPOINT), _leaves(root / OURS)
    assert {c.split(".")[0] for c in jvm} == {"txn", "add", "remove", "metaData", "protocol", "domainMetadata"}
    assert {c: ours.get(c) for c in jvm} == jvm  # every column the JVM writes, same type, nesting and optionality
    assert sorted(set(ours) - set(jvm)) == ["add.clusteringProvider"]  # Delta's AddFile field for clustered tables
    protocol = [r for r in pq.read_table(root / OURS, columns=["protocol"]).column(0).to_pylist() if r]
    assert protocol == [  # reader version 3 / writer version 7: the feature lists set, as PROTOCOL.md requires
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors", "domainMetadata"],
        }
    ]


def _delta_rs_state(root: Path) -> dict[str, Any]:
    table = DeltaTable(str(root))
    adds = sorted(pa.table(table.get_add_actions(flatten=True)).to_pylist(), key=lambda r: r["path"])
    dvs = pa.table(table.deletion_vectors()).to_pylist()
    meta, protocol = table.metadata(), table.protocol()
    return {
        "version": table.version(),
        "adds": adds,
        "deletion_vectors": sorted((r["filepath"], r["selection_vector"]) for r in dvs),
        "txn": table.transaction_version("stream-a"),
        "metadata": (meta.id, meta.partition_columns, meta.configuration),
        "protocol": protocol,
    }


def _without_data_change(actions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {path: {k: v for k, v in a.items() if k != "dataChange"} for path, a in actions.items()}


def _state(snapshot: Snapshot) -> dict[str, Any]:
    """What a checkpoint must keep of a snapshot (``dataChange`` is false in a checkpoint)."""
    return {
        "table_version": snapshot.table_version,
        "metadata": snapshot.metadata,
        "protocol": snapshot.protocol,
        "files": _without_data_change(snapshot.files),
        "removes": _without_data_change(snapshot.removes),
        "tombstones": snapshot.tombstones,
        "tombstone_dvs": sorted(json.dumps(d, sort_keys=True) for d in snapshot.tombstone_dvs),
        "txns": snapshot.txns,
        "domains": snapshot.domains,
    }


def test_delta_rs_and_sparkonce_read_a_sparkonce_checkpoint_as_the_state_it_was_written_from(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    replayed = DeltaLog(root).snapshot()  # the JVM checkpoint and commits 11..16
    before = _delta_rs_state(root)
    written = write_checkpoint(table_location(str(root)), replayed)
    for old in [*root.glob("_delta_log/*.json"), root / JVM_CHECKPOINT]:  # as log cleanup leaves it: ours alone
        old.unlink()
    assert _delta_rs_state(root) == before
    assert before["version"] == 16 and before["txn"] == 7 and len(before["deletion_vectors"]) == 1
    read_back = DeltaLog(root).snapshot()
    assert read_back.checkpoint_version == 16
    assert _state(read_back) == _state(replayed) == _state(written.snapshot)
    # 15 tombstones of the JVM's DELETEs (8 of deletion vector updates: their old deletion vectors stay until
    # VACUUM), and the file commit 16 removed with its deletion vector: 2 logical files of one path
    assert len(read_back.removes) == 16 and len(read_back.tombstones) == 7
    assert sorted(bool(r.get("deletionVector")) for r in read_back.removes.values() if r["path"] == DV_FILE) == [
        False,
        True,
    ]
    assert read_back.files["part=99/new.parquet"]["tags"]["INSERTION_TIME"] == "1700000000000000"
    delta_rs_files = {r["path"]: (r["size_bytes"], r["num_records"], r["partition.part"]) for r in before["adds"]}
    ours = {
        path: (a["size"], json.loads(a["stats"])["numRecords"], int(a["partitionValues"]["part"]))
        for path, a in read_back.files.items()
    }
    assert ours == delta_rs_files


def test_tombstones_from_a_checkpoint_and_later_commits_equal_a_replay_from_version_0(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    write_checkpoint(table_location(str(root)), DeltaLog(root).snapshot())
    removes = DeltaLog(root).snapshot().removes.values()
    readded = next(r["path"] for r in removes if r["path"] != DV_FILE and not r.get("deletionVector"))
    add = {"path": readded, "partitionValues": {"part": readded[5]}, "size": 1, "modificationTime": 1}
    _commit(root, 17, [{"commitInfo": {"operation": "RESTORE"}}, {"add": {**add, "dataChange": True}}])
    from_checkpoint = DeltaLog(root).snapshot()
    assert from_checkpoint.checkpoint_version == 16 and readded not in from_checkpoint.removes
    replay = tmp_path / "replay"
    shutil.copytree(root, replay)
    for checkpoint in [*replay.glob("_delta_log/*.checkpoint.parquet"), replay / "_delta_log" / "_last_checkpoint"]:
        checkpoint.unlink()
    from_commits = DeltaLog(replay).snapshot()
    assert from_commits.checkpoint_version is None
    assert _state(from_checkpoint) == _state(from_commits)


def test_a_checkpoint_built_from_arrow_tombstones_equals_one_built_from_actions(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    replayed = DeltaLog(root).snapshot()  # tombstones: the JVM checkpoint's Arrow rows and commits' dicts
    written = write_checkpoint(table_location(str(root)), replayed).snapshot  # tombstones: Arrow rows only
    stamps = sorted(int(r["deletionTimestamp"]) for r in replayed.removes.values())
    # "now" 100,000 weeks after the middle tombstone: the older half has expired
    now = stamps[len(stamps) // 2] + 100_000 * 7 * 24 * 3600 * 1000
    for snapshot in (replayed, written):
        table = checkpoint_table(snapshot, now_ms=now)
        assert table.equals(_part_table(checkpoint_actions(snapshot, now_ms=now)))
        kept = [r for r in table.column("remove").to_pylist() if r]
        assert len(kept) == len(stamps) - len(stamps) // 2


def test_a_warped_retention_clock_drops_the_same_tombstones_from_arrow_as_from_actions(
    fixtures_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    every_action_table(fixtures_dir, root)
    written = write_checkpoint(table_location(str(root)), DeltaLog(root).snapshot()).snapshot
    stamps = sorted(int(r["deletionTimestamp"]) for r in written.removes.values())
    # the clock runs 1,000x from just before the oldest tombstone; "now" keeps the younger half of them
    monkeypatch.setenv(CLOCK_VARIABLE, f"{stamps[0] - 1}:1000")
    middle = stamps[len(stamps) // 2]
    now = clock_ms(middle) + 100_000 * 7 * 24 * 3600 * 1000  # the table's retention: interval 100000 weeks
    table = checkpoint_table(written, now_ms=now)
    assert table.equals(_part_table(checkpoint_actions(written, now_ms=now)))
    kept = [r["deletionTimestamp"] for r in table.column("remove").to_pylist() if r]
    assert sorted(kept) == [t for t in stamps if t >= middle] and len(kept) == len(stamps) - len(stamps) // 2


def _rewrite_column(checkpoint: Path, name: str, field_name: str, change: Any) -> None:
    """Rewrite one field of the ``name`` struct column of a checkpoint file with ``change(values)``."""
    table = pq.read_table(checkpoint)
    column = table.column(name).combine_chunks()
    children = [change(column.field(i)) if f.name == field_name else column.field(i) for i, f in enumerate(column.type)]
    names = [f.name for f in column.type]
    rebuilt = pa.StructArray.from_arrays(children, names=names, mask=column.is_null())
    pq.write_table(table.set_column(table.schema.get_field_index(name), name, rebuilt), checkpoint)


@pytest.mark.parametrize(
    ("name", "field_name", "change", "problem"),
    [
        ("remove", "path", lambda a: pa.array(range(len(a)), pa.int64()), "'remove' action has no string 'path'"),
        ("add", "size", lambda a: a.cast(pa.string()), "has a non-integer 'size'"),
    ],
)
def test_a_malformed_file_column_skips_the_checkpoint_naming_the_problem(
    fixtures_dir: Path, tmp_path: Path, name: str, field_name: str, change: Any, problem: str
) -> None:
    root = tmp_path / "t"
    shutil.copytree(fixtures_dir / JVM_TABLE, root)
    _rewrite_column(root / JVM_CHECKPOINT, name, field_name, change)
    snapshot = DeltaLog(root).snapshot()  # the checkpoint is skipped: the commits from table version 0 decide
    assert snapshot.checkpoint_version is None and snapshot.table_version == 15
    (note,) = snapshot.notes
    assert f"a {name!r} row of the Parquet checkpoint: " in note and problem in note


def test_large_string_paths_in_a_checkpoint_read_as_strings(fixtures_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(fixtures_dir / JVM_TABLE, root)
    expected = DeltaLog(root).snapshot()
    for name in ("add", "remove"):
        _rewrite_column(root / JVM_CHECKPOINT, name, "path", lambda a: a.cast(pa.large_string()))
    snapshot = DeltaLog(root).snapshot()
    assert snapshot.checkpoint_version == 10 and not snapshot.notes
    assert _state(snapshot) == _state(expected)
    assert checkpoint_table(snapshot).equals(checkpoint_table(expected))


def test_a_stream_that_wrote_a_checkpoint_keeps_its_snapshot_from_that_checkpoint(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    properties = {"delta.checkpointInterval": "2"}
    for batch_id in range(3):
        files = TableFileWriter(FileWriterOptions(location=table_location(table)))
        files.write(pa.table({"id": [batch_id]}, schema=schema))
        options: dict[str, Any] = {"new_table_properties": properties} if batch_id == 0 else {}
        commit_files(table, files.close(), data_schema=schema, mode="overwrite", txn=BatchTxn("s", batch_id), **options)
    kept = current_table(table)  # table version 2, checkpointed by its own commit: nothing read back
    assert kept is not None and kept.snapshot.checkpoint_version == 2
    assert kept.snapshot.tombstone_set == DeltaLog(table).snapshot().tombstone_set
    assert len(kept.snapshot.removes) == 2  # the two files the overwrites replaced
    assert DeltaTable(table).version() == 2
