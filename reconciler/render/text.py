"""A plan as text, in the manner of Terraform: one block per step, values in human units.

+ create Stream ORDERS  (streams/orders.yaml:1)
    subjects: ["orders.>"]
~ update Consumer ORDERS/NEW  (streams/orders.yaml:14)
    max_age: 1h → 2h
-/+ replace Stream EVENTS  (streams/events.yaml:1)
    storage: "file" → "memory"
    # storage cannot be changed

Plan: 1 to create, 1 to update, 1 to replace, 0 to delete (3 unchanged).
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.plan import Entry, Plan
from reconciler.units import format_duration, format_size

SYMBOLS = {"create": "+", "update": "~", "replace": "-/+", "delete": "-"}
_COLORS = {"create": "32", "update": "33", "replace": "35", "delete": "31", "note": "2"}

DURATION_FIELDS = frozenset(
    {
        "max_age",
        "duplicate_window",
        "ack_wait",
        "idle_heartbeat",
        "inactive_threshold",
        "max_expires",
        "subject_delete_marker_ttl",
        "priority_timeout",
        "backoff",
        "ttl",
    }
)
SIZE_FIELDS = frozenset({"max_bytes", "max_msg_size", "max_value_size"})
MAX_VALUE_WIDTH = 120
#: Stream fields of a bucket as its spec names them, shown next to the wire path.
BUCKET_NAMES = {
    "max_age": "ttl",
    "max_msgs_per_subject": "history",
    "max_msg_size": "max_value_size",
    "num_replicas": "replicas",
}


def field_label(kind: str, path: str) -> str:
    """``max_age (ttl)`` for a bucket's stream field, the path itself otherwise."""
    alias = BUCKET_NAMES.get(path) if kind in ("KeyValue", "ObjectStore") else None
    if alias is None or (kind == "ObjectStore" and alias in ("history", "max_value_size")):
        return path
    return f"{path} ({alias})"


def _leaf(path: str) -> str:
    """The field name a path ends in, list indexes skipped (``backoff.0`` → ``backoff``)."""
    parts = [part for part in path.split(".") if not part.isdigit()]
    return parts[-1] if parts else path


def _human(value: int, leaf: str) -> str | None:
    if leaf in DURATION_FIELDS and value >= 0:
        return format_duration(value)
    if leaf in SIZE_FIELDS:
        return "unlimited" if value == -1 else format_size(value) if value >= 0 else None
    return None


def _nanos(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def display_value(path: str, value: Any) -> str:
    """A value as a reader wants it: human units for durations and sizes, JSON otherwise."""
    if value is None:
        return "(none)"
    leaf = _leaf(path)
    if isinstance(value, int) and not isinstance(value, bool):
        human = _human(value, leaf)
        if human is not None:
            return human
    if isinstance(value, list) and leaf in DURATION_FIELDS and all(_nanos(v) for v in value):
        return "[" + ", ".join(format_duration(v) for v in value) + "]"
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if len(text) > MAX_VALUE_WIDTH:
        text = text[: MAX_VALUE_WIDTH - 1] + "…"
    return text


def change_line(path: str, before: Any, after: Any, *, action: str, kind: str = "") -> str:
    label = field_label(kind, path)
    if action == "create":
        return f"{label}: {display_value(path, after)}"
    return f"{label}: {display_value(path, before)} → {display_value(path, after)}"


def _paint(text: str, style: str, *, color: bool) -> str:
    return f"\x1b[{_COLORS[style]}m{text}\x1b[0m" if color else text


def step_lines(step: Entry, *, color: bool = False) -> list[str]:
    where = f"  ({step.source})" if step.source else ""
    head = f"{SYMBOLS[step.action]} {step.action} {step.label}{where}"
    lines = [_paint(head, step.action, color=color)]
    for change in step.fields:
        line = change_line(
            change.path, change.before, change.after, action=step.action, kind=step.kind
        )
        lines.append("    " + line)
    lines.extend(_paint(f"    # {reason}", "note", color=color) for reason in step.reasons)
    return lines


def summary_line(plan: Plan) -> str:
    counts = plan.summary
    if not plan.has_changes:
        return f"No changes. {counts['unchanged']} resource(s) unchanged."
    done = ", ".join(f"{counts[key]} to {key}" for key in ("create", "update", "replace", "delete"))
    return f"Plan: {done} ({counts['unchanged']} unchanged)."


def _notes(plan: Plan, *, color: bool) -> list[str]:
    lines: list[str] = []
    if plan.unmanaged:
        lines += ["", "Unmanaged (no managed-by marker, never touched):"]
        lines += [_paint(f"  ? {note.label}", "note", color=color) for note in plan.unmanaged]
    if plan.orphans:
        lines += ["", "Managed but declared by no spec (deleted with --prune):"]
        lines += [_paint(f"  ! {note.label}", "note", color=color) for note in plan.orphans]
    return lines


def render_text(plan: Plan, *, color: bool = False) -> str:
    server = plan.server
    lines = [f"Plan against nats-server {server.version} (API level {server.api_level})"]
    if plan.changes:
        lines.append("")
    for step in plan.changes:
        lines.extend(step_lines(step, color=color))
    lines.extend(_notes(plan, color=color))
    if plan.destructive_steps:
        count = len(plan.destructive_steps)
        warning = f"{count} step(s) destroy messages: apply needs --allow-replace."
        lines += ["", _paint(warning, "delete", color=color)]
    lines += ["", summary_line(plan)]
    return "\n".join(lines) + "\n"
