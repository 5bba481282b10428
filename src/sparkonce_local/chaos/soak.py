"""Soak mode of the chaos harness: many faults during one long run of the pipeline, then the same reconciliation.

Runs in the calling process (the CLI). One driver program runs every stage pass after pass in one Spark session
(:attr:`DriverSpec.soak_stop`) while a producer thread keeps producing at a fixed rate, and the injector fires the
plan's faults one after another, each ``delay`` seconds (seeded) after the previous one ended: an executor Python
worker SIGKILLed while it runs a task (Spark retries the task), the broker, PostgreSQL or the object store
SIGKILLed and restarted after ``downtime`` seconds, and every :data:`~sparkonce_local.chaos.plan.DRIVER_EVERY`-th
fault the driver's whole process group; the driver started after such a kill is armed with a named crash point.
A driver that ends for any other reason is started again. A fault counts as injected only when its process was
there and died (a worker that ran no task, a service that was not running: not counted).

With :attr:`ChaosOptions.overlap_network` the network faults leave that sequence: each link (broker, PostgreSQL,
store) gets a thread that injects its faults in plan order (:class:`_LinkInjectors`), and the plan goes on at
once, so a fault waiting for its link's traffic or holding a pause overlaps the kills and the other links' faults.

When the plan is done the producer stops, its records are all acknowledged, a stop file tells the driver to exit
after its next complete pass, and :func:`~sparkonce_local.chaos.testbed.reconcile_tables` checks every table.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from sparkonce.crash import (
    ENV_ARM,
    ENV_HITS_DIR,
    ENV_PGID,
    ENV_POINT,
    ENV_RECORD,
    ENV_TARGET,
    arm,
    disarm,
    read_crash_records,
)
from sparkonce.errors import OptionError
from sparkonce_local.chaos.driverlog import count_driver_logs
from sparkonce_local.chaos.model import SCHEMA_VERSION, ChaosOptions, ChaosResult, RoundResult
from sparkonce_local.chaos.network import inject_network, link_of
from sparkonce_local.chaos.paced import PacedProducer
from sparkonce_local.chaos.plan import (
    FAULT_KINDS,
    NETWORK_KINDS,
    RESTART_KINDS,
    STORE_KINDS,
    Fault,
    FaultEvent,
    SoakPlan,
    make_soak_plan,
)
from sparkonce_local.chaos.process import gone, kill_group, killed_by_crash_point, python_workers
from sparkonce_local.chaos.reconcile import checkpoint_batches, missing_values, read_topic
from sparkonce_local.chaos.testbed import (
    ChaosSetup,
    chaos_work_dir,
    links_of,
    log_tail,
    reconcile_tables,
    restart_service,
    set_up,
    tear_down,
)

WORKER_WAIT = 120.0
"""Seconds a ``worker_kill`` waits for an executor Python worker running a task (e.g. while a driver starts)."""
WARM_UP = 300.0
"""Seconds the first fault waits at most for the first driver to commit its first raw batch (not in the rate)."""
COMMIT_WAIT = 120.0
"""Seconds a ``commit_process_kill`` waits for a Delta sink's commit to reach the armed point."""
DRAIN_RESERVE = 600.0
"""Seconds of the deadline kept for the final drain: the fault phase stops at the deadline minus this (at most half
the deadline), so a run cut short by its deadline still drains and reconciles every table."""
SOAK_POSTGRES_MAX_FILES = 50
"""The PostgreSQL stage's ``maxFilesPerTrigger`` in a soak (:attr:`DriverSpec.postgres_max_files`). A batch is
redone over the range its ``offsets/N`` planned, and a fault ends a pass every minute or so: a batch planned over
the whole backlog (the source's default of 1000 files) could not finish between two faults and was redone and failed
again (a 2,000-fault run's PostgreSQL stage made 6 batches in two hours); batches of 50 files kept it up with the
plan in the next run."""
SOAK_MASTER = "local[2,8]"
"""Two cores; a task may be tried 8 times: worker kills come every few seconds and must not exhaust a task."""


FaultCallback = Callable[[FaultEvent], None]


