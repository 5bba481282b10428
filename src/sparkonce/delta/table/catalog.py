"""Delta tables by name: sparkonce's catalog, kept in Spark's warehouse directory and shared by every session.

Spark's own catalog cannot hold a Delta table served by a Python data source: it records such a table but hands
its reads and writes no location (they reach the source without a ``path``). sparkonce therefore keeps its own
entries, one small JSON file per table under ``<spark.sql.warehouse.dir>/_sparkonce_catalog/<database>/`` (a local
directory or an object store), and
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

from sparkonce.errors import SqlError
from sparkonce.storage import table_location

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


def _name_taken(database: str, name: str) -> SqlError:
    return SqlError(
        f"[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view `{database}`.`{name}` because it already exists."
    )


class DeltaCatalog:
    """The catalog in one warehouse: a local directory or an object-store URI (``s3://lake/warehouse``, with the
    session's storage options, :func:`sparkonce.storage.table_location`)."""

    def __init__(self, warehouse: str) -> None:
        self.location = table_location(warehouse)
        self.warehouse = self.location.uri
        """The warehouse root: an absolute local path, or the object-store URI."""

    @classmethod
    def of(cls, spark: SparkSession) -> DeltaCatalog:
        """The catalog of ``spark``'s warehouse directory (``spark.sparkonce.warehouse.dir``, else
        ``spark.sql.warehouse.dir``)."""
        warehouse = spark.conf.get(WAREHOUSE_CONF, None) or spark.conf.get("spark.sql.warehouse.dir")
        return cls(str(warehouse))

    def get(self, database: str, name: str) -> CatalogTable | None:
        """The table ``database.name``, or None."""
        relative = self._entry(database, name)
        try:
            with self.location.filesystem().open_input_stream(self.location.fs_path(relative)) as handle:
                data = json.loads(handle.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            where = self.location.join(relative)
            raise SqlError(f"catalog entry {where} of table {database}.{name} is unreadable: {err}") from err
        return CatalogTable(database.lower(), name.lower(), str(data["location"]), bool(data["managed"]))

    def managed_location(self, database: str, name: str) -> str:
        """Where a managed table ``database.name`` lives (Spark's default place)."""
        folder = "" if database.lower() == DEFAULT_DATABASE else f"{database.lower()}.db/"
        return self.location.join(f"{folder}{name.lower()}")

    def add(self, database: str, name: str, location: str, *, managed: bool) -> CatalogTable:
        """Register ``database.name`` at ``location`` (an atomic create: of two sessions registering one name, one
        wins).

        Raises:
            SqlError: the name is taken (``TABLE_OR_VIEW_ALREADY_EXISTS``) or not a plain identifier.
            StorageError: the warehouse's store refused the write, or cannot create a file atomically.
        """
        relative = self._entry(database, name)
        self.location.check_commit_safety()
        data = json.dumps({"location": location, "managed": managed}).encode()
        if not self.location.put_if_absent(relative, data):
            raise _name_taken(database, name)
        return CatalogTable(database.lower(), name.lower(), location, managed)

    def remove(self, table: CatalogTable) -> None:
        """Forget ``table`` (its files stay; see :func:`sparkonce.sql` ``DROP TABLE`` for managed tables)."""
        self.location.filesystem().delete_file(self.location.fs_path(self._entry(table.database, table.name)))

    def rename(self, table: CatalogTable, database: str, name: str) -> CatalogTable:
        """``ALTER TABLE t RENAME TO database.name``: the table under its new name, the old name forgotten. A
        managed table moves to the new name's managed location, as Spark's catalog moves it; an external one stays
        where it is.

        Raises:
            SqlError: the new name is taken (``TABLE_OR_VIEW_ALREADY_EXISTS``), the new managed location holds
                files already (``LOCATION_ALREADY_EXISTS``), or a managed table lives on an object store (moving
                its files is not done by sparkonce); nothing changed.
            StorageError: the warehouse's store refused the write.
        """
        if self.get(database, name) is not None:
            raise _name_taken(database, name)
        if not table.managed:
            renamed = self.add(database, name, table.location, managed=False)
            self.remove(table)
            return renamed
        target = self.managed_location(database, name)
        source = table_location(table.location)
        if not source.is_local or not table_location(target).is_local:
            raise SqlError(
                f"ALTER TABLE {table.database}.{table.name} RENAME TO {database}.{name}: the managed table's files "
                f"at {table.location} would move to {target}; sparkonce moves files only on a local disk (nothing "
                "changed; register the table by LOCATION to rename it in place)"
            )
        if os.path.exists(target):
            raise SqlError(
                f"[LOCATION_ALREADY_EXISTS] Cannot name the managed table as `{database}`.`{name}`, as its "
                f"associated location '{target}' already exists. Please pick a different table name, or remove "
                "the existing location first."
            )
        renamed = self.add(database, name, target, managed=True)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source.local_path, target)
        except OSError as err:
            self.remove(renamed)
            raise SqlError(
                f"ALTER TABLE {table.database}.{table.name} RENAME TO {database}.{name}: cannot move "
                f"{table.location} to {target}: {err} (nothing changed)"
            ) from err
        self.remove(table)
        return renamed

    def relocate(self, table: CatalogTable, location: str) -> CatalogTable:
        """``ALTER TABLE t SET LOCATION 'location'``: the entry points at ``location`` from now on and is external
        (``DROP TABLE`` never deletes files the user pointed at; the old location's files stay).

        Raises:
            StorageError: the warehouse's store refused the write.
        """
        data = json.dumps({"location": location, "managed": False}).encode()
        self.location.put(self._entry(table.database, table.name), data)
        return CatalogTable(table.database, table.name, location, False)

    def tables(self, database: str) -> list[CatalogTable]:
        """Every table of ``database``, by name."""
        import pyarrow.fs as pafs

        folder = self.location.fs_path(f"{CATALOG_DIR}/{database.lower()}")
        infos = self.location.filesystem().get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        names = sorted(i.base_name[: -len(".json")] for i in infos if i.is_file and i.base_name.endswith(".json"))
        return [t for t in (self.get(database, n) for n in names) if t is not None]

    def databases(self) -> list[str]:
        """Every database that holds a table, by name."""
        import pyarrow.fs as pafs

        folder = self.location.fs_path(CATALOG_DIR)
        infos = self.location.filesystem().get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory and _NAME.match(i.base_name))

    def _entry(self, database: str, name: str) -> str:
        """The entry's path relative to the warehouse."""
        for part, what in ((database, "database"), (name, "table")):
            if not _NAME.match(part):
                raise SqlError(f"{what} name {part!r}: sparkonce's catalog takes letters, digits and _ only")
        return f"{CATALOG_DIR}/{database.lower()}/{name.lower()}.json"


__all__ = [
    "CATALOG_DIR",
    "DEFAULT_DATABASE",
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
