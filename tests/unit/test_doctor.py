"""``diagnose``: the next-start explanation and every finding, on crafted checkpoints and real tables."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from sparkonce.checkpoint import read_checkpoint
from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.errors import CheckpointError, DeltaLogError, TableNotFoundError
from sparkonce.kafka.offsets import TopicPartition
from sparkonce.ops.doctor import DoctorReport, diagnose
from tests.unit.doctor_helpers import make_checkpoint, raw_rows, stream_commit

QID = "11111111-2222-3333-4444-555555555555"
OLD_QID = "99999999-8888-7777-6666-555555555555"
NOW = 1_800_000_000_000


def codes(report: DoctorReport, *, at_least: str = "info") -> set[str]:
    rank = {"info": 0, "warning": 1, "error": 2}
    return {f.code for f in report.findings if rank[f.severity] >= rank[at_least]}


def write_batches(table: Path, query_id: str, batches: Iterable[int], *, per_batch: int = 10) -> None:
    for b in batches:
        stream_commit(table, query_id, b, raw_rows("events", 0, range(b * per_batch, (b + 1) * per_batch)))


def run(cp: Path, *tables: Path, **kwargs: object) -> DoctorReport:
    return diagnose(cp, tables=list(tables), now_ms=NOW, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ next start matrix
@pytest.mark.parametrize(
    ("planned", "committed", "table_batches", "expect_in_text", "expect_codes"),
    [
        (range(5), range(5), range(5), ["Batch 4 is planned and committed", "batch 5", "agree: safe"], set()),
        (
            range(6),
            range(5),
            range(6),
            ["Batch 5 is planned but not committed", "txn(" + QID + ", 5) at table version 5", "skipped: safe"],
            set(),
        ),
        (range(6), range(5), range(5), ["holds txn(" + QID + ", 4)", "batch 5 will be written once: safe"], set()),
        (range(3), range(3), range(6), ["sink will skip batches 3-5", "data lost"], {"txn-ahead"}),
        (range(6), range(6), range(3), ["Batch 5 is planned and committed"], {"txn-behind"}),
        (
            range(6),
            range(3),
            range(3),
            ["Batches 3-4 are planned but not committed", "never reached"],
            {"txn-behind", "uncommitted-batches"},
        ),
    ],
    ids=["in-step", "planned-already-written", "planned-not-written", "txn-ahead", "txn-behind", "several-uncommitted"],
)
def test_next_start_with_table(
    tmp_path: Path,
    planned: range,
    committed: range,
    table_batches: range,
    expect_in_text: list[str],
    expect_codes: set[str],
) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=planned, committed=committed)
    table = tmp_path / "raw"
    write_batches(table, QID, table_batches)
    report = run(cp, table)
    for text in expect_in_text:
        assert text in report.next_start, report.next_start
    assert codes(report, at_least="warning") == expect_codes
    assert report.healthy == (not expect_codes)
    (t,) = report.tables
    assert t.txn_version == table_batches[-1]


def test_empty_checkpoint(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    cp.mkdir()
    report = run(cp)
    assert report.next_start.startswith("No batch has been planned yet")
    assert "new query id" in report.next_start
    assert codes(report) == {"no-table-examined"} and report.healthy  # no --table, none recorded


def test_delta_jvm_streaming_table(fixtures_dir: Path, tmp_path: Path) -> None:
    """delta-0.2.0's table version 3 is a real STREAMING UPDATE with txn(e4a20b59..., 0)."""
    qid = "e4a20b59-dd0e-4c50-b074-e8ae4786df30"
    cp = make_checkpoint(tmp_path / "cp", query_id=qid, planned=[0, 1], committed=[0])
    report = run(cp, fixtures_dir / "delta-tables" / "delta-0.2.0", history_scan="full")
    assert f"holds txn({qid}, 0) at table version 3" in report.next_start
    assert "batch 1 will be written once: safe" in report.next_start
    assert report.timeline[0].table_versions == (3,)


