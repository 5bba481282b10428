"""The planner refuses a ListOffsets answer that is not an offset (no broker: a stand-in admin client answers)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from sparkonce.errors import BrokerError
from sparkonce.kafka.options import KafkaOptions
from sparkonce.kafka.planner import OffsetPlanner, TopicPartition


class _Admin:
    """Answers every ListOffsets request with ``offset`` (tansu answered -1001 right after a restart)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        answers: dict[Any, Future[Any]] = {}
        for ktp in request:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=self.offset))
            answers[ktp] = future
        return answers


@pytest.mark.parametrize("offset", [-1001, -1])
def test_a_negative_list_offsets_answer_fails_planning(offset: int) -> None:
    options = KafkaOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"})
    planner = OffsetPlanner(options)
    planner._admin = _Admin(offset)  # type: ignore[assignment]  # the stand-in for confluent-kafka's AdminClient
    with pytest.raises(BrokerError, match=rf"ListOffsets\(latest\) of t-0 with {offset}, not an offset"):
        planner.latest([TopicPartition("t", 0)])


def test_an_offset_answer_is_the_candidate_end() -> None:
    options = KafkaOptions.parse(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "confirmLatestOffsets": "false"}
    )
    planner = OffsetPlanner(options)
    planner._admin = _Admin(42)  # type: ignore[assignment]
    assert planner.latest([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 42}
