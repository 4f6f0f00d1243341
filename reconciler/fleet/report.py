"""``summary.json`` and ``report.html``: the fleet figures, as data and as charts.

The page is self-contained (inline CSS and SVG, no script, no network) so it can be
attached to a CI run and opened anywhere. Every figure has a stable ``id`` and a
``data-value`` so a test (or a scraper) reads the same numbers as ``summary.json``.
Below the charts, a drill-down goes from environment to resource to field (declared and
live values in human units) with native ``<details>`` elements, so it needs no script.
Statuses have the drift page's colours (``reconciler.render.palette``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reconciler.model.values import display, field_label
from reconciler.planning.drift import DRIFT_STATUSES as _DRIFT
from reconciler.planning.drift import LIVE_STATUSES as _LIVE
from reconciler.planning.drift import STATUSES
from reconciler.render.drift_html import escape
from reconciler.render.drift_text import COVERAGE_MEANS
from reconciler.render.palette import STATUS_COLOURS

#: The drift statuses in the order the report shows them (which ones are drift is
#: ``planning.drift``'s rule, not this module's).
DRIFT_STATUSES = tuple(s for s in STATUSES if s in _DRIFT)
#: Other owners' resources: listed, never touched, not drift (a figure and a column).
FOREIGN = "foreign"
#: The statuses of resources a server holds (coverage's denominator).
LIVE_STATUSES = tuple(s for s in STATUSES if s in _LIVE)
COLOURS = STATUS_COLOURS
TITLE = "JetStream fleet drift report"
#: An environment listing at most this many resources shows their drifted fields open.
OPEN_RESOURCES = 50
MAX_BARS = 30
LINE_COLOURS = ("#1e88e5", "#e53935", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41")
_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1100px}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem}
.figures{display:flex;gap:1rem;flex-wrap:wrap}
.figure{border:1px solid #ddd;border-radius:6px;padding:.6rem 1rem;min-width:7rem}
.figure b{display:block;font-size:1.6rem}
table{border-collapse:collapse;margin-top:.5rem}td,th{border:1px solid #ddd;padding:.25rem .6rem}
th{background:#f5f5f5;text-align:left}td.n{text-align:right}
.legend span{display:inline-block;margin-right:1rem}
.legend i,i.dot{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem}
.error{color:#b71c1c}.byline{color:#666;margin-top:-.5rem}
details{margin:.3rem 0}summary{cursor:pointer}details.env>summary{font-weight:600}
details.resource{margin-left:1.2rem}details.resource table{margin:.3rem 0 .6rem 1.2rem}
code{font-family:ui-monospace,monospace;font-size:.85rem;overflow-wrap:anywhere}
.note{color:#666;font-style:italic}
"""
#: What a resource without field rows is, said in the drill-down.
STATUS_NOTES = {
    "missing": "declared, not on the server",
    "unmanaged": "on the server, declared by no spec, not managed by this tool",
    "orphaned": "managed by this tool, declared by no spec any more (prune deletes it)",
}


