"""A drift report as GitHub-flavoured Markdown: tables fit for a PR, an issue or a summary."""

from __future__ import annotations

from reconciler.planning.drift import STATUSES, DriftReport, ResourceDrift
from reconciler.render.drift_text import headline
from reconciler.render.markdown import cell, code

ICONS = {
    "in_sync": "✅",
    "drifted": "⚠️",
    "missing": "🆕",
    "unmanaged": "❔",
    "orphaned": "🗑️",
    "foreign": "🔒",
}


def summary_table(report: DriftReport) -> list[str]:
    summary = report.summary
    coverage = "n/a" if summary.coverage is None else f"{summary.coverage:.0%}"
    header = "| " + " | ".join(s.replace("_", " ") for s in STATUSES) + " | coverage |"
    rule = "|" + "---:|" * (len(STATUSES) + 1)
    row = "| " + " | ".join(str(summary.counts[s]) for s in STATUSES) + f" | {coverage} |"
    return [header, rule, row]


def resource_rows(resources: list[ResourceDrift]) -> list[str]:
    rows = [
        "| status | kind | name | field | declared | live | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in resources:
        status = f"{ICONS[r.status]} {r.status}"
        source = code(r.source) if r.source else ""
        if not r.fields:
            rows.append(f"| {status} | {r.kind} | {code(r.label)} |  |  |  | {source} |")
        for change in r.fields:
            declared, live = (code(text) for text in r.shown(change))
            rows.append(
                f"| {status} | {r.kind} | {code(r.label)} | {code(change.path)} "
                f"| {declared} | {live} | {source} |"
            )
    return rows


def render_drift_markdown(report: DriftReport, *, title: str = "JetStream drift") -> str:
    """Headline, a summary table and one table of every resource not in sync."""
    lines = [f"## {title}", "", f"**{headline(report)}**", "", *summary_table(report)]
    differing = [r for r in report.resources if r.status != "in_sync"]
    if differing:
        lines += ["", *resource_rows(differing)]
    replace = [r for r in differing if r.reasons]
    if replace:
        lines += ["", "Cannot be undone in place (apply would replace the resource):", ""]
        lines += [f"- {r.kind} {code(r.label)}: {cell('; '.join(r.reasons))}" for r in replace]
    return "\n".join(lines) + "\n"
