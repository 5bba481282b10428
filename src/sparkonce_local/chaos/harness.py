"""The chaos harness: run a pipeline round after round under a seeded fault plan, then reconcile every table.

Runs in the calling process (the CLI); the pipeline runs in driver processes (:mod:`sparkonce_local.chaos.driver`),
each in its own process group so it can be killed whole. Each round produces a known number of records (the
quickstart setup), starts the driver with the round's fault armed, and injects it: at a random moment anchored on
a stage's next batch (``delay`` seconds after its ``offsets/N`` appears) for the timed kinds, or when the run
reaches a named crash point. The last rounds run without a fault until the driver drains the input and exits 0.
Then :mod:`sparkonce_local.chaos.reconcile` checks every table against its source, independently of sparkonce.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from sparkonce.crash import ENV_ARM, ENV_HITS_DIR, ENV_PGID, ENV_POINT, ENV_RECORD, ENV_TARGET, read_crash_records
from sparkonce.errors import OptionError, SparkonceError
from sparkonce_local.chaos.plan import (
    DURING_COMMITS,
    FAULT_KINDS,
    RESTART_KINDS,
    STORE_KINDS,
    Fault,
    FaultEvent,
    FaultKind,
    FaultPlan,
    NaiveKind,
    SoakPlan,
    make_plan,
)
from sparkonce_local.chaos.process import kill_group, killed_by_crash_point, python_workers
from sparkonce_local.chaos.reconcile import (
    TableCheck,
    check_bronze,
    check_file_sink,
    check_gold,
    check_postgres,
    check_raw,
    check_topic,
    check_topic_values,
    checkpoint_batches,
    delta_rows,
    read_topic,
)
from sparkonce_local.chaos.spec import DriverSpec

if TYPE_CHECKING:
    from sparkonce.pipeline.model import PipelineConfig
    from sparkonce_local.services.faultproxy import FaultProxy
    from sparkonce_local.services.postgres import PostgresServer

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MARKER = ".sparkonce-chaos"
"""File that marks a work directory as made by the harness (only such a directory is wiped)."""
MALFORMED_SHARE = 0.03
START_TIME = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ChaosOptions:
    """What to run. Runs on the driver."""

    pipeline: Path | None = None
    """A pipeline file; None: the quickstart's embedded setup in ``work_dir`` (broker, producer, PostgreSQL; and the
    object store holding the broker's log when a broker or store restart can be drawn)."""
    faults: int = 10
    seed: int = 0
    naive: NaiveKind | None = None
    plan: FaultPlan | SoakPlan | None = None
    """Replay this plan instead of making one from ``seed`` and ``faults`` (a :class:`SoakPlan` in soak mode)."""
    work_dir: Path = Path(".sparkonce") / "chaos"
    records_per_round: int = 400
    partitions: int = 2
    kinds: tuple[FaultKind, ...] = FAULT_KINDS
    deadline: float = 3600.0
    """Seconds for the whole run; past it the driver is killed and the run reports it did not drain."""
    rate: float = 20.0
    """Soak mode: records per second the producer hands to the broker throughout the run."""
    storage: Literal["local", "s3"] = "local"
    """Where the quickstart setup's tables live: the local disk, or the embedded object store (``s3``, the store
    that also holds the broker's log), read by the stages and the reconciliation with the store's options."""
    pg_commit_protocol: Literal["staging", "two-phase"] = "staging"
    """The PostgreSQL stage's commit protocol (the quickstart setup): ``two-phase`` puts prepared transactions under
    the same faults (a PostgreSQL kill keeps them; an executor kill leaves one behind for the next batch to roll
    back)."""
    retries: int = 5
    """Extra clean rounds allowed when the last planned round does not exit 0 (on a loaded machine a stage can
    fail on its own, e.g. Spark's 10 s for a new Python worker to connect back; each retry resumes it)."""


@dataclass(frozen=True)
class RoundResult:
    """One driver run."""

    index: int
    records: int
    fault: Fault | None
    injected: bool
    outcome: str
    exit_code: int | None
    seconds: float


