"""The chaos harness for real (broker, Spark, Delta, PostgreSQL): a short seeded sample with faults of every kind
in soak mode must end exactly once, and the naive baselines must fail under it (in rounds) with their duplicates
counted.

Each run starts its own broker and PostgreSQL in ``tmp_path`` (``sparkonce chaos``'s quickstart setup; with its
own object store when the tables are on it or a store restart is planned); the drivers and the services are
killed with SIGKILL for real, the broker while the producer runs. Marked ``crash``: a quick run deselects them
with ``-m "not crash"``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkonce.cli.common import to_jsonable
from sparkonce.cli.main import cli
from sparkonce_local.chaos import ChaosOptions, ChaosResult, FaultPlan, SoakPlan, run_chaos, run_soak

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.postgres, pytest.mark.crash]

DEADLINE = 1500.0


def _tables(result: ChaosResult) -> dict[str, tuple[int, int]]:
    return {t.table: (t.duplicates, t.lost) for t in result.tables}


def _keep(result: ChaosResult) -> None:
    """With SPARKONCE_CHAOS_RECORD set, keep the run's JSON report there (the record in docs/reliability.md)."""
    folder = os.environ.get("SPARKONCE_CHAOS_RECORD")
    if folder:
        name = f"{result.naive or 'sparkonce'}-seed{result.seed}-{os.getpid()}-{len(os.listdir(folder))}.json"
        Path(folder, name).write_text(json.dumps(to_jsonable(result), indent=2))


def test_file_sink_glob_sees_duplicates_that_spark_metadata_hides(tmp_path: Path) -> None:
    result = run_chaos(
        ChaosOptions(naive="file-sink-glob", faults=1, seed=2, records_per_round=300, work_dir=tmp_path / "files")
    )
    _keep(result)
    assert result.injected_by_point == {"mid_write": 1}
    tables = _tables(result)
    assert tables["raw_files (glob)"][0] > 0
    assert tables["raw_files (_spark_metadata)"] == (0, 0)
    assert not result.exactly_once


@pytest.mark.sampled(keep=1, group="chaos-naive-baselines")
def test_naive_delta_append_duplicates_and_sparkonce_does_not_under_the_same_plan(tmp_path: Path) -> None:
    runner = CliRunner()
    work = tmp_path / "naive"
    args = ["chaos", "--naive", "delta-append", "--faults", "1", "--seed", "5", "--records", "300"]
    done = runner.invoke(cli, [*args, "--work-dir", str(work), "--json"])
    assert done.exit_code == 1, done.output
    naive = json.loads(done.stdout)  # round lines go to stderr with --json
    if os.environ.get("SPARKONCE_CHAOS_RECORD"):
        Path(os.environ["SPARKONCE_CHAOS_RECORD"], f"delta-append-seed5-{os.getpid()}.json").write_text(done.stdout)
    assert naive["schema_version"] == 1
    assert naive["injected_by_point"] == {"after_delta_commit": 1}
    raw = next(t for t in naive["tables"] if t["table"] == "raw")
    assert raw["duplicates"] > 0
    assert raw["lost"] == 0
    assert naive["exactly_once"] is False

    plan = FaultPlan.from_json(json.loads((work / "rounds" / "plan.json").read_text()))
    real = run_chaos(
        ChaosOptions(plan=dataclasses.replace(plan, naive=None), work_dir=tmp_path / "real", deadline=DEADLINE)
    )
    _keep(real)
    assert real.injected_by_point == {"after_delta_commit": 1}
    assert _tables(real)["raw"] == (0, 0)
    assert real.exactly_once, real


@pytest.mark.sampled(keep=1, group="chaos-naive-baselines")
def test_naive_postgres_append_duplicates_and_the_ledger_sink_does_not(tmp_path: Path) -> None:
    naive = run_chaos(
        ChaosOptions(naive="postgres-append", faults=1, seed=3, records_per_round=300, work_dir=tmp_path / "naive")
    )
    _keep(naive)
    assert naive.injected_by_point == {"after_pg_commit": 1}
    assert _tables(naive)["postgres"][0] > 0
    assert _tables(naive)["raw"] == (0, 0)
    assert not naive.exactly_once
    real = run_chaos(ChaosOptions(plan=dataclasses.replace(naive.plan, naive=None), work_dir=tmp_path / "real"))
    _keep(real)
    assert real.injected_by_point == {"after_pg_commit": 1}
    assert _tables(real)["postgres"] == (0, 0)
    assert real.exactly_once, real