def run_soak(options: ChaosOptions, *, on_fault: FaultCallback | None = None) -> ChaosResult:
    """Run ``options`` in soak mode (the quickstart setup) and reconcile every table.

    Raises:
        OptionError: bad options (a pipeline file, a naive kind, a round plan), or a foreign work directory.
        BrokerError, SinkError, StorageError: a service cannot start or restart.
    """
    if options.pipeline is not None:
        raise OptionError("soak", str(options.pipeline), "runs on the quickstart setup only (no PIPELINE)")
    if options.naive is not None:
        raise OptionError("soak", options.naive, "does not run naive baselines (they run in rounds)")
    if options.plan is not None and not isinstance(options.plan, SoakPlan):
        raise OptionError("plan", "rounds", "is a round plan: replay it without soak mode")
    started = time.monotonic()
    deadline = started + options.deadline
    work_dir = chaos_work_dir(options.work_dir)
    plan = options.plan if isinstance(options.plan, SoakPlan) else None
    # The object store is always on in soak mode (a storage_restart can be drawn whatever the tables' place).
    # The broker's and PostgreSQL's links get a fault proxy when a network kind can be drawn.
    network = {f.kind for f in plan.faults} if plan is not None else set(options.kinds)
    kinds = (*STORE_KINDS, *(k for k in NETWORK_KINDS if k in network))
    setup = set_up(dataclasses.replace(options, plan=None, kinds=kinds, faults=max(1, options.faults)), work_dir)
    driver: _Driver | None = None
    try:
        if plan is None:
            plan = make_soak_plan(
                seed=options.seed,
                faults=options.faults,
                kinds=options.kinds,
                rate=options.rate,
                stages=tuple(setup.checkpoints),
                tables_on_store=options.storage == "s3",
                links=links_of(setup),
            )
        stop_file = work_dir / "rounds" / "stop"
        setup.spec = dataclasses.replace(
            setup.spec, soak_stop=str(stop_file), master=SOAK_MASTER, postgres_max_files=SOAK_POSTGRES_MAX_FILES
        )
        events: list[FaultEvent] = []
        outages: list[tuple[float, float]] = []

        def record(event: FaultEvent) -> None:
            events.append(event)
            if on_fault is not None:
                on_fault(event)

        def ended(index: int, fault: Fault, at: float, end: float, injected: bool, note: str) -> None:
            if injected and fault.kind in (*STORE_KINDS, "broker_restart", "broker_net_pause"):
                outages.append((at, end))
            record(FaultEvent(index, fault.kind, round(at - started, 2), round(end - at, 2), injected, note))

        producer = PacedProducer(setup, options, plan.rate, started)
        producer.first(options.records_per_round)  # the topic exists and has input before the driver starts
        producer.start()
        driver = _Driver(setup, plan, started, record)
        driver.start()
        error: str | None = None
        _warm_up(setup, min(deadline, time.monotonic() + WARM_UP))
        injecting = time.monotonic()
        reserve = min(DRAIN_RESERVE, options.deadline / 2)
        faults_until = deadline - reserve
        links = _LinkInjectors(setup, faults_until, ended) if options.overlap_network else None
        try:
            for index, fault in enumerate(plan.faults):
                if time.monotonic() >= faults_until:
                    error = (
                        f"deadline of {options.deadline:.0f}s: the fault phase stopped at fault {index} of "
                        f"{len(plan.faults)} ({reserve:.0f}s kept for the drain)"
                    )
                    break
                wait_until = time.monotonic() + fault.delay
                while time.monotonic() < wait_until:
                    time.sleep(0.01)  # the plan's gap before this fault
                if links is not None:
                    links.raise_failure()
                    if fault.kind in NETWORK_KINDS or fault.kind in SERVICE_LINK:
                        links.submit(index, fault)
                        continue
                at = time.monotonic()
                injected, note = _inject(setup, driver, fault, deadline)
                ended(index, fault, at, time.monotonic(), injected, note)
            if links is not None:
                links.finish()
                links.raise_failure()
            fault_seconds = time.monotonic() - injecting
        finally:
            if links is not None:
                links.finish(cancel=True)  # after an error: no link waits for traffic any more
            produced = producer.stop()
        stop_file.write_text("the producer stopped: exit after the next complete pass\n", encoding="utf-8")
        drained = driver.finish(deadline)
        if not drained and error is None:
            error = "the driver did not end a complete pass after the stop file before the deadline"
        tables, _ = reconcile_tables(setup, options)
        if any(t.table == "topic" and t.lost for t in tables):
            _write_topic_losses(setup, producer, events, work_dir / "rounds" / "topic-lost.json")
        injected_events = [e for e in events if e.injected]
        by_kind = Counter(e.kind for e in injected_events)
        by_point = Counter(e.point or "" for e in injected_events if e.kind == "crash_point")
        exactly_once = drained and error is None and all(t.ok for t in tables)
        runs = driver.runs
        logged = count_driver_logs(work_dir, [r.index for r in runs])
        return ChaosResult(
            schema_version=SCHEMA_VERSION,
            seed=plan.seed,
            naive=None,
            pipeline=str(setup.pipeline_file),
            work_dir=str(work_dir),
            faults_planned=len(plan.faults) + len(plan.crash_points),
            faults_injected=len(injected_events),
            injected_by_kind={k: by_kind.get(k, 0) for k in FAULT_KINDS},
            injected_by_point=dict(sorted(by_point.items())),
            driver_runs=len(runs),
            restarts=max(0, len(runs) - 1),
            batches={stage: checkpoint_batches(ck) for stage, ck in setup.checkpoints.items()},
            records=produced[0],
            malformed=produced[1],
            tables=tuple(tables),
            drained=drained,
            exactly_once=exactly_once,
            seconds=round(time.monotonic() - started, 1),
            rounds=tuple(runs),
            plan=plan,
            error=error,
            log_tail="" if exactly_once else log_tail(work_dir, runs),
            retries_by_kind=logged.retries_by_kind,
            failed_passes=logged.failed_passes,
            mode="soak",
            events=tuple(sorted(events, key=lambda e: e.at)),
            fault_seconds=round(fault_seconds, 1),
            faults_per_minute=round(len(injected_events) * 60.0 / fault_seconds, 2) if fault_seconds > 0 else 0.0,
            produced_during_outages=producer.records_between(outages),
            produces_refused=producer.refused.total(),
            produce_errors=dict(producer.errors.most_common(5)),
        )
    finally:
        if driver is not None:
            driver.abort()
        tear_down(setup)


