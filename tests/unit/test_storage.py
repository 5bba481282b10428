"""The one table-location parser: plain and relative paths, file: URIs (Hadoop's one-slash form too), bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkonce._types import BatchId
from sparkonce.checkpoint.query import read_offsets_text, read_query_id
from sparkonce.errors import CheckpointError, StorageError
from sparkonce.storage import checkpoint_path, s3a_hadoop_conf, table_location


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/data/t", "/data/t"),
        ("/data/t/", "/data/t"),
        ("file:///data/t", "/data/t"),
        ("file:/data/t", "/data/t"),  # Hadoop-qualified (Spark Declarative Pipelines' checkpoints)
        ("file://localhost/data/t", "/data/t"),
        ("file:///data/a%20b", "/data/a b"),
        ("FILE:/data/t", "/data/t"),
    ],
)
def test_local_forms_normalize_to_one_absolute_path(given: str, expected: str) -> None:
    location = table_location(given)
    assert location.uri == expected
    assert location.is_local and location.local_path == expected
    assert checkpoint_path(given) == expected


def test_relative_paths_resolve_against_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert table_location("tables/t").uri == os.path.join(str(tmp_path), "tables", "t")
    assert checkpoint_path(Path("ck")) == os.path.join(str(tmp_path), "ck")
    assert table_location(table_location("t")) == table_location("t")


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("", "empty table location"),
        ("file://otherhost/data/t", "file://otherhost/data/t"),
        ("file:relative/t", "file:relative/t"),
        ("hdfs://nn/data/t", "hdfs://nn/data/t"),
    ],
)
def test_bad_table_locations_raise_one_error_naming_the_uri(given: str, named: str) -> None:
    with pytest.raises(StorageError, match=named):
        table_location(given)


def test_checkpoints_must_be_on_the_drivers_file_system() -> None:
    with pytest.raises(StorageError, match=r"checkpoint location s3://bucket/ck.*file system the driver sees"):
        checkpoint_path("s3://bucket/ck")


def test_storage_options_are_not_shown_in_repr() -> None:
    location = table_location("/t")
    hidden = type(location)("s3://b/t", "s3", (("AWS_SECRET_ACCESS_KEY", "hunter2"),))
    assert "hunter2" not in repr(hidden) and "AWS_SECRET_ACCESS_KEY" in repr(hidden)
    assert hidden.join("part-0.parquet") == "s3://b/t/part-0.parquet"
    assert location.options() == {}


def test_query_id_and_offsets_from_a_hadoop_qualified_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "metadata").write_text('{"id":"8c1f6f3e-0d5b-4a8e-9a55-3f0a4b2a5f10"}\n')
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"x":1}\n')
    uri = f"file:{tmp_path}"
    assert read_query_id(uri) == "8c1f6f3e-0d5b-4a8e-9a55-3f0a4b2a5f10"
    assert read_offsets_text(uri, BatchId(0)) == 'v1\n{"batchWatermarkMs":0}\n{"x":1}\n'
    assert read_offsets_text(uri, BatchId(1)) is None


def test_missing_or_bad_metadata_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=str(tmp_path / "metadata")):
        read_query_id(tmp_path)
    (tmp_path / "metadata").write_text("{}\n")
    with pytest.raises(CheckpointError, match="metadata"):
        read_query_id(tmp_path)


def test_session_options_come_from_the_conf_prefix_and_explicit_options_win() -> None:
    from sparkonce.storage import set_session_storage_options, storage_options_from_conf

    conf = {
        "spark.sparkonce.storage.AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "spark.sparkonce.storage.AWS_REGION": "eu-west-1",
        "spark.sparkonce.storageX": "not an option",
        "spark.sql.shuffle.partitions": "2",
    }
    session = storage_options_from_conf(conf)
    assert session == {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "eu-west-1"}
    set_session_storage_options(session)
    try:
        location = table_location("s3://b/t", storage_options={"aws_region": "us-east-1"})  # any letter case
        assert location.options() == {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "aws_region": "us-east-1"}
        assert table_location("/data/t").options() == {}
    finally:
        set_session_storage_options({})
    assert table_location("s3://b/t").options() == {}


def test_local_put_if_absent_creates_once_and_never_replaces(tmp_path: Path) -> None:
    location = table_location(str(tmp_path))
    (tmp_path / "_delta_log").mkdir()
    assert location.put_if_absent("_delta_log/00000000000000000001.json", b"first\n")
    assert not location.put_if_absent("_delta_log/00000000000000000001.json", b"second\n")
    assert (tmp_path / "_delta_log" / "00000000000000000001.json").read_bytes() == b"first\n"
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == ["00000000000000000001.json"]


def test_s3_commits_need_conditional_put(monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs 1.x ignores a DynamoDB locking provider, so it does not count; an unsafe rename is the user's
    choice of one writer (sparkonce then looks before it writes a commit file, which is not atomic)."""
    for name in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME"):
        monkeypatch.delenv(name, raising=False)
    locking_only = table_location("s3://lake/t", storage_options={"AWS_S3_LOCKING_PROVIDER": "dynamodb"})
    with pytest.raises(StorageError, match=r"s3://lake/t: .*conditional_put=etag.*no longer supported by delta-rs"):
        locking_only.check_commit_safety()
    disabled = table_location("s3://lake/t", storage_options={"conditional_put": "disabled"})
    with pytest.raises(StorageError, match=r"conditional_put=etag"):
        disabled.check_commit_safety()
    table_location("s3://lake/t", storage_options={"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}).check_commit_safety()
    table_location("s3://lake/t", storage_options={"conditional_put": "etag"}).check_commit_safety()
    table_location("gs://lake/t").check_commit_safety()
    monkeypatch.setenv("AWS_CONDITIONAL_PUT", "etag")
    locking_only.check_commit_safety()


def test_an_option_object_store_does_not_know_is_named() -> None:
    location = table_location("s3://lake/t", storage_options={"conditional_put": "etag", "NOT_AN_OPTION": "1"})
    with pytest.raises(StorageError, match=r"s3://lake/t: .*not_an_option"):
        location.put_if_absent("_delta_log/00000000000000000000.json", b"{}\n")


def test_aws_profile_cannot_reach_the_log_writer_and_says_what_to_give() -> None:
    location = table_location("s3://lake/t", storage_options={"conditional_put": "etag", "AWS_PROFILE": "prod"})
    with pytest.raises(StorageError, match=r"s3://lake/t: AWS_PROFILE .*AWS_ACCESS_KEY_ID"):
        location.put_if_absent("_delta_log/00000000000000000000.json", b"{}\n")


def test_s3_storage_options_become_the_s3a_settings_of_the_same_store() -> None:
    options = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "aws_access_key_id": "ak",
        "AWS_SECRET_ACCESS_KEY": "sk",
        "region": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
    }
    assert s3a_hadoop_conf(options) == {
        "fs.s3a.endpoint": "http://127.0.0.1:8333",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "ak",
        "fs.s3a.secret.key": "sk",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    temporary = s3a_hadoop_conf(
        {
            "AWS_ENDPOINT_URL": "https://s3.example",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
            "AWS_ACCESS_KEY_ID": "ak",
            "AWS_SECRET_ACCESS_KEY": "sk",
            "AWS_SESSION_TOKEN": "tok",
        }
    )
    assert temporary["fs.s3a.connection.ssl.enabled"] == "true"
    assert temporary["fs.s3a.path.style.access"] == "false"
    assert temporary["fs.s3a.session.token"] == "tok"
    assert temporary["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    assert s3a_hadoop_conf({"AWS_REGION": "us-east-2"}) == {"fs.s3a.endpoint.region": "us-east-2"}
