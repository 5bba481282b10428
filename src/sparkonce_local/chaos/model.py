"""What a chaos run is asked (:class:`ChaosOptions`) and what it answers (:class:`ChaosResult`, one
:class:`RoundResult` per driver run); shared by the rounds (:mod:`.harness`) and soak mode (:mod:`.soak`).

``ChaosResult`` is what ``sparkonce chaos --json`` prints; :data:`SCHEMA_VERSION` is its schema version. Runs on
the driver (the calling process).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sparkonce_local.chaos.plan import (
    DEFAULT_KINDS,
    Fault,
    FaultEvent,
    FaultKind,
    FaultPlan,
    NaiveKind,
    SoakPlan,
)
from sparkonce_local.chaos.reconcile import TableCheck

SCHEMA_VERSION = 1


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
    kinds: tuple[FaultKind, ...] = DEFAULT_KINDS
    """The kinds a plan is drawn from; the network kinds (:data:`~sparkonce_local.chaos.plan.NETWORK_KINDS`) put a
    fault proxy on the broker's and PostgreSQL's links."""
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
    changes_stage: bool = False
    """The quickstart setup: add a stage fed by gold's change data feed (``input_mode = "changes"``,
    ``gold_changes``), reconciled against gold's final rows key by key."""
    overlap_network: bool = False
    """Soak mode: each link's network faults and its service's restarts run in plan order on a thread of their own
    while the plan goes on (a fault waiting for its link's traffic, or holding a pause, holds up no other fault;
    restarts one at a time across the links), instead of one after another with every other fault."""
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
    retries_by_kind: dict[str, int] = field(default_factory=dict)
    """Retries the driver logs name, by kind (:data:`~sparkonce_local.chaos.driverlog.REPORTED_KINDS`): sparkonce's
    own (``kafka_offsets``, ``postgres_connect``, ``delta_commit``) and Spark's task retries (``spark_task``)."""
    failed_passes: int = 0
    """Soak mode: the driver's passes that failed (their queries were stopped and started again from their
    checkpoints after a backoff). Rounds mode: 0 (each round is a new driver run: ``restarts``)."""

    @property
    def duplicates(self) -> int:
        return sum(t.duplicates for t in self.tables)

    @property
    def lost(self) -> int:
        return sum(t.lost for t in self.tables)


RoundCallback = Callable[[RoundResult], None]


__all__ = ["SCHEMA_VERSION", "ChaosOptions", "ChaosResult", "RoundCallback", "RoundResult"]
