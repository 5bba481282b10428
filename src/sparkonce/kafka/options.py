"""Options of the ``sparkonce.kafka`` source, parsed once into a frozen dataclass.

Names and meanings follow Spark's own Kafka source:

=========================  ==========================================================================
``kafka.bootstrap.servers``  required; every ``kafka.*`` option goes to the client with the prefix removed
``subscribe``              comma-separated topic list           } exactly one of these three
``subscribePattern``       regular expression over topic names  }
``assign``                 JSON ``{"topic": [0, 1]}``            }
``startingOffsets``        ``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}`` (-2 earliest, -1 latest);
                           default ``latest`` for streams, ``earliest`` for batch reads
``startingOffsetsByTimestamp``  JSON ``{"topic": {"0": 1700000000000}}``: start at the first record whose
                           timestamp (ms) is at or after the given one; takes precedence over ``startingOffsets``
``startingTimestamp``      one timestamp (ms) for every partition; takes precedence over both above
``startingOffsetsByTimestampStrategy``  ``error`` (default) or ``latest``: what a partition without a matching
                           record does
``endingOffsets``          batch reads only: ``latest`` (default) or JSON (-1 latest)
``endingOffsetsByTimestamp`` / ``endingTimestamp``  batch reads only, as the starting ones (no match: latest)
``maxOffsetsPerTrigger``   records per micro-batch, split across partitions in proportion to their backlog
``minOffsetsPerTrigger``   streams: wait for at least this many new records before a batch, at most
                           ``maxTriggerDelay`` (default ``15m``)
``minPartitions``          split large offset ranges so a batch has at least about this many tasks
``failOnDataLoss``         default true: fail when offsets point at records that no longer exist
``includeHeaders``         default false: add the ``headers`` column
``groupIdPrefix``          prefix of the consumer group ids, default ``spark-kafka-source`` (the group that lag tools
                           see is ``kafka.group.id``, else this prefix and a hash of the subscription)
``kafkaConsumer.pollTimeoutMs``  how long an executor waits for records it knows exist (default 120000)
``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``  streams: attempts of the driver's offset requests
                           (default 3) and the wait between them (default 1000 ms), as Spark retries them
=========================  ==========================================================================

sparkonce adds ``metadataTimeoutMs`` (default 10000: the deadline of driver-side metadata and offset requests,
and of the broker reachability check), ``confirmLatestOffsets`` (default false: trust ListOffsets, as Kafka
answers it; true confirms end offsets with a fetch's high watermark and timestamp lookups by reading the records
around them, for Kafka-compatible brokers that answer ListOffsets short, see :mod:`sparkonce.kafka.planner`) and
``commitOffsetsToGroup`` (streams, default true: commit each batch's end offsets to a consumer group for lag tools,
informational only; see :mod:`sparkonce.kafka.group`).

Every invalid option raises :class:`~sparkonce.errors.OptionError` naming the option and the value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sparkonce.errors import OptionError, SourceOffsetError
from sparkonce.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from sparkonce.options import get_bool, get_choice, get_int, get_str, lookup

log = logging.getLogger(__name__)

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]
OffsetKind = Literal["earliest", "latest", "specific", "timestamp"]
ReadMode = Literal["batch", "stream"]
NoMatchStrategy = Literal["error", "latest"]

BOOTSTRAP = "kafka.bootstrap.servers"

_SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "groupidprefix",
    "kafkaconsumer.polltimeoutms",
    "metadatatimeoutms",
    "confirmlatestoffsets",
    "commitoffsetstogroup",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
}
_STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
"""Options Spark ignores on batch reads, with a logged warning."""
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
"""Spark's default ``maxTriggerDelay`` (``15m``)."""
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_NOT_YET_SUPPORTED = {
    "maxrecordsperpartition",
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
    """Where a read starts or ends: earliest, latest, specific offsets (may hold -2 / -1), or timestamps.

    ``timestamp`` specs come from ``startingTimestamp`` / ``endingTimestamp`` (``global_timestamp``, every
    partition) or ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (``timestamps``, per partition,
    in milliseconds); ``option`` names the option the spec came from, for errors.
    """

    kind: OffsetKind
    specific: PartitionOffsets | None = None
    raw: str = ""
    option: str = ""
    timestamps: PartitionOffsets | None = None
    global_timestamp: int | None = None

    def timestamp_for(self, tp: TopicPartition) -> int:
        """The timestamp a ``timestamp`` spec asks for ``tp``."""
        if self.global_timestamp is not None:
            return self.global_timestamp
        assert self.timestamps is not None
        return self.timestamps[tp]


@dataclass(frozen=True)
class KafkaOptions:
    """Parsed options of one ``sparkonce.kafka`` read: plain data built on the driver, sent to executors."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec | None
    """None: the default of the read mode (latest for streams, earliest for batch reads)."""
    ending: OffsetSpec | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    """``maxTriggerDelay``: how long ``minOffsetsPerTrigger`` may hold back a batch."""
    starting_strategy: NoMatchStrategy
    """``startingOffsetsByTimestampStrategy``: a timestamp start without a matching record fails or starts at
    the partition's latest offset."""
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id_prefix: str
    poll_timeout_ms: int
    metadata_timeout_ms: int
    confirm_latest_offsets: bool
    commit_offsets_to_group: bool = True
    """``commitOffsetsToGroup``: a stream commits each batch's end offsets to its consumer group (for lag tools)."""
    fetch_offset_attempts: int = 3
    """``fetchOffset.numRetries`` (Spark's default 3): attempts of a stream's offset requests."""
    fetch_offset_retry_interval_ms: int = 1000
    """``fetchOffset.retryIntervalMs`` (Spark's default 1000): wait between two attempts."""
    client_config: Mapping[str, str] = field(default_factory=dict)
    """``kafka.*`` options without the prefix (includes ``bootstrap.servers``)."""

    @property
    def metadata_timeout_s(self) -> float:
        return self.metadata_timeout_ms / 1000.0

    def starting_for(self, mode: ReadMode) -> OffsetSpec:
        """The starting offsets to use in ``mode``, applying Spark's defaults."""
        if self.starting is not None:
            return self.starting
        return OffsetSpec("latest" if mode == "stream" else "earliest", raw="", option="startingOffsets")

    def ending_for_batch(self) -> OffsetSpec:
        return self.ending if self.ending is not None else OffsetSpec("latest", raw="", option="endingOffsets")

    def check_mode(self, mode: ReadMode, *, given: Mapping[str, str] | None = None) -> None:
        """Reject options that make no sense in ``mode`` (Spark's rules).

        Stream-only options on a batch read (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
        ``maxTriggerDelay``, found in ``given``, the raw option map) are ignored with a logged warning, as
        Spark does.

        Raises:
            OptionError: an ending option on a stream; ``latest`` as batch start or ``earliest`` as batch end.
        """
        if mode == "stream":
            if self.ending is not None:
                raise OptionError(self.ending.option, self.ending.raw, "is only valid for batch reads, not streams")
            return
        for name in _STREAM_ONLY:
            if given is not None and lookup(given, name) is not None:
                log.warning("%s option ignored in batch queries", name)
        starting = self.starting_for("batch")
        if starting.kind == "latest" or (
            starting.specific is not None and LATEST in starting.specific.offsets.values()
        ):
            raise OptionError("startingOffsets", starting.raw, "latest (-1) is not allowed for batch reads")
        ending = self.ending_for_batch()
        if ending.kind == "earliest" or (ending.specific is not None and EARLIEST in ending.specific.offsets.values()):
            raise OptionError("endingOffsets", ending.raw, "earliest (-2) is not allowed as an ending offset")

    def _check_limits(self) -> None:
        """Spark's ``checkOffsetLimitValidity`` and the min/max-per-trigger rule (every read mode).

        Raises:
            OptionError: start and end name different partitions, or a start after its end.
        """
        if (
            self.min_offsets_per_trigger is not None
            and self.max_offsets_per_trigger is not None
            and self.min_offsets_per_trigger > self.max_offsets_per_trigger
        ):
            raise OptionError(
                "minOffsetsPerTrigger",
                str(self.min_offsets_per_trigger),
                f"is higher than maxOffsetsPerTrigger ({self.max_offsets_per_trigger})",
            )
        start, end = self.starting, self.ending
        if start is None or end is None or start.kind != end.kind:
            return
        if start.kind == "specific":
            first, last = start.specific, end.specific
        elif start.kind == "timestamp" and start.timestamps is not None and end.timestamps is not None:
            first, last = start.timestamps, end.timestamps
        else:
            return
        assert first is not None and last is not None
        if first.partitions() != last.partitions():
            raise OptionError(
                end.option,
                end.raw,
                f"names other partitions than {start.option} ({', '.join(map(str, sorted(first.partitions())))})",
            )
        for tp in first:
            if first[tp] >= 0 and last[tp] >= 0 and first[tp] > last[tp]:
                raise OptionError(end.option, end.raw, f"{tp} ends at {last[tp]}, before its start {first[tp]}")

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

        parsed = cls(
            bootstrap_servers=bootstrap.strip(),
            subscription=_parse_subscription(options),
            starting=_parse_range_limit(options, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets"),
            ending=_parse_range_limit(options, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets"),
            max_offsets_per_trigger=get_int(options, "maxOffsetsPerTrigger", minimum=1),
            min_offsets_per_trigger=get_int(options, "minOffsetsPerTrigger", minimum=1),
            max_trigger_delay_ms=_parse_time_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            starting_strategy=get_choice(options, "startingOffsetsByTimestampStrategy", ("error", "latest"), "error"),
            min_partitions=get_int(options, "minPartitions", minimum=1),
            fail_on_data_loss=get_bool(options, "failOnDataLoss", True),
            include_headers=get_bool(options, "includeHeaders", False),
            group_id_prefix=get_str(options, "groupIdPrefix", "spark-kafka-source") or "spark-kafka-source",
            poll_timeout_ms=get_int(options, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1) or 120_000,
            metadata_timeout_ms=get_int(options, "metadataTimeoutMs", 10_000, minimum=1) or 10_000,
            confirm_latest_offsets=get_bool(options, "confirmLatestOffsets", False),
            commit_offsets_to_group=get_bool(options, "commitOffsetsToGroup", True),
            fetch_offset_attempts=get_int(options, "fetchOffset.numRetries", 3, minimum=1) or 3,
            fetch_offset_retry_interval_ms=get_int(options, "fetchOffset.retryIntervalMs", 1000, minimum=0) or 0,
            client_config=client_config,
        )
        parsed._check_limits()
        return parsed


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


def _parse_time_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """A Spark time string (``15m``, ``30s``, ``500ms``, ``2h``; a bare number is milliseconds)."""
    raw = lookup(options, name)
    if raw is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or (match.group(2) and match.group(2) not in _TIME_UNITS_MS):
        raise OptionError(name, raw, "must be a duration like 15m, 30s, 500ms, 2h or 1d (a bare number is ms)")
    return int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "ms"])


def _parse_range_limit(
    options: Mapping[str, str], global_name: str, by_timestamp_name: str, offsets_name: str
) -> OffsetSpec | None:
    """Spark's ``getKafkaOffsetRangeLimit``: a global timestamp wins over timestamps per partition, which win
    over offsets; the options not used are ignored (with a warning)."""
    given = [n for n in (global_name, by_timestamp_name, offsets_name) if lookup(options, n) is not None]
    if len(given) > 1:
        log.warning("%s is set, so %s ignored", given[0], " and ".join(given[1:]))
    raw = get_str(options, global_name)
    if raw is not None:
        try:
            timestamp = int(raw.strip())
        except ValueError:
            raise OptionError(global_name, raw, "must be one timestamp in milliseconds (a long value)") from None
        if timestamp < 0:
            raise OptionError(global_name, raw, "must be a timestamp in milliseconds >= 0")
        return OffsetSpec("timestamp", raw=raw, option=global_name, global_timestamp=timestamp)
    raw = get_str(options, by_timestamp_name)
    if raw is not None:
        try:
            data = json.loads(raw.strip())
            timestamps = PartitionOffsets.from_json(data, what=by_timestamp_name)
        except json.JSONDecodeError as err:
            raise OptionError(
                by_timestamp_name,
                raw,
                f'must be JSON like {{"topic":{{"0":1700000000000}}}} ({err.msg} at char {err.pos})',
            ) from None
        except SourceOffsetError as err:
            raise OptionError(by_timestamp_name, raw, str(err).replace("offset", "timestamp")) from None
        if not timestamps:
            raise OptionError(by_timestamp_name, raw, "names no partitions")
        return OffsetSpec("timestamp", raw=raw, option=by_timestamp_name, timestamps=timestamps)
    return _parse_offset_spec(options, offsets_name)


def _parse_offset_spec(options: Mapping[str, str], name: str) -> OffsetSpec | None:
    raw = get_str(options, name)
    if raw is None:
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        kind: OffsetKind = "earliest" if text.lower() == "earliest" else "latest"
        return OffsetSpec(kind, raw=raw, option=name)
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
    return OffsetSpec("specific", specific=specific, raw=raw, option=name)


__all__ = [
    "BOOTSTRAP",
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
    "KafkaOptions",
    "NoMatchStrategy",
    "OffsetSpec",
    "ReadMode",
    "Subscription",
    "SubscriptionKind",
]
