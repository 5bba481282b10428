"""``sparkonce demo``: placeholder until the Delta sink lands."""

from __future__ import annotations

import click


@click.command()
def demo() -> None:
    """Run the exactly-once demo."""
    raise click.ClickException("not implemented yet")
