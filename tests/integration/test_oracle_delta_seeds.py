"""The articles' own flows run on delta-spark and on sparkonce against the same data (issue 37 item 1, part d).

- ``foreachBatch`` writing each micro-batch into two tables with ``txnAppId``/``txnVersion``, failing once between
  the two tables and restarted, then replayed from a checkpoint that lost its last ``commits/N``: the same function
  (``tests.oracle.runner.run_fan_out``) on both engines; the same rows, commits and ``txn`` actions.
- The time-travel replay: read a table as of the timestamp DESCRIBE HISTORY gives for one table version, transform,
  overwrite the output (``tests.oracle.runner.replay``), each engine on each engine's table: the same answers.
- DESCRIBE HISTORY troubleshooting: a checkpoint deleted and its stream started again writes every epoch a second
  time under a new query id; the articles' queries find the duplicate epochs and the last committed epoch, asked of
  both engines about both engines' tables (on sparkonce as written, ``FROM (DESCRIBE HISTORY t)``, and over a view
  of ``DeltaTable.forPath(t).history()``, which is how delta-spark's SQL can ask them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkonce.delta.tables import DeltaTable
from tests.fixtures_delta_oracle import DeltaOracle, OracleError, spark_rows, sparkonce_history, table_ref
from tests.oracle.runner import replay, run_fan_out, to_json_value

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.oracle]

ENGINES = ("sparkonce", "delta-spark")
BATCHES = 3
ROWS_PER_BATCH = 5


def source_table(oracle: DeltaOracle, path: Path) -> list[int]:
    """A Delta table of :data:`BATCHES` commits, one file each (one micro-batch each at ``maxFilesPerTrigger`` 1),
    written by delta-spark; its ids."""
    oracle.sql(f"CREATE TABLE {table_ref(path)} (id BIGINT, v STRING) USING delta")
    for batch in range(BATCHES):
        start = batch * ROWS_PER_BATCH
        oracle.sql(f"INSERT INTO {table_ref(path)} SELECT id, 'v' FROM range({start}, {start + ROWS_PER_BATCH}, 1, 1)")
    return list(range(BATCHES * ROWS_PER_BATCH))


def ids(rows: list[dict[str, Any]]) -> list[int]:
    return sorted(int(r["id"]) for r in rows)


def txn_actions(table: Path) -> list[tuple[int, str, int]]:
    """(table version, appId, version) of every ``txn`` action in the table's commit files."""
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found.append((int(commit.stem), action["txn"]["appId"], int(action["txn"]["version"])))
    return found


def fan_out_on(
    engine: str,
    spark: SparkSession,
    oracle: DeltaOracle,
    source: Path,
    targets: list[Path],
    checkpoint: Path,
    fail_flag: Path | None,
) -> str | None:
    """The articles' ``foreachBatch`` on ``engine`` (``tests.oracle.runner.run_fan_out``); its error, or None."""
    if engine == "delta-spark":
        return oracle.fan_out(source, targets, checkpoint, app_id="fan-out", fail_flag=fail_flag)
    return run_fan_out(
        spark,
        source=str(source),
        targets=[str(t) for t in targets],
        checkpoint=str(checkpoint),
        app_id="fan-out",
        fail_flag=None if fail_flag is None else str(fail_flag),
    )


