"""A plan as GitHub-flavoured Markdown, for pull-request comments and step summaries.

Reviewer-first, in the manner of Atlantis and tfcmt: a one-line verdict, what would be
lost, the destructive steps before the others, each change's fields as a ``diff`` block,
and long lists (unmanaged, other owners' resources) collapsed behind their counts. The
whole stays under a character budget well below GitHub's comment limit; what does not
fit is counted and pointed at the full plan. Text outside code blocks is escaped
(``|``, HTML, Markdown punctuation), so a resource name cannot become markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection

from reconciler.model.values import display, field_label, printable
from reconciler.planning.steps import Action, Entry, Plan
from reconciler.render.text import ACTIONS, destroy_warning, migration_notes

ICONS = {
    Action.CREATE: "🆕",
    Action.UPDATE: "🔄",
    Action.REPLACE: "⚠️",
    Action.MIGRATE: "🚚",
    Action.DELETE: "🗑️",
}


#: Characters that would make text a link, an image, emphasis, code or a new cell.
_MARKDOWN = re.compile(r"([\\`*\[\]~!#|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def cell(text: str) -> str:
    """``text`` made safe for one Markdown table cell (or a line): lines joined, control
    and bidi characters escaped (:func:`printable`), HTML inert, Markdown
    punctuation escaped, so a resource named ``[x](http:evil)`` stays text, and an ``@``
    followed by a zero-width space, so a stream named ``@security-team`` notifies nobody
    (as Dependabot writes them). The one escaping function for Markdown text
    (:func:`code` for code spans, where no mention is read)."""
    flat = printable(" ".join(text.splitlines()))
    escaped = _MARKDOWN.sub(r"\\\1", html.escape(flat, quote=False))
    return escaped.replace("@", "@&#8203;") or " "


def code(text: str) -> str:
    """A code span (HTML and Markdown are inert inside; lines joined, control and bidi
    characters escaped); the fence outgrows any run of backticks in ``text``, and pipes
    are escaped for tables."""
    flat = printable(" ".join(text.splitlines())).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", flat)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}" if longest else f"{fence}{flat}{fence}"


#: What the plan part of a comment may take: GitHub refuses comments over 65,536
#: characters, and the title, marker and apply result need room too.
BUDGET = 60_000
#: Names listed per collapsed list before "… and N more".
LIST_LIMIT = 100


def _verdict(plan: Plan, allowed: Collection[str]) -> str:
    """The headline a reviewer reads first: what happens, and whether data is at stake."""
    counts = plan.summary
    if not plan.has_changes:
        return f"### ✅ No changes: {counts['unchanged']} resource(s) match the specs"
    done = ", ".join(f"{counts[key]} to {key}" for key in ACTIONS if counts.get(key))
    warning = destroy_warning(plan, allowed)
    if warning is None:
        return f"### ✅ {done}: nothing is destroyed"
    if "allowed by" in warning:
        return f"### ⚠️ Destroys data (allowed): {done}"
    return f"### ⛔ Destroys data, refused as it stands: {done}"


def _context(plan: Plan) -> str:
    parts = [f"nats-server {cell(plan.server.version)}", f"owner {code(plan.owner)}"]
    untouched = [
        (len(plan.unmanaged), "unmanaged"),
        (len(plan.foreign), "of other owners"),
        (len(plan.orphans), "declared by no spec"),
    ]
    said = [f"{count} {what}" for count, what in untouched if count]
    if said:
        parts.append("also on the server: " + ", ".join(said))
    if plan.unchanged:
        parts.append(f"{len(plan.unchanged)} unchanged")
    return " · ".join(parts)


def _diff_block(step: Entry) -> list[str]:
    """The changed fields as a ``diff`` block: ``-`` before, ``+`` after, in human units."""
    lines: list[str] = []
    for change in step.fields:
        said = step.written.get(change.path)
        label = field_label(step.kind, change.path)
        after = display(change.after, path=change.path, kind=step.kind, written=said)
        if step.action != Action.CREATE:
            before = display(change.before, path=change.path, kind=step.kind, written=said)
            lines.append(_flat(f"- {label}: {before}"))
        lines.append(_flat(f"+ {label}: {after}"))
    if not lines:
        return []
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}diff", *lines, fence, ""]


def _flat(text: str) -> str:
    return printable(" ".join(text.splitlines()))


def _step(step: Entry) -> list[str]:
    where = f" · {code(str(step.source))}" if step.source else ""
    icon = ICONS.get(step.action, "")
    lines = [f"**{icon} {step.action} {cell(step.label)}**{where}", ""]
    lines += _diff_block(step)
    notes = [f"- {cell(reason)}" for reason in step.reasons]
    notes += [f"- {cell(note)}" for note in migration_notes(step)]
    if step.destructive:
        notes += [f"- **loses:** {cell(loss.summary)}" for loss in step.losses]
    return lines + notes + ([""] if notes else [])


def _collapsed(title: str, names: list[str]) -> list[str]:
    """A long list folded away, its count in the summary line."""
    shown = ", ".join(names[:LIST_LIMIT])
    if len(names) > LIST_LIMIT:
        shown += f", … and {len(names) - LIST_LIMIT} more"
    summary = f"<summary>{len(names)} {title}</summary>"
    return ["<details>", summary, "", shown, "", "</details>", ""]


def _notes(plan: Plan) -> list[str]:
    lines: list[str] = []
    if plan.orphans:
        names = [cell(note.label) for note in plan.orphans]
        lines += _collapsed("declared by no spec (deleted with <code>--prune</code>)", names)
    if plan.foreign:
        names = [f"{cell(note.label)} ({cell(note.owner)})" for note in plan.foreign]
        lines += _collapsed("managed by other owners (never touched)", names)
    if plan.unmanaged:
        names = [cell(note.label) for note in plan.unmanaged]
        lines += _collapsed("unmanaged (never touched)", names)
    if plan.observed:  # lifecycle mode observe: how each differs, never a step
        said = {True: "not on the server", False: "differs"}
        names = [f"{cell(n.label)} ({said[n.missing]})" for n in plan.observed]
        lines += _collapsed("observed (lifecycle mode observe: never written)", names)
    return lines


def render_markdown(
    plan: Plan,
    *,
    allowed: Collection[str] = (),
    budget: int = BUDGET,
    full_plan: str | None = None,
) -> str:
    """``plan`` for a reviewer: verdict, what is lost, destructive steps first, each
    change as a ``diff`` block, long lists collapsed; at most ``budget`` characters.

    Steps that do not fit are counted and pointed at ``full_plan`` (Markdown: where the
    complete plan is, e.g. the run's JSON artifact); destructive steps come first, so a
    cut never hides one of them before a harmless change.
    """
    lines = [_verdict(plan, allowed), "", _context(plan), ""]
    if plan.destructive_steps:
        losses = [
            f"> - {cell(s.label)}: {cell(loss.summary)}"
            for s in plan.destructive_steps
            for loss in s.losses
        ]
        lines += ["> [!WARNING]", f"> {cell(destroy_warning(plan, allowed) or '')}", *losses, ""]
    tail = _notes(plan)
    destructive = [step for step in plan.changes if step.destructive]
    others = [step for step in plan.changes if not step.destructive]
    used = _size(lines) + _size(tail) + 400  # room for the note on what was left out
    left_out = 0
    for title, steps in (("Destroys data", destructive), ("Changes", others)):
        if not steps:
            continue
        section = [f"#### {title}", ""]
        for step in steps:
            block = _step(step)
            if left_out or used + _size(section) + _size(block) > budget:
                left_out += 1
                continue
            section += block
        if len(section) > 2:
            lines += section
            used += _size(section)
    if left_out:
        where = full_plan or "the plan JSON (the `plan-json` output)"
        lines += [
            "> [!NOTE]",
            f"> {left_out} more change(s) not shown: this summary is capped at "
            f"{budget:,} characters. The complete plan: {where}.",
            "",
        ]
    lines += tail
    return "\n".join(lines).rstrip("\n") + "\n"


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
