"""A merge stage with a delete clause (partitioned target) and a PostgreSQL stage, crashed for real, restarted.

The DAG: ``raw`` (Kafka -> Delta) -> ``changes`` (SQL: parse change records ``{"id", "site", "seq", "op",
"amount"}``) -> ``accounts`` (``kind = "merge"``, ``merge = "clauses"``: delete when ``op = 'D'``, update when the
``seq`` is later, insert otherwise; partitioned by ``site``) and ``per_site`` (``kind = "postgres"``: a SQL
aggregate of each batch's changes per site, appended with the DSN from an environment variable).

1. crash at ``after_gold_merge:1``: ``accounts`` batch 1 made its merge commit, ``commits/1`` is not written;
2. restart, crash at ``after_pg_ledger_commit:1``: ``per_site`` commits in two phases (``commit_protocol =
   "two-phase"``); the ledger row naming batch 1's prepared transactions is committed, none of them is;
3. restart to the end: every stage drains (availableNow) and exits 0.

Then exact contents: ``accounts`` equals the oracle (the highest-``seq`` change per id, absent when it is a
delete), one txn per committed batch, and the PostgreSQL partial aggregates sum to the oracle per site, with one
ledger row per committed batch of ``per_site``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparkonce.sinks.postgres.two_phase import app_tag
from sparkonce_local.chaos import DriverRun, run_driver
from tests.conftest import REPO
from tests.delta_helpers import checkpoint_commits, checkpoint_query_id, delta_txns

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.crash]

CHANGES = 240


def _pipeline(bootstrap: str, topic: str) -> str:
    return f'''
name = "accounts"

[source]
bootstrap_servers = "{bootstrap}"
topic = "{topic}"
max_offsets_per_trigger = 60

[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
trigger = {{ availableNow = true }}

[stages.changes]
input = "raw"
sql = """
SELECT CAST(get_json_object(value, '$.id') AS BIGINT) AS id,
       get_json_object(value, '$.site') AS site,
       CAST(get_json_object(value, '$.seq') AS BIGINT) AS seq,
       get_json_object(value, '$.op') AS op,
       CAST(get_json_object(value, '$.amount') AS DOUBLE) AS amount
