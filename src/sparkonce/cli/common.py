"""Shared CLI plumbing: exit codes, the error handler, the console and ``--json`` output."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from sparkonce.errors import (
    BrokerError,
    CheckpointError,
    OptionError,
    PipelineConfigError,
    SparkonceError,
    TableNotFoundError,
)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


def exit_code_for(error: SparkonceError) -> int:
    """Map an error to the CLI's exit code: 2 usage, 3 something unreachable, 1 otherwise."""
    if isinstance(error, OptionError | PipelineConfigError):
        return EXIT_USAGE
    if isinstance(error, BrokerError | TableNotFoundError | CheckpointError):
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