def _write_topic_losses(setup: ChaosSetup, producer: PacedProducer, events: list[FaultEvent], path: Path) -> None:
    """Write the acknowledged values the topic lacks, with when each was acknowledged, next to the fault log."""
    topic = read_topic(setup.bootstrap, setup.config.source.topic)
    lost = missing_values(topic, producer.acknowledged)
    report = {
        "note": "acknowledged_at and the faults' at: seconds since the run started",
        "lost": [
            {
                "value": value.decode("utf-8", errors="replace"),
                "missing": count,
                "acknowledged_at": producer.acked_at.get(value),
            }
            for value, count in sorted(lost.items(), key=lambda item: producer.acked_at.get(item[0], 0.0))
        ],
        "faults": [dataclasses.asdict(e) for e in sorted(events, key=lambda e: e.at) if e.injected],
    }
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")


def _warm_up(setup: ChaosSetup, until: float) -> None:
    """Wait until the raw stage committed its first batch (the driver's JVM is up and its Python workers ran)."""
    commits = Path(setup.checkpoints["raw"]) / "commits"
    while time.monotonic() < until and not (commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir())):
        time.sleep(0.2)  # polling the checkpoint; ``until`` bounds it


def _inject(setup: ChaosSetup, driver: _Driver, fault: Fault, deadline: float) -> tuple[bool, str]:
    if fault.kind == "driver_kill":
        return driver.kill()
    if fault.kind == "worker_kill":
        return _kill_worker(driver, min(deadline, time.monotonic() + WORKER_WAIT))
    if fault.kind in RESTART_KINDS:
        return restart_service(setup, fault)
    if fault.kind == "commit_process_kill":
        return driver.kill_commit_process(min(deadline, time.monotonic() + COMMIT_WAIT))
    if fault.kind == "store_lost_response":
        return _lose_commit_answer(setup, min(deadline, time.monotonic() + COMMIT_WAIT))
    if fault.kind in NETWORK_KINDS:
        return inject_network(setup, fault, min(deadline, time.monotonic() + COMMIT_WAIT), alive=lambda: True)
    return False, f"missed: {fault.kind} is not a soak kind"


