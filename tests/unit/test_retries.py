"""sparkonce's simple retry loop (tenacity's, in :func:`sparkonce.retries.call_with_retries`): how many calls, the
pauses asked for, one WARNING line per retry in the counted format, the last error raised as it was. Real
functions and real sleeps of a few milliseconds; no service."""

from __future__ import annotations

import logging

import pytest

from sparkonce.errors import BrokerError, SinkError
from sparkonce.retries import call_with_retries, count_retries

log = logging.getLogger("tests.retries")


class Flaky:
    """Fails with ``errors`` in turn, then returns ``"done"``; records each call and each ``before_retry``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.prepared = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"

    def prepare(self) -> None:
        self.prepared += 1


def _call(flaky: Flaky, attempts: int, pauses: list[int]) -> str:
    def pause(attempt: int) -> float:
        pauses.append(attempt)
        return 0.001 * attempt

    return call_with_retries(
        flaky,
        logger=log,
        kind="kafka_offsets",
        retry_on=BrokerError,
        attempts=attempts,
        pause=pause,
        message=lambda attempt, err, seconds: f"attempt {attempt} of {attempts} failed ({err}); again in {seconds}s",
        before_retry=flaky.prepare,
    )


def test_an_error_it_retries_is_logged_each_time_and_the_next_attempt_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tests.retries")
    flaky = Flaky(BrokerError("refused"), BrokerError("reset"))
    pauses: list[int] = []
    assert _call(flaky, 3, pauses) == "done"
    assert (flaky.calls, flaky.prepared, pauses) == (3, 2, [1, 2])
    assert caplog.messages == [
        "sparkonce retry kafka_offsets: attempt 1 of 3 failed (refused); again in 0.001s",
        "sparkonce retry kafka_offsets: attempt 2 of 3 failed (reset); again in 0.002s",
    ]
    assert count_retries(caplog.messages) == {"kafka_offsets": 2}


def test_the_last_attempts_error_is_raised_as_it_was(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tests.retries")
    last = BrokerError("still down")
    flaky = Flaky(BrokerError("down"), last)
    with pytest.raises(BrokerError, match=r"^still down$") as raised:
        _call(flaky, 2, [])
    assert raised.value is last
    assert (flaky.calls, flaky.prepared) == (2, 1)  # no retry, nor its log line, after the last attempt
    assert count_retries(caplog.messages) == {"kafka_offsets": 1}


def test_another_error_passes_through_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tests.retries")
    flaky = Flaky(SinkError("not a broker's"))
    with pytest.raises(SinkError, match=r"^not a broker's$"):
        _call(flaky, 5, [])
    assert (flaky.calls, flaky.prepared) == (1, 0) and caplog.messages == []