def write_report(summary: Mapping[str, Any], out: Path) -> None:
    """Write ``OUT/summary.json`` and ``OUT/report.html``."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(render_html(summary), encoding="utf-8")


def render_html(summary: Mapping[str, Any]) -> str:
    totals = summary["totals"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{TITLE}</title><style>",
        _CSS,
        "</style></head><body>",
        f'<h1>{TITLE}: <span id="status">{escape(summary["status"])}</span></h1>',
        _byline(summary),
        _figures(totals, len(summary["by_env"])),
        _legend(),
        *_env_chart(summary["by_env"]),
        _env_table(summary["by_env"]),
        "<h2>Drift by kind</h2>",
        _stacked_bars("chart-kind", _rows(summary["by_kind"])),
        "<h2>Top drifting fields</h2>",
        _field_bars(summary["top_fields"]),
        _history(summary["history"]),
        _drill_down(summary.get("drill_down", {}), summary["by_env"]),
        _backups(summary.get("backups")),
        _problems(summary["errors"], summary["warnings"]),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _byline(summary: Mapping[str, Any]) -> str:
    inputs = summary["inputs"]
    days = inputs["days"]
    span = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}" if days else "no days"
    generated = summary.get("generated_at")
    made = f'generated <time id="generated-at">{escape(generated)}</time> · ' if generated else ""
    return (
        f'<p class=byline id="byline">{made}{len(inputs["environments"])} environment(s), '
        f"snapshots of {escape(span)}, {inputs['records']} records</p>"
    )


def _value(text: str | None, field: Mapping[str, Any], kind: str) -> str:
    """A finding's JSON value in the CLI's human units (already redacted), in the unit
    the spec wrote the field in when it did."""
    if text is None:
        return "(absent)"
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return display(value, path=field["field"], kind=kind, written=field.get("written"))


def _drill_resource(env: str, item: Mapping[str, Any], *, opened_fields: bool) -> str:
    label = f"{item['stream']}/{item['name']}" if item["stream"] else item["name"]
    status, kind = item["status"], item["kind"]
    fields = [f for f in item["fields"] if f["field"]]
    what = f"{len(fields)} field(s)" if fields else STATUS_NOTES.get(status, "")
    rows = "".join(
        f'<tr data-field="{escape(f["field"])}">'
        f"<td><code>{escape(field_label(kind, f['field']))}</code></td>"
        f"<td><code>{escape(_value(f['desired'], f, kind))}</code></td>"
        f"<td><code>{escape(_value(f['live'], f, kind))}</code></td></tr>"
        for f in fields
    )
    table = f"<table><tr><th>field</th><th>declared</th><th>live</th></tr>{rows}</table>"
    opened = " open" if fields and opened_fields else ""
    return (
        f'<details class=resource data-env="{escape(env)}" data-status="{status}" '
        f'data-name="{escape(label)}"{opened}><summary>'
        f'<i class=dot style="background:{COLOURS[status]}"></i>'
        f"{status} {escape(kind)} <code>{escape(label)}</code> "
        f"<span class=note>{escape(what)}</span></summary>"
        f"{table if fields else ''}</details>"
    )


def _drill_down(drill: Mapping[str, Any], by_env: Mapping[str, Mapping[str, Any]]) -> str:
    """Environment → resource → field, the most urgent first; small fleets open."""
    if not drill:
        return ""
    opened = " open" if len(drill) <= 10 else ""
    parts = ["<h2>Which resources drifted where</h2>", '<div id="drill-down">']
    for env, found in drill.items():
        listed = found["resources"]
        counts = by_env.get(env, {})
        said = ", ".join(f"{counts[s]} {s}" for s in DRIFT_STATUSES if counts.get(s))
        more = (
            f" (the first {len(listed)} of {found['total']}; all in OUT/drift)"
            if found["total"] > len(listed)
            else ""
        )
        parts.append(
            f'<details class=env data-env="{escape(env)}"{opened}><summary>{escape(env)}: '
            f"{escape(said)}{more}</summary>"
            + "".join(
                _drill_resource(env, item, opened_fields=len(listed) <= OPEN_RESOURCES)
                for item in listed
            )
            + "</details>"
        )
    parts.append("</div>")
    return "\n".join(parts)


def _figures(totals: Mapping[str, int], envs: int) -> str:
    items = [("environments", envs), *((s, totals[s]) for s in ("in_sync", *DRIFT_STATUSES))]
    items += [("drift", totals["drift"]), ("drifted_fields", totals["drifted_fields"])]
    items += [(FOREIGN, totals.get(FOREIGN, 0))]
    labels = {FOREIGN: "foreign (other owners; never touched)"}
    cells = "".join(
        f"<div class=figure>{escape(labels.get(name, name.replace('_', ' ')))}"
        f'<b id="total-{name}" data-value="{value}">{value}</b></div>'
        for name, value in items
    )
    return f"<div class=figures>{cells}{_coverage(totals)}</div>"


def coverage(totals: Mapping[str, int]) -> float | None:
    """The share of live resources some spec declares (in sync or drifted), as
    ``reconcile drift`` computes it; None when the servers hold nothing."""
    live = sum(int(totals.get(s, 0)) for s in LIVE_STATUSES)
    present = int(totals.get("in_sync", 0)) + int(totals.get("drifted", 0))
    return round(present / live, 4) if live else None


def _coverage(totals: Mapping[str, int]) -> str:
    share = coverage(totals)
    shown = "n/a" if share is None else f"{share:.0%}"
    return (
        f"<div class=figure>coverage ({escape(COVERAGE_MEANS)})"
        f'<b id="coverage" data-value="{"" if share is None else share}">{shown}</b></div>'
    )


def _legend() -> str:
    spans = "".join(
        f'<span><i style="background:{COLOURS[s]}"></i>{s}</span>' for s in DRIFT_STATUSES
    )
    return f"<p class=legend>{spans}</p>"


def _env_chart(by_env: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = sorted(_rows(by_env), key=lambda row: (-int(row[1]["drift"]), row[0]))
    title = "Drift by environment"
    if len(rows) > MAX_BARS:
        title += f" (the {MAX_BARS} most drifted of {len(rows)}; all in the table)"
    return [f"<h2>{title}</h2>", _stacked_bars("chart-env", rows[:MAX_BARS])]


def _rows(table: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(name, counts) for name, counts in table.items() if "drift" in counts]


def _stacked_bars(chart_id: str, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    if not rows:
        return f'<p id="{chart_id}">nothing compared</p>'
    widest = max(1, *(int(c["drift"]) for _, c in rows))
    height, label_w, bar_w = 22, 180, 520
    bars = []
    for i, (name, counts) in enumerate(rows):
        y, x = i * height, float(label_w)
        bars.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{escape(name)}</text>')
        for status in DRIFT_STATUSES:
            value = int(counts.get(status, 0))
            width = bar_w * value / widest
            if value:
                bars.append(
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{height - 6}" '
                    f'fill="{COLOURS[status]}" data-name="{escape(name)}" '
                    f'data-status="{status}" data-value="{value}">'
                    f"<title>{escape(name)} {status}: {value}</title></rect>"
                )
            x += width
        total = int(counts["drift"])
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{total}</text>')
    size = f'width="{label_w + bar_w + 60}" height="{len(rows) * height + 4}"'
    return f'<svg id="{chart_id}" {size} font-size="12">{"".join(bars)}</svg>'


def _env_table(by_env: Mapping[str, Mapping[str, Any]]) -> str:
    columns = ("in_sync", *DRIFT_STATUSES, FOREIGN, "drifted_fields")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("env", "day", "server", "in sync", *DRIFT_STATUSES, FOREIGN, "drifted fields")
    )
    body = []
    for env, row in by_env.items():
        if not row["compared"]:
            cells = "<td colspan=6 class=error>not compared (see errors)</td><td class=n></td>"
        else:
            cells = "".join(
                f'<td class=n data-env="{escape(env)}" data-status="{k}">{row.get(k, 0)}</td>'
                for k in columns
            )
        body.append(
            f"<tr><td>{escape(env)}</td><td>{escape(row['day'])}</td>"
            f"<td>{escape(str(row['server_version'] or '?'))}</td>{cells}</tr>"
        )
    return f'<table id="table-env"><tr>{head}</tr>{"".join(body)}</table>'


def _field_bars(fields: Sequence[Mapping[str, Any]]) -> str:
    if not fields:
        return '<p id="chart-fields">no drifted fields</p>'
    widest = max(int(f["resources"]) for f in fields)
    height, label_w, bar_w = 22, 260, 440
    bars = []
    for i, item in enumerate(fields):
        y, value = i * height, int(item["resources"])
        width = bar_w * value / widest
        name = escape(item["field"])
        bars.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{name}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{width:.1f}" height="{height - 6}" '
            f'fill="{COLOURS["drifted"]}" data-field="{name}" data-value="{value}">'
            f"<title>{name}: {value} resources in {item['envs']} envs</title></rect>"
            f'<text x="{label_w + width + 6:.1f}" y="{y + 15}">{value} ({item["envs"]} envs)</text>'
        )
    size = f'width="{label_w + bar_w + 120}" height="{len(fields) * height + 4}"'
    return f'<svg id="chart-fields" {size} font-size="12">{"".join(bars)}</svg>'


def _history(history: Sequence[Mapping[str, Any]]) -> str:
    days = sorted({h["day"] for h in history})
    if len(days) < 2:
        return ""
    envs = sorted({h["env"] for h in history})
    drift = {(h["env"], h["day"]): int(h["drift"]) for h in history}
    totals = {env: sum(drift.get((env, d), 0) for d in days) for env in envs}
    drawn = sorted(envs, key=lambda env: (-totals[env], env))[: len(LINE_COLOURS)]
    note = "" if len(drawn) == len(envs) else f" (lines: the {len(drawn)} most drifted)"
    return "\n".join(
        [
            f"<h2>History: drift per environment and day{note}</h2>",
            _history_chart(days, sorted(drawn), drift),
            _line_legend(sorted(drawn)),
            _history_table(days, envs, drift),
        ]
    )


def _history_chart(days: list[str], envs: list[str], drift: Mapping[tuple[str, str], int]) -> str:
    width, height, left, bottom = 720, 240, 40, 30
    top = max(max(drift.values(), default=0), 1)
    step = (width - left - 20) / (len(days) - 1)

    def point(i: int, value: int) -> str:
        return f"{left + i * step:.1f},{height - bottom - (height - bottom - 10) * value / top:.1f}"

    lines = [
        f'<text x="{left + i * step:.1f}" y="{height - 10}" text-anchor="middle">{d[5:]}</text>'
        for i, d in enumerate(days)
    ]
    lines.append(f'<text x="4" y="16">{top}</text><text x="4" y="{height - bottom}">0</text>')
    for n, env in enumerate(envs):
        colour = LINE_COLOURS[n % len(LINE_COLOURS)]
        points = " ".join(
            point(i, drift[(env, d)]) for i, d in enumerate(days) if (env, d) in drift
        )
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}" '
            f'data-env="{escape(env)}"><title>{escape(env)}</title></polyline>'
        )
    size = f'width="{width}" height="{height}"'
    return f'<svg id="chart-history" {size} font-size="11">{"".join(lines)}</svg>'


def _line_legend(envs: list[str]) -> str:
    spans = "".join(
        f'<span><i style="background:{LINE_COLOURS[n % len(LINE_COLOURS)]}"></i>'
        f"{escape(env)}</span>"
        for n, env in enumerate(envs)
    )
    return f"<p class=legend>{spans}</p>"


def _history_table(days: list[str], envs: list[str], drift: Mapping[tuple[str, str], int]) -> str:
    head = "<th>env</th>" + "".join(f"<th>{escape(d)}</th>" for d in days)
    rows = []
    for env in envs:
        cells = "".join(
            f'<td class=n data-env="{escape(env)}" data-day="{d}">{drift.get((env, d), "")}</td>'
            for d in days
        )
        rows.append(f"<tr><td>{escape(env)}</td>{cells}</tr>")
    return f'<table id="table-history"><tr>{head}</tr>{"".join(rows)}</table>'


def _problems(errors: Mapping[str, Any], warnings: Sequence[str]) -> str:
    items = [
        f"<li>{escape(b['file'])}:{b['line']}: {escape(b['message'])}</li>"
        for b in errors["bad_records"][:200]
    ]
    more = errors["bad_records_total"] - min(len(errors["bad_records"]), 200)
    if more > 0:
        items.append(f"<li>... and {more} more bad records</li>")
    for env in errors["envs"]:
        when = f" ({env['day']})" if env["day"] else ""
        items += [f"<li>{escape(env['env'])}{when}: {escape(p)}</li>" for p in env["problems"]]
    notes = "".join(f"<li>{escape(w)}</li>" for w in warnings)
    out = []
    if items:
        out.append(
            f'<h2 class=error>Errors ({errors["count"]})</h2><ul id="errors">{"".join(items)}</ul>'
        )
    if notes:
        out.append(f'<h2>Warnings</h2><ul id="warnings">{notes}</ul>')
    return "\n".join(out)


#: Stream rows of the backups table (never backed up first, then the oldest).
BACKUP_ROWS = 200


def _age(seconds: int) -> str:
    """``3 d 4 h``, ``5 h 2 min``, ``40 s``: an age to read, not to compute with."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{secs} s"


