"""Batch ranges of the Kafka source, planned from offsets alone: no broker client here.

What a micro-batch or batch read covers, given the offsets the planner (:mod:`sparkonce.kafka.planner`) found:
resolving a stream's start markers (earliest, latest, by timestamp), the ``maxOffsetsPerTrigger`` rate limit, the
per-partition ranges with their data-loss checks (``failOnDataLoss``), and ``minPartitions`` splitting, with Spark's
Kafka source's rules. Runs on the driver; pure functions, tested without a broker.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from sparkonce.errors import SourceOffsetError
from sparkonce.kafka.offsets import EARLIEST, LATEST, OffsetRange, PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)

BY_TIMESTAMP: int = -3
"""Marker in a stream's initial offsets: start at the ``startingTimestamp`` / ``startingOffsetsByTimestamp``
lookup, bounded by batch 0's end (so a re-run batch 0 resolves it to the same offset)."""

_SPARK_DATA_LOSS = (
    "Some data may have been lost because they are not available in Kafka any more;\n"
    "either the data was aged out by Kafka or the topic may have been deleted before all the data in the\n"
    "topic was processed.\n"
    "If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.\n"
    "Reason:"
)
"""Spark's ``KAFKA_DATA_LOSS`` message (its Kafka connector's ``kafka-error-conditions.json``); each case below adds
its sub-class and reason, worded as Spark words them."""
_WARN_HINT = "Some data may have been lost; going on from the earliest available offset (failOnDataLoss=false)."

DataLossReason = tuple[str, str]
"""Spark's ``KAFKA_DATA_LOSS`` sub-class and its reason text."""


def partitions_deleted(tp: TopicPartition) -> DataLossReason:
    """Spark's reason when a partition of the previous offsets is gone (topic deleted)."""
    return "PARTITIONS_DELETED", f"Partitions Set({tp}) have been deleted."


def added_partition_not_at_zero(tp: TopicPartition, start: int) -> DataLossReason:
    """Spark's reason when a partition new since the previous offsets does not start at 0."""
    return "ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO", f"Added partition {tp} starts from {start} instead of 0."


def offset_changed(tp: TopicPartition, previous: int, new: int) -> DataLossReason:
    """Spark's reason when a partition's offset went back (the topic was recreated)."""
    return (
        "PARTITION_OFFSET_CHANGED",
        f"Partition {tp} offset was changed from {previous} to {new}.\n"
        "This could either be a user error that the start offset is set too high and this is the first batch, or "
        "the kafka topic-partition is broken, and some data may have been missed.",
    )


def start_offset_reset(tp: TopicPartition, offset: int, earliest: int) -> DataLossReason:
    """Spark's reason when a start offset is below the partition's earliest offset (records deleted)."""
    return "START_OFFSET_RESET", f"Starting offset for {tp} was {offset} but consumer reset to {earliest}."


def report_data_loss(
    fail: bool,
    tp: TopicPartition,
    lost_start: int,
    lost_end: int | None,
    message: str,
    *,
    reason: DataLossReason,
) -> None:
    """Raise (``failOnDataLoss=true``) or warn about missing records ``[lost_start, lost_end)`` of ``tp``.

    The error names topic, partition and range, then carries Spark's ``[KAFKA_DATA_LOSS.<reason>]`` message.

    Raises:
        SourceOffsetError: when ``fail`` is true.
    """
    missing = f"[{lost_start}, {lost_end})" if lost_end is not None else f"from {lost_start}"
    text = f"data loss in topic {tp.topic!r} partition {tp.partition}: offsets {missing} are gone: {message}."
    if fail:
        sub_class, why = reason
        raise SourceOffsetError(f"{text}\n[KAFKA_DATA_LOSS.{sub_class}] {_SPARK_DATA_LOSS} {why}")
    log.warning("%s %s", text, _WARN_HINT)


def resolve_start(
    start: PartitionOffsets,
    latest: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    by_timestamp: Mapping[TopicPartition, int | None] | None = None,
) -> PartitionOffsets:
    """Replace the markers of a stream's initial offsets: -1 (latest) by ``latest``, -2 (earliest) by ``earliest``,
    :data:`BY_TIMESTAMP` by ``by_timestamp`` (the timestamp lookup bounded by ``latest``; no match: ``latest``).

    Marked partitions missing from the mapping they need are left out (they have no records in the batch).
    """
    resolved: dict[TopicPartition, int] = {}
    for tp, offset in start.offsets.items():
        if offset == BY_TIMESTAMP:
            if tp in latest:
                match = (by_timestamp or {}).get(tp)
                resolved[tp] = latest[tp] if match is None else min(match, latest[tp])
        elif offset == LATEST:
            if tp in latest:
                resolved[tp] = latest[tp]
        elif offset == EARLIEST:
            if tp in earliest:
                resolved[tp] = earliest[tp]
        else:
            resolved[tp] = offset
    return PartitionOffsets(resolved)


