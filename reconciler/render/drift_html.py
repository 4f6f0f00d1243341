"""A drift report as one self-contained HTML page.

Everything is inline (CSS, a little JavaScript, SVG charts) and a Content-Security-Policy
forbids any network request, so the page can be opened from a CI artifact anywhere. The
figures and charts are rendered here, not by the script, so the page reads the same with
JavaScript off; the script only filters the table (by status, kind and a search text, also
from the URL fragment, e.g. ``#status=drifted&kind=Stream``).

Stable hooks for tests and scrapers: ``#figure-<name>`` elements with ``data-value``
(in_sync, drifted, missing, unmanaged, orphaned, drift, declared, live, coverage), bars with
``data-kind``/``data-field``, ``data-status`` and ``data-value``, table rows
``tr.resource`` with ``data-status``/``data-kind``/``data-name`` (and ``data-owner`` for
another owner's resource), ``#shown-count``, ``#hidden`` (one ``li`` per ignore rule
that hid something, ``data-rule``/``data-value``), and ``body[data-ready]`` once the
script has run. ``#drift-data`` holds the JSON report.
"""

from __future__ import annotations

import html
import json

from reconciler.model.values import inert_json, printable
from reconciler.planning.drift import STATUSES, DriftReport, ResourceDrift
from reconciler.render.drift_text import COVERAGE_MEANS, headline, hidden_lines, per_kind
from reconciler.render.palette import STATUS_COLOURS, STATUS_ORDER

COLORS = STATUS_COLOURS
#: Status groups open when the page opens; the others are collapsed behind their count.
OPEN_GROUPS = ("drifted", "missing")
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
BAR_HEIGHT = 22
CHART_WIDTH = 520
LABEL_WIDTH = 190
LABEL_CHARS = 26  # longer labels keep their end (the field name) behind an ellipsis

STYLE = """
:root { color-scheme: light dark; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0;
  --bg: #ffffff; --card: #f6f8fa; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9198a1;
  --line: #3d444d; --bg: #0d1117; --card: #151b23; } }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  padding: 24px; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.headline { color: var(--muted); margin: 0 0 16px; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(120px, 1fr));
  gap: 10px; margin: 0; }
.figure { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 10px 12px; border-top: 4px solid var(--accent, var(--line)); }
.figure dt { color: var(--muted); font-size: 12px; text-transform: uppercase; }
.figure dd { margin: 2px 0 0; font-size: 26px; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 24px; }
.charts figure { margin: 0; }
figcaption { color: var(--muted); font-size: 12px; text-transform: uppercase; margin: 0 0 6px; }
.chart text { fill: var(--fg); font-size: 12px; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; color: var(--muted); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
  margin-right: 4px; }
.filters { display: flex; gap: 12px; flex-wrap: wrap; align-items: center; margin: 8px 0; }
.filters label { white-space: nowrap; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 6px 8px;
  border-bottom: 1px solid var(--line); }
th { background: var(--card); position: sticky; top: 0; }
td.fields div { font-family: ui-monospace, monospace; font-size: 12px; }
.status { font-weight: 600; }
code { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
.empty { color: var(--muted); font-style: italic; }
.byline { color: var(--muted); margin: -10px 0 16px; font-size: 13px; }
details.group { margin: 10px 0; }
details.group > summary { cursor: pointer; font-weight: 600; padding: 4px 0; }
"""

SCRIPT = """
(function () {
  "use strict";
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr.resource"));
  var boxes = Array.prototype.slice.call(document.querySelectorAll("input[data-filter-status]"));
  var kind = document.getElementById("filter-kind");
  var search = document.getElementById("filter-text");
  var shown = document.getElementById("shown-count");
  var params = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (params.has("status")) {
    var wanted = params.get("status").split(",");
    boxes.forEach(function (b) { b.checked = wanted.indexOf(b.value) >= 0; });
  }
  if (params.has("kind")) { kind.value = params.get("kind"); }
  if (params.has("q")) { search.value = params.get("q"); }
  var groups = Array.prototype.slice.call(document.querySelectorAll("details.group"));
  var filtered = location.hash.length > 1;
  function apply() {
    var on = boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; });
    var text = search.value.trim().toLowerCase();
    var count = 0;
    rows.forEach(function (row) {
      var visible = on.indexOf(row.dataset.status) >= 0 &&
        (!kind.value || row.dataset.kind === kind.value) &&
        (!text || row.textContent.toLowerCase().indexOf(text) >= 0);
      row.hidden = !visible;
      if (visible) { count += 1; }
    });
    groups.forEach(function (group) {
      var any = group.querySelector("tr.resource:not([hidden])") !== null;
      group.hidden = !any;
      if (any && filtered) { group.open = true; }
    });
    shown.textContent = String(count);
    shown.dataset.value = String(count);
  }
  function changed() { filtered = true; apply(); }
  boxes.forEach(function (b) { b.addEventListener("change", changed); });
  kind.addEventListener("change", changed);
  search.addEventListener("input", changed);
  apply();
  document.body.dataset.ready = "true";
})();
"""


