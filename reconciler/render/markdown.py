"""A plan as GitHub-flavoured Markdown, for pull-request comments and step summaries.

A headline, a summary table of every change, then one collapsible details section per
change with its field table and reasons. Every value is escaped for table cells (``|``,
HTML, line breaks), so a spec value cannot break the layout.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection

from reconciler.model.values import display, field_label
from reconciler.planning.steps import Entry, Plan
from reconciler.render.text import SYMBOLS, destroy_warning, summary_line

ICONS = {"create": "🆕", "update": "🔄", "replace": "⚠️", "delete": "🗑️"}


#: Characters that would make text a link, an image, emphasis, code or a new cell.
_MARKDOWN = re.compile(r"([\\`*\[\]~!#|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def cell(text: str) -> str:
    """``text`` made safe for one Markdown table cell (or a line): HTML inert, Markdown
    punctuation escaped, so a resource named ``[x](http:evil)`` stays text."""
    escaped = _MARKDOWN.sub(r"\\\1", html.escape(text, quote=False))
    return " ".join(escaped.splitlines()) or " "


def code(text: str) -> str:
    """A code span (HTML and Markdown are inert inside); the fence outgrows any run of
    backticks in ``text``, and pipes are escaped for tables."""
    flat = " ".join(text.splitlines()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", flat)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}" if longest else f"{fence}{flat}{fence}"


def _summary_table(plan: Plan) -> list[str]:
    rows = ["| Action | Resource | Source | Fields |", "|---|---|---|---|"]
    for step in plan.changes:
        source = cell(str(step.source)) if step.source else ""
        icon = ICONS.get(step.action, "")
        rows.append(
            f"| {icon} {step.action} | {cell(step.label)} | {source} | {len(step.fields)} |"
        )
    return rows


def _details(step: Entry) -> list[str]:
    title = html.escape(f"{SYMBOLS[step.action]} {step.action} {step.label}", quote=False)
    lines = ["<details>", f"<summary>{title}</summary>", ""]
    creating = step.action == "create"
    if step.fields:
        lines += ["| Field | Value |" if creating else "| Field | Before | After |"]
        lines += ["|---|---|" if creating else "|---|---|---|"]
        for change in step.fields:
            said = step.written.get(change.path)
            cells = [
                field_label(step.kind, change.path),
                display(change.after, path=change.path, kind=step.kind, written=said),
            ]
            if not creating:
                cells.insert(
                    1, display(change.before, path=change.path, kind=step.kind, written=said)
                )
            lines.append("| " + " | ".join(cell(text) for text in cells) + " |")
        lines.append("")
    if step.reasons:
        lines += [*(f"- {cell(reason)}" for reason in step.reasons), ""]
    if step.destructive:
        lines += [*(f"- **loses:** {cell(loss.summary)}" for loss in step.losses), ""]
    return [*lines, "</details>", ""]


def _notes(plan: Plan) -> list[str]:
    lines: list[str] = []
    if plan.unmanaged:
        names = ", ".join(cell(note.label) for note in plan.unmanaged)
        lines += [f"**Unmanaged** (never touched): {names}", ""]
    if plan.orphans:
        names = ", ".join(cell(note.label) for note in plan.orphans)
        lines += [f"**Declared by no spec** (deleted with `--prune`): {names}", ""]
    if plan.foreign:
        names = ", ".join(f"{cell(note.label)} ({cell(note.owner)})" for note in plan.foreign)
        lines += [f"**Managed by other owners** (never touched): {names}", ""]
    return lines


def render_markdown(plan: Plan, *, allowed: Collection[str] = ()) -> str:
    server = plan.server
    lines = [f"### {cell(summary_line(plan))}", "", f"nats-server {cell(server.version)}", ""]
    warning = destroy_warning(plan, allowed)
    if warning:
        losses = [
            f"> - {cell(s.label)}: {cell(loss.summary)}"
            for s in plan.destructive_steps
            for loss in s.losses
        ]
        lines += ["> [!WARNING]", f"> {cell(warning)}", *losses, ""]
    if plan.has_changes:
        lines += [*_summary_table(plan), ""]
        for step in plan.changes:
            lines += _details(step)
    lines += _notes(plan)
    return "\n".join(lines).rstrip("\n") + "\n"
