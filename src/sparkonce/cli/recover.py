"""``sparkonce rebuild-checkpoint`` and ``sparkonce reset``: print the plan, act only with ``--yes``."""

from __future__ import annotations

import click

from sparkonce.cli.common import (
    CHECKPOINT,
    EXISTING_CHECKPOINT,
    TABLE,
    checkpoint_session,
    conf_option,
    console,
    handle_errors,
    json_option,
    print_json,
    storage_option,
)
from sparkonce.storage import table_location


@click.command("rebuild-checkpoint")
@click.argument("table", type=TABLE)
@click.argument("checkpoint", type=CHECKPOINT)
@storage_option
@conf_option
@click.option("--query-id", default=None, help="The query whose checkpoint to rebuild (default: the newest).")
@click.option("--yes", is_flag=True, help="Write the files; without it only the plan is shown.")
@json_option()
@handle_errors
def rebuild_checkpoint(
    table: str,
    checkpoint: str,
    storage_options: dict[str, str],
    conf: dict[str, str],
    query_id: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    """Rebuild a lost CHECKPOINT of a stream writing TABLE, from the offsets its Delta commits recorded."""
    from sparkonce.ops.recover import apply_rebuild, plan_rebuild

    checkpoint_session(checkpoint, conf)
    plan = plan_rebuild(table_location(table, storage_options=storage_options), checkpoint, query_id=query_id)
    written = apply_rebuild(plan) if yes else []
    if as_json:
        print_json({"plan": plan, "applied": yes, "written": written})
        return
    console.print(
        f"Query {plan.query_id}: last batch in the table is {plan.batch_id} (Delta commit at table version "
        f"{plan.table_version}); sources: {', '.join(plan.source_kinds)}."
    )
    console.print(f"Files for {checkpoint}: {', '.join(plan.files)} (same query id, so replays stay idempotent).")
    if plan.other_query_ids:
        console.print(f"[yellow]Other query ids also wrote this table:[/yellow] {', '.join(plan.other_query_ids)}")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if yes:
        console.print(f"[green]Rebuilt[/green]: {len(written)} files written. Restart the query on {checkpoint}.")
    else:
        console.print("Nothing written: pass --yes to write these files.")


@click.command()
@click.argument("checkpoint", type=EXISTING_CHECKPOINT)
@click.option(
    "--table",
    "tables",
    multiple=True,
    help="An output Delta table of the query, a path or URI (repeat for several). Required.",
)
@storage_option
@conf_option
@click.option("--force", is_flag=True, help="Reset even though the checkpoint was modified in the last minutes.")
@click.option("--yes", is_flag=True, help="Act; without it only the plan is shown.")
@json_option()
@handle_errors
def reset(
    checkpoint: str,
    tables: tuple[str, ...],
    storage_options: dict[str, str],
    conf: dict[str, str],
    force: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Reset a query safely: clear its output tables (one Delta commit each), then move CHECKPOINT aside."""
    from sparkonce.ops.recover import apply_reset, plan_reset

    checkpoint_session(checkpoint, conf)
    plan = plan_reset(checkpoint, [table_location(t, storage_options=storage_options) for t in tables], force=force)
    result = apply_reset(plan) if yes else None
    if as_json:
        print_json({"plan": plan, "applied": yes, "result": result})
        return
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print("Plan: 1. clear " + ", ".join(str(t) for t in plan.tables) + " (time travel keeps the old rows)")
    console.print(f"      2. move {plan.checkpoint_dir} to {plan.moved_to}")
    console.print("      3. restart the query with startingOffsets=earliest (or its source's equivalent)")
    if result is None:
        console.print("Nothing done: pass --yes to act.")
    else:
        versions = ", ".join(f"{t} at table version {v}" for t, v in result.cleared_table_versions.items())
        console.print(f"[green]Done[/green]: cleared {versions}; checkpoint moved.")
