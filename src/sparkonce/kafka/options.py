"""Options of the ``sparkonce.kafka`` source, parsed once into a frozen dataclass.

Names and meanings follow Spark's own Kafka source:

=========================  ==========================================================================
``kafka.bootstrap.servers``  required; every ``kafka.*`` option goes to the client with the prefix removed
``subscribe``              comma-separated topic list           } exactly one of these three
``subscribePattern``       regular expression over topic names  }
``assign``                 JSON ``{"topic": [0, 1]}``            }
``startingOffsets``        ``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}`` (-2 earliest, -1 latest);
                           default ``latest`` for streams, ``earliest`` for batch reads
``endingOffsets``          batch reads only: ``latest`` (default) or JSON (-1 latest)
``maxOffsetsPerTrigger``   records per micro-batch, split across partitions in proportion to their backlog
``minPartitions``          split large offset ranges so a batch has at least about this many tasks
``failOnDataLoss``         default true: fail when offsets point at records that no longer exist
``includeHeaders``         default false: add the ``headers`` column
``groupIdPrefix``          prefix of the (never committed) consumer group ids, default ``spark-kafka-source``
``kafkaConsumer.pollTimeoutMs``  how long an executor waits for records it knows exist (default 120000)
=========================  ==========================================================================

sparkonce adds ``metadataTimeoutMs`` (default 10000: the deadline of driver-side metadata and offset requests,
and of the broker reachability check) and ``confirmLatestOffsets`` (default true: confirm end offsets with a
fetch's high watermark, see :mod:`sparkonce.kafka.planner`).

Every invalid option raises :class:`~sparkonce.errors.OptionError` naming the option and the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sparkonce.errors import OptionError, SourceOffsetError
from sparkonce.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from sparkonce.options import get_bool, get_int, get_str, lookup

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]
OffsetKind = Literal["earliest", "latest", "specific"]
ReadMode = Literal["batch", "stream"]

BOOTSTRAP = "kafka.bootstrap.servers"

_SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "maxoffsetspertrigger",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "groupidprefix",
    "kafkaconsumer.polltimeoutms",
    "metadatatimeoutms",
    "confirmlatestoffsets",
}
_NOT_YET_SUPPORTED = {
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "maxrecordsperpartition",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
}
# Client settings the source owns: offsets are tracked by the checkpoint only, never by the consumer.
_FORBIDDEN_CLIENT = {
    "auto.offset.reset": "set startingOffsets instead; the checkpoint decides where to read",
    "enable.auto.commit": "the source never commits offsets to Kafka; the checkpoint is the only truth",
    "enable.auto.offset.store": "the source never commits offsets to Kafka; the checkpoint is the only truth",
    "key.deserializer": "keys are always returned as binary; cast or parse them in Spark",
    "value.deserializer": "values are always returned as binary; cast or parse them in Spark",
    "enable.partition.eof": "the source sets it itself",
}


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions the source reads (exactly one kind)."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    """Topics of ``subscribe``."""
    pattern: str | None = None
    """Regular expression of ``subscribePattern`` (must match the whole topic name, as in Spark)."""
    assigned: tuple[TopicPartition, ...] = ()
    """Partitions of ``assign``."""
    raw: str = ""
    """The option value as given, for error messages."""

    def matches(self, topic: str) -> bool:
        """True when ``topic`` belongs to the subscription (``assign``: when any of its partitions is)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: earliest, latest, or specific offsets (may hold -2 / -1)."""

    kind: OffsetKind
    specific: PartitionOffsets | None = None
    raw: str = ""


@dataclass(frozen=True)
class KafkaOptions:
    """Parsed options of one ``sparkonce.kafka`` read: plain data built on the driver, sent to executors."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec | None
    """None: the default of the read mode (latest for streams, earliest for batch reads)."""
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id_prefix: str
    poll_timeout_ms: int
    metadata_timeout_ms: int
    confirm_latest_offsets: bool
    client_config: Mapping[str, str] = field(default_factory=dict)
    """``kafka.*`` options without the prefix (includes ``bootstrap.servers``)."""

    @property
    def metadata_timeout_s(self) -> float:
        return self.metadata_timeout_ms / 1000.0

    def starting_for(self, mode: ReadMode) -> OffsetSpec:
        """The starting offsets to use in ``mode``, applying Spark's defaults."""
        if self.starting is not None:
            return self.starting
        return OffsetSpec("latest" if mode == "stream" else "earliest", raw="")

    def ending_for_batch(self) -> OffsetSpec:
        return self.ending if self.ending is not None else OffsetSpec("latest", raw="")

    def check_mode(self, mode: ReadMode) -> None:
        """Reject options that make no sense in ``mode`` (Spark's rules).

        Raises:
            OptionError: ``endingOffsets`` on a stream; ``latest`` as batch start or ``earliest`` as batch
                end;
                stream-only options on a batch read.
        """
        if mode == "stream":
            if self.ending is not None:
                raise OptionError("endingOffsets", self.ending.raw, "is only valid for batch reads, not streams")
            return
        if self.max_offsets_per_trigger is not None:
            raise OptionError(
                "maxOffsetsPerTrigger", str(self.max_offsets_per_trigger), "is only valid for streaming reads"
            )
        starting = self.starting_for("batch")
        if starting.kind == "latest" or (
            starting.specific is not None and LATEST in starting.specific.offsets.values()
        ):
            raise OptionError("startingOffsets", starting.raw, "latest (-1) is not allowed for batch reads")
        ending = self.ending_for_batch()
        if ending.kind == "earliest" or (ending.specific is not None and EARLIEST in ending.specific.offsets.values()):
            raise OptionError("endingOffsets", ending.raw, "earliest (-2) is not allowed as an ending offset")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        """Parse Spark's option map (case-insensitive keys).

        Raises:
            OptionError: the first invalid option, naming it and its value.
        """
        client_config: dict[str, str] = {}
        for key, value in options.items():
            lowered = key.lower()
            if lowered.startswith("kafka."):
                name = key[len("kafka.") :]
                if name.lower() in _FORBIDDEN_CLIENT:
                    raise OptionError(key, value, f"is not supported: {_FORBIDDEN_CLIENT[name.lower()]}")
                client_config[name] = value
            elif lowered in _NOT_YET_SUPPORTED:
                raise OptionError(key, value, "is a Spark Kafka option that sparkonce.kafka does not support yet")
            elif lowered not in _SOURCE_OPTIONS:
                raise OptionError(key, value, "is not an option of sparkonce.kafka (kafka.* options go to the client)")

        bootstrap = get_str(options, BOOTSTRAP)
        if bootstrap is None:
            raise OptionError(BOOTSTRAP, None, "is required: the Kafka brokers to read from, e.g. host:9092")
        client_config = {k: v for k, v in client_config.items() if k.lower() != "bootstrap.servers"}
        client_config["bootstrap.servers"] = bootstrap.strip()

        return cls(
            bootstrap_servers=bootstrap.strip(),
            subscription=_parse_subscription(options),
            starting=_parse_offset_spec(options, "startingOffsets"),
            ending=_parse_offset_spec(options, "endingOffsets"),
            max_offsets_per_trigger=get_int(options, "maxOffsetsPerTrigger", minimum=1),
            min_partitions=get_int(options, "minPartitions", minimum=1),
            fail_on_data_loss=get_bool(options, "failOnDataLoss", True),
            include_headers=get_bool(options, "includeHeaders", False),
            group_id_prefix=get_str(options, "groupIdPrefix", "spark-kafka-source") or "spark-kafka-source",
            poll_timeout_ms=get_int(options, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1) or 120_000,
            metadata_timeout_ms=get_int(options, "metadataTimeoutMs", 10_000, minimum=1) or 10_000,
            confirm_latest_offsets=get_bool(options, "confirmLatestOffsets", True),
            client_config=client_config,
        )


