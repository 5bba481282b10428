"""``sparkonce jars fetch|status|archive``: resolve the Maven jar sets (:mod:`sparkonce.jars`) and show where they
are; build the quick-start class archive (:mod:`sparkonce.class_archive`).

Exit codes: 0 ok, 3 Maven missing or failed (``fetch``), a set not resolved (``status``), the archive not built
(``archive``).
"""

from __future__ import annotations

import sys

import click

from sparkonce.cli.common import EXIT_UNREACHABLE, console, handle_errors, json_option, print_json
from sparkonce.jars import JAR_SETS, JarSet

__all__ = ["jars"]

_names = click.argument("names", nargs=-1, type=click.Choice(sorted(JAR_SETS)))


def _chosen(names: tuple[str, ...]) -> list[JarSet]:
    return [JAR_SETS[name] for name in names] if names else list(JAR_SETS.values())  # type: ignore[index]


@click.group()
def jars() -> None:
    """Maven jars sparkonce runs: Apache Kafka's broker (kafka) and the S3A file system for s3a:// checkpoints (s3a)."""


@jars.command("fetch")
@_names
@json_option()
@handle_errors
def fetch(names: tuple[str, ...], as_json: bool) -> None:
    """Resolve the jar sets NAMES (default: all) with Maven, unless they are resolved already."""
    fetched = {jar_set.name: str(jar_set.fetch()) for jar_set in _chosen(names)}
    if as_json:
        print_json(fetched)
        return
    for name, directory in fetched.items():
        console.print(f"{name}: {directory}")


@jars.command("status")
@_names
@json_option()
@handle_errors
def status(names: tuple[str, ...], as_json: bool) -> None:
    """Show where the jar sets NAMES (default: all) are; exit code 3 when one is not resolved."""
    found = {jar_set.name: jar_set.resolved() for jar_set in _chosen(names)}
    if as_json:
        print_json({name: str(directory) if directory else None for name, directory in found.items()})
    else:
        for jar_set in _chosen(names):
            directory = found[jar_set.name]
            where = (
                str(directory) if directory else f"[yellow]not fetched[/yellow] (`sparkonce jars fetch {jar_set.name}`)"
            )
            console.print(f"{jar_set.name}: {where}")
    if not all(found.values()):
        sys.exit(EXIT_UNREACHABLE)


@jars.command("archive")
@click.option("--force", is_flag=True, help="Build it again even when it exists.")
@json_option()
@handle_errors
def archive(force: bool, as_json: bool) -> None:
    """Build the class archive quick-start drivers map (SPARKONCE_JVM=quick-start: tests, crash-and-restart runs,
    the quickstart) for this Java and classpath, unless it exists. Needs a JDK (jcmd), 17 or later; takes ~30 s."""
    from sparkonce.class_archive import build_class_archive

    built = build_class_archive(force=force)
    if as_json:
        print_json({"path": str(built.path), "size_bytes": built.size_bytes, "built": built.built})
        return
    state = "built" if built.built else "already built"
    console.print(f"class archive: {built.path} ({built.size_bytes / 1e6:.0f} MB, {state})")