SERVICE_LINK: dict[str, str] = {"broker_restart": "broker", "postgres_restart": "postgres", "storage_restart": "store"}
"""The link in front of each restarted service. In an overlapped soak a restart runs on its link's thread, after
that link's earlier faults: a restarted service is checked through its link, which a pause in progress (or one
armed, waiting for traffic) would hold past the check's timeout."""


class _LinkInjectors:
    """The network faults and service restarts of an overlapped soak: one thread per link injects that link's
    faults and its service's restarts in plan order, each as the sequential soak does (a network fault armed,
    waited for its link's traffic up to 120 s, a pause held; a restart: SIGKILL, downtime, start, check), while
    the plan goes on. Restarts run one at a time across the links (a broker restarting while its store is down
    could not start). A fault whose turn comes after the fault phase's end, or after the run failed, is reported
    not injected. Runs on the harness."""

    def __init__(
        self, setup: ChaosSetup, until: float, ended: Callable[[int, Fault, float, float, bool, str], None]
    ) -> None:
        self.setup = setup
        self.until = until
        self.ended = ended
        """Reports a fault: its index, the fault, when it started and ended, whether it was injected, the note."""
        self.queues: dict[str, queue.SimpleQueue[tuple[int, Fault] | None]] = {}
        self.threads: list[threading.Thread] = []
        self.restarting = threading.Lock()
        """Held by the restart in progress (one service restarts at a time)."""
        self.cancelled = threading.Event()
        self.failure: Exception | None = None
        """What a restart raised (a service that cannot start again): the run fails with it, as a sequential soak
        does (:meth:`raise_failure`)."""

    def raise_failure(self) -> None:
        """Raise what a restart on a link's thread raised, if one did."""
        if self.failure is not None:
            raise self.failure

    def submit(self, index: int, fault: Fault) -> None:
        """Queue ``fault`` (the plan's ``index``-th: a network fault, or a service restart) on its link's thread."""
        link = SERVICE_LINK.get(fault.kind) or link_of(fault) or "?"
        if link not in self.queues:
            self.queues[link] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._run, args=(link, self.queues[link]), name=f"chaos-{link}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        self.queues[link].put((index, fault))

    def finish(self, *, cancel: bool = False) -> None:
        """Wait until every queued fault was injected or reported missed (idempotent); ``cancel``: the run failed,
        so the fault in progress stops waiting for traffic and the queued ones are reported missed at once."""
        if cancel:
            self.cancelled.set()
        for q in self.queues.values():
            q.put(None)
        for thread in self.threads:
            thread.join()
        self.queues.clear()
        self.threads.clear()

    def _run(self, link: str, faults: queue.SimpleQueue[tuple[int, Fault] | None]) -> None:
        while (item := faults.get()) is not None:
            index, fault = item
            at = time.monotonic()
            if self.cancelled.is_set():
                injected, note = False, "missed: the run failed before its link's turn"
            elif at >= self.until:
                injected, note = False, "missed: its link's turn came after the fault phase ended"
            else:
                try:
                    if fault.kind in SERVICE_LINK:
                        with self.restarting:
                            injected, note = restart_service(self.setup, fault)
                    else:
                        injected, note = inject_network(
                            self.setup,
                            fault,
                            min(self.until, at + COMMIT_WAIT),
                            alive=lambda: not self.cancelled.is_set(),
                        )
                except Exception as err:  # reported as missed; fatal only when a service cannot start again
                    if fault.kind in SERVICE_LINK:  # (a proxy gone with the run's end is not)
                        self.failure = self.failure or err
                        self.cancelled.set()
                    injected, note = False, f"missed: {type(err).__name__}: {err}"
            self.ended(index, fault, at, time.monotonic(), injected, note)


