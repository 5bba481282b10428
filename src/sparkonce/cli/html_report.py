"""Render a :class:`~sparkonce.ops.doctor.DoctorReport` as one self-contained HTML page.

No external assets: inline CSS and an inline SVG timeline of batches (planned, committed, rows, table
versions).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

from sparkonce.ops.doctor import BatchRow, DoctorReport
from sparkonce.ops.findings import SEVERITY_RANK

__all__ = ["render_html", "timeline_svg"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1d232a;max-width:1200px}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f6f8}.error{color:#b00020;font-weight:600}.warning{color:#a65f00;font-weight:600}
.info{color:#006494}.next{background:#f4f6f8;padding:1rem;border-left:4px solid #006494}
code{background:#f4f6f8;padding:0 .2rem}svg text{font-size:10px;fill:#444}
"""


def _esc(value: object) -> str:
    return html.escape("" if value is None else str(value))


def timeline_svg(rows: tuple[BatchRow, ...], *, width: int = 1100) -> str:
    """Return an inline SVG: a column per batch (planned, committed), rows as bars, table versions."""
    if not rows:
        return "<p>No batches.</p>"
    n = len(rows)
    left, top, bar_h, chart_h = 50, 20, 14, 120
    step = max(2.0, (width - left - 10) / n)
    max_rows = max((r.rows or 0) for r in rows) or 1
    height = top + chart_h + 2 * bar_h + 60
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="batch timeline">',
        f'<text x="0" y="{top + chart_h / 2}">rows</text>',
        f'<text x="0" y="{top + chart_h + bar_h}">planned</text>',
        f'<text x="0" y="{top + chart_h + 2 * bar_h + 2}">committed</text>',
    ]
    label_every = max(1, int(n / 20))
    for i, r in enumerate(rows):
        x = left + i * step
        w = max(1.0, step - 1)
        if r.rows:
            h = chart_h * r.rows / max_rows
            parts.append(
                f'<rect x="{x:.1f}" y="{top + chart_h - h:.1f}" width="{w:.1f}" height="{h:.1f}" '
                f'fill="#6c9bd2"><title>batch {r.batch_id}: {r.rows} rows, table versions '
                f"{_esc(list(r.table_versions))}</title></rect>"
            )
        planned_fill = "#2e7d32" if r.planned else "#ccc"
        committed_fill = "#2e7d32" if r.committed else ("#c62828" if r.planned else "#ccc")
        tip = (
            f"batch {r.batch_id}: {'planned' if r.planned else 'no offsets'}, "
            f"{'committed' if r.committed else 'not committed'}; table versions {list(r.table_versions)}"
        )
        parts.append(
            f'<rect x="{x:.1f}" y="{top + chart_h + 4}" width="{w:.1f}" height="{bar_h - 4}" '
            f'fill="{planned_fill}"><title>{_esc(tip)}</title></rect>'
        )
        parts.append(
            f'<rect x="{x:.1f}" y="{top + chart_h + bar_h + 4}" width="{w:.1f}" height="{bar_h - 4}" '
            f'fill="{committed_fill}"><title>{_esc(tip)}</title></rect>'
        )
        if i % label_every == 0 or i == n - 1:
            label = f"{r.batch_id}"
            if r.table_versions:
                label += f"/v{r.table_versions[-1]}"
            parts.append(
                f'<text x="{x:.1f}" y="{top + chart_h + 2 * bar_h + 20}" '
                f'transform="rotate(45 {x:.1f} {top + chart_h + 2 * bar_h + 20})">{_esc(label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: DoctorReport) -> str:
    """Return the whole HTML page for ``report``."""
    when = datetime.fromtimestamp(report.generated_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    findings = sorted(report.findings, key=lambda f: -SEVERITY_RANK[f.severity])
    rows = "".join(
        f'<tr><td class="{f.severity}">{_esc(f.severity)}</td><td><code>{_esc(f.code)}</code></td>'
        f"<td>{_esc(f.message)}</td><td>{_esc(f.fix)}</td></tr>"
        for f in findings
    )
    tables = "".join(
        f"<tr><td>{_esc(t.table_path)}</td><td>{_esc(t.kind)}</td><td>{_esc(t.table_version)}</td>"
        f"<td>{_esc(t.txn_version)}</td><td>{_esc(t.txn_table_version)}</td><td>{t.orphan_files} "
        f"({t.orphan_bytes} bytes)</td><td>{t.damaged_files}</td></tr>"
        for t in report.tables
    )
    kafka = "".join(
        f"<tr><td>{_esc(k.topic)}</td><td>{k.partition}</td><td>{k.next_start_offset}</td>"
        f"<td>{_esc(k.earliest)}</td><td>{_esc(k.latest)}</td></tr>"
        for k in report.kafka
    )
    status = report.severity or "healthy"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sparkonce doctor: {_esc(report.checkpoint_dir)}</title>
<style>{_CSS}</style></head><body>
<h1>sparkonce doctor</h1>
<p>Checkpoint <code>{_esc(report.checkpoint_dir)}</code>, query id <code>{_esc(report.query_id)}</code>,
last planned batch <b>{_esc(report.last_planned)}</b>,
last committed batch <b>{_esc(report.last_committed)}</b>.
Status: <span class="{_esc(report.severity or "info")}">{_esc(status)}</span>. Generated {when}.</p>
<h2>Next start</h2><p class="next">{_esc(report.next_start)}</p>
<h2>Findings ({len(findings)})</h2>
<table><tr><th>severity</th><th>code</th><th>what</th><th>fix</th></tr>
{rows or '<tr><td colspan="4">none</td></tr>'}
</table>
<h2>Timeline of the last {len(report.timeline)} batches</h2>
{timeline_svg(report.timeline)}
<p>Bars: rows written per batch (from the table). Green: planned (offsets) / committed (commits); red: planned
but not committed. Labels: batch id / table version.</p>
<h2>Tables</h2>
<table><tr><th>path</th><th>kind</th><th>table version</th><th>txn version</th><th>txn at table version</th>
<th>unreferenced files</th><th>damaged files</th></tr>{tables or '<tr><td colspan="7">none given</td></tr>'}</table>
<h2>Kafka</h2>
<table><tr><th>topic</th><th>partition</th><th>next start</th><th>earliest</th><th>latest</th></tr>
{kafka or '<tr><td colspan="5">not checked</td></tr>'}</table>
</body></html>
"""
