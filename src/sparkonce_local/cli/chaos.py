"""``sparkonce chaos``: run a pipeline under a seeded random fault plan, then reconcile every table."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click
from rich.table import Table

from sparkonce.cli.common import (
    EXIT_FINDINGS,
    console,
    err_console,
    handle_errors,
    json_option,
    print_json,
    to_jsonable,
)
from sparkonce_local.chaos.plan import DEFAULT_KINDS, FAULT_KINDS, NAIVE_KINDS, NETWORK_KINDS


@click.command()
@click.argument("pipeline", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--faults", type=click.IntRange(0), default=10, show_default=True, help="Faults to inject.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fault plan and of the data.")
@click.option("--naive", type=click.Choice(NAIVE_KINDS), default=None, help="Run a naive baseline (expected to FAIL).")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Replay a fault plan written by an earlier run (rounds/plan.json in its work directory).",
)
@click.option(
    "--kinds",
    default=",".join(DEFAULT_KINDS),
    show_default=True,
    help=f"Comma-separated fault kinds to draw from (all: {', '.join(FAULT_KINDS)}).",
)
@click.option(
    "--network",
    is_flag=True,
    help="Also draw the network faults (a fault proxy on the broker's and PostgreSQL's links, and on the store's "
    f"with --storage s3): {', '.join(NETWORK_KINDS)}.",
)
@click.option("--records", type=click.IntRange(1), default=400, show_default=True, help="Records produced per round.")
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=Path(".sparkonce/chaos"),
    show_default=True,
    help="Broker, object store, tables, checkpoints and round logs (wiped first when made by chaos).",
)
@click.option(
    "--soak",
    is_flag=True,
    help="Soak mode: inject the faults one after another into one long run (a producer producing throughout; "
    "a driver kill every 100th fault) instead of one per round.",
)
@click.option(
    "--overlap-network",
    is_flag=True,
    help="Soak mode: each link's network faults and its service's restarts run in plan order beside the other "
    "faults (a fault waiting for its link's traffic, or a pause, holds up nothing else) instead of one after another.",
)
@click.option(
    "--rate",
    type=click.FloatRange(0.1),
    default=20.0,
    show_default=True,
    help="Soak mode: records produced per second.",
)
@click.option(
    "--storage",
    type=click.Choice(["local", "s3"]),
    default="local",
    show_default=True,
    help="Where the tables live: the local disk, or the embedded S3 store (which a storage_restart then hits).",
)
@click.option(
    "--pg-commit-protocol",
    type=click.Choice(["staging", "two-phase"]),
    default="staging",
    show_default=True,
    help="The PostgreSQL stage's commit protocol (docs/postgres.md).",
)
@click.option(
    "--changes-stage",
    is_flag=True,
    help='Quickstart setup: add a stage fed by gold\'s change data feed (input_mode = "changes"), reconciled '
    "against gold's final rows.",
)
@click.option("--deadline", type=click.FloatRange(10), default=3600.0, show_default=True, help="Seconds for the run.")
@json_option()
@handle_errors
def chaos(
    pipeline: Path | None,
    faults: int,
    seed: int,
    naive: str | None,
    plan_file: Path | None,
    kinds: str,
    network: bool,
    records: int,
    work_dir: Path,
    soak: bool,
    overlap_network: bool,
    rate: float,
    storage: str,
    pg_commit_protocol: str,
    changes_stage: bool,
    deadline: float,
    as_json: bool,
) -> None:
    """Kill the pipeline's processes at random moments and at named crash points; exit 0 only when no table has
    a duplicate or a loss (without PIPELINE: the quickstart's embedded broker, object store, producer and
    PostgreSQL)."""
    from sparkonce.errors import OptionError
    from sparkonce_local.chaos import ChaosOptions, FaultPlan, SoakPlan, run_chaos, run_soak

    plan: FaultPlan | SoakPlan | None = None
    if plan_file is not None:
        try:
            data = json.loads(plan_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise OptionError("--plan", str(plan_file), f"is not JSON: {err}") from err
        if isinstance(data, dict) and data.get("mode") == "soak":
            plan = SoakPlan.from_json(data, source=str(plan_file))
            soak, rate = True, plan.rate
        else:
            plan = FaultPlan.from_json(data, source=str(plan_file))
            naive = plan.naive
        seed = plan.seed
    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip())
    for kind in chosen:
        if kind not in FAULT_KINDS:
            raise OptionError("--kinds", kind, f"must be among {', '.join(FAULT_KINDS)}")
    if network:
        if pipeline is not None:
            raise OptionError("--network", str(pipeline), "needs the quickstart setup (its links get fault proxies)")
        chosen = (*chosen, *(k for k in NETWORK_KINDS if k not in chosen))
    if overlap_network and not soak:
        raise OptionError("--overlap-network", "rounds", "applies to soak mode only (--soak)")
    options = ChaosOptions(
        pipeline=pipeline,
        faults=faults,
        seed=seed,
        naive=naive,  # type: ignore[arg-type]  # a click.Choice of NAIVE_KINDS
        plan=plan,
        work_dir=work_dir,
        records_per_round=records,
        kinds=chosen,  # type: ignore[arg-type]  # checked above
        deadline=deadline,
        rate=rate,
        storage=storage,  # type: ignore[arg-type]  # a click.Choice of the two
        pg_commit_protocol=pg_commit_protocol,  # type: ignore[arg-type]  # a click.Choice of the two
        changes_stage=changes_stage,
        overlap_network=overlap_network,
    )
    if not as_json:
        what = f"naive baseline {naive}" if naive else "sparkonce" + (" in soak mode" if soak else "")
        console.print(f"chaos: {what}, seed {seed}, {len(plan.faults) if plan else faults} fault(s), in {work_dir}")
    # SIGTERM ends the run like Ctrl-C: the driver, the broker and PostgreSQL it started are stopped on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if soak:
        result = run_soak(options, on_fault=_print_fault_to_stderr if as_json else _print_fault)
    else:
        result = run_chaos(options, on_round=_print_round_to_stderr if as_json else _print_round)
    rounds_dir = Path(result.work_dir) / "rounds"
    (rounds_dir / "plan.json").write_text(result.plan.dumps(), encoding="utf-8")
    (rounds_dir / "result.json").write_text(json.dumps(to_jsonable(result), indent=2), encoding="utf-8")
    if as_json:
        print_json(result)
    else:
        _render(result)
    if not result.exactly_once:
        sys.exit(EXIT_FINDINGS)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def _print_fault(event: object) -> None:
    console.print(fault_line(event), soft_wrap=True, markup=False)


def _print_fault_to_stderr(event: object) -> None:
    err_console.print(fault_line(event), soft_wrap=True, markup=False)


def fault_line(event: object) -> str:
    """One fault of a soak run as the command prints it (also the record script's progress line)."""
    from sparkonce_local.chaos.plan import FaultEvent

    assert isinstance(event, FaultEvent)
    what = f"{event.kind} {event.point}" if event.point else event.kind
    mark = "injected" if event.injected else "not injected"
    return f"  {event.at:8.1f}s fault {event.index}: {what}: {mark} ({event.note}; {event.seconds:.1f}s)"


def _print_round(round_result: object) -> None:
    console.print(_round_line(round_result), soft_wrap=True, markup=False)


def _print_round_to_stderr(round_result: object) -> None:
    err_console.print(_round_line(round_result), soft_wrap=True, markup=False)


def _round_line(round_result: object) -> str:
    from sparkonce_local.chaos import RoundResult

    assert isinstance(round_result, RoundResult)
    fault = round_result.fault.label if round_result.fault else "no fault (drain)"
    mark = "injected" if round_result.injected else ("-" if round_result.fault is None else "not injected")
    return (
        f"  round {round_result.index}: +{round_result.records} records, {fault}: {mark}; "
        f"{round_result.outcome} after {round_result.seconds:.0f}s"
    )


def _render(result: object) -> None:
    from sparkonce_local.chaos import ChaosResult

    assert isinstance(result, ChaosResult)
    faults = Table(title="faults injected", show_edge=False)
    faults.add_column("kind")
    faults.add_column("injected", justify="right")
    for kind, count in result.injected_by_kind.items():
        faults.add_row(kind, str(count))
    for point, count in result.injected_by_point.items():
        faults.add_row(f"  crash_point {point}", str(count))
    console.print(faults)
    tables = Table(title="reconciliation (independent: confluent-kafka, delta-rs, pyarrow, psycopg)", show_edge=False)
    for column in ("table", "against", "rows", "expected", "duplicates", "lost", "extra", "wrong value"):
        tables.add_column(column, justify="left" if column in ("table", "against") else "right")
    for check in result.tables:
        style = "" if check.ok else "red"
        tables.add_row(
            check.table,
            check.against,
            str(check.rows),
            str(check.expected_rows),
            str(check.duplicates),
            str(check.lost),
            str(check.extra),
            str(check.mismatched),
            style=style,
        )
    console.print(tables)
    batches = ", ".join(f"{stage} {count}" for stage, count in result.batches.items())
    console.print(
        f"seed {result.seed}; {result.faults_injected} of {result.faults_planned} planned fault(s) injected; "
        f"{result.driver_runs} driver run(s), {result.restarts} restart(s); batches committed: {batches}; "
        f"{result.records} records ({result.malformed} malformed); {result.seconds:.0f}s"
    )
    retried = ", ".join(f"{kind} {count}" for kind, count in result.retries_by_kind.items())
    passes = f"; {result.failed_passes} failed pass(es), their queries started again" if result.mode == "soak" else ""
    console.print(f"retries in the driver logs: {retried or 'none counted'}{passes}")
    if result.mode == "soak":
        console.print(
            f"soak: {result.faults_per_minute:.1f} faults per minute over {result.fault_seconds:.0f}s of faults; "
            f"about {result.produced_during_outages} records handed to the producer while the broker or its store "
            f"was down; {result.produces_refused} produce(s) refused by the broker (each allowed in the topic at "
            "most once)"
        )
        for text, count in result.produce_errors.items():
            console.print(f"  produce error x{count}: {text}", soft_wrap=True, markup=False)
    if result.exactly_once:
        console.print("[green]exactly once: nothing duplicated, nothing lost[/green]")
        return
    err_console.print("[red]FAILED[/red]" + (f": {result.error}" if result.error else ": duplicates or losses above"))
    err_console.print(
        f"replay: sparkonce chaos --plan {Path(result.work_dir) / 'rounds' / 'plan.json'}   (or --seed {result.seed}"
        f" --faults {len(result.plan.faults)}{' --naive ' + result.naive if result.naive else ''}"
        f"{' --soak' if result.mode == 'soak' else ''})"
    )
    err_console.print("fault plan:\n" + result.plan.dumps(), soft_wrap=True)
    if result.log_tail:
        err_console.print("last driver log lines:\n" + result.log_tail, soft_wrap=True, markup=False)
