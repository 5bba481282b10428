"""delta-spark and sparkonce commit to one table at the same time (issue 37 item 1, part c): DELETE, UPDATE, MERGE,
OPTIMIZE and appends racing each other, each race run both ways, with Delta's conflict rules deciding on both sides.

The race is forced, not timed. Each race has a loser, a statement that reads the table and commits after the
winner did, and a winner, a statement run to completion in between:

- sparkonce loses: a hook around sparkonce's ``commit_rewrite`` (the function every DELETE, UPDATE, MERGE and
  OPTIMIZE commits through, after it read the table) runs the winner on delta-spark first;
- delta-spark loses: its statement calls ``oracle_pause(flag, id)`` (``tests/oracle/runner.py``) on the rows it
  reads, after delta-spark started its transaction; the test waits for the pause, runs the winner on sparkonce,
  then lets delta-spark go on to its commit. delta-spark's OPTIMIZE runs no user code: its Spark jobs are held
  instead, behind a job that takes every task slot of the oracle (``run_held``), on a table delta-spark has just read
  (so its first job comes after its transaction started; the loser's ``readVersion`` in the history proves it).

Both ways the loser must answer as Delta's ``ConflictChecker`` does (isolation ``WriteSerializable``): fail with the
same error class, or commit on top of the winner; no commit is lost (every table version there, the winner's
among them) and both engines read the same rows. Each side's ``txn`` is honoured by the other: a MERGE with Delta's
idempotent-DML confs loses to the same ``txnAppId``/``txnVersion`` committed by the other engine and commits nothing.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from sparkonce.delta.ops import dml, merge, optimize
from sparkonce.errors import CommitConflictError
from tests.fixtures_delta_oracle import DeltaOracle, OracleError, spark_rows, sparkonce_history, table_ref

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.oracle]

TXN_CONF = {"spark.databricks.delta.write.txnAppId": "race-app", "spark.databricks.delta.write.txnVersion": "7"}
SETUP = [
    "CREATE TABLE {t} (id BIGINT, v STRING, part STRING) USING delta PARTITIONED BY (part)",
    "INSERT INTO {t} VALUES (1, 'x', 'a'), (2, 'x', 'b'), (3, 'x', 'a'), (4, 'x', 'b')",
    "INSERT INTO {t} VALUES (5, 'x', 'a'), (6, 'x', 'b')",
]
"""The table every race starts from: two files in each partition, so OPTIMIZE has work in both."""
SETUP_VERSIONS = len(SETUP)
PAUSE_WAIT_S = 300.0

Outcome = Literal["commits", "skips"] | str
"""What the loser did: committed on top of the winner, committed nothing (its txn was there: no error, no commit),
or failed with the Delta error class named."""


@dataclass(frozen=True)
class Race:
    """``loser`` and ``winner`` statements (``{t}``: the table; ``{pause}``: a predicate true for every row, where
    delta-spark's loser stops); what the loser does on each engine; the ids in the table afterwards."""

    loser: str
    winner: str
    outcome: Outcome
    ids: list[int]
    # The loser's outcome and the ids after, on sparkonce, where they differ from delta-spark's (docs/delta.md).
    sparkonce_outcome: Outcome | None = None
    sparkonce_ids: list[int] | None = None
    conf: dict[str, str] = field(default_factory=dict)


SETUP_IDS = [1, 2, 3, 4, 5, 6]
MERGE_INSERT = (
    "MERGE INTO {t} t USING (SELECT * FROM VALUES ({id}L, 'w', '{part}') AS s(id, v, part)) s "
    "ON t.id = s.id WHEN NOT MATCHED THEN INSERT *"
)
RACES = {
    "delete_loses_to_a_merge_inserting_into_its_partition": Race(
        loser="DELETE FROM {t} WHERE part = 'a' AND {pause}",
        winner=MERGE_INSERT.format(t="{t}", id=101, part="a"),
        outcome="DELTA_CONCURRENT_APPEND",
        ids=[*SETUP_IDS, 101],
    ),
    "delete_and_a_blind_append_into_its_partition": Race(
        loser="DELETE FROM {t} WHERE part = 'a' AND {pause}",
        winner="INSERT INTO {t} VALUES (102, 'w', 'a')",
        outcome="DELTA_CONCURRENT_APPEND",  # delta-spark's only isolation level, Serializable
        ids=[*SETUP_IDS, 102],
        # sparkonce's WriteSerializable (Databricks' default): a blind append is no conflict, and the row the DELETE
        # never read stays.
        sparkonce_outcome="commits",
        sparkonce_ids=[2, 4, 6, 102],
    ),
    "merge_loses_to_a_delete_of_the_files_it_read": Race(
        loser="MERGE INTO {t} t USING (SELECT * FROM VALUES (1L, 'm'), (3L, 'm') AS s(id, v) WHERE {pause}) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v",
        winner="DELETE FROM {t} WHERE part = 'a'",
        outcome="DELTA_CONCURRENT_DELETE_READ",
        ids=[2, 4, 6],
    ),
    "update_loses_to_optimize_compacting_its_files": Race(
        loser="UPDATE {t} SET v = 'u' WHERE part = 'a' AND {pause}",
        winner="OPTIMIZE {t}",
        outcome="DELTA_CONCURRENT_APPEND",  # OPTIMIZE added files to the partition (checked before its removes)
        ids=SETUP_IDS,
    ),
    # OPTIMIZE changes no data (dataChange false): Delta checks it at snapshot isolation, so files added under it
    # are no conflict, blind append or not; a file it compacts removed under it is.
    "optimize_commits_over_a_blind_append": Race(
        loser="OPTIMIZE {t}",
        winner="INSERT INTO {t} VALUES (103, 'w', 'a')",
        outcome="commits",
        ids=[*SETUP_IDS, 103],
    ),
    "optimize_commits_over_a_merge_inserting_into_its_partition": Race(
        loser="OPTIMIZE {t}",
        winner=MERGE_INSERT.format(t="{t}", id=104, part="a"),
        outcome="commits",
        ids=[*SETUP_IDS, 104],
    ),
    "optimize_loses_to_a_delete_of_a_file_it_compacts": Race(
        loser="OPTIMIZE {t}",
        winner="DELETE FROM {t} WHERE id = 1",
        outcome="DELTA_CONCURRENT_DELETE_READ",
        ids=[2, 3, 4, 5, 6],
    ),
    "optimize_loses_to_a_merge_updating_a_file_it_compacts": Race(
        loser="OPTIMIZE {t}",
        winner="MERGE INTO {t} t USING (SELECT * FROM VALUES (2L, 'm') AS s(id, v)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v",
        outcome="DELTA_CONCURRENT_DELETE_READ",
        ids=SETUP_IDS,
    ),
    "merge_with_a_txn_the_other_engine_committed": Race(
        loser="MERGE INTO {t} t USING (SELECT * FROM VALUES (200L, 'm', 'b') AS s(id, v, part) WHERE {pause}) s "
        "ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
        winner="INSERT INTO {t} VALUES (200, 't', 'b')",
        outcome="DELTA_CONCURRENT_TRANSACTION",
        # sparkonce's rule for its own txn (docs/delta.md, "Checked against delta-spark"): the winner holds the
        # txn, so the loser's work is done already and it commits nothing instead of failing.
        sparkonce_outcome="skips",
        ids=[*SETUP_IDS, 200],
        conf=TXN_CONF,
    ),
}
CASES = [(name, loser) for name in sorted(RACES) for loser in ("sparkonce", "delta-spark")]


@pytest.fixture(scope="module")
def start_table(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The table every race copies (made once by sparkonce: a Delta table's files name each other relatively)."""
    table = tmp_path_factory.mktemp("race-start") / "t"
    for statement in SETUP:
        spark.sql(statement.format(t=table_ref(table))).collect()
    return table


@pytest.fixture
def session_conf(spark: SparkSession) -> Iterator[Callable[[dict[str, str]], None]]:
    """Sets sparkonce session confs for one test and unsets them after it."""
    set_keys: list[str] = []

    def apply(conf: dict[str, str]) -> None:
        for key, value in conf.items():
            spark.conf.set(key, value)
            set_keys.append(key)

    yield apply
    for key in set_keys:
        spark.conf.unset(key)


def error_class(text: str) -> str:
    """The Delta error class a message names first (``[DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT]`` ->
    ``DELTA_CONCURRENT_APPEND``)."""
    found = re.search(r"\[(DELTA_[A-Z_]+)", text)
    assert found is not None, f"no Delta error class in: {text}"
    return found.group(1)


def wait_for(path: Path, thread: threading.Thread) -> None:
    """Poll until ``path`` exists (delta-spark reached its pause), failing when the statement ended first."""
    deadline = time.monotonic() + PAUSE_WAIT_S
    while not path.exists():
        assert thread.is_alive(), "delta-spark's statement ended without reaching oracle_pause"
        assert time.monotonic() < deadline, f"delta-spark did not reach oracle_pause within {PAUSE_WAIT_S:.0f} s"
        time.sleep(0.05)


def sparkonce_loses(
    spark: SparkSession, oracle: DeltaOracle, monkeypatch: pytest.MonkeyPatch, race: Race, t: str
) -> tuple[Outcome, str]:
    """The loser on sparkonce, delta-spark's winner run just before sparkonce's commit (after its read); its
    outcome and error text."""
    ran: list[int] = []

    def hooked(original: Callable[..., Any]) -> Callable[..., Any]:
        def racing(*args: Any, **kwargs: Any) -> Any:
            if not ran:
                ran.append(1)
                oracle.sql(race.winner.format(t=t), conf=race.conf)
            return original(*args, **kwargs)

        return racing

    for module in (dml, merge, optimize):
        monkeypatch.setattr(module, "commit_rewrite", hooked(module.commit_rewrite))
    try:
        spark.sql(race.loser.format(t=t, pause="true")).collect()
    except CommitConflictError as conflict:
        return error_class(str(conflict)), str(conflict)
    finally:
        assert ran == [1], "sparkonce's statement committed without the winner running first"
    return "commits", ""


def delta_spark_loses(
    spark: SparkSession, oracle: DeltaOracle, race: Race, table: Path, flag: Path
) -> tuple[Outcome, str]:
    """The loser on delta-spark, paused (or held) after it started its transaction while sparkonce's winner commits;
    its outcome and error text."""
    answer: list[BaseException | None] = []
    t = table_ref(table)
    held = "{pause}" not in race.loser  # no user code to pause in (OPTIMIZE): its jobs are held
    if held:
        oracle.rows(table)  # its snapshot cached: OPTIMIZE's first Spark job comes after its transaction started

    def loser() -> None:
        try:
            statement = race.loser.format(t=t, pause=f"oracle_pause('{flag}', id)")
            oracle.sql(statement, conf=race.conf, hold=flag if held else None)
            answer.append(None)
        except BaseException as err:  # handed to the test's thread
            answer.append(err)

    thread = threading.Thread(target=loser)
    thread.start()
    try:
        wait_for(flag.with_name(flag.name + ".waiting"), thread)
        spark.sql(race.winner.format(t=t)).collect()
    finally:
        flag.with_name(flag.name + ".go").touch()
        thread.join(timeout=PAUSE_WAIT_S)
    assert not thread.is_alive() and len(answer) == 1
    (error,) = answer
    if error is None:
        return "commits", ""
    if not isinstance(error, OracleError):
        raise error
    return error_class(str(error)), str(error)


@pytest.mark.parametrize(("name", "loser"), CASES)
def test_a_race_between_the_engines_ends_as_delta_decides(
    spark: SparkSession,
    delta_oracle: DeltaOracle,
    start_table: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    session_conf: Callable[[dict[str, str]], None],
    name: str,
    loser: str,
) -> None:
    race = RACES[name]
    table = tmp_path / "t"
    shutil.copytree(start_table, table)
    t = table_ref(table)
    session_conf(race.conf)
    if loser == "sparkonce":
        outcome, error = sparkonce_loses(spark, delta_oracle, monkeypatch, race, t)
        expected = race.sparkonce_outcome or race.outcome
        expected_ids = race.sparkonce_ids or race.ids
    else:
        outcome, error = delta_spark_loses(spark, delta_oracle, race, table, tmp_path / "pause")
        expected, expected_ids = race.outcome, race.ids
    # Every commit there once: the setup's, the winner's, and the loser's when it committed.
    history = delta_oracle.history(table)
    winner_version = SETUP_VERSIONS
    if outcome == "commits" and history[-1]["version"] == winner_version:
        outcome = "skips"  # no error and no commit: the loser found its txn in the table
    assert outcome == expected, error
    latest = winner_version + (1 if outcome == "commits" else 0)
    assert [h["version"] for h in history] == list(range(latest + 1))
    assert [h["version"] for h in sparkonce_history(spark, table)] == list(range(latest + 1))
    winner_operation = race.winner.split()[0].replace("INSERT", "WRITE")
    assert history[winner_version]["operation"] == winner_operation, history[winner_version]
    if outcome == "commits":
        assert history[latest]["readVersion"] == winner_version - 1  # read before the winner, committed on top
    ids = sorted(r["id"] for r in delta_oracle.rows(table))
    assert ids == expected_ids
    assert sorted(r["id"] for r in spark_rows(spark.read.format("delta").load(str(table)))) == ids
