"""The record of a query's tables in its checkpoint (``_sparkonce_tables/``): written once, read back, damage named."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkonce.checkpoint.tables import TABLES_DIR, RecordedTable, read_recorded_tables, record_tables


def test_records_are_written_once_and_read_back_sinks_first(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    kafka = RecordedTable("source", "sparkonce.kafka", "broker:9092", {"subscribe": "events"})
    sink = RecordedTable("sink", "delta", "/data/raw")
    record_tables(ck, [kafka, sink])
    files = sorted(p.name for p in (ck / TABLES_DIR).iterdir())
    assert [f.split("-")[0] for f in files] == ["sink", "source"]
    first = {p.name: p.read_text() for p in (ck / TABLES_DIR).iterdir()}
    record_tables(ck, [sink, RecordedTable("sink", "delta", "/data/raw")])  # the same table again: kept as it is
    assert {p.name: p.read_text() for p in (ck / TABLES_DIR).iterdir()} == first
    recorded, problems = read_recorded_tables(ck)
    assert problems == []
    assert [(t.role, t.format, t.location, dict(t.options)) for t in recorded] == [
        ("sink", "delta", "/data/raw", {}),
        ("source", "sparkonce.kafka", "broker:9092", {"subscribe": "events"}),
    ]
    assert recorded[0].is_delta and not recorded[1].is_delta and recorded[0].recorded_at_ms > 0


def test_no_folder_is_nothing_recorded(tmp_path: Path) -> None:
    assert read_recorded_tables(tmp_path) == ([], [])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"role": "sink"', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"role": "reader", "format": "delta", "location": "/t"}', "needs role (sink or source)"),
        ('{"role": "sink", "format": "delta", "location": "/t", "options": [1]}', "options is not a JSON object"),
        (b"\xff\xfe", "cannot read"),
    ],
)
def test_a_damaged_record_is_a_problem_naming_its_file(tmp_path: Path, text: str | bytes, problem: str) -> None:
    folder = tmp_path / TABLES_DIR
    folder.mkdir()
    target = folder / "sink-damaged.json"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    record_tables(tmp_path, [RecordedTable("sink", "delta", "/data/ok")])
    recorded, problems = read_recorded_tables(tmp_path)
    assert [t.location for t in recorded] == ["/data/ok"]
    (found,) = problems
    assert str(target) in found and problem in found
