"""Options of the PostgreSQL sink, parsed and checked once on the driver (no database access here)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast, get_args

from sparkonce.errors import OptionError
from sparkonce.extras import require

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_MAX_IDENTIFIER = 63
_STAGING_SUFFIX = "_sparkonce_staging"

CommitProtocol = Literal["staging", "two-phase"]
"""How a batch's rows reach the target: ``staging`` (executors COPY into an UNLOGGED staging table, ONE driver
database transaction moves them and writes the ledger row: works on any server, readers see the whole batch or
none of it) or ``two-phase`` (append only: each executor task COPYs straight into the target and PREPAREs its
database transaction; the driver commits the ledger row naming them, then COMMIT PREPAREs each: one pass over the
rows, needs the server's ``max_prepared_transactions`` >= the batch's tasks; readers can see a batch's tasks appear
one after another, milliseconds apart)."""


def appends_only_problem(protocol: str, keys: tuple[str, ...]) -> str | None:
    """Why ``protocol`` cannot serve a sink with upsert ``keys`` (None: it can). Shared with pipeline files."""
    if protocol == "two-phase" and keys:
        return "two-phase commits appends only: an upsert (keys) goes through the staging table"
    return None


def table_parts(option: str, value: object) -> tuple[str, ...]:
    """Split ``[schema.]table`` into its parts, refusing anything that is not a plain identifier.

    Raises:
        OptionError: naming ``option``.
    """
    if not isinstance(value, str) or not value.strip():
        raise OptionError(option, value, "must be a table name like 'readings' or 'analytics.readings'")
    parts = tuple(value.split("."))
    if len(parts) > 2 or not all(_NAME.match(p) and len(p) <= _MAX_IDENTIFIER for p in parts):
        raise OptionError(option, value, "must be [schema.]table of letters, digits and _ (at most 63 characters each)")
    return parts


@dataclass(frozen=True)
class PostgresSinkOptions:
    """Options of :class:`~sparkonce.sinks.postgres.PostgresSink`, checked once when built. Runs on the driver.

    Build it with keywords, or from a string map (a pipeline file, ``.option(...)`` style) with
    :meth:`from_mapping`. Every invalid value raises :class:`~sparkonce.errors.OptionError` naming the option.
    """

    dsn: str
    """libpq connection string or URI of the database."""
    table: str
    """Target table, ``table`` or ``schema.table``. Created from the batch's schema when missing and
    ``create_table`` is true."""
    keys: tuple[str, ...] = ()
    """Upsert keys: with keys, a row whose keys already exist replaces it (the target needs a unique index on
    exactly these columns, made as the primary key when sparkonce creates the table); without, rows are
    appended."""
    app_id: str | None = None
    """The ledger's application id. Give it, or ``checkpoint_dir``."""
    checkpoint_dir: str | None = None
    """The query's checkpoint location: the app id is then ``f"{query id}:{table}"`` (query id from its
    ``metadata`` file, stable across restarts on the same checkpoint)."""
    staging_table: str | None = None
    """UNLOGGED staging table; ``f"{table}_sparkonce_staging"`` when None. Created when missing."""
    ledger_table: str = "sparkonce_ledger"
    """Ledger of committed batches, primary key ``(app_id, batch_id)``. Created when missing."""
    create_table: bool = True
    connect_timeout: int = 10
    """Seconds to wait for a connection before the database counts as unreachable."""
    commit_protocol: CommitProtocol = "staging"
    """``staging`` or ``two-phase`` (append only); see :data:`CommitProtocol`."""

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str) or not self.dsn.strip():
            raise OptionError("dsn", self.dsn, "is required (a libpq connection string or postgresql:// URI)")
        require("postgres", "PostgresSink")
        try:
            from psycopg.conninfo import conninfo_to_dict

            conninfo_to_dict(self.dsn)
        except Exception as err:
            raise OptionError("dsn", redact(self.dsn), f"is not a valid connection string: {err}") from err
        table_parts("table", self.table)
        if self.staging_table is not None:
            table_parts("staging_table", self.staging_table)
            if self.staging_table == self.table:
                raise OptionError("staging_table", self.staging_table, "must differ from the target table")
        table_parts("ledger_table", self.ledger_table)
        if self.ledger_table in (self.table, self.staging_name):
            raise OptionError("ledger_table", self.ledger_table, "must differ from the target and staging tables")
        if self.staging_table is None and len(self.table.split(".")[-1]) + len(_STAGING_SUFFIX) > _MAX_IDENTIFIER:
            raise OptionError("staging_table", None, f"the default name for {self.table!r} is too long; give one")
        if not isinstance(self.keys, tuple):
            raise OptionError("keys", self.keys, "must be a tuple of column names")
        for key in self.keys:
            if not isinstance(key, str) or not key or key.startswith("_sparkonce_"):
                raise OptionError("keys", self.keys, f"{key!r} is not a usable column name")
        if len(set(self.keys)) != len(self.keys):
            raise OptionError("keys", self.keys, "repeats a column")
        if (self.app_id is None) == (self.checkpoint_dir is None):
            raise OptionError(
                "app_id", self.app_id, "give exactly one of app_id and checkpoint_dir (the query id is read from it)"
            )
        if self.app_id is not None and not self.app_id.strip():
            raise OptionError("app_id", self.app_id, "must not be empty")
        if not isinstance(self.connect_timeout, int) or self.connect_timeout < 1:
            raise OptionError("connect_timeout", self.connect_timeout, "must be a whole number of seconds >= 1")
        if self.commit_protocol not in get_args(CommitProtocol):
            protocols = list(get_args(CommitProtocol))
            raise OptionError("commit_protocol", self.commit_protocol, f"must be one of {protocols}")
        problem = appends_only_problem(self.commit_protocol, self.keys)
        if problem is not None:
            raise OptionError("commit_protocol", self.commit_protocol, problem)

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> PostgresSinkOptions:
        """Parse string options: ``dsn``, ``table``, ``keys`` (comma separated), ``appId``, ``checkpointLocation``,
        ``stagingTable``, ``ledgerTable``, ``createTable`` (true/false), ``connectTimeout`` (seconds),
        ``commitProtocol`` (``staging`` / ``two-phase``); keys are
        case-insensitive. Unknown keys are refused.
        """
        from sparkonce.options import get_bool, get_int, get_str, require_str

        known = {
            "dsn",
            "table",
            "keys",
            "appid",
            "checkpointlocation",
            "stagingtable",
            "ledgertable",
            "createtable",
            "connecttimeout",
            "commitprotocol",
        }
        unknown = sorted(k for k in options if k.lower() not in known)
        if unknown:
            raise OptionError(unknown[0], options[unknown[0]], f"is not a PostgreSQL sink option ({sorted(known)})")
        raw_keys = get_str(options, "keys")
        keys = tuple(k.strip() for k in raw_keys.split(",")) if raw_keys is not None else ()
        if any(not k for k in keys):
            raise OptionError("keys", raw_keys, "has an empty column name")
        timeout = get_int(options, "connectTimeout", 10, minimum=1)
        return cls(
            dsn=require_str(options, "dsn"),
            table=require_str(options, "table"),
            keys=keys,
            app_id=get_str(options, "appId"),
            checkpoint_dir=get_str(options, "checkpointLocation"),
            staging_table=get_str(options, "stagingTable"),
            ledger_table=get_str(options, "ledgerTable", "sparkonce_ledger") or "sparkonce_ledger",
            create_table=get_bool(options, "createTable", True),
            connect_timeout=timeout if timeout is not None else 10,
            commit_protocol=cast(CommitProtocol, get_str(options, "commitProtocol", "staging")),
        )

    @property
    def staging_name(self) -> str:
        return self.staging_table if self.staging_table is not None else f"{self.table}{_STAGING_SUFFIX}"

    @property
    def address(self) -> str:
        """``host:port`` of the database, for messages (never the password)."""
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.dsn)
        host = str(params.get("host") or params.get("hostaddr") or "localhost")
        return f"{host}:{params.get('port') or 5432}"


def redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (for messages)."""
    dsn = re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


__all__ = ["CommitProtocol", "PostgresSinkOptions", "appends_only_problem", "redact", "table_parts"]
