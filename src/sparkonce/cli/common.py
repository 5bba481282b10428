"""Shared CLI plumbing: exit codes, the error handler, the console, tables and ``--json`` output.

When stdout is not a terminal (piped to ``grep``, redirected to a file, click's test runner) nothing is wrapped or
truncated: text lines keep their full length and tables print as plain aligned columns, one row per line, as
``git`` and ``kubectl`` do. On a terminal, tables are rich tables fitted to its width.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

from sparkonce.errors import (
    BrokerError,
    CheckpointError,
    ClusterError,
    JarsError,
    OptionError,
    PipelineConfigError,
    SparkonceError,
    StorageError,
    TableNotFoundError,
)
from sparkonce.storage import TableLocation, table_location


class TableParam(click.ParamType[str, Any]):
    """A Delta table argument: an existing local directory, an object-store URI, or the name of a table in
    sparkonce's catalog (``events``, ``db.events``; the warehouse is ``$SPARKONCE_WAREHOUSE``, else
    ``./spark-warehouse``, Spark's default) (CLI process).

    Converts to the table's location as text (commands make the location with ``table_location(text,
    storage_options=...)``); a bad URI, a missing local directory or an unknown name is a usage error naming it.
    """

    name = "table"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if "://" not in text and not text.startswith("file:") and not os.path.exists(text) and "/" not in text:
            from sparkonce.delta.table.catalog import WAREHOUSE_ENV, find_named_table

            try:
                entry = find_named_table(text)
            except SparkonceError as err:
                self.fail(str(err), param, ctx)
            if entry is None:
                warehouse = os.environ.get(WAREHOUSE_ENV) or "spark-warehouse"
                self.fail(
                    f"{text!r} is neither a directory nor a Delta table in sparkonce's catalog at {warehouse} "
                    f"(set {WAREHOUSE_ENV} to the warehouse directory)",
                    param,
                    ctx,
                )
            text = entry.location
        try:
            location = table_location(text)
        except StorageError as err:
            self.fail(str(err), param, ctx)
        if location.is_local and not os.path.isdir(location.uri):
            self.fail(f"directory {text!r} does not exist", param, ctx)
        return text


TABLE = TableParam()


class CheckpointParam(click.ParamType[str, Any]):
    """A checkpoint location argument, kept as text (CLI process): a local directory (which must exist when
    ``exists``), or a URI of any Hadoop file system (``hdfs://``, ``s3a://``, ``abfss://``, ``dbfs:``, ...), read
    through the local Spark session :func:`checkpoint_session` starts."""

    name = "checkpoint"

    def __init__(self, *, exists: bool) -> None:
        self.exists = exists

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from sparkonce.checkpoint.fs import is_local_checkpoint
        from sparkonce.storage import checkpoint_path

        text: str = os.fspath(value)
        try:
            if not is_local_checkpoint(text):
                return text
            local = checkpoint_path(text)
        except StorageError as err:
            self.fail(str(err), param, ctx)
        if self.exists and not os.path.isdir(local):
            self.fail(f"directory {text!r} does not exist", param, ctx)
        return text


CHECKPOINT = CheckpointParam(exists=False)
EXISTING_CHECKPOINT = CheckpointParam(exists=True)


def _pairs(problem: str) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], dict[str, str]]:
    """The click callback of a repeatable ``NAME=VALUE`` option: a dict; ``problem`` follows a malformed item."""

    def parse(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for item in values:
            name, equals, value = item.partition("=")
            if not equals or not name.strip():
                raise click.BadParameter(f"{item!r}{problem}", ctx=ctx, param=param)
            pairs[name.strip()] = value
        return pairs

    return parse


conf_option = click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_pairs(" is not KEY=VALUE"),
    help="A Spark setting for the local Spark session that reads a non-local checkpoint (hdfs://, s3a://, ...), "
    "e.g. spark.hadoop.fs.s3a.endpoint=...; repeat for several.",
)


def checkpoint_session(checkpoint: str, conf: dict[str, str]) -> None:
    """Start a local Spark session when ``checkpoint`` is not local: sparkonce reads it through Hadoop's file system
    of that session, which gets ``conf`` (``spark.hadoop.*`` settings, ``spark.jars.packages``); an ``s3a://`` one
    needs the S3A jars (``sparkonce jars fetch s3a``; a :class:`JarsError` naming it otherwise). CLI process."""
    from sparkonce.checkpoint.fs import checkpoint_scheme, is_local_checkpoint

    if is_local_checkpoint(checkpoint):
        return
    from sparkonce.spark import local_session

    s3a = True if checkpoint_scheme(checkpoint) == "s3a" else None
    local_session(app_name="sparkonce-cli", master="local[1]", shuffle_partitions=1, extra_conf=conf, s3a=s3a)


storage_option = click.option(
    "--storage-option",
    "storage_options",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_pairs(": give NAME=VALUE, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:8333"),
    help="A storage option of the tables on an object store (repeatable; delta-rs names, e.g. "
    "AWS_ENDPOINT_URL=http://127.0.0.1:8333); over the AWS_* environment. See docs/storage.md.",
)
"""The ``--storage-option NAME=VALUE`` option of every command taking a table (a ``dict[str, str]`` parameter)."""

F = TypeVar("F", bound=Callable[..., Any])


def json_option(help: str = "Print the result as JSON.") -> Callable[[F], F]:
    """The ``--json`` flag of every command that can print its result as JSON (an ``as_json: bool`` parameter)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

_UNWRAPPED_WIDTH = 1_000_000


class _PipeAwareConsole(Console):
    """A console that never wraps when its output is not a terminal (CLI process only).

    A ``COLUMNS`` in the environment (exported by some shells, CI runners and test runners) describes a terminal
    this output does not go to, so it is ignored when piped; only a width set on the console itself applies.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._width_set = kwargs.get("width") is not None

    @property
    def size(self) -> ConsoleDimensions:
        if not self._width_set and not self.is_terminal:
            return ConsoleDimensions(_UNWRAPPED_WIDTH, super().size.height)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size
        self._width_set = True


console: Console = _PipeAwareConsole(highlight=False)
err_console: Console = _PipeAwareConsole(stderr=True, highlight=False)


def print_table(table: Table) -> None:
    """Print ``table``: a rich table on a terminal, else plain columns with every value in full on one line."""
    if console.is_terminal:
        console.print(table)
        return
    header = [_plain(c.header) for c in table.columns]
    cells = [[_plain(cell) for cell in c.cells] for c in table.columns]
    rows = [header, *([col[i] for col in cells] for i in range(table.row_count))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = [c.justify == "right" for c in table.columns]
    if table.title:
        click.echo(_plain(table.title))
    for row in rows:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(row, widths, right)]
        click.echo("  ".join(parts).rstrip())


def _plain(value: object) -> str:
    """The text of a cell without rich markup or styles, newlines folded into spaces."""
    text = value.plain if isinstance(value, Text) else Text.from_markup(str(value)).plain
    return " ".join(text.splitlines())


def exit_code_for(error: SparkonceError) -> int:
    """Map an error to the CLI's exit code: 2 usage, 3 something unreachable, 1 otherwise."""
    if isinstance(error, OptionError | PipelineConfigError):
        return EXIT_USAGE
    if isinstance(error, BrokerError | StorageError | ClusterError | TableNotFoundError | CheckpointError | JarsError):
        return EXIT_UNREACHABLE
    return EXIT_FINDINGS


def handle_errors(func: F) -> F:
    """Turn a :class:`SparkonceError` into one red line on stderr and the matching exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SparkonceError as error:
            err_console.print(f"[red]error:[/red] {error}", markup=True, soft_wrap=True)
            sys.exit(exit_code_for(error))

    return wrapper  # type: ignore[return-value]


def to_jsonable(value: Any) -> Any:
    """Convert result dataclasses (and what they hold) into JSON-ready values."""
    if isinstance(value, TableLocation):  # its URI only: storage option values may be secrets
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return value


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))