@pytest.mark.s3
def test_seeded_soak_sample_of_every_fault_kind_on_s3_tables_is_exactly_once(tmp_path: Path) -> None:
    # One driver run under a fault of every kind, one after another, while the producer keeps producing; the
    # tables on the object store (--storage s3), so the store restart hits the Delta commits too. The driver_kill
    # arms the crash point on the next driver; the worker kills land when a task runs (at least one of three); the
    # commit process of a Delta sink dies right after its Delta commit while the driver lives (Spark aborts); the
    # store applies a Delta commit's PUT and its answer is lost (the fault proxy between Spark and the store). Then
    # a network fault on every link (fault proxies in front of the broker, which advertises its own, PostgreSQL and
    # the store): a reset, a paused and a slowed broker link, a dropped PostgreSQL connection, 503s and 500s. (A
    # second PostgreSQL fault can find no PostgreSQL traffic for minutes on a loaded machine: the PostgreSQL stage's
    # pauses and latency are tested in test_faultproxy_links.py.)
    plan = SoakPlan.from_json(
        {
            "plan_version": 1,
            "mode": "soak",
            "seed": 12,
            "rate": 20.0,
            "faults": [
                {"kind": "worker_kill", "delay": 0.5},
                {"kind": "broker_restart", "delay": 1.0, "downtime": 1.0},
                {"kind": "postgres_restart", "delay": 0.5, "downtime": 0.5},
                {"kind": "worker_kill", "delay": 1.0},
                {"kind": "commit_process_kill", "delay": 0.5},
                {"kind": "store_lost_response", "delay": 0.5},
                {"kind": "broker_net_reset", "delay": 0.5},
                {"kind": "store_slowdown", "delay": 0.5, "count": 3},
                {"kind": "postgres_net_drop", "delay": 0.5},
                {"kind": "broker_net_pause", "delay": 0.5, "downtime": 2.0},
                {"kind": "store_error", "delay": 0.5, "count": 2},
                {"kind": "net_latency", "delay": 0.5, "link": "broker", "count": 10, "seconds": 0.05},
                {"kind": "driver_kill", "delay": 2.0},
                {"kind": "storage_restart", "delay": 5.0, "downtime": 1.0},
                {"kind": "worker_kill", "delay": 0.5},
            ],
            "crash_points": [{"kind": "crash_point", "point": "after_delta_commit", "hit": 1}],
        }
    )
    result = run_soak(ChaosOptions(plan=plan, seed=12, storage="s3", work_dir=tmp_path / "soak", deadline=DEADLINE))
    _keep(result)
    assert result.mode == "soak"
    assert result.drained, result.error or result.log_tail
    assert result.error is None, result.error
    assert all(t.startswith("s3://") for t in (c.path for c in result.tables if c.table in ("raw", "gold")))
    assert {t.table for t in result.tables} == {"topic", "raw", "bronze+quarantine", "gold", "postgres"}
    for check in result.tables:
        assert check.ok, check
    assert result.records > 0 and result.duplicates == 0 and result.lost == 0
    assert result.exactly_once
    by_kind = result.injected_by_kind
    assert (by_kind["broker_restart"], by_kind["postgres_restart"], by_kind["storage_restart"]) == (1, 1, 1)
    assert (by_kind["driver_kill"], by_kind["commit_process_kill"], by_kind["store_lost_response"]) == (1, 1, 1)
    assert by_kind["worker_kill"] >= 1
    network = ("broker_net_reset", "broker_net_pause", "net_latency", "postgres_net_drop")
    assert [by_kind[k] for k in (*network, "store_slowdown", "store_error")] == [1] * 6
    (commit_kill,) = [e for e in result.events if e.kind == "commit_process_kill"]
    assert commit_kill.injected and "after its Delta commit" in commit_kill.note and "alive" in commit_kill.note
    assert result.injected_by_point == {"after_delta_commit": 1}
    # Every event is logged with its time; the driver runs: the killed one, the crashed one, the one that drained.
    assert [e.at for e in result.events] == sorted(e.at for e in result.events)
    assert result.driver_runs >= 3
    assert result.rounds[-1].exit_code == 0


