"""Planning of the Kafka source against the broker: partition discovery, earliest/latest and timestamp offsets.

Runs on the driver (the Python planner worker Spark keeps for a stream, or the worker
that plans a batch read); nothing here runs on executors. The batch ranges made from these offsets are planned
in :mod:`sparkonce.kafka.ranges` (no client). One module of ~560 lines because :class:`OffsetPlanner`'s parts
(ListOffsets, the confirming fetch, timestamp lookups and their answer checks) share one admin/consumer pair, its
timeouts and its error mapping.

**End offsets can be confirmed with a fetch** (``confirmLatestOffsets=true``; off by default: Kafka answers
ListOffsets right). Some Kafka-compatible brokers (tansu 0.6, the embedded broker before Apache Kafka's) answer
ListOffsets(latest) with the base offset of the last record batch + 1 instead of the log end offset, so a source
that trusts ListOffsets never sees the tail of a partition written in multi-record batches. With the option the
planner takes ListOffsets as a *candidate* end and confirms it with one fetch positioned at the candidate: the
Fetch response's high watermark is the true end. On a correct broker that fetch is empty and answers within
``fetch.wait.max.ms`` (100 ms; end-of-partition is reported as an event), one round trip per planning. Not 1 ms:
tansu with its log on an object store answered a fetch that had to read records within the wait time with an
empty response.

**Data loss** (``failOnDataLoss``): a start offset below the partition's earliest offset (retention, deleted
records) or above its end (topic recreated), a partition that disappeared, or a new partition that does not
start at 0. With ``failOnDataLoss=true`` planning raises :class:`~sparkonce.errors.SourceOffsetError` naming
topic, partition and the missing range, with Spark's ``KAFKA_DATA_LOSS`` class and wording; with ``false`` it logs a
warning and reads the partition from its earliest offset.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sparkonce.crash import crash_point
from sparkonce.errors import BrokerError, OptionError
from sparkonce.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from sparkonce.kafka.options import KafkaOptions, OffsetSpec
from sparkonce.kafka.ranges import BY_TIMESTAMP, report_data_loss, start_offset_reset

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)
client_log = logging.getLogger("sparkonce.kafka.client")


def driver_client_config(options: KafkaOptions, role: str) -> dict[str, Any]:
    """Client settings for a driver-side client: the user's ``kafka.*`` options plus the source's own."""
    config: dict[str, Any] = dict(options.client_config)
    config.setdefault("group.id", f"{options.group_id_prefix}-{uuid.uuid4()}-{role}")
    config["logger"] = client_log
    return config


def check_broker(options: KafkaOptions) -> dict[str, int]:
    """Check the brokers answer and ``assign`` names existing partitions; return topic -> partition count.

    Called when the source is created (``load()``), so bad input fails before any batch is planned.

    Raises:
        BrokerError: the brokers did not answer a metadata request within ``metadataTimeoutMs``.
        OptionError: a ``kafka.*`` client setting is invalid, or ``assign`` names a missing topic or
            partition.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient(driver_client_config(options, "check"))
    except KafkaException as err:
        raise _config_error(options, err) from err
    topics = _list_topics(admin, options)
    subscription = options.subscription
    if subscription.kind == "assign":
        for tp in subscription.assigned:
            if tp.topic not in topics:
                raise OptionError(
                    "assign",
                    subscription.raw,
                    f"topic {tp.topic!r} does not exist on {options.bootstrap_servers}",
                )
            if tp.partition >= topics[tp.topic]:
                raise OptionError(
                    "assign",
                    subscription.raw,
                    f"topic {tp.topic!r} has {topics[tp.topic]} partitions on {options.bootstrap_servers}; "
                    f"partition {tp.partition} does not exist",
                )
    return topics


def _config_error(options: KafkaOptions, err: Exception) -> OptionError:
    """Name the ``kafka.*`` option the client refused (by the client's message), or all of them."""
    message = err.args[0].str() if err.args and hasattr(err.args[0], "str") else str(err)
    user_keys = [k for k in options.client_config if k != "bootstrap.servers"]
    lowered = message.lower()
    bad = next((k for k in user_keys if k.lower() in lowered), None)
    if bad is None and "jaas" in lowered:
        bad = next((k for k in user_keys if k.lower() == "sasl.jaas.config"), None)
    if bad is None and len(user_keys) == 1:
        bad = user_keys[0]
    if bad is None:
        shown = ", ".join(f"kafka.{k}" for k in user_keys)
        return OptionError("kafka.*", shown, f"rejected by the client: {message}")
    return OptionError(f"kafka.{bad}", options.client_config[bad], f"rejected by the client: {message}")


