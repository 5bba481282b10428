"""``sparkonce storage start|stop|restart|status``: thin commands over :mod:`sparkonce_local.services.storage`.

Exit codes: 0 ok, 2 usage error, 3 store not running or unreachable (``status``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sparkonce.cli.common import EXIT_UNREACHABLE, console, handle_errors, json_option, print_json
from sparkonce_local.services.storage import (
    DEFAULT_STATE_DIR,
    StorageInfo,
    restart_storage,
    start_storage,
    stop_storage,
    storage_status,
)

__all__ = ["storage"]

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Directory of the store's pid, info, log files and data.",
)


@click.group()
def storage() -> None:
    """Run the embedded S3-compatible object store (SeaweedFS, on loopback)."""


@storage.command("start")
@_state_dir_option
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="S3 port (default: a free one).")
@click.option("--bucket", "buckets", multiple=True, metavar="NAME", help="Create a bucket once up (repeatable).")
@json_option()
@handle_errors
def start(state_dir: Path, port: int | None, buckets: tuple[str, ...], as_json: bool) -> None:
    """Start the store in the background and print its endpoint and storage options."""
    info = start_storage(state_dir=state_dir, port=port)
    uris = [info.create_bucket(name, exist_ok=True) for name in buckets]
    _show(info, uris, as_json=as_json, verb="running")


@storage.command("restart")
@_state_dir_option
@click.option("--crash", is_flag=True, help="SIGKILL the store instead of stopping it (a crash).")
@json_option()
@handle_errors
def restart(state_dir: Path, crash: bool, as_json: bool) -> None:
    """Stop the store and start it again on the same ports, data and credentials."""
    info = restart_storage(state_dir=state_dir, crash=crash)
    _show(info, [], as_json=as_json, verb="restarted")


@storage.command("stop")
@_state_dir_option
@json_option()
@handle_errors
def stop(state_dir: Path, as_json: bool) -> None:
    """Stop the store (SIGTERM, then SIGKILL after a short deadline); its data stays in the state dir."""
    result = stop_storage(state_dir=state_dir)
    if as_json:
        print_json(result)
    elif result.was_running:
        console.print(f"object store pid {result.pid} stopped{' (killed)' if result.forced else ''}")
    else:
        console.print(f"no object store running for {result.state_dir}")


@storage.command("status")
@_state_dir_option
@json_option()
@handle_errors
def status(state_dir: Path, as_json: bool) -> None:
    """Show whether the store runs and answers, and its buckets. Exit code 3 when it does not."""
    result = storage_status(state_dir=state_dir)
    if as_json:
        print_json(result)
    elif result.info is None or not result.running:
        console.print(f"[yellow]no object store running[/yellow] for {result.state_dir}")
    else:
        state = "[green]reachable[/green]" if result.reachable else "[red]not answering[/red]"
        console.print(f"object store pid {result.info.pid} at [bold]{result.info.endpoint}[/bold]: {state}")
        console.print(f"started {result.info.started_at}, log {result.info.log_file}")
        for name in result.buckets:
            console.print(f"  bucket s3://{name}")
    if not (result.running and result.reachable):
        sys.exit(EXIT_UNREACHABLE)


def _show(info: StorageInfo, uris: list[str], *, as_json: bool, verb: str) -> None:
    if as_json:
        print_json({"storage": info, "buckets": uris, "storage_options": info.storage_options()})
        return
    console.print(f"[green]object store {verb}[/green] pid {info.pid} at [bold]{info.endpoint}[/bold]")
    for uri in uris:
        console.print(f"bucket {uri}")
    console.print(f"log: {info.log_file}, data: {info.data_dir}")
    console.print("storage options (delta-rs names):")
    for name, value in info.storage_options().items():
        console.print(f"  {name}={value}")
