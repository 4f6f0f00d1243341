"""A plan as text, in the manner of Terraform: one block per step, values in human units.

+ create Stream ORDERS  (streams/orders.yaml:1)
    subjects: ["orders.>"]
~ update Consumer ORDERS/NEW  (streams/orders.yaml:14)
    max_age: 1h → 2h
-/+ replace Stream EVENTS  (streams/events.yaml:1)
    storage: "file" → "memory"
    # storage cannot be changed
>>> migrate Stream AUDIT  (streams/audit.yaml:1)
    storage: "file" → "memory"
    # copies 1,200 messages (1.2 MiB), twice
    # messages are mirrored out to a temporary stream and back: subjects, payloads, ...

Plan: 1 to create, 1 to update, 1 to replace, 0 to delete (3 unchanged).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from reconciler.identity import KIND_ORDER
from reconciler.model.values import display, field_label, printable
from reconciler.planning.steps import (
    ALLOW_DATA_LOSS,
    ALLOW_REPLACE,
    Action,
    Entry,
    Foreign,
    Migrate,
    Orphan,
    Plan,
    Step,
    Unmanaged,
    allowing_flag,
    destroys,
    prevention,
)
from reconciler.render.capacity import capacity_lines
from reconciler.render.policy import policy_lines
from reconciler.specs.units import approx_size

SYMBOLS = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.REPLACE: "-/+",
    Action.MIGRATE: ">>>",
    Action.DELETE: "-",
    Action.OBSERVED: "o",  # a note: lifecycle mode observe, never written
}
_COLORS = {
    "create": "32",
    "update": "33",
    "replace": "35",
    "migrate": "36",
    "delete": "31",
    "note": "2",
    "observed": "2",
}
#: Actions in the order a summary counts them; ``migrate`` only when there are some.
ACTIONS = (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.MIGRATE, Action.DELETE)
#: Over this many steps, text and Markdown show destructive steps in full and fold the
#: others per kind and action (``--full`` shows every step).
FOLD_OVER = 50
#: Names listed per folded group before "… and N more".
NAMES_SHOWN = 10


def groups(steps: Iterable[Entry]) -> dict[tuple[str, str], list[Entry]]:
    """``steps`` per (kind, action): kinds in their order, then actions as counted."""
    found: dict[tuple[str, str], list[Entry]] = {}
    for step in steps:
        found.setdefault((step.kind, str(step.action)), []).append(step)
    order = {str(action): i for i, action in enumerate(ACTIONS)}
    return dict(
        sorted(found.items(), key=lambda item: (KIND_ORDER.get(item[0][0], 9), order[item[0][1]]))
    )


def folded(plan: Plan, *, full: bool = False) -> bool:
    """Whether a plan's harmless steps are folded (over :data:`FOLD_OVER`, no ``--full``)."""
    return not full and len(plan.changes) > FOLD_OVER


def in_full(step: Step) -> bool:
    """Whether a folded plan still shows ``step`` in full (text, and outside Markdown's
    folds): it destroys its resource or part of what it holds (:func:`destroys`: a
    replace, a delete, a lossy update, a migration with what it copies and why apply
    refuses it when blocked, a consumer created again with its replaced stream), or
    lifecycle forbids it (no flag allows it: apply refuses the plan)."""
    return destroys(step) or bool(prevention(step))


def short_name(step: Entry) -> str:
    """``ORDERS``, ``ORDERS/NEW``: a step's label without its kind."""
    return step.label.partition(" ")[2] or step.label


def names_line(steps: list[Entry], limit: int = NAMES_SHOWN) -> str:
    """The first ``limit`` names of ``steps``, then how many more."""
    said = ", ".join(short_name(step) for step in steps[:limit])
    return said + (f", … and {len(steps) - limit} more" if len(steps) > limit else "")


def migration_notes(step: Entry) -> list[str]:
    """What a migrate step copies and changes, for every plan format."""
    if not isinstance(step, Migrate):
        return []
    volume = step.volume
    notes = [f"copies {volume.messages:,} messages ({approx_size(volume.bytes)}), twice"]
    return notes + (list(step.changes) if step.phase is None else [])


