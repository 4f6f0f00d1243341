"""A plan as GitHub-flavoured Markdown, for pull-request comments and step summaries.

Reviewer-first, in the manner of Atlantis and tfcmt: a one-line verdict, a table of
steps per kind and action, what would be lost, the destructive (and lossy) steps in full
before the others, each change's fields as a ``diff`` block; over ``FOLD_OVER`` steps the
harmless ones grouped per kind and action behind ``<details>``; long lists (unmanaged,
other owners' resources) collapsed behind their counts. The whole stays under a
character budget well below GitHub's comment limit; what does not fit is counted and
pointed at the full plan, and :func:`fit` cuts any Markdown to a limit without leaving
a code fence or a ``<details>`` open. Text outside code blocks is escaped (``|``, HTML,
Markdown punctuation), so a resource name cannot become markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Sequence

from reconciler.model.values import display, field_label, printable
from reconciler.planning.steps import Action, Entry, Migrate, Plan
from reconciler.render.capacity import capacity_markdown
from reconciler.render.policy import policy_markdown
from reconciler.render.text import (
    ACTIONS,
    destroy_warning,
    folded,
    groups,
    in_full,
    migration_notes,
    names_line,
)

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
#: Losses listed under the warning before "… and N more" (each destructive step follows
#: in full): a prune of 1,000 streams must not push the policy section out of a comment.
LOSSES_SHOWN = 20
#: Characters a collapsed list, and the losses preview, may take: a name from the server
#: is up to 255 characters, and an escaped ``@`` nine, so 100 app-made streams' names
#: could push every step out of a comment.
LIST_CHARS = 4_000
LOSSES_CHARS = 8_000


def capped(items: Sequence[str], *, count: int, chars: int) -> tuple[list[str], int]:
    """The first of ``items`` (at least one), at most ``count`` of them and about
    ``chars`` characters; and how many are left out."""
    shown: list[str] = []
    size = 0
    for item in items[:count]:
        if shown and size + len(item) > chars:
            break
        shown.append(item)
        size += len(item) + 2
    return shown, len(items) - len(shown)


def _verdict(plan: Plan, allowed: Collection[str]) -> str:
    """The headline a reviewer reads first: what happens, and whether data is at stake."""
    counts = plan.summary
    if plan.denied:  # apply refuses whatever the flags (execution.apply.check_allowed)
        return f"### ⛔ {_denied_words(plan)}"
    if not plan.has_changes:
        return f"### ✅ No changes: {counts['unchanged']} resource(s) match the specs"
    done = ", ".join(f"{counts[key]} to {key}" for key in ACTIONS if counts.get(key))
    if any(isinstance(step, Migrate) and step.blocked for step in plan.changes):
        return f"### ⛔ A migration is blocked, apply refuses: {done}"
    warning = destroy_warning(plan, allowed)
    if warning is None:
        return f"### ✅ {done}: nothing is destroyed"
    if "allowed by" in warning:
        return f"### ⚠️ Destroys data (allowed): {done}"
    if plan.prevented and not plan.prevented_destroy:
        return f"### ⛔ A step is prevented, apply refuses: {done}"
    return f"### ⛔ Destroys data, refused as it stands: {done}"


def _denied_words(plan: Plan) -> str:
    """Why apply refuses a plan a policy ``deny`` rule does not hold for: how many rules,
    how many findings, then what it would do (a plan without changes is denied too: an
    unchanged resource is judged on its live config)."""
    rules = len({finding.rule for finding in plan.denied})
    found = len(plan.denied)
    counts = plan.summary
    done = ", ".join(f"{counts[key]} to {key}" for key in ACTIONS if counts.get(key))
    rule_words = "1 deny rule does" if rules == 1 else f"{rules} deny rules do"
    finding_words = "1 finding" if found == 1 else f"{found} findings"
    return (
        f"Denied by policy: {rule_words} not hold ({finding_words}), apply refuses: "
        f"{done or 'no changes'}"
    )


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
    listed, more = capped(names, count=LIST_LIMIT, chars=LIST_CHARS)
    shown = ", ".join(listed) + (f", … and {more} more" if more else "")
    summary = f"<summary>{len(names)} {title}</summary>"
    return ["<details>", summary, "", shown, "", "</details>", ""]


def _notes(plan: Plan) -> list[str]:
    lines: list[str] = []
    prunable = [cell(note.label) for note in plan.orphans if not note.prevented]
    if prunable:
        lines += _collapsed("declared by no spec (deleted with <code>--prune</code>)", prunable)
    protected = [
        f"{cell(note.label)} ({cell(note.prevented)})" for note in plan.orphans if note.prevented
    ]
    if protected:
        title = "declared by no spec, protected (never deleted, not even with <code>--prune</code>)"
        lines += _collapsed(title, protected)
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


def summary_table(plan: Plan) -> list[str]:
    """Steps per kind (rows) and action (columns): what a reviewer reads before any step."""
    actions = [a for a in ACTIONS if a != Action.MIGRATE or plan.summary.get(a)]
    counted = groups(plan.changes)
    kinds = list(dict.fromkeys(kind for kind, _ in counted))
    header = "| kind | " + " | ".join(f"{ICONS[a]} {a}" for a in actions) + " |"
    lines = [header, "|---|" + "---:|" * len(actions)]
    for kind in kinds:
        cells = [str(len(counted.get((kind, str(a)), []))) for a in actions]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    if len(kinds) > 1:
        totals = [str(plan.summary.get(str(a), 0)) for a in actions]
        lines.append("| **total** | " + " | ".join(totals) + " |")
    return [*lines, ""]


def render_markdown(
    plan: Plan,
    *,
    allowed: Collection[str] = (),
    budget: int = BUDGET,
    full_plan: str | None = None,
    full: bool = False,
) -> str:
    """``plan`` for a reviewer: verdict, a table per kind and action, what is lost,
    destructive steps in full first, each change as a ``diff`` block (over
    ``FOLD_OVER`` steps, without ``full``, the others grouped behind ``<details>``), long
    lists collapsed; at most ``budget`` characters.

    Steps that do not fit are counted and pointed at ``full_plan`` (Markdown: where the
    complete plan is, e.g. the run's JSON artifact); destructive steps come first, so a
    cut never hides one of them before a harmless change.
    """
    lines = [_verdict(plan, allowed), "", _context(plan), ""]
    if plan.has_changes:
        lines += summary_table(plan)
    if plan.destructive_steps:
        warning = f"> {cell(destroy_warning(plan, allowed) or '')}"
        lines += ["> [!WARNING]", warning, *_losses(plan), ""]
    lines += policy_markdown(plan.policy)  # docs/policy.md (render.policy)
    lines += capacity_markdown(plan)  # docs/capacity.md (render.capacity)
    tail = _notes(plan)
    budget_left = budget - _size(lines) - _size(tail) - 400  # the note on what was left out
    sections, left_out = _sections(plan, budget_left, fold=folded(plan, full=full))
    lines += sections
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


def _losses(plan: Plan) -> list[str]:
    """What the destructive steps lose, the first :data:`LOSSES_SHOWN` of them."""
    losses = [
        f"> - {cell(s.label)}: {cell(loss.summary)}"
        for s in plan.destructive_steps
        for loss in s.losses
    ]
    shown, more = capped(losses, count=LOSSES_SHOWN, chars=LOSSES_CHARS)
    return [*shown, f"> - … and {more} more: each destructive step follows"] if more else shown


def _sections(plan: Plan, budget: int, *, fold: bool) -> tuple[list[str], int]:
    """The steps within ``budget`` characters: destructive ones first, then migrations
    and steps lifecycle forbids (:func:`~reconciler.render.text.in_full`), in full; the
    others in full, or folded per kind and action; and how many did not fit."""
    lines: list[str] = []
    left_out = 0
    destructive = [step for step in plan.changes if step.destructive]
    first = [step for step in plan.changes if in_full(step) and not step.destructive]
    others = [step for step in plan.changes if not in_full(step)]
    titled = (("Destroys data", destructive), ("Read first", first), ("Changes", others))
    for title, steps in titled:
        if not steps:
            continue
        if fold and title == "Changes":
            section, cut = _folded(steps, budget - _size(lines))
        else:
            section, cut = _in_full(steps, budget - _size(lines) - 20)
        left_out += cut
        if section:
            lines += [f"#### {title}", "", *section]
    return lines, left_out


def _in_full(steps: Sequence[Entry], budget: int) -> tuple[list[str], int]:
    """Each step's block while they fit in ``budget``; then how many were left out."""
    lines: list[str] = []
    for index, step in enumerate(steps):
        block = _step(step)
        if _size(lines) + _size(block) > budget:
            return lines, len(steps) - index
        lines += block
    return lines, 0


def _folded(steps: Sequence[Entry], budget: int) -> tuple[list[str], int]:
    """The steps per kind and action, each group behind ``<details>`` (its count and first
    names in the summary line, always shown), their blocks inside while they fit."""
    shells = [_shell(kind, action, group) for (kind, action), group in groups(steps).items()]
    notes = 80 * len(shells)  # room for each group's "N more not shown here"
    room = budget - notes - sum(_size(opening) + _size(closing) for opening, closing, _ in shells)
    lines: list[str] = []
    left_out = 0
    for opening, closing, group in shells:
        inside, cut = _in_full(group, room)
        room -= _size(inside)
        left_out += cut
        if cut:
            inside += [f"*{cut} more not shown here: see the complete plan.*", ""]
        lines += [*opening, *inside, *closing]
    return lines, left_out


def _shell(kind: str, action: str, group: list[Entry]) -> tuple[list[str], list[str], list[Entry]]:
    icon = ICONS.get(Action(action), "")
    names = cell(names_line(group, 5))
    summary = f"<summary>{icon} {len(group)} to {action}: {kind} ({names})</summary>"
    return ["<details>", summary, ""], ["</details>", ""], group


#: How a cut Markdown text ends (:func:`fit`).
CUT_NOTE = "> [!NOTE]\n> Cut to fit {limit:,} characters. The complete plan: {where}.\n"
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def fit(markdown: str, limit: int, *, where: str) -> str:
    """``markdown`` as it is when it fits in ``limit`` characters, else cut at a line end
    outside any code fence, every ``<details>`` still open closed, and a note pointing
    at ``where`` (Markdown): never a cut inside an HTML tag or a code block."""
    if len(markdown) <= limit:
        return markdown
    note = CUT_NOTE.format(limit=limit, where=where)
    kept: list[str] = []
    size, fence, depth = 0, "", 0
    safe = (0, 0)  # (lines kept, <details> open) at the last line end outside a fence
    for line in markdown.splitlines():
        closing = "</details>\n" * (depth + 1)  # a line may open one more
        if size + len(line) + 1 + len(closing) + len(note) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
        fence, depth = _after(line, fence, depth)
        if not fence:
            safe = (len(kept), depth)
    count, depth = safe
    return "\n".join(kept[:count]) + "\n" + "</details>\n" * max(depth, 0) + "\n" + note


def _after(line: str, fence: str, depth: int) -> tuple[str, int]:
    """The open fence and ``<details>`` depth after ``line``."""
    match = _FENCE.match(line)
    if fence:
        return ("" if match and match.group(1).startswith(fence) else fence), depth
    if match:
        return match.group(1), depth
    tag = line.strip()  # this module writes each tag on a line of its own; a name in a
    # code span (a forged owner's "</details>") is text, not a fold to close
    return "", depth + (tag == "<details>") - (tag == "</details>")


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
