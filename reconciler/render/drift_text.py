"""A drift report as plain text for a terminal or a CI log."""

from __future__ import annotations

from collections import Counter

from reconciler.model.values import printable
from reconciler.planning.drift import DriftReport, ResourceDrift, Status

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


#: Statuses whose rows fold into a count per kind when there are more than FOLD_OVER of
#: them (names with ``--full``, in the JSON report, or behind ``<details>`` in Markdown).
FOLDED = ("unmanaged", "foreign")
FOLD_OVER = 50
#: What the coverage figure measures, wherever it is shown.
COVERAGE_MEANS = "live resources declared by a spec"


def coverage_text(report: DriftReport) -> str:
    """``coverage 60% (3 of 5 live resources declared by a spec)``."""
    summary = report.summary
    if summary.coverage is None:
        return "coverage n/a (the server holds nothing)"
    present = summary.counts["in_sync"] + summary.counts["drifted"]
    return f"coverage {summary.coverage:.0%} ({present} of {summary.live} {COVERAGE_MEANS})"


def headline(report: DriftReport) -> str:
    summary = report.summary
    coverage = coverage_text(report)
    if not report.has_drift:
        return f"No drift: {summary.counts['in_sync']} resource(s) in sync; {coverage}."
    total = sum(summary.counts.values())
    return f"Drift: {summary.drift} of {total} resource(s) differ; {coverage}."


def counts_line(report: DriftReport) -> str:
    counts = report.summary.counts
    return " · ".join(f"{status.replace('_', ' ')} {n}" for status, n in counts.items())


def hidden_lines(report: DriftReport) -> list[str]:
    """One line per ignore rule that hid something: ``1 hidden by rule RULE (FILE:LINE)``."""
    return [
        f"{h.count} resource(s) had fields hidden by rule {h.label}"
        if h.fields
        else f"{h.count} hidden by rule {h.label}"
        for h in report.hidden
    ]


def folded(report: DriftReport, status: Status) -> bool:
    """Whether ``status``'s resources show as counts per kind (more than FOLD_OVER)."""
    return status in FOLDED and report.summary.counts[status] > FOLD_OVER


def per_kind(resources: list[ResourceDrift]) -> dict[str, list[ResourceDrift]]:
    """Resources by kind, in the report's order."""
    kinds: dict[str, list[ResourceDrift]] = {}
    for resource in resources:
        kinds.setdefault(resource.kind, []).append(resource)
    return kinds


def owners(resources: list[ResourceDrift]) -> str:
    """``team-a 50, team-b 30``: how many resources each owner manages, most first."""
    counted = Counter(r.owner or "?" for r in resources)
    return ", ".join(f"{owner} {n}" for owner, n in sorted(counted.items(), key=_most_first))


def _most_first(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def fold_lines(status: str, resources: list[ResourceDrift]) -> list[str]:
    """A count line per kind for a folded status."""
    lines = []
    for kind, members in per_kind(resources).items():
        line = f"{SYMBOLS[status]} {len(members)} {kind}(s) {NOTES[status]}"
        if status == "foreign":
            line += f" (owners: {owners(members)})"
        lines.append(line + " (names: --full or --format json)")
    return lines


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


def render_drift_text(report: DriftReport, *, full: bool = False) -> str:
    """Headline, counts, what ignore rules hid, then every resource that is not in sync;
    more than :data:`FOLD_OVER` unmanaged or foreign resources as a count per kind
    unless ``full`` (names, values and file names escaped: :func:`printable`)."""
    lines = [headline(report), f"  {counts_line(report)}"]
    lines += [f"  {printable(line)}" for line in hidden_lines(report)]
    shown_folds: set[Status] = set()
    for resource in report.resources:
        status = resource.status
        if status == "in_sync" or status in shown_folds:
            continue
        lines.append("")
        if not full and folded(report, status):
            shown_folds.add(status)
            members = report.with_status(status)
            lines.extend(printable(line) for line in fold_lines(status, members))
            continue
        lines.extend(printable(line) for line in resource_lines(resource))
    return "\n".join(lines) + "\n"
