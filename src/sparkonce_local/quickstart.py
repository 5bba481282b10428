"""The quickstart: exactly-once through the whole pipeline, proven by a real crash, in one call.

Starts the embedded broker, produces sensor readings (a few malformed), writes the demo pipeline, runs it in a
driver process that is killed with SIGKILL inside a raw batch (after its Delta commit, before ``commits/N``),
restarts it, and checks every table: raw against the broker's offsets (``verify``: no duplicated, no missing
offset), bronze + quarantine against raw (every raw record in exactly one of them), gold against the latest bronze
row per device. Runs in the CLI process; the pipeline runs in child processes (see :mod:`sparkonce_local.chaos`).
With ``storage="s3"`` the tables live on the embedded S3 store (SeaweedFS, started in the work dir and stopped
after), reached through the pipeline file's ``[storage]`` table; checkpoints stay on the local disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from sparkonce.delta.txn.commit import load_table
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.model import MergeStage
from sparkonce.pipeline.session import use_storage
from sparkonce.spark import JVM_ENV
from sparkonce_local.chaos import DriverRun, run_driver
from sparkonce_local.demo_pipeline import write_quickstart_pipeline
from sparkonce_local.workdir import fresh_work_dir


@dataclass(frozen=True)
class TableCount:
    """Rows of one pipeline table."""

    table: str
    path: str
    rows: int


@dataclass(frozen=True)
class QuickstartResult:
    """Everything the quickstart checked."""

    work_dir: str
    pipeline_file: str
    tables_root: str
    """Where the tables are: ``tables`` in the work dir, or an ``s3://`` URI on the embedded store."""
    produced: int
    malformed: int
    crash_at: str
    crashed: bool
    batch_planned_not_committed: bool
    """Right after the crash, raw's ``offsets/N`` existed without ``commits/N``."""
    restart_ok: bool
    tables: tuple[TableCount, ...]
    raw_duplicated_offsets: int
    raw_missing_offsets: int
    bronze_quarantine_duplicated: int
    """Raw records found more than once across bronze and quarantine."""
    bronze_quarantine_missing: int
    """Raw records in neither bronze nor quarantine."""
    gold_mismatches: int
    """Devices whose gold row is not the latest bronze row (or missing / extra)."""
    quarantine_reasons: dict[str, int]
    log_tail: str

    @property
    def exactly_once(self) -> bool:
        return (
            self.crashed
            and self.restart_ok
            and self.raw_duplicated_offsets == 0
            and self.raw_missing_offsets == 0
            and self.bronze_quarantine_duplicated == 0
            and self.bronze_quarantine_missing == 0
            and self.gold_mismatches == 0
        )


def run_quickstart(
    work_dir: Path,
    *,
    records: int = 3000,
    malformed_share: float = 0.03,
    partitions: int = 2,
    crash_at: str = "after_delta_commit:2",
    storage: Literal["local", "s3"] = "local",
    timeout: float = 900.0,
) -> QuickstartResult:
    """Run the quickstart in ``work_dir`` (wiped first if sparkonce created it). Needs a JDK; takes a few minutes.

    Raises:
        OptionError: ``work_dir`` is a folder sparkonce did not create and is not empty (nothing is deleted).
        BrokerError: the embedded broker cannot start.
        StorageError: the embedded object store cannot start (``storage="s3"``).
    """
    from sparkonce_local.services.broker import start_broker, stop_broker
    from sparkonce_local.services.producer import produce_sensor_readings
    from sparkonce_local.services.storage import start_storage, stop_storage

    work_dir = fresh_work_dir(work_dir, command="quickstart")
    broker_dir, storage_dir = work_dir / "broker", work_dir / "storage"
    info = start_broker(state_dir=broker_dir)
    tables, storage_options = "tables", None
    try:
        if storage == "s3":
            store = start_storage(state_dir=storage_dir)
            tables, storage_options = f"{store.create_bucket('quickstart')}/tables", store.storage_options()
        produced = produce_sensor_readings(
            info.bootstrap, count=records, partitions=partitions, malformed_share=malformed_share, seed=7
        )
        # Raw batches of 1,000 records: the 3,000 records in 3 batches (the crash is in the last), not 6.
        pipeline_file = write_quickstart_pipeline(
            work_dir, info.bootstrap, tables=tables, storage_options=storage_options, max_offsets_per_trigger=1000
        )
        config = load_pipeline(pipeline_file)
        args = ["-m", "sparkonce.cli.main", "run", str(pipeline_file), "--plain"]
        # Each driver lives a minute at most: a quick-start JVM (unless the caller chose a mode).
        env = {JVM_ENV: "quick-start", **os.environ, "PYTHONUNBUFFERED": "1"}
        crashed_run = run_driver(args, crash_at=crash_at, env=env, cwd=str(work_dir), timeout=timeout)
        batch = crash_at.partition(":")[2] or "0"
        ck = Path(config.raw.checkpoint)
        planned = (ck / "offsets" / batch).exists() and not (ck / "commits" / batch).exists()
        restarted = run_driver(args, env=env, cwd=str(work_dir), timeout=timeout)
        checks = check_pipeline_tables(pipeline_file, info.bootstrap)
        tail = _tail(restarted if restarted.returncode != 0 else crashed_run)
        return QuickstartResult(
            work_dir=str(work_dir),
            pipeline_file=str(pipeline_file),
            tables_root=tables if storage == "s3" else str(work_dir / tables),
            produced=produced.records,
            malformed=produced.malformed,
            crash_at=crash_at,
            crashed=crashed_run.killed,
            batch_planned_not_committed=planned,
            restart_ok=restarted.returncode == 0,
            log_tail=tail,
            **checks,
        )
    finally:
        stop_broker(state_dir=broker_dir)
        if storage == "s3":
            stop_storage(state_dir=storage_dir)