def _list_topics(admin: AdminClient, options: KafkaOptions) -> dict[str, int]:
    from confluent_kafka import KafkaException

    try:
        metadata = admin.list_topics(timeout=options.metadata_timeout_s)
    except KafkaException as err:
        raise BrokerError(
            f"Kafka broker at {options.bootstrap_servers} is unreachable "
            f"(no answer within {options.metadata_timeout_ms} ms): {err.args[0].str()}"
        ) from err
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None and not name.startswith("__")
    }


class OffsetPlanner:
    """Asks the brokers for partitions and offsets; runs on the driver only.

    Holds one AdminClient, created on first use and closed by :meth:`close`, and opens a Consumer for each fetch
    (closed right after it, see :meth:`_close_consumer`). Never pickled.
    """

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._confirmed: dict[TopicPartition, tuple[str, int, int]] = {}
        """Per partition: (topic id, ListOffsets answer, confirmed end) of the last confirmation."""

    # -- clients ---------------------------------------------------------------------------------------------

    def _get_admin(self) -> AdminClient:
        if self._admin is None:
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import AdminClient

            try:
                self._admin = AdminClient(driver_client_config(self.options, "driver"))
            except KafkaException as err:
                raise _config_error(self.options, err) from err
        return self._admin

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer, KafkaException

            config = driver_client_config(self.options, "driver")
            config.update(
                {
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error",
                    # With 0 the embedded broker never answers; with 1 it never answers a fetch that must read
                    # records from its object store (an empty answer each time): see the module docstring.
                    "fetch.wait.max.ms": 100,
                    "fetch.max.bytes": 1_048_576,
                    "max.partition.fetch.bytes": 65_536,
                    "queued.max.messages.kbytes": 1024,
                }
            )
            try:
                self._consumer = Consumer(config)
            except KafkaException as err:
                raise _config_error(self.options, err) from err
        return self._consumer

    def _close_consumer(self) -> None:
        """Close the fetching consumer after each use instead of keeping it between plannings.

        librdkafka (confluent-kafka 2.16) crashes the whole process (SIGSEGV in ``rd_kafka_metadata_cache_find``)
        when a consumer still holds a topic that the embedded broker deletes: the Fetch answer names the topic by
        id only and the metadata refresh it triggers dereferences the missing name. A closed consumer holds
        nothing, so a topic deleted between two plannings cannot take the stream's planner worker down.
        """
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    def close(self) -> None:
        """Close the clients (idempotent)."""
        self._close_consumer()
        self._admin = None

    # -- discovery -------------------------------------------------------------------------------------------

    def topic_partition_counts(self) -> dict[str, int]:
        """Topic name -> partition count of every visible topic."""
        return _list_topics(self._get_admin(), self.options)

    def discover(self) -> list[TopicPartition]:
        """The topic-partitions the subscription reads right now, sorted.

        For ``assign``, partitions that no longer exist are left out (planning then reports them as lost).
        """
        counts = self.topic_partition_counts()
        subscription = self.options.subscription
        if subscription.kind == "assign":
            return [tp for tp in subscription.assigned if tp.partition < counts.get(tp.topic, 0)]
        return sorted(
            TopicPartition(topic, partition)
            for topic, count in counts.items()
            if subscription.matches(topic)
            for partition in range(count)
        )

    # -- offsets ---------------------------------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Earliest available offset of each partition (partitions the broker does not know are left out)."""
        return self._list_offsets(tps, "earliest")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """End offset (the next offset to be written) of each partition, confirmed by a fetch when enabled.

        A partition whose ListOffsets answer and topic id are those of its last confirmation keeps the confirmed
        end without a fetch: a new record batch moves the answer (on the embedded broker it is the last batch's
        base offset + 1), a recreated topic has a new id. So an idle stream's plannings send no fetch, and a topic
        deleted while the stream idles cannot meet a fetch in flight (see :meth:`_close_consumer`).
        """
        candidates = self._list_offsets(tps, "latest")
        if not self.options.confirm_latest_offsets or not candidates:
            return candidates
        topic_ids = self._topic_ids({tp.topic for tp in candidates})
        result: dict[TopicPartition, int] = {}
        unconfirmed: dict[TopicPartition, int] = {}
        for tp, candidate in candidates.items():
            known = self._confirmed.get(tp)
            topic_id = topic_ids.get(tp.topic)
            if known is not None and topic_id is not None and known[:2] == (topic_id, candidate):
                result[tp] = known[2]  # no record batch appended since the last confirmation, same topic
            else:
                unconfirmed[tp] = candidate
        if unconfirmed:
            confirmed = self._confirm_isolated(unconfirmed)
            if confirmed is None:
                result.update(unconfirmed)  # a lower end is safe: the next planning confirms the rest
                return result
            for tp, end in confirmed.items():
                topic_id = topic_ids.get(tp.topic)
                if topic_id is not None:
                    self._confirmed[tp] = (topic_id, unconfirmed[tp], end)
            result.update(confirmed)
        return result

    def _confirm_isolated(self, candidates: Mapping[TopicPartition, int]) -> dict[TopicPartition, int] | None:
        """:meth:`_confirm_with_fetch` in a forked child where the platform can fork; None when the child died.

        The fetch of a topic deleted at that moment crashes librdkafka (see :meth:`_close_consumer`); in a child the
        crash costs this planning its confirmation, not the planner worker. The admin client is dropped first (it
        is created again on next use): no librdkafka thread may live across the fork.
        """
        from sparkonce.kafka.isolated import call_forked, can_isolate

        if not can_isolate():
            return self._confirm_with_fetch(candidates)
        self._admin = None
        self._close_consumer()

        def confirm_in_child() -> dict[TopicPartition, int]:
            crash_point("kafka_planner_confirm")
            return self._confirm_with_fetch(candidates)

        outcome = call_forked(confirm_in_child, timeout_s=self.options.metadata_timeout_s + 30.0)
        if outcome.died is not None:
            shown = ", ".join(str(tp) for tp in sorted(candidates))
            log.warning(
                "the fetch confirming the end offsets of %s %s (a topic deleted meanwhile?); this batch ends at "
                "the ListOffsets answers, the next planning confirms them",
                shown,
                outcome.died,
            )
            return None
        return outcome.value

    def _topic_ids(self, topics: set[str]) -> dict[str, str]:
        """Topic name -> topic id (a recreated topic gets a new one); topics that failed to answer are left out."""
        from confluent_kafka import KafkaException, TopicCollection

        futures = self._get_admin().describe_topics(
            TopicCollection(sorted(topics)), request_timeout=self.options.metadata_timeout_s
        )
        ids: dict[str, str] = {}
        for name, future in futures.items():
            try:
                description = future.result(timeout=self.options.metadata_timeout_s + 1.0)
            except KafkaException:
                continue  # deleted meanwhile: no reuse, the fetch (or planning) finds out
            ids[name] = str(description.topic_id)
        return ids

    def _list_offsets(self, tps: Iterable[TopicPartition], which: str) -> dict[TopicPartition, int]:
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec  # type: ignore[attr-defined]

        wanted = sorted(set(tps))
        if not wanted:
            return {}
        spec = KafkaOffsetSpec.earliest() if which == "earliest" else KafkaOffsetSpec.latest()  # type: ignore[no-untyped-call]
        isolation = (
            IsolationLevel.READ_COMMITTED
            if str(self.options.client_config.get("isolation.level", "")).lower() == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        request = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in wanted}
        futures = self._get_admin().list_offsets(
            request, isolation_level=isolation, request_timeout=self.options.metadata_timeout_s
        )
        result: dict[TopicPartition, int] = {}
        for ktp, future in futures.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            try:
                info = future.result(timeout=self.options.metadata_timeout_s + 1.0)
            except KafkaException as err:
                error = err.args[0]
                if error.code() in _unknown_partition_codes():
                    continue  # deleted meanwhile: planning reports it
                raise BrokerError(
                    f"cannot list {which} offset of {tp} on {self.options.bootstrap_servers}: {error.str()}"
                ) from err
            if int(info.offset) < 0:
                # Seen from tansu right after a restart (-1001, librdkafka's "no offset"): planning a batch on it
                # would write offsets/N with an end no task can read, and every restart would replay it and fail.
                raise BrokerError(
                    f"broker {self.options.bootstrap_servers} answered ListOffsets({which}) of {tp} with "
                    f"{int(info.offset)}, not an offset: not planning on it"
                )
            result[tp] = int(info.offset)
        return result

    def _confirm_with_fetch(self, candidates: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Position a consumer at each candidate end; the fetch response's high watermark is the true end."""
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        consumer = self._get_consumer()
        confirmed = dict(candidates)
        pending = {tp for tp, offset in candidates.items() if offset >= 0}
        if not pending:
            return confirmed
        consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, candidates[tp]) for tp in sorted(pending)])
        deadline = time.monotonic() + self.options.metadata_timeout_s
        try:
            while pending:
                if time.monotonic() > deadline:
                    # A topic deleted under the fetch is never answered: its candidate stands (the next planning
                    # finds the topic gone); only partitions that still exist fail the planning.
                    gone = self._gone(consumer, pending)
                    if gone:
                        log.warning(
                            "no fetch answer for %s, deleted meanwhile; its end stays the ListOffsets answer",
                            ", ".join(str(tp) for tp in sorted(gone)),
                        )
                        pending -= gone
                        continue
                    shown = ", ".join(str(tp) for tp in sorted(pending))
                    raise BrokerError(
                        f"no fetch answer from {self.options.bootstrap_servers} for {shown} within "
                        f"{self.options.metadata_timeout_ms} ms while confirming end offsets"
                    )
                # poll() hands over the first event as soon as it arrives: on a correct broker that is one
                # end-of-partition event per partition, right after the fetch response.
                message = consumer.poll(0.05)
                if message is not None:
                    tp = TopicPartition(message.topic() or "", message.partition() or 0)
                    if tp not in pending:
                        continue
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        raise BrokerError(
                            f"fetch of {tp} at offset {candidates[tp]} from {self.options.bootstrap_servers} "
                            f"failed while confirming end offsets: {error.str()}"
                        )
                    _, high = consumer.get_watermark_offsets(KafkaTopicPartition(tp.topic, tp.partition), cached=True)
                    end = max(candidates[tp], int(high))
                    if error is not None:  # end of partition: the fetch position is the high watermark
                        end = max(end, message.offset() or 0)
                    if end != candidates[tp]:
                        log.debug("end offset of %s: ListOffsets said %d, fetch says %d", tp, candidates[tp], end)
                    confirmed[tp] = end
                    pending.discard(tp)
        finally:
            self._close_consumer()
        return confirmed

    def _gone(self, consumer: Consumer, tps: set[TopicPartition]) -> set[TopicPartition]:
        """The partitions of ``tps`` the broker no longer lists (a metadata request; nothing is fetched)."""
        from confluent_kafka import KafkaException

        gone: set[TopicPartition] = set()
        for topic in sorted({tp.topic for tp in tps}):
            try:
                metadata = consumer.list_topics(topic, timeout=self.options.metadata_timeout_s)
            except KafkaException as err:
                raise BrokerError(
                    f"cannot look up topic {topic!r} on {self.options.bootstrap_servers}: {err.args[0].str()}"
                ) from err
            found = metadata.topics.get(topic)
            partitions = found.partitions if found is not None and found.error is None else {}
            gone |= {tp for tp in tps if tp.topic == topic and tp.partition not in partitions}
        return gone

    # -- resolution ------------------------------------------------------------------------------------------

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, keep_special: bool = False, keep_latest: bool = False
    ) -> PartitionOffsets:
        """Turn a starting or ending spec (offsets or timestamps) into offsets for ``tps``.

        Specific offsets or timestamps must name exactly the partitions the subscription reads (Spark's rule);
        -2 / -1 are resolved to earliest / latest, or kept as they are with ``keep_special`` (a stream's initial
        offsets: resolved when batch 0 is planned, see :class:`~sparkonce.kafka.source.KafkaStreamReader`;
        timestamps then become :data:`BY_TIMESTAMP`); ``keep_latest`` keeps only -1 (a batch read's open end,
        resolved when the read runs). A concrete start below the earliest offset is data loss. A timestamp
        without a matching record is latest for an end, and for a start follows
        ``startingOffsetsByTimestampStrategy``.

        Raises:
            OptionError: the spec does not name the subscribed partitions, or a timestamp start has no matching
                record and the strategy is ``error``.
            SourceOffsetError: a concrete starting offset points below the earliest available offset and
                ``failOnDataLoss`` is true.
        """
        option = spec.option
        if spec.kind == "timestamp":
            return self._resolve_timestamps(spec, tps, keep_special=keep_special, keep_latest=keep_latest)
        if spec.kind == "earliest":
            return PartitionOffsets({tp: EARLIEST for tp in tps} if keep_special else self.earliest(tps))
        if spec.kind == "latest":
            return PartitionOffsets({tp: LATEST for tp in tps} if keep_special or keep_latest else self.latest(tps))
        assert spec.specific is not None
        _check_named(spec, spec.specific, tps)
        earliest_needed = [tp for tp in tps if spec.specific[tp] == EARLIEST or spec.specific[tp] >= 0]
        latest_needed = [tp for tp in tps if spec.specific[tp] == LATEST and not (keep_special or keep_latest)]
        earliest = self.earliest(earliest_needed)
        latest = self.latest(latest_needed)
        resolved: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = spec.specific[tp]
            if (offset == LATEST and (keep_special or keep_latest)) or (offset == EARLIEST and keep_special):
                resolved[tp] = offset
            elif offset == EARLIEST:
                resolved[tp] = earliest[tp]
            elif offset == LATEST:
                resolved[tp] = latest[tp]
            else:
                if option.startswith("starting") and tp in earliest and offset < earliest[tp]:
                    report_data_loss(
                        self.options.fail_on_data_loss,
                        tp,
                        offset,
                        earliest[tp],
                        f"{option} asks for {tp} at offset {offset}, but the earliest available offset is "
                        f"{earliest[tp]}",
                        reason=start_offset_reset(tp, offset, earliest[tp]),
                    )
                    offset = earliest[tp]
                resolved[tp] = offset
        return PartitionOffsets(resolved)

    def _resolve_timestamps(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, keep_special: bool, keep_latest: bool
    ) -> PartitionOffsets:
        if spec.timestamps is not None:
            _check_named(spec, spec.timestamps, tps)
        starting = spec.option.startswith("starting")
        matches = self.timestamp_offsets({tp: spec.timestamp_for(tp) for tp in tps})
        resolved: dict[TopicPartition, int] = {}
        for tp in tps:
            match = matches.get(tp)
            if match is not None:
                resolved[tp] = BY_TIMESTAMP if keep_special else match
                continue
            if starting and self.options.starting_strategy == "error":
                raise OptionError(
                    spec.option,
                    spec.raw,
                    f"no record of {tp} has a timestamp at or after {spec.timestamp_for(tp)}; set "
                    "startingOffsetsByTimestampStrategy=latest to start such partitions at their latest offset",
                )
            # latest; a stream's initial offset keeps the lookup (bounded by batch 0's end, so records written
            # before that end and matching the timestamp are read by batch 0, the same on a re-run).
            resolved[tp] = BY_TIMESTAMP if keep_special and starting else LATEST
        unresolved = [tp for tp, offset in resolved.items() if offset == LATEST]
        if unresolved and not (keep_special or keep_latest):
            resolved.update(self.latest(unresolved))
        return PartitionOffsets(resolved)

    def timestamp_offsets(
        self, timestamps: Mapping[TopicPartition, int], *, bound: Mapping[TopicPartition, int] | None = None
    ) -> dict[TopicPartition, int | None]:
        """Kafka's offsetsForTimes: the first offset whose record timestamp is at or after the given one.

        None: no such record (before ``bound``, when given: offsets at or beyond it do not count, so the
        answer for a fixed bound never changes as records are appended). The broker's ListOffsets(timestamp)
        answer is confirmed (``confirmLatestOffsets``) by reading the records around it: the embedded broker
        answers from its own append time, not the records' timestamps, and never answers "no match". When
        the answer does not hold, the partition's records are scanned (logged as a warning).

        Raises:
            BrokerError: the broker failed or did not answer within ``metadataTimeoutMs``.
        """
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec  # type: ignore[attr-defined]

        wanted = sorted(timestamps)
        if not wanted:
            return {}
        request = {
            KafkaTopicPartition(tp.topic, tp.partition): KafkaOffsetSpec.for_timestamp(timestamps[tp]) for tp in wanted
        }
        futures = self._get_admin().list_offsets(request, request_timeout=self.options.metadata_timeout_s)
        candidates: dict[TopicPartition, int | None] = {}
        for ktp, future in futures.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            try:
                info = future.result(timeout=self.options.metadata_timeout_s + 1.0)
            except KafkaException as err:
                raise BrokerError(
                    f"cannot look up the offset of {tp} for timestamp {timestamps[tp]} on "
                    f"{self.options.bootstrap_servers}: {err.args[0].str()}"
                ) from err
            offset, stamp = int(info.offset), int(info.timestamp)
            candidates[tp] = offset if offset >= 0 and stamp >= 0 else None
        ends = dict(self.latest(wanted))
        if bound is not None:
            ends = {tp: min(end, bound.get(tp, end)) for tp, end in ends.items()}
        starts = self.earliest(wanted)
        result: dict[TopicPartition, int | None] = {}
        for tp in wanted:
            begin, end, wanted_ts = starts.get(tp, 0), ends.get(tp, 0), timestamps[tp]
            candidate = candidates.get(tp)
            if candidate is not None and candidate >= end:
                candidate = None  # at or beyond the bound: no match before it
            if not self.options.confirm_latest_offsets:
                result[tp] = candidate
                continue
            if self._timestamp_answer_holds(tp, begin, end, wanted_ts, candidate):
                result[tp] = candidate
                continue
            log.warning(
                "the broker's offset for %s at timestamp %d (%s) does not hold; scanning offsets [%d, %d)",
                tp,
                wanted_ts,
                candidate,
                begin,
                end,
            )
            result[tp] = next((o for o, ts in self._timestamps(tp, begin, end) if ts >= wanted_ts), None)
        return result

    def _timestamp_answer_holds(
        self, tp: TopicPartition, begin: int, end: int, wanted: int, candidate: int | None
    ) -> bool:
        """Check a timestamp lookup against the records next to it (the one before it, and it)."""
        if end <= begin:
            return candidate is None
        if candidate is None:
            last = list(self._timestamps(tp, end - 1, end))
            return all(ts < wanted for _, ts in last)
        if candidate < begin:
            return False
        around = list(self._timestamps(tp, max(begin, candidate - 1), min(end, candidate + 1)))
        before = [ts for offset, ts in around if offset < candidate]
        at = [ts for offset, ts in around if offset >= candidate]
        return bool(at) and at[0] >= wanted and all(ts < wanted for ts in before)

    def _timestamps(self, tp: TopicPartition, start: int, end: int) -> Iterator[tuple[int, int]]:
        """(offset, timestamp ms) of the records of ``tp`` in ``[start, end)``, read by the planner's consumer."""
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        if end <= start:
            return
        consumer = self._get_consumer()
        consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, start)])
        deadline = time.monotonic() + self.options.metadata_timeout_s
        try:
            while True:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"no fetch answer from {self.options.bootstrap_servers} for {tp} within "
                        f"{self.options.metadata_timeout_ms} ms while looking up a timestamp"
                    )
                message = consumer.poll(0.05)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    raise BrokerError(f"fetch of {tp} from offset {start} failed: {error.str()}")
                offset = message.offset() or 0
                if offset >= end:
                    return
                deadline = time.monotonic() + self.options.metadata_timeout_s
                yield offset, message.timestamp()[1]
                if offset >= end - 1:
                    return
        finally:
            self._close_consumer()


