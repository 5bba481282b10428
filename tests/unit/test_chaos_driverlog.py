"""Retries made visible: sparkonce's retries logged at WARNING under one prefix (also from a process without a
logging configuration, as the Python processes Spark starts for a query are), and the chaos report's counts of
retries by kind and failed passes, read from driver logs written the way the drivers write them."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

from sparkonce.retries import RETRY_KINDS, count_retries, log_retry
from sparkonce_local.chaos.driverlog import REPORTED_KINDS, count_driver_logs, count_log, failed_pass_line

UNCONFIGURED = """
import logging
from sparkonce.retries import log_retry
log = logging.getLogger("sparkonce.kafka.source")
log_retry(log, "kafka_offsets", "attempt %d of %d getting Kafka offsets failed (%s); again in %.1fs", 1, 3, "x", 1.0)
log_retry(log, "delta_commit", "attempt %d of %d lost the race", 1, 100)
log.info("sparkonce retry kafka_offsets: an INFO line never shows")
"""


def _unconfigured_stderr() -> str:
    """What a Python process without a logging configuration writes for two retries (Python's last resort)."""
    done = subprocess.run([sys.executable, "-c", UNCONFIGURED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_retry_is_one_warning_line_with_its_kind_configured_or_not() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("test.retries")
    log.addHandler(handler)
    try:
        for kind in RETRY_KINDS:
            log_retry(log, kind, "attempt %d of %d failed (%s)", 1, 4, "refused")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 3)[2] for line in lines] == ["WARNING"] * len(RETRY_KINDS)
    assert lines[0].endswith("test.retries: sparkonce retry kafka_offsets: attempt 1 of 4 failed (refused)")
    assert count_retries(lines) == {kind: 1 for kind in RETRY_KINDS}
    stderr = _unconfigured_stderr()
    assert stderr.splitlines()[0] == (
        "sparkonce retry kafka_offsets: attempt 1 of 3 getting Kafka offsets failed (x); again in 1.0s"
    )
    assert count_retries(stderr.splitlines()) == {"kafka_offsets": 1, "delta_commit": 1}


def test_the_report_counts_retries_by_kind_and_failed_passes_over_the_driver_logs(tmp_path: Path) -> None:
    first = [
        "26/11/26 01:35:28 WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address",
        *_unconfigured_stderr().splitlines(),
        "26/11/26 04:52:02 ERROR Utils: Aborting task",
        "26/11/26 01:39:52 ERROR DataWritingSparkTask: Aborting commit for partition 1 (task 3, attempt 0, stage 1.0)",
        "26/11/26 01:39:52 ERROR Executor: Exception in task 1.0 in stage 1.0 (TID 3)",
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python "
        "worker: Traceback (most recent call last):",
        "26/11/26 01:39:52 WARN TaskSetManager: Lost task 1.0 in stage 1.0 (TID 3) (192.0.2.2 executor driver): "
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",  # TID 3 again: one failure
        "26/11/26 01:39:55 WARN TaskSetManager: Lost task 0.1 in stage 4.0 (TID 9) (192.0.2.2 executor driver): "
        "TaskKilled (another attempt succeeded)",
        failed_pass_line(3, 15.83, "RuntimeError: query quickstart.postgres failed: Python worker failed"),
        "pass 4 (continuous) done in 31.5s",
    ]
    second = [
        "%4|1795657095.939|REQTMOUT|rdkafka#consumer-83| [thrd:127.0.0.1:38489/bootstrap]: Timed out 5 in-flight",
        "26/11/26 04:52:02 ERROR Executor: Exception in task 0.0 in stage 0.0 (TID 3)",  # another application's TID 3
        "PostgreSQL sink: sparkonce retry postgres_connect: PostgreSQL at 127.0.0.1:5 (db x): connection attempt 1 "
        "of 4 failed (refused); again in 0.5s",
        failed_pass_line(1, 390.4, "StreamingQueryException: [STREAM_FAILED] Query terminated"),
        "a pass 2 failed after 3s quoted in another line is not a failed pass",
        "\udcff binary noise",
    ]
    for index, lines in enumerate((first, second)):
        (tmp_path / "rounds" / f"{index:04d}").mkdir(parents=True)
        (tmp_path / "rounds" / f"{index:04d}" / "driver.log").write_text(
            "\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape"
        )
    assert count_log(first).failed_passes == 1
    counts = count_driver_logs(tmp_path, [0, 1, 2])  # run 2 never wrote a log: nothing counted for it
    assert list(counts.retries_by_kind) == list(REPORTED_KINDS)
    assert counts.retries_by_kind == {"kafka_offsets": 1, "postgres_connect": 1, "delta_commit": 1, "spark_task": 3}
    assert counts.failed_passes == 2