@pytest.mark.s3
def test_overlapped_network_faults_run_beside_the_kills_and_stay_exactly_once(tmp_path: Path) -> None:
    # --overlap-network: each link's faults run on a thread of their own, so the broker link is paused while the
    # plan goes on (workers killed, the store's link paused, PostgreSQL's dropped) instead of after it. A restart of
    # a service runs on its link's thread (a restarted service is checked through its link, which a pause would
    # hold): the broker's SIGKILL right after its link's pause released the records it held, while the producer
    # runs, and the store's restart after the store link's pause. The broker keeps every record it acknowledged.
    plan = SoakPlan.from_json(
        {
            "plan_version": 1,
            "mode": "soak",
            "seed": 13,
            "rate": 20.0,
            "faults": [
                {"kind": "worker_kill", "delay": 0.5},
                {"kind": "broker_net_pause", "delay": 0.5, "downtime": 8.0},
                {"kind": "worker_kill", "delay": 0.5},
                {"kind": "broker_restart", "delay": 0.5, "downtime": 0.5},
                {"kind": "store_net_pause", "delay": 0.5, "downtime": 15.0},
                {"kind": "storage_restart", "delay": 1.0, "downtime": 0.5},
                {"kind": "postgres_net_drop", "delay": 0.5},
                {"kind": "broker_net_reset", "delay": 0.5},
                {"kind": "store_net_reset", "delay": 0.5},
                {"kind": "store_error", "delay": 0.5, "count": 2},
                {"kind": "worker_kill", "delay": 0.5},
            ],
            "crash_points": [],
        }
    )
    options = ChaosOptions(
        plan=plan, seed=13, storage="s3", work_dir=tmp_path / "soak", deadline=DEADLINE, overlap_network=True
    )
    result = run_soak(options)
    _keep(result)
    assert result.drained, result.error or result.log_tail
    assert result.error is None, result.error
    for check in result.tables:
        assert check.ok, check
    assert result.records > 0 and result.exactly_once
    (topic,) = [t for t in result.tables if t.table == "topic"]
    assert topic.expected_rows > 0 and (topic.lost, topic.duplicates) == (0, 0)  # every acknowledged record, once
    by_kind = result.injected_by_kind
    network = (
        "broker_net_pause",
        "broker_net_reset",
        "store_net_pause",
        "store_net_reset",
        "postgres_net_drop",
        "store_error",
    )
    assert [by_kind[k] for k in network] == [1] * 6, [e for e in result.events if e.kind in network]
    assert by_kind["storage_restart"] == 1 and by_kind["broker_restart"] == 1
    assert by_kind["worker_kill"] >= 1
    (pause,) = [e for e in result.events if e.kind == "broker_net_pause"]
    (broker_kill,) = [e for e in result.events if e.kind == "broker_restart"]
    assert broker_kill.injected and broker_kill.at >= pause.at + pause.seconds - 0.02, (broker_kill, pause)
    (reset,) = [e for e in result.events if e.kind == "broker_net_reset"]
    kills_after = [e for e in result.events if e.kind == "worker_kill" and e.index > pause.index]
    # The plan went on during the pause: its next kill started before the pause ended; the broker's next fault
    # waited for it (one fault at a time per link).
    assert kills_after[0].at < pause.at + pause.seconds
    assert reset.at >= broker_kill.at + broker_kill.seconds - 0.02  # all rounded to 0.01 s
    (store_pause,) = [e for e in result.events if e.kind == "store_net_pause"]
    (restart,) = [e for e in result.events if e.kind == "storage_restart"]
    # The restart ran on the store link's thread, after its pause (one fault at a time per link), while the plan
    # went on: the next kill in the plan started before the restart.
    assert restart.injected and restart.at >= store_pause.at + store_pause.seconds - 0.02, (restart, store_pause)
    (next_kill,) = [e for e in result.events if e.kind == "worker_kill" and e.index > restart.index]
    assert next_kill.at < restart.at


def test_two_phase_postgres_stage_under_crash_points_and_a_postgres_kill_is_exactly_once(tmp_path: Path) -> None:
    # The PostgreSQL stage with commit_protocol = "two-phase": killed after its tasks prepared (no decision), after
    # the ledger row naming them (decided, nothing committed), and the server killed while batches load. Each round
    # is a driver run; the next one settles what the previous left (rolls back, or commits what the ledger names).
    def crash(point: str) -> dict[str, object]:
        return {"records": 200, "fault": {"kind": "crash_point", "point": point, "hit": 1}}

    plan = FaultPlan.from_json(
        {
            "plan_version": 1,
            "seed": 21,
            "naive": None,
            "stages": ["raw", "bronze", "gold", "postgres"],
            "rounds": [
                crash("after_pg_staging_load"),
                crash("after_pg_ledger_commit"),
                {
                    "records": 200,
                    "fault": {"kind": "postgres_restart", "stage": "postgres", "delay": 0.2, "downtime": 0.5},
                },
                {"records": 0, "fault": None},
            ],
        }
    )
    result = run_chaos(
        ChaosOptions(plan=plan, seed=21, pg_commit_protocol="two-phase", work_dir=tmp_path / "tpc", deadline=DEADLINE)
    )
    _keep(result)
    assert result.injected_by_point == {"after_pg_staging_load": 1, "after_pg_ledger_commit": 1}
    assert result.injected_by_kind["postgres_restart"] == 1
    postgres = next(t for t in result.tables if t.table == "postgres")
    assert postgres.rows > 0 and postgres.ok, postgres
    assert result.exactly_once, result
