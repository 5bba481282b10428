"""Kafka source offsets in Spark's JSON shape: ``{"topic": {"0": 42, "1": 7}}``.

An offset is the *next offset to read* in a topic-partition; a batch reads ``[start, end)`` per partition.
In ``startingOffsets`` / ``endingOffsets`` JSON, ``-2`` means earliest and ``-1`` latest (Spark's convention).

These values are plain data used on the driver (planning) and shipped to executors inside input partitions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkonce.errors import SourceOffsetError

EARLIEST: int = -2
"""Special offset in offset JSON: the partition's earliest available offset."""
LATEST: int = -1
"""Special offset in offset JSON: the partition's end offset (high watermark)."""


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A topic and a partition number (plain data, usable anywhere)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class PartitionOffsets:
    """Offsets per topic-partition, in Spark's Kafka source offset shape.

    Compared as parsed values: two instances are equal when they map the same partitions to the same offsets,
    whatever the key order of the JSON they came from.
    """

    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Freeze a private sorted copy so equality, hashing and JSON output do not depend on insertion order.
        object.__setattr__(self, "offsets", dict(sorted(self.offsets.items())))

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets)

    def __contains__(self, tp: object) -> bool:
        return tp in self.offsets

    def __getitem__(self, tp: TopicPartition) -> int:
        return self.offsets[tp]

    def __hash__(self) -> int:
        return hash(tuple(self.offsets.items()))

    def get(self, tp: TopicPartition, default: int | None = None) -> int | None:
        return self.offsets.get(tp, default)

    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self.offsets)

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.offsets})

    def to_json(self) -> dict[str, dict[str, int]]:
        """Return Spark's shape: topic -> {partition as string -> offset}, partitions in numeric order."""
        result: dict[str, dict[str, int]] = {}
        for tp, offset in self.offsets.items():  # sorted by (topic, partition) in __post_init__
            result.setdefault(tp.topic, {})[str(tp.partition)] = offset
        return result

    def dumps(self) -> str:
        """Serialize to the JSON text Spark writes into ``offsets/N``."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(
        cls, data: Any, *, what: str = "offsets", allowed_special: frozenset[int] = frozenset()
    ) -> PartitionOffsets:
        """Parse Spark's shape from an already-decoded JSON value.

        Args:
            data: a mapping topic -> {partition string -> offset}.
            what: how to name the value in errors (``"offsets"``, ``"startingOffsets"``, ...).
            allowed_special: which special offsets (:data:`EARLIEST`, :data:`LATEST`) may appear; resolved
                offsets
                (checkpoints) allow neither.

        Raises:
            SourceOffsetError: the value is not in Spark's shape or holds a forbidden offset.
        """
        if not isinstance(data, Mapping):
            raise SourceOffsetError(f"{what}: expected a JSON object topic -> {{partition: offset}}, got {data!r}")
        offsets: dict[TopicPartition, int] = {}
        for topic, partitions in data.items():
            if not isinstance(topic, str) or not topic:
                raise SourceOffsetError(f"{what}: topic names must be non-empty strings, got {topic!r}")
            if not isinstance(partitions, Mapping):
                raise SourceOffsetError(
                    f"{what}: topic {topic!r} must map to an object {{partition: offset}}, got {partitions!r}"
                )
            for key, offset in partitions.items():
                try:
                    partition = int(key)
                except (TypeError, ValueError):
                    raise SourceOffsetError(f"{what}: partition {key!r} of topic {topic!r} is not an integer") from None
                if partition < 0:
                    raise SourceOffsetError(f"{what}: partition {key!r} of topic {topic!r} is negative")
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise SourceOffsetError(f"{what}: offset of {topic}-{partition} must be an integer, got {offset!r}")
                if offset < 0 and offset not in allowed_special:
                    raise SourceOffsetError(f"{what}: offset {offset} of {topic}-{partition} is not allowed here")
                offsets[TopicPartition(topic, partition)] = offset
        return cls(offsets)

    @classmethod
    def loads(cls, text: str, *, what: str = "offsets") -> PartitionOffsets:
        """Parse the JSON text of resolved offsets (no special values).

        Raises:
            SourceOffsetError: the text is not JSON or not in Spark's shape.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SourceOffsetError(f"{what}: not valid JSON ({err.msg} at char {err.pos}): {text!r}") from err
        return cls.from_json(data, what=what)

    def replace(self, updates: Mapping[TopicPartition, int]) -> PartitionOffsets:
        """Return a copy with ``updates`` applied."""
        return PartitionOffsets({**self.offsets, **updates})


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``[start, end)`` of one topic-partition: the unit of work of one Spark task."""

    tp: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.tp} [{self.start}, {self.end})"


__all__ = ["EARLIEST", "LATEST", "OffsetRange", "PartitionOffsets", "TopicPartition"]