LOG_COMMIT_PUT = r"/_delta_log/\d{20}\.json$"
"""The PUT of a Delta commit file, the request whose answer a ``store_lost_response`` loses."""


def _lose_commit_answer(setup: ChaosSetup, until: float) -> tuple[bool, str]:
    """Arm the fault proxy to lose the answer to the next Delta commit's PUT; True once it did (the store applied
    the commit and the writer saw its connection close)."""
    if setup.proxy is None:
        return False, "missed: the tables are not on the object store (--storage s3)"
    rule = setup.proxy.lose_responses("PUT", LOG_COMMIT_PUT)
    while time.monotonic() < until:
        if rule.fired:
            return True, f"lost the store's answer to PUT {rule.paths[0]} (applied)"
        time.sleep(0.05)  # polling the proxy; ``until`` bounds it
    setup.proxy.disarm(rule)
    if rule.fired:  # it fired between the last look and the disarm
        return True, f"lost the store's answer to PUT {rule.paths[0]} (applied)"
    return False, f"missed: no Delta commit reached the store within {COMMIT_WAIT:.0f}s"


def _kill_worker(driver: _Driver, until: float) -> tuple[bool, str]:
    """SIGKILL the busiest executor Python worker running a task; True once it is gone."""
    while time.monotonic() < until:
        pid = driver.pid()
        workers = python_workers(pid, busy=True) if pid is not None else []
        if workers:
            victim = workers[0]
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue  # it ended its task and exited first: look again
            while not gone(victim) and time.monotonic() < until:
                time.sleep(0.01)  # the kernel takes the process down
            if gone(victim):
                return True, f"worker {victim} killed mid-task"
            return False, f"missed: worker {victim} still runs after SIGKILL"
        time.sleep(0.05)  # no task running right now (between passes, or a driver starting): look again
    return False, f"missed: no executor Python worker ran a task within {WORKER_WAIT:.0f}s"


