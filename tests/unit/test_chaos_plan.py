"""The chaos harness's pure parts: the seeded fault plan, its JSON round-trip, the hit-counted crash point, and the
reconciliation arithmetic and file-sink log parsing (no Spark, no services)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkonce.errors import OptionError
from sparkonce_local.chaos.plan import (
    DEFAULT_KINDS,
    DRIVER_EVERY,
    FAULT_KINDS,
    LINK_OF,
    NAIVE_KINDS,
    NAIVE_WINDOW,
    NETWORK_KINDS,
    POINTS_BY_STAGE,
    FaultPlan,
    SoakPlan,
    make_plan,
    make_soak_plan,
)
from sparkonce_local.chaos.reconcile import (
    check_file_sink,
    check_keys,
    check_topic,
    check_topic_values,
    file_sink_files,
    missing_values,
)

STAGES = ("raw", "bronze", "gold", "postgres")


def test_same_seed_same_plan_and_json_round_trip() -> None:
    first = make_plan(seed=7, faults=40, stages=STAGES)
    assert first == make_plan(seed=7, faults=40, stages=STAGES)
    assert first != make_plan(seed=8, faults=40, stages=STAGES)
    assert FaultPlan.from_json(json.loads(first.dumps())) == first
    assert len(first.faults) == 40
    assert first.rounds[-1].fault is None  # the drain round
    kinds = {f.kind for f in first.faults}
    assert kinds == {
        "driver_kill",
        "worker_kill",
        "postgres_restart",
        "broker_restart",
        "storage_restart",
        "crash_point",
    }
    assert all(0.5 <= f.downtime <= 4 for f in first.faults if f.kind.endswith("_restart"))
    allowed = {p for s in STAGES for p in POINTS_BY_STAGE[s]}
    assert {f.point for f in first.faults if f.kind == "crash_point"} <= allowed


def test_points_and_kinds_follow_the_stages() -> None:
    plan = make_plan(seed=1, faults=60, stages=("raw",))
    assert "postgres_restart" not in {f.kind for f in plan.faults}
    assert {"broker_restart", "storage_restart"} <= {f.kind for f in plan.faults}
    # A pipeline file: the harness runs no service, so none is restarted.
    unmanaged = make_plan(seed=1, faults=60, stages=STAGES, services=False)
    assert {f.kind for f in unmanaged.faults} == {"driver_kill", "worker_kill", "crash_point"}
    assert {f.point for f in plan.faults if f.point} <= set(POINTS_BY_STAGE["raw"])
    assert sum(len(v) for v in POINTS_BY_STAGE.values()) >= 8


@pytest.mark.parametrize("naive", NAIVE_KINDS)
def test_a_naive_plan_starts_in_its_duplicate_window(naive: str) -> None:
    for seed in range(5):
        plan = make_plan(seed=seed, faults=3, stages=STAGES, naive=naive)  # type: ignore[arg-type]
        first = plan.faults[0]
        assert (first.kind, first.point, first.hit) == ("crash_point", NAIVE_WINDOW[naive], 1)  # type: ignore[index]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"plan_version": 99, "seed": 1, "naive": None, "stages": [], "rounds": []}, "plan_version"),
        ({"plan_version": 1, "seed": 1, "naive": "jdbc", "stages": [], "rounds": []}, "naive"),
        (
            {
                "plan_version": 1,
                "seed": 1,
                "naive": None,
                "stages": [],
                "rounds": [{"records": 1, "fault": {"kind": "x"}}],
            },
            "rounds[0].fault.kind",
        ),
        ({"plan_version": 1, "naive": None, "stages": [], "rounds": []}, "plan.json"),
    ],
)
def test_bad_plans_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(OptionError, match=field.replace("[", r"\[").replace("]", r"\]")):
        FaultPlan.from_json(data, source="plan.json")


def test_bad_options() -> None:
    with pytest.raises(OptionError, match="faults"):
        make_plan(seed=1, faults=-1, stages=STAGES)
    with pytest.raises(OptionError, match="kinds"):
        make_plan(seed=1, faults=1, stages=STAGES, kinds=("meteor",))  # type: ignore[arg-type]


def test_crash_point_fires_at_its_hit(tmp_path: Path) -> None:
    """``point#3`` lets the first two reaches pass and SIGKILLs the process at the third."""
    program = (
        "from sparkonce.crash import crash_point\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    crash_point('mid_write')\n"
    )
    env = {
        **os.environ,
        "SPARKONCE_CRASH_AT": "mid_write#3",
        "SPARKONCE_CRASH_TARGET": "process",
        "SPARKONCE_CRASH_HITS_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, start_new_session=True, check=False
    )
    assert done.returncode == -9
    assert done.stdout.split() == ["0", "1", "2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2", "3"]