@dataclass(frozen=True)
class ChaosResult:
    """Everything a chaos run did and found."""

    schema_version: int
    seed: int
    naive: NaiveKind | None
    pipeline: str
    work_dir: str
    faults_planned: int
    faults_injected: int
    injected_by_kind: dict[str, int]
    injected_by_point: dict[str, int]
    driver_runs: int
    restarts: int
    """Driver runs after the first (every one resumes from the checkpoints)."""
    batches: dict[str, int]
    """Committed batches (``commits/N`` files) per stage at the end."""
    records: int
    """Records produced (the quickstart setup), or found in the topic (a pipeline file)."""
    malformed: int
    tables: tuple[TableCheck, ...]
    drained: bool
    """The last driver run exited 0: every stage drained its input."""
    exactly_once: bool
    """Drained, and every table holds every record once: no duplicate, no loss, no extra, no wrong value."""
    seconds: float
    rounds: tuple[RoundResult, ...]
    """Rounds; in soak mode the driver runs (with the crash point each was armed with)."""
    plan: FaultPlan | SoakPlan
    error: str | None = None
    log_tail: str = ""
    mode: Literal["rounds", "soak"] = "rounds"
    events: tuple[FaultEvent, ...] = ()
    """Soak mode: every fault with its time, kind and whether it really happened."""
    fault_seconds: float = 0.0
    """Soak mode: seconds from the first fault's gap to the last fault's end (what ``faults_per_minute`` uses)."""
    produced_during_outages: int = 0
    """Soak mode: records the paced producer handed over while the broker or its store was down (about)."""
    produces_refused: int = 0
    """Soak mode: produces the broker refused (e.g. its store down) or never answered; each may be in the topic
    at most once."""
    produce_errors: dict[str, int] = field(default_factory=dict)
    """Soak mode: the delivery errors of the refused produces, by text (the five most frequent)."""
    faults_per_minute: float = 0.0
    """Soak mode: faults injected per minute of ``fault_seconds``."""

    @property
    def duplicates(self) -> int:
        return sum(t.duplicates for t in self.tables)

    @property
    def lost(self) -> int:
        return sum(t.lost for t in self.tables)


RoundCallback = Callable[[RoundResult], None]


@dataclass
class ChaosSetup:
    """The services and paths of one run (harness side)."""

    work_dir: Path
    pipeline_file: Path
    config: PipelineConfig
    bootstrap: str
    spec: DriverSpec
    checkpoints: dict[str, str]
    broker_dir: Path | None = None
    postgres: PostgresServer | None = None
    storage_dir: Path | None = None
    """The object store holding the broker's log (when a broker or store restart can be drawn)."""
    proxy: FaultProxy | None = None
    """With the tables on the object store: the fault proxy between Spark and the store (``store_lost_response``)."""
    produced: list[tuple[int, int]] = field(default_factory=list)
    deliveries: tuple[Counter[bytes], Counter[bytes]] | None = None
    """Soak mode: the values acknowledged, and those refused or never answered (see ``check_topic_values``)."""


