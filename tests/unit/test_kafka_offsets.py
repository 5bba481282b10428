"""Kafka offsets, options and the pure planning functions: no Spark, no broker."""

from __future__ import annotations

import itertools
import json
import logging
import re

import pytest

from sparkonce.errors import OptionError, SourceOffsetError
from sparkonce.kafka.offsets import OffsetRange, PartitionOffsets, TopicPartition
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import check_broker
from sparkonce.kafka.ranges import BY_TIMESTAMP, plan_ranges, rate_limit, resolve_start, split_ranges

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "a"}


# -- offsets ------------------------------------------------------------------------------------------------------


def test_offsets_round_trip_in_spark_shape() -> None:
    offsets = PartitionOffsets({A1: 7, B0: 3, A0: 42})
    assert offsets.to_json() == {"a": {"0": 42, "1": 7}, "b": {"0": 3}}
    assert offsets.dumps() == '{"a":{"0":42,"1":7},"b":{"0":3}}'
    assert PartitionOffsets.from_json(offsets.to_json()) == offsets
    assert PartitionOffsets.loads(offsets.dumps()) == offsets


def test_offsets_compare_as_values_not_bytes() -> None:
    spark_written = '{"b": {"0": 3}, "a": {"1": 7, "0": 42}}'
    assert PartitionOffsets.loads(spark_written) == PartitionOffsets({A0: 42, A1: 7, B0: 3})


def test_partitions_sort_numerically() -> None:
    offsets = PartitionOffsets({TopicPartition("a", 10): 1, TopicPartition("a", 2): 1})
    assert list(offsets.to_json()["a"]) == ["2", "10"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([1, 2], "expected a JSON object"),
        ({"a": 5}, "must map to an object"),
        ({"a": {"x": 1}}, "not an integer"),
        ({"a": {"0": "12"}}, "must be an integer"),
        ({"a": {"0": -2}}, "not allowed here"),
        ({"": {"0": 1}}, "non-empty"),
    ],
)
def test_bad_offsets_are_rejected(data: object, problem: str) -> None:
    with pytest.raises(SourceOffsetError, match=problem):
        PartitionOffsets.from_json(data)


def test_special_offsets_only_where_allowed() -> None:
    parsed = PartitionOffsets.from_json({"a": {"0": -2, "1": -1}}, allowed_special=frozenset({-2, -1}))
    assert parsed[A0] == -2 and parsed[A1] == -1
    with pytest.raises(SourceOffsetError, match=r"^offsets: not valid JSON \(.*\): 'not json'$"):
        PartitionOffsets.loads("not json")


# -- options ------------------------------------------------------------------------------------------------------