FROM {{input}}
"""
table = "tables/changes"
checkpoint = "checkpoints/changes"
max_files_per_trigger = 1
trigger = {{ availableNow = true }}

[stages.accounts]
kind = "merge"
input = "changes"
table = "tables/accounts"
checkpoint = "checkpoints/accounts"
keys = ["id"]
order_by = "seq"
merge = "clauses"
delete = "source.op = 'D'"
update = "source.seq > target.seq"
insert = "source.op <> 'D'"
partition_by = ["site"]
max_files_per_trigger = 1
trigger = {{ availableNow = true }}

[stages.per_site]
kind = "postgres"
input = "changes"
dsn_env = "ACCOUNTS_PG_DSN"
table = "per_site_changes"
commit_protocol = "two-phase"
sql = "SELECT site, count(*) AS changes, sum(coalesce(amount, 0)) AS amount FROM {{input}} GROUP BY site"
checkpoint = "checkpoints/per_site"
max_files_per_trigger = 1
trigger = {{ availableNow = true }}
'''


def _produce(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from confluent_kafka import Producer

    from sparkonce_local.services.broker import create_topic

    create_topic(bootstrap, topic, partitions=1)
    rng = random.Random(3)
    changes = []
    for seq in range(CHANGES):
        account = rng.randrange(40)
        op = "D" if rng.random() < 0.2 else "U"
        changes.append(
            {"id": account, "site": f"site-{account % 3}", "seq": seq, "op": op, "amount": round(rng.random() * 100, 2)}
        )
    producer = Producer({"bootstrap.servers": bootstrap})
    for change in changes:
        producer.produce(topic, json.dumps(change).encode())
    assert producer.flush(30) == 0
    return changes


def _run(pipeline: Path, env: dict[str, str], crash_at: str | None = None) -> DriverRun:
    args = ["-m", "sparkonce.cli.main", "run", str(pipeline), "--plain"]
    return run_driver(args, crash_at=crash_at, env=env, cwd=str(REPO), timeout=900)


def test_merge_with_delete_and_postgres_stage_crash_restart_exact(
    broker, postgres, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    import os

    from deltalake import DeltaTable

    topic = broker.unique_topic("accounts")
    changes = _produce(broker.bootstrap, topic)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(_pipeline(broker.bootstrap, topic))
    env = {**os.environ, "ACCOUNTS_PG_DSN": postgres.dsn}
    tables, ck = tmp_path / "tables", tmp_path / "checkpoints"

    crashed = _run(pipeline, env, "after_gold_merge:1")
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "accounts" / "offsets" / "1").exists() and not (ck / "accounts" / "commits" / "1").exists()
    accounts_app = checkpoint_query_id(ck / "accounts")
    assert max(v for a, v in delta_txns(tables / "accounts") if a == accounts_app) == 1

    # per_site commits in two phases: killed after the ledger row naming batch 1's prepared transactions.
    crashed = _run(pipeline, env, "after_pg_ledger_commit:1")
    assert crashed.killed, crashed.stderr[-3000:]
    assert (ck / "per_site" / "offsets" / "1").exists() and not (ck / "per_site" / "commits" / "1").exists()
    per_site_app = checkpoint_query_id(ck / "per_site") + ":per_site_changes"
    prepared = f"SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, 'sparkonce:{app_tag(per_site_app)}:')"
    assert postgres.fetch(prepared)[0][0] > 0  # decided, not yet committed

    finished = _run(pipeline, env)
    assert finished.returncode == 0, finished.stderr[-3000:]

    # accounts: the highest-seq change per id, absent when that change is a delete.
    last: dict[int, dict[str, Any]] = {}
    for change in changes:
        last[change["id"]] = change
    expected = {i: (c["site"], c["seq"], c["amount"]) for i, c in last.items() if c["op"] != "D"}
    rows = DeltaTable(str(tables / "accounts")).to_pyarrow_table().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice in accounts"
    assert {r["id"]: (r["site"], r["seq"], r["amount"]) for r in rows} == expected
    assert any(c["op"] == "D" and c["id"] not in expected for c in last.values()), "no delete reached the table"
    assert DeltaTable(str(tables / "accounts")).metadata().partition_columns == ["site"]
    txns = delta_txns(tables / "accounts")
    assert len(txns) == len(set(txns)), f"accounts: a batch merged twice: {Counter(txns)}"
    assert {v for a, v in txns if a == accounts_app} == checkpoint_commits(ck / "accounts")

    # per_site: the partial aggregates of every batch, each batch exactly once.
    sums = postgres.fetch("SELECT site, sum(changes), sum(amount) FROM per_site_changes GROUP BY site ORDER BY site")
    oracle: dict[str, tuple[int, float]] = {}
    for c in changes:
        n, total = oracle.get(c["site"], (0, 0.0))
        oracle[c["site"]] = (n + 1, total + c["amount"])
    assert [(s, int(n)) for s, n, _ in sums] == [(s, oracle[s][0]) for s in sorted(oracle)]
    for site, _, total in sums:
        assert float(total) == pytest.approx(oracle[site][1])
    ledger = postgres.fetch("SELECT batch_id FROM sparkonce_ledger WHERE app_id = %s", (per_site_app,))
    assert sorted(b for (b,) in ledger) == sorted(checkpoint_commits(ck / "per_site"))
    assert len(ledger) > 2
    assert postgres.fetch(prepared) == [(0,)]

    # The pipeline's verify agrees: every committed batch of every stage recorded once, the PostgreSQL rows too.
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.verify import verify_pipeline

    monkeypatch.setenv("ACCOUNTS_PG_DSN", postgres.dsn)
    report = verify_pipeline(load_pipeline(pipeline))
    assert report.ok, report
    assert {t.stage for t in report.targets} == {"raw", "changes", "accounts", "per_site"}
