"""Entry point of the ``sparkonce`` command; each subcommand lives in its own module of this package.

A subcommand's module is imported only when that subcommand runs (or when ``--help`` lists them all), so
``sparkonce run`` does not pay for the doctor's, the chaos harness's or the services' imports.
"""

from __future__ import annotations

import importlib

import click

from sparkonce import __version__

# command name -> (module, attribute) of every subcommand; each module holds a few thin click commands.
_COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("sparkonce.cli.demo", "demo"),
    "rebuild-checkpoint": ("sparkonce.cli.recover", "rebuild_checkpoint"),
    "reset": ("sparkonce.cli.recover", "reset"),
    "broker": ("sparkonce.cli.broker", "broker"),
    "produce": ("sparkonce.cli.broker", "produce"),
    "storage": ("sparkonce.cli.storage", "storage"),
    "cluster": ("sparkonce.cli.cluster", "cluster"),
    "doctor": ("sparkonce.cli.doctor", "doctor"),
    "history": ("sparkonce.cli.doctor", "history"),
    "verify": ("sparkonce.cli.doctor", "verify"),
    "vacuum": ("sparkonce.cli.vacuum", "vacuum"),
    "run": ("sparkonce.cli.pipeline", "run"),
    "replay": ("sparkonce.cli.pipeline", "replay"),
    "check": ("sparkonce.cli.pipeline", "check"),
    "quickstart": ("sparkonce.cli.pipeline", "quickstart"),
    "chaos": ("sparkonce.cli.chaos", "chaos"),
    "optimize": ("sparkonce.cli.optimize", "optimize"),
}


class _LazyGroup(click.Group):
    """The top-level group: imports a subcommand's module when the subcommand is looked up. Runs on the driver."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        command = getattr(importlib.import_module(target[0]), target[1])
        assert isinstance(command, click.Command) and command.name == cmd_name, (target, command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparkonce")
def cli() -> None:
    """sparkonce: exactly-once streaming for PySpark and Delta Lake."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