def _backup_row(row: Mapping[str, Any]) -> str:
    where = f'data-env="{escape(row["env"])}" data-stream="{escape(row["stream"])}"'
    if row["newest"] is None:
        why = f" ({escape(row['reason'])})" if row["reason"] else ""
        cells = f'<td colspan=3 class=error data-value="never">never backed up{why}</td>'
    else:
        cells = (
            f"<td>{escape(row['newest'])}</td>"
            f'<td class=n data-value="{row["age_seconds"]}">{_age(row["age_seconds"])}</td>'
            f"<td class=n>{row['backups']}</td>"
        )
    return f"<tr {where}><td>{escape(row['env'])}</td><td>{escape(row['stream'])}</td>{cells}</tr>"


def _backups(section: Mapping[str, Any] | None) -> str:
    """The backups table: per environment and stream, the newest backup and its age."""
    if section is None:
        return ""
    rows = section["rows"][:BACKUP_ROWS]
    head = "".join(f"<th>{h}</th>" for h in ("env", "stream", "newest backup", "age", "backups"))
    more = section["streams"] - len(rows)
    note = f"<p class=note>{more} more streams in OUT/backups</p>" if more > 0 else ""
    problems = "".join(f"<li>{escape(p)}</li>" for p in section["problems"])
    return (
        f'<h2>Backups</h2><p id="backups-figures" data-value="{section["never_backed_up"]}">'
        f"{section['manifests']} manifest(s); {section['never_backed_up']} of "
        f"{section['streams']} stream(s) never backed up; ages at each environment's latest "
        f"snapshot</p>"
        f'<table id="table-backups"><tr>{head}</tr>{"".join(_backup_row(r) for r in rows)}</table>'
        + note
        + (f'<ul class=error id="backup-problems">{problems}</ul>' if problems else "")
    )