def test_foreach_batch_into_two_tables_with_txn_fails_between_them_and_replays_alike(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    expected = source_table(delta_oracle, source)
    targets: dict[str, list[Path]] = {}
    for engine in ENGINES:
        folder = tmp_path / engine
        folder.mkdir()
        targets[engine] = [folder / "a", folder / "b"]
        checkpoint, fail_flag = folder / "checkpoint", folder / "fail"
        fail_flag.write_text("1")  # batch 1 fails after table a (the function removes the flag)
        error = fan_out_on(engine, spark, delta_oracle, source, targets[engine], checkpoint, fail_flag)
        assert error is not None and "injected failure after" in error and "in batch 1" in error, error
        table_a, table_b = targets[engine]
        assert len(txn_actions(table_a)) == 2 and len(txn_actions(table_b)) == 1, engine  # batch 1: a only
        # The restart: batch 1 again (a skips it, b writes it), then batch 2.
        assert fan_out_on(engine, spark, delta_oracle, source, targets[engine], checkpoint, None) is None
        (checkpoint / "commits" / str(BATCHES - 1)).unlink()  # lost after the tables' commits, before Spark's
        (checkpoint / "commits" / f".{BATCHES - 1}.crc").unlink(missing_ok=True)
        # Batch 2 again: both tables skip it.
        assert fan_out_on(engine, spark, delta_oracle, source, targets[engine], checkpoint, None) is None

    for engine in ENGINES:
        for table in targets[engine]:
            assert txn_actions(table) == [(v, "fan-out", v) for v in range(BATCHES)], (engine, table.name)
            assert ids(delta_oracle.rows(table)) == expected, (engine, table.name)
            assert ids(spark_rows(spark.read.format("delta").load(str(table)))) == expected, (engine, table.name)
            history = delta_oracle.history(table)
            assert [(h["version"], h["operation"]) for h in history] == [(v, "WRITE") for v in range(BATCHES)]
            assert [h["operationMetrics"]["numOutputRows"] for h in history] == [str(ROWS_PER_BATCH)] * BATCHES


def test_a_time_travel_replay_reads_the_same_table_version_on_both_engines(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """The replay reads the table as of the timestamp DESCRIBE HISTORY shows for table version 2 (before a bad
    UPDATE at 3), from a table each engine wrote, and overwrites an output with the rows fixed. Both engines date a
    commit as Delta does (its file's modification time, made increasing; no in-commit timestamps here), so their
    histories show the same times and either engine's time reads table version 2 on both."""
    statements = [
        "CREATE TABLE {t} (id BIGINT, v STRING) USING delta",
        "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",
        "INSERT INTO {t} VALUES (3, 'c')",
        "UPDATE {t} SET v = 'bad' WHERE id >= 2",
        "INSERT INTO {t} VALUES (4, 'd')",
    ]
    raw = {engine: tmp_path / f"raw-{engine}" for engine in ENGINES}
    for statement in statements:
        spark.sql(statement.format(t=table_ref(raw["sparkonce"]))).collect()
        delta_oracle.sql(statement.format(t=table_ref(raw["delta-spark"])))
    select = ["id", "upper(v) AS v"]
    want = [{"id": 1, "v": "A"}, {"id": 2, "v": "B"}, {"id": 3, "v": "C"}]
    for table in raw.values():  # what a coarse file clock does now and then: the file dated before its commitInfo
        commit = table / "_delta_log" / f"{2:020d}.json"
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        (stamped,) = [a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a]
        os.utime(commit, ns=((stamped - 3) * 1_000_000, (stamped - 3) * 1_000_000))
    for writer, table in raw.items():
        at_version = delta_oracle.rows(table, versionAsOf="2")
        assert spark_rows(spark.read.format("delta").option("versionAsOf", 2).load(str(table))) == at_version
        theirs = {h["version"]: h["timestamp"] for h in delta_oracle.history(table)}
        ours = {h["version"]: h["timestamp"] for h in sparkonce_history(spark, table)}
        assert sorted(ours) == sorted(theirs) == list(range(len(statements)))
        assert ours == theirs, writer
        their_time = {"timestampAsOf": theirs[2].replace("T", " ")}
        our_time = {"timestampAsOf": ours[2].replace("T", " ")}
        assert delta_oracle.rows(table, **their_time) == at_version, writer
        assert spark_rows(spark.read.format("delta").options(**their_time).load(str(table))) == at_version, writer
        assert spark_rows(spark.read.format("delta").options(**our_time).load(str(table))) == at_version, writer
        for engine in ENGINES:
            output = tmp_path / f"bronze-{writer}-by-{engine}"
            if engine == "sparkonce":
                replay(spark, source=str(table), options=our_time, select=select, target=str(output))
            else:
                delta_oracle.replay(table, their_time, select, output)
            assert delta_oracle.rows(output) == want, (writer, engine)
            assert spark_rows(spark.read.format("delta").load(str(output))) == want, (writer, engine)


SEED_QUERIES = {
    # The articles' "look for streaming write markers".
    "markers": "SELECT version, operation, operationParameters.queryId AS query, operationParameters.epochId AS epoch "
    "FROM {h} WHERE operation = 'STREAMING UPDATE' ORDER BY version",
    # "Same epoch, different query IDs", in Delta's names for a streaming commit's query and epoch.
    "duplicate_epochs": "SELECT operationParameters.epochId AS epoch, sort_array(collect_set("
    "operationParameters.queryId)) AS query_ids FROM {h} WHERE operation = 'STREAMING UPDATE' "
    "GROUP BY operationParameters.epochId HAVING size(collect_set(operationParameters.queryId)) > 1 ORDER BY epoch",
    # "Get last committed epoch from Delta".
    "last_epoch": "SELECT max(CAST(operationParameters.epochId AS BIGINT)) AS max_epoch FROM {h} "
    "WHERE operation = 'STREAMING UPDATE'",
    # The articles' words: operationParameters.txnVersion / txnAppId.
    "duplicate_epochs_as_written": "SELECT operationParameters.txnVersion AS epoch, sort_array(collect_set("
    "operationParameters.txnAppId)) AS query_ids FROM {h} WHERE operation = 'STREAMING UPDATE' "
    "GROUP BY operationParameters.txnVersion HAVING size(collect_set(operationParameters.txnAppId)) > 1 "
    "ORDER BY epoch",
}
"""The articles' DESCRIBE HISTORY queries; ``{h}``: ``(DESCRIBE HISTORY t)`` as written, or a view of
``DeltaTable.forPath(t).history()``, which delta-spark's SQL needs (it has no DESCRIBE in a subquery)."""


def stream_on(engine: str, spark: SparkSession, oracle: DeltaOracle, source: Path, target: Path, ck: Path) -> None:
    """Stream ``source`` into ``target`` (one file a batch, availableNow) with ``engine``'s source and sink."""
    if engine == "delta-spark":
        oracle.stream(source, target, ck, maxFilesPerTrigger="1")
        return
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
        .writeStream.format("delta")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(target))
    )
    query.awaitTermination()
    assert query.exception() is None


