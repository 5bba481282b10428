"""Exactly-once of the PostgreSQL sink against a real server: replays skipped, crashes before and inside the
database transaction restarted to exact contents, bad options and an unreachable database refused up front.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkonce.errors import OptionError, SinkError
from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions, two_phase
from sparkonce_local.chaos import DriverRun, run_driver
from sparkonce_local.services.postgres import free_port
from tests.conftest import REPO
from tests.integration.conftest import write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.fixtures_postgres import LocalPostgres

pytestmark = [pytest.mark.postgres]

SCHEMA = "id long, device string, value double"


def _ordered_input(directory: Path) -> list[int]:
    """Three JSON files of 20 rows; modification times one second apart so one file per batch goes in order."""
    ids = write_input_files(directory, files=3, rows_per_file=20)
    for index, path in enumerate(sorted(directory.iterdir())):
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return ids


def _rows(postgres: LocalPostgres, table: str) -> list[tuple[Any, ...]]:
    return postgres.fetch(f"SELECT id, device, value FROM {table} ORDER BY id, value")


def _ledger(postgres: LocalPostgres, table: str) -> list[tuple[str, int, int]]:
    return [
        (str(app), int(batch), int(rows))
        for app, batch, rows in postgres.fetch(
            "SELECT app_id, batch_id, target_rows FROM sparkonce_ledger WHERE target_table = %s "
            "ORDER BY app_id, batch_id",
            (table,),
        )
    ]


def _staged(postgres: LocalPostgres, table: str) -> int:
    return int(postgres.fetch(f"SELECT count(*) FROM {table}_sparkonce_staging")[0][0])


@pytest.mark.spark
@pytest.mark.parametrize("keys", [(), ("id",)], ids=["append", "upsert"])
def test_replayed_batch_is_skipped(spark: SparkSession, postgres: LocalPostgres, keys: tuple[str, ...]) -> None:
    table = postgres.unique_name("readings")
    sink = PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, keys=keys, app_id=f"app-{table}"))
    batch0 = spark.createDataFrame([(i, f"d{i % 2}", i / 10) for i in range(10)], SCHEMA).repartition(2)
    batch1 = spark.createDataFrame([(i, "d9", 9.0) for i in range(10, 15)], SCHEMA)

    first = sink.write_batch(batch0, 0)
    assert (first.status, first.staged_rows, first.target_rows) == ("committed", 10, 10)
    again = sink.write_batch(batch0, 0)  # Spark re-runs batch 0 after a crash before its checkpoint commit
    assert again.status == "skipped"
    sink(batch1, 1)  # the foreachBatch entry point

    expected = [(i, f"d{i % 2}", i / 10) for i in range(10)] + [(i, "d9", 9.0) for i in range(10, 15)]
    assert _rows(postgres, table) == expected
    assert _ledger(postgres, table) == [(f"app-{table}", 0, 10), (f"app-{table}", 1, 5)]
    assert _staged(postgres, table) == 0


@pytest.mark.spark
def test_upsert_last_row_of_batch_wins_and_later_batches_replace(spark: SparkSession, postgres: LocalPostgres) -> None:
    table = postgres.unique_name("latest")
    sink = PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, keys=("id",), app_id="app-u"))
    # One partition, so the batch order is the row order: the last row for id 1 wins.
    sink.write_batch(spark.createDataFrame([(1, "a", 1.0), (2, "a", 2.0), (1, "b", 3.0)], SCHEMA).coalesce(1), 0)
    sink.write_batch(spark.createDataFrame([(2, "c", 4.0)], SCHEMA), 1)
    assert _rows(postgres, table) == [(1, "b", 3.0), (2, "c", 4.0)]
    assert _ledger(postgres, table) == [("app-u", 0, 2), ("app-u", 1, 1)]


@pytest.mark.spark
def test_staging_rows_of_a_failed_attempt_are_cleared(spark: SparkSession, postgres: LocalPostgres) -> None:
    table = postgres.unique_name("retry")
    sink = PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, app_id="app-r"))
    batch = spark.createDataFrame([(i, "d", 0.5) for i in range(6)], SCHEMA).repartition(3)
    sink.check(batch.schema)  # creates target, staging and ledger
    # A failed earlier attempt of batch 0 left rows in the staging table (another partition layout).
    postgres.execute(
        f"INSERT INTO {table}_sparkonce_staging VALUES "
        "(99, 'stale', 0, 'app-r', 0, 7, 0), (98, 'stale', 0, 'app-r', 0, 0, 0)"
    )
    sink.write_batch(batch, 0)
    assert _rows(postgres, table) == [(i, "d", 0.5) for i in range(6)]
    assert _staged(postgres, table) == 0


@pytest.mark.spark
def test_rows_staged_by_another_writer_abort_the_database_transaction(
    spark: SparkSession, postgres: LocalPostgres
) -> None:
    import psycopg

    table = postgres.unique_name("stray")
    sink = PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, app_id="app-s"))
    batch = spark.createDataFrame([(i, "d", 1.0) for i in range(4)], SCHEMA)
    sink.check(batch.schema)
    staged = sink._load_staging(batch, "app-s", 0)
    postgres.execute(f"INSERT INTO {table}_sparkonce_staging VALUES (7, 'zombie', 0, 'app-s', 0, 5, 0)")
    with psycopg.connect(postgres.dsn, autocommit=True) as conn, pytest.raises(SinkError, match="holds 5"):
        sink._commit(conn, "app-s", 0, staged)
    assert _rows(postgres, table) == []
    assert _ledger(postgres, table) == []


# -- crashes: SIGKILL the driver, restart on the same checkpoint ------------------------------------------------------


def _run(tmp_path: Path, postgres: LocalPostgres, table: str, crash_at: str | None = None, *extra: str) -> DriverRun:
    args = ["-m", "tests.integration.drivers.files_to_sinks", str(tmp_path / "input"), str(tmp_path / "ck")]
    args += ["postgres", postgres.dsn, table, *extra]
    return run_driver(args, crash_at=crash_at, cwd=str(REPO), timeout=300)


@pytest.mark.spark
@pytest.mark.sampled(keep=1)
@pytest.mark.crash
@pytest.mark.parametrize(
    "crash_at", ["inside_pg_transaction:1", "after_pg_staging_load:1"], ids=["inside-transaction", "after-staging-load"]
)
def test_crash_then_restart_gives_exact_rows(tmp_path: Path, postgres: LocalPostgres, crash_at: str) -> None:
    table = postgres.unique_name("crash")
    expected_ids = _ordered_input(tmp_path / "input")

    crashed = _run(tmp_path, postgres, table, crash_at=crash_at)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    app_id = f"{json.loads((ck / 'metadata').read_text())['id']}:{table}"
    # Only batch 0 is in the target and the ledger: the killed database transaction rolled back (or never began),
    # so batch 1 is still in the staging table only.
    assert [r[0] for r in _rows(postgres, table)] == expected_ids[:20]
    assert _ledger(postgres, table) == [(app_id, 0, 20)]
    assert _staged(postgres, table) == 20

    finished = _run(tmp_path, postgres, table)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "DONE" in finished.stdout
    assert [r[0] for r in _rows(postgres, table)] == expected_ids  # no duplicate, no loss
    assert _ledger(postgres, table) == [(app_id, b, 20) for b in range(3)]  # one ledger row per batch
    assert _staged(postgres, table) == 0


# -- the two-phase protocol (append only) ----------------------------------------------------------------------------


def _two_phase(postgres: LocalPostgres, table: str, app_id: str) -> PostgresSink:
    return PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, app_id=app_id, commit_protocol="two-phase"))


def _pending(postgres: LocalPostgres, app_id: str) -> list[str]:
    return [
        str(r[0])
        for r in postgres.fetch(
            "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s) ORDER BY gid",
            (f"sparkonce:{two_phase.app_tag(app_id)}:",),
        )
    ]


def _prepare_by_hand(postgres: LocalPostgres, table: str, gid: str, ids: list[int]) -> None:
    """A prepared transaction holding rows of ``table``, as a task attempt leaves it when it dies after PREPARE."""
    import psycopg

    with psycopg.connect(postgres.dsn, autocommit=False) as conn:
        for i in ids:
            conn.execute(f"INSERT INTO {table} VALUES (%s, 'by-hand', 0)", (i,))
        conn.execute(f"PREPARE TRANSACTION '{gid}'")


@pytest.mark.spark
def test_two_phase_appends_each_batch_once_and_leaves_nothing_prepared(
    spark: SparkSession, postgres: LocalPostgres
) -> None:
    table = postgres.unique_name("tpc")
    app_id = f"app-{table}"
    sink = _two_phase(postgres, table, app_id)
    batch0 = spark.createDataFrame([(i, f"d{i % 2}", i / 10) for i in range(10)], SCHEMA).repartition(3)
    first = sink.write_batch(batch0, 0)
    assert (first.status, first.staged_rows, first.target_rows) == ("committed", 10, 10)
    assert sink.write_batch(batch0, 0).status == "skipped"  # Spark's re-run of batch 0 after a crash
    sink(spark.createDataFrame([(10, "d9", 9.0)], SCHEMA), 1)

    assert _rows(postgres, table) == [(i, f"d{i % 2}", i / 10) for i in range(10)] + [(10, "d9", 9.0)]
    assert _ledger(postgres, table) == [(app_id, 0, 10), (app_id, 1, 1)]
    named = postgres.fetch("SELECT prepared_xacts FROM sparkonce_ledger WHERE app_id = %s ORDER BY batch_id", (app_id,))
    assert [len(r[0]) for r in named] == [3, 1]  # one prepared transaction per non-empty task
    assert all(two_phase.batch_of(g) == b for b, r in enumerate(named) for g in r[0])
    assert _pending(postgres, app_id) == []
    assert postgres.fetch(f"SELECT to_regclass('{table}_sparkonce_staging')") == [(None,)]  # no staging table


@pytest.mark.spark
def test_two_phase_rolls_back_what_a_dead_attempt_prepared_and_commits_what_the_ledger_decided(
    spark: SparkSession, postgres: LocalPostgres
) -> None:
    table = postgres.unique_name("tpc_left")
    app_id = f"app-{table}"
    sink = _two_phase(postgres, table, app_id)
    sink.write_batch(spark.createDataFrame([(0, "d", 0.0)], SCHEMA), 0)
    # Batch 1: a task attempt prepared rows and died before the driver decided: never in the ledger.
    dead = two_phase.prepared_id(app_id, 1, "deadbeef", 0, 7)
    _prepare_by_hand(postgres, table, dead, [901, 902])
    # Batch 2 of an earlier driver: decided (ledger row naming its prepared transaction), crashed before committing.
    decided = two_phase.prepared_id(app_id, 2, "0badf00d", 0, 3)
    _prepare_by_hand(postgres, table, decided, [2])
    postgres.execute(
        "INSERT INTO sparkonce_ledger (app_id, batch_id, target_table, staged_rows, target_rows, prepared_xacts) "
        "VALUES (%s, 2, %s, 1, 1, %s)",
        (app_id, table, [decided]),
    )
    assert sorted(_pending(postgres, app_id)) == sorted([dead, decided])

    settled = sink.settle()  # what every batch does first
    assert (settled.committed, settled.rolled_back) == ((decided,), (dead,))
    assert [r[0] for r in _rows(postgres, table)] == [0, 2]
    assert sink.write_batch(spark.createDataFrame([(1, "d", 1.0)], SCHEMA), 1).status == "committed"
    assert sink.write_batch(spark.createDataFrame([(2, "d", 2.0)], SCHEMA), 2).status == "skipped"

    assert [r[0] for r in _rows(postgres, table)] == [0, 1, 2]  # 901, 902 rolled back; 2 committed once
    assert _pending(postgres, app_id) == []


def test_two_phase_needs_prepared_transactions_on_the_server() -> None:
    from sparkonce_local.services.postgres import start_postgres, stop_postgres

    server = start_postgres(settings={"max_prepared_transactions": "0"})
    try:
        sink = PostgresSink(PostgresSinkOptions(dsn=server.dsn, table="t", app_id="a", commit_protocol="two-phase"))
        with pytest.raises(OptionError, match="max_prepared_transactions = 0") as info:
            sink.check()
        assert info.value.option == "commit_protocol"
        assert f"{server.host}:{server.port}" in str(info.value)
    finally:
        stop_postgres(server)


@pytest.mark.spark
@pytest.mark.sampled(keep=2)
@pytest.mark.crash
@pytest.mark.parametrize(
    ("crash_at", "decided", "commit_one_by_hand"),
    [
        ("after_pg_staging_load:1", False, False),
        ("inside_pg_transaction:1", False, False),
        ("after_pg_ledger_commit:1", True, False),
        ("after_pg_ledger_commit:1", True, True),
    ],
    ids=["after-prepare", "inside-ledger-transaction", "after-ledger-commit", "between-commit-prepared"],
)
def test_two_phase_crash_then_restart_gives_exact_rows(
    tmp_path: Path, postgres: LocalPostgres, crash_at: str, decided: bool, commit_one_by_hand: bool
) -> None:
    table = postgres.unique_name("tpc_crash")
    expected_ids = _ordered_input(tmp_path / "input")
    options = ("--commit-protocol", "two-phase", "--partitions", "2")

    crashed = _run(tmp_path, postgres, table, crash_at, *options)
    assert crashed.killed, crashed.stderr[-3000:]
    ck = tmp_path / "ck"
    assert (ck / "offsets" / "1").exists() and not (ck / "commits" / "1").exists()
    app_id = f"{json.loads((ck / 'metadata').read_text())['id']}:{table}"
    # Batch 1 is prepared by both tasks, visible to nobody; the ledger records it only once the decision committed.
    assert [r[0] for r in _rows(postgres, table)] == expected_ids[:20]
    assert _ledger(postgres, table) == [(app_id, b, 20) for b in range(2 if decided else 1)]
    pending = _pending(postgres, app_id)
    assert len(pending) == 2 and {two_phase.batch_of(g) for g in pending} == {1}
    if commit_one_by_hand:  # as a crash between the driver's two COMMIT PREPARED statements leaves it
        postgres.execute(f"COMMIT PREPARED '{pending[0]}'")
        assert len(_rows(postgres, table)) > 20

    finished = _run(tmp_path, postgres, table, None, *options)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "DONE" in finished.stdout
    assert [r[0] for r in _rows(postgres, table)] == expected_ids  # no duplicate, no loss
    assert _ledger(postgres, table) == [(app_id, b, 20) for b in range(3)]
    assert _pending(postgres, app_id) == []


# -- bad input: refused before any data moves ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "option", "problem"),
    [
        ({"dsn": ""}, "dsn", "is required"),
        ({"dsn": "host=db port=5432 password=secret bogus"}, "dsn", "is not a valid connection string"),
        ({"table": "drop table x; --"}, "table", r"must be \[schema.\]table of letters, digits and _"),
        ({"table": "a.b.c"}, "table", r"must be \[schema.\]table of letters, digits and _"),
        ({"keys": ("id", "id")}, "keys", "repeats a column"),
        ({"keys": ("_sparkonce_row",)}, "keys", "'_sparkonce_row' is not a usable column name"),
        ({"app_id": None}, "app_id", "give exactly one of app_id and checkpoint_dir"),
        ({"checkpoint_dir": "/ck"}, "app_id", "give exactly one of app_id and checkpoint_dir"),
        ({"ledger_table": "readings"}, "ledger_table", "must differ from the target and staging tables"),
        ({"staging_table": "readings"}, "staging_table", "must differ from the target table"),
        ({"connect_timeout": 0}, "connect_timeout", "must be a whole number of seconds >= 1"),
        ({"commit_protocol": "xa"}, "commit_protocol", r"must be one of \['staging', 'two-phase'\]"),
        ({"commit_protocol": "two-phase", "keys": ("id",)}, "commit_protocol", "two-phase commits appends only"),
    ],
)
def test_bad_options(kwargs: dict[str, Any], option: str, problem: str) -> None:
    base: dict[str, Any] = {"dsn": "postgresql://u@localhost:5432/db", "table": "readings", "app_id": "a"}
    with pytest.raises(OptionError, match=rf"^option '{option}' = .*: {problem}") as info:
        PostgresSinkOptions(**{**base, **kwargs})
    assert info.value.option == option
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "option", "problem"),
    [
        ({"table": "t", "appId": "a"}, "dsn", "is required"),
        ({"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "keys": "id,,x"}, "keys", "has an empty column"),
        (
            {"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "connectTimeout": "soon"},
            "connectTimeout",
            "must be an integer",
        ),
        (
            {"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "createTable": "maybe"},
            "createTable",
            "must be true or false",
        ),
        (
            {"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "tabel": "t2"},
            "tabel",
            r"is not a PostgreSQL sink option \(\['appid', ",
        ),
        (
            {"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "commitProtocol": "2pc"},
            "commit_protocol",
            r"must be one of \['staging', 'two-phase'\]",
        ),
    ],
)
def test_bad_string_options(options: dict[str, str], option: str, problem: str) -> None:
    with pytest.raises(OptionError, match=rf"^option '{option}' = .*: {problem}") as info:
        PostgresSinkOptions.from_mapping(options)
    assert info.value.option == option


def test_string_options_parse() -> None:
    parsed = PostgresSinkOptions.from_mapping(
        {"DSN": "postgresql://u@h:6543/db", "table": "s.t", "keys": "id, device", "checkpointLocation": "/ck"}
    )
    assert parsed.keys == ("id", "device")
    assert parsed.staging_name == "s.t_sparkonce_staging"
    assert parsed.address == "h:6543"
    assert parsed.commit_protocol == "staging"
    two = PostgresSinkOptions.from_mapping(
        {"dsn": "postgresql://u@h/db", "table": "t", "appId": "a", "commitProtocol": "two-phase"}
    )
    assert two.commit_protocol == "two-phase"


def test_unreachable_database_names_host_and_port() -> None:
    port = free_port()  # nothing listens here
    sink = PostgresSink(
        PostgresSinkOptions(dsn=f"postgresql://u@127.0.0.1:{port}/db", table="t", app_id="a", connect_timeout=2)
    )
    with pytest.raises(SinkError, match=f"127.0.0.1:{port} is unreachable"):
        sink.check()


def test_upsert_keys_need_a_unique_index(postgres: LocalPostgres) -> None:
    table = postgres.unique_name("nokey")
    postgres.execute(f"CREATE TABLE {table} (id bigint, device text, value double precision)")
    sink = PostgresSink(PostgresSinkOptions(dsn=postgres.dsn, table=table, keys=("id",), app_id="a"))
    with pytest.raises(OptionError, match="no unique index"):
        sink.check()
