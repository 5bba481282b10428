"""``sparkonce quickstart``: the demo pipeline from the embedded broker through every table, with a crash."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import click

from sparkonce.cli.common import EXIT_FINDINGS, console, handle_errors, json_option, print_json, print_table
from sparkonce_local.demo_pipeline import DEFAULT_WORK_DIR


@click.command()
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_WORK_DIR,
    show_default=True,
    help="Where the broker state, pipeline file, tables and checkpoints go (a folder sparkonce created is wiped "
    "first; any other must be new or empty).",
)
@click.option("--records", type=click.IntRange(100), default=3000, show_default=True)
@click.option(
    "--storage",
    type=click.Choice(["local", "s3"]),
    default="local",
    show_default=True,
    help="Where the tables go: the work dir, or the embedded S3 store (SeaweedFS, started and stopped here).",
)
@json_option()
@handle_errors
def quickstart(work_dir: Path, records: int, storage: Literal["local", "s3"], as_json: bool) -> None:
    """Kafka -> raw -> bronze -> gold with a SIGKILL mid-batch and a restart: exactly once, proven."""
    from sparkonce_local.quickstart import run_quickstart

    if not as_json:
        console.print(
            f"Producing {records} sensor readings (3% malformed) to the embedded broker, running the pipeline in "
            f"{work_dir}{' with its tables on the embedded S3 store' if storage == 's3' else ''};\n"
            "the driver is killed with SIGKILL inside raw batch 2 (after its Delta commit, before "
            "commits/2), then restarted. This takes under a minute on 2 cores ..."
        )
    result = run_quickstart(work_dir, records=records, storage=storage)
    if as_json:
        print_json(result)
    else:
        from rich.table import Table

        console.print(
            f"crash: {'driver killed' if result.crashed else '[red]did not fire[/red]'}"
            f"{', batch planned but not committed' if result.batch_planned_not_committed else ''}; "
            f"restart: {'ok' if result.restart_ok else '[red]failed[/red]'}"
        )
        table = Table(title="tables")
        table.add_column("table")
        table.add_column("rows", justify="right")
        table.add_column("path")
        for t in result.tables:
            table.add_row(t.table, str(t.rows), t.path)
        print_table(table)
        console.print(
            f"produced {result.produced} records ({result.malformed} malformed); quarantine reasons "
            f"{result.quarantine_reasons}"
        )
        console.print(
            f"verify raw: {result.raw_duplicated_offsets} duplicated, {result.raw_missing_offsets} missing offsets; "
            f"bronze+quarantine: {result.bronze_quarantine_duplicated} duplicated, "
            f"{result.bronze_quarantine_missing} missing records; gold: {result.gold_mismatches} wrong keys"
        )
        if result.exactly_once:
            console.print("[green]exactly once: no duplicate, no loss, through every table[/green]")
        else:
            console.print("[red]NOT exactly once[/red]")
            console.print(result.log_tail)
    if not result.exactly_once:
        sys.exit(EXIT_FINDINGS)