def check_pipeline_tables(pipeline_file: Path, bootstrap: str) -> dict[str, Any]:
    """Row counts and the exactly-once checks of every table of a pipeline. Runs on the driver (no Spark)."""
    from sparkonce.kafka import broker_offsets
    from sparkonce.kafka.offsets import OffsetRange, TopicPartition
    from sparkonce.kafka.watermarks import list_partitions
    from sparkonce.ops.verify import verify_table

    config = load_pipeline(pipeline_file)
    use_storage(config)  # tables on an object store: the file's [storage] options
    topic = config.source.topic
    ends = broker_offsets(bootstrap, [TopicPartition(topic, p) for p in list_partitions(bootstrap, topic)])
    expected = [OffsetRange(tp, low, high) for tp, (low, high) in sorted(ends.items())]
    report = verify_table(config.raw.table, expected=expected)
    tables = [("raw", config.raw.table)]
    bronze = quarantine = None
    if config.bronze is not None:
        tables += [("bronze", config.bronze.table), ("quarantine", config.bronze.quarantine)]
        bronze = load_table(config.bronze.table).to_pyarrow_table()
        quarantine = load_table(config.bronze.quarantine).to_pyarrow_table()
    if config.gold is not None:
        tables.append(("gold", config.gold.table))
    counts = tuple(
        TableCount(name, path, load_table(path).to_pyarrow_table(columns=[]).num_rows) for name, path in tables
    )
    duplicated = missing = mismatches = 0
    reasons: dict[str, int] = {}
    if bronze is not None and quarantine is not None:
        raw = load_table(config.raw.table).to_pyarrow_table(columns=["topic", "partition", "offset"])
        seen = pa.concat_tables(
            [
                bronze.select(["_topic", "_partition", "_offset"]).rename_columns(["topic", "partition", "offset"]),
                quarantine.select(["topic", "partition", "offset"]),
            ]
        )
        seen_keys = _keys(seen)
        raw_keys = set(_keys(raw))
        duplicated = len(seen_keys) - len(set(seen_keys))
        missing = len(raw_keys - set(seen_keys))
        for reason in quarantine.column("reason").to_pylist():
            kind = str(reason).split(":")[0]
            reasons[kind] = reasons.get(kind, 0) + 1
        if config.gold is not None:
            mismatches = _gold_mismatches(bronze, load_table(config.gold.table).to_pyarrow_table(), config.gold)
    return {
        "tables": counts,
        "raw_duplicated_offsets": sum(p.duplicated_offsets for p in report.partitions),
        "raw_missing_offsets": sum(p.missing_offsets for p in report.partitions),
        "bronze_quarantine_duplicated": duplicated,
        "bronze_quarantine_missing": missing,
        "gold_mismatches": mismatches,
        "quarantine_reasons": reasons,
    }


def _keys(table: pa.Table) -> list[tuple[str, int, int]]:
    return list(
        zip(
            table.column("topic").to_pylist(), table.column("partition").to_pylist(), table.column("offset").to_pylist()
        )
    )


def _gold_mismatches(bronze: pa.Table, gold: pa.Table, stage: MergeStage) -> int:
    """Keys whose gold row differs from the latest bronze row by ``order_by`` (then ``_offset``)."""
    keys = list(stage.keys)
    order = [*stage.order_by, "_offset"]
    ranked = bronze.sort_by([(c, "descending") for c in order])
    expected: dict[tuple[object, ...], dict[str, object]] = {}
    for row in ranked.to_pylist():
        expected.setdefault(tuple(row[k] for k in keys), row)
    actual = {tuple(row[k] for k in keys): row for row in gold.to_pylist()}
    mismatches = len(set(expected) ^ set(actual))
    for key, row in actual.items():
        want = expected.get(key)
        if want is not None and any(want[c] != row.get(c) for c in want):
            mismatches += 1
    return mismatches


def _tail(run: DriverRun, lines: int = 30) -> str:
    return "\n".join((run.stderr or "").splitlines()[-lines:])


__all__ = ["QuickstartResult", "TableCount", "check_pipeline_tables", "run_quickstart"]
