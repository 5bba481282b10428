"""Delta tables by name: sparkonce's catalog, kept in Spark's warehouse directory and shared by every session.

Spark's own catalog cannot hold a Delta table served by a Python data source: it records such a table but hands
its reads and writes no location (they reach the source without a ``path``). sparkonce therefore keeps its own
entries, one small JSON file per table under ``<spark.sql.warehouse.dir>/_sparkonce_catalog/<database>/``, and
resolves names itself wherever it takes one (``spark.sql`` statements once :func:`sparkonce.register` ran). A
*managed* table lives at Spark's default place, ``<warehouse>/<table>`` in the ``default`` database and
``<warehouse>/<database>.db/<table>`` in others; an *external* one wherever its ``LOCATION`` says. Names are
case-insensitive, as in Spark's catalog.

Runs on the driver.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from sparkonce.errors import SqlError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CATALOG_DIR = "_sparkonce_catalog"
WAREHOUSE_CONF = "spark.sparkonce.warehouse.dir"
"""A session setting that puts sparkonce's catalog and managed tables elsewhere than ``spark.sql.warehouse.dir``
(which Spark fixes when the session starts; this one can change at any time)."""
DEFAULT_DATABASE = "default"
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class CatalogTable:
    """A Delta table registered by name."""

    database: str
    name: str
    location: str
    """The table root: a local path or an object-store URI."""
    managed: bool
    """True when sparkonce chose the location (``DROP TABLE`` then deletes the table's files)."""

    @property
    def qualified_name(self) -> str:
        """``spark_catalog.<database>.<name>``, as Delta's ``DESCRIBE DETAIL`` names a table."""
        return f"spark_catalog.{self.database}.{self.name}"


def table_key(spark: SparkSession | None, parts: Sequence[str]) -> tuple[str, str] | None:
    """``(database, table)`` of a name's parts (``t``, ``db.t``, ``spark_catalog.db.t``; the session's current
    database when none is named, ``default`` without a session), or None for a name sparkonce's catalog cannot hold
    (another catalog, more parts)."""
    names = [p.lower() for p in parts]
    if len(names) == 3 and names[0] == "spark_catalog":
        names = names[1:]
    if len(names) == 1:
        current = spark.catalog.currentDatabase() if spark is not None else DEFAULT_DATABASE
        return current.lower(), names[0]
    if len(names) == 2:
        return names[0], names[1]
    return None


def find_table(spark: SparkSession, parts: Sequence[str]) -> CatalogTable | None:
    """The table sparkonce's catalog holds under the name ``parts``, or None."""
    key = table_key(spark, parts)
    return DeltaCatalog.of(spark).get(*key) if key is not None else None


def serves_catalog(spark: object) -> bool:
    """True when ``spark.sql`` is sparkonce's (:func:`sparkonce.register` without Delta's JVM connector): the
    session's Delta tables by name are then sparkonce's catalog's."""
    return getattr(getattr(spark, "sql", None), "serves_delta_catalog", False) is True


WAREHOUSE_ENV = "SPARKONCE_WAREHOUSE"
"""Where processes without a Spark session (the CLI) find the warehouse; default ``spark-warehouse`` in the working
directory, Spark's own default for ``spark.sql.warehouse.dir``."""


def named_key(name: str) -> tuple[str, str] | None:
    """``(database, table)`` of a name given as text without a session (``t``, ``db.t``, ``spark_catalog.db.t``;
    database ``default`` when none is named), or None when it is not a plain name sparkonce's catalog can hold."""
    key = table_key(None, name.strip().split("."))
    return key if key is not None and all(_NAME.match(p) for p in key) else None


def find_named_table(name: str, *, warehouse: str | None = None) -> CatalogTable | None:
    """The table named ``name`` (:func:`named_key`) in the catalog of ``warehouse`` (default:
    ``$SPARKONCE_WAREHOUSE``, else ``./spark-warehouse``), for processes without a Spark session; None when the
    name is not there or is not a plain name."""
    key = named_key(name)
    if key is None:
        return None
    root = warehouse or os.environ.get(WAREHOUSE_ENV) or "spark-warehouse"
    return DeltaCatalog(root).get(*key)


class DeltaCatalog:
    """The catalog in one warehouse directory (a local directory: an object-store warehouse is refused)."""

    def __init__(self, warehouse: str) -> None:
        self.warehouse = _local_path(warehouse)
        self.root = os.path.join(self.warehouse, CATALOG_DIR)

    @classmethod
    def of(cls, spark: SparkSession) -> DeltaCatalog:
        """The catalog of ``spark``'s warehouse directory (``spark.sparkonce.warehouse.dir``, else
        ``spark.sql.warehouse.dir``)."""
        warehouse = spark.conf.get(WAREHOUSE_CONF, None) or spark.conf.get("spark.sql.warehouse.dir")
        return cls(str(warehouse))

    def get(self, database: str, name: str) -> CatalogTable | None:
        """The table ``database.name``, or None."""
        path = self._entry_path(database, name)
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise SqlError(f"catalog entry {path} of table {database}.{name} is unreadable: {err}") from err
        return CatalogTable(database.lower(), name.lower(), str(data["location"]), bool(data["managed"]))

    def managed_location(self, database: str, name: str) -> str:
        """Where a managed table ``database.name`` lives (Spark's default place)."""
        folder = self.warehouse if database.lower() == DEFAULT_DATABASE else f"{self.warehouse}/{database.lower()}.db"
        return os.path.join(folder, name.lower())

    def add(self, database: str, name: str, location: str, *, managed: bool) -> CatalogTable:
        """Register ``database.name`` at ``location``.

        Raises:
            SqlError: the name is taken (``TABLE_OR_VIEW_ALREADY_EXISTS``) or not a plain identifier.
        """
        path = self._entry_path(database, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = json.dumps({"location": location, "managed": managed}).encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise SqlError(
                f"[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view `{database}`.`{name}` because it "
                "already exists."
            ) from None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return CatalogTable(database.lower(), name.lower(), location, managed)

    def remove(self, table: CatalogTable) -> None:
        """Forget ``table`` (its files stay; see :func:`sparkonce.sql` ``DROP TABLE`` for managed tables)."""
        os.remove(self._entry_path(table.database, table.name))

    def tables(self, database: str) -> list[CatalogTable]:
        """Every table of ``database``, by name."""
        folder = os.path.join(self.root, database.lower())
        names = (
            sorted(f[: -len(".json")] for f in os.listdir(folder) if f.endswith(".json"))
            if os.path.isdir(folder)
            else []
        )
        return [t for t in (self.get(database, n) for n in names) if t is not None]

    def _entry_path(self, database: str, name: str) -> str:
        for part, what in ((database, "database"), (name, "table")):
            if not _NAME.match(part):
                raise SqlError(f"{what} name {part!r}: sparkonce's catalog takes letters, digits and _ only")
        return os.path.join(self.root, database.lower(), f"{name.lower()}.json")


def _local_path(warehouse: str) -> str:
    if "://" not in warehouse and not warehouse.startswith("file:"):
        return os.path.abspath(warehouse)
    parts = urlsplit(warehouse)
    if parts.scheme != "file":
        raise SqlError(
            f"spark.sql.warehouse.dir = {warehouse}: sparkonce keeps its catalog of Delta tables in a local "
            "warehouse directory; name tables by path (delta.`s3://...`) or use a local warehouse"
        )
    return unquote(parts.path)


__all__ = [
    "CATALOG_DIR",
    "WAREHOUSE_CONF",
    "WAREHOUSE_ENV",
    "CatalogTable",
    "DeltaCatalog",
    "find_named_table",
    "find_table",
    "named_key",
    "serves_catalog",
    "table_key",
]
