"""Policy findings (``Plan.policy``, docs/policy.md) as text and Markdown: one section
every plan and drift renderer appends. Grouped by rule, deny rules first; each rule
lists at most :data:`LIMIT` resources (a rule every one of 21,000 resources breaks
stays a few lines). Names, messages and errors are escaped for their medium."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.values import printable
from reconciler.planning.findings import PolicyFinding

#: Resources listed per rule before "... and N more".
LIMIT = 20


def _by_rule(findings: Sequence[PolicyFinding]) -> list[list[PolicyFinding]]:
    groups: dict[str, list[PolicyFinding]] = {}
    for finding in findings:
        groups.setdefault(finding.rule, []).append(finding)
    return sorted(groups.values(), key=lambda group: (not group[0].denies, group[0].rule))


def _counts(findings: Sequence[PolicyFinding]) -> str:
    denied = [f for f in findings if f.denies]
    warned = [f for f in findings if not f.denies]
    parts = []
    if denied:
        rules = len({f.rule for f in denied})
        parts.append(f"{rules} deny rule(s) broken ({len(denied)} finding(s)): apply refuses")
    if warned:
        rules = len({f.rule for f in warned})
        parts.append(f"{rules} warn rule(s) broken ({len(warned)} finding(s))")
    return "Policy: " + "; ".join(parts) + "."


def _resource(finding: PolicyFinding) -> str:
    text = f"{finding.ref.label} ({finding.action})"
    return f"{text}: could not evaluate: {finding.error}" if finding.error else text


def policy_lines(findings: Sequence[PolicyFinding], *, color: bool = False) -> list[str]:
    """The findings as text lines (none when there are none), a blank line first."""
    if not findings:
        return []
    lines = [""]
    for group in _by_rule(findings):
        first = group[0]
        head = f"{first.level} {first.rule}: {first.message}  ({first.rule_source})"
        code = "31" if first.denies else "33"
        lines.append(f"\x1b[{code}m{printable(head)}\x1b[0m" if color else printable(head))
        lines += [printable(f"    {_resource(f)}") for f in group[:LIMIT]]
        if len(group) > LIMIT:
            lines.append(f"    ... and {len(group) - LIMIT} more")
    lines += ["", _counts(findings)]
    return lines


def policy_markdown(findings: Sequence[PolicyFinding]) -> list[str]:
    """The findings as a Markdown section (none when there are none)."""
    if not findings:
        return []
    from reconciler.render.markdown import cell, code

    alert = "CAUTION" if any(f.denies for f in findings) else "NOTE"
    lines = [f"> [!{alert}]", f"> {cell(_counts(findings))}", "", "#### Policy", ""]
    lines += ["| level | rule | resource | message |", "|---|---|---|---|"]
    for group in _by_rule(findings):
        for finding in group[:LIMIT]:
            level = "⛔ deny" if finding.denies else "⚠️ warn"
            lines.append(
                f"| {level} | {code(finding.rule)} | {cell(_resource(finding))} | "
                f"{cell(finding.message)} |"
            )
        if len(group) > LIMIT:
            lines.append(f"| | {code(group[0].rule)} | … and {len(group) - LIMIT} more | |")
    return [*lines, ""]
