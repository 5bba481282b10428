"""Prometheus metrics of a pipeline run by ``sparkonce run``, through ``prometheus_client`` (the ``metrics``
extra): the text exposition format 0.0.4, written to a file (atomically, for node_exporter's textfile collector)
and/or served on ``http://127.0.0.1:PORT/metrics``. Runs on the driver.

Every sample carries the labels ``pipeline`` (the pipeline's ``name``) and ``stage``. Kafka lag uses the names of
the Kafka consumer-group exporters (``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset``) and adds
their labels ``consumergroup`` (the group the stage commits its offsets to), ``topic`` and ``partition``. Counters
count from the start of the run (a restart begins at 0 again, as Prometheus expects of a counter). Each run's
numbers come from Spark's query progress, so the families are built afresh for each snapshot
(:func:`pipeline_families`) and handed to prometheus_client as a custom collector (:class:`PipelineMetrics`),
rather than kept in prometheus_client's own counters and gauges.
"""

from __future__ import annotations

import os
import threading
import wsgiref.simple_server
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sparkonce.extras import require

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from sparkonce.pipeline.lag import PartitionLag
    from sparkonce.pipeline.run import StageProgress

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The HTTP content type of the text exposition format (prometheus_client's ``CONTENT_TYPE_PLAIN_0_0_4``), served
to a scraper that asks for no other."""

MetricType = Literal["counter", "gauge"]


@dataclass(frozen=True)
class Sample:
    """One sample of a metric family: its labels and value."""

    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Family:
    """A metric: name (a counter's ends with ``_total``), type, help text and its samples."""

    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...]


class PipelineMetrics:
    """The latest snapshot of a run's metric families, in a prometheus_client registry of its own: rendered as
    text (:meth:`text`), written to a textfile (:meth:`write_file`), served over HTTP (:class:`MetricsServer`).
    A family without samples is left out. Runs on the driver; thread-safe (a scrape may come while the run
    updates).

    Raises:
        MissingExtraError: prometheus_client is not installed (``pip install 'sparkonce[metrics]'``).
    """

    def __init__(self) -> None:
        require("metrics", "Prometheus metrics (--metrics-file, --metrics-port)")
        from prometheus_client.registry import CollectorRegistry

        self._families: tuple[Family, ...] = ()
        self._lock = threading.Lock()
        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self._snapshot))

    def update(self, families: Iterable[Family]) -> None:
        """Expose ``families`` from now on (replacing the previous snapshot)."""
        with self._lock:
            self._families = tuple(families)

    def _snapshot(self) -> tuple[Family, ...]:
        with self._lock:
            return self._families

    def text(self) -> str:
        """The text exposition (format 0.0.4) of the snapshot: ``# HELP``, ``# TYPE``, then one line per sample."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")

    def write_file(self, path: str | os.PathLike[str]) -> None:
        """Replace ``path`` with the exposition atomically (a temporary file in the same directory, then a rename:
        a reader, e.g. node_exporter's textfile collector, never sees a partial file).

        Raises:
            OSError: the file cannot be written (the temporary file is removed).
        """
        from prometheus_client import write_to_textfile

        write_to_textfile(os.path.abspath(os.fspath(path)), self.registry)


class _Collector:
    """A prometheus_client collector of the families ``snapshot`` returns. Runs on the driver."""

    def __init__(self, snapshot: Callable[[], tuple[Family, ...]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        for family in self._snapshot():
            if not family.samples:
                continue
            counter = family.type == "counter"
            metric = (CounterMetricFamily if counter else GaugeMetricFamily)(family.name, family.help)
            name = metric.name + "_total" if counter else metric.name  # a counter family's name drops ``_total``
            for sample in family.samples:  # samples of one family may have different labels
                metric.add_sample(name, dict(sample.labels), sample.value)
            yield metric


def render(families: Iterable[Family]) -> str:
    """The text exposition (format 0.0.4) of ``families`` (:meth:`PipelineMetrics.text` of a snapshot)."""
    metrics = PipelineMetrics()
    metrics.update(families)
    return metrics.text()


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


class MetricsServer:
    """Serves a registry's metrics on ``http://<host>:<port>/metrics`` (prometheus_client's WSGI app, from a
    daemon thread; any other path is 404). Runs on the driver.

    Args:
        registry: What to serve (:attr:`PipelineMetrics.registry`), collected at each scrape.
        port: The TCP port; 0 picks a free one (see :attr:`port`).
        host: The address to listen on (the loopback interface by default: put a proxy in front to expose it).

    Raises:
        OSError: the port cannot be bound (in use, or not allowed).
    """

    def __init__(self, registry: CollectorRegistry, port: int, *, host: str = "127.0.0.1") -> None:
        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != "/metrics":
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"only /metrics is served\n"]
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result

        self._httpd = wsgiref.simple_server.make_server(
            host, port, app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sparkonce-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._httpd.server_address[1])

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    """The library never prints: scrapes are not worth a log line each."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


__all__ = [
    "CONTENT_TYPE",
    "Family",
    "MetricsServer",
    "PipelineMetrics",
    "Sample",
    "pipeline_families",
    "render",
]
