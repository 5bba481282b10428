"""Reading what a test wrote, straight from the files: a local Delta table's log and rows, a Spark checkpoint's
query id and committed batches. Independent of sparkonce's own readers, so a test checks them rather than trusts
them. Runs on the driver (no Spark)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any


def delta_txns(table: str | Path) -> list[tuple[str, int]]:
    """Every ``txn`` action of a local table's Delta log as ``(appId, version)``, in log order (from the JSON
    commits)."""
    found = []
    for commit in sorted((Path(table) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                found.append((action["txn"]["appId"], int(action["txn"]["version"])))
    return found


def commit_times(table: str | Path) -> dict[int, int]:
    """Each table version's commit timestamp in ms, as sparkonce's ``DESCRIBE HISTORY`` shows it and time travel
    resolves it (Delta's rule: ``inCommitTimestamp``, else the commit file's modification time, made increasing)."""
    from sparkonce.delta.log.delta_log import DeltaLog

    return dict(DeltaLog(str(table)).commit_timestamps())


def delta_rs_changes(table: str | Path, start: int, end: int | None = None) -> list[dict[str, Any]]:
    """delta-rs's change data feed (``load_cdf``) from table version ``start`` (to ``end``), each row's
    ``_commit_timestamp`` its commit's time as Delta dates it (:func:`commit_times`; a naive UTC datetime, as
    delta-rs gives it). delta-rs stamps a commit without in-commit timestamps with its ``commitInfo.timestamp``, the
    writer's clock before the file was written; sparkonce and delta-spark use the file's modification time."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable

    feed = RsTable(str(table)).load_cdf(starting_version=start, ending_version=end).read_all()
    times = commit_times(table)
    rows = pa.table(feed).to_pylist()
    for row in rows:
        at = times[row["_commit_version"]]
        row["_commit_timestamp"] = dt.datetime.fromtimestamp(at / 1000, dt.UTC).replace(tzinfo=None)
    return rows


def delta_rows(table: str | Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of a Delta table as dicts, read by delta-rs (``columns``: only those)."""
    from deltalake import DeltaTable

    return list(DeltaTable(str(table)).to_pyarrow_table(columns=columns).to_pylist())


def checkpoint_query_id(checkpoint: str | Path) -> str:
    """The query id a Spark checkpoint's ``metadata`` file records."""
    return str(json.loads((Path(checkpoint) / "metadata").read_text().splitlines()[0])["id"])


def checkpoint_commits(checkpoint: str | Path) -> set[int]:
    """The batch ids a Spark checkpoint's ``commits`` folder records as done."""
    return {int(p.name) for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()}


def comparable(value: Any) -> Any:
    """A read value in a form two engines' answers compare equal in: timestamps naive UTC, decimals and floats as
    floats, maps as sorted pairs, lists as tuples."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, decimal.Decimal | float):
        return float(value)
    if isinstance(value, dict):
        return tuple(sorted(((k, comparable(v)) for k, v in value.items()), key=repr))
    if isinstance(value, list | tuple):
        return tuple(comparable(v) for v in value)
    return value
