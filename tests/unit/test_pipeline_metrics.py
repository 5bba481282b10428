"""Prometheus metrics of ``sparkonce run`` (through prometheus_client): the text exposition format 0.0.4, parsed
back line by line (HELP and TYPE before each family's samples, ``name{labels} value``, label values escaped), the
atomic file and the HTTP endpoint."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from sparkonce.pipeline.lag import PartitionLag
from sparkonce.pipeline.metrics import (
    CONTENT_TYPE,
    Family,
    MetricsServer,
    PipelineMetrics,
    Sample,
    pipeline_families,
    render,
)
from sparkonce.pipeline.run import StageProgress

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^(?P<name>{_NAME})(?:\{{(?P<labels>.*)\}})? (?P<value>\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')

Key = tuple[str, tuple[tuple[str, str], ...]]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse_exposition(text: str) -> dict[Key, float]:
    """Parse the text format strictly: every family has ``# HELP`` then ``# TYPE`` before its samples, every
    sample line is ``name{label="value",...} value``; returns ``(name, labels sorted by name) -> value``."""
    assert text.endswith("\n"), "the exposition ends with a line feed"
    samples: dict[Key, float] = {}
    helped: set[str] = set()
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in helped, f"HELP twice for {name}"
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helped and name not in typed, line
            assert kind in ("counter", "gauge"), line
            typed[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"not a sample line: {line!r}"
        name = match.group("name")
        assert name in typed, f"sample before its TYPE: {line!r}"
        labels: list[tuple[str, str]] = []
        rest = match.group("labels") or ""
        position = 0
        while position < len(rest):
            label = _LABEL.match(rest, position)
            assert label is not None, f"bad labels in {line!r}"
            labels.append((label.group(1), _unescape(label.group(2))))
            position = label.end()
        key = (name, tuple(sorted(labels)))
        assert key not in samples, f"sample twice: {line!r}"
        samples[key] = float(match.group("value"))
    return samples


def _progress(stage: str, **kwargs: object) -> StageProgress:
    base: dict[str, object] = {
        "stage": stage,
        "query_name": f"p.{stage}",
        "active": True,
        "batch_id": 7,
        "batch_rows": 50,
        "rows_per_second": 12.5,
        "total_rows": 400,
        "batches": 8,
    }
    base.update(kwargs)
    return StageProgress(**base)  # type: ignore[arg-type]


def test_pipeline_metrics_parse_back_with_their_labels_and_values() -> None:
    progress = (
        _progress(
            "raw",
            partition_lag=(PartitionLag("t", 0, 100, 130), PartitionLag("t", 1, 90, 90), PartitionLag("t", 2, 5, None)),
            consumer_group="sparkonce-quick-raw",
            batch_ms_p50=250.0,
            batch_ms_p95=1500.0,
        ),
        _progress("bronze", active=False, versions_behind=3, bytes_behind=123_456),
        _progress("gold", batch_id=None, batch_rows=0, total_rows=0, batches=0),
    )
    samples = parse_exposition(render(pipeline_families("quick", progress)))
    raw, bronze, gold = ((("pipeline", "quick"), ("stage", s)) for s in ("raw", "bronze", "gold"))
    assert samples[("sparkonce_stage_up", raw)] == 1 and samples[("sparkonce_stage_up", bronze)] == 0
    assert samples[("sparkonce_stage_input_rows_total", raw)] == 400
    assert samples[("sparkonce_stage_batches_total", raw)] == 8
    assert samples[("sparkonce_stage_last_batch_id", raw)] == 7
    assert ("sparkonce_stage_last_batch_id", gold) not in samples  # no batch yet: no sample
    assert samples[("sparkonce_stage_batch_duration_p50_seconds", raw)] == 0.25
    assert samples[("sparkonce_stage_batch_duration_p95_seconds", raw)] == 1.5
    assert samples[("sparkonce_stage_processed_rows_per_second", raw)] == 12.5
    lag = {dict(k[1])["partition"]: v for k, v in samples.items() if k[0] == "kafka_consumergroup_lag"}
    assert lag == {"0": 30, "1": 0}  # partition 2's end is unknown: no sample
    groups = {(dict(k[1])["consumergroup"], dict(k[1])["topic"]) for k in samples if k[0] == "kafka_consumergroup_lag"}
    assert groups == {("sparkonce-quick-raw", "t")}
    position = {dict(k[1])["partition"]: v for k, v in samples.items() if k[0] == "kafka_consumergroup_current_offset"}
    assert position == {"0": 100, "1": 90, "2": 5}
    assert samples[("sparkonce_delta_versions_behind", bronze)] == 3
    assert samples[("sparkonce_delta_bytes_behind", bronze)] == 123_456
    assert ("sparkonce_delta_versions_behind", raw) not in samples


def test_label_values_and_help_are_escaped() -> None:
    nasty = 'a "quoted" back\\slash\nnew line'
    text = render([Family("x_total", "counter", "help with \\ and\nline", (Sample((("stage", nasty),), 2.0),))])
    assert text.splitlines()[0] == "# HELP x_total help with \\\\ and\\nline"
    assert 'x_total{stage="a \\"quoted\\" back\\\\slash\\nnew line"} 2.0' in text.splitlines()
    assert parse_exposition(text) == {("x_total", (("stage", nasty),)): 2.0}


def test_special_values_and_empty_families() -> None:
    text = render(
        [
            Family("a", "gauge", "A.", (Sample((), float("nan")), Sample((("k", "v"),), float("inf")))),
            Family("b", "gauge", "Nothing yet.", ()),
            Family("c", "gauge", "C.", (Sample((), 0.125), Sample((("k", "n"),), float("-inf")))),
        ]
    )
    assert text == (
        '# HELP a A.\n# TYPE a gauge\na NaN\na{k="v"} +Inf\n# HELP c C.\n# TYPE c gauge\nc 0.125\nc{k="n"} -Inf\n'
    )
    assert render([Family("b", "gauge", "Nothing yet.", ())]) == ""


def _gauge(value: float) -> Family:
    return Family("a", "gauge", "A.", (Sample((), value),))


def test_metrics_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "sparkonce.prom"
    metrics = PipelineMetrics()
    metrics.update([_gauge(1)])
    metrics.write_file(target)
    metrics.update([_gauge(2)])
    metrics.write_file(target)
    assert target.read_text(encoding="utf-8") == "# HELP a A.\n# TYPE a gauge\na 2.0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sparkonce.prom"]


def test_http_endpoint_serves_the_latest_text_on_metrics_only() -> None:
    metrics = PipelineMetrics()
    server = MetricsServer(metrics.registry, 0)
    try:
        metrics.update([_gauge(3)])
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            assert response.read().decode("utf-8") == "# HELP a A.\n# TYPE a gauge\na 3.0\n"
        metrics.update([_gauge(4)])  # each scrape collects the latest snapshot
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
            assert response.read().decode("utf-8") == "# HELP a A.\n# TYPE a gauge\na 4.0\n"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=10)
        except urllib.error.HTTPError as err:
            assert err.code == 404
        else:
            raise AssertionError("/other must be 404")
    finally:
        server.close()