def rate_limit(
    limit: int,
    start: PartitionOffsets,
    latest: Mapping[TopicPartition, int],
    earliest_of_new: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Cap the end offsets so a batch holds about ``limit`` records, split in proportion to each backlog.

    Like Spark: a partition's share is ``limit * backlog / total``, rounded down, but a share below one record
    is rounded up so small partitions are not starved (the batch may then exceed ``limit`` by a few records).
    Partitions new since ``start`` begin at ``earliest_of_new``.
    """
    begins = {tp: start.get(tp, earliest_of_new.get(tp)) for tp in latest}
    sizes = {tp: end - begin for tp, end in latest.items() if (begin := begins[tp]) is not None and end - begin > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    capped: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        if tp not in sizes:
            capped[tp] = end
            continue
        share = limit * sizes[tp] / total
        records = math.ceil(share) if share < 1 else math.floor(share)
        begin = begins[tp]
        assert begin is not None
        capped[tp] = min(end, begin + records)
    return capped


def plan_ranges(
    start: PartitionOffsets,
    end: PartitionOffsets,
    earliest: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool,
    min_partitions: int | None,
) -> list[OffsetRange]:
    """The offset ranges of one batch ``[start, end)``, after data-loss checks and ``minPartitions`` splits.

    Args:
        start: offsets the batch starts from (the previous batch's end); partitions missing here are new.
        end: offsets the batch ends at.
        earliest: earliest available offset of the partitions in ``end`` (partitions missing here are gone).
        fail_on_data_loss: raise instead of warning when records are gone.
        min_partitions: split ranges so the batch has about this many.

    Raises:
        SourceOffsetError: records are gone and ``fail_on_data_loss`` is true.
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(start.partitions() - end.partitions()):
        report_data_loss(
            fail_on_data_loss,
            tp,
            start[tp],
            None,
            f"partition {tp} no longer exists",
            reason=partitions_deleted(tp),
        )
    for tp in sorted(end.partitions()):
        until = end[tp]
        if tp not in earliest:
            report_data_loss(
                fail_on_data_loss,
                tp,
                start.get(tp, 0) or 0,
                until,
                f"partition {tp} no longer exists",
                reason=partitions_deleted(tp),
            )
            continue
        first = earliest[tp]
        if tp not in start:
            begin = first
            if first != 0:
                report_data_loss(
                    fail_on_data_loss,
                    tp,
                    0,
                    first,
                    f"new partition {tp} starts at offset {first} instead of 0",
                    reason=added_partition_not_at_zero(tp, first),
                )
        else:
            begin = start[tp]
            if until < begin:
                report_data_loss(
                    fail_on_data_loss,
                    tp,
                    until,
                    begin,
                    f"the end offset of {tp} went back from {begin} to {until}, the topic was probably recreated",
                    reason=offset_changed(tp, begin, until),
                )
                begin = first
            elif begin < first:
                report_data_loss(
                    fail_on_data_loss,
                    tp,
                    begin,
                    first,
                    f"the batch starts {tp} at offset {begin}, but the earliest available offset is {first}",
                    reason=start_offset_reset(tp, begin, first),
                )
                begin = first
        if until > begin:
            ranges.append(OffsetRange(tp, begin, until))
    return split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split large ranges so there are about ``min_partitions`` of them (Spark's ``minPartitions``).

    Ranges too small to earn more than one part keep one; the others share the remaining parts in proportion
    to their size. Without ``min_partitions``, or with enough ranges already, nothing changes.
    """
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)

    def parts_for(size: int, of_total: int, wanted: int) -> int:
        return max(math.floor(size / of_total * wanted + 0.5), 1)  # Scala's math.round: half up

    unsplit = {r for r in ranges if parts_for(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in unsplit)
    split_wanted = max(min_partitions - len(unsplit), 1)
    result: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r in unsplit else parts_for(r.size, split_total, split_wanted)
        remaining = r.size
        begin = r.start
        for index in range(parts):
            length = remaining // (parts - index)
            remaining -= length
            until = min(begin + length, r.end)
            if until > begin:
                result.append(OffsetRange(r.tp, begin, until))
            begin = until
    return result


__all__ = [
    "BY_TIMESTAMP",
    "DataLossReason",
    "added_partition_not_at_zero",
    "offset_changed",
    "partitions_deleted",
    "plan_ranges",
    "rate_limit",
    "report_data_loss",
    "resolve_start",
    "split_ranges",
    "start_offset_reset",
]
