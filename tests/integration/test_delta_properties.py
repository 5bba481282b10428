"""Table properties through Spark: ``delta.*`` write options and the session's defaults make a new table's
``metaData.configuration`` and protocol (read back with delta-rs); bad ones fail before any file is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

DEFAULT_CDF = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"


def _files(table: Path) -> list[str]:
    return sorted(str(p.relative_to(table)) for p in table.rglob("*") if p.is_file()) if table.exists() else []


def test_write_options_and_session_defaults_become_the_new_tables_properties(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    spark.conf.set(DEFAULT_CDF, "true")
    try:
        spark.range(5).write.format("delta").option("delta.appendOnly", "true").option(
            "delta.checkpointInterval", "2"
        ).save(str(table))
    finally:
        spark.conf.unset(DEFAULT_CDF)
    rs = DeltaTable(str(table))
    assert rs.metadata().configuration == {
        "delta.appendOnly": "true",
        "delta.checkpointInterval": "2",
        "delta.enableChangeDataFeed": "true",
    }
    assert (rs.protocol().min_reader_version, rs.protocol().min_writer_version) == (1, 4)
    for _ in range(2):
        spark.range(5, 7).write.format("delta").mode("append").save(str(table))
    assert (table / "_delta_log" / f"{2:020d}.checkpoint.parquet").is_file()  # every 2 table versions
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] == 2
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 5, 6, 6]

    with pytest.raises(
        AnalysisException, match=r"(?s)OptionError: option .delta.appendOnly. = .false.: .*exists with .*ALTER TABLE"
    ):
        spark.range(1).write.format("delta").mode("append").option("delta.appendOnly", "false").save(str(table))
    assert DeltaTable(str(table)).version() == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delta.enableFoo": "true"}, r"(?s)OptionError: .*Unknown configuration was specified: delta.enablefoo"),
        (
            {"delta.columnMapping.mode": "names"},
            r"(?s)OptionError: .*\[DELTA_MODE_NOT_SUPPORTED\] Specified mode 'names' is not supported",
        ),
    ],
)
def test_a_bad_property_fails_before_any_file_is_written(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    table = tmp_path / "t"
    writer = spark.range(3).write.format("delta")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(AnalysisException, match=message):
        writer.save(str(table))
    assert _files(table) == []
    stream = spark.readStream.format("rate").load().selectExpr("value AS id").writeStream.format("delta")
    for key, value in options.items():
        stream = stream.option(key, value)
    with pytest.raises(StreamingQueryException, match=message):  # the query's first batch builds the writer
        stream.option("checkpointLocation", str(tmp_path / "ck")).start(str(table)).awaitTermination(30)
    assert _files(table) == []