def change_line(
    path: str,
    before: Any,
    after: Any,
    *,
    action: str,
    kind: str = "Stream",
    written: str | None = None,
) -> str:
    label = field_label(kind, path)
    after_text = display(after, path=path, kind=kind, written=written)
    if action == "create":
        return f"{label}: {after_text}"
    return f"{label}: {display(before, path=path, kind=kind, written=written)} → {after_text}"


def _paint(text: str, style: str, *, color: bool) -> str:
    """A line (names, values and file names in it escaped: :func:`printable`), coloured."""
    text = printable(text)
    return f"\x1b[{_COLORS[style]}m{text}\x1b[0m" if color else text


def step_lines(step: Entry, *, color: bool = False) -> list[str]:
    where = f"  ({step.source})" if step.source else ""
    head = f"{SYMBOLS[step.action]} {step.action} {step.label}{where}"
    lines = [_paint(head, step.action, color=color)]
    for change in step.fields:
        line = change_line(
            change.path,
            change.before,
            change.after,
            action=step.action,
            kind=step.kind,
            written=step.written.get(change.path),
        )
        lines.append(printable("    " + line))
    lines.extend(_paint(f"    # {reason}", "note", color=color) for reason in step.reasons)
    lines.extend(_paint(f"    # {note}", "note", color=color) for note in migration_notes(step))
    if step.destructive:
        lines.extend(
            _paint(f"    ! loses: {loss.summary}", "delete", color=color) for loss in step.losses
        )
    return lines


def destroy_warning(plan: Plan, allowed: Collection[str] = ()) -> str | None:
    """The line saying how many steps destroy data and which flag apply needs (or that
    the flag given allows them)."""
    steps = plan.destructive_steps
    if plan.prevented:  # lifecycle prevent_destroy, a failover rule: no flag allows them
        count = len(plan.prevented)
        what = (
            "destroy protected resources"
            if plan.prevented_destroy
            else "are prevented (each says why)"
        )
        return f"{count} step(s) {what}: apply refuses the plan, whatever flags."
    if not steps:
        return None
    refused = plan.refused(
        allow_replace=ALLOW_REPLACE in allowed, allow_data_loss=ALLOW_DATA_LOSS in allowed
    )
    if refused:
        flag = allowing_flag(refused)
        return f"{len(steps)} step(s) destroy data: apply refuses them without {flag}."
    flag = ALLOW_DATA_LOSS if plan.lossy_updates or ALLOW_REPLACE not in allowed else ALLOW_REPLACE
    return f"{len(steps)} step(s) destroy data, allowed by {flag}."


def summary_line(plan: Plan) -> str:
    counts = plan.summary
    if not plan.has_changes:
        return f"No changes. {counts['unchanged']} resource(s) unchanged."
    return f"Plan: {', '.join(action_counts(plan))} ({counts['unchanged']} unchanged)."


def counts_line(plan: Plan) -> str:
    """``2 to create, 0 to update, 0 to replace, 0 to delete, 3 unchanged``: the
    Action's ``summary`` output and each environment's line."""
    return ", ".join([*action_counts(plan), f"{plan.summary['unchanged']} unchanged"])


def action_counts(plan: Plan) -> list[str]:
    """``3 to create``, ... for every action (``migrate`` only when there are some)."""
    counts = plan.summary
    return [f"{counts.get(k, 0)} to {k}" for k in ACTIONS if k != "migrate" or k in counts]


def _notes(plan: Plan, *, color: bool, full: bool = False) -> list[str]:
    """The plan's notes; over :data:`FOLD_OVER` in one list (without ``full``) the
    unmanaged, prunable and other owners' resources fold into a count per kind, as a
    drift report's do (names on a shared server are anyone's, and thousands of them
    pushed the plan off the screen)."""
    lines: list[str] = []
    if plan.unmanaged:
        lines += ["", "Unmanaged (no managed-by marker, never touched):"]
        lines += _listed(plan.unmanaged, "?", color=color, full=full)
    lines += _hidden_notes(plan, color=color)
    prunable = [note for note in plan.orphans if not note.prevented]
    if prunable:
        lines += ["", "Managed but declared by no spec (deleted with --prune):"]
        lines += _listed(prunable, "!", color=color, full=full)
    protected = [note for note in plan.orphans if note.prevented]
    if protected:
        heading = "Managed but declared by no spec, protected (never deleted, not even with"
        lines += ["", f"{heading} --prune):"]
        for note in protected:
            lines += [
                _paint(f"  = {note.label}", "note", color=color),
                _paint(f"    # {note.prevented}", "note", color=color),
            ]
    if plan.foreign:
        lines += ["", f"Managed by other owners than {plan.owner!r} (never touched):"]
        lines += _listed(plan.foreign, "=", color=color, full=full)
    if plan.observed:
        lines += ["", "Observed (lifecycle mode observe: read and reported, never written):"]
        lines += [line for note in plan.observed for line in step_lines(note, color=color)]
    return lines


