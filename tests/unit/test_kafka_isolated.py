"""A call in a forked child (sparkonce.kafka.isolated): its value, its exception, or how it died."""

from __future__ import annotations

import os
import signal

import pytest

from sparkonce.errors import BrokerError
from sparkonce.kafka.isolated import ChildOutcome, call_forked, can_isolate

pytestmark = pytest.mark.skipif(not can_isolate(), reason="needs os.fork")


def test_the_childs_value_comes_back() -> None:
    assert call_forked(lambda: {"a": [1, 2]}, timeout_s=30) == ChildOutcome(value={"a": [1, 2]})


def test_the_childs_exception_is_raised_here() -> None:
    def fail() -> None:
        raise BrokerError("no answer from the broker")

    with pytest.raises(BrokerError, match="no answer from the broker"):
        call_forked(fail, timeout_s=30)


def test_a_child_killed_by_a_signal_is_reported_not_fatal() -> None:
    def crash() -> None:
        os.kill(os.getpid(), signal.SIGSEGV)  # what librdkafka does to a fetch of a deleted topic

    assert call_forked(crash, timeout_s=30) == ChildOutcome(died="crashed (SIGSEGV)")


def test_a_child_that_never_answers_is_killed() -> None:
    def hang() -> None:
        signal.pause()

    assert call_forked(hang, timeout_s=0.5) == ChildOutcome(died="gave no answer within 0.5 s")
