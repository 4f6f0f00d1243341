"""The verdict: a plan and what a front door allows, in; the refusals, out (pure).

A plan carries everything that can refuse it as values: what its checks found
(``Plan.checks``: fields the server does not support, a migration's room, consumers
working, KeyValue entries, the account's capacity; each a problem at its FILE:LINE),
the policy findings
(``Plan.policy``), the steps lifecycle forbids (``Plan.prevented``), the migrations it may
not act on (``Migrate.blocked``) and the destructive steps with their losses. The
verdict reads them against an :class:`Allowances` (the CLI's ``--allow-*`` flags, the
Action's inputs, a Pulumi resource's ``allow_destroy``) and returns each refusal as a
:class:`~reconciler.errors.RefusedPlan` value with its
:class:`~reconciler.errors.RefusalKind`; :func:`refuse` raises the first, in one place.
Every front door's refusal is this one (Terraform keeps ``Applyable``/``Errored`` on its
plan and returns diagnostics as values).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.errors import Refusal, RefusalKind, RefusedPlan, SpecError
from reconciler.planning.groups import migrate_hint
from reconciler.planning.policy import refusal as policy_refusal
from reconciler.planning.standby import PREVENTED as FAILOVER_PREVENTED
from reconciler.planning.steps import (
    ALLOW_DATA_LOSS,
    ALLOW_REPLACE,
    Migrate,
    Plan,
    Step,
    allowing_flag,
    prevention,
)

__all__ = ["Allowances", "checked", "describe", "refuse", "verdict"]


@dataclass(frozen=True, kw_only=True)
class Allowances:
    """What a front door allows the executor to destroy. ``allow_with`` names the door's
    own way to allow it (the Pulumi resource's ``allow_destroy``) instead of the CLI's
    flags. Nothing allows a policy deny, a prevented step or a blocked migration."""

    allow_replace: bool = False
    allow_data_loss: bool = False
    allow_with: str | None = None


NOTHING_ALLOWED = Allowances()


def describe(step: Step) -> str:
    """``update Consumer ORDERS/NEW``."""
    return f"{step.action} {step.label}"


def checked(plan: Plan) -> tuple[Refusal, ...]:
    """The refusals of the plan's own checks (``Plan.checks``), each the error with its
    problems and kind: a plan they refuse is neither shown nor applied, whatever a
    door allows (``plan`` and ``apply`` stop with its FILE:LINE problems)."""
    return tuple(check.error() for check in plan.checks)


def verdict(plan: Plan, allowances: Allowances = NOTHING_ALLOWED) -> tuple[Refusal, ...]:
    """Every refusal of ``plan`` under ``allowances``, most binding first (what the plan's
    checks found, a policy deny, then what no flag allows, then what a flag would allow);
    empty: it may be applied."""
    found: list[Refusal] = list(checked(plan))
    denied = policy_refusal(plan.policy)
    if denied is not None:
        found.append(denied)
    prevented = plan.prevented
    if prevented:
        found.append(
            RefusedPlan(
                f"refusing to apply: {_prevented_headline(prevented)} (no flag allows it); "
                "nothing was changed.",
                details=[f"{describe(s)}: {prevention(s)}" for s in prevented],
                kind=RefusalKind.PREVENTED,
            )
        )
    blocked = [s for s in plan.steps if isinstance(s, Migrate) and s.blocked]
    if blocked:
        found.append(
            RefusedPlan(
                f"refusing to apply: {len(blocked)} migration(s) cannot be acted on; nothing "
                "was changed.",
                details=[f"{describe(s)}: {s.blocked}" for s in blocked],
                kind=RefusalKind.BLOCKED,
            )
        )
    refused = plan.refused(
        allow_replace=allowances.allow_replace, allow_data_loss=allowances.allow_data_loss
    )
    if refused:
        found.append(_data_loss(refused, allowances.allow_with))
    return tuple(found)


def _prevented_headline(prevented: Sequence[Step]) -> str:
    """What the prevented steps would do, by the rule preventing them: lifecycle's
    ``prevent_destroy``, or the failover rules (``planning.standby``)."""
    failover = sum(prevention(step).startswith(FAILOVER_PREVENTED) for step in prevented)
    said = []
    if len(prevented) > failover:
        count = len(prevented) - failover
        said.append(
            f"{count} step(s) would destroy a resource protected by lifecycle prevent_destroy"
        )
    if failover:
        said.append(
            f"{failover} step(s) would undo a failover or make a standby stream other than "
            "its mirror (docs/dr.md)"
        )
    return " and ".join(said)


def _data_loss(refused: Sequence[Step], allow_with: str | None) -> RefusedPlan:
    flag = allowing_flag(refused)
    if flag == ALLOW_REPLACE:
        flag += f" (or {ALLOW_DATA_LOSS})"
    return RefusedPlan(
        f"refusing to apply: {len(refused)} step(s) would destroy data; nothing was changed. "
        + (allow_with or f"Re-run with {flag} to allow it."),
        details=[_lost(s) for s in refused],
        kind=RefusalKind.DATA_LOSS,
    )


def _lost(step: Step) -> str:
    """A refused step and what it loses; a replace a migration could make instead says
    so, as the plan did (the flag that allows it deletes every message; ``--migrate``
    keeps them)."""
    said = f"{describe(step)}: {'; '.join(loss.summary for loss in step.losses)}"
    hint = migrate_hint()
    return f"{said}; {hint} instead" if hint in step.reasons else said


def refuse(refusals: Sequence[Refusal]) -> None:
    """Raise the first refusal (the one place a verdict becomes an error). When the plan's
    checks found problems of several kinds (the room and the capacity, say), they are
    raised as one ``SpecError`` (the first one's kind) listing every problem at its
    FILE:LINE: one run shows them all."""
    if not refusals:
        return
    first = refusals[0]
    found = [r for r in refusals if isinstance(r, SpecError)]
    if isinstance(first, SpecError) and len(found) > 1:
        raise SpecError([p for r in found for p in r.problems], kind=first.kind)
    raise first
