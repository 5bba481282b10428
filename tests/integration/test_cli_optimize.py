"""``sparkonce optimize``: exit codes and output over a real table (the command's Spark work runs in the test
session, which the command finds active and leaves running)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sparkonce.cli.main import cli


def test_optimize_command(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from deltalake import DeltaTable as RsTable

    table = tmp_path / "t"
    for i in range(4):
        spark.createDataFrame([(i, f"p{i % 2}")], "id long, p string").write.format("delta").mode("append").partitionBy(
            "p"
        ).save(str(table))
    runner = CliRunner()

    bad_where = runner.invoke(cli, ["optimize", str(table), "--where", "id = 1"])
    assert bad_where.exit_code == 2 and "DELTA_NON_PARTITION_COLUMN_REFERENCE" in bad_where.output
    bad_size = runner.invoke(cli, ["optimize", str(table), "--target-file-size", "lots"])
    assert bad_size.exit_code == 2 and "target-file-size" in bad_size.output
    not_delta = runner.invoke(cli, ["optimize", str(tmp_path)])
    assert not_delta.exit_code == 3 and "not a Delta table" in not_delta.output

    done = runner.invoke(cli, ["optimize", str(table), "--where", "p = 'p1'", "--target-file-size", "1m", "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert (result["files_removed"], result["files_added"], result["rows"]) == (2, 1, 2)
    assert len(RsTable(str(table)).file_uris()) == 3
    assert sorted(r["id"] for r in RsTable(str(table)).to_pyarrow_table().to_pylist()) == [0, 1, 2, 3]

    again = runner.invoke(cli, ["optimize", str(table), "--where", "p = 'p1'"])
    assert again.exit_code == 0 and "nothing to compact" in again.output