def escape(text: str, quote: bool = True) -> str:
    """Text for HTML: control and bidi characters escaped (:func:`printable`: a U+202E
    in a name cannot reorder the page), then HTML's own characters."""
    return html.escape(printable(text), quote=quote)


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def figures(report: DriftReport) -> str:
    """The summary figures, each ``<div class=figure>`` with an id and data-value."""
    summary = report.summary
    items: list[tuple[str, str, str, str]] = [
        (s, s.replace("_", " "), str(summary.counts[s]), COLORS[s]) for s in STATUSES
    ]
    coverage = summary.coverage
    items += [
        ("drift", "drift", str(summary.drift), ""),
        ("declared", "declared", str(summary.declared), ""),
        ("live", "live", str(summary.live), ""),
        (
            "coverage",
            f"coverage ({COVERAGE_MEANS})",
            "n/a" if coverage is None else f"{coverage:.0%}",
            "",
        ),
    ]
    cells = []
    for key, label, shown, color in items:
        raw = summary.coverage if key == "coverage" else shown
        value = "" if raw is None else str(raw)
        style = f' style="--accent: {color}"' if color else ""
        cells.append(
            f'<div class="figure"{style}><dt>{escape(label)}</dt>'
            f'<dd id="figure-{key}" data-value="{_attr(value)}">{escape(shown)}</dd></div>'
        )
    return '<dl class="figures" id="figures">' + "".join(cells) + "</dl>"


def _bar_row(y: int, label: str, segments: list[tuple[str, int, str]], scale: float) -> str:
    """One labelled horizontal bar made of (data-attrs, value, color) segments."""
    shown = label if len(label) <= LABEL_CHARS else "…" + label[-(LABEL_CHARS - 1) :]
    parts = [
        f'<text x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT - 7}" text-anchor="end">'
        f"<title>{escape(label)}</title>{escape(shown)}</text>"
    ]
    x = float(LABEL_WIDTH)
    total = 0
    for attrs, value, color in segments:
        if value <= 0:
            continue
        width = max(value * scale, 2.0)
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y + 2}" width="{width:.1f}" '
            f'height="{BAR_HEIGHT - 4}" fill="{color}" {attrs} data-value="{value}">'
            f"<title>{escape(label)}: {value}</title></rect>"
        )
        x += width
        total += value
    parts.append(f'<text x="{x + 6:.1f}" y="{y + BAR_HEIGHT - 7}">{total}</text>')
    return "".join(parts)


def _svg(chart_id: str, title: str, rows: list[str]) -> str:
    height = max(len(rows), 1) * BAR_HEIGHT + 4
    body = "".join(rows) or (
        f'<text x="{LABEL_WIDTH}" y="{BAR_HEIGHT - 7}" class="empty">nothing to show</text>'
    )
    return (
        f'<svg class="chart" id="{chart_id}" role="img" aria-label="{_attr(title)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{height}" '
        f'viewBox="0 0 {CHART_WIDTH} {height}"><title>{escape(title)}</title>{body}</svg>'
    )


def kind_chart(report: DriftReport) -> str:
    """Stacked bars: for each kind, its resources by status."""
    by_kind = report.summary.by_kind
    widest = max((sum(c.values()) for c in by_kind.values()), default=0)
    scale = (CHART_WIDTH - LABEL_WIDTH - 40) / widest if widest else 0.0
    rows = []
    for index, (kind, counts) in enumerate(by_kind.items()):
        segments = [
            (f'data-kind="{_attr(kind)}" data-status="{s}"', counts[s], COLORS[s]) for s in STATUSES
        ]
        rows.append(_bar_row(index * BAR_HEIGHT, kind, segments, scale))
    return _svg("chart-kind", "Resources by kind and status", rows)


def field_chart(report: DriftReport, *, top: int = 15) -> str:
    """Bars: how many drifted resources differ in each field (the most frequent first)."""
    by_field = list(report.summary.by_field.items())[:top]
    widest = max((n for _, n in by_field), default=0)
    scale = (CHART_WIDTH - LABEL_WIDTH - 40) / widest if widest else 0.0
    rows = [
        _bar_row(
            index * BAR_HEIGHT,
            path,
            [(f'data-field="{_attr(path)}" data-status="drifted"', n, COLORS["drifted"])],
            scale,
        )
        for index, (path, n) in enumerate(by_field)
    ]
    title = "Drifted resources by field"
    if len(report.summary.by_field) > top:
        title += f" (the {top} most frequent of {len(report.summary.by_field)})"
    return _svg("chart-field", title, rows)


def legend() -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{COLORS[s]}"></span>'
        f"{s.replace('_', ' ')}</span>"
        for s in STATUSES
    )
    return f'<div class="legend">{items}</div>'