def test_check_keys_counts_duplicates_losses_extras() -> None:
    check = check_keys("t", "p", "topic", [(0, 1), (0, 1), (0, 1), (1, 5), (2, 9)], {(0, 1), (1, 5), (1, 6)})
    assert (check.rows, check.expected_rows, check.duplicates, check.lost, check.extra) == (5, 3, 2, 1, 1)
    assert not check.ok
    assert check_keys("t", "p", "topic", [(0, 1)], {(0, 1)}).ok


def test_check_topic_counts_against_the_acknowledged_produces() -> None:
    records: dict[tuple[int, int], bytes | None] = {(0, 0): b"a", (0, 1): b"b", (1, 0): b"c"}
    assert check_topic(records, 3).ok
    assert (check_topic(records, 2).duplicates, check_topic(records, 2).lost) == (1, 0)
    assert (check_topic(records, 5).duplicates, check_topic(records, 5).lost) == (0, 2)


def test_file_sink_glob_sees_an_uncommitted_file_the_metadata_log_does_not(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "_spark_metadata").mkdir(parents=True)
    rows = pa.table({"partition": [0, 0], "offset": [0, 1]})
    pq.write_table(rows, folder / "part-00000-a.snappy.parquet")
    pq.write_table(rows, folder / "part-00000-b.snappy.parquet")  # the re-run's copy; the first is orphaned
    entry = {"path": f"file://{folder}/part-00000-b.snappy.parquet", "size": 1, "isDir": False, "action": "add"}
    (folder / "_spark_metadata" / "0").write_text("v1\n" + json.dumps(entry) + "\n")
    topic = {(0, 0): b"a", (0, 1): b"b"}
    assert [p.name for p in file_sink_files(folder, through_metadata=True)] == ["part-00000-b.snappy.parquet"]
    assert len(file_sink_files(folder, through_metadata=False)) == 2
    assert check_file_sink(folder, topic, through_metadata=True).ok
    assert check_file_sink(folder, topic, through_metadata=False).duplicates == 2


def test_soak_plan_is_seeded_round_trips_and_kills_the_driver_every_so_often() -> None:
    plan = make_soak_plan(seed=3, faults=400, stages=STAGES)
    assert plan == make_soak_plan(seed=3, faults=400, stages=STAGES)
    assert plan != make_soak_plan(seed=4, faults=400, stages=STAGES)
    assert SoakPlan.from_json(json.loads(plan.dumps())) == plan
    kinds = [f.kind for f in plan.faults]
    assert len(kinds) == 400
    assert DRIVER_EVERY == 100
    assert [i for i, k in enumerate(kinds) if k == "driver_kill"] == [99, 199, 299, 399]
    # store_lost_response needs the tables on the object store (tables_on_store), which this plan does not have.
    assert set(kinds) == {
        "driver_kill",
        "worker_kill",
        "postgres_restart",
        "broker_restart",
        "storage_restart",
        "commit_process_kill",
    }
    on_store = make_soak_plan(seed=3, faults=400, stages=STAGES, tables_on_store=True)
    assert "store_lost_response" in {f.kind for f in on_store.faults}
    assert all(0.1 <= f.delay <= 1.0 for f in plan.faults)
    assert all(0.1 <= f.downtime <= 1.5 for f in plan.faults if f.kind.endswith("_restart"))
    # One crash point per driver kill, armed on the driver started after it.
    assert len(plan.crash_points) == 4
    reachable = {p for s in STAGES for p in POINTS_BY_STAGE[s]} - {"during_commits"}
    assert all(f.kind == "crash_point" and f.point in reachable for f in plan.crash_points)


