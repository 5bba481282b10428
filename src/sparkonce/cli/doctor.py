"""``sparkonce doctor``, ``history`` and ``verify``: thin commands over :mod:`sparkonce.ops`.

Exit codes: 0 healthy, 1 a finding at warning or above, 2 usage error (including unknown paths), 3 a table or
broker that cannot be reached. ``--json`` output follows the schema in ``docs/doctor.md``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import click
from rich.markup import escape
from rich.table import Table

from sparkonce.cli.common import (
    EXISTING_CHECKPOINT,
    EXIT_FINDINGS,
    EXIT_OK,
    TABLE,
    checkpoint_session,
    conf_option,
    console,
    handle_errors,
    json_option,
    print_json,
    print_table,
    storage_option,
    to_jsonable,
)
from sparkonce.kafka.offsets import OffsetRange, TopicPartition
from sparkonce.ops.doctor import DoctorReport, diagnose
from sparkonce.ops.findings import SEVERITY_RANK, Finding
from sparkonce.ops.history import table_history
from sparkonce.ops.verify import expected_from_watermarks, parse_range, verify_table
from sparkonce.storage import table_location

__all__ = ["doctor", "history", "verify"]

JSON_SCHEMA_VERSION = 1
_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red"}


def _exit_code(findings: tuple[Finding, ...]) -> int:
    worst = max((SEVERITY_RANK[f.severity] for f in findings), default=0)
    return EXIT_FINDINGS if worst >= SEVERITY_RANK["warning"] else EXIT_OK


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_findings(findings: tuple[Finding, ...]) -> None:
    if not findings:
        console.print("[green]No findings.[/green]")
        return
    table = Table(title="Findings", show_lines=False)
    table.add_column("severity")
    table.add_column("code")
    table.add_column("what")
    table.add_column("fix")
    for f in sorted(findings, key=lambda f: -SEVERITY_RANK[f.severity]):
        table.add_row(f"[{_STYLE[f.severity]}]{f.severity}[/]", f.code, f.message, f.fix)
    print_table(table)


def _print_doctor(report: DoctorReport) -> None:
    console.print(f"[bold]checkpoint[/bold] {report.checkpoint_dir}")
    console.print(f"query id:        {report.query_id or '[red]unknown (no readable metadata)[/red]'}")
    console.print(f"last planned:    {'-' if report.last_planned is None else report.last_planned}")
    console.print(f"last committed:  {'-' if report.last_committed is None else report.last_committed}")
    if report.unread_checkpoint_files:
        console.print(
            f"older files:     {report.unread_checkpoint_files} offsets/commits files before the timeline window "
            "were listed, not read (--checkpoint-scan full reads them)"
        )
    origin = " (recorded in the checkpoint)" if report.table_origin == "recorded" else ""
    for t in report.tables:
        txn = "-" if t.txn_version is None else str(t.txn_version)
        at = f" (table version {t.txn_table_version})" if t.txn_table_version is not None else ""
        damaged = f", [red]{t.damaged_files} damaged file(s)[/red]" if t.damaged_files else ""
        console.print(
            f"table:           {escape(t.table_path)} \\[{t.kind}] table version {t.table_version}, "
            f"txn_version for this query {txn}{at}{damaged}{origin}"
        )
    if not report.tables:
        console.print("table:           [yellow]none examined[/yellow] (name the sink with --table TABLE)")
    for r in report.recorded_tables:
        if r.role == "source":
            console.print(f"source:          {escape(r.location)} \\[{r.format}] (recorded in the checkpoint)")
    for k in report.kafka:
        console.print(
            f"kafka:           {k.topic}-{k.partition} next start {k.next_start_offset}, "
            f"broker earliest {k.earliest} latest {k.latest}"
        )
    console.print()
    console.print(f"[bold]Next start:[/bold] {report.next_start}")
    console.print()
    _print_findings(report.findings)


def _doctor_json(report: DoctorReport) -> dict[str, object]:
    data = to_jsonable(report)
    assert isinstance(data, dict)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "kind": "doctor",
        "severity": report.severity,
        "healthy": report.healthy,
        **data,
    }


@click.command()
@click.argument("checkpoint", type=EXISTING_CHECKPOINT)
@click.option(
    "--table",
    "tables",
    multiple=True,
    type=TABLE,
    help="A sink table (Delta or file sink; a path or s3://... URI). Default: the sinks the checkpoint records.",
)
@storage_option
@conf_option
@click.option("--kafka", "kafka", metavar="BOOTSTRAP", help="Check offsets against this Kafka broker.")
@json_option("Print the report as JSON (see docs/doctor.md).")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), help="Write an HTML report.")
@click.option(
    "--history-scan",
    type=click.Choice(["auto", "full", "window"]),
    default="auto",
    show_default=True,
    help="How much Delta history to read.",
)
@click.option(
    "--checkpoint-scan",
    type=click.Choice(["window", "full"]),
    default="window",
    show_default=True,
    help="Read the newest batches' offsets/commits files only (every file is listed), or all of them.",
)
@handle_errors
def doctor(
    checkpoint: str,
    tables: tuple[str, ...],
    storage_options: dict[str, str],
    conf: dict[str, str],
    kafka: str | None,
    as_json: bool,
    html: Path | None,
    history_scan: Literal["auto", "full", "window"],
    checkpoint_scan: Literal["window", "full"],
) -> None:
    """Explain what restarting the query of CHECKPOINT will do, and what is wrong with it."""
    checkpoint_session(checkpoint, conf)
    report = diagnose(
        checkpoint,
        tables=[table_location(t, storage_options=storage_options) for t in tables],
        storage_options=storage_options,
        kafka_bootstrap=kafka,
        history_scan=history_scan,
        checkpoint_scan=checkpoint_scan,
    )
    if html is not None:
        from sparkonce.cli.html_report import render_html

        html.write_text(render_html(report), encoding="utf-8")
    if as_json:
        print_json(_doctor_json(report))
    else:
        _print_doctor(report)
        if html is not None:
            console.print(f"HTML report written to {html}")
    sys.exit(_exit_code(report.findings))


@click.command()
@click.argument("table", type=TABLE)
@storage_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show only the N newest commits.")
@json_option("Print JSON (see docs/doctor.md).")
@handle_errors
def history(table: str, storage_options: dict[str, str], limit: int | None, as_json: bool) -> None:
    """Show TABLE's Delta commits like DESCRIBE HISTORY, read straight from _delta_log."""
    report = table_history(table_location(table, storage_options=storage_options), limit=limit)
    if as_json:
        data = to_jsonable(report)
        assert isinstance(data, dict)
        print_json({"schema_version": JSON_SCHEMA_VERSION, "kind": "history", **data})
        return
    out = Table(title=f"{table} (latest table version {report.latest_table_version})")
    for name in ("table version", "time (UTC)", "operation", "query id", "batch", "rows", "files", "txn"):
        out.add_column(name, justify="right" if name in ("table version", "batch", "rows", "files") else "left")
    for e in report.entries:
        out.add_row(
            str(e.table_version),
            _when(e.timestamp_ms),
            e.operation or "",
            e.query_id or "",
            "" if e.batch_id is None else str(e.batch_id),
            "" if e.added_rows is None else str(e.added_rows),
            f"+{e.num_added_files} -{e.num_removed_files}",
            ", ".join(f"{t.app_id}={t.txn_version}" for t in e.txns),
        )
    print_table(out)


