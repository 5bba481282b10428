"""Entry point of the ``sparkonce`` command; each subcommand lives in its own module of this package.

A subcommand's module is imported only when that subcommand runs (or when ``--help`` lists them all), so
``sparkonce run`` does not pay for the doctor's or the chaos harness's imports.

The library's own commands are listed here. Other packages add commands through the ``sparkonce.commands``
entry-point group (``name = "module:attribute"``): the local tooling layer (:mod:`sparkonce_local`, installed
with ``pip install 'sparkonce[local]'``) adds quickstart, demo, chaos, broker, produce, storage and cluster that
way, so this package never imports it. A command whose extra is missing still shows in ``--help`` and fails with
the ``pip install`` line that adds it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import click

from sparkonce._version import __version__
from sparkonce.errors import MissingExtraError

ENTRY_POINT_GROUP = "sparkonce.commands"

# command name -> (module, attribute) of the library's own subcommands; each module holds a few thin click commands.
_COMMANDS: dict[str, tuple[str, str]] = {
    "rebuild-checkpoint": ("sparkonce.cli.recover", "rebuild_checkpoint"),
    "reset": ("sparkonce.cli.recover", "reset"),
    "doctor": ("sparkonce.cli.doctor", "doctor"),
    "history": ("sparkonce.cli.doctor", "history"),
    "verify": ("sparkonce.cli.doctor", "verify"),
    "vacuum": ("sparkonce.cli.vacuum", "vacuum"),
    "readers": ("sparkonce.cli.vacuum", "readers"),
    "run": ("sparkonce.cli.pipeline", "run"),
    "replay": ("sparkonce.cli.pipeline", "replay"),
    "check": ("sparkonce.cli.pipeline", "check"),
    "status": ("sparkonce.cli.pipeline", "status"),
    "optimize": ("sparkonce.cli.optimize", "optimize"),
    "jars": ("sparkonce.cli.jars", "jars"),
}


def _plugin_commands() -> dict[str, tuple[str, str]]:
    """command name -> (module, attribute) of the commands other installed packages declare."""
    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        module, _, attribute = ep.value.partition(":")
        if ep.name not in _COMMANDS:
            found[ep.name] = (module.strip(), attribute.strip())
    return found


def _missing_extra_command(name: str, err: MissingExtraError) -> click.Command:
    """A stand-in for a command whose extra is not installed: listed in ``--help``, fails with the install line."""

    def fail() -> None:
        raise click.ClickException(
            f"`sparkonce {name}` needs `pip install 'sparkonce[{err.extra}]'` (missing: {err.missing})"
        )

    return click.Command(name, callback=fail, help=f"(needs pip install 'sparkonce[{err.extra}]')")


class _LazyGroup(click.Group):
    """The top-level group: imports a subcommand's module when the subcommand is looked up. Runs on the driver."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({**_plugin_commands(), **_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name) or _plugin_commands().get(cmd_name)
        if target is None:
            return None
        try:
            command = getattr(importlib.import_module(target[0]), target[1])
        except MissingExtraError as err:
            return _missing_extra_command(cmd_name, err)
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
