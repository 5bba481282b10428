"""sparkonce's catalog of Delta tables by name (files in the warehouse), and the CLI taking a name wherever it takes
a table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from sparkonce.cli.main import cli
from sparkonce.delta.table.catalog import DeltaCatalog, find_named_table
from sparkonce.errors import SqlError


def test_entries_are_files_and_names_are_case_insensitive(tmp_path: Path) -> None:
    catalog = DeltaCatalog(str(tmp_path / "wh"))
    table = catalog.add("default", "Events", "/data/events", managed=False)
    assert (table.database, table.name, table.qualified_name) == ("default", "events", "spark_catalog.default.events")
    assert DeltaCatalog(f"file://{tmp_path / 'wh'}").get("DEFAULT", "EVENTS") == table
    assert catalog.managed_location("default", "t") == str(tmp_path / "wh" / "t")
    assert catalog.managed_location("Sales", "t") == str(tmp_path / "wh" / "sales.db" / "t")
    with pytest.raises(SqlError, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        catalog.add("default", "events", "/elsewhere", managed=True)
    with pytest.raises(SqlError, match="letters, digits and _"):
        catalog.add("default", "bad-name", "/x", managed=True)
    assert [t.name for t in catalog.tables("default")] == ["events"]
    catalog.remove(table)
    assert catalog.get("default", "events") is None
    assert DeltaCatalog("s3://bucket/warehouse").managed_location("sales", "t") == "s3://bucket/warehouse/sales.db/t"


def test_cli_takes_a_table_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "data" / "events"
    write_deltalake(str(path), pa.table({"id": [1, 2]}))
    warehouse = tmp_path / "wh"
    DeltaCatalog(str(warehouse)).add("default", "events", str(path), managed=False)
    monkeypatch.setenv("SPARKONCE_WAREHOUSE", str(warehouse))
    assert find_named_table("spark_catalog.default.events") == find_named_table("events")
    runner = CliRunner()
    by_name = runner.invoke(cli, ["history", "events", "--json"])
    by_path = runner.invoke(cli, ["history", str(path), "--json"])
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.output)["entries"] == json.loads(by_path.output)["entries"]
    unknown = runner.invoke(cli, ["history", "nope"])
    assert unknown.exit_code == 2
    assert "'nope' is neither a directory nor a Delta table in sparkonce's catalog" in unknown.output
