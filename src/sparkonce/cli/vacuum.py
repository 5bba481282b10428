"""``sparkonce vacuum``: a thin command over :func:`sparkonce.delta.ops.vacuum.vacuum`, with Delta's retention guard;
``sparkonce readers``: the streams registered as readers of a table (:mod:`sparkonce.delta.txn.readers`).

Without ``--yes`` (or with ``--dry-run``) it only lists what it would delete. Files that registered stream readers
still need stay (``sparkonce readers``), and the output says which reader kept how many; ``--force`` deletes them
too. Exit codes: 0 done or listed, 2 a retention below the table's ``delta.deletedFileRetentionDuration`` (or
another bad option), 3 not a Delta table.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.table import Table

from sparkonce.cli.common import TABLE, console, handle_errors, json_option, print_json, print_table, storage_option
from sparkonce.errors import OptionError
from sparkonce.storage import table_location

__all__ = ["readers", "vacuum"]


@click.command()
@click.argument("table", type=TABLE)
@storage_option
@click.option(
    "--retain-hours",
    type=click.FloatRange(min=0),
    default=None,
    help="Keep files removed or written less than this many hours ago [default: the table's "
    "delta.deletedFileRetentionDuration, 168 when unset].",
)
@click.option("--dry-run", is_flag=True, help="Only list the files that would be deleted.")
@click.option("--yes", is_flag=True, help="Delete; without it, only list the files.")
@click.option(
    "--no-retention-check",
    is_flag=True,
    help="Allow --retain-hours below the table's retention (Delta's retentionDurationCheck.enabled=false): can "
    "delete files that running readers or writes in flight still need.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Also delete files that registered stream readers still need (see `sparkonce readers`): those streams "
    "then cannot resume from their checkpoints.",
)
@json_option()
@handle_errors
def vacuum(
    table: str,
    storage_options: dict[str, str],
    retain_hours: float | None,
    dry_run: bool,
    yes: bool,
    no_retention_check: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Delete files of the Delta TABLE that no table version within the retention references (orphans of failed
    writes included)."""
    from sparkonce.delta.ops.vacuum import vacuum as vacuum_table

    listing = dry_run or not yes
    try:
        result = vacuum_table(
            table_location(table, storage_options=storage_options),
            retention_hours=retain_hours,
            dry_run=listing,
            enforce_retention_duration=not no_retention_check,
            force=force,
        )
    except OptionError as err:
        if err.option != "retention_hours":
            raise
        problem = err.problem.replace("pass enforce_retention_duration=False", "pass --no-retention-check")
        raise OptionError("--retain-hours", retain_hours, problem) from err
    if as_json:
        print_json(result)
        return
    out = Table(title=f"{table} at table version {result.table_version}, retention {result.retention_hours:g} hours")
    out.add_column("file")
    for name in result.files:
        out.add_row(name)
    if result.files:
        print_table(out)
    verb = "Would delete" if listing else "Deleted"
    console.print(f"{verb} {len(result.files)} file(s), {result.bytes} bytes.")
    for held in result.held_back:
        reader = held.reader
        console.print(
            f"Kept {len(held.files)} file(s) for the reader query {reader.query_id} (checkpoint "
            f"{reader.checkpoint_dir}) at table version {reader.table_version}; --force deletes them."
        )
    for reader in result.expired_readers:
        console.print(
            f"Expired reader query {reader.query_id} (checkpoint {reader.checkpoint_dir}) held nothing back "
            f"(see `sparkonce readers {table}`)."
        )
    if listing and not dry_run and result.files:
        console.print("Nothing deleted: re-run with --yes to delete these files.")


@click.command()
@click.argument("table", type=TABLE)
@storage_option
@click.option(
    "--forget",
    "forget",
    metavar="QUERY_ID",
    default=None,
    help="Drop the registration of this query: log cleanup and VACUUM stop keeping what it needs.",
)
@click.option("--yes", is_flag=True, help="With --forget: drop it; without, only say what would be dropped.")
@json_option()
@handle_errors
def readers(table: str, storage_options: dict[str, str], forget: str | None, yes: bool, as_json: bool) -> None:
    """List the streams registered as readers of the Delta TABLE (the retention guard: log cleanup and VACUUM keep
    what an active one still needs), or forget one."""
    from sparkonce.delta.txn.readers import forget_reader, reader_states

    location = table_location(table, storage_options=storage_options)
    states, problems = reader_states(location)
    if forget is not None:
        found = [s for s in states if s.reader.query_id == forget]
        if not found:
            raise OptionError("--forget", forget, f"is not a registered reader of {table}")
        reader = found[0].reader
        what = (
            f"the registration of query {reader.query_id} (checkpoint {reader.checkpoint_dir}) at table version "
            f"{reader.table_version}"
        )
        if not yes:
            console.print(f"Would forget {what}. Nothing changed: re-run with --yes to forget it.")
            return
        forget_reader(location, forget)
        console.print(f"Forgot {what}; log cleanup and VACUUM no longer keep what it needs.")
        return
    if as_json:
        print_json({"readers": states, "problems": problems})
        return
    out = Table(title=f"readers of {table}")
    for column in ("query id", "name", "source", "table version", "updated", "status", "checkpoint"):
        out.add_column(column, justify="right" if column == "table version" else "left")
    for state in states:
        r = state.reader
        updated = datetime.fromtimestamp(r.updated_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        status = state.status if state.missing_version is None else f"{state.status} (from {state.missing_version})"
        out.add_row(r.query_id, r.query_name or "", r.source, str(r.table_version), updated, status, r.checkpoint_dir)
    if states:
        print_table(out)
    console.print(f"{len(states)} registered reader(s).")
    for problem in problems:
        console.print(f"Unreadable registration (holds nothing back): {problem}")
