"""The chaos record: soak runs of ``sparkonce chaos``, each appended to ``docs/chaos-record.json``.

Run (one at a time, on a machine nobody else loads; ``uptime`` below ~4)::

    .venv/bin/python benchmarks/chaos_record.py --faults 1000 --seeds 1          # ~40 min at 25 faults/min
    .venv/bin/python benchmarks/chaos_record.py --faults 100 --seeds 2,3,4        # shorter runs, other seeds
    .venv/bin/python benchmarks/chaos_record.py --network --faults 2000 --seeds 26  # + faults on every link

Each seed is one ``sparkonce chaos --soak --faults N --seed S --storage s3`` run (the quickstart setup: the
embedded broker with its log on the embedded S3 store, the four tables on the same store, PostgreSQL; a producer
producing throughout; faults one after another, a driver kill every 100th), reconciled at the end. Its summary
(faults per kind and per crash point, per-table duplicates and losses, faults per minute, the load average at the
start, the commit) is appended to the JSON file, whatever the outcome; a run that is not exactly once is kept too
(with its plan file's path, for ``sparkonce chaos --plan``). Prints one line per run. Asserts nothing; the exit
code is 1 when a run was not exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "docs" / "chaos-record.json"


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _summary(result: object, *, load: float, work_dir: Path, network: bool, overlap: bool) -> dict[str, object]:
    from sparkonce_local.chaos import ChaosResult

    assert isinstance(result, ChaosResult)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "command": (
            f"sparkonce chaos --soak {'--network ' if network else ''}{'--overlap-network ' if overlap else ''}"
            f"--faults {len(result.plan.faults)} --seed {result.seed} --storage s3"
        ),
        "load_average_at_start": load,
        "seed": result.seed,
        "faults_planned": result.faults_planned,
        "faults_injected": result.faults_injected,
        "injected_by_kind": result.injected_by_kind,
        "injected_by_point": result.injected_by_point,
        "faults_per_minute": result.faults_per_minute,
        "fault_seconds": result.fault_seconds,
        "seconds": result.seconds,
        "driver_runs": result.driver_runs,
        "retries_by_kind": result.retries_by_kind,
        "failed_passes": result.failed_passes,
        "records": result.records,
        "produced_during_outages": result.produced_during_outages,
        "produces_refused": result.produces_refused,
        "produce_errors": result.produce_errors,
        "tables": {
            t.table: {
                "rows": t.rows,
                "duplicates": t.duplicates,
                "lost": t.lost,
                "extra": t.extra,
                "wrong_value": t.mismatched,
            }
            for t in result.tables
        },
        "duplicates": result.duplicates,
        "lost": result.lost,
        "exactly_once": result.exactly_once,
        "error": result.error,
        "plan_file": str(work_dir / "rounds" / "plan.json"),
    }


def _print_fault(event: object) -> None:
    """One line per planned fault, as it ends (the run's progress), as ``sparkonce chaos`` prints it."""
    from sparkonce_local.cli.chaos import fault_line

    print(fault_line(event), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=1000)
    parser.add_argument("--seeds", default="1", help="comma-separated seeds, one soak run each")
    parser.add_argument("--rate", type=float, default=20.0, help="records produced per second")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sparkonce-chaos-record"))
    parser.add_argument("--record", type=Path, default=RECORD, help="the JSON file the runs are appended to")
    parser.add_argument(
        "--network", action="store_true", help="also draw the network faults (= sparkonce chaos --network)"
    )
    parser.add_argument(
        "--overlap-network",
        action="store_true",
        help="each link's network faults beside the other faults (= sparkonce chaos --overlap-network)",
    )
    parser.add_argument("--deadline", type=float, default=4 * 3600.0, help="seconds per run")
    args = parser.parse_args()

    from sparkonce_local.chaos import ChaosOptions, run_soak
    from sparkonce_local.chaos.plan import DEFAULT_KINDS, NETWORK_KINDS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # SIGTERM ends the run like Ctrl-C: the driver and the services it started are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    failed = False
    for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
        load = os.getloadavg()[0]
        work_dir = args.work_dir / f"seed-{seed}"
        options = ChaosOptions(
            faults=args.faults,
            seed=seed,
            work_dir=work_dir,
            rate=args.rate,
            storage="s3",
            deadline=args.deadline,
            kinds=(*DEFAULT_KINDS, *NETWORK_KINDS) if args.network else DEFAULT_KINDS,
            overlap_network=args.overlap_network,
        )
        result = run_soak(options, on_fault=_print_fault)
        (work_dir / "rounds" / "plan.json").write_text(result.plan.dumps(), encoding="utf-8")
        entry = _summary(
            result, load=round(load, 2), work_dir=work_dir, network=args.network, overlap=args.overlap_network
        )
        runs = json.loads(args.record.read_text(encoding="utf-8"))["runs"] if args.record.exists() else []
        runs.append(entry)
        args.record.write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")
        print(
            f"seed {seed}: {result.faults_injected} faults injected ({result.faults_per_minute:.1f}/min), "
            f"{result.records} records, duplicates {result.duplicates}, lost {result.lost}, "
            f"retries {sum(result.retries_by_kind.values())}, failed passes {result.failed_passes}, "
            f"{'exactly once' if result.exactly_once else 'NOT exactly once: ' + str(result.error)}; "
            f"{result.seconds:.0f}s -> {args.record}"
        )
        failed = failed or not result.exactly_once
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
