"""``sparkonce vacuum``: a thin command over :func:`sparkonce.delta.vacuum.vacuum`, with Delta's retention guard.

Without ``--yes`` (or with ``--dry-run``) it only lists what it would delete. Exit codes: 0 done or listed, 2 a
retention below the table's ``delta.deletedFileRetentionDuration`` (or another bad option), 3 not a Delta table.
"""

from __future__ import annotations

import click
from rich.table import Table

from sparkonce.cli.common import TABLE, console, handle_errors, json_option, print_json, print_table, storage_option
from sparkonce.errors import OptionError
from sparkonce.storage import table_location

__all__ = ["vacuum"]


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
@json_option()
@handle_errors
def vacuum(
    table: str,
    storage_options: dict[str, str],
    retain_hours: float | None,
    dry_run: bool,
    yes: bool,
    no_retention_check: bool,
    as_json: bool,
) -> None:
    """Delete files of the Delta TABLE that no table version within the retention references (orphans of failed
    writes included)."""
    from sparkonce.delta.vacuum import vacuum as vacuum_table

    listing = dry_run or not yes
    try:
        result = vacuum_table(
            table_location(table, storage_options=storage_options),
            retention_hours=retain_hours,
            dry_run=listing,
            enforce_retention_duration=not no_retention_check,
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
    if listing and not dry_run and result.files:
        console.print("Nothing deleted: re-run with --yes to delete these files.")