def run_chaos(options: ChaosOptions, *, on_round: RoundCallback | None = None) -> ChaosResult:
    """Run the plan of ``options`` and reconcile every table.

    Raises:
        OptionError: bad options, or a work directory that the harness did not make.
        PipelineConfigError: the pipeline file is invalid.
        BrokerError: the broker cannot start or does not answer.
        SinkError: PostgreSQL cannot start.
    """
    if isinstance(options.plan, SoakPlan):
        raise OptionError("plan", "soak", "is a soak plan: replay it in soak mode")
    started = time.monotonic()
    deadline = started + options.deadline
    work_dir = chaos_work_dir(options.work_dir)
    setup = set_up(options, work_dir)
    try:
        plan = options.plan or make_plan(
            seed=options.seed,
            faults=options.faults,
            stages=tuple(setup.checkpoints),
            kinds=options.kinds,
            naive=options.naive,
            records_per_round=options.records_per_round,
            services=options.pipeline is None,
        )
        missing = {f.kind for f in plan.faults if f.kind in STORE_KINDS} if setup.storage_dir is None else set()
        if missing:
            raise OptionError("plan", sorted(missing), "needs the broker on the object store, which this run has not")
        if plan.naive != options.naive:
            raise OptionError("plan", plan.naive, f"was made for naive={plan.naive}, the run asks for {options.naive}")
        rounds: list[RoundResult] = []
        error: str | None = None
        last: RoundResult | None = None
        queue = list(plan.rounds)
        retries = options.retries
        index = 0
        while queue:
            planned = queue.pop(0)
            if time.monotonic() >= deadline:
                error = f"deadline of {options.deadline:.0f}s passed before round {index}"
                break
            if planned.records and options.pipeline is None:
                _produce(setup, planned.records, options, index)
            last = _run_round(setup, index, planned.records, planned.fault, deadline)
            rounds.append(last)
            if on_round is not None:
                on_round(last)
            index += 1
            fault = last.fault
            failed_first = fault is not None and fault.kind != "crash_point" and not last.injected
            if failed_first and last.exit_code not in (0, None) and retries > 0:
                # The driver failed on its own before the fault's moment (e.g. a stage timed out on a loaded
                # machine): the fault gets another chance in an extra round, so every planned fault is tried.
                retries -= 1
                queue.insert(0, type(planned)(0, fault))
                continue
            if not queue and last.exit_code != 0 and retries > 0:
                retries -= 1
                queue.append(type(planned)(0, None))
        drained = last is not None and last.exit_code == 0
        if last is not None and not drained and error is None:
            error = f"the last driver run ended with {last.outcome}: the input was not drained"
        tables, topic_records = reconcile_tables(setup, options)
        injected = [r.fault for r in rounds if r.fault is not None and r.injected]
        by_kind = Counter(f.kind for f in injected)
        by_point = Counter(f.point or "" for f in injected if f.kind == "crash_point")
        exactly_once = drained and error is None and all(t.ok for t in tables)
        return ChaosResult(
            schema_version=SCHEMA_VERSION,
            seed=plan.seed,
            naive=plan.naive,
            pipeline=str(setup.pipeline_file),
            work_dir=str(work_dir),
            faults_planned=len(plan.faults),
            faults_injected=len(injected),
            injected_by_kind={k: by_kind.get(k, 0) for k in FAULT_KINDS},
            injected_by_point=dict(sorted(by_point.items())),
            driver_runs=len(rounds),
            restarts=max(0, len(rounds) - 1),
            batches={stage: checkpoint_batches(ck) for stage, ck in setup.checkpoints.items()},
            records=sum(n for n, _ in setup.produced) if options.pipeline is None else topic_records,
            malformed=sum(m for _, m in setup.produced),
            tables=tuple(tables),
            drained=drained,
            exactly_once=exactly_once,
            seconds=round(time.monotonic() - started, 1),
            rounds=tuple(rounds),
            plan=plan,
            error=error,
            log_tail="" if exactly_once else log_tail(work_dir, rounds),
        )
    finally:
        tear_down(setup)


# -- setup ---------------------------------------------------------------------------------------------------------


def chaos_work_dir(work_dir: Path) -> Path:
    work_dir = work_dir.absolute()
    if work_dir.exists():
        if any(work_dir.iterdir()) and not (work_dir / MARKER).exists():
            raise OptionError(
                "work_dir", str(work_dir), f"exists and was not made by sparkonce chaos (no {MARKER}): not wiping it"
            )
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    (work_dir / MARKER).write_text("made by sparkonce chaos; wiped by the next run\n", encoding="utf-8")
    (work_dir / "rounds").mkdir()
    return work_dir


