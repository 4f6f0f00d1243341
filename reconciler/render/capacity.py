"""A plan's capacity totals (``Plan.capacity``, docs/capacity.md) as text and Markdown:
one short section the plan renderers append when the plan changes something. Each line:
what the account reserves (``max_bytes`` x replicas) or counts, before -> after, and the
limit with the share used; unlimited is said, never warned about."""

from __future__ import annotations

from reconciler.planning.steps import Plan
from reconciler.planning.totals import Total
from reconciler.specs.units import approx_size

#: The section's title: what the figures are.
TITLE = "Account capacity (max_bytes x replicas reserved; before -> after)"


def _figure(total: Total, value: int) -> str:
    return approx_size(value) if total.is_bytes else str(value)


def total_line(total: Total, *, server_known: bool = True) -> str:
    """``file storage reserved: 40.0 MiB -> 70.0 MiB of 64.0 MiB (109%)``; the
    server's own limit (every account's reservations) reads ``server file storage
    reserved (every account): ...``. An account without a limit is bounded by the
    server's: said as unknown when it was not read, never as no limit."""
    what = f"{total.what} storage reserved" if total.is_bytes else total.what
    if total.scope == "server":
        what = f"server {what} (every account)"
    if total.tier:
        what += f" ({total.tier})"
    change = f"{_figure(total, total.before)} -> {_figure(total, total.after)}"
    if total.peak != total.after:
        change += f" (at most {_figure(total, total.peak)} while it is applied)"
    if total.limit is None:
        unread = total.is_bytes and not server_known
        unknown = "; the server's own limit is unknown" if unread else ""
        return f"{what}: {change} (no account limit{unknown})"
    share = f" ({100 * total.peak / total.limit:.0f}%)" if total.limit else ""
    return f"{what}: {change} of {_figure(total, total.limit)}{share}"


def _ahead(plan: Plan, shown: list[Total]) -> list[str]:
    """The notes under the figures: a stream apply makes itself counted, the lock's
    bucket among the streams (only under a ``streams`` line: it explains that figure),
    the server's own limits unknown."""
    notes = []
    names = plan.capacity.ahead if plan.capacity else ()
    if names:
        listed = ", ".join(names)
        notes.append(f"(the figures include {listed}: apply makes it first, for its lock)")
    counted = any(total.what == "streams" for total in shown)
    if plan.capacity is not None and plan.capacity.lock and counted:
        lock = plan.capacity.lock
        notes.append(f"(the streams include {lock}: apply's lock bucket, made by the first apply)")
    if plan.capacity is not None and not plan.capacity.server_known and plan.capacity.server:
        notes.append(f"(the server's own storage limits are unknown: {plan.capacity.server})")
    return notes


def _lines(plan: Plan, shown: list[Total]) -> list[str]:
    known = plan.capacity is None or plan.capacity.server_known
    return [total_line(t, server_known=known) for t in shown]


def _shown(plan: Plan) -> list[Total]:
    """The totals worth a line: those the plan changes, or with a limit."""
    if plan.capacity is None or not plan.has_changes:
        return []
    return [t for t in plan.capacity.totals if t.before != t.after or t.limit is not None]


def capacity_lines(plan: Plan) -> list[str]:
    """The section as text lines, a blank line first (none when nothing to show)."""
    shown = _shown(plan)
    if not shown:
        return []
    return [
        "",
        f"{TITLE}:",
        *(f"    {line}" for line in _lines(plan, shown)),
        *(f"    {line}" for line in _ahead(plan, shown)),
    ]


def capacity_markdown(plan: Plan) -> list[str]:
    """The section as a Markdown list (none when nothing to show)."""
    shown = _shown(plan)
    if not shown:
        return []
    return [
        f"**{TITLE}:**",
        *(f"- {line}" for line in _lines(plan, shown)),
        *(f"- {line}" for line in _ahead(plan, shown)),
        "",
    ]