def test_soak_plan_kinds_and_bad_options() -> None:
    no_driver = make_soak_plan(seed=1, faults=60, kinds=("worker_kill", "crash_point"), stages=STAGES)
    assert {f.kind for f in no_driver.faults} == {"worker_kill"}
    assert no_driver.crash_points == ()  # armed only on a driver started after a driver_kill
    no_pg = make_soak_plan(seed=1, faults=60, stages=("raw", "bronze", "gold"))
    assert "postgres_restart" not in {f.kind for f in no_pg.faults}
    with pytest.raises(OptionError, match="kinds"):
        make_soak_plan(seed=1, faults=3, kinds=("crash_point",), stages=STAGES)
    with pytest.raises(OptionError, match="rate"):
        make_soak_plan(seed=1, faults=3, rate=0, stages=STAGES)
    with pytest.raises(OptionError, match="soak"):
        SoakPlan.from_json({"plan_version": 1, "mode": "rounds", "seed": 1})
    with pytest.raises(OptionError, match=r"faults\[0\].kind"):
        SoakPlan.from_json(
            {
                "plan_version": 1,
                "mode": "soak",
                "seed": 1,
                "rate": 5,
                "faults": [{"kind": "meteor"}],
                "crash_points": [],
            }
        )


def test_network_kinds_are_drawn_only_when_asked_for_and_only_on_links_with_a_proxy() -> None:
    assert not set(NETWORK_KINDS) & set(DEFAULT_KINDS) and set(DEFAULT_KINDS) | set(NETWORK_KINDS) == set(FAULT_KINDS)
    assert not {f.kind for f in make_plan(seed=3, faults=60, stages=STAGES).faults} & set(NETWORK_KINDS)
    everything = (*DEFAULT_KINDS, *NETWORK_KINDS)
    no_links = make_plan(seed=3, faults=60, stages=STAGES, kinds=everything)
    assert not {f.kind for f in no_links.faults} & set(NETWORK_KINDS)
    two = make_plan(seed=3, faults=200, stages=STAGES, kinds=NETWORK_KINDS, links=("broker", "postgres"))
    assert {f.kind for f in two.faults} == {k for k in NETWORK_KINDS if LINK_OF.get(k) != "store"}
    for fault in two.faults:
        assert fault.link in (None, "broker", "postgres")
        if LINK_OF.get(fault.kind) == "postgres":
            assert fault.stage == "postgres"
        if fault.kind.endswith("_net_pause"):
            assert 1.0 <= fault.downtime <= 20.0
        if fault.kind == "net_latency":
            assert 20 <= fault.count <= 200 and 0.05 <= fault.seconds <= 0.5
    assert FaultPlan.from_json(json.loads(two.dumps())) == two
    soak = make_soak_plan(seed=4, faults=300, kinds=NETWORK_KINDS, links=("broker", "postgres", "store"))
    assert {f.kind for f in soak.faults} == set(NETWORK_KINDS)
    assert {f.link for f in soak.faults if f.kind == "net_latency"} == {"broker", "postgres", "store"}
    assert all(1 <= f.count <= 8 for f in soak.faults if f.kind in ("store_slowdown", "store_error"))
    assert all(1.0 <= f.downtime <= 20.0 for f in soak.faults if f.kind == "store_net_pause")
    assert all(1.0 <= f.downtime <= 30.0 for f in soak.faults if f.kind.endswith("_net_pause"))
    assert SoakPlan.from_json(json.loads(soak.dumps())) == soak
    with pytest.raises(OptionError, match="links"):
        make_plan(seed=1, faults=1, stages=("raw",), kinds=("postgres_net_reset",), links=("broker", "postgres"))
    bad = json.loads(two.dumps())
    bad["rounds"][0]["fault"]["link"] = "carrier-pigeon"
    with pytest.raises(OptionError, match=r"rounds\[0\]\.fault\.link"):
        FaultPlan.from_json(bad)


def test_check_topic_values_allows_a_refused_produce_at_most_once() -> None:
    acked = Counter({b"a": 1, b"b": 2, b"c": 1})
    refused = Counter({b"r": 1, b"s": 1})
    exact = {(0, 0): b"a", (0, 1): b"b", (1, 0): b"b", (1, 1): b"c", (1, 2): b"r"}
    check = check_topic_values(exact, acked, refused)
    assert (check.rows, check.expected_rows, check.duplicates, check.lost, check.extra) == (5, 4, 0, 0, 0)
    assert check.ok
    bad = {(0, 0): b"a", (0, 1): b"a", (0, 2): b"b", (1, 0): b"r", (1, 1): b"r", (1, 2): b"x"}
    check = check_topic_values(bad, acked, refused)
    # a twice (1 acknowledged), r twice (1 refused), b once of 2, c missing, x never produced
    assert (check.duplicates, check.lost, check.extra) == (2, 2, 1)
    assert missing_values(bad, acked) == Counter({b"b": 1, b"c": 1})
    assert missing_values(exact, acked) == Counter()