def _listed(
    notes: Sequence[Unmanaged | Orphan | Foreign], symbol: str, *, color: bool, full: bool
) -> list[str]:
    """One line per note, or over :data:`FOLD_OVER` (without ``full``) one per kind."""
    if full or len(notes) <= FOLD_OVER:
        return [_paint(f"  {symbol} {_owned(note)}", "note", color=color) for note in notes]
    kinds: dict[str, list[Unmanaged | Orphan | Foreign]] = {}
    for note in notes:
        kinds.setdefault(note.kind, []).append(note)
    return [
        _paint(
            f"  {symbol} {len(members)} {kind}(s){_owners(members)} (names: --full or "
            "--format json)",
            "note",
            color=color,
        )
        for kind, members in kinds.items()
    ]


def _owned(note: Unmanaged | Orphan | Foreign) -> str:
    return f"{note.label} (owner {note.owner})" if isinstance(note, Foreign) else note.label


def _owners(notes: Sequence[Unmanaged | Orphan | Foreign]) -> str:
    """`` (owners: billing 50, search 30)`` for other owners' resources, most first."""
    counted = Counter(note.owner for note in notes if isinstance(note, Foreign))
    if not counted:
        return ""
    most = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return " (owners: " + ", ".join(f"{owner} {n}" for owner, n in most) + ")"


def _hidden_notes(plan: Plan, *, color: bool) -> list[str]:
    """How many unmanaged notes each drift ignore rule left out (docs/drift.md)."""
    if not plan.hidden:
        return []
    said = [f"  {h.count} hidden by rule {printable(h.label)}" for h in plan.hidden]
    return ["", "Unmanaged, hidden by ignore rules (never touched):", *said]


def render_text(
    plan: Plan, *, color: bool = False, allowed: Collection[str] = (), full: bool = False
) -> str:
    """``plan`` as text; over :data:`FOLD_OVER` steps (without ``full``) the destructive,
    prevented and migrating ones in full (:func:`in_full`), the others folded per kind
    and action (their names, then a count)."""
    server = plan.server
    lines = [printable(f"Plan against nats-server {server.version} (API level {server.api_level})")]
    if plan.changes:
        lines.append("")
    fold = folded(plan, full=full)
    for step in plan.changes:
        if not fold or in_full(step):
            lines.extend(step_lines(step, color=color))
    if fold:
        lines.extend(_folded_lines(plan, color=color))
    lines.extend(_notes(plan, color=color, full=full))
    warning = destroy_warning(plan, allowed)
    if warning:
        lines += ["", _paint(warning, "delete", color=color)]
    lines += policy_lines(plan.policy, color=color)  # docs/policy.md (render.policy)
    lines += capacity_lines(plan)  # docs/capacity.md (render.capacity)
    lines += ["", summary_line(plan)]
    return "\n".join(lines) + "\n"


def _folded_lines(plan: Plan, *, color: bool) -> list[str]:
    """The harmless steps of a long plan: one line per kind and action, then names."""
    others = [step for step in plan.changes if not in_full(step)]
    lines: list[str] = []
    for (kind, action), steps in groups(others).items():
        head = f"{SYMBOLS[Action(action)]} {len(steps)} to {action}: {kind}"
        lines += [_paint(head, action, color=color), printable(f"    {names_line(steps)}")]
    if others:
        said = f"# {len(others)} step(s) folded: --full shows each one's fields"
        lines.append(_paint(said, "note", color=color))
    return lines
