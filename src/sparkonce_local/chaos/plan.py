"""The fault plan of a chaos run: a seeded list of rounds, each one producing records and injecting one fault.

Pure data, no services: :func:`make_plan` turns ``(seed, faults, setup)`` into the same plan every time, and a plan
round-trips through JSON (``to_json`` / ``from_json``) so a failed run can be replayed with ``--plan FILE``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

from sparkonce.errors import OptionError

FaultKind = Literal[
    "driver_kill",
    "worker_kill",
    "postgres_restart",
    "broker_restart",
    "storage_restart",
    "crash_point",
    "commit_process_kill",
    "store_lost_response",
    "broker_net_drop",
    "broker_net_reset",
    "broker_net_pause",
    "postgres_net_drop",
    "postgres_net_reset",
    "postgres_net_pause",
    "store_net_pause",
    "store_net_reset",
    "store_slowdown",
    "store_error",
    "net_latency",
]
"""``driver_kill``: SIGKILL of the driver's process group (Python driver, JVM, its Python workers) at a random
moment; ``worker_kill``: SIGKILL of one executor Python worker (a child of ``pyspark.daemon``) while it runs a
task; ``postgres_restart``: SIGKILL of the PostgreSQL server, restarted on the same data directory and port after
a random downtime; ``broker_restart``: SIGKILL of the Kafka broker, restarted on
the same ports and data directory after a random downtime; ``storage_restart``: SIGKILL of the object store (SeaweedFS,
which holds the broker's log), restarted on the same ports and data after a random downtime; ``crash_point``: the
driver group dies when the run reaches a named :mod:`sparkonce.crash` point for the ``hit``-th time;
``commit_process_kill`` (soak mode): the driver-side Python process that runs a Delta sink's ``commit()`` dies
right after its Delta commit landed (the ``after_delta_commit`` point armed in the running driver, target
``process``), while the driver lives: Spark aborts the batch and fails the query; ``store_lost_response`` (soak
mode, tables on the object store): the object store applies the PUT of a Delta table's next ``_delta_log`` commit
file and its answer is lost (a fault proxy between Spark and the store closes the connection).

The network kinds act on a fault proxy on a link (:data:`NETWORK_KINDS`; the harness puts a TCP fault proxy in
front of the broker and of PostgreSQL, which every client of the run goes through, when one of them can be drawn):
``broker_net_drop`` / ``postgres_net_drop``: the next chunk of bytes on the link is dropped and its connection
ends on both sides (FIN); ``broker_net_reset`` / ``postgres_net_reset``: the same with a TCP reset;
``broker_net_pause`` / ``postgres_net_pause``: the link stops forwarding for ``downtime`` seconds, its connections
open (a peer that stops answering); ``store_net_pause`` (tables on the object store): the store's link stops
answering for ``downtime`` seconds, its connections open, the requests held and then forwarded (none lost);
``store_net_reset`` (tables on the object store): the next request to the store, whatever it is, reaches the store
and is applied, and its connection is reset before any answer (the harder of the two resets: the client cannot
tell whether its write happened); ``store_slowdown`` / ``store_error`` (tables on the object store): the next
``count`` requests to the store are answered ``503 SlowDown`` / ``500 InternalError`` by the store's fault proxy
and never reach it; ``net_latency``: the next ``count`` chunks (a request, on the store's link) on ``link`` wait
``seconds`` each."""
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
NETWORK_KINDS: tuple[FaultKind, ...] = (
    "broker_net_drop",
    "broker_net_reset",
    "broker_net_pause",
    "postgres_net_drop",
    "postgres_net_reset",
    "postgres_net_pause",
    "store_net_pause",
    "store_net_reset",
    "store_slowdown",
    "store_error",
    "net_latency",
)
"""Kinds injected through a fault proxy on a link; drawn only when asked for (``--network`` or ``--kinds``)."""
DEFAULT_KINDS: tuple[FaultKind, ...] = tuple(k for k in FAULT_KINDS if k not in NETWORK_KINDS)
"""The kinds a run draws from unless told otherwise (every kind but the network ones)."""
LINK_OF: dict[FaultKind, str] = {
    "broker_net_drop": "broker",
    "broker_net_reset": "broker",
    "broker_net_pause": "broker",
    "postgres_net_drop": "postgres",
    "postgres_net_reset": "postgres",
    "postgres_net_pause": "postgres",
    "store_net_pause": "store",
    "store_net_reset": "store",
    "store_slowdown": "store",
    "store_error": "store",
    "store_lost_response": "store",
}
"""The link a network kind acts on (``net_latency``: the fault's own ``link``)."""
LINKS: tuple[str, ...] = ("broker", "postgres", "store")
SOAK_ONLY_KINDS: tuple[FaultKind, ...] = ("commit_process_kill", "store_lost_response")
"""Kinds injected into a running driver, which only soak mode has (rounds mode leaves them out)."""
STORE_PAUSE = 20.0
"""The longest ``store_net_pause`` in seconds, in both modes (the broker's and PostgreSQL's pauses go to 30 s in
soak mode)."""

RESTART_KINDS: tuple[FaultKind, ...] = ("postgres_restart", "broker_restart", "storage_restart")
"""Kinds that kill a service the harness runs and restart it after ``downtime`` seconds (quickstart setup only)."""
STORE_KINDS: tuple[FaultKind, ...] = ("storage_restart",)
"""Kinds that need the embedded object store running (the harness starts it for them)."""

NaiveKind = Literal["delta-append", "postgres-append", "file-sink-glob"]
"""``delta-append``: the raw stage is a ``foreachBatch`` appending to Delta without ``txnAppId``/``txnVersion``;
``postgres-append``: the PostgreSQL stage inserts each batch in its own database transaction without a ledger
(as naive as ``.write.mode("append").jdbc(...)``); ``file-sink-glob``: the raw stage is Spark's built-in parquet
file sink and its output is read by globbing the folder instead of through ``_spark_metadata``."""
NAIVE_KINDS: tuple[NaiveKind, ...] = get_args(NaiveKind)

NAIVE_WINDOW: dict[NaiveKind, str] = {
    "delta-append": "after_delta_commit",
    "postgres-append": "after_pg_commit",
    "file-sink-glob": "mid_write",
}
"""The crash point in the window where each naive sink duplicates (data written, ``commits/N`` not yet)."""

DURING_COMMITS = "during_commits"
"""Not a code point: the harness crashes at ``after_delta_commit`` and leaves the torn temp file a kill in the
middle of Spark's ``commits/N`` write leaves (Spark writes ``.N.<uuid>.tmp`` and renames it)."""

POINTS_BY_STAGE: dict[str, tuple[str, ...]] = {
    "raw": ("before_offsets", "after_offsets", "mid_read", "mid_write", "after_delta_commit", DURING_COMMITS),
    "bronze": ("between_fanout_tables", "after_commits"),
    "gold": ("after_gold_merge",),
    "postgres": ("after_pg_staging_load", "inside_pg_transaction", "after_pg_commit"),
}
"""Named crash points and the stage that makes them reachable (a point fires in whichever stage reaches it)."""

MAX_HIT: dict[str, int] = {"before_offsets": 4, "after_offsets": 4, "mid_read": 3, "mid_write": 4, "after_commits": 3}
"""Points reached several times per round (every stage, every task) draw their hit from 1 to this; the others are
reached about once per round (one batch per stage and round under ``availableNow``) and always use hit 1."""

PLAN_VERSION = 1


@dataclass(frozen=True)
class Fault:
    """One round's fault. Runs on the driver (the harness)."""

    kind: FaultKind
    stage: str | None = None
    """Timed faults: the stage whose next batch in the round anchors the moment (``delay`` seconds after its
    ``offsets/N`` appears)."""
    delay: float = 0.0
    point: str | None = None
    """``crash_point``: the :mod:`sparkonce.crash` point (or :data:`DURING_COMMITS`)."""
    hit: int = 1
    """``crash_point``: fires the hit-th time the point is reached in the round."""
    downtime: float = 0.0
    """The :data:`RESTART_KINDS`: seconds the service stays down; ``*_net_pause``: seconds the link is paused."""
    link: str | None = None
    """``net_latency``: the link it slows down (``broker``, ``postgres`` or ``store``)."""
    count: int = 1
    """``store_slowdown`` / ``store_error``: requests answered with the error; ``net_latency``: chunks delayed."""
    seconds: float = 0.0
    """``net_latency``: the delay added to each chunk or request."""

    @property
    def label(self) -> str:
        if self.kind == "crash_point":
            return f"crash_point {self.point} #{self.hit}"
        if self.kind in RESTART_KINDS or self.kind.endswith("_net_pause"):
            return f"{self.kind} at {self.stage}+{self.delay:.2f}s, down {self.downtime:.2f}s"
        if self.kind == "net_latency":
            return f"net_latency on {self.link} at {self.stage}+{self.delay:.2f}s, {self.count} x {self.seconds:.2f}s"
        if self.kind in ("store_slowdown", "store_error"):
            return f"{self.kind} at {self.stage}+{self.delay:.2f}s, {self.count} request(s)"
        return f"{self.kind} at {self.stage}+{self.delay:.2f}s"

    @classmethod
    def from_json(cls, item: Mapping[str, Any], where: str) -> Fault:
        """Parse a fault written by ``asdict``; OptionError naming ``where`` on an unknown kind or link."""
        if item.get("kind") not in FAULT_KINDS:
            raise OptionError(f"{where}.kind", item.get("kind"), f"must be one of {FAULT_KINDS}")
        link = item.get("link")
        if link is not None and link not in LINKS:
            raise OptionError(f"{where}.link", link, f"must be one of {LINKS}")
        return cls(
            kind=item["kind"],
            stage=item.get("stage"),
            delay=float(item.get("delay", 0.0)),
            point=item.get("point"),
            hit=int(item.get("hit", 1)),
            downtime=float(item.get("downtime", 0.0)),
            link=link,
            count=int(item.get("count", 1)),
            seconds=float(item.get("seconds", 0.0)),
        )


@dataclass(frozen=True)
class Round:
    """Produce ``records`` (the quickstart setup only), then run the driver under ``fault`` (None: a clean run)."""

    records: int
    fault: Fault | None


@dataclass(frozen=True)
class FaultPlan:
    """Every round of a chaos run, in order; the last rounds are clean runs that drain the input."""

    seed: int
    naive: NaiveKind | None
    stages: tuple[str, ...]
    rounds: tuple[Round, ...]
    plan_version: int = PLAN_VERSION

    @property
    def faults(self) -> tuple[Fault, ...]:
        return tuple(r.fault for r in self.rounds if r.fault is not None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "plan") -> FaultPlan:
        """Parse a plan written by :meth:`to_json`.

        Raises:
            OptionError: a field is missing or has a wrong value (the message names ``source`` and the field).
        """
        try:
            if int(data.get("plan_version", 0)) != PLAN_VERSION:
                raise OptionError(f"{source}: plan_version", data.get("plan_version"), f"must be {PLAN_VERSION}")
            naive = data.get("naive")
            if naive is not None and naive not in NAIVE_KINDS:
                raise OptionError(f"{source}: naive", naive, f"must be one of {list(NAIVE_KINDS)} or null")
            rounds = []
            for index, item in enumerate(data["rounds"]):
                fault = item.get("fault")
                parsed = None if fault is None else Fault.from_json(fault, f"{source}: rounds[{index}].fault")
                rounds.append(Round(int(item["records"]), parsed))
            return cls(
                seed=int(data["seed"]),
                naive=cast("NaiveKind | None", naive),
                stages=tuple(str(s) for s in data["stages"]),
                rounds=tuple(rounds),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise OptionError(source, "...", f"is not a chaos fault plan ({type(err).__name__}: {err})") from err

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


@dataclass(frozen=True)
class FaultEvent:
    """One fault of a soak run, as it happened."""

    index: int
    """Its place in the plan's ``faults`` (a crash point: -1 - its place in ``crash_points``)."""
    kind: FaultKind
    at: float
    """Seconds since the run started."""
    seconds: float
    """How long injecting it took (a restart: kill, downtime and start until the service answers)."""
    injected: bool
    note: str
    point: str | None = None


def make_plan(
    *,
    seed: int,
    faults: int,
    stages: Sequence[str],
    kinds: Sequence[FaultKind] = DEFAULT_KINDS,
    naive: NaiveKind | None = None,
    records_per_round: int = 400,
    clean_rounds: int = 1,
    services: bool = True,
    links: Sequence[str] = (),
) -> FaultPlan:
    """The seeded plan: ``faults`` rounds with one fault each, then ``clean_rounds`` rounds without.

    ``stages`` are the stages the driver runs (``raw``, ``bronze``, ``gold``, ``postgres``; ``raw_files`` for the
    file-sink baseline): timed faults anchor on one of them, crash points are drawn from those they make reachable,
    ``postgres_restart`` only when there is a ``postgres`` stage, and no service restart at all without
    ``services`` (a pipeline file: the harness runs no service of its own). A naive run's first fault is the crash
    point in the window where that sink duplicates (:data:`NAIVE_WINDOW`), so its failure is certain for every seed.
    A network kind applies only when its link has a fault proxy (``links``); a PostgreSQL one anchors on the
    ``postgres`` stage (the only one that talks to PostgreSQL).

    Raises:
        OptionError: ``faults`` < 0, ``records_per_round`` < 1, an unknown kind, or no kind applies.
    """
    if faults < 0:
        raise OptionError("faults", faults, "must be >= 0")
    if records_per_round < 1:
        raise OptionError("records_per_round", records_per_round, "must be >= 1")
    for kind in kinds:
        if kind not in FAULT_KINDS:
            raise OptionError("kinds", kind, f"must be among {list(FAULT_KINDS)}")
    usable = [k for k in kinds if (k != "postgres_restart" or "postgres" in stages) and k not in SOAK_ONLY_KINDS]
    if not services:
        usable = [k for k in usable if k not in RESTART_KINDS]
    usable = [k for k in usable if _link_applies(k, links, stages)]
    if faults and not usable:
        raise OptionError("kinds", list(kinds), f"none applies to stages {list(stages)} and links {list(links)}")
    points = [p for stage in stages for p in POINTS_BY_STAGE.get(stage, ())]
    if naive == "file-sink-glob":
        points = ["before_offsets", "after_offsets", "mid_read", "after_commits"]
    if not points:
        usable = [k for k in usable if k != "crash_point"]
    rng = random.Random(seed)
    rounds: list[Round] = []

    def records() -> int:
        return rng.randint(max(1, records_per_round // 2), max(1, records_per_round * 3 // 2))

    for index in range(faults):
        if index == 0 and naive is not None:
            rounds.append(Round(records_per_round, Fault("crash_point", point=NAIVE_WINDOW[naive], hit=1)))
            continue
        kind = rng.choice(usable)
        stage = rng.choice(list(stages))
        if kind == "crash_point":
            point = rng.choice(points)
            fault = Fault(kind, point=point, hit=rng.randint(1, MAX_HIT.get(point, 1)))
        elif kind in RESTART_KINDS:
            fault = Fault(
                kind, stage=stage, delay=round(rng.uniform(0.0, 1.5), 2), downtime=round(rng.uniform(0.5, 4), 2)
            )
        elif kind in NETWORK_KINDS:
            if LINK_OF.get(kind) == "postgres":
                stage = "postgres"
            fault = network_fault(kind, rng, links, stage=stage, delay=round(rng.uniform(0.0, 1.0), 2), pause=20.0)
        else:
            fault = Fault(kind, stage=stage, delay=round(rng.uniform(0.0, 1.5 if stage == "raw" else 0.8), 2))
        rounds.append(Round(records(), fault))
    rounds.extend(Round(records() if not rounds else 0, None) for _ in range(clean_rounds))
    return FaultPlan(seed=seed, naive=naive, stages=tuple(stages), rounds=tuple(rounds))


def _link_applies(kind: FaultKind, links: Sequence[str], stages: Sequence[str]) -> bool:
    """A kind that needs no fault proxy, or whose link has one (``net_latency``: any link)."""
    if kind == "net_latency":
        return bool(links)
    if kind not in NETWORK_KINDS:
        return True
    link = LINK_OF[kind]
    return link in links and (link != "postgres" or "postgres" in stages)


def network_fault(
    kind: FaultKind, rng: random.Random, links: Sequence[str], *, stage: str | None, delay: float, pause: float
) -> Fault:
    """A network kind's fault with its seeded parameters: a pause of 1 to ``pause`` seconds, a burst of 1 to 8
    error answers, or 0.05 to 0.5 s of latency on 20 to 200 chunks (5 to 50 requests on the store's link); a pause
    of the store's link lasts at most :data:`STORE_PAUSE` seconds."""
    if kind.endswith("_net_pause"):
        longest = min(pause, STORE_PAUSE) if kind == "store_net_pause" else pause
        return Fault(kind, stage=stage, delay=delay, downtime=round(rng.uniform(1.0, longest), 2))
    if kind in ("store_slowdown", "store_error"):
        return Fault(kind, stage=stage, delay=delay, count=rng.randint(1, 8))
    if kind == "net_latency":
        link = rng.choice(list(links))
        count = rng.randint(5, 50) if link == "store" else rng.randint(20, 200)
        return Fault(kind, stage=stage, delay=delay, link=link, count=count, seconds=round(rng.uniform(0.05, 0.5), 2))
    return Fault(kind, stage=stage, delay=delay)


SOAK_WEIGHTS: dict[FaultKind, int] = {
    "worker_kill": 5,
    "broker_restart": 2,
    "postgres_restart": 2,
    "storage_restart": 1,
    "commit_process_kill": 1,
    "store_lost_response": 1,
    "broker_net_drop": 2,
    "broker_net_reset": 2,
    "broker_net_pause": 1,
    "postgres_net_drop": 1,
    "postgres_net_reset": 1,
    "postgres_net_pause": 1,
    "store_net_pause": 1,
    "store_net_reset": 2,
    "store_slowdown": 2,
    "store_error": 1,
    "net_latency": 2,
}
"""How often each timed kind is drawn in soak mode (a worker kill costs the least time, a store restart the most;
the network kinds are drawn only when asked for)."""
DRIVER_EVERY = 100
"""Soak mode: every this-many-th fault is a ``driver_kill``. A new driver costs a JVM start and a first pass (30 to
70 s here), during which no worker can be killed, and the crash point armed on it costs another."""


@dataclass(frozen=True)
class SoakPlan:
    """A soak run's faults, injected one after another while one driver runs the stages pass after pass.

    ``faults[i].delay`` is the gap in seconds after fault ``i - 1`` ended (after the restarted service answered);
    ``downtime`` the seconds a killed service stays down. ``crash_points`` are armed one by one on the driver
    started after each ``driver_kill`` (it dies there when the point is reached for the ``hit``-th time).
    """

    seed: int
    faults: tuple[Fault, ...]
    crash_points: tuple[Fault, ...]
    rate: float
    """Records per second the producer hands to the broker throughout."""
    mode: Literal["soak"] = "soak"
    plan_version: int = PLAN_VERSION
    naive: None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "plan") -> SoakPlan:
        """Parse a plan written by :meth:`to_json`.

        Raises:
            OptionError: a field is missing or has a wrong value (the message names ``source`` and the field).
        """
        try:
            if int(data.get("plan_version", 0)) != PLAN_VERSION or data.get("mode") != "soak":
                raise OptionError(f"{source}: mode", data.get("mode"), f"must be soak (plan_version {PLAN_VERSION})")

            def fault(item: Mapping[str, Any], where: str) -> Fault:
                return Fault.from_json(item, f"{source}: {where}")

            return cls(
                seed=int(data["seed"]),
                faults=tuple(fault(f, f"faults[{i}]") for i, f in enumerate(data["faults"])),
                crash_points=tuple(fault(f, f"crash_points[{i}]") for i, f in enumerate(data["crash_points"])),
                rate=float(data["rate"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise OptionError(source, "...", f"is not a soak fault plan ({type(err).__name__}: {err})") from err


def make_soak_plan(
    *,
    seed: int,
    faults: int,
    kinds: Sequence[FaultKind] = DEFAULT_KINDS,
    rate: float = 20.0,
    driver_every: int = DRIVER_EVERY,
    stages: Sequence[str] = ("raw", "bronze", "gold", "postgres"),
    tables_on_store: bool = False,
    links: Sequence[str] = (),
) -> SoakPlan:
    """The seeded soak plan: ``faults`` faults, every ``driver_every``-th a ``driver_kill``, the others drawn from
    the timed kinds by :data:`SOAK_WEIGHTS`; one crash point per ``driver_kill`` when ``crash_point`` is a kind.
    ``store_lost_response`` applies only with ``tables_on_store`` (the Delta tables on the object store), a network
    kind only when its link has a fault proxy (``links``).

    Raises:
        OptionError: ``faults`` < 0, ``rate`` <= 0, ``driver_every`` < 1, an unknown kind, or no kind applies.
    """
    if faults < 0:
        raise OptionError("faults", faults, "must be >= 0")
    if rate <= 0:
        raise OptionError("rate", rate, "must be > 0")
    if driver_every < 1:
        raise OptionError("driver_every", driver_every, "must be >= 1")
    for unknown in kinds:
        if unknown not in FAULT_KINDS:
            raise OptionError("kinds", unknown, f"must be among {list(FAULT_KINDS)}")
    timed = [
        k
        for k in SOAK_WEIGHTS
        if k in kinds
        and (k != "postgres_restart" or "postgres" in stages)
        and (k != "store_lost_response" or tables_on_store)
        and _link_applies(k, links, stages)
    ]
    driver = "driver_kill" in kinds
    if faults and not timed and not driver:
        raise OptionError(
            "kinds",
            list(kinds),
            "soak mode needs a timed kind or driver_kill (crash points are armed "
            "on the driver started after a driver_kill)",
        )
    rng = random.Random(seed)
    drawn: list[Fault] = []
    for index in range(faults):
        kind: FaultKind
        if driver and (not timed or index % driver_every == driver_every - 1):
            kind = "driver_kill"
        else:
            kind = rng.choices(timed, weights=[SOAK_WEIGHTS[k] for k in timed])[0]
        if kind in NETWORK_KINDS:
            drawn.append(network_fault(kind, rng, links, stage=None, delay=round(rng.uniform(0.1, 1.0), 2), pause=30.0))
            continue
        downtime = round(rng.uniform(0.1, 1.5), 2) if kind in RESTART_KINDS else 0.0
        drawn.append(Fault(kind, delay=round(rng.uniform(0.1, 1.0), 2), downtime=downtime))
    points = [p for stage in stages for p in POINTS_BY_STAGE.get(stage, ()) if p != DURING_COMMITS]
    crash_points: list[Fault] = []
    if "crash_point" in kinds and points:
        for _ in range(sum(1 for f in drawn if f.kind == "driver_kill")):
            point = rng.choice(points)
            crash_points.append(Fault("crash_point", point=point, hit=rng.randint(1, MAX_HIT.get(point, 1))))
    return SoakPlan(seed=seed, faults=tuple(drawn), crash_points=tuple(crash_points), rate=rate)


__all__ = [
    "DEFAULT_KINDS",
    "LINKS",
    "LINK_OF",
    "NETWORK_KINDS",
    "network_fault",
    "FaultEvent",
    "DRIVER_EVERY",
    "DURING_COMMITS",
    "SOAK_ONLY_KINDS",
    "STORE_PAUSE",
    "SOAK_WEIGHTS",
    "SoakPlan",
    "make_soak_plan",
    "FAULT_KINDS",
    "NAIVE_KINDS",
    "NAIVE_WINDOW",
    "POINTS_BY_STAGE",
    "RESTART_KINDS",
    "STORE_KINDS",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "NaiveKind",
    "Round",
    "make_plan",
]
