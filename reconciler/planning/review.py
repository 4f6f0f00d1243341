"""What a person approves at the prompt, and whether the plan made again still is it.

Between the plan shown and the answer the server goes on: messages arrive, someone edits
a stream. A ``max_msgs: 10`` planned as harmless on an empty stream deletes 90 of the
100 messages published while the question waited. So apply reads the live state again
after the answer and compares the two plans here: they agree when they hold the same
steps (action, resource, field changes, a migration's phase, the KeyValue value a step
replaces) and every step destroys the same kind of data (destructive or not, and through
the same fields). Anything else was not reviewed, and :func:`differences` names it. How
many messages a step the person approved as destructive takes may have grown meanwhile
(a stream being deleted keeps taking publishes until it is gone): the person approved
the step, not a count, so a count alone is not a different plan.

A saved plan (:mod:`reconciler.planning.saved`) is compared by the same rule, and one
more: each step's observed live config must be the one the plan was made against
(``observed_live``), as a saved plan waits days, not seconds.

Pure: two plans in, sentences out.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

from reconciler.identity import ENTRY, ResourceRef
from reconciler.model.diff import diff_configs
from reconciler.planning.steps import Migrate, Plan, Step

__all__ = ["differences"]


def _frozen(value: Any) -> Hashable:
    """A JSON value as something comparable and hashable (dict order does not count)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return repr(value) if isinstance(value, float) else value


def _what_it_does(step: Step) -> Hashable:
    """The step as reviewed, less what it destroys: action, changed fields, phase."""
    fields = tuple(_frozen(change.to_json()) for change in step.fields)
    phase = step.phase if isinstance(step, Migrate) else None
    return (step.action, fields, phase)


def _what_it_overwrites(step: Step) -> Hashable:
    """A KeyValue entry's value as read, which the step replaces or deletes: its fields
    show it cut to 200 characters, and a secret's not at all, so a write meanwhile past
    what is shown (or to a secret) changes no field. None for other kinds (their fields
    are their whole change)."""
    if step.ref.kind != ENTRY:
        return None
    live = getattr(step, "live", None) or {}
    return live.get("value")


def _what_it_destroys(step: Step) -> Hashable:
    return (step.destructive, tuple(sorted({loss.field for loss in step.losses})))


def _losses(step: Step) -> str:
    if not step.destructive:
        return "destroys nothing"
    said = "; ".join(loss.summary for loss in step.losses)
    return f"destroys data ({said})" if said else "destroys data"


def _fields(step: Step) -> str:
    return ", ".join(change.path for change in step.fields) or "no field"


def _a(action: str) -> str:
    """``an update``, ``a create``."""
    return f"an {action}" if action[:1] in "aeiou" else f"a {action}"


def _what_it_found(step: Step) -> Hashable:
    """The live config the step was planned against (None for a create)."""
    return _frozen(getattr(step, "live", None))


def _found_otherwise(ref: ResourceRef, shown: Step, now: Step) -> str:
    before = getattr(shown, "live", None) or {}
    after = getattr(now, "live", None) or {}
    said = "; ".join(
        f"{c['path']}: {_short(c['before'])} -> {_short(c['after'])}"
        for c in (change.to_json() for change in diff_configs(after, before))
    )
    return f"{ref.label}: its live config changed since the plan was made ({said or 'changed'})"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def _compare(
    ref: ResourceRef, shown: Step | None, now: Step | None, observed_live: bool = False
) -> str | None:
    """One sentence when the step for ``ref`` is not the one shown."""
    if now is None:
        assert shown is not None
        return f"{ref.label}: the {shown.action} shown is no longer needed"
    if shown is None:
        return f"{ref.label}: now needs {_a(now.action)} that was not shown ({_losses(now)})"
    if shown.action != now.action:
        return f"{ref.label}: now {_a(now.action)}, shown as {_a(shown.action)} ({_losses(now)})"
    if _what_it_does(shown) != _what_it_does(now):
        return f"{ref.label}: the {now.action} now changes {_fields(now)} (shown: {_fields(shown)})"
    if _what_it_overwrites(shown) != _what_it_overwrites(now):
        written = "its value was written since it was shown"
        return f"{ref.label}: {written}; the {now.action} would lose that write"
    if _what_it_destroys(shown) != _what_it_destroys(now):
        return f"{ref.label}: the {now.action} now {_losses(now)} (shown: {_losses(shown)})"
    if observed_live and _what_it_found(shown) != _what_it_found(now):
        return _found_otherwise(ref, shown, now)
    return None


def differences(shown: Plan, now: Plan, *, observed_live: bool = False) -> list[str]:
    """What differs between the plan a person approved (``shown``) and the plan made
    again from the live state (``now``): one sentence per resource, none when ``now`` is
    the plan that was reviewed. ``observed_live``: a step planned against another live
    config differs too (a saved plan)."""
    before = {step.ref: step for step in shown.changes}
    after = {step.ref: step for step in now.changes}
    found = []
    for ref in sorted(before.keys() | after.keys(), key=lambda r: r.sort_key):
        said = _compare(ref, before.get(ref), after.get(ref), observed_live)
        if said is not None:
            found.append(said)
    return found