@click.command()
@click.option("--table", "table", type=TABLE, help="The raw Delta table to check (path or URI).")
@click.option(
    "--checkpoint",
    "checkpoint",
    type=EXISTING_CHECKPOINT,
    help="Check the Delta sink this query's checkpoint records (instead of --table), and its recorded Kafka topics "
    "(instead of --topic).",
)
@storage_option
@click.option("--kafka", "kafka", metavar="BOOTSTRAP", help="Expect each partition's earliest..latest offsets.")
@click.option("--topic", "topics", multiple=True, help="Topic to check against --kafka (repeatable).")
@click.option("--range", "ranges", multiple=True, metavar="TOPIC:PARTITION:START-END", help="End exclusive.")
@json_option("Print JSON (see docs/doctor.md).")
@handle_errors
def verify(
    table: str | None,
    checkpoint: str | None,
    storage_options: dict[str, str],
    kafka: str | None,
    topics: tuple[str, ...],
    ranges: tuple[str, ...],
    as_json: bool,
) -> None:
    """Reconcile a raw table's topic/partition/offset columns with Kafka or explicit offset ranges."""
    if (table is None) == (checkpoint is None):
        raise click.UsageError("give --table TABLE or --checkpoint CHECKPOINT (one of them)")
    if checkpoint is not None:
        table, recorded_topics = _recorded_target(checkpoint)
        if kafka:
            topics = topics or recorded_topics
    assert table is not None
    if kafka and not topics:
        raise click.UsageError("--kafka needs at least one --topic")
    if topics and not kafka:
        raise click.UsageError("--topic needs --kafka")
    if not kafka and not ranges:
        raise click.UsageError("give --kafka BOOTSTRAP --topic T, or one or more --range")
    expected: list[OffsetRange] = [parse_range(r) for r in ranges]
    if kafka:
        from sparkonce.kafka.watermarks import fetch_watermarks, list_partitions

        partitions = [TopicPartition(t, p) for t in topics for p in list_partitions(kafka, t)]
        expected.extend(expected_from_watermarks(fetch_watermarks(kafka, partitions)))
    report = verify_table(table_location(table, storage_options=storage_options), expected=expected)
    if as_json:
        data = to_jsonable(report)
        assert isinstance(data, dict)
        print_json({"schema_version": JSON_SCHEMA_VERSION, "kind": "verify", "severity": report.severity, **data})
    else:
        out = Table(title=f"{table} at table version {report.table_version}: {report.rows_scanned} rows")
        for name in ("topic", "partition", "expected", "covered", "rows", "duplicated", "missing", "beyond"):
            out.add_column(name, justify="left" if name == "topic" else "right")
        for p in report.partitions:
            exp = "" if p.expected_start is None else f"[{p.expected_start}, {p.expected_end})"
            cov = "" if p.min_offset is None else f"{p.min_offset}..{p.max_offset}"
            out.add_row(
                p.topic,
                str(p.partition),
                exp,
                cov,
                str(p.rows),
                _count(p.duplicated_offsets),
                _count(p.missing_offsets),
                _count(p.unexpected_offsets),
            )
        print_table(out)
        for p in report.partitions:
            for d in p.duplicates[:5]:
                console.print(
                    f"  {p.topic}-{p.partition} offset {d.offset} x{d.count}: table versions "
                    f"{list(d.table_versions)}, files {list(d.files)}"
                )
        _print_findings(report.findings)
    sys.exit(_exit_code(report.findings))


def _count(n: int) -> str:
    return "[green]0[/green]" if n == 0 else f"[bold red]{n}[/bold red]"


def _recorded_target(checkpoint: str) -> tuple[str, tuple[str, ...]]:
    """The one Delta sink ``checkpoint`` records, and the topics its Kafka sources subscribe to."""
    from sparkonce.checkpoint.tables import read_recorded_tables

    recorded, _ = read_recorded_tables(checkpoint)
    sinks = [t.location for t in recorded if t.role == "sink" and t.is_delta]
    if len(sinks) != 1:
        raise click.UsageError(
            f"{checkpoint} records {len(sinks)} Delta sink table(s) ({', '.join(sinks) or 'none'}): "
            "name the table with --table"
        )
    topics = tuple(
        topic.strip()
        for t in recorded
        if t.role == "source" and "subscribe" in t.options
        for topic in t.options["subscribe"].split(",")
        if topic.strip()
    )
    return sinks[0], topics
