"""Delta's SQL through ``spark.sql``: ``DESCRIBE HISTORY``, ``MERGE INTO``, ``delta.`path``` and Delta tables by
name, once :func:`sparkonce.register` has run (see :mod:`sparkonce.sql.runner` and docs/sql.md)."""

from sparkonce.sql.runner import DeltaSql, install, run_sql

__all__ = ["DeltaSql", "install", "run_sql"]
