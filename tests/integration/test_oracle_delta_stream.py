"""delta-spark as the oracle of sparkonce's streaming sink and source (issue 37 item 1, parts a, b and c).

- (a) delta-spark reads the commits sparkonce's streaming sink makes (rows, history, detail, a checkpoint), and its
  writer honours their ``txn``: a write with the same ``txnAppId``/``txnVersion`` is skipped.
- (b) sparkonce streams from a table delta-spark's own streaming sink and SQL write live, with the same result as
  delta-spark's stream of it (MERGE with deletion vectors, V2 checkpoints; column mapping renames and drops under
  schema tracking); sparkonce's sink honours delta-spark's ``txn``.
- (c) both engines append to one table, each with its own ``txn``; no commit is lost and neither replays (races of
  DELETE, UPDATE, MERGE and OPTIMIZE: test_oracle_delta_conflicts.py).
- (a, b) both engines stream the change data feed of a table either wrote.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import StreamingQueryException

from tests.fixtures_delta_oracle import (
    DeltaOracle,
    OracleError,
    spark_rows,
    sparkonce_detail,
    sparkonce_history,
    table_ref,
)
from tests.integration.conftest import INPUT_SCHEMA, stream_input_files, write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.oracle]

SCHEMA = INPUT_SCHEMA


def test_delta_spark_reads_the_sinks_commits_and_honours_their_txn(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    write_input_files(tmp_path / "in", files=3, rows_per_file=4)
    target = tmp_path / "events"
    query_id = stream_input_files(spark, tmp_path / "in", tmp_path / "ck", target, **{"delta.checkpointInterval": "2"})
    assert (target / "_delta_log" / f"{2:020d}.checkpoint.parquet").is_file()

    assert delta_oracle.rows(target) == spark_rows(spark.read.format("delta").load(str(target)))
    theirs = delta_oracle.history(target)
    ours = sparkonce_history(spark, target)
    for entry in ours:  # sparkonce's DESCRIBE HISTORY adds the commit's txn (docs/sql.md); delta-spark does not
        parameters = entry["operationParameters"]
        assert (parameters.pop("txnAppId"), parameters.pop("txnVersion")) == (query_id, parameters["epochId"])
    keys = ("version", "operation", "operationParameters", "operationMetrics", "isBlindAppend", "readVersion")
    assert [{k: h[k] for k in keys} for h in theirs] == [{k: h[k] for k in keys} for h in ours]
    assert [
        (h["operation"], h["operationParameters"]["queryId"], h["operationParameters"]["epochId"]) for h in theirs
    ] == [("STREAMING UPDATE", query_id, str(batch_id)) for batch_id in range(3)]
    assert delta_oracle.detail(target) == sparkonce_detail(spark, target)

    # delta-spark's writer sees the sink's txn: batch 2 again is skipped, batch 3 is written.
    row = [{"id": 100, "device": "x", "value": 1.0}]
    delta_oracle.append(target, row, SCHEMA, txnAppId=query_id, txnVersion="2")
    assert len(delta_oracle.history(target)) == 3
    delta_oracle.append(target, row, SCHEMA, txnAppId=query_id, txnVersion="3")
    assert [h["version"] for h in delta_oracle.history(target)] == [0, 1, 2, 3]
    assert 100 in [r["id"] for r in spark_rows(spark.read.format("delta").load(str(target)))]


def test_both_sinks_write_the_same_commits_from_one_delta_source(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """The same stream (a Delta source, one file a batch) through each engine's source and sink."""
    source = tmp_path / "source"
    delta_oracle.sql(f"CREATE TABLE {table_ref(source)} (id BIGINT, v STRING) USING delta")
    for i in range(3):
        delta_oracle.sql(f"INSERT INTO {table_ref(source)} VALUES ({i}, 'v{i}'), ({i + 10}, 'w{i}')")
    delta_oracle.sql(f"OPTIMIZE {table_ref(source)}")  # a rewrite the streams skip (dataChange false)

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck-ours"))
        .trigger(availableNow=True)
        .start(str(ours))
    )
    query.awaitTermination()
    assert query.exception() is None
    delta_oracle.stream(source, theirs, tmp_path / "ck-theirs", maxFilesPerTrigger="1")

    assert spark_rows(spark.read.format("delta").load(str(ours))) == delta_oracle.rows(theirs)
    assert delta_oracle.rows(ours) == delta_oracle.rows(theirs)
    mine, delta = sparkonce_history(spark, ours), delta_oracle.history(theirs)
    assert [h["operation"] for h in mine] == [h["operation"] for h in delta]

    def same_parts(entry: dict[str, object]) -> dict[str, object]:
        parameters = dict(entry["operationParameters"])  # type: ignore[call-overload]
        parameters.pop("queryId")  # each query's own id
        # sparkonce's DESCRIBE HISTORY adds the commit's txn (docs/sql.md): the query id and the batch id.
        if "txnAppId" in parameters:
            assert parameters.pop("txnVersion") == parameters["epochId"]
            parameters.pop("txnAppId")
        metrics = dict(entry["operationMetrics"])  # type: ignore[call-overload]
        return {"parameters": parameters, "rows": metrics.get("numOutputRows"), "files": metrics.get("numAddedFiles")}

    assert [same_parts(h) for h in mine] == [same_parts(h) for h in delta]
    assert sparkonce_detail(spark, ours) == delta_oracle.detail(theirs)