def _parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = {name: lookup(options, name) for name in ("subscribe", "subscribePattern", "assign")}
    present = {name: value for name, value in given.items() if value is not None}
    if len(present) != 1:
        shown = ", ".join(f"{k}={v!r}" for k, v in present.items()) or "none given"
        option = next(iter(present), "subscribe")
        raise OptionError(
            option,
            present.get(option),
            f"exactly one of subscribe, subscribePattern, assign must be set ({shown})",
        )
    (kind, raw), *_ = present.items()
    assert raw is not None
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(","))
        if not topics or any(not t for t in topics):
            raise OptionError("subscribe", raw, "must be a comma-separated list of non-empty topic names")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)), raw=raw)
    if kind == "subscribePattern":
        if not raw.strip():
            raise OptionError("subscribePattern", raw, "must not be empty")
        try:
            re.compile(raw)
        except re.error as err:
            raise OptionError("subscribePattern", raw, f"is not a valid regular expression ({err})") from None
        return Subscription("subscribePattern", pattern=raw, raw=raw)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise OptionError("assign", raw, f"is not valid JSON ({err.msg} at char {err.pos})") from None
    if not isinstance(data, dict) or not data:
        raise OptionError("assign", raw, 'must be a JSON object like {"topicA": [0, 1], "topicB": [2]}')
    assigned: list[TopicPartition] = []
    for topic, partitions in data.items():
        if not topic or not isinstance(partitions, list) or not partitions:
            raise OptionError("assign", raw, f"topic {topic!r} must map to a non-empty list of partition numbers")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise OptionError("assign", raw, f"partition {partition!r} of topic {topic!r} is not a number >= 0")
            assigned.append(TopicPartition(topic, partition))
    return Subscription("assign", assigned=tuple(sorted(set(assigned))), raw=raw)


def _parse_offset_spec(options: Mapping[str, str], name: str) -> OffsetSpec | None:
    raw = get_str(options, name)
    if raw is None:
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        kind: OffsetKind = "earliest" if text.lower() == "earliest" else "latest"
        return OffsetSpec(kind, raw=raw)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise OptionError(
            name,
            raw,
            f'must be earliest, latest or JSON like {{"topic":{{"0":42}}}} ({err.msg} at char {err.pos})',
        ) from None
    try:
        specific = PartitionOffsets.from_json(data, what=name, allowed_special=frozenset({EARLIEST, LATEST}))
    except SourceOffsetError as err:
        raise OptionError(name, raw, str(err)) from None
    if not specific:
        raise OptionError(name, raw, "names no partitions")
    return OffsetSpec("specific", specific=specific, raw=raw)


__all__ = ["BOOTSTRAP", "KafkaOptions", "OffsetSpec", "ReadMode", "Subscription", "SubscriptionKind"]