# ------------------------------------------------------------------------------------------ checkpoint findings
def test_metadata_missing(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", query_id=None, planned=range(3), committed=range(3))
    report = run(cp)
    assert "metadata-missing" in codes(report, at_least="error")
    assert report.query_id is None


@pytest.mark.parametrize("content", ["", '{"id":', "not json at all", '{"other":1}'])
def test_metadata_garbled(tmp_path: Path, content: str) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(2), committed=range(2))
    (cp / "metadata").write_text(content)
    report = run(cp)
    (finding,) = [f for f in report.findings if f.code == "metadata-corrupt"]
    assert finding.path == str(cp / "metadata") and str(cp / "metadata") in finding.message


@pytest.mark.parametrize(
    ("folder", "content", "what"),
    [
        ("offsets", 'v1\n{"batchWatermarkMs":0,', "offset metadata is not valid JSON"),
        ("offsets", "", "empty offsets file"),
        ("commits", "v7\n{}", "newer than"),
        ("commits", b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_garbled_batch_files_become_findings(tmp_path: Path, folder: str, content: str | bytes, what: str) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    target = cp / folder / "1"
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    report = run(cp)
    (finding,) = [f for f in report.findings if f.code == "file-malformed"]
    assert finding.severity == "error" and finding.path == str(target)
    assert what in finding.message and str(target) in finding.message


def test_fixture_gap_in_offsets(fixtures_dir: Path) -> None:
    report = run(fixtures_dir / "spark-checkpoints" / "checkpoint-test-offsetId-commitId-inconsistent")
    (gap,) = [f for f in report.findings if f.code == "offsets-gap"]
    assert gap.details == {"missing": [3]}
    assert report.last_planned == 4 and report.last_committed is None


@pytest.mark.parametrize(
    ("planned", "committed", "code"),
    [
        ([0, 1, 3], [0, 1], "offsets-gap"),
        ([0, 1, 2], [0, 2], "commits-gap"),
        ([0, 1, 2], [0, 1, 2, 3, 4], "commits-ahead"),
        ([0, 1, 2, 3], [0], "uncommitted-batches"),
        ([7], [6], "offsets-previous-missing"),
    ],
)
def test_log_shape_findings(tmp_path: Path, planned: list[int], committed: list[int], code: str) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=planned, committed=committed)
    assert code in codes(run(cp))


def test_purged_early_batches_are_not_a_gap(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(100, 110), committed=range(100, 110))
    report = run(cp)
    assert codes(report) == {"no-table-examined"}
    assert "Batch 109 is planned and committed" in report.next_start


def test_crc_and_tmp_files(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    (cp / "offsets" / ".0.crc").write_bytes(b"crc\x00")
    (cp / "offsets" / ".3.6f1c7a2e-9b7d-4a1e-8d8c-1b2a3c4d5e6f.tmp").write_text("v1\n")
    report = run(cp)
    assert codes(report) == {"temp-files", "no-table-examined"}
    assert report.healthy
    (cp / "offsets" / ".3.0a1b2c3d-0000-4000-8000-000000000000.tmp").write_text("v1\n")
    assert "concurrent-writers" in codes(run(cp), at_least="error")


def test_timestamps_going_backwards(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    path = cp / "offsets" / "2"
    path.write_text(path.read_text().replace('"batchTimestampMs":1700000002000', '"batchTimestampMs":1600000000000'))
    assert "timestamps-interleaved" in codes(run(cp), at_least="warning")


# ------------------------------------------------------------------------------------------ table findings
def test_same_batches_under_two_app_ids(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    write_batches(table, OLD_QID, range(4))  # table versions 0-3
    write_batches(table, QID, range(3))  # table versions 4-6: the checkpoint was recreated
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    report = run(cp, table)
    (overlap,) = [f for f in report.findings if f.code == "app-ids-overlap"]
    assert overlap.severity == "error"
    assert overlap.details["batch_ids"] == [0, 1, 2]
    assert overlap.details["table_versions"] == {OLD_QID: [0, 1, 2], QID: [4, 5, 6]}
    assert "batches 0-2" in overlap.message
    assert report.tables[0].app_ids == {OLD_QID: 3, QID: 2}


def test_offsets_recorded_by_sink_differ_from_checkpoint(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    state = read_checkpoint(cp)
    table = tmp_path / "raw"
    for b in range(3):
        recorded = state.offsets[b].raw if b != 1 else state.offsets[b].raw.replace("20", "25")
        stream_commit(table, QID, b, raw_rows("events", 0, [b]), offsets_log=recorded, checkpoint=cp)
    report = run(cp, table, history_scan="full")
    (mismatch,) = [f for f in report.findings if f.code == "offsets-mismatch-table"]
    assert mismatch.details["batches"] == [{"batch_id": 1, "table_version": 1}]


def test_batch_written_twice(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    write_batches(table, QID, range(3))
    stream_commit(table, QID, 1, raw_rows("events", 0, range(10, 20)))  # a sink that ignored its txn
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    report = run(cp, table, history_scan="full")
    (twice,) = [f for f in report.findings if f.code == "batch-written-twice"]
    assert twice.details["batches"] == {"1": [1, 3]}


@pytest.mark.parametrize(
    ("age_days", "code", "severity"), [(1, "txn-retention", "warning"), (30, "txn-retention-expired", "error")]
)
def test_txn_retention(tmp_path: Path, age_days: int, code: str, severity: str) -> None:
    table = tmp_path / "raw"
    updated = NOW - age_days * 86_400_000
    write_deltalake(
        str(table),
        raw_rows("events", 0, range(10)),
        configuration={"delta.setTransactionRetentionDuration": "interval 7 days"},
        commit_properties=CommitProperties(app_transactions=[Transaction(QID, 0, updated)]),
    )
    cp = make_checkpoint(tmp_path / "cp", planned=[0, 1], committed=[0])
    report = run(cp, table)
    (finding,) = [f for f in report.findings if f.code.startswith("txn-retention")]
    assert (finding.code, finding.severity) == (code, severity)
    assert finding.details["retention_ms"] == 7 * 86_400_000


def test_invalid_txn_retention_is_a_finding_naming_the_property(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    write_deltalake(
        str(table),
        raw_rows("events", 0, range(10)),
        configuration={"delta.setTransactionRetentionDuration": "soon"},
        commit_properties=CommitProperties(app_transactions=[Transaction(QID, 0, NOW)]),
    )
    cp = make_checkpoint(tmp_path / "cp", planned=[0, 1], committed=[0])
    (finding,) = [f for f in run(cp, table).findings if f.code == "table-property-invalid"]
    assert finding.severity == "error"
    assert "delta.setTransactionRetentionDuration = 'soon'" in finding.message


def test_orphan_files_with_bytes(tmp_path: Path) -> None:
    table = tmp_path / "raw"
    write_batches(table, QID, range(2))
    (table / "part-00000-failed-attempt.snappy.parquet").write_bytes(b"x" * 123)
    (table / ".part-00000-failed-attempt.snappy.parquet.crc").write_bytes(b"c")
    cp = make_checkpoint(tmp_path / "cp", planned=range(2), committed=range(2))
    report = run(cp, table)
    (orphans,) = [f for f in report.findings if f.code == "orphan-files"]
    assert orphans.details == {"files": ["part-00000-failed-attempt.snappy.parquet"], "count": 1, "bytes": 123}
    assert report.tables[0].orphan_bytes == 123


@pytest.mark.parametrize(
    ("name", "orphans"),
    [
        # 5 of its 15 deletion vector files are referenced by no Delta commit at all (checked by decoding every
        # pathOrInlineDv in the log): real unreferenced files; the other 10 must be recognised as in use.
        ("dv-partitioned-with-checkpoint", 5),
        ("data-reader-partition-values", 0),
        ("basic-with-inserts-overwrite-restore", 0),
        ("basic-with-inserts-deletes-checkpoint", 0),
    ],
)
def test_fixture_tables_orphans(fixtures_dir: Path, tmp_path: Path, name: str, orphans: int) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=[0], committed=[0])
    report = run(cp, fixtures_dir / "delta-tables" / name)
    assert report.tables[0].orphan_files == orphans
    found = [f for f in report.findings if f.code == "orphan-files"]
    if orphans:
        assert all(n.startswith("deletion_vector_") for n in found[0].details["files"])
    else:
        assert not found


def test_file_sink_outputs_missing_from_spark_metadata(tmp_path: Path) -> None:
    """Seed 001: a copied part file is not in _spark_metadata, so a globbed read would count it twice."""
    sink = tmp_path / "destination"
    (sink / "partition1=value1").mkdir(parents=True)
    listed = sink / "partition1=value1" / "part-00000-a.c000.snappy.parquet"
    listed.write_bytes(b"p" * 50)
    (sink / "partition1=value1" / "part-00000-a.c000-copy.snappy.parquet").write_bytes(b"p" * 50)
    (sink / "_spark_metadata").mkdir()
    entry = (
        f'{{"path":"file://{listed}","size":50,"isDir":false,"modificationTime":1,'
        '"blockReplication":1,"blockSize":33554432,"action":"add"}'
    )
    (sink / "_spark_metadata" / "0").write_text("v1\n" + entry)
    cp = make_checkpoint(tmp_path / "cp", planned=[0], committed=[0])
    report = run(cp, sink)
    (unlisted,) = [f for f in report.findings if f.code == "file-sink-unlisted"]
    assert unlisted.details["files"] == ["partition1=value1/part-00000-a.c000-copy.snappy.parquet"]
    assert unlisted.details["bytes"] == 50
    assert report.tables[0].kind == "file-sink"


def test_unknown_paths(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(tmp_path / 'nope'))}: checkpoint directory not found"):
        diagnose(tmp_path / "nope")
    cp = make_checkpoint(tmp_path / "cp", planned=[0], committed=[0])
    with pytest.raises(
        TableNotFoundError,
        match=rf"^{re.escape(str(tmp_path))} is neither a Delta table \(_delta_log\) nor a file sink",
    ):
        diagnose(cp, tables=[tmp_path])


def test_unreadable_table_is_a_finding(fixtures_dir: Path, tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(fixtures_dir / "delta-tables" / "checkpoint", table)
    (table / "_delta_log" / f"{14:020d}.json").write_text("{garbage")
    cp = make_checkpoint(tmp_path / "cp", planned=[0], committed=[0])
    (finding,) = [f for f in run(cp, table).findings if f.code == "table-unreadable"]
    assert "00000000000000000014.json" in finding.message and "table version 14" in finding.message


# ------------------------------------------------------------------------------------------ kafka
def fake_broker(marks: dict[TopicPartition, tuple[int, int]]):  # type: ignore[no-untyped-def]
    def fetch(partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: marks[tp] for tp in partitions if tp in marks}

    return fetch


@pytest.mark.parametrize(
    ("committed", "marks", "code"),
    [
        (range(5), {TopicPartition("events", 0): (0, 100)}, None),
        (range(5), {TopicPartition("events", 0): (70, 100)}, "kafka-offsets-expired"),  # next start is offset 50
        (range(4), {TopicPartition("events", 0): (45, 100)}, "kafka-offsets-expired"),  # re-run of batch 4 starts at 40
        (range(5), {TopicPartition("events", 0): (0, 20)}, "kafka-offsets-ahead"),
        (range(5), {}, "kafka-partition-missing"),
    ],
)
def test_kafka_earliest_offsets(
    tmp_path: Path, committed: range, marks: dict[TopicPartition, tuple[int, int]], code: str | None
) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(5), committed=committed)
    report = run(cp, watermarks=fake_broker(marks))
    (state,) = report.kafka
    assert state.next_start_offset == (50 if committed == range(5) else 40)
    assert codes(report, at_least="warning") == ({code} if code else set())


def test_kafka_fixture_offsets(fixtures_dir: Path) -> None:
    cp = (
        fixtures_dir / "spark-checkpoints" / "kafka-0-10-sql" / "checkpoint-version-2.4.3-kafka-include-headers-default"
    )
    topic = "spark-test-topic-2b8619f5-d3c4-4c2d-b5d1-8d9d9458aa62"
    # Batch 0 is planned, not committed: its re-run starts from the initial offsets, which were not exported.
    report = run(cp, watermarks=fake_broker({}))
    assert codes(report) == {"kafka-no-offsets", "batch0-rerun", "no-table-examined"}
    state = read_checkpoint(cp)
    assert state.offsets[0].source_offset("0")[topic]["4"] == 3


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("interval 7 days", 7 * 86_400_000),
        ("interval 1 hour 30 minutes", 5_400_000),
        ("2 weeks", 1_209_600_000),
        ("INTERVAL 1 Day", 86_400_000),
    ],
)
def test_parse_interval(text: str, ms: int) -> None:
    assert parse_interval_ms(text, name="delta.x") == ms


@pytest.mark.parametrize(
    "text", ["soon", "", "interval", "7", "interval 7 fortnights", "-1 day", "nan hours", "1 day 2"]
)
def test_parse_interval_refuses_bad_input_naming_property_and_value(text: str) -> None:
    with pytest.raises(DeltaLogError, match=rf"delta\.setTransactionRetentionDuration = {re.escape(repr(text))}"):
        parse_interval_ms(text, name="delta.setTransactionRetentionDuration")


@pytest.mark.parametrize(("mode", "flagged"), [("auto", True), ("full", True), ("window", False)])
def test_history_scan_modes(tmp_path: Path, mode: str, flagged: bool) -> None:
    table = tmp_path / "raw"
    write_batches(table, OLD_QID, range(3))
    write_batches(table, QID, range(3))
    cp = make_checkpoint(tmp_path / "cp", planned=range(3), committed=range(3))
    report = run(cp, table, history_scan=mode)
    assert ("app-ids-overlap" in codes(report)) is flagged
    assert report.timeline[-1].table_versions == (5,)  # batch 2 of this query, found in every mode


def test_checkpoint_scan_window_reads_only_the_newest_files(tmp_path: Path) -> None:
    cp = make_checkpoint(tmp_path / "cp", planned=range(30), committed=range(30))
    (cp / "offsets" / "3").write_text("v1\n{trunc")  # damage in an old file, outside a 10-batch window
    (cp / "commits" / "12").unlink()  # a gap is found from the listing, in any mode
    window = run(cp, timeline_batches=10)
    assert codes(window) == {"commits-gap", "no-table-examined"}
    assert window.unread_checkpoint_files == 20 + 19
    assert [row.batch_id for row in window.timeline] == list(range(20, 30))
    full = run(cp, timeline_batches=10, checkpoint_scan="full")
    assert codes(full) == {"commits-gap", "file-malformed", "no-table-examined"}
    assert full.unread_checkpoint_files == 0
    (cp / "offsets" / "28").write_text("v1\n{trunc")  # inside the window: found by both
    assert "file-malformed" in codes(run(cp, timeline_batches=10))


def test_batch_zero_planned_not_committed_is_a_normal_rerun(tmp_path: Path) -> None:
    """Issue 13: a crash inside batch 0 leaves offsets/0 only; the next start derives batch 0's start from it."""
    from sparkonce.checkpoint import OffsetSeqMetadata, write_metadata, write_offsets

    cp = tmp_path / "cp"
    cp.mkdir()
    write_metadata(cp, QID)
    end = {"sourceVersion": 1, "reservoirId": "t-1", "reservoirVersion": 7, "index": 2, "isStartingVersion": True}
    write_offsets(cp, 0, metadata=OffsetSeqMetadata(0, NOW, {}), sources=[json.dumps(end)])
    report = run(cp)
    assert report.healthy
    (rerun,) = [f for f in report.findings if f.code == "batch0-rerun"]
    assert rerun.severity == "info"
    assert "table version 7, index 2 of its initial snapshot" in rerun.message
    assert rerun.details == {"end_offsets": {"0": end}}
    assert "Batch 0 is planned but not committed" in report.next_start
    assert "derive them from the end in offsets/0" in report.next_start
    # Once batch 0 is committed, or a later batch is planned, the finding goes away.
    write_offsets(cp, 1, metadata=OffsetSeqMetadata(0, NOW, {}), sources=[json.dumps(end)])
    assert "batch0-rerun" not in codes(run(cp))
