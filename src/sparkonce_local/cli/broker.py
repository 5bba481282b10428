"""``sparkonce broker start|stop|restart|status`` and ``sparkonce produce``: thin commands over the services.

Exit codes: 0 ok, 2 usage error, 3 broker not running or unreachable (``status``, ``produce``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from sparkonce.cli.common import EXIT_UNREACHABLE, console, handle_errors, json_option, print_json
from sparkonce.errors import BrokerError
from sparkonce_local.services.broker import (
    DEFAULT_STATE_DIR,
    broker_status,
    create_topic,
    restart_broker,
    start_broker,
    stop_broker,
)
from sparkonce_local.services.producer import DEFAULT_TOPIC, produce_sensor_readings

__all__ = ["broker", "produce"]

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Directory of the broker's pid, info, log and configuration files and its data (Kafka's log directory).",
)


@click.group()
def broker() -> None:
    """Run the embedded Kafka broker (Apache Kafka, KRaft, one node on loopback; its data on disk in the state
    directory)."""


@broker.command("start")
@_state_dir_option
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port to listen on (default: a free one).")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="NAME[:PARTITIONS]",
    help="Create a topic once the broker is up (repeatable), e.g. --topic sensor_readings_raw:3.",
)
@json_option()
@handle_errors
def start(state_dir: Path, port: int | None, topics: tuple[str, ...], as_json: bool) -> None:
    """Start the broker in the background and print its bootstrap address (its data directory is kept from a
    previous run of the same state directory)."""
    wanted = [_parse_topic(spec) for spec in topics]
    info = start_broker(state_dir=state_dir, port=port)
    for name, partitions in wanted:
        create_topic(info.bootstrap, name, partitions=partitions, exist_ok=True)
    if as_json:
        print_json({"broker": info, "topics": {name: partitions for name, partitions in wanted}})
        return
    console.print(
        f"[green]broker running[/green] pid {info.pid} on [bold]{info.bootstrap}[/bold], data {info.data_dir}"
    )
    for name, partitions in wanted:
        console.print(f"topic {name} ({partitions} partitions)")
    console.print(f"log: {info.log_file}")
    console.print(f"use: --option kafka.bootstrap.servers={info.bootstrap}  |  sparkonce broker stop")


@broker.command("stop")
@_state_dir_option
@json_option()
@handle_errors
def stop(state_dir: Path, as_json: bool) -> None:
    """Stop the broker (SIGTERM: Kafka's controlled shutdown; SIGKILL if it does not exit). Its data stays."""
    result = stop_broker(state_dir=state_dir)
    if as_json:
        print_json(result)
    elif result.was_running:
        console.print(f"broker pid {result.pid} stopped{' (killed)' if result.forced else ''}")
    else:
        console.print(f"no broker running for {result.state_dir}")


@broker.command("restart")
@_state_dir_option
@click.option("--crash", is_flag=True, help="SIGKILL the broker instead of stopping it (a crash).")
@json_option()
@handle_errors
def restart(state_dir: Path, crash: bool, as_json: bool) -> None:
    """Stop the broker and start it again on the same ports and data (every acknowledged record stays)."""
    info = restart_broker(state_dir=state_dir, crash=crash)
    if as_json:
        print_json({"broker": info})
        return
    console.print(f"broker restarted: pid {info.pid} on [bold]{info.bootstrap}[/bold], data {info.data_dir}")


@broker.command("status")
@_state_dir_option
@json_option()
@handle_errors
def status(state_dir: Path, as_json: bool) -> None:
    """Show whether the broker runs and answers, and its topics. Exit code 3 when it does not."""
    result = broker_status(state_dir=state_dir)
    if as_json:
        print_json(result)
    elif result.info is None or not result.running:
        console.print(f"[yellow]no broker running[/yellow] for {result.state_dir}")
    else:
        state = "[green]reachable[/green]" if result.reachable else "[red]not answering[/red]"
        console.print(f"broker pid {result.info.pid} on [bold]{result.info.bootstrap}[/bold]: {state}")
        console.print(f"started {result.info.started_at}, log {result.info.log_file}")
        for name, partitions in result.topics.items():
            console.print(f"  topic {name} ({partitions} partitions)")
    if not (result.running and result.reachable):
        sys.exit(EXIT_UNREACHABLE)


@click.command()
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (default: the embedded broker's).")
@_state_dir_option
@click.option("--topic", default=DEFAULT_TOPIC, show_default=True)
@click.option("--count", type=click.IntRange(min=0), default=1000, show_default=True, help="Records to produce.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="Records per second.")
@click.option("--devices", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--keys/--no-keys", default=True, show_default=True, help="Key records by device id.")
@click.option("--partitions", type=click.IntRange(min=1), default=None, help="Partitions if the topic is new.")
@click.option(
    "--malformed",
    "malformed_share",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Share of malformed records (0..1).",
)
@click.option("--seed", type=int, default=None, help="Seed for reproducible readings.")
@json_option()
@handle_errors
def produce(
    bootstrap: str | None,
    state_dir: Path,
    topic: str,
    count: int,
    rate: float | None,
    devices: int,
    keys: bool,
    partitions: int | None,
    malformed_share: float,
    seed: int | None,
    as_json: bool,
) -> None:
    """Produce sample sensor readings (JSON: device_id, reading_time, value) to a topic."""
    if bootstrap is None:
        current = broker_status(state_dir=state_dir)
        if current.info is None or not current.running:
            raise BrokerError(f"no broker running for {current.state_dir}: run `sparkonce broker start` first")
        bootstrap = current.info.bootstrap
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=as_json,
        transient=False,
    ) as progress:
        task = progress.add_task(f"producing to {topic}", total=count)
        result = produce_sensor_readings(
            bootstrap,
            topic=topic,
            count=count,
            rate=rate,
            devices=devices,
            keyed=keys,
            partitions=partitions,
            malformed_share=malformed_share,
            seed=seed,
            on_progress=lambda done: progress.update(task, completed=done),
        )
    if as_json:
        print_json({**vars(result), "records_per_second": round(result.records_per_second, 1)})
        return
    console.print(
        f"{result.records} records ({result.malformed} malformed) to {result.topic} "
        f"({result.partitions} partitions) in {result.seconds:.2f}s "
        f"= {result.records_per_second:,.0f} records/s"
    )


def _parse_topic(spec: str) -> tuple[str, int]:
    name, _, count = spec.partition(":")
    if not name:
        raise click.BadParameter(f"{spec!r}: expected NAME or NAME:PARTITIONS", param_hint="--topic")
    if not count:
        return name, 1
    if not count.isdigit() or int(count) < 1:
        raise click.BadParameter(f"{spec!r}: PARTITIONS must be a number >= 1", param_hint="--topic")
    return name, int(count)
