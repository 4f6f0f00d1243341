"""A drift report as GitHub-flavoured Markdown: tables fit for a PR, an issue or a summary."""

from __future__ import annotations

from reconciler.planning.drift import STATUSES, DriftReport, ResourceDrift, Status
from reconciler.render.drift_text import (
    COVERAGE_MEANS,
    NOTES,
    folded,
    headline,
    hidden_lines,
    owners,
    per_kind,
)
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
    header = (
        "| "
        + " | ".join(s.replace("_", " ") for s in STATUSES)
        + f" | coverage ({COVERAGE_MEANS}) |"
    )
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
            name = code(r.label) + (f" (owner {code(r.owner)})" if r.owner else "")
            rows.append(f"| {status} | {r.kind} | {name} |  |  |  | {source} |")
        for change in r.fields:
            declared, live = (code(text) for text in r.shown(change))
            rows.append(
                f"| {status} | {r.kind} | {code(r.label)} | {code(change.path)} "
                f"| {declared} | {live} | {source} |"
            )
    return rows


def fold(report: DriftReport, status: Status) -> list[str]:
    """A folded status: a count per kind in the ``<summary>``, the names inside."""
    members = report.with_status(status)
    kinds = per_kind(members)
    counts = ", ".join(f"{len(found)} {kind}" for kind, found in kinds.items())
    what = NOTES[status].split(": ", 1)[-1]
    if status == "foreign":
        what += f"; owners: {owners(members)}"
    lines = [
        "<details>",
        f"<summary>{ICONS[status]} {len(members)} {status} ({cell(what)}): {counts}</summary>",
        "",
        "| kind | name |" + (" owner |" if status == "foreign" else ""),
        "|---|---|" + ("---|" if status == "foreign" else ""),
    ]
    for r in members:
        owner = f" {code(r.owner or '')} |" if status == "foreign" else ""
        lines.append(f"| {r.kind} | {code(r.label)} |{owner}")
    return [*lines, "", "</details>"]


def render_drift_markdown(report: DriftReport, *, title: str = "JetStream drift") -> str:
    """Headline, a summary table, what ignore rules hid, and one table of every resource
    not in sync; more than FOLD_OVER unmanaged or foreign resources fold into
    ``<details>`` with a count per kind."""
    lines = [f"## {title}", "", f"**{headline(report)}**", "", *summary_table(report)]
    if report.hidden:
        lines += ["", *(f"- {cell(line)}" for line in hidden_lines(report))]
    folds = [s for s in STATUSES if folded(report, s)]
    differing = [r for r in report.resources if r.status != "in_sync" and r.status not in folds]
    replace = [r for r in differing if r.reasons]
    if replace:  # before the table: a cut comment (render.markdown.fit) keeps them
        lines += ["", "Cannot be undone in place (apply would replace the resource):", ""]
        lines += [f"- {r.kind} {code(r.label)}: {cell('; '.join(r.reasons))}" for r in replace]
    if differing:
        lines += ["", *resource_rows(differing)]
    for status in folds:
        lines += ["", *fold(report, status)]
    return "\n".join(lines) + "\n"