def set_up(options: ChaosOptions, work_dir: Path) -> ChaosSetup:
    from sparkonce.pipeline.loader import load_pipeline

    if options.pipeline is not None:
        if options.storage != "local":
            raise OptionError(
                "storage",
                options.storage,
                "applies to the quickstart setup only (a pipeline file "
                "says where its tables are, with its [storage] options)",
            )
        pipeline_file = options.pipeline.absolute()
        config = load_pipeline(pipeline_file)
        spec = DriverSpec(pipeline=str(pipeline_file), naive=options.naive)
        checkpoints: dict[str, str] = {s.name: s.checkpoint for s in config.stages}
        return ChaosSetup(work_dir, pipeline_file, config, config.source.bootstrap_servers, spec, checkpoints)
    from sparkonce_local.demo_pipeline import write_quickstart_pipeline
    from sparkonce_local.services.broker import start_broker, stop_broker
    from sparkonce_local.services.postgres import start_postgres
    from sparkonce_local.services.storage import start_storage, stop_storage

    broker_dir = work_dir / "broker"
    storage_dir = work_dir / "storage" if wants_store(options) else None
    store = start_storage(state_dir=storage_dir) if storage_dir is not None else None
    try:
        info = start_broker(state_dir=broker_dir, store=store)
    except BaseException:
        if storage_dir is not None:
            stop_storage(state_dir=storage_dir)
        raise
    proxy: FaultProxy | None = None
    try:
        tables, storage_options = "tables", None
        if store is not None and options.storage == "s3":
            # Spark reaches the tables through a fault proxy (transparent until a store_lost_response arms it).
            from sparkonce_local.services.faultproxy import FaultProxy

            endpoint = urlsplit(store.endpoint)
            proxy = FaultProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80)
            tables = f"{store.create_bucket('chaos')}/tables"
            storage_options = {**store.storage_options(), "AWS_ENDPOINT_URL": proxy.endpoint}
        pipeline_file = write_quickstart_pipeline(
            work_dir, info.bootstrap, tables=tables, storage_options=storage_options
        )
        config = load_pipeline(pipeline_file)
        if options.naive == "file-sink-glob":
            checkpoints = {"raw_files": str(work_dir / "checkpoints" / "raw_files")}
            spec = DriverSpec(
                pipeline=str(pipeline_file),
                naive=options.naive,
                file_sink_dir=str(work_dir / "tables" / "raw_files"),
                file_sink_checkpoint=checkpoints["raw_files"],
            )
            return ChaosSetup(
                work_dir,
                pipeline_file,
                config,
                info.bootstrap,
                spec,
                checkpoints,
                broker_dir=broker_dir,
                storage_dir=storage_dir,
                proxy=proxy,
            )
        # A temporary cluster directory (removed on stop): when run as root, the server runs as the postgres OS user,
        # which cannot enter a private work directory.
        postgres = start_postgres()
    except BaseException:
        if proxy is not None:
            proxy.close()
        stop_broker(state_dir=broker_dir)
        if storage_dir is not None:
            stop_storage(state_dir=storage_dir)
        raise
    checkpoints = {s.name: s.checkpoint for s in config.stages}
    checkpoints["postgres"] = str(work_dir / "checkpoints" / "postgres")
    spec = DriverSpec(
        pipeline=str(pipeline_file),
        naive=options.naive,
        postgres_dsn=postgres.dsn,
        postgres_checkpoint=checkpoints["postgres"],
        postgres_commit_protocol=options.pg_commit_protocol,
    )
    return ChaosSetup(
        work_dir, pipeline_file, config, info.bootstrap, spec, checkpoints, broker_dir, postgres, storage_dir, proxy
    )


def wants_store(options: ChaosOptions) -> bool:
    """True when the run has its tables on the object store, or can draw a broker or store restart (the broker's
    log then goes on the object store)."""
    if options.storage == "s3":
        return True
    if options.plan is not None:
        return any(f.kind in STORE_KINDS for f in options.plan.faults)
    drawn = options.faults - (1 if options.naive is not None else 0)  # a naive run's first fault is its crash point
    return drawn > 0 and any(k in STORE_KINDS for k in options.kinds)


def tear_down(setup: ChaosSetup) -> None:
    from sparkonce_local.services.broker import stop_broker
    from sparkonce_local.services.postgres import stop_postgres
    from sparkonce_local.services.storage import stop_storage

    if setup.proxy is not None:
        setup.proxy.close()
    if setup.postgres is not None:
        with contextlib.suppress(SparkonceError):
            stop_postgres(setup.postgres)
    if setup.broker_dir is not None:
        stop_broker(state_dir=setup.broker_dir)
    if setup.storage_dir is not None:
        stop_storage(state_dir=setup.storage_dir, timeout=1.0)  # a throwaway store: no need for its slow SIGTERM


def _produce(setup: ChaosSetup, records: int, options: ChaosOptions, index: int) -> None:
    from sparkonce_local.services.producer import produce_sensor_readings

    result = produce_sensor_readings(
        setup.bootstrap,
        topic=setup.config.source.topic,
        count=records,
        partitions=options.partitions,
        malformed_share=MALFORMED_SHARE,
        seed=options.seed * 100_003 + index,
        start_time=START_TIME + timedelta(hours=index),
        # A retried produce is written once (the broker or its store may just have been restarted).
        client_config={"enable.idempotence": "true"},
    )
    setup.produced.append((result.records, result.malformed))


# -- one round -----------------------------------------------------------------------------------------------------


