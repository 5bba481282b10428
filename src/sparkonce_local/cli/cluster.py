"""``sparkonce cluster start|stop|status``: thin commands over :mod:`sparkonce_local.services.cluster`.

Exit codes: 0 ok, 2 usage error, 3 cluster not running or unreachable (``status``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sparkonce.cli.common import EXIT_UNREACHABLE, console, handle_errors, json_option, print_json
from sparkonce_local.services.cluster import (
    DEFAULT_STATE_DIR,
    DEFAULT_WORKER_CORES,
    DEFAULT_WORKER_MEMORY,
    cluster_status,
    start_cluster,
    stop_cluster,
)

__all__ = ["cluster"]

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Directory of the cluster's info file, logs and worker dirs.",
)


@click.group()
def cluster() -> None:
    """Run a standalone Spark cluster (a master and workers from the pyspark wheel, on loopback)."""


@cluster.command("start")
@_state_dir_option
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--worker-cores", type=click.IntRange(min=1), default=DEFAULT_WORKER_CORES, show_default=True)
@click.option("--worker-memory", default=DEFAULT_WORKER_MEMORY, show_default=True, help="e.g. 2g, 1500m.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Master port (default: a free one).")
@json_option()
@handle_errors
def start(
    state_dir: Path, workers: int, worker_cores: int, worker_memory: str, port: int | None, as_json: bool
) -> None:
    """Start the master and the workers in the background; print the master URL."""
    info = start_cluster(
        state_dir=state_dir, workers=workers, worker_cores=worker_cores, worker_memory=worker_memory, port=port
    )
    if as_json:
        print_json(info)
        return
    console.print(f"[green]cluster running[/green]: master [bold]{info.master_url}[/bold] (pid {info.master_pid})")
    for worker in info.workers:
        console.print(f"worker {worker.index}: pid {worker.pid}, {worker.cores} core(s), {worker.memory}")
    console.print(f"web UI: {info.webui_url}, logs: {info.state_dir}")
    console.print(f"use: sparkonce run PIPELINE --master {info.master_url}  |  sparkonce cluster stop")


@cluster.command("stop")
@_state_dir_option
@json_option()
@handle_errors
def stop(state_dir: Path, as_json: bool) -> None:
    """Stop the workers (and their executors) and the master."""
    result = stop_cluster(state_dir=state_dir)
    if as_json:
        print_json(result)
    elif result.was_running:
        pids = ", ".join(map(str, result.pids))
        console.print(f"cluster stopped (pids {pids}){' (killed)' if result.forced else ''}")
    else:
        console.print(f"no cluster running for {result.state_dir}")


@cluster.command("status")
@_state_dir_option
@json_option()
@handle_errors
def status(state_dir: Path, as_json: bool) -> None:
    """Show the master, its workers and running applications. Exit code 3 when the master is not up."""
    result = cluster_status(state_dir=state_dir)
    if as_json:
        print_json({**result.__dict__, "alive_workers": result.alive_workers})
    elif result.info is None or not result.running:
        console.print(f"[yellow]no cluster running[/yellow] for {result.state_dir}")
    else:
        state = "[green]reachable[/green]" if result.reachable else "[red]not answering[/red]"
        console.print(f"master [bold]{result.info.master_url}[/bold] (pid {result.info.master_pid}): {state}")
        for worker in result.workers:
            console.print(
                f"  {worker.worker_id}: {worker.state}, cores {worker.cores_used}/{worker.cores}, "
                f"memory {worker.memory_used_mb}/{worker.memory_mb} MiB"
            )
        for app in result.active_apps:
            console.print(f"  application: {app}")
    if not (result.running and result.reachable):
        sys.exit(EXIT_UNREACHABLE)
