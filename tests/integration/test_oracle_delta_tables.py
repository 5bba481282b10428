"""delta-spark as the oracle of sparkonce's tables (issue 37 item 1, parts a and b).

Each scenario is a list of Delta SQL statements run twice: by sparkonce on one table and by delta-spark's JVM on a
twin table. Then, at every table version both can read: delta-spark reads sparkonce's table as sparkonce does (a),
sparkonce reads delta-spark's table as delta-spark does (b), and the two tables hold the same rows; DESCRIBE HISTORY
gives the same operation, operationParameters and, where both write them, operationMetrics; DESCRIBE DETAIL the
same protocol, features, properties, partitioning and clustering; the change data feed (where on) the same changes.
Known, documented differences are listed in KNOWN_DIFFERENCES with the docs' words (docs/delta.md, "Checked
against delta-spark").
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkonce.errors import VersionNotFoundError
from tests.fixtures_delta_oracle import (
    DeltaOracle,
    OracleError,
    spark_rows,
    sparkonce_detail,
    sparkonce_history,
    table_ref,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


@dataclass(frozen=True)
class Scenario:
    """Statements (``{t}``: the table) and the session settings each runs under, on both engines."""

    statements: list[str]
    conf: dict[str, str] = field(default_factory=dict)
    # Table versions whose files a later statement removed (VACUUM): neither engine can read them.
    unreadable_before: int = 0
    change_feed: bool = False
    # (minWriterVersion, tableFeatures) of each engine's table where they choose other protocols, else None.
    protocols: tuple[tuple[int, list[str]], tuple[int, list[str]]] | None = None
    # The table writes deletion vectors: both engines' DML mark rows deleted and copy none (numCopiedRows 0).
    nothing_copied: bool = False


SCENARIOS = {
    "column_mapping_renames_and_drops": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT, a STRING, b INT) USING delta TBLPROPERTIES "
            "('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true')",
            "INSERT INTO {t} VALUES (1, 'x', 10), (2, 'y', 20)",
            "ALTER TABLE {t} RENAME COLUMN a TO a_renamed",
            "INSERT INTO {t} VALUES (3, 'z', 30)",
            "ALTER TABLE {t} DROP COLUMN b",
            "DELETE FROM {t} WHERE id = 2",
            "ALTER TABLE {t} ADD COLUMNS (b STRING)",
            "INSERT INTO {t} VALUES (4, 'w', 'new b')",
        ]
    ),
    "dml_with_deletion_vectors_and_change_feed": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT, v STRING, p INT) USING delta TBLPROPERTIES "
            "('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true')",
            "INSERT INTO {t} SELECT id, CAST(id AS STRING), CAST(id % 2 AS INT) FROM range(20)",
            "DELETE FROM {t} WHERE id % 3 = 0",
            "UPDATE {t} SET v = 'u' WHERE id < 5",
            "MERGE INTO {t} t USING (SELECT * FROM VALUES (1L, 'm', 1), (40L, 'n', 0) AS s(id, v, p)) s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
            "MERGE INTO {t} t USING (SELECT * FROM VALUES (2L), (4L) AS s(id)) s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE",
        ],
        change_feed=True,
        nothing_copied=True,
    ),
    "checkpoints_classic_and_multi_part": Scenario(
        ["CREATE TABLE {t} (id BIGINT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '2')"]
        + [f"INSERT INTO {{t}} SELECT id FROM range({10 * i}, {10 * i + 10})" for i in range(5)],
        conf={"spark.databricks.delta.checkpoint.partSize": "2"},
    ),
    "identity_generated_and_check_constraints": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1), v INT, "
            "w INT GENERATED ALWAYS AS (v * 2)) USING delta",
            "ALTER TABLE {t} ADD CONSTRAINT positive CHECK (v > 0)",
            "INSERT INTO {t} (v) VALUES (1)",
            "INSERT INTO {t} (v) VALUES (2)",
        ],
        # sparkonce gives identity columns the legacy writer version 6 (docs/sql.md); delta-spark table features.
        protocols=(
            (
                6,
                [
                    "appendOnly",
                    "changeDataFeed",
                    "checkConstraints",
                    "generatedColumns",
                    "identityColumns",
                    "invariants",
                ],
            ),
            (7, ["appendOnly", "checkConstraints", "generatedColumns", "identityColumns", "invariants"]),
        ),
    ),
    "liquid_clustering_and_optimize": Scenario(
        [
            "CREATE TABLE {t} (a INT, b STRING) USING delta CLUSTER BY (a)",
            "INSERT INTO {t} VALUES (3, 'c'), (1, 'a')",
            "INSERT INTO {t} VALUES (2, 'b'), (4, 'd')",
            "OPTIMIZE {t}",
        ]
    ),
    "optimize_zorder": Scenario(
        [
            "CREATE TABLE {t} (a INT, b INT) USING delta",
            "INSERT INTO {t} VALUES (3, 1), (1, 2)",
            "INSERT INTO {t} VALUES (2, 3), (4, 4)",
            "OPTIMIZE {t} ZORDER BY (a, b)",
        ]
    ),
    "replace_where_and_partition_overwrites": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT, v STRING, p INT) USING delta PARTITIONED BY (p) "
            "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
            "INSERT INTO {t} SELECT id, CAST(id AS STRING), CAST(id % 3 AS INT) FROM range(12)",
            "INSERT INTO {t} REPLACE WHERE p = 1 SELECT id, 'r', 1 FROM range(100, 103)",
            "INSERT INTO {t} REPLACE WHERE id >= 9 SELECT id, 'd', CAST(id % 3 AS INT) FROM range(9, 11)",
            "INSERT OVERWRITE {t} PARTITION (p = 2) SELECT 200, 's'",
        ],
        change_feed=True,
        # sparkonce gives a change data feed table the legacy writer version 4 (docs/delta.md); delta-spark features.
        protocols=(
            (4, ["appendOnly", "changeDataFeed", "checkConstraints", "generatedColumns", "invariants"]),
            (7, ["appendOnly", "changeDataFeed", "invariants"]),
        ),
    ),
    "dynamic_partition_overwrite": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT, v STRING, p INT) USING delta PARTITIONED BY (p)",
            "INSERT INTO {t} SELECT id, CAST(id AS STRING), CAST(id % 3 AS INT) FROM range(9)",
            "INSERT OVERWRITE {t} SELECT id, 'x', CAST(id % 2 AS INT) FROM range(100, 104)",
        ],
        conf={"spark.sql.sources.partitionOverwriteMode": "dynamic"},
    ),
    "restore": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT) USING delta",
            "INSERT INTO {t} VALUES (1), (2)",
            "INSERT INTO {t} VALUES (3)",
            "DELETE FROM {t} WHERE id = 1",
            "RESTORE TABLE {t} TO VERSION AS OF 2",
        ]
    ),
    "type_widening": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT, v INT, d DATE, m DECIMAL(5,2)) USING delta "
            "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
            "INSERT INTO {t} VALUES (1, 10, DATE'2024-02-29', 1.25), (2, 20, DATE'2024-03-01', 2.5)",
            "ALTER TABLE {t} ALTER COLUMN v TYPE BIGINT",
            "ALTER TABLE {t} SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')",
            "ALTER TABLE {t} ALTER COLUMN d TYPE TIMESTAMP_NTZ",
            "ALTER TABLE {t} ALTER COLUMN m TYPE DECIMAL(10,4)",
            "INSERT INTO {t} VALUES (3, 5000000000, TIMESTAMP_NTZ'2024-03-02 10:00:00', 123456.789)",
            "UPDATE {t} SET v = v * 1000000000 WHERE id = 1",
        ]
    ),
    "vacuum": Scenario(
        [
            "CREATE TABLE {t} (id BIGINT) USING delta",
            "INSERT INTO {t} VALUES (1), (2)",
            "INSERT OVERWRITE {t} VALUES (3)",
            "VACUUM {t} RETAIN 0 HOURS",
        ],
        conf={"spark.databricks.delta.retentionDurationCheck.enabled": "false"},
        unreadable_before=2,
    ),
}

# Metrics that count files, bytes, deletion vectors or time follow each engine's file layout (each splits its output
# into files its own way): compared as names only. The others count rows, the outcome of the operation, and are
# compared as values.
LAYOUT_METRIC_WORDS = ("File", "Bytes", "TimeMs", "DeletionVector", "Copied", "Size", "sizeOf", "numPartitions")
# DML's numOutputRows counts the rows written, copied ones included: layout too.
DML = {"DELETE", "UPDATE", "MERGE"}

# The differences the oracle found that sparkonce keeps, each in docs/delta.md ("Checked against delta-spark"):
# operation -> (names only sparkonce records, names only delta-spark records).
KNOWN_METRIC_NAMES: dict[str, tuple[set[str], set[str]]] = {
    "MERGE": ({"numTargetFilesBefore", "numCandidateFiles"}, {"materializeSourceTimeMs"}),
    "OPTIMIZE": (
        {"numBatches", "partitionsOptimized", "totalConsideredFiles", "totalFilesSkipped", "executionTimeMs"},
        set(),
    ),
}
KNOWN_PARAMETER_NAMES: dict[str, tuple[set[str], set[str]]] = {
    "OPTIMIZE": ({"targetFileSize"}, {"isFull"}),
    "RESTORE": (set(), {"timestamp"}),
}
# Metrics both record under one name and count differently: delta-spark counts the table's own folder.
KNOWN_METRIC_VALUES = {"VACUUM END": {"numVacuumedDirectories"}}


def known_difference(mine: dict[str, Any], delta: dict[str, Any]) -> str | None:
    """The documented reason when two history entries differ as known, else None."""
    if mine["operation"] == "WRITE" and delta["operation"] == "CREATE TABLE":
        return "sparkonce records CREATE TABLE with columns as a WRITE of no rows"
    return None


def without(names: set[str], drop: set[str]) -> list[str]:
    return sorted(names - drop)


def parameters(entry: dict[str, Any]) -> dict[str, Any]:
    """operationParameters with JSON values parsed and predicate texts left out (delta-spark records Catalyst's
    form with expression ids, ``(id#220L % 3) = 0``; sparkonce the text as written, ``id % 3 = 0``)."""

    def parsed(value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
        if isinstance(value, dict):
            return {k: parsed(v) for k, v in value.items() if k != "predicate"}
        if isinstance(value, list):
            return [parsed(v) for v in value]
        return value

    return {k: parsed(v) for k, v in (entry["operationParameters"] or {}).items() if k != "predicate"}


def metrics(entry: dict[str, Any]) -> tuple[set[str], dict[str, Any]]:
    """(every metric's name; the outcome metrics' values)."""
    found = dict(entry["operationMetrics"] or {})
    names = set(found)
    layout = {k for k in found if any(word in k for word in LAYOUT_METRIC_WORDS)}
    layout |= KNOWN_METRIC_VALUES.get(entry["operation"], set())
    if entry["operation"] in DML:
        layout.add("numOutputRows")
    ours_only, theirs_only = KNOWN_METRIC_NAMES.get(entry["operation"], (set(), set()))
    layout |= ours_only | theirs_only
    return names, {k: v for k, v in found.items() if k not in layout}


def run_on_sparkonce(spark: SparkSession, scenario: Scenario, path: Path) -> None:
    for key, value in scenario.conf.items():
        spark.conf.set(key, value)
    try:
        for statement in scenario.statements:
            spark.sql(statement.format(t=table_ref(path))).collect()
    finally:
        for key in scenario.conf:
            spark.conf.unset(key)


def run_on_oracle(oracle: DeltaOracle, scenario: Scenario, path: Path) -> None:
    for statement in scenario.statements:
        oracle.sql(statement.format(t=table_ref(path)), conf=scenario.conf)


def sparkonce_rows(spark: SparkSession, path: Path, **options: str) -> list[dict[str, Any]]:
    return spark_rows(spark.read.format("delta").options(**options).load(str(path)))


def commit_summary(entry: dict[str, Any]) -> dict[str, Any]:
    """What both engines' DESCRIBE HISTORY of one table must agree on (the time too: Delta's rule on both)."""
    keys = ("version", "timestamp", "operation", "operationParameters", "operationMetrics")
    return {key: entry[key] for key in keys}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_both_engines_read_and_write_the_same_table(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path, name: str
) -> None:
    scenario = SCENARIOS[name]
    ours, theirs = tmp_path / "sparkonce", tmp_path / "delta"
    run_on_sparkonce(spark, scenario, ours)
    run_on_oracle(delta_oracle, scenario, theirs)

    problems: list[str] = []  # every difference, so one run shows them all

    def check(got: Any, want: Any, what: str) -> None:
        if got != want:
            problems.append(f"{what}:\n  got  {got}\n  want {want}")

    if "spark.databricks.delta.checkpoint.partSize" in scenario.conf:  # both wrote multi-part checkpoints
        for which, table in (("sparkonce", ours), ("delta-spark", theirs)):
            names = sorted(p.name for p in (table / "_delta_log").iterdir())
            parts = [n for n in names if re.fullmatch(r"\d{20}\.checkpoint\.\d{10}\.\d{10}\.parquet", n)]
            check(bool(parts), True, f"{which} wrote a multi-part checkpoint: {names}")

    history_ours = sparkonce_history(spark, ours)
    history_theirs = delta_oracle.history(theirs)
    versions = [h["version"] for h in history_ours]
    check(versions, [h["version"] for h in history_theirs], "table versions")
    for table_version in versions:
        if table_version < scenario.unreadable_before:
            continue
        at = {"versionAsOf": str(table_version)}
        rows = sparkonce_rows(spark, ours, **at)
        check(delta_oracle.rows(ours, **at), rows, f"delta-spark reads sparkonce's table version {table_version}")
        check(sparkonce_rows(spark, theirs, **at), rows, f"sparkonce reads delta-spark's table version {table_version}")
    check(
        delta_oracle.rows(theirs), sparkonce_rows(spark, theirs), "the engines read delta-spark's latest table version"
    )

    # History: each engine reads each table's log alike; the two logs say the same.
    check(
        [commit_summary(h) for h in delta_oracle.history(ours)],
        [commit_summary(h) for h in history_ours],
        "delta-spark's DESCRIBE HISTORY of sparkonce's table",
    )
    check(
        [commit_summary(h) for h in sparkonce_history(spark, theirs)],
        [commit_summary(h) for h in history_theirs],
        "sparkonce's DESCRIBE HISTORY of delta-spark's table",
    )
    for mine, delta in zip(history_ours, history_theirs, strict=False):
        where = f"table version {mine['version']} ({mine['operation']} / {delta['operation']})"
        reason = known_difference(mine, delta)
        if reason is not None:
            continue
        check(mine["operation"], delta["operation"], f"{where}: operation")
        ours_only, theirs_only = KNOWN_PARAMETER_NAMES.get(mine["operation"], (set(), set()))
        mine_parameters, delta_parameters = parameters(mine), parameters(delta)
        check(
            {k: v for k, v in mine_parameters.items() if k not in ours_only},
            {k: v for k, v in delta_parameters.items() if k not in theirs_only},
            f"{where}: operationParameters",
        )
        (my_names, my_values), (names, values) = metrics(mine), metrics(delta)
        ours_only, theirs_only = KNOWN_METRIC_NAMES.get(mine["operation"], (set(), set()))
        check(without(my_names, ours_only), without(names, theirs_only), f"{where}: operationMetrics names")
        check(my_values, values, f"{where}: operationMetrics counting rows")
        if scenario.nothing_copied and mine["operation"] in DML:
            for which, entry in (("sparkonce", mine), ("delta-spark", delta)):
                found = entry["operationMetrics"] or {}
                copied = {k: found[k] for k in ("numCopiedRows", "numTargetRowsCopied") if k in found}
                check(set(map(int, copied.values())), {0}, f"{where}: {which} copied no row {copied}")

    detail = delta_oracle.detail(ours)
    check(detail, sparkonce_detail(spark, ours), "DESCRIBE DETAIL of sparkonce's table, delta-spark vs sparkonce")
    check(sparkonce_detail(spark, theirs), delta_oracle.detail(theirs), "DESCRIBE DETAIL of delta-spark's table")
    detail_theirs = delta_oracle.detail(theirs)
    if scenario.protocols is not None:
        for which, (writer, features) in zip((detail, detail_theirs), scenario.protocols, strict=True):
            check((which.pop("minWriterVersion"), which.pop("tableFeatures")), (writer, features), "the protocol")
    check(detail, detail_theirs, "DESCRIBE DETAIL, sparkonce's table vs delta-spark's")

    if scenario.change_feed:
        changes = [_without_timestamp(row) for row in delta_oracle.changes(ours, 0)]
        check(changes, [_without_timestamp(row) for row in delta_oracle.changes(theirs, 0)], "change data feed")
        ours_read = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
        check(  # one table, both readers: the commit times too (each commit dated by its file on both)
            spark_rows(ours_read.load(str(ours))),
            delta_oracle.changes(ours, 0),
            "sparkonce's change data feed of its table",
        )
    assert not problems, "\n".join(problems)


def _without_timestamp(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "_commit_timestamp"}


def test_a_table_delta_spark_widened_reads_alike_in_both_engines_at_every_table_version(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """Type widening made by delta-spark: INT to BIGINT and FLOAT to DOUBLE in place (no file rewritten); sparkonce
    reads every table version as delta-spark does (the old file's values cast up), on both read paths."""
    from sparkonce.delta.read.native import NATIVE_READS_CONF

    table = tmp_path / "t"
    for statement in [
        "CREATE TABLE {t} (id INT, f FLOAT) USING delta TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
        "INSERT INTO {t} VALUES (1, 1.5)",
        "ALTER TABLE {t} ALTER COLUMN id TYPE BIGINT",
        "ALTER TABLE {t} ALTER COLUMN f TYPE DOUBLE",
        "INSERT INTO {t} VALUES (5000000000, 2.25)",
    ]:
        delta_oracle.sql(statement.format(t=table_ref(table)))
    assert delta_oracle.rows(table) == [{"id": 1, "f": 1.5}, {"id": 5000000000, "f": 2.25}]
    for table_version in range(5):
        at = {"versionAsOf": str(table_version)}
        assert sparkonce_rows(spark, table, **at) == delta_oracle.rows(table, **at), table_version
        spark.conf.set(NATIVE_READS_CONF, "false")
        try:
            assert sparkonce_rows(spark, table, **at) == delta_oracle.rows(table, **at), table_version
        finally:
            spark.conf.unset(NATIVE_READS_CONF)
    frame = spark.read.format("delta").load(str(table))
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [("id", "bigint"), ("f", "double")]
    assert sparkonce_detail(spark, table) == delta_oracle.detail(table)


DAY_S = 86_400


def test_log_cleanup_leaves_the_same_log_on_both_engines(
    spark: SparkSession, delta_oracle: DeltaOracle, tmp_path: Path
) -> None:
    """Expired log cleanup at a checkpoint (Delta's rule): twin tables aged ten days past a two-day retention, then
    written on to the next checkpoint by their own engine, keep the same log files (from the newest checkpoint
    before the cut-off on); each engine reads the other's cleaned table (rows, history, time travel to a removed
    version refused with the same error)."""
    tables = {"sparkonce": tmp_path / "ours", "delta-spark": tmp_path / "theirs"}

    def run(engine: str, statement: str) -> None:
        text = statement.format(t=table_ref(tables[engine]))
        if engine == "sparkonce":
            spark.sql(text).collect()
        else:
            delta_oracle.sql(text)

    for engine in tables:
        run(
            engine,
            # delta-spark refuses a log retention below the deleted files' (7 days unless set); sparkonce does not
            # check it (docs/delta.md, "Checked against delta-spark").
            "CREATE TABLE {t} (id BIGINT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '5', "
            "'delta.logRetentionDuration' = 'interval 2 days', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 days')",
        )
        for v in range(1, 7):
            run(engine, f"INSERT INTO {{t}} VALUES ({v})")
        old = time.time() - 10 * DAY_S
        for path in (tables[engine] / "_delta_log").iterdir():
            if path.name[:20].isdigit():  # table versions 0..6, one second apart as they were written
                when = old + int(path.name[:20])
                os.utime(path, (when, when))
        for v in range(7, 11):  # table version 10 is the next checkpoint: versions 0..6 go with it
            run(engine, f"INSERT INTO {{t}} VALUES ({v})")

    def log_files(table: Path) -> list[str]:
        return sorted(
            p.name for p in (table / "_delta_log").iterdir() if p.name[:20].isdigit() and ".crc" not in p.name
        )

    assert log_files(tables["sparkonce"]) == log_files(tables["delta-spark"]), (
        log_files(tables["sparkonce"]),
        log_files(tables["delta-spark"]),
    )
    # 0..6 expired; the checkpoint of 5 and what follows stay, so every version after the cut-off can be rebuilt.
    assert log_files(tables["sparkonce"])[:3] == [f"{5:020d}.checkpoint.parquet", f"{5:020d}.json", f"{6:020d}.json"]
    for table in tables.values():
        assert sorted(r["id"] for r in delta_oracle.rows(table)) == list(range(1, 11))
        assert spark_rows(spark.read.format("delta").load(str(table))) == delta_oracle.rows(table)
        history = [commit_summary(h) for h in delta_oracle.history(table)]
        assert [h["version"] for h in history] == list(range(5, 11))
        assert [commit_summary(h) for h in sparkonce_history(spark, table)] == history
        assert delta_oracle.rows(table, versionAsOf="10") == delta_oracle.rows(table)
        with pytest.raises(OracleError) as theirs:
            delta_oracle.rows(table, versionAsOf="3")
        with pytest.raises(VersionNotFoundError) as ours:
            spark.read.format("delta").option("versionAsOf", "3").load(str(table)).collect()
        message = re.search(r"\[DELTA_VERSION_NOT_FOUND\].*?Available versions: \[\d+, \d+\]", str(theirs.value))
        assert message is not None, theirs.value
        assert message.group(0) in str(ours.value)
