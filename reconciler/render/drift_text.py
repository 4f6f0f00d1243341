"""A drift report as plain text for a terminal or a CI log."""

from __future__ import annotations

from reconciler.model.values import printable
from reconciler.planning.drift import DriftReport, ResourceDrift

SYMBOLS = {
    "in_sync": " ",
    "drifted": "~",
    "missing": "+",
    "unmanaged": "?",
    "orphaned": "!",
    "foreign": "=",
}
NOTES = {
    "drifted": "drifted",
    "missing": "missing: declared, not on the server",
    "unmanaged": "unmanaged: on the server, declared by no spec",
    "orphaned": "orphaned: managed by reconcile, but no spec declares it any more",
    "foreign": "managed by another owner; never touched",
}


def headline(report: DriftReport) -> str:
    summary = report.summary
    coverage = "n/a" if summary.coverage is None else f"{summary.coverage:.0%}"
    if not report.has_drift:
        return f"No drift: {summary.counts['in_sync']} resource(s) in sync (coverage {coverage})."
    total = sum(summary.counts.values())
    return f"Drift: {summary.drift} of {total} resource(s) differ (coverage {coverage})."


def counts_line(report: DriftReport) -> str:
    counts = report.summary.counts
    return " · ".join(f"{status.replace('_', ' ')} {n}" for status, n in counts.items())


def resource_lines(resource: ResourceDrift) -> list[str]:
    where = f"  ({resource.source})" if resource.source else ""
    lines = [
        f"{SYMBOLS[resource.status]} {resource.kind} {resource.label}: "
        f"{NOTES[resource.status]}{where}"
        + (f" (owner {resource.owner})" if resource.owner else "")
    ]
    for change in resource.fields:
        declared, live = resource.shown(change)
        lines.append(f"    {change.path}: declared {declared}, live {live}")
    lines.extend(f"    cannot be updated in place: {reason}" for reason in resource.reasons)
    return lines


def render_drift_text(report: DriftReport) -> str:
    """Headline, counts, then every resource that is not in sync (names, values and file
    names escaped: :func:`printable`)."""
    lines = [headline(report), f"  {counts_line(report)}"]
    for resource in report.resources:
        if resource.status != "in_sync":
            lines.append("")
            lines.extend(printable(line) for line in resource_lines(resource))
    return "\n".join(lines) + "\n"