class _Driver:
    """The soak's driver program, started again whenever it ends before the run is over. Runs on the driver (harness).

    A thread watches it; the driver started after a ``driver_kill`` is armed with the plan's next crash point.
    """

    def __init__(self, setup: ChaosSetup, plan: SoakPlan, started: float, record: FaultCallback) -> None:
        self.setup = setup
        self.plan = plan
        self.started = started
        self.record = record
        self.runs: list[RoundResult] = []
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.run_started = 0.0
        self.armed: tuple[int, Fault] | None = None
        self.killed_by_harness = False
        self.arm_file = str(setup.work_dir / "rounds" / "arm")
        self.record_file = str(setup.work_dir / "rounds" / "crashes.jsonl")
        """Every crash point fired in the run (:class:`sparkonce.crash.CrashRecord`), by any driver."""
        self.crash_index = 0
        self.done = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="chaos-soak-driver", daemon=True)

    def start(self) -> None:
        with self.lock:
            self._launch()
        self.thread.start()

    def pid(self) -> int | None:
        with self.lock:
            return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill(self) -> tuple[bool, str]:
        """SIGKILL the running driver's process group (the watcher starts the next one)."""
        with self.lock:
            proc = self.proc
            if proc is None or proc.poll() is not None:
                return False, "missed: no driver running"
            self.killed_by_harness = True
            kill_group(proc.pid)
            proc.wait()
            if proc.returncode != -signal.SIGKILL:
                return False, f"missed: the driver ended with exit {proc.returncode} first"
            self._ended(proc)
            self._launch()
            return True, f"driver group {proc.pid} killed"

    def kill_commit_process(self, until: float) -> tuple[bool, str]:
        """Arm ``after_delta_commit`` (target ``process``) in the running driver; True once a Delta sink's commit
        process reached it after its Delta commit and is gone, the driver alive."""
        before = len(read_crash_records(self.record_file))
        arm(self.arm_file, "after_delta_commit")
        while time.monotonic() < until:
            fired = read_crash_records(self.record_file)[before:]
            if fired:
                victim = fired[0].pid
                while not gone(victim) and time.monotonic() < until:
                    time.sleep(0.01)  # the kernel takes the process down
                if not gone(victim):
                    return False, f"missed: commit process {victim} still runs after SIGKILL"
                driver = self.pid()
                return True, f"commit process {victim} killed after its Delta commit (driver {driver} alive)"
            time.sleep(0.05)  # polling the record file; ``until`` bounds it
        if disarm(self.arm_file):
            return False, f"missed: no Delta sink commit reached the armed point within {COMMIT_WAIT:.0f}s"
        return False, "missed: the armed point was claimed but its process recorded nothing"

    def finish(self, deadline: float) -> bool:
        """Wait until a driver exits 0 after the stop file (True), or the deadline (the driver is killed)."""
        while not self.done.is_set() and time.monotonic() < deadline:
            self.done.wait(0.2)
        self.abort()
        return self.done.is_set()

    def abort(self) -> None:
        """Stop watching and kill the running driver, if any (on the way out, also after an error)."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        with self.lock:
            if self.proc is not None:
                kill_group(self.proc.pid)
                self.proc.wait()
                self._ended(self.proc)

    def _watch(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                proc = self.proc
                if proc is not None and proc.poll() is not None:
                    self._ended(proc)
                    if proc.returncode == 0:
                        self.done.set()
                        return
                    self._launch()
            self.stopping.wait(0.1)

    def _launch(self) -> None:
        """Start the next driver (under the lock), armed with the next crash point after a ``driver_kill``."""
        index = len(self.runs)
        run_dir = self.setup.work_dir / "rounds" / f"{index:04d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        spec_file = run_dir / "driver.json"
        self.setup.spec.dump(spec_file)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable}
        for name in (ENV_POINT, ENV_PGID, ENV_HITS_DIR, ENV_TARGET):
            env.pop(name, None)
        # Every driver can have a point armed while it runs (commit_process_kill); every point fired is recorded.
        env[ENV_ARM] = self.arm_file
        env[ENV_RECORD] = self.record_file
        self.armed = None
        if self.killed_by_harness and self.crash_index < len(self.plan.crash_points):
            point = self.plan.crash_points[self.crash_index]
            self.armed = (self.crash_index, point)
            self.crash_index += 1
            env[ENV_POINT] = f"{point.point}#{point.hit}"
            env[ENV_HITS_DIR] = str(run_dir / "hits")
            (run_dir / "hits").mkdir(exist_ok=True)
        self.killed_by_harness = False
        with open(run_dir / "driver.log", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkonce_local.chaos.driver", str(spec_file)],
                env=env,
                cwd=str(self.setup.work_dir),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.run_started = time.monotonic()

    def _ended(self, proc: subprocess.Popen[bytes]) -> None:
        """Record how the driver ended (under the lock); an armed crash point counts when it killed the driver."""
        kill_group(proc.pid)  # Python data source runners of a killed driver left behind
        code = proc.returncode
        armed = self.armed[1] if self.armed is not None else None
        crashed = (
            armed is not None
            and not self.killed_by_harness
            and killed_by_crash_point(code, proc.pid, read_crash_records(self.record_file))
        )
        if self.armed is not None:
            at = time.monotonic()
            note = "driver group killed at the point" if crashed else "point not reached before the driver ended"
            self.record(
                FaultEvent(
                    -1 - self.armed[0],
                    "crash_point",
                    round(at - self.started, 2),
                    round(at - self.run_started, 2),
                    crashed,
                    note,
                    point=f"{armed.point}" if armed is not None else None,
                )
            )
        if self.killed_by_harness:
            outcome = "SIGKILL (driver_kill)"
        elif crashed:
            outcome = "SIGKILL (crash point)"
        else:
            outcome = f"exit {code}"
        seconds = round(time.monotonic() - self.run_started, 1)
        self.runs.append(RoundResult(len(self.runs), 0, armed, crashed, outcome, code, seconds))
        self.proc = None


__all__ = ["run_soak"]
