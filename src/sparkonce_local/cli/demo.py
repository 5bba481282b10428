"""``sparkonce demo``: exactly-once proven by a real crash, in one command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sparkonce.cli.common import EXIT_FINDINGS, console, handle_errors, json_option, print_json


@click.command()
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=Path(".sparkonce/demo"),
    show_default=True,
    help="Where the input files, the Delta table and the checkpoint go (a folder sparkonce created is wiped "
    "first; any other must be new or empty).",
)
@click.option("--batches", type=click.IntRange(2, 1000), default=4, show_default=True)
@click.option("--rows-per-batch", type=click.IntRange(1), default=1000, show_default=True)
@json_option()
@handle_errors
def demo(work_dir: Path, batches: int, rows_per_batch: int, as_json: bool) -> None:
    """Stream files into a Delta table, SIGKILL the driver after a Delta commit, restart, check every row."""
    from sparkonce_local.demo import run_demo

    crash_batch = batches // 2
    if not as_json:
        console.print(f"Streaming {batches} batches of {rows_per_batch} rows into a Delta table in {work_dir} ...")
        console.print(f"The driver will be killed with SIGKILL after the Delta commit of batch {crash_batch}.")
    result = run_demo(work_dir, batches=batches, rows_per_batch=rows_per_batch, crash_batch=crash_batch)
    if as_json:
        print_json(result)
    else:
        state = result.after_crash
        console.print(
            f"[bold]After the crash[/bold]: batch {state.planned_batch} planned, checkpoint commit "
            f"{'present' if state.checkpoint_committed else 'missing'}, table holds txn(app_id={result.query_id}, "
            f"txn_version={state.table_txn_version}), {state.rows_in_table} rows."
        )
        replay = (
            "the sink found its txn and skipped it"
            if result.commits_of_crashed_batch == 1
            else f"it is now in {result.commits_of_crashed_batch} Delta commits"
        )
        console.print(f"[bold]After the restart[/bold]: Spark re-ran batch {state.planned_batch}; {replay}.")
        console.print(
            f"Rows expected {result.rows_expected}, in table {result.rows_in_table}, duplicated ids "
            f"{result.duplicated_ids}, missing ids {result.missing_ids}, Delta commits {result.delta_commits}."
        )
        verdict = "[green]exactly once: no duplicate, no loss[/green]" if result.exactly_once else "[red]FAILED[/red]"
        console.print(verdict)
    if not result.exactly_once:
        sys.exit(EXIT_FINDINGS)
