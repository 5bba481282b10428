"""The typed Delta actions (``sparkonce.delta.log.actions``): the one parser of a log line and the one writer of a
commit file, on commits sparkonce writes and on the fixture tables other engines wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sparkonce.delta.log.actions import ActionParseError, encode_actions, parse_action
from sparkonce.delta.ops.restore import restore_table
from sparkonce.delta.txn.commit import BatchTxn, commit_files
from sparkonce.delta.write.files import FileWriterOptions, TableFileWriter
from sparkonce.storage import table_location

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
KINDS = {"add", "remove", "metaData", "protocol", "txn", "commitInfo", "cdc", "domainMetadata"}


def _write(table: str, ids: list[int]) -> list:
    files = TableFileWriter(FileWriterOptions(location=table_location(table), partition_by=("p",)))
    files.write(pa.table({"id": ids, "p": [str(i % 2) for i in ids]}, schema=SCHEMA))
    return files.close()


def test_the_writer_gives_back_the_bytes_the_parser_read(tmp_path: Path) -> None:
    """Every commit sparkonce wrote (create, append with a txn, overwrite, restore) re-encodes byte for byte from
    its parsed actions: the types changed nothing of what is written."""
    table = str(tmp_path / "t")
    commit_files(table, _write(table, [1, 2]), data_schema=SCHEMA, partition_by=("p",), txn=BatchTxn("q", 0))
    commit_files(table, _write(table, [3]), data_schema=SCHEMA, txn=BatchTxn("q", 1))
    commit_files(table, _write(table, [4]), data_schema=SCHEMA, mode="overwrite")
    restore_table(table, table_version=1)
    commits = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))
    assert len(commits) == 4
    kinds = set()
    for commit in commits:
        raw = commit.read_bytes()
        actions = [parse_action(line) for line in raw.splitlines()]
        kinds |= {next(iter(a)) for a in actions}
        assert encode_actions(actions) == raw
    assert kinds == {"add", "remove", "metaData", "protocol", "txn", "commitInfo"}


def test_every_line_of_the_fixture_logs_parses_as_an_action(fixtures_dir: Path) -> None:
    """The fixture tables (delta-spark's, delta-rs's) hold every kind of action sparkonce types; each line is one."""
    seen: set[str] = set()
    for commit in sorted((fixtures_dir / "delta-tables").glob("*/_delta_log/*.json")):
        for line in commit.read_bytes().splitlines():
            if line.strip():
                (kind,) = parse_action(line)
                seen.add(kind)
    assert KINDS - seen <= {"domainMetadata"}  # no fixture table is clustered
    assert seen >= {"add", "remove", "metaData", "protocol", "commitInfo", "txn", "cdc"}


@pytest.mark.parametrize(
    ("line", "message", "malformed"),
    [
        (b'{"add": {"path": "a"', r"^is not valid JSON \(", True),
        (b"[1, 2]", r"^is not a JSON object$", True),
        (b'{"add": {"size": 1}}', r"^'add' action has no string 'path'$", False),
        (b'{"remove": {"path": "a", "size": "1"}}', r"^'remove' action for a has a non-integer 'size'$", False),
        (b'{"txn": {"appId": "q", "version": "1"}}', r"^'txn' action needs a string 'appId' and an integer", False),
        (b'{"metaData": []}', r"^'metaData' action is not a JSON object$", False),
    ],
)
def test_a_line_that_is_no_usable_action_says_why(line: bytes, message: str, malformed: bool) -> None:
    with pytest.raises(ActionParseError, match=message) as caught:
        parse_action(line)
    assert caught.value.malformed is malformed
