"""The Kafka data source ``sparkonce.kafka``: Spark's Kafka source as a Python data source on confluent-kafka.

Modules: :mod:`~sparkonce.kafka.options` (option parsing), :mod:`~sparkonce.kafka.offsets` (Spark's offset JSON),
:mod:`~sparkonce.kafka.planner` (driver-side discovery, end and timestamp offsets from the broker),
:mod:`~sparkonce.kafka.ranges` (batch ranges from offsets: start markers, rate limit, data-loss checks, splits),
:mod:`~sparkonce.kafka.reader` (executor-side range reads into Arrow) and :mod:`~sparkonce.kafka.source` (the
``DataSource`` and its batch and stream readers, registered by :func:`sparkonce.register`).

This package imports no Spark or Kafka client at import time; ``KafkaDataSource`` lives in
:mod:`sparkonce.kafka.source`.
"""

from __future__ import annotations

from sparkonce.kafka.offsets import EARLIEST, LATEST, OffsetRange, PartitionOffsets, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import broker_offsets

__all__ = [
    "EARLIEST",
    "LATEST",
    "KafkaOptions",
    "OffsetRange",
    "PartitionOffsets",
    "TopicPartition",
    "broker_offsets",
]
