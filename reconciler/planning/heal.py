"""Which steps of a plan an unattended heal may apply: the agent's one rule.

A heal (``reconcile watch --mode heal``) applies a *subset* of the plan's steps, with
nobody asked: creates and updates that delete nothing. Everything else needs a person:
a replace, a delete (prune), a migration, an update whose ``losses`` are not empty (the
same :attr:`~reconciler.planning.steps.Entry.destructive` the executor refuses without a
flag), and every step that depends on one of those (a consumer of a stream being
replaced, a stream sourcing or mirroring one). A consumer created again because its
stream is replaced (a :class:`~reconciler.planning.steps.Create` with ``live``) goes
with its stream. Resources in ``lifecycle.mode: observe`` have no steps at all, so a
heal never writes them; a step lifecycle prevents (``planning.steps.prevention``, such
as a consumer's filter change on a protected interest stream) needs a person too.

Pure: a :class:`~reconciler.planning.steps.Plan` in, a :class:`HealSplit` out; the heal
plan keeps the plan's server, owner and notes, so the executor and the renderers treat it
as any plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from reconciler.identity import ResourceRef
from reconciler.planning.groups import migrating
from reconciler.planning.steps import (
    Create,
    Delete,
    Migrate,
    Plan,
    Replace,
    Step,
    Update,
    origins,
    prevention,
)


class NeedsPerson(StrEnum):
    """Why a heal leaves a step to a person, as a value: what the agent's ``/status`` and
    its ``reconcile_steps_refused_total`` metric (label ``action``) read."""

    PREVENTED = "prevented"  # lifecycle: no flag allows it
    REPLACE = "replace"
    DELETE = "delete"
    MIGRATION = "migration"
    UPDATE = "update"  # an update that deletes stored data in place
    RECREATED = "recreated"  # a consumer created again with its replaced stream
    DEPENDS = "depends"  # depends on a step that needs a person
    CONTESTED = "contested"  # healed again and again: another writer keeps changing it


@dataclass(frozen=True)
class Refusal:
    """A step a heal leaves to a person, why (one short sentence) and its kind."""

    step: Step
    why: str
    kind: NeedsPerson


@dataclass(frozen=True)
class HealSplit:
    """A plan split into what a heal applies (``safe``, a plan itself) and the rest."""

    safe: Plan
    refused: tuple[Refusal, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.safe.changes


def _own_reason(step: Step) -> tuple[str, NeedsPerson] | None:
    """Why ``step`` alone needs a person, or None when a heal may apply it."""
    if prevented := prevention(step):  # lifecycle: no flag allows it (the executor refuses)
        return prevented, NeedsPerson.PREVENTED
    match step:
        case Replace():
            return "a replace deletes the resource and its data", NeedsPerson.REPLACE
        case Delete():
            return "a delete (prune) is never applied by a heal", NeedsPerson.DELETE
        case Migrate():
            return f"a migration moves the data: run {migrating()}", NeedsPerson.MIGRATION
        case Update() if step.destructive:
            return "this update deletes stored data in place", NeedsPerson.UPDATE
        case Create() if step.live is not None:
            return "created again only with its replaced stream", NeedsPerson.RECREATED
        case Create() | Update():
            return None


def _blocks(refusal: Refusal) -> bool:
    """Whether a stream's refused step holds back the steps depending on it. A held back
    one (``contested``) does only when the stream is missing (its create): one that exists
    keeps its consumers, entries and the streams sourcing it healed, as nobody fought
    over them."""
    return refusal.kind is not NeedsPerson.CONTESTED or isinstance(refusal.step, Create)


def _depends_on(step: Step) -> set[str]:
    """The streams whose steps ``step`` needs first: its own stream for a consumer or a
    KeyValue entry, the origins of a stream mirroring or sourcing others."""
    if step.ref.is_child:
        return {step.stream_name}
    config = None if isinstance(step, Delete) else step.config
    return origins(config)


def split_for_heal(
    plan: Plan, held_back: Mapping[ResourceRef, str] = MappingProxyType({})
) -> HealSplit:
    """The steps a heal may apply, and each refused step with its reason. ``held_back``:
    resources the agent does not heal for now, each with why (``agent.flapping``: healed
    again and again, another writer keeps changing them)."""
    refused: dict[int, Refusal] = {}
    for index, step in enumerate(plan.changes):
        reason = _own_reason(step)
        if reason is not None:
            refused[index] = Refusal(step, *reason)
        elif step.ref in held_back:
            refused[index] = Refusal(step, held_back[step.ref], NeedsPerson.CONTESTED)
    changed = True
    while changed:  # a refused stream takes what depends on it along (to a fixed point)
        changed = False
        blocked = {
            r.step.stream_name: r.step.label
            for r in refused.values()
            if not r.step.ref.is_child and _blocks(r)
        }
        for index, step in enumerate(plan.changes):
            if index in refused:
                continue
            hit = sorted(_depends_on(step) & blocked.keys())
            if hit:
                why = f"depends on {blocked[hit[0]]}, which needs a person"
                refused[index] = Refusal(step, why, NeedsPerson.DEPENDS)
                changed = True
    safe = tuple(step for index, step in enumerate(plan.changes) if index not in refused)
    ordered = tuple(refused[index] for index in sorted(refused))
    return HealSplit(safe=replace(plan, changes=safe), refused=ordered)
