"""Checkpoint file parsers and the writer, on real Spark-written files (fixtures and a pyspark 4.3 run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.checkpoint import (
    OffsetSeqMetadata,
    format_commit,
    format_metadata,
    format_offsets,
    parse_commit,
    parse_metadata,
    parse_offsets,
    parse_source_initial_offsets,
    read_checkpoint,
    read_file_log,
    write_commit,
    write_metadata,
    write_offsets,
)
from sparkonce.errors import CheckpointError

SPARK43 = Path(__file__).resolve().parent.parent / "data" / "spark43-rate"


def cps(fixtures_dir: Path) -> Path:
    return fixtures_dir / "spark-checkpoints"


@pytest.mark.parametrize(
    ("folder", "query_id", "offsets", "commits"),
    [
        ("checkpoint-version-2.1.0", "dddc5e7f-1e71-454c-8362-de184444fb5a", (0, 1), ()),
        ("checkpoint-test-offsetId-commitId-inconsistent", "d4358946-170c-49a7-823b-d8e4e9126616", (1, 2, 4), ()),
        ("checkpoint-version-2.3.1-without-commit-log-metadata", "73f7f943-0a08-4ffb-a504-9fa88ff7612a", (0, 1), ()),
        ("checkpoint-version-3.2.0-deduplication-with-repartition", "9538ada3-a233-4697-8b02-cc66250189a3", (0, 1), ()),
        ("checkpoint-version-4.0.0-tws-avro", "f3f30619-9175-4329-97a7-f5629deaad89", (0, 1), (1,)),
        (
            "kafka-0-10-sql/checkpoint-version-2.4.3-kafka-include-headers-default",
            "fc415a71-f0a2-4c3c-aeaf-f9e258c3f726",
            (0,),
            (),
        ),
    ],
)
def test_fixture_checkpoints(
    fixtures_dir: Path, folder: str, query_id: str, offsets: tuple[int, ...], commits: tuple[int, ...]
) -> None:
    state = read_checkpoint(cps(fixtures_dir) / folder)
    assert state.query_id == query_id
    assert state.offset_ids == offsets and tuple(state.offsets) == offsets
    assert state.commit_ids == commits
    assert state.problems == ()


def test_offsets_v1_fields(fixtures_dir: Path) -> None:
    root = cps(fixtures_dir)
    old = read_checkpoint(root / "checkpoint-version-2.1.0").offsets[0]
    assert old.log_version == 1
    assert old.metadata is not None
    assert (old.metadata.batch_watermark_ms, old.metadata.batch_timestamp_ms) == (0, 1489180207737)
    assert old.metadata.conf == {}
    assert old.sources == {"0": "0"} and old.source_offset("0") == 0
    late = read_checkpoint(root / "checkpoint-version-2.3.1-without-commit-log-metadata").offsets[1]
    assert late.metadata is not None and late.metadata.batch_watermark_ms == 5000
    assert late.metadata.conf["spark.sql.shuffle.partitions"] == "5"
    kafka = read_checkpoint(root / "kafka-0-10-sql/checkpoint-version-2.4.3-kafka-include-headers-default")
    offset = kafka.offsets[0].source_offset("0")
    assert offset == {"spark-test-topic-2b8619f5-d3c4-4c2d-b5d1-8d9d9458aa62": {str(p): 3 for p in range(5)}}


def test_commit_with_state_unique_ids(fixtures_dir: Path) -> None:
    commit = read_checkpoint(cps(fixtures_dir) / "checkpoint-version-4.0.0-tws-avro").commits[1]
    assert (commit.log_version, commit.next_batch_watermark_ms, commit.state_unique_ids) == (1, 0, {})


@pytest.mark.parametrize(
    ("text", "sources", "has_metadata"),
    [
        ('v1\n{"batchWatermarkMs":0,"batchTimestampMs":5}\n-\n{"t":{"0":1}}', {"0": None, "1": '{"t":{"0":1}}'}, True),
        ("v1\n\n7", {"0": "7"}, False),
        (
            'v2\n{"batchWatermarkMs":0,"batchTimestampMs":5,"sourceMetadataInfo":{}}\nsrc-a:3\nb:-',
            {"src-a": "3", "b": None},
            True,
        ),
        ('v1\n{"batchWatermarkMs":0,"batchTimestampMs":5}', {}, True),
    ],
    ids=["void-source", "empty-metadata", "v2-named", "no-sources"],
)
def test_offsets_formats(text: str, sources: dict[str, str | None], has_metadata: bool) -> None:
    parsed = parse_offsets(text, 3)
    assert parsed.sources == sources
    assert (parsed.metadata is not None) == has_metadata


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty offsets file"),
        ("v1", "truncated offsets file"),
        ('v1\n{"batchWatermarkMs":0,"batchTim', "offset metadata is not valid JSON"),
        ("v3\n{}\n0", "newer than the v2"),
        ("x1\n{}\n0", "malformed log file"),
        ("v2\n{}\nno-colon-here", "not 'sourceId:offset'"),
        ('v1\n{"batchWatermarkMs":"zero"}\n0', "not an integer"),
    ],
)
def test_bad_offsets_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        parse_offsets(text, 0, path=Path("/cp/offsets/0"))


@pytest.mark.parametrize(
    ("text", "watermark", "version"),
    [
        ("v1\n{}", None, 1),
        ("v1", None, 1),
        ('v1\n{"nextBatchWatermarkMs":5000}', 5000, 1),
        ('v2\n{"nextBatchWatermarkMs":1,"stateUniqueIds":{"0":[["a"]]}}', 1, 2),
    ],
)
def test_commit_formats(text: str, watermark: int | None, version: int) -> None:
    parsed = parse_commit(text, 0)
    assert (parsed.next_batch_watermark_ms, parsed.log_version) == (watermark, version)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", r"empty commit file \(incomplete log file\)"),
        ("v1\n{not json", r"commit metadata is not valid JSON \(.*\): '\{not json'"),
        ("v9\n{}", r"log version v9 is newer than the v2 this reader supports"),
    ],
)
def test_bad_commits(text: str, problem: str) -> None:
    with pytest.raises(CheckpointError, match=rf"^<text>: {problem}"):
        parse_commit(text, 0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", r"metadata is not valid JSON \(.*\): ''"),
        ("{}", r"metadata has no query 'id'"),
        ('{"id":5}', r"metadata has no query 'id'"),
        ("{trunc", r"metadata is not valid JSON \(.*\): '\{trunc'"),
    ],
)
def test_bad_metadata(text: str, problem: str) -> None:
    with pytest.raises(CheckpointError, match=rf"^<text>: {problem}"):
        parse_metadata(text)


def test_kafka_initial_offsets_leading_bytes(fixtures_dir: Path) -> None:
    kafka = cps(fixtures_dir) / "kafka-0-10-sql"
    old = parse_source_initial_offsets((kafka / "kafka-source-initial-offset-version-2.1.0.bin").read_bytes())
    assert old.leading_byte == ord("2") and old.log_version is None
    assert old.offsets == {"kafka-initial-offset-2-1-0": {"2": 2, "1": 1, "0": 0}}
    with pytest.raises(CheckpointError, match="v99999 is newer"):
        parse_source_initial_offsets((kafka / "kafka-source-initial-offset-future-version.bin").read_bytes())
    current = parse_source_initial_offsets(b'\x00v1\n{"t":{"0":42}}')
    assert (current.leading_byte, current.log_version, current.offsets) == (0, 1, {"t": {"0": 42}})
    rate = parse_source_initial_offsets((SPARK43 / "checkpoint" / "sources" / "0" / "0").read_bytes())
    assert (rate.leading_byte, rate.log_version, rate.offsets) == (None, 1, 1795279328480)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"", "empty source offsets file"),
        (b"\x00", "source offsets file holds only a leading byte"),
        (b"\x00v1", "malformed log file: no newline after the version line"),
        (b"\x00\xff\xfe", r"not UTF-8 after the leading byte \(invalid start byte\)"),
    ],
)
def test_bad_source_offsets(raw: bytes, problem: str) -> None:
    with pytest.raises(CheckpointError, match=rf"^<text>: {problem}$"):
        parse_source_initial_offsets(raw)


def test_writer_reproduces_spark_4_3_bytes(tmp_path: Path) -> None:
    """Parse what pyspark 4.3 wrote, write it again with our writer, compare byte for byte."""
    state = read_checkpoint(SPARK43 / "checkpoint")
    assert state.query_id is not None and state.problems == ()
    out = tmp_path / "cp"
    write_metadata(out, state.query_id)
    assert (out / "metadata").read_bytes() == (SPARK43 / "checkpoint" / "metadata").read_bytes()
    for batch_id, offsets in state.offsets.items():
        path = write_offsets(out, batch_id, metadata=offsets.metadata, sources=list(offsets.sources.values()))
        assert Path(path).read_bytes() == (SPARK43 / "checkpoint" / "offsets" / str(batch_id)).read_bytes()
    for batch_id, commit in state.commits.items():
        path = write_commit(out, batch_id, next_batch_watermark_ms=commit.next_batch_watermark_ms or 0)
        assert Path(path).read_bytes() == (SPARK43 / "checkpoint" / "commits" / str(batch_id)).read_bytes()
    assert sorted(p.name for p in (out / "offsets").iterdir()) == ["0", "1"]  # no .tmp left behind


def test_writer_round_trips_fixture_offsets(fixtures_dir: Path) -> None:
    for folder in [
        "checkpoint-version-3.2.0-deduplication-with-repartition",
        "checkpoint-test-offsetId-commitId-inconsistent",
    ]:
        for offsets in read_checkpoint(cps(fixtures_dir) / folder).offsets.values():
            assert format_offsets(metadata=offsets.metadata, sources=list(offsets.sources.values())) == offsets.raw


def test_writer_formats() -> None:
    assert format_metadata("q") == '{"id":"q"}'
    assert format_commit() == 'v1\n{"nextBatchWatermarkMs":0}'
    assert format_commit(next_batch_watermark_ms=7, state_unique_ids={"0": [["u"]]}, log_version=2) == (
        'v2\n{"nextBatchWatermarkMs":7,"stateUniqueIds":{"0":[["u"]]}}'
    )
    meta = OffsetSeqMetadata(0, 5, {"k": "é"})
    assert format_offsets(metadata=meta, sources=[None, "3"]) == (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":5,"conf":{"k":"é"}}\n-\n3'
    )
    assert format_offsets(metadata=None, sources={"a": "1"}, log_version=2) == "v2\n\na:1"
    parsed = parse_offsets(format_offsets(metadata=meta, sources={"a": "1", "b": None}, log_version=2), 0)
    assert parsed.sources == {"a": "1", "b": None} and parsed.metadata == meta


def test_writer_never_replaces(tmp_path: Path) -> None:
    write_commit(tmp_path, 0)
    with pytest.raises(CheckpointError, match="already exists"):
        write_commit(tmp_path, 0)
    with pytest.raises(CheckpointError, match="newline"):
        write_offsets(tmp_path, 1, metadata=None, sources=["{\n}"])


def test_file_sink_log_with_compaction_and_delete(fixtures_dir: Path) -> None:
    log = read_file_log(cps(fixtures_dir) / "file-sink-log-version-2.1.0")
    assert [(b.batch_id, b.compact) for b in log.batches] == [(7, True), (8, False), (9, False)]
    assert log.paths() == {f"/a/b/{i}" for i in range(1, 10)}  # /a/b/0 deleted by batch 8
    assert log.missing_batches == () and log.problems == ()
    assert log.latest_batch_id == 9


def test_file_source_log(fixtures_dir: Path) -> None:
    log = read_file_log(cps(fixtures_dir) / "file-source-log-version-2.1.0")
    assert [e["batchId"] for e in log.entries] == [0, 1, 2, 3, 4]


def test_spark43_file_sink_log() -> None:
    log = read_file_log(SPARK43 / "file-sink" / "_spark_metadata")
    assert len(log.entries) == 2 and all(e["action"] == "add" for e in log.entries)


def test_file_log_gaps_and_garbage(fixtures_dir: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "_spark_metadata"
    shutil.copytree(cps(fixtures_dir) / "file-sink-log-version-2.1.0", folder)
    (folder / "8").unlink()
    (folder / "9").write_text('v1\n{"path":"/a/b/9",')
    (folder / "11").write_text('v1\n{"path":"/a/b/11","action":"add"}')
    (folder / ".11.crc").write_bytes(b"\x00crc")
    log = read_file_log(folder)
    assert log.missing_batches == (8, 10)
    assert [str(p.path.name) for p in log.problems] == ["9"]
    assert "/a/b/11" in log.paths()
