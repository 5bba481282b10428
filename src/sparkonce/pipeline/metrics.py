"""Prometheus metrics of a pipeline run by ``sparkonce run``: the text exposition format 0.0.4, written to a file
(atomically, for node_exporter's textfile collector) and/or served on ``http://127.0.0.1:PORT/metrics``. Runs on
the driver; no dependency beyond the standard library.

Every sample carries the labels ``pipeline`` (the pipeline's ``name``) and ``stage``. Kafka lag uses the names of
the Kafka consumer-group exporters (``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset``) and adds
their labels ``consumergroup`` (the group the stage commits its offsets to), ``topic`` and ``partition``. Counters
count from the start of the run (a restart begins at 0 again, as Prometheus expects of a counter).
"""

from __future__ import annotations

import http.server
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sparkonce.pipeline.lag import PartitionLag
    from sparkonce.pipeline.run import StageProgress

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The HTTP content type of the text exposition format."""

MetricType = Literal["counter", "gauge"]


@dataclass(frozen=True)
class Sample:
    """One line of a metric family: its labels (in order) and value."""

    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Family:
    """A metric: name, type, help text and its samples."""

    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...]


def escape_label_value(value: str) -> str:
    """A label value as the exposition format writes it: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """A HELP text as the exposition format writes it: backslash and line feed escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers without a fraction, ``NaN``, ``+Inf``, ``-Inf`` as the format spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The text exposition (format 0.0.4) of ``families``: ``# HELP``, ``# TYPE``, then one line per sample.
    A family without samples is left out."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sample.labels)
            lines.append(
                f"{family.name}{{{labels}}} {format_value(sample.value)}"
                if labels
                else f"{family.name} {format_value(sample.value)}"
            )
    return "\n".join(lines) + "\n" if lines else ""


def pipeline_families(pipeline: str, progress: Sequence[StageProgress]) -> list[Family]:
    """The metric families of one pipeline run's progress (``sparkonce run``'s monitor snapshot)."""

    def per_stage(values: Iterable[tuple[StageProgress, float | None]]) -> tuple[Sample, ...]:
        return tuple(Sample((("pipeline", pipeline), ("stage", p.stage)), float(v)) for p, v in values if v is not None)

    ms = 1000.0

    def per_partition(value: Callable[[PartitionLag], float | None]) -> tuple[Sample, ...]:
        return tuple(
            Sample(
                (
                    ("pipeline", pipeline),
                    ("stage", p.stage),
                    ("consumergroup", p.consumer_group or ""),
                    ("topic", lag.topic),
                    ("partition", str(lag.partition)),
                ),
                float(v),
            )
            for p in progress
            for lag in p.partition_lag
            if (v := value(lag)) is not None
        )

    return [
        Family(
            "sparkonce_stage_up",
            "gauge",
            "1 while the stage's streaming query is active, 0 once it has stopped or finished.",
            per_stage((p, 1.0 if p.active else 0.0) for p in progress),
        ),
        Family(
            "sparkonce_stage_input_rows_total",
            "counter",
            "Input rows of the stage's batches in this run.",
            per_stage((p, p.total_rows) for p in progress),
        ),
        Family(
            "sparkonce_stage_batches_total",
            "counter",
            "Batches (triggers with progress) of the stage in this run.",
            per_stage((p, p.batches) for p in progress),
        ),
        Family(
            "sparkonce_stage_last_batch_id",
            "gauge",
            "The batch_id of the stage's last batch that read rows (or its first batch).",
            per_stage((p, p.batch_id) for p in progress),
        ),
        Family(
            "sparkonce_stage_last_batch_input_rows",
            "gauge",
            "Input rows of that batch.",
            per_stage((p, p.batch_rows) for p in progress if p.batch_id is not None),
        ),
        Family(
            "sparkonce_stage_processed_rows_per_second",
            "gauge",
            "Rows processed per second in that batch.",
            per_stage((p, p.rows_per_second) for p in progress if p.batch_id is not None),
        ),
        Family(
            "sparkonce_stage_batch_duration_p50_seconds",
            "gauge",
            "Median duration of the stage's batches that read rows in this run (Spark's triggerExecution).",
            per_stage((p, None if p.batch_ms_p50 is None else p.batch_ms_p50 / ms) for p in progress),
        ),
        Family(
            "sparkonce_stage_batch_duration_p95_seconds",
            "gauge",
            "95th percentile duration of the stage's batches that read rows in this run.",
            per_stage((p, None if p.batch_ms_p95 is None else p.batch_ms_p95 / ms) for p in progress),
        ),
        Family(
            "kafka_consumergroup_lag",
            "gauge",
            "Kafka records the stage has not read yet: the partition's end offset minus the stage's position "
            "(the name and labels of the Kafka consumer-group exporters).",
            per_partition(lambda lag: lag.lag),
        ),
        Family(
            "kafka_consumergroup_current_offset",
            "gauge",
            "The stage's position in the partition: the next offset its next batch reads (committed to the group).",
            per_partition(lambda lag: lag.position),
        ),
        Family(
            "sparkonce_delta_versions_behind",
            "gauge",
            "Input Delta table versions the stage has not read yet.",
            per_stage((p, p.versions_behind) for p in progress),
        ),
        Family(
            "sparkonce_delta_bytes_behind",
            "gauge",
            "Bytes of the input Delta table's data files the stage has not read yet.",
            per_stage((p, p.bytes_behind) for p in progress),
        ),
    ]


def write_metrics_file(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` atomically: a temporary file in the same directory, then a rename (a reader,
    e.g. node_exporter's textfile collector, never sees a partial file)."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


class MetricsServer:
    """Serves the latest exposition text on ``http://<host>:<port>/metrics`` from a daemon thread. Runs on the
    driver.

    Args:
        port: The TCP port; 0 picks a free one (see :attr:`port`).
        host: The address to listen on (the loopback interface by default: put a proxy in front to expose it).

    Raises:
        OSError: the port cannot be bound (in use, or not allowed).
    """

    def __init__(self, port: int, *, host: str = "127.0.0.1") -> None:
        self._text = ""
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = server.text.encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the library never prints; scrapes are not worth a log line each

        self._httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sparkonce-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._httpd.server_address[1])

    @property
    def text(self) -> str:
        with self._lock:
            return self._text

    def update(self, text: str) -> None:
        """Serve ``text`` from now on."""
        with self._lock:
            self._text = text

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


__all__ = [
    "CONTENT_TYPE",
    "Family",
    "MetricsServer",
    "Sample",
    "escape_help",
    "escape_label_value",
    "format_value",
    "pipeline_families",
    "render",
    "write_metrics_file",
]
