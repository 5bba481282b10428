"""``sparkonce run``, ``sparkonce replay``, ``sparkonce check`` and ``sparkonce status``: thin wrappers over
sparkonce.pipeline."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from sparkonce.cli.common import (
    EXIT_FINDINGS,
    console,
    err_console,
    handle_errors,
    json_option,
    print_json,
    print_table,
    to_jsonable,
)


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path))
@click.option("--stage", "stages", multiple=True, help="Run only this stage (repeatable). Default: all.")
@click.option(
    "--master", default=None, help="Spark master URL (default: local[2]); spark://HOST:PORT: see docs/cluster.md."
)
@click.option("--plain", is_flag=True, help="One line per batch instead of the live table (logs, CI).")
@json_option("Print the final progress as JSON.")
@click.option(
    "--metrics-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write Prometheus metrics (text format 0.0.4) to this file at every refresh, atomically (for "
    "node_exporter's textfile collector: name it *.prom).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics while the pipeline runs.",
)
@handle_errors
def run(
    pipeline: Path,
    stages: tuple[str, ...],
    master: str | None,
    plain: bool,
    as_json: bool,
    metrics_file: Path | None,
    metrics_port: int | None,
) -> None:
    """Run the PIPELINE's stages as streaming queries; Ctrl-C or SIGTERM stops them after the current batch."""
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.run import select_stages

    config = load_pipeline(pipeline)
    select_stages(config, stages)
    if metrics_file is not None and not metrics_file.resolve().parent.is_dir():
        raise click.BadParameter(
            f"directory {metrics_file.resolve().parent} does not exist", param_hint="--metrics-file"
        )
    exporter = _MetricsExporter(config.name, metrics_file, metrics_port)
    try:
        _run(config, stages, master, plain, as_json, exporter)
    finally:
        exporter.close()


class _MetricsExporter:
    """Publishes each progress snapshot as Prometheus metrics: to a file and/or an HTTP endpoint (CLI process)."""

    def __init__(self, pipeline: str, path: Path | None, port: int | None) -> None:
        from sparkonce.pipeline.metrics import MetricsServer, PipelineMetrics

        self.pipeline = pipeline
        self.path = path
        self.metrics: PipelineMetrics | None = None
        self.server: MetricsServer | None = None
        self.failed = False
        if path is None and port is None:
            return
        self.metrics = PipelineMetrics()
        if port is not None:
            try:
                self.server = MetricsServer(self.metrics.registry, port)
            except OSError as err:
                raise click.BadParameter(
                    f"cannot listen on 127.0.0.1:{port}: {err}", param_hint="--metrics-port"
                ) from err

    def publish(self, progress: tuple[Any, ...]) -> None:
        if self.metrics is None:
            return
        from sparkonce.pipeline.metrics import pipeline_families

        self.metrics.update(pipeline_families(self.pipeline, progress))  # the server serves it from now on
        if self.path is not None:
            try:
                self.metrics.write_file(self.path)
            except OSError as err:  # metrics must not stop the pipeline: say so once, keep running
                if not self.failed:
                    err_console.print(f"[yellow]warning:[/yellow] cannot write --metrics-file {self.path}: {err}")
                self.failed = True

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def _run(
    config: Any, stages: tuple[str, ...], master: str | None, plain: bool, as_json: bool, exporter: _MetricsExporter
) -> None:
    from sparkonce.pipeline.run import run_pipeline

    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        console.print(f"[yellow]{signal.Signals(signum).name}: stopping after the current batch ...[/yellow]")

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    if plain or as_json or not console.is_terminal:
        printed: dict[str, int | None] = {}

        def on_progress(progress: tuple[Any, ...]) -> None:
            exporter.publish(progress)
            if as_json:
                return
            for p in progress:
                if p.batch_id is not None and printed.get(p.stage) != p.batch_id:
                    printed[p.stage] = p.batch_id
                    click.echo(_line(p), err=False)

        result = run_pipeline(config, stages=stages or None, master=master, stop=stop, on_progress=on_progress)
    else:
        from rich.live import Live

        def show(progress: tuple[Any, ...]) -> None:
            exporter.publish(progress)
            live.update(_table(progress))

        with Live(_table(()), console=console, refresh_per_second=4) as live:
            result = run_pipeline(config, stages=stages or None, master=master, stop=stop, on_progress=show)
    if as_json:
        print_json(result)
    else:
        state = "stopped" if result.stopped else "finished"
        console.print(f"{config.name}: {state} after {result.seconds:.0f} s")


