"""Findings about Kafka: where the next batch starts per partition, against the broker's earliest and latest
offsets. Runs on the driver (or in the CLI process); the broker is asked through a
:data:`~sparkonce.kafka.watermarks.WatermarkFetcher`.
"""

from __future__ import annotations

from typing import Any

from sparkonce.checkpoint.reader import CheckpointState
from sparkonce.errors import SourceOffsetError
from sparkonce.kafka.offsets import PartitionOffsets, TopicPartition
from sparkonce.kafka.watermarks import WatermarkFetcher
from sparkonce.ops.doctor.report import KafkaPartitionState
from sparkonce.ops.findings import Finding

__all__ = ["kafka_findings", "kafka_next_start"]


def kafka_offsets(value: Any) -> dict[TopicPartition, int] | None:
    """``{TopicPartition: offset}`` if ``value`` is a Kafka source offset (Spark's shape), else ``None``."""
    try:
        parsed = PartitionOffsets.from_json(value, what="checkpoint offsets")
    except SourceOffsetError:
        return None
    if not parsed or any(not isinstance(v, dict) or not v for v in value.values()):
        return None
    return dict(parsed.offsets)


def kafka_next_start(state: CheckpointState) -> dict[TopicPartition, int]:
    """The Kafka offsets the next batch starts from, per topic-partition."""
    lp, lc = state.last_planned, state.last_committed
    if lp is None:
        return {}
    start_batch = lp if (lc is not None and lc >= lp) else lp - 1
    offsets_file = state.offsets.get(start_batch)
    result: dict[TopicPartition, int] = {}
    if offsets_file is not None:
        for source_id in offsets_file.sources:
            parsed = kafka_offsets(offsets_file.source_offset(source_id))
            if parsed:
                result.update(parsed)
    elif start_batch < 0 or start_batch not in state.offset_ids:
        for files in state.sources.values():
            initial = files.get(0)
            parsed = kafka_offsets(initial.offsets) if initial is not None else None
            if parsed:
                result.update(parsed)
    return result


def kafka_findings(state: CheckpointState, fetch: WatermarkFetcher) -> tuple[list[Finding], list[KafkaPartitionState]]:
    starts = kafka_next_start(state)
    if not starts:
        return [
            Finding(
                "kafka-no-offsets",
                "info",
                "no Kafka offsets found in the checkpoint's offsets files; nothing to check against the broker",
                "none needed",
            )
        ], []
    marks = fetch(sorted(starts))
    findings: list[Finding] = []
    states: list[KafkaPartitionState] = []
    for tp, start in sorted(starts.items()):
        topic, partition = tp.topic, tp.partition
        low, high = marks.get(tp, (None, None))
        states.append(KafkaPartitionState(topic, partition, start, low, high))
        if low is None or high is None:
            findings.append(
                Finding(
                    "kafka-partition-missing",
                    "error",
                    f"{topic}-{partition} is in the checkpoint but the broker does not have it",
                    "check the topic was not deleted or recreated with fewer partitions",
                    details={"topic": topic, "partition": partition},
                )
            )
        elif start < low:
            findings.append(
                Finding(
                    "kafka-offsets-expired",
                    "error",
                    f"{topic}-{partition}: the next batch starts at offset {start} but the broker's earliest "
                    f"offset is {low}: offsets {start}-{low - 1} ({low - start} records) were deleted by "
                    "retention before being read: data lost",
                    "raise the topic's retention.ms; restart with failOnDataLoss=false to skip the gap",
                    details={"topic": topic, "partition": partition, "start": start, "earliest": low},
                )
            )
        elif start > high:
            findings.append(
                Finding(
                    "kafka-offsets-ahead",
                    "error",
                    f"{topic}-{partition}: the checkpoint's offset {start} is beyond the broker's latest "
                    f"offset "
                    f"{high}: the topic was recreated or truncated",
                    "use a new checkpoint (and decide how to replay the recreated topic)",
                    details={"topic": topic, "partition": partition, "start": start, "latest": high},
                )
            )
    return findings, states
