"""The test bed of a chaos run: its work directory, the services and tables it runs against, a service killed and
restarted, and the reconciliation of every table at the end; shared by the rounds (:mod:`.harness`) and soak
mode (:mod:`.soak`).

With a pipeline file the bed is that file's own setup; without one it is the quickstart's: an embedded broker
(its log on the embedded object store when a broker or store restart can be drawn, or the tables are on it),
PostgreSQL, the quickstart pipeline written into the work directory, and the fault proxy in front of the store
when the tables live there; when a network kind can be drawn, a TCP fault proxy in front of the broker (which
advertises it, so every Kafka client of the run goes through it) and one in front of PostgreSQL (the driver's
DSN). Runs in the calling process (the CLI).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sparkonce.errors import OptionError, SparkonceError
from sparkonce_local.chaos.model import ChaosOptions, RoundResult
from sparkonce_local.chaos.plan import NETWORK_KINDS, STORE_KINDS, Fault
from sparkonce_local.chaos.reconcile import (
    TableCheck,
    check_bronze,
    check_changes_fed,
    check_file_sink,
    check_gold,
    check_postgres,
    check_raw,
    check_topic,
    check_topic_values,
    delta_rows,
    read_topic,
)
from sparkonce_local.chaos.spec import DriverSpec
from sparkonce_local.services.process import log_tail as file_tail

if TYPE_CHECKING:
    from sparkonce.pipeline.model import PipelineConfig
    from sparkonce_local.services.faultproxy import FaultProxy, TcpFaultProxy
    from sparkonce_local.services.postgres import PostgresServer


MARKER = ".sparkonce-chaos"
"""File that marks a work directory as made by the harness (only such a directory is wiped)."""
MALFORMED_SHARE = 0.03
"""The share of malformed records the quickstart setup produces."""
START_TIME = datetime(2026, 1, 1, tzinfo=UTC)
"""The reading time of the first produced record (round N starts N hours later)."""


@dataclass
class ChaosSetup:
    """The services and paths of one run (harness side)."""

    work_dir: Path
    pipeline_file: Path
    config: PipelineConfig
    bootstrap: str
    spec: DriverSpec
    checkpoints: dict[str, str]
    broker_dir: Path | None = None
    postgres: PostgresServer | None = None
    storage_dir: Path | None = None
    """The object store holding the broker's log (when a broker or store restart can be drawn)."""
    proxy: FaultProxy | None = None
    """With the tables on the object store: the fault proxy between Spark and the store (``store_lost_response``)."""
    links: dict[str, TcpFaultProxy] = field(default_factory=dict)
    """With a network kind: the TCP fault proxies on the ``broker`` and ``postgres`` links."""
    produced: list[tuple[int, int]] = field(default_factory=list)
    deliveries: tuple[Counter[bytes], Counter[bytes]] | None = None
    """Soak mode: the values acknowledged, and those refused or never answered (see ``check_topic_values``)."""


def chaos_work_dir(work_dir: Path) -> Path:
    work_dir = work_dir.absolute()
    if work_dir.exists():
        if any(work_dir.iterdir()) and not (work_dir / MARKER).exists():
            raise OptionError(
                "work_dir", str(work_dir), f"exists and was not made by sparkonce chaos (no {MARKER}): not wiping it"
            )
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    (work_dir / MARKER).write_text("made by sparkonce chaos; wiped by the next run\n", encoding="utf-8")
    (work_dir / "rounds").mkdir()
    return work_dir