def _line(p: Any) -> str:
    lag = _lag_text(p)
    return (
        f"{p.stage}: batch {p.batch_id}, {p.batch_rows} rows, {p.rows_per_second:.0f} rows/s, "
        f"batch ms p50/p95 {_durations_text(p)}, {lag}"
    )


def _durations_text(p: Any) -> str:
    if p.batch_ms_p50 is None:
        return "-"
    return f"{p.batch_ms_p50:.0f}/{p.batch_ms_p95:.0f}"


def _lag_text(p: Any) -> str:
    if p.partition_lag:
        return "lag " + ", ".join(f"{x.partition}:{x.lag if x.lag is not None else '?'}" for x in p.partition_lag)
    if p.versions_behind is not None:
        size = "" if p.bytes_behind is None else f", {_bytes_text(p.bytes_behind)}"
        return f"{p.versions_behind} input table version(s){size} behind"
    return ""


def _bytes_text(size: int) -> str:
    """``size`` bytes in B, KiB, MiB, GiB or TiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _table(progress: tuple[Any, ...]) -> Any:
    from rich.table import Table

    table = Table(title="sparkonce run", expand=False)
    for column in ("stage", "state", "batch", "rows (last)", "rows/s", "rows (run)", "batch ms p50/p95", "lag"):
        table.add_column(column)
    for p in progress:
        table.add_row(
            p.stage,
            "running" if p.active else "done",
            "-" if p.batch_id is None else str(p.batch_id),
            str(p.batch_rows),
            f"{p.rows_per_second:.0f}",
            str(p.total_rows),
            _durations_text(p),
            _lag_text(p),
        )
    return table


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path))
@click.option("--stage", required=True, help="The stage to rebuild (any stage reading a table).")
@click.option("--as-of", "as_of", required=True, help="Input table version, or timestamp (UTC when naive).")
@click.option(
    "--master", default=None, help="Spark master URL (default: local[2]); spark://HOST:PORT: see docs/cluster.md."
)
@click.option("--yes", is_flag=True, help="Act; without it, only print the plan.")
@json_option("Print the plan/result as JSON.")
@handle_errors
def replay(pipeline: Path, stage: str, as_of: str, master: str | None, yes: bool, as_json: bool) -> None:
    """Rebuild STAGE's table from its input table as of a table version or time; replace it atomically."""
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.replay import plan_replay, replay_stage

    config = load_pipeline(pipeline)
    plan = plan_replay(config, stage, as_of)
    if not yes:
        if as_json:
            print_json(plan)
        else:
            console.print(
                f"Replay would rebuild {', '.join(plan.targets)} from {plan.input_table} at table_version "
                f"{plan.input_table_version} (one Delta overwrite commit each, txnAppId {plan.app_id}),\n"
                f"retire checkpoint {plan.checkpoint_dir} -> {plan.retired_checkpoint_dir}, and start the next run "
                f"at input table_version {plan.input_table_version + 1}. Stop the pipeline first. "
                "Re-run with --yes to act."
            )
            if plan.downstream:
                console.print(f"Then replay the stages downstream of it, in this order: {', '.join(plan.downstream)}.")
        return
    from sparkonce.spark import local_session

    spark = local_session(app_name=f"sparkonce-replay-{config.name}", master=master or "local[2]")
    result = replay_stage(spark, config, plan)
    if as_json:
        print_json(result)
    else:
        for table, rows in result.rows.items():
            console.print(f"{table}: {rows} rows at table_version {result.table_versions[table]}")
        console.print(
            f"stage {stage}: fresh checkpoint {plan.checkpoint_dir}; old one kept at {plan.retired_checkpoint_dir}"
        )
        if plan.downstream:
            console.print(f"Replay the stages downstream of it next, in this order: {', '.join(plan.downstream)}.")


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path))
@click.option("--stage", "stages", multiple=True, help="Check only this stage (repeatable). Default: all.")
@json_option("Print the report as JSON.")
@handle_errors
def check(pipeline: Path, stages: tuple[str, ...], as_json: bool) -> None:
    """Verify every committed batch of PIPELINE's stages is recorded exactly once in each Delta / PostgreSQL target."""
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.verify import verify_pipeline

    report = verify_pipeline(load_pipeline(pipeline), stages=stages or None)
    if as_json:
        print_json(report)
    else:
        for t in report.targets:
            status = "ok" if t.ok else "FINDING"
            extra = f", {t.row_difference:+d} rows vs the ledger" if t.row_difference else ""
            if t.state_differences is not None:
                extra += (
                    f", {t.state_differences} key(s) differ from the input at table_version {t.input_table_version}"
                )
            console.print(
                f"{status}: stage {t.stage} -> {t.target}: {t.committed_batches} committed batches, "
                f"missing {list(t.missing)}, recorded twice {list(t.duplicated)}{extra}"
            )
        for name in report.skipped:
            console.print(f"skipped: stage {name} (never started)")
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path))
@click.option("--stage", "stages", multiple=True, help="Only this stage (repeatable). Default: all.")
@json_option("Print the status as JSON (with a schema_version).")
@handle_errors
def status(pipeline: Path, stages: tuple[str, ...], as_json: bool) -> None:
    """Where PIPELINE's stages stand, running or stopped: last planned and committed batch, lag. Starts nothing.

    Exit code 0 when healthy, 1 when something is wrong (each finding is listed).
    """
    from sparkonce.pipeline.loader import load_pipeline
    from sparkonce.pipeline.status import STATUS_SCHEMA_VERSION, pipeline_status

    report = pipeline_status(load_pipeline(pipeline), stages=stages or None)
    if as_json:
        data = to_jsonable(report)
        for stage, shown in zip(report.stages, data["stages"]):
            shown["records_behind"] = stage.records_behind
            for lag, row in zip(stage.partition_lag, shown["partition_lag"]):
                row["lag"] = lag.lag
        print_json({"schema_version": STATUS_SCHEMA_VERSION, "kind": "status", "ok": report.ok, **data})
    else:
        from rich.table import Table

        state = "running" if report.running else "stopped"
        console.print(f"{report.name} ({report.pipeline}): {state}")
        table = Table(expand=False)
        for column in ("stage", "kind", "state", "planned", "committed", "last commit (UTC)", "lag", "written"):
            table.add_column(column)
        for s in report.stages:
            table.add_row(
                s.stage,
                s.kind,
                s.state if s.run_pid is None else f"{s.state} (pid {s.run_pid} on {s.run_host})",
                "-" if s.last_planned is None else str(s.last_planned),
                "-" if s.last_committed is None else str(s.last_committed),
                "-" if s.last_commit_at is None else s.last_commit_at.strftime("%Y-%m-%d %H:%M:%S"),
                _status_lag_text(s),
                _outputs_text(s),
            )
        print_table(table)
        for finding in report.findings:
            console.print(f"FINDING: {finding}")
        for s in report.stages:
            for finding in s.findings:
                console.print(f"FINDING: stage {s.stage}: {finding}")
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


def _outputs_text(s: Any) -> str:
    """Each output: its latest table version and the newest batch recorded there."""
    parts = []
    for o in s.outputs:
        where = [] if o.table_version is None else [f"table_version {o.table_version}"]
        if o.last_recorded_batch is not None:
            where.append(f"batch {o.last_recorded_batch}")
        parts.append(f"{o.target}" + (f" ({', '.join(where)})" if where else ""))
    return "; ".join(parts) or "-"


def _status_lag_text(s: Any) -> str:
    if s.partition_lag:
        parts = ", ".join(f"{x.partition}:{x.lag if x.lag is not None else '?'}" for x in s.partition_lag)
        total = s.records_behind
        return f"{total if total is not None else '?'} records behind ({parts})"
    if s.delta_lag is not None:
        return (
            f"{s.delta_lag.versions_behind} input table version(s), {_bytes_text(s.delta_lag.bytes_behind)} behind "
            f"(input at table_version {s.delta_lag.latest_table_version})"
        )
    return "-"
