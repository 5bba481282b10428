"""The chaos harness: run a pipeline round after round under a seeded fault plan, then reconcile every table.

Runs in the calling process (the CLI); the pipeline runs in driver processes (:mod:`sparkonce_local.chaos.driver`),
each in its own process group so it can be killed whole. Each round produces a known number of records (the
quickstart setup), starts the driver with the round's fault armed, and injects it: at a random moment anchored on
a stage's next batch (``delay`` seconds after its ``offsets/N`` appears) for the timed kinds, or when the run
reaches a named crash point. The last rounds run without a fault until the driver drains the input and exits 0.
Then :mod:`sparkonce_local.chaos.reconcile` checks every table against its source, independently of sparkonce.
The work directory, the services and the final reconciliation are the test bed's (:mod:`.testbed`), shared
with soak mode; the options and the result are :mod:`.model`'s.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

from sparkonce.crash import ENV_ARM, ENV_HITS_DIR, ENV_PGID, ENV_POINT, ENV_RECORD, ENV_TARGET, read_crash_records
from sparkonce.errors import OptionError
from sparkonce_local.chaos.driverlog import count_driver_logs
from sparkonce_local.chaos.model import SCHEMA_VERSION, ChaosOptions, ChaosResult, RoundCallback, RoundResult
from sparkonce_local.chaos.network import inject_network
from sparkonce_local.chaos.plan import (
    DURING_COMMITS,
    FAULT_KINDS,
    LINK_OF,
    NETWORK_KINDS,
    RESTART_KINDS,
    STORE_KINDS,
    Fault,
    SoakPlan,
    make_plan,
)
from sparkonce_local.chaos.process import kill_group, killed_by_crash_point, python_workers
from sparkonce_local.chaos.reconcile import checkpoint_batches
from sparkonce_local.chaos.testbed import (
    MALFORMED_SHARE,
    START_TIME,
    ChaosSetup,
    chaos_work_dir,
    links_of,
    log_tail,
    reconcile_tables,
    restart_service,
    set_up,
    tear_down,
)

log = logging.getLogger(__name__)


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
            links=links_of(setup),
        )
        missing = {f.kind for f in plan.faults if f.kind in STORE_KINDS} if setup.storage_dir is None else set()
        if missing:
            raise OptionError("plan", sorted(missing), "needs the object store, which this run has not")
        unlinked = {
            f.kind
            for f in plan.faults
            if f.kind in NETWORK_KINDS and (f.link or LINK_OF[f.kind]) not in links_of(setup)
        }
        if unlinked:
            raise OptionError(
                "plan",
                sorted(unlinked),
                "needs a fault proxy on its link (the store's: --storage s3, quickstart setup)",
            )
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
        logged = count_driver_logs(work_dir, [r.index for r in rounds])
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
            retries_by_kind=logged.retries_by_kind,
            failed_passes=logged.failed_passes,
        )
    finally:
        tear_down(setup)


# -- setup ---------------------------------------------------------------------------------------------------------


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
    if fault.kind in NETWORK_KINDS:
        return inject_network(setup, fault, deadline, alive=lambda: proc.poll() is None)
    return False, f"missed: unknown kind {fault.kind}"


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


__all__ = ["run_chaos"]