def _check_named(spec: OffsetSpec, named_offsets: PartitionOffsets, tps: list[TopicPartition]) -> None:
    """Specific offsets or timestamps must name exactly the subscribed partitions (Spark's rule)."""
    named = named_offsets.partitions()
    if named == set(tps):
        return
    missing = sorted(set(tps) - named)
    extra = sorted(named - set(tps))
    problems = []
    if missing:
        problems.append("misses " + ", ".join(map(str, missing)))
    if extra:
        problems.append("names partitions the subscription does not read: " + ", ".join(map(str, extra)))
    raise OptionError(spec.option, spec.raw, "must name every subscribed partition; it " + "; ".join(problems))


def broker_offsets(
    bootstrap: str,
    tps: Iterable[TopicPartition],
    *,
    client_config: Mapping[str, str] | None = None,
    timeout_ms: int = 10_000,
) -> dict[TopicPartition, tuple[int, int]]:
    """``(earliest, end)`` of each partition, the end confirmed by a fetch (right on the embedded broker too).

    For tools outside a query (the CLI, doctor): runs wherever it is called, never on executors. Partitions the
    broker does not know are left out.

    Raises:
        BrokerError: the broker did not answer within ``timeout_ms``.
    """
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    raw = {f"kafka.{k}": v for k, v in (client_config or {}).items()}
    options = KafkaOptions.parse(
        {
            **raw,
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": ",".join(sorted({tp.topic for tp in wanted})),
            "metadataTimeoutMs": str(timeout_ms),
        }
    )
    planner = OffsetPlanner(options)
    try:
        earliest = planner.earliest(wanted)
        latest = planner.latest([tp for tp in wanted if tp in earliest])
    finally:
        planner.close()
    return {tp: (earliest[tp], latest[tp]) for tp in wanted if tp in earliest and tp in latest}


def _unknown_partition_codes() -> set[int]:
    from confluent_kafka import KafkaError

    return {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}


__all__ = [
    "OffsetPlanner",
    "broker_offsets",
    "check_broker",
    "driver_client_config",
]
