"""Placeholder: the Kafka data source (issue 3) replaces this module."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource


class KafkaDataSource(DataSource):
    """Kafka source for PySpark (not implemented yet)."""

    @classmethod
    def name(cls) -> str:
        return "sparkonce.kafka"