def set_up(options: ChaosOptions, work_dir: Path) -> ChaosSetup:
    from sparkonce.pipeline.loader import load_pipeline

    if options.pipeline is not None:
        if options.changes_stage:
            raise OptionError(
                "changes_stage", True, "applies to the quickstart setup only (add the stage to the pipeline file)"
            )
        if options.storage != "local":
            raise OptionError(
                "storage",
                options.storage,
                "applies to the quickstart setup only (a pipeline file "
                "says where its tables are, with its [storage] options)",
            )
        pipeline_file = options.pipeline.absolute()
        config = load_pipeline(pipeline_file)
        spec = DriverSpec(pipeline=str(pipeline_file), naive=options.naive)
        checkpoints: dict[str, str] = {s.name: s.checkpoint for s in config.stages}
        return ChaosSetup(work_dir, pipeline_file, config, config.source.bootstrap_servers, spec, checkpoints)
    from sparkonce_local.demo_pipeline import write_quickstart_pipeline
    from sparkonce_local.services.broker import start_broker, stop_broker
    from sparkonce_local.services.faultproxy import TcpFaultProxy
    from sparkonce_local.services.postgres import start_postgres, stop_postgres
    from sparkonce_local.services.process import LOOPBACK, free_port
    from sparkonce_local.services.storage import start_storage, stop_storage

    broker_dir = work_dir / "broker"
    storage_dir = work_dir / "storage" if wants_store(options) else None
    store = start_storage(state_dir=storage_dir) if storage_dir is not None else None
    links: dict[str, TcpFaultProxy] = {}
    try:
        if wants_network(options):
            port = free_port()
            links["broker"] = TcpFaultProxy(LOOPBACK, port)
            info = start_broker(state_dir=broker_dir, port=port, advertise=links["broker"].address)
        else:
            info = start_broker(state_dir=broker_dir)
    except BaseException:
        for link in links.values():
            link.close()
        if storage_dir is not None:
            stop_storage(state_dir=storage_dir)
        raise
    proxy: FaultProxy | None = None
    postgres: PostgresServer | None = None
    try:
        tables, storage_options = "tables", None
        if store is not None and options.storage == "s3":
            # Spark reaches the tables through a fault proxy (transparent until a store_lost_response arms it).
            from sparkonce_local.services.faultproxy import FaultProxy

            endpoint = urlsplit(store.endpoint)
            proxy = FaultProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 80)
            tables = f"{store.create_bucket('chaos')}/tables"
            storage_options = {**store.storage_options(), "AWS_ENDPOINT_URL": proxy.endpoint}
        pipeline_file = write_quickstart_pipeline(
            work_dir,
            info.bootstrap,
            tables=tables,
            storage_options=storage_options,
            changes_stage=options.changes_stage,
        )
        config = load_pipeline(pipeline_file)
        if options.naive == "file-sink-glob":
            checkpoints = {"raw_files": str(work_dir / "checkpoints" / "raw_files")}
            spec = DriverSpec(
                pipeline=str(pipeline_file),
                naive=options.naive,
                file_sink_dir=str(work_dir / "tables" / "raw_files"),
                file_sink_checkpoint=checkpoints["raw_files"],
            )
            return ChaosSetup(
                work_dir,
                pipeline_file,
                config,
                info.bootstrap,
                spec,
                checkpoints,
                broker_dir=broker_dir,
                storage_dir=storage_dir,
                proxy=proxy,
                links=links,
            )
        # A temporary cluster directory (removed on stop): when run as root, the server runs as the postgres OS user,
        # which cannot enter a private work directory.
        postgres = start_postgres()
        dsn = postgres.dsn
        if links:
            links["postgres"] = TcpFaultProxy(postgres.host, postgres.port)
            dsn = dsn.replace(f":{postgres.port}/", f":{links['postgres'].port}/")
    except BaseException:
        for link in links.values():
            link.close()
        if proxy is not None:
            proxy.close()
        if postgres is not None:
            with contextlib.suppress(SparkonceError):
                stop_postgres(postgres)
        stop_broker(state_dir=broker_dir)
        if storage_dir is not None:
            stop_storage(state_dir=storage_dir)
        raise
    checkpoints = {s.name: s.checkpoint for s in config.stages}
    checkpoints["postgres"] = str(work_dir / "checkpoints" / "postgres")
    spec = DriverSpec(
        pipeline=str(pipeline_file),
        naive=options.naive,
        postgres_dsn=dsn,
        postgres_checkpoint=checkpoints["postgres"],
        postgres_commit_protocol=options.pg_commit_protocol,
    )
    return ChaosSetup(
        work_dir,
        pipeline_file,
        config,
        info.bootstrap,
        spec,
        checkpoints,
        broker_dir,
        postgres,
        storage_dir,
        proxy,
        links,
    )


def wants_store(options: ChaosOptions) -> bool:
    """True when the run has its tables on the object store, or can draw a restart of the store."""
    if options.storage == "s3":
        return True
    if options.plan is not None:
        return any(f.kind in STORE_KINDS for f in options.plan.faults)
    drawn = options.faults - (1 if options.naive is not None else 0)  # a naive run's first fault is its crash point
    return drawn > 0 and any(k in STORE_KINDS for k in options.kinds)


def wants_network(options: ChaosOptions) -> bool:
    """True when the run can inject a network fault on the broker's or PostgreSQL's link (they then get a TCP
    fault proxy each; the store's link has one whenever the tables are on the store)."""
    if options.plan is not None:
        return any(f.kind in NETWORK_KINDS for f in options.plan.faults)
    drawn = options.faults - (1 if options.naive is not None else 0)
    return drawn > 0 and any(k in NETWORK_KINDS for k in options.kinds)


def links_of(setup: ChaosSetup) -> tuple[str, ...]:
    """The links of the run that have a fault proxy."""
    return (*setup.links, *(("store",) if setup.proxy is not None else ()))


def tear_down(setup: ChaosSetup) -> None:
    from sparkonce_local.services.broker import stop_broker
    from sparkonce_local.services.postgres import stop_postgres
    from sparkonce_local.services.storage import stop_storage

    if setup.proxy is not None:
        setup.proxy.close()
    for link in setup.links.values():
        link.close()
    if setup.postgres is not None:
        with contextlib.suppress(SparkonceError):
            stop_postgres(setup.postgres)
    if setup.broker_dir is not None:
        stop_broker(state_dir=setup.broker_dir)
    if setup.storage_dir is not None:
        stop_storage(state_dir=setup.storage_dir, timeout=1.0)  # a throwaway store: no need for its slow SIGTERM