def test_sparkonce_streams_what_delta_spark_merges_and_checkpoints_live(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """A table delta-spark writes with deletion vectors, MERGE and V2 checkpoints, streamed by both engines while it
    grows (changes skipped with ``skipChangeCommits``), and read as a change feed."""
    table = tmp_path / "live"
    t = table_ref(table)
    delta_oracle.sql(
        f"CREATE TABLE {t} (id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.enableChangeDataFeed' = 'true', 'delta.checkpointInterval' = '2', 'delta.checkpointPolicy' = 'v2')"
    )
    ck_ours, ck_theirs = tmp_path / "ck-ours", tmp_path / "ck-theirs"
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"

    def both_stream() -> None:
        query = (
            spark.readStream.format("delta")
            .option("skipChangeCommits", "true")
            .load(str(table))
            .writeStream.format("delta")
            .option("checkpointLocation", str(ck_ours))
            .trigger(availableNow=True)
            .start(str(ours))
        )
        query.awaitTermination()
        assert query.exception() is None
        delta_oracle.stream(table, theirs, ck_theirs, skipChangeCommits="true")

    for step in range(3):
        delta_oracle.sql(f"INSERT INTO {t} SELECT id, 'v' FROM range({10 * step}, {10 * step + 10})")
        delta_oracle.sql(
            f"MERGE INTO {t} t USING (SELECT {10 * step} AS id UNION ALL SELECT {10 * step + 1}) s ON t.id = s.id "
            "WHEN MATCHED AND s.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = 'm'"
        )
        both_stream()
        assert spark_rows(spark.read.format("delta").load(str(ours))) == delta_oracle.rows(theirs), step

    log_files = sorted(p.name for p in (table / "_delta_log").iterdir())
    assert any(re.fullmatch(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\.(parquet|json)", n) for n in log_files), log_files
    latest = delta_oracle.history(table)[-1]["version"]
    for table_version in range(latest + 1):
        at = {"versionAsOf": str(table_version)}
        assert spark_rows(spark.read.format("delta").options(**at).load(str(table))) == delta_oracle.rows(table, **at)
    assert sparkonce_detail(spark, table) == delta_oracle.detail(table)
    history_keys = ("version", "timestamp", "operation", "operationParameters", "operationMetrics")
    assert [{k: h[k] for k in history_keys} for h in sparkonce_history(spark, table)] == [
        {k: h[k] for k in history_keys} for h in delta_oracle.history(table)
    ]
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(str(table))
    assert spark_rows(changes) == delta_oracle.changes(table, 0)  # the commit times too


def test_sparkonce_streams_what_delta_spark_renames_and_drops_live(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """(b) A column-mapped table delta-spark renames and drops columns of while both engines stream it with schema
    tracking (renames and drops allowed, the sinks merging schemas): both streams stop at the same runs with
    ``DELTA_STREAMING_METADATA_EVOLUTION``, go on after it, and write the same rows, each row once."""
    table = tmp_path / "mapped"
    t = table_ref(table)
    delta_oracle.sql(
        f"CREATE TABLE {t} (id BIGINT, a STRING, b INT) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    delta_oracle.sql(f"INSERT INTO {t} VALUES (1, 'x', 10)")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ck_ours, ck_theirs = tmp_path / "ck-ours", tmp_path / "ck-theirs"
    allow = {"allowSourceColumnRename": "always", "allowSourceColumnDrop": "always"}

    def ours_run() -> str | None:
        query = (
            spark.readStream.format("delta")
            .option("schemaTrackingLocation", str(ck_ours / "_schema"))
            .options(**allow)
            .load(str(table))
            .writeStream.format("delta")
            .option("mergeSchema", "true")
            .option("checkpointLocation", str(ck_ours))
            .trigger(availableNow=True)
            .start(str(ours))
        )
        try:
            query.awaitTermination()
        except StreamingQueryException as err:
            return _error_class(str(err))
        return None

    def theirs_run() -> str | None:
        try:
            delta_oracle.stream(
                table,
                theirs,
                ck_theirs,
                sink_options={"mergeSchema": "true"},
                schemaTrackingLocation=str(ck_theirs / "_schema"),
                **allow,
            )
        except OracleError as err:
            return _error_class(str(err))
        return None

    runs: list[tuple[str | None, str | None]] = []
    for change in [
        [],
        [f"ALTER TABLE {t} RENAME COLUMN a TO a2", f"INSERT INTO {t} VALUES (2, 'y', 20)"],
        [],
        [f"ALTER TABLE {t} DROP COLUMN b", f"INSERT INTO {t} VALUES (3, 'z')"],
        [],
    ]:
        for statement in change:
            delta_oracle.sql(statement)
        runs.append((ours_run(), theirs_run()))
    evolution = "DELTA_STREAMING_METADATA_EVOLUTION"
    assert runs == [(None, None), (evolution, evolution), (None, None), (evolution, evolution), (None, None)]
    rows = delta_oracle.rows(theirs)
    assert rows == [  # the renamed column a new one in the sinks' tables, the dropped one null from its drop on
        {"id": 1, "a": "x", "b": 10, "a2": None},
        {"id": 2, "a": None, "b": 20, "a2": "y"},
        {"id": 3, "a": None, "b": None, "a2": "z"},
    ]
    assert spark_rows(spark.read.format("delta").load(str(ours))) == rows
    assert delta_oracle.rows(ours) == rows


def _error_class(text: str) -> str:
    found = re.search(r"\[(DELTA_[A-Z_]+)", text)
    assert found is not None, text
    return found.group(1)


def _no_time(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if k != "_commit_timestamp"}


def test_both_engines_append_to_one_table_each_with_its_txn(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """(c) Appends from both engines, interleaved, each under its own app id; replays of either are skipped."""
    table = tmp_path / "shared"
    delta_oracle.sql(f"CREATE TABLE {table_ref(table)} (id BIGINT, device STRING, value DOUBLE) USING delta")
    expected: list[int] = []
    for batch_id in range(4):
        ours = [{"id": 2 * batch_id, "device": "sparkonce", "value": 1.0}]
        theirs = [{"id": 2 * batch_id + 1, "device": "delta", "value": 1.0}]
        for _replay in range(2):  # each batch twice: the second is the replay its txn skips
            spark.createDataFrame(ours, SCHEMA).write.format("delta").mode("append").option(
                "txnAppId", "sparkonce-app"
            ).option("txnVersion", str(batch_id)).save(str(table))
            delta_oracle.append(table, theirs, SCHEMA, txnAppId="delta-app", txnVersion=str(batch_id))
        expected += [2 * batch_id, 2 * batch_id + 1]
        # Each side sees the other's txn: the other's batch again is skipped by it too.
        delta_oracle.append(table, ours, SCHEMA, txnAppId="sparkonce-app", txnVersion=str(batch_id))
        spark.createDataFrame(theirs, SCHEMA).write.format("delta").mode("append").option(
            "txnAppId", "delta-app"
        ).option("txnVersion", str(batch_id)).save(str(table))

    assert sorted(r["id"] for r in delta_oracle.rows(table)) == expected
    assert sorted(r["id"] for r in spark_rows(spark.read.format("delta").load(str(table)))) == expected
    assert [h["version"] for h in delta_oracle.history(table)] == list(range(9))  # create + 8 appends, no replay


def test_both_engines_append_to_one_table_at_the_same_time(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """(c) delta-spark appends from a thread while sparkonce appends: each commit lands once, as its own table
    version, whichever engine lost a race retried on top of the other's commit."""
    table = tmp_path / "shared"
    delta_oracle.sql(f"CREATE TABLE {table_ref(table)} (id BIGINT, device STRING, value DOUBLE) USING delta")
    batches = 6
    failures: list[BaseException] = []

    def delta_side() -> None:
        try:
            for batch_id in range(batches):
                row = [{"id": 1000 + batch_id, "device": "delta", "value": 1.0}]
                delta_oracle.append(table, row, SCHEMA, txnAppId="delta-app", txnVersion=str(batch_id))
        except BaseException as err:  # handed to the test's thread
            failures.append(err)

    thread = threading.Thread(target=delta_side)
    thread.start()
    for batch_id in range(batches):
        row = [{"id": batch_id, "device": "sparkonce", "value": 1.0}]
        spark.createDataFrame(row, SCHEMA).write.format("delta").mode("append").option(
            "txnAppId", "sparkonce-app"
        ).option("txnVersion", str(batch_id)).save(str(table))
    thread.join(timeout=600)
    assert not thread.is_alive() and not failures, failures

    expected = sorted([*range(batches), *range(1000, 1000 + batches)])
    assert sorted(r["id"] for r in delta_oracle.rows(table)) == expected
    assert sorted(r["id"] for r in spark_rows(spark.read.format("delta").load(str(table)))) == expected
    history = delta_oracle.history(table)
    assert [h["version"] for h in history] == list(range(2 * batches + 1))
    assert sorted(h["operation"] for h in history[1:]) == ["WRITE"] * (2 * batches)


CHANGE_FEED_STATEMENTS = [
    "CREATE TABLE {t} (id BIGINT, v STRING) USING delta TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
    "INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    "UPDATE {t} SET v = 'u' WHERE id = 2",
    "DELETE FROM {t} WHERE id = 3",
    "MERGE INTO {t} t USING (SELECT * FROM VALUES (1L, 'm'), (4L, 'n') AS s(id, v)) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
]


@pytest.mark.parametrize("writer", ["sparkonce", "delta-spark"])
def test_both_engines_stream_the_same_change_feed(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path, writer: str
) -> None:
    """(a, b) ``readChangeFeed`` as a stream from a table each engine writes, by both engines' source and sink, in
    two runs (the second resumes after one more change): the same change rows."""
    table = tmp_path / "changes"

    def write(statement: str) -> None:
        if writer == "sparkonce":
            spark.sql(statement.format(t=table_ref(table))).collect()
        else:
            delta_oracle.sql(statement.format(t=table_ref(table)))

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    options = {"readChangeFeed": "true", "startingVersion": "0"}
    for run, statements in enumerate([CHANGE_FEED_STATEMENTS, ["UPDATE {t} SET v = 'again' WHERE id = 4"]]):
        for statement in statements:
            write(statement)
        query = (
            spark.readStream.format("delta")
            .options(**options)
            .load(str(table))
            .writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "ck-ours"))
            .trigger(availableNow=True)
            .start(str(ours))
        )
        query.awaitTermination()
        assert query.exception() is None
        delta_oracle.stream(table, theirs, tmp_path / "ck-theirs", **options)
        mine = [_no_time(r) for r in spark_rows(spark.read.format("delta").load(str(ours)))]
        assert mine == [_no_time(r) for r in delta_oracle.rows(theirs)], run
    assert [_no_time(r) for r in delta_oracle.changes(table, 0)] == mine
    assert sorted((r["_commit_version"], r["_change_type"]) for r in mine).count((5, "update_postimage")) == 1