def _run_round(setup: ChaosSetup, index: int, records: int, fault: Fault | None, deadline: float) -> RoundResult:
    started = time.monotonic()
    round_dir = setup.work_dir / "rounds" / f"{index:04d}"
    round_dir.mkdir(parents=True)
    spec_file = round_dir / "driver.json"
    setup.spec.dump(spec_file)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable}
    for name in (ENV_POINT, ENV_PGID, ENV_HITS_DIR, ENV_TARGET, ENV_ARM):
        env.pop(name, None)
    env[ENV_RECORD] = str(round_dir / "crashes.jsonl")
    if fault is not None and fault.kind == "crash_point":
        point = "after_delta_commit" if fault.point == DURING_COMMITS else fault.point
        env[ENV_POINT] = f"{point}#{fault.hit}"
        env[ENV_HITS_DIR] = str(round_dir / "hits")
        (round_dir / "hits").mkdir()
    anchors = {stage: _last_batch(ck) for stage, ck in setup.checkpoints.items()}
    with open(round_dir / "driver.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkonce_local.chaos.driver", str(spec_file)],
            env=env,
            cwd=str(setup.work_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    injected = False
    note = ""
    try:
        if fault is not None and fault.kind != "crash_point":
            injected, note = _inject_timed(setup, proc, fault, anchors, deadline)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
            return RoundResult(index, records, fault, injected, "deadline: killed", None, _since(started))
    finally:
        kill_group(proc.pid)
    code = proc.returncode
    if fault is not None and fault.kind == "crash_point":
        injected = killed_by_crash_point(code, proc.pid, read_crash_records(env[ENV_RECORD]))
        note = "killed at the point" if injected else "point not reached"
        if injected and fault.point == DURING_COMMITS:
            note += _tear_commit(setup.checkpoints.get("raw"))
    outcome = f"SIGKILL ({note})" if code == -signal.SIGKILL else f"exit {code}" + (f" ({note})" if note else "")
    return RoundResult(index, records, fault, injected, outcome, code, _since(started))


def _inject_timed(
    setup: ChaosSetup, proc: subprocess.Popen[bytes], fault: Fault, anchors: dict[str, int], deadline: float
) -> tuple[bool, str]:
    """Wait for the anchor (the stage's next batch planned), then ``delay`` seconds, then inject the fault."""
    stage = fault.stage or next(iter(setup.checkpoints))
    checkpoint = setup.checkpoints.get(stage)
    while proc.poll() is None and time.monotonic() < deadline:
        if checkpoint is None or _last_batch(checkpoint) > anchors.get(stage, -1):
            break
        time.sleep(0.05)  # polling the checkpoint folder for offsets/N; the deadline bounds it
    end = time.monotonic() + fault.delay
    while proc.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    if proc.poll() is not None:
        return False, "missed: the driver ended first"
    if fault.kind == "driver_kill":
        kill_group(proc.pid)
        return True, "driver group killed"
    if fault.kind == "worker_kill":
        # The anchor is the batch's offsets/N: its tasks (and their workers) may start a while later.
        while proc.poll() is None and time.monotonic() < deadline:
            workers = python_workers(proc.pid)
            if workers:
                os.kill(workers[0], signal.SIGKILL)
                return True, f"worker {workers[0]} killed"
            time.sleep(0.02)
        return False, "missed: the driver ended before a Python worker ran"
    if fault.kind in RESTART_KINDS:
        return restart_service(setup, fault)
    return False, f"missed: unknown kind {fault.kind}"


def restart_service(setup: ChaosSetup, fault: Fault) -> tuple[bool, str]:
    """SIGKILL the fault's service, keep it down ``fault.downtime`` seconds, start it on the same ports and data."""
    from sparkonce_local.services.broker import broker_status, kill_broker, restart_broker
    from sparkonce_local.services.postgres import kill_postgres, restart_postgres
    from sparkonce_local.services.storage import kill_storage, restart_storage

    if fault.kind == "postgres_restart":
        if setup.postgres is None:
            return False, "missed: no PostgreSQL in this setup"
        killed = kill_postgres(setup.postgres)
        time.sleep(fault.downtime)  # the planned downtime of the database
        restart_postgres(setup.postgres)
        if killed is None:
            return False, "missed: PostgreSQL was not running (started again)"
        return True, f"PostgreSQL {killed} killed, down {fault.downtime:.2f}s, restarted"
    if setup.storage_dir is None or setup.broker_dir is None:
        return False, f"missed: {fault.kind} needs the broker on the object store"
    if fault.kind == "broker_restart":
        killed = kill_broker(state_dir=setup.broker_dir)
        time.sleep(fault.downtime)  # the planned downtime of the broker
        restart_broker(state_dir=setup.broker_dir)
        if killed is None:
            return False, "missed: the broker was not running (started again)"
        return True, f"broker {killed} killed, down {fault.downtime:.2f}s, restarted"
    killed = kill_storage(state_dir=setup.storage_dir)
    time.sleep(fault.downtime)  # the planned downtime of the object store
    restart_storage(state_dir=setup.storage_dir, crash=True)
    if killed is None:
        return False, "missed: the object store was not running (started again)"
    note = f"object store {killed} killed, down {fault.downtime:.2f}s, restarted"
    if not broker_status(state_dir=setup.broker_dir).running:
        # Not seen so far (tansu refuses requests while its store is down and serves again after), but a broker
        # that died with its store must not end the run: it is restarted on its log, and the round says so.
        restart_broker(state_dir=setup.broker_dir)
        note += "; the broker had died with it and was restarted"
    return True, note


def _last_batch(checkpoint: str) -> int:
    folder = Path(checkpoint) / "offsets"
    if not folder.is_dir():
        return -1
    numbers = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    return max(numbers, default=-1)


def _tear_commit(checkpoint: str | None) -> str:
    """Leave what a kill in the middle of Spark's ``commits/N`` write leaves: a torn ``.N.<uuid>.tmp``."""
    if checkpoint is None:
        return ""
    batch = _last_batch(checkpoint)
    commits = Path(checkpoint) / "commits"
    if batch < 0 or (commits / str(batch)).exists():
        return ""
    commits.mkdir(exist_ok=True)
    (commits / f".{batch}.{uuid.uuid4()}.tmp").write_text('v1\n{"nextBatchWatermarkMs', encoding="utf-8")
    return f"; torn commits/.{batch}.tmp left"


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


# -- reconciliation ------------------------------------------------------------------------------------------------


def reconcile_tables(setup: ChaosSetup, options: ChaosOptions) -> tuple[list[TableCheck], int]:
    """Every table's check, and the number of records in the topic."""
    config = setup.config
    storage = config.storage_options()  # the tables' store (none for local tables)
    topic = read_topic(setup.bootstrap, config.source.topic)
    # The quickstart setup produced the input itself: the topic must hold each acknowledged record once.
    if setup.deliveries is not None:  # soak mode: value by value, against the producer's delivery reports
        checks = [check_topic_values(topic, *setup.deliveries)]
    elif options.pipeline is None:
        checks = [check_topic(topic, sum(n for n, _ in setup.produced))]
    else:
        checks = []
    if options.naive == "file-sink-glob":
        folder = Path(setup.spec.file_sink_dir or "")
        return [
            *checks,
            check_file_sink(folder, topic, through_metadata=False),
            check_file_sink(folder, topic, through_metadata=True),
        ], len(topic)
    checks.append(check_raw(config.raw.table, topic, storage_options=storage))
    if config.bronze is not None:
        raw_rows = delta_rows(config.raw.table, ["partition", "offset"], storage_options=storage)
        raw_keys = {(int(r["partition"]), int(r["offset"])) for r in raw_rows}
        checks.append(check_bronze(config.bronze.table, config.bronze.quarantine, raw_keys, storage_options=storage))
        if config.gold is not None:
            order = (config.gold.order_by,) if isinstance(config.gold.order_by, str) else tuple(config.gold.order_by)
            checks.append(
                check_gold(
                    config.gold.table,
                    config.bronze.table,
                    keys=tuple(config.gold.keys),
                    order_by=order,
                    storage_options=storage,
                )
            )
        if setup.postgres is not None and setup.spec.postgres_dsn is not None:
            checks.append(
                check_postgres(
                    setup.spec.postgres_dsn, setup.spec.postgres_table, config.bronze.table, storage_options=storage
                )
            )
    return checks, len(topic)


def log_tail(work_dir: Path, rounds: list[RoundResult], lines: int = 25) -> str:
    if not rounds:
        return ""
    path = work_dir / "rounds" / f"{rounds[-1].index:04d}" / "driver.log"
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


__all__ = ["SCHEMA_VERSION", "ChaosOptions", "ChaosResult", "RoundResult", "run_chaos"]
