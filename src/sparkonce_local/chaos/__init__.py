"""The chaos harness: drivers killed for real, a seeded fault plan, naive baselines and an independent check.

* :mod:`.process`: run a driver program in its own process group, kill it, find its executor Python workers
  (:func:`run_driver` is what the crash tests use).
* :mod:`.plan`: the seeded fault plan (JSON round-trip, so a failure replays exactly).
* :mod:`.model`: what a run is asked and answers (:class:`ChaosOptions`, :class:`ChaosResult`).
* :mod:`.testbed`: the work directory, services and tables of a run, service restarts, the final reconciliation.
* :mod:`.harness`: :func:`run_chaos`, the rounds and the fault injection.
* :mod:`.soak`: :func:`run_soak`, many faults one after another into one long run (soak mode); its paced
  producer is :mod:`.paced`.
* :mod:`.reconcile`: every table against its source, read with confluent-kafka, delta-rs, pyarrow and psycopg.
* :mod:`.naive`: the naive sinks the harness must catch; :mod:`.driver`: the driver program.
"""

from __future__ import annotations

from sparkonce_local.chaos.harness import run_chaos
from sparkonce_local.chaos.model import SCHEMA_VERSION, ChaosOptions, ChaosResult, RoundResult
from sparkonce_local.chaos.plan import (
    FAULT_KINDS,
    NAIVE_KINDS,
    Fault,
    FaultEvent,
    FaultKind,
    FaultPlan,
    NaiveKind,
    SoakPlan,
    make_plan,
    make_soak_plan,
)
from sparkonce_local.chaos.process import DriverRun, kill_group, python_workers, run_driver
from sparkonce_local.chaos.reconcile import TableCheck
from sparkonce_local.chaos.soak import run_soak

__all__ = [
    "FAULT_KINDS",
    "NAIVE_KINDS",
    "SCHEMA_VERSION",
    "ChaosOptions",
    "ChaosResult",
    "DriverRun",
    "Fault",
    "FaultEvent",
    "FaultKind",
    "FaultPlan",
    "NaiveKind",
    "RoundResult",
    "SoakPlan",
    "TableCheck",
    "kill_group",
    "make_plan",
    "make_soak_plan",
    "python_workers",
    "run_chaos",
    "run_driver",
    "run_soak",
]