def restart_service(setup: ChaosSetup, fault: Fault) -> tuple[bool, str]:
    """SIGKILL the fault's service, keep it down ``fault.downtime`` seconds, start it on the same ports and data."""
    from sparkonce_local.services.broker import broker_status, kill_broker, restart_broker
    from sparkonce_local.services.postgres import kill_postgres, restart_postgres
    from sparkonce_local.services.storage import kill_storage, restart_storage

    if fault.kind == "postgres_restart":
        if setup.postgres is None:
            return False, "missed: no PostgreSQL in this setup"
        killed = kill_postgres(setup.postgres)
        time.sleep(fault.downtime)  # the planned downtime of the database
        restart_postgres(setup.postgres)
        if killed is None:
            return False, "missed: PostgreSQL was not running (started again)"
        return True, f"PostgreSQL {killed} killed, down {fault.downtime:.2f}s, restarted"
    if setup.broker_dir is None:
        return False, f"missed: {fault.kind} needs the harness's own broker and store (quickstart setup)"
    if fault.kind == "broker_restart":
        killed = kill_broker(state_dir=setup.broker_dir)
        time.sleep(fault.downtime)  # the planned downtime of the broker
        restart_broker(state_dir=setup.broker_dir)
        if killed is None:
            return False, "missed: the broker was not running (started again)"
        return True, f"broker {killed} killed, down {fault.downtime:.2f}s, restarted"
    if setup.storage_dir is None:
        return False, "missed: storage_restart needs the object store, which this run has not"
    killed = kill_storage(state_dir=setup.storage_dir)
    time.sleep(fault.downtime)  # the planned downtime of the object store
    restart_storage(state_dir=setup.storage_dir, crash=True)
    if killed is None:
        return False, "missed: the object store was not running (started again)"
    note = f"object store {killed} killed, down {fault.downtime:.2f}s, restarted"
    if not broker_status(state_dir=setup.broker_dir).running:
        # The broker keeps its log on local disk and never needs the store; but a broker that died meanwhile
        # must not end the run: it is restarted on its data, and the round says so.
        restart_broker(state_dir=setup.broker_dir)
        note += "; the broker had died with it and was restarted"
    return True, note


# -- reconciliation ------------------------------------------------------------------------------------------------


def reconcile_tables(setup: ChaosSetup, options: ChaosOptions) -> tuple[list[TableCheck], int]:
    """Every table's check, and the number of records in the topic."""
    config = setup.config
    storage = config.storage_options()  # the tables' store (none for local tables)
    topic = read_topic(setup.bootstrap, config.source.topic)
    # The quickstart setup produced the input itself: the topic must hold each acknowledged record once.
    if setup.deliveries is not None:  # soak mode: value by value, against the producer's delivery reports
        checks = [check_topic_values(topic, *setup.deliveries)]
    elif options.pipeline is None:
        checks = [check_topic(topic, sum(n for n, _ in setup.produced))]
    else:
        checks = []
    if options.naive == "file-sink-glob":
        folder = Path(setup.spec.file_sink_dir or "")
        return [
            *checks,
            check_file_sink(folder, topic, through_metadata=False),
            check_file_sink(folder, topic, through_metadata=True),
        ], len(topic)
    checks.append(check_raw(config.raw.table, topic, storage_options=storage))
    if config.bronze is not None:
        raw_rows = delta_rows(config.raw.table, ["partition", "offset"], storage_options=storage)
        raw_keys = {(int(r["partition"]), int(r["offset"])) for r in raw_rows}
        checks.append(check_bronze(config.bronze.table, config.bronze.quarantine, raw_keys, storage_options=storage))
        for stage in config.merges:
            order = (stage.order_by,) if isinstance(stage.order_by, str) else tuple(stage.order_by)
            input_table = config.input_table(stage)
            if stage.input_mode == "changes" and input_table is not None:
                checks.append(
                    check_changes_fed(
                        stage.table,
                        input_table,
                        name=stage.name,
                        keys=tuple(stage.keys),
                        order_by=order,
                        storage_options=storage,
                    )
                )
            elif stage.input == config.bronze.name:
                checks.append(
                    check_gold(
                        stage.table,
                        config.bronze.table,
                        keys=tuple(stage.keys),
                        order_by=order,
                        storage_options=storage,
                        name=stage.name,
                    )
                )
        if setup.postgres is not None and setup.spec.postgres_dsn is not None:
            checks.append(  # read directly, not through the link's fault proxy
                check_postgres(
                    setup.postgres.dsn, setup.spec.postgres_table, config.bronze.table, storage_options=storage
                )
            )
    return checks, len(topic)


def log_tail(work_dir: Path, rounds: list[RoundResult], lines: int = 25) -> str:
    """The end of the last driver run's log ("" when there was none or it cannot be read)."""
    if not rounds:
        return ""
    return file_tail(work_dir / "rounds" / f"{rounds[-1].index:04d}" / "driver.log", lines)


__all__ = [
    "MALFORMED_SHARE",
    "MARKER",
    "START_TIME",
    "ChaosSetup",
    "chaos_work_dir",
    "log_tail",
    "reconcile_tables",
    "restart_service",
    "set_up",
    "links_of",
    "tear_down",
    "wants_network",
    "wants_store",
]