def test_offset_fetch_retries_are_sparks_options_with_sparks_defaults() -> None:
    assert (
        KafkaOptions.parse(BASE).fetch_offset_attempts,
        KafkaOptions.parse(BASE).fetch_offset_retry_interval_ms,
    ) == (
        3,
        1000,
    )
    given = KafkaOptions.parse({**BASE, "fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "0"})
    assert (given.fetch_offset_attempts, given.fetch_offset_retry_interval_ms) == (5, 0)


def test_options_parse_spark_names() -> None:
    options = KafkaOptions.parse(
        {
            **BASE,
            "startingOffsets": '{"a": {"0": -2, "1": 5}}',
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "4",
            "failOnDataLoss": "false",
            "includeHeaders": "true",
            "kafka.security.protocol": "PLAINTEXT",
        }
    )
    assert options.subscription.kind == "subscribe" and options.subscription.topics == ("a",)
    assert options.starting is not None and options.starting.specific == PartitionOffsets({A0: -2, A1: 5})
    assert options.max_offsets_per_trigger == 100 and options.min_partitions == 4
    assert options.fail_on_data_loss is False and options.include_headers is True
    assert options.client_config == {"security.protocol": "PLAINTEXT", "bootstrap.servers": "localhost:9092"}
    assert options.starting_for("stream").kind == "specific"


def test_defaults_follow_spark() -> None:
    options = KafkaOptions.parse(BASE)
    assert options.starting_for("stream").kind == "latest"
    assert options.starting_for("batch").kind == "earliest"
    assert options.ending_for_batch().kind == "latest"
    assert options.fail_on_data_loss is True and options.include_headers is False


def test_subscribe_pattern_matches_whole_name() -> None:
    options = KafkaOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribePattern": "np-.*"})
    assert options.subscription.matches("np-a")
    assert not options.subscription.matches("x-np-a")


def test_assign_parses_partitions() -> None:
    options = KafkaOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [1, 0], "b": [0]}'})
    assert options.subscription.assigned == (A0, A1, B0)


@pytest.mark.parametrize(
    ("options", "option", "problem"),
    [
        ({"subscribe": "a"}, "kafka.bootstrap.servers", "is required"),
        ({**BASE, "assign": '{"a":[0]}'}, "subscribe", "exactly one of"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe", "exactly one of"),
        ({**BASE, "startingOffsets": '{"a": {"0": 1'}, "startingOffsets", "must be earliest, latest or JSON"),
        ({**BASE, "startingOffsets": '{"a": {"0": "x"}}'}, "startingOffsets", "must be an integer"),
        ({**BASE, "startingOffsets": "{}"}, "startingOffsets", "names no partitions"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, "assign", "JSON object"),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [-1]}'}, "assign", "not a number >= 0"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "subscribePattern", "regular expression"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "a,,b"}, "subscribe", "non-empty"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger", ">= 1"),
        ({**BASE, "fetchOffset.numRetries": "0"}, "fetchOffset.numRetries", ">= 1"),
        ({**BASE, "fetchOffset.retryIntervalMs": "-1"}, "fetchOffset.retryIntervalMs", ">= 0"),
        ({**BASE, "minPartitions": "many"}, "minPartitions", "integer"),
        ({**BASE, "failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "never commits"),
        ({**BASE, "maxRecordsPerPartition": "1000"}, "maxRecordsPerPartition", "does not support yet"),
        ({**BASE, "startingTimestamp": "soon"}, "startingTimestamp", "one timestamp in milliseconds"),
        ({**BASE, "startingTimestamp": "-5"}, "startingTimestamp", ">= 0"),
        ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": x}}'}, "startingOffsetsByTimestamp", "must be JSON"),
        ({**BASE, "endingOffsetsByTimestamp": '{"a": {"0": -1}}'}, "endingOffsetsByTimestamp", "not allowed"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy", "one of"),
        ({**BASE, "maxTriggerDelay": "soon"}, "maxTriggerDelay", "duration"),
        ({**BASE, "maxTriggerDelay": "5 years"}, "maxTriggerDelay", "duration"),
        (
            {**BASE, "minOffsetsPerTrigger": "11", "maxOffsetsPerTrigger": "10"},
            "minOffsetsPerTrigger",
            "higher than maxOffsetsPerTrigger",
        ),
        (
            {
                **BASE,
                "startingOffsetsByTimestamp": '{"a": {"0": 2000}}',
                "endingOffsetsByTimestamp": '{"a": {"0": 1000}}',
            },
            "endingOffsetsByTimestamp",
            "before its start",
        ),
        (
            {
                **BASE,
                "startingOffsetsByTimestamp": '{"a": {"0": 2000}}',
                "endingOffsetsByTimestamp": '{"a": {"1": 3000}}',
            },
            "endingOffsetsByTimestamp",
            "other partitions",
        ),
        (
            {**BASE, "startingOffsets": '{"a": {"0": 5}}', "endingOffsets": '{"a": {"0": 4}}'},
            "endingOffsets",
            "before its start",
        ),
        ({**BASE, "maxOffsetPerTrigger": "10"}, "maxOffsetPerTrigger", "not an option"),
    ],
)
def test_bad_options_name_option_and_value(options: dict[str, str], option: str, problem: str) -> None:
    with pytest.raises(OptionError, match=problem) as info:
        KafkaOptions.parse(options)
    assert info.value.option == option


@pytest.mark.parametrize(
    ("mode", "options", "option", "problem"),
    [
        ("stream", {**BASE, "endingOffsets": "latest"}, "endingOffsets", "is only valid for batch reads, not streams"),
        ("batch", {**BASE, "startingOffsets": "latest"}, "startingOffsets", r"latest \(-1\) is not allowed for batch"),
        ("batch", {**BASE, "startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets", r"latest \(-1\) is not allowed"),
        (
            "batch",
            {**BASE, "endingOffsets": "earliest"},
            "endingOffsets",
            r"earliest \(-2\) is not allowed as an ending",
        ),
        ("batch", {**BASE, "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets", r"earliest \(-2\) is not allowed as"),
        (
            "stream",
            {**BASE, "endingOffsetsByTimestamp": '{"a": {"0": 5}}'},
            "endingOffsetsByTimestamp",
            "is only valid for batch reads, not streams",
        ),
        ("stream", {**BASE, "endingTimestamp": "5"}, "endingTimestamp", "is only valid for batch reads, not streams"),
    ],
)
def test_mode_rules(mode: str, options: dict[str, str], option: str, problem: str) -> None:
    parsed = KafkaOptions.parse(options)
    with pytest.raises(OptionError, match=rf"^option '{option}' = .*: {problem}") as info:
        parsed.check_mode(mode, given=options)  # type: ignore[arg-type]
    assert info.value.option == option


def test_stream_only_options_on_a_batch_read_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    given = {**BASE, "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "2", "maxTriggerDelay": "1m"}
    with caplog.at_level(logging.WARNING, logger="sparkonce.kafka.options"):
        KafkaOptions.parse(given).check_mode("batch", given=given)
    assert [r.getMessage() for r in caplog.records] == [
        "maxOffsetsPerTrigger option ignored in batch queries",
        "minOffsetsPerTrigger option ignored in batch queries",
        "maxTriggerDelay option ignored in batch queries",
    ]


def test_timestamp_options_follow_sparks_precedence() -> None:
    options = KafkaOptions.parse(
        {
            **BASE,
            "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
            "startingOffsets": "earliest",
            "endingOffsetsByTimestamp": '{"a": {"0": 7000}}',
            "endingOffsets": "latest",
        }
    )
    assert options.starting is not None and options.starting.option == "startingTimestamp"
    assert options.starting.timestamp_for(A0) == 1000 and options.starting.timestamp_for(A1) == 1000
    assert options.ending is not None and options.ending.option == "endingOffsetsByTimestamp"
    assert options.ending.timestamp_for(A0) == 7000
    assert options.starting_strategy == "error"
    assert KafkaOptions.parse({**BASE, "startingOffsetsByTimestampStrategy": "LATEST"}).starting_strategy == "latest"


@pytest.mark.parametrize(
    ("text", "millis"), [("15m", 900_000), ("30s", 30_000), ("500", 500), ("250ms", 250), ("2h", 7_200_000)]
)
def test_max_trigger_delay_takes_spark_time_strings(text: str, millis: int) -> None:
    assert KafkaOptions.parse({**BASE, "maxTriggerDelay": text}).max_trigger_delay_ms == millis
    assert KafkaOptions.parse(BASE).max_trigger_delay_ms == 15 * 60_000


# -- rate limit ---------------------------------------------------------------------------------------------------


def test_rate_limit_splits_in_proportion_to_backlog() -> None:
    start = PartitionOffsets({A0: 0, A1: 0})
    assert rate_limit(30, start, {A0: 100, A1: 50}, {}) == {A0: 20, A1: 10}


def test_rate_limit_never_starves_a_small_partition() -> None:
    start = PartitionOffsets({A0: 0, A1: 0})
    capped = rate_limit(10, start, {A0: 1000, A1: 1}, {})
    assert capped == {A0: 9, A1: 1}


def test_rate_limit_starts_new_partitions_at_earliest() -> None:
    start = PartitionOffsets({A0: 90})
    assert rate_limit(20, start, {A0: 100, B0: 30}, {B0: 10}) == {A0: 96, B0: 23}


def test_rate_limit_leaves_exhausted_partitions_and_gone_back_partitions_alone() -> None:
    start = PartitionOffsets({A0: 100, A1: 50})
    assert rate_limit(5, start, {A0: 100, A1: 20}, {}) == {A0: 100, A1: 20}


# -- planning: ranges and data loss -------------------------------------------------------------------------------


def test_plan_reads_exactly_start_to_end() -> None:
    ranges = plan_ranges(
        PartitionOffsets({A0: 5, A1: 7}),
        PartitionOffsets({A0: 10, A1: 7}),
        {A0: 0, A1: 0},
        fail_on_data_loss=True,
        min_partitions=None,
    )
    assert ranges == [OffsetRange(A0, 5, 10)]


def test_new_partition_is_read_from_earliest() -> None:
    ranges = plan_ranges(
        PartitionOffsets({A0: 5}),
        PartitionOffsets({A0: 5, B0: 4}),
        {A0: 0, B0: 0},
        fail_on_data_loss=True,
        min_partitions=None,
    )
    assert ranges == [OffsetRange(B0, 0, 4)]


def test_start_below_earliest_fails_naming_topic_partition_and_range() -> None:
    with pytest.raises(
        SourceOffsetError, match=r"^data loss in topic 'a' partition 0: offsets \[5, 20\) are gone"
    ) as info:
        plan_ranges(
            PartitionOffsets({A0: 5}),
            PartitionOffsets({A0: 50}),
            {A0: 20},
            fail_on_data_loss=True,
            min_partitions=None,
        )
    message = str(info.value)
    assert "topic 'a' partition 0" in message and "[5, 20)" in message
    assert (
        "[KAFKA_DATA_LOSS.START_OFFSET_RESET]" in message and "set the source option failOnDataLoss to false" in message
    )
    assert message.endswith("Reason: Starting offset for a-0 was 5 but consumer reset to 20.")


def test_start_below_earliest_warns_and_goes_on_from_earliest(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkonce.kafka.ranges"):
        ranges = plan_ranges(
            PartitionOffsets({A0: 5}),
            PartitionOffsets({A0: 50}),
            {A0: 20},
            fail_on_data_loss=False,
            min_partitions=None,
        )
    assert ranges == [OffsetRange(A0, 20, 50)]
    assert "[5, 20)" in caplog.text


def test_end_before_start_is_data_loss() -> None:
    start, end = PartitionOffsets({A0: 20}), PartitionOffsets({A0: 5})
    with pytest.raises(SourceOffsetError, match="went back from 20 to 5") as info:
        plan_ranges(start, end, {A0: 0}, fail_on_data_loss=True, min_partitions=None)
    assert "[KAFKA_DATA_LOSS.PARTITION_OFFSET_CHANGED]" in str(info.value)
    assert "Reason: Partition a-0 offset was changed from 20 to 5.\nThis could either be" in str(info.value)
    assert plan_ranges(start, end, {A0: 0}, fail_on_data_loss=False, min_partitions=None) == [OffsetRange(A0, 0, 5)]


def test_vanished_partition_is_data_loss() -> None:
    with pytest.raises(SourceOffsetError, match="no longer exists") as info:
        plan_ranges(
            PartitionOffsets({A0: 3, B0: 1}),
            PartitionOffsets({A0: 4}),
            {A0: 0},
            fail_on_data_loss=True,
            min_partitions=None,
        )
    message = str(info.value)
    assert message.startswith("data loss in topic 'b' partition 0: offsets from 1 are gone")
    assert "\n[KAFKA_DATA_LOSS.PARTITIONS_DELETED] Some data may have been lost because" in message
    assert message.endswith("Reason: Partitions Set(b-0) have been deleted.")


def test_new_partition_not_starting_at_zero_is_data_loss() -> None:
    with pytest.raises(SourceOffsetError, match="instead of 0") as info:
        plan_ranges(
            PartitionOffsets({}), PartitionOffsets({B0: 9}), {B0: 3}, fail_on_data_loss=True, min_partitions=None
        )
    assert str(info.value).endswith(
        "[KAFKA_DATA_LOSS.ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO] "
        + "Some data may have been lost because they are not available in Kafka any more;\n"
        + "either the data was aged out by Kafka or the topic may have been deleted before all the data in the\n"
        + "topic was processed.\n"
        + "If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to "
        + "false.\nReason: Added partition b-0 starts from 3 instead of 0."
    )


# -- minPartitions ------------------------------------------------------------------------------------------------


def test_min_partitions_splits_large_ranges_and_keeps_every_offset() -> None:
    ranges = [OffsetRange(A0, 0, 1000), OffsetRange(A1, 0, 10)]
    split = split_ranges(ranges, 5)
    assert sum(r.size for r in split) == 1010
    assert [r for r in split if r.tp == A1] == [OffsetRange(A1, 0, 10)]
    a0 = sorted(r for r in split if r.tp == A0)
    assert len(a0) == 4 and a0[0].start == 0 and a0[-1].end == 1000
    assert all(x.end == y.start for x, y in itertools.pairwise(a0))


def test_min_partitions_is_a_no_op_with_enough_ranges() -> None:
    ranges = [OffsetRange(A0, 0, 1000), OffsetRange(A1, 0, 10)]
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges(ranges, None) == ranges


def test_offset_json_is_what_spark_checkpoints() -> None:
    # Spark's Python stream runner writes json.dumps(latestOffset()) into offsets/N: our dict must survive it.
    offsets = PartitionOffsets({A0: 1, A1: 2})
    assert PartitionOffsets.from_json(json.loads(json.dumps(offsets.to_json()))) == offsets


def test_resolve_start_bounds_timestamp_markers_by_the_batch_end() -> None:
    start = PartitionOffsets({A0: BY_TIMESTAMP, A1: BY_TIMESTAMP, B0: BY_TIMESTAMP})
    resolved = resolve_start(start, {A0: 10, A1: 10, B0: 10}, {}, {A0: 4, A1: None, B0: 12})
    assert resolved == PartitionOffsets({A0: 4, A1: 10, B0: 10})


def test_resolve_start_replaces_initial_markers() -> None:
    start = PartitionOffsets.from_json({"a": {"0": -1, "1": -2}, "b": {"0": 7}}, allowed_special=frozenset({-2, -1}))
    resolved = resolve_start(start, latest={A0: 50, A1: 60}, earliest={A1: 3})
    assert resolved == PartitionOffsets({A0: 50, A1: 3, B0: 7})
    # A marked partition the batch does not read is left out rather than reported as lost.
    assert resolve_start(start, latest={}, earliest={}) == PartitionOffsets({B0: 7})


@pytest.mark.parametrize(
    ("extra", "option", "problem"),
    [
        (
            {"kafka.sasl.jaas.config": "x", "kafka.client.id": "me"},
            "kafka.sasl.jaas.config",
            "Java JAAS configuration is not supported",
        ),
        (
            {"kafka.fetch.wait.max.ms": "abc", "kafka.client.id": "me"},
            "kafka.fetch.wait.max.ms",
            'Invalid value for configuration property "fetch.wait.max.ms"',
        ),
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting", 'No such configuration property: "no.such.setting"'),
    ],
)
def test_client_settings_refused_by_the_client_name_the_option(
    extra: dict[str, str], option: str, problem: str
) -> None:
    # The client refuses them while it is built, before it talks to any broker.
    with pytest.raises(
        OptionError, match=rf"^option '{re.escape(option)}' = .*: rejected by the client: {problem}"
    ) as info:
        check_broker(KafkaOptions.parse({**BASE, **extra}))
    assert info.value.option == option
