"""The clock of the Delta log's retention rules: expired log cleanup and checkpoint tombstones.

Delta's ``DeltaLog`` takes a ``Clock`` so that its own tests can age a table by days in a second (``ManualClock``).
sparkonce's retention rules read the time here for the same reason: a benchmark or a test runs a stream's days in an
hour by setting one environment variable before Spark starts (so that every Python process Spark starts for the
query, the sink's commit runner included, inherits it)::

    SPARKONCE_RETENTION_CLOCK=ORIGIN_MS:RATE

From ``ORIGIN_MS`` (ms since the epoch) the clock runs ``RATE`` times as fast as the real one (``RATE`` >= 1): the
time is ``ORIGIN_MS + RATE * (real - ORIGIN_MS)``. The times the rules compare with it, log files' modification times
and ``remove`` actions' ``deletionTimestamp``, are mapped the same way (:func:`clock_ms`), so a table ages as if
its writes had been spread over the longer time. Unset (the default, and the only setting for production) the clock
is the real one. Nothing but the retention rules reads it: commit timestamps, ``txn.lastUpdated`` and the doctor's
checks stay on the real clock.
"""

from __future__ import annotations

import os
import time

from sparkonce.errors import OptionError

__all__ = ["CLOCK_VARIABLE", "clock_ms", "earliest_real_ms", "now_ms"]

CLOCK_VARIABLE = "SPARKONCE_RETENTION_CLOCK"


def _warp() -> tuple[int, float] | None:
    """(origin ms, rate) from :data:`CLOCK_VARIABLE`, None when it is unset or empty."""
    raw = os.environ.get(CLOCK_VARIABLE, "").strip()
    if not raw:
        return None
    origin, sep, rate = raw.partition(":")
    try:
        parsed = (int(origin), float(rate))
    except ValueError:
        parsed = None
    if not sep or parsed is None or not parsed[1] >= 1.0 or parsed[1] == float("inf"):
        raise OptionError(
            CLOCK_VARIABLE, raw, "not ORIGIN_MS:RATE (an integer time in ms since the epoch, a rate >= 1)"
        )
    return parsed


def clock_ms(real_ms: int) -> int:
    """``real_ms`` (a real time: a file's modification time, a ``deletionTimestamp``) on the retention clock.

    Raises:
        OptionError: :data:`CLOCK_VARIABLE` is set but malformed.
    """
    warp = _warp()
    if warp is None:
        return real_ms
    origin, rate = warp
    return real_ms if real_ms <= origin else origin + int((real_ms - origin) * rate)


def now_ms() -> int:
    """The retention clock's current time in ms since the epoch.

    Raises:
        OptionError: :data:`CLOCK_VARIABLE` is set but malformed.
    """
    return clock_ms(int(time.time() * 1000))


def earliest_real_ms(at_clock_ms: int) -> int:
    """The earliest real time (ms) that :func:`clock_ms` maps to ``at_clock_ms`` or later (the clock only moves
    forward): ``clock_ms(t) >= at_clock_ms`` exactly when ``t >= earliest_real_ms(at_clock_ms)``, so a column of real
    times is compared with one number.

    Raises:
        OptionError: :data:`CLOCK_VARIABLE` is set but malformed.
    """
    warp = _warp()
    if warp is None:
        return at_clock_ms
    origin, rate = warp
    if at_clock_ms <= origin:
        return at_clock_ms
    found = origin + max(1, int((at_clock_ms - origin) / rate))
    while found > origin + 1 and clock_ms(found - 1) >= at_clock_ms:  # float rounding: step to the exact edge
        found -= 1
    while clock_ms(found) < at_clock_ms:
        found += 1
    return found
