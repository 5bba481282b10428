"""The session-wide throwaway PostgreSQL server for integration tests.

Registered in ``tests/conftest.py`` through ``pytest_plugins``. The ``postgres`` fixture starts one server per test
session (``initdb`` into a temporary directory, a free loopback port) and stops it at the end; each test gets its
own tables through ``postgres.unique_name()``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkonce_local.services.postgres import PostgresServer, start_postgres, stop_postgres


@dataclass
class LocalPostgres:
    """A running test server: its DSN and small helpers to run SQL."""

    server: PostgresServer
    _names: Iterator[int] = field(default_factory=lambda: itertools.count())

    @property
    def dsn(self) -> str:
        return self.server.dsn

    def unique_name(self, prefix: str = "t") -> str:
        """A table name no other test uses."""
        return f"{prefix}_{next(self._names)}_{uuid.uuid4().hex[:6]}"

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, params)

    def fetch(self, sql: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    server = start_postgres()
    try:
        yield LocalPostgres(server)
    finally:
        stop_postgres(server)
