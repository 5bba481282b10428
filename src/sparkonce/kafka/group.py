"""Consumer-group offsets for lag tools: after each batch, its end offsets are committed to a Kafka consumer group.

Runs on the driver, in the Python worker Spark keeps for the stream (the source's ``commit(end)``, which Spark calls
after the checkpoint commit ``commits/N``).

Spark's Kafka source commits nothing to Kafka (apache/spark#24613), so ``kafka-consumer-groups.sh --describe``,
Burrow and the exporters cannot see a Spark stream. sparkonce commits each batch's end offsets (Kafka's meaning: the
next offset to read, exactly Spark's) to one consumer group:

* ``kafka.group.id`` when given (Spark's option: the group the query's consumers use);
* else ``<groupIdPrefix>-<fingerprint>``: the prefix (Spark's option, default ``spark-kafka-source``) and a hash
  of the bootstrap servers and the subscription, stable across restarts (Spark's own group ids change at every
  start, which a lag tool cannot follow). The group id is logged once and recorded with the source in the
  checkpoint (``_sparkonce_tables/``).

These offsets are **informational only**: the checkpoint stays the only truth, and no restart reads them (sparkonce's
readers are assigned their ranges, never subscribed, and never ask the group for a position). ``commitOffsetsToGroup``
= ``false`` switches it off. A commit waits for the broker's answer at most ``metadataTimeoutMs``; its failure (the
broker away, a group with live members that owns it) is logged as a WARNING and never fails the batch: the lag tools
see the next batch's commit instead.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.kafka.offsets import TopicPartition
from sparkonce.kafka.options import KafkaOptions

if TYPE_CHECKING:
    from confluent_kafka import Consumer

__all__ = ["GroupOffsetsCommitter", "group_id_for"]

log = logging.getLogger(__name__)
client_log = logging.getLogger("sparkonce.kafka.client")


def group_id_for(options: KafkaOptions) -> str:
    """The consumer group the source commits to: ``kafka.group.id``, or ``<groupIdPrefix>-<fingerprint>``."""
    given = options.client_config.get("group.id")
    if given:
        return given
    subscription = options.subscription
    fingerprint = hashlib.sha256(
        f"{options.bootstrap_servers}\n{subscription.kind}\n{subscription.raw}".encode()
    ).hexdigest()[:12]
    return f"{options.group_id_prefix}-{fingerprint}"


class GroupOffsetsCommitter:
    """Commits end offsets to the source's consumer group. Runs on the driver; never pickled (holds a client)."""

    def __init__(self, options: KafkaOptions) -> None:
        self.group_id = group_id_for(options)
        self._options = options
        self._consumer: Consumer | None = None
        self._sent = 0
        self._answers = 0

    def _client(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer

            config: dict[str, Any] = dict(self._options.client_config)
            config.update(
                {
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "on_commit": self._on_commit,
                    "logger": client_log,
                }
            )
            self._consumer = Consumer(config)
            log.info("committing each batch's end offsets to Kafka consumer group %s (for lag tools)", self.group_id)
        return self._consumer

    def _on_commit(self, err: object, partitions: list[Any]) -> None:
        self._answers += 1
        failed = [f"{p.topic}-{p.partition}: {p.error}" for p in partitions if p.error is not None]
        if err is not None or failed:
            log.warning(
                "committing offsets to consumer group %s failed (%s); lag tools show the previous offsets until the "
                "next batch's commit (the checkpoint is not affected)",
                self.group_id,
                err if err is not None else "; ".join(failed[:3]),
            )

    def commit(self, end: Mapping[TopicPartition, int]) -> None:
        """Commit ``end`` (topic-partition -> next offset to read) and wait for the broker's answer, at most
        ``metadataTimeoutMs`` (the run's last batch is committed before the query ends; a broker that does not answer
        costs that wait and a WARNING, never the batch)."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        offsets = [KafkaTopicPartition(tp.topic, tp.partition, offset) for tp, offset in end.items() if offset >= 0]
        if not offsets:
            return
        consumer = self._client()
        self._sent += 1
        consumer.commit(offsets=offsets, asynchronous=True)
        deadline = time.monotonic() + self._options.metadata_timeout_s
        while self._answers < self._sent and time.monotonic() < deadline:
            consumer.poll(0.005)  # serves the on_commit callback; the consumer is assigned nothing, so reads nothing
        if self._answers < self._sent:
            log.warning(
                "consumer group %s: the broker did not answer the offset commit within %d ms; lag tools may show "
                "older offsets (the checkpoint is not affected)",
                self.group_id,
                self._options.metadata_timeout_ms,
            )
            self._answers = self._sent  # a late answer is only logged

    def close(self) -> None:
        """Wait for the commits in flight (bounded by the client's timeouts) and close the client."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()
