"""Entry point of the ``sparkonce`` command; each subcommand lives in its own module of this package."""

from __future__ import annotations

import importlib

import click

from sparkonce import __version__

# (module, attribute) of every subcommand; each module holds a few thin click commands.
_COMMANDS: list[tuple[str, str]] = [
    ("sparkonce.cli.demo", "demo"),
    ("sparkonce.cli.recover", "rebuild_checkpoint"),
    ("sparkonce.cli.recover", "reset"),
    ("sparkonce.cli.broker", "broker"),
    ("sparkonce.cli.broker", "produce"),
    ("sparkonce.cli.storage", "storage"),
    ("sparkonce.cli.cluster", "cluster"),
    ("sparkonce.cli.doctor", "doctor"),
    ("sparkonce.cli.doctor", "history"),
    ("sparkonce.cli.doctor", "verify"),
    ("sparkonce.cli.vacuum", "vacuum"),
    ("sparkonce.cli.pipeline", "run"),
    ("sparkonce.cli.pipeline", "replay"),
    ("sparkonce.cli.pipeline", "check"),
    ("sparkonce.cli.pipeline", "quickstart"),
    ("sparkonce.cli.chaos", "chaos"),
    ("sparkonce.cli.optimize", "optimize"),
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkonce")
def cli() -> None:
    """sparkonce: exactly-once streaming for PySpark and Delta Lake."""


for _module, _attr in _COMMANDS:
    cli.add_command(getattr(importlib.import_module(_module), _attr))


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