def test_describe_history_troubleshooting_finds_the_same_duplicate_epochs(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    expected = source_table(delta_oracle, source)
    tables = {engine: tmp_path / f"events-{engine}" for engine in ENGINES}
    for engine, table in tables.items():
        checkpoint = tmp_path / f"checkpoint-{engine}"
        stream_on(engine, spark, delta_oracle, source, table, checkpoint)
        shutil.rmtree(checkpoint)  # the articles' mistake: a new query id, every epoch again
        stream_on(engine, spark, delta_oracle, source, table, checkpoint)
        assert ids(delta_oracle.rows(table)) == sorted(expected * 2), engine

    # The articles' SQL as written needs DESCRIBE HISTORY in a subquery: sparkonce has it, delta-spark's parser not.
    with pytest.raises(OracleError, match="PARSE_SYNTAX_ERROR"):
        delta_oracle.sql(SEED_QUERIES["last_epoch"].format(h=f"(DESCRIBE HISTORY {table_ref(tables['sparkonce'])})"))
    for writer, table in tables.items():
        answers: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, query in SEED_QUERIES.items():
            as_written = query.format(h=f"(DESCRIBE HISTORY {table_ref(table)})")
            answers[(name, "sparkonce")] = [to_json_value(r) for r in spark.sql(as_written).collect()]
            DeltaTable.forPath(spark, str(table)).history().createOrReplaceTempView("oracle_history")
            on_view = [to_json_value(r) for r in spark.sql(query.format(h="oracle_history")).collect()]
            assert on_view == answers[(name, "sparkonce")], (writer, name)
            answers[(name, "delta-spark")] = delta_oracle.history_sql(table, query.format(h="oracle_history"))

        markers = answers[("markers", "delta-spark")]
        assert [(m["version"], m["epoch"]) for m in markers] == [(v, str(v % BATCHES)) for v in range(2 * BATCHES)]
        assert len({m["query"] for m in markers}) == 2
        duplicates = [
            {"epoch": str(epoch), "query_ids": sorted({m["query"] for m in markers})} for epoch in range(BATCHES)
        ]
        assert answers[("duplicate_epochs", "delta-spark")] == duplicates, writer
        assert answers[("last_epoch", "delta-spark")] == [{"max_epoch": BATCHES - 1}], writer
        for name in ("markers", "duplicate_epochs", "last_epoch"):
            assert answers[(name, "sparkonce")] == answers[(name, "delta-spark")], (writer, name)
        # The articles' query in their words: delta-spark's STREAMING UPDATE has no txnAppId/txnVersion parameters,
        # so it finds nothing there; sparkonce's history adds them (docs/delta.md, "Checked against delta-spark") and
        # finds the duplicates, in either engine's table.
        assert answers[("duplicate_epochs_as_written", "delta-spark")] == [], writer
        assert answers[("duplicate_epochs_as_written", "sparkonce")] == duplicates, writer