def filters(report: DriftReport) -> str:
    boxes = "".join(
        f'<label><input type="checkbox" data-filter-status value="{s}" checked> '
        f"{s.replace('_', ' ')} ({report.summary.counts[s]})</label>"
        for s in STATUSES
    )
    kinds = "".join(
        f'<option value="{_attr(k)}">{escape(k)}</option>' for k in report.summary.by_kind
    )
    return (
        f'<div class="filters" id="filters">{boxes}'
        f'<label>kind <select id="filter-kind"><option value="">all</option>{kinds}</select>'
        f'</label><label>search <input type="search" id="filter-text"></label>'
        f'<span>showing <b id="shown-count" data-value="{len(report.resources)}">'
        f"{len(report.resources)}</b> of {len(report.resources)}</span></div>"
    )


def resource_row(resource: ResourceDrift) -> str:
    shown = [(c.path, *resource.shown(c)) for c in resource.fields]
    changes = "".join(
        f"<div><code>{escape(path)}</code>: declared <code>{escape(declared)}</code>, live "
        f"<code>{escape(live)}</code></div>"
        for path, declared, live in shown
    )
    changes += "".join(
        f"<div>cannot be updated in place: {escape(reason)}</div>" for reason in resource.reasons
    )
    owner = ""
    if resource.owner:
        changes += f'<div class="owner">owner <code>{escape(resource.owner)}</code></div>'
        owner = f' data-owner="{_attr(resource.owner)}"'
    return (
        f'<tr class="resource" data-status="{resource.status}"{owner} '
        f'data-kind="{_attr(resource.kind)}" data-name="{_attr(resource.label)}">'
        f'<td class="status" style="color:{COLORS[resource.status]}">'
        f"{resource.status.replace('_', ' ')}</td><td>{escape(resource.kind)}</td>"
        f"<td><code>{escape(resource.label)}</code></td>"
        f'<td class="fields">{changes}</td>'
        f"<td><code>{escape(resource.source or '')}</code></td></tr>"
    )


def resource_table(report: DriftReport) -> str:
    """One collapsible table per status, in :data:`STATUS_ORDER`: drifted and missing
    open, orphaned, unmanaged, foreign and in-sync resources folded behind their count."""
    if not report.resources:
        return '<p class="empty" id="resources">no resources declared or live</p>'
    head = (
        "<thead><tr><th>status</th><th>kind</th><th>name</th><th>differences</th>"
        "<th>source</th></tr></thead>"
    )
    groups = []
    for status in STATUS_ORDER:
        members = report.with_status(status)
        if not members:
            continue
        rows = "".join(resource_row(r) for r in members)
        opened = " open" if status in OPEN_GROUPS else ""
        kinds = ", ".join(f"{len(found)} {kind}" for kind, found in per_kind(members).items())
        groups.append(
            f'<details class="group" data-group="{status}"{opened}>'
            f'<summary><span class="swatch" style="background:{COLORS[status]}"></span>'
            f"{status.replace('_', ' ')} ({len(members)}: {escape(kinds)})</summary>"
            f"<table>{head}<tbody>{rows}</tbody></table></details>"
        )
    return f'<div id="resources">{"".join(groups)}</div>'


def byline(report: DriftReport) -> str:
    """When the report was made and against which server (its address without secrets)."""
    parts = []
    if report.generated_at:
        parts.append(f'generated <time id="generated-at">{escape(report.generated_at)}</time>')
    if report.server_version:
        server = f"nats-server {escape(report.server_version)}"
        if report.server_address:
            server += f' at <code id="server-address">{escape(report.server_address)}</code>'
        parts.append(server)
    return f'<p class="byline" id="byline">{" · ".join(parts)}</p>' if parts else ""


def hidden_list(report: DriftReport) -> str:
    """What each ignore rule hid (``#hidden``, one ``li`` per rule), if any."""
    if not report.hidden:
        return ""
    items = "".join(
        f'<li data-rule="{_attr(h.rule)}" data-value="{h.count}">{escape(line)}</li>'
        for h, line in zip(report.hidden, hidden_lines(report), strict=True)
    )
    return f'<ul class="hidden-rules" id="hidden">{items}</ul>'


def embedded_json(report: DriftReport) -> str:
    """The JSON report in a data block; ``<``, ``>``, ``&`` as JSON escapes, so no value
    can close the block or open another script."""
    text = inert_json(json.dumps(report.to_json(), sort_keys=True))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="drift-data">{text}</script>'


def render_drift_html(report: DriftReport, *, title: str = "JetStream drift report") -> str:
    """The whole page."""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f'<body data-status="{"drift" if report.has_drift else "in_sync"}">'
        f'<h1>{escape(title)}</h1><p class="headline" id="headline">'
        f"{escape(headline(report))}</p>{byline(report)}{hidden_list(report)}"
        f"{figures(report)}"
        '<h2>Drift by kind and by field</h2><div class="charts">'
        "<figure><figcaption>Resources by kind and status</figcaption>"
        f"{kind_chart(report)}{legend()}</figure>"
        "<figure><figcaption>Drifted resources by field</figcaption>"
        f"{field_chart(report)}</figure></div>"
        f"<h2>Resources</h2>{filters(report)}{resource_table(report)}"
        f"{embedded_json(report)}<script>{SCRIPT}</script></body></html>\n"
    )
