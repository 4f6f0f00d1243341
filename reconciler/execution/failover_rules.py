"""The failover's server changes as apply's :class:`~reconciler.planning.steps.Plan`
steps, judged as apply judges a plan (docs/dr.md#applys-rules-policies-and-lifecycle),
before it asks and before anything changes:

- each environment's lifecycle, merged with the stream's and its consumers' (safety
  wins): ``mode: observe`` on either side refuses the pair (never written);
  ``prevent_destroy`` does not: fencing keeps every message and consumer of the origin
  and a rollback gives its subjects back, promoting keeps the mirror's messages (no step
  here deletes anything, so the verdict finds nothing to prevent);
- the policy files of each environment (the project's ``policies:``, then ``--policy``),
  evaluated on that environment's steps: the origin's plan (an ``Update`` of each stream:
  its subjects become the fence subject, or, in a rollback, its own again) and the
  standby's (an ``Update`` of each mirror giving back the ``duplicate_window`` it lacks,
  before the fence; an ``Update`` of each mirror: ``mirror`` dropped, the subjects
  given; a ``Create`` of each consumer);
- the shared verdict (``execution.verdict``): a deny exits 3;
- each side's steps against every stream of its server, as apply's plan is
  (``planning.live_checks``: a promotion giving subjects another stream of the standby
  holds), and the account's room for what it creates (``capacity_checks.with_capacity``,
  as apply and restore check it): a ``SpecError`` naming the resource.

Reads only; the live configs are read again here, as the steps will find them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from reconciler.errors import RefusalKind, RefusedPlan
from reconciler.execution.capacity_checks import with_capacity, with_check
from reconciler.execution.pair_reads import PairState, _info
from reconciler.execution.verdict import refuse, verdict
from reconciler.jetstream import JetStreamClient
from reconciler.model.normalize import desired_config
from reconciler.model.standby import fence_subject, lacking_window, promoted_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.model.values import printable
from reconciler.planning.live_checks import live_problems
from reconciler.planning.policy import evaluate as evaluate_policy
from reconciler.planning.steps import Create, Plan, Step, Update
from reconciler.specs.lifecycle import Lifecycle
from reconciler.specs.policy import load_policy
from reconciler.specs.spec import Spec

if TYPE_CHECKING:
    from reconciler.execution.failover import FailoverPlan, FailoverRequest
    from reconciler.execution.requests import PlanRequest
    from reconciler.planning.standby import Pair

__all__ = ["SidePlans", "judged"]


@dataclass(frozen=True)
class SidePlans:
    """The failover's steps on each server, as apply's plans, with the policy findings."""

    origin: Plan
    standby: Plan


async def judged(
    the_plan: FailoverPlan,
    request: FailoverRequest,
    origin: JetStreamClient | None,
    standby: JetStreamClient,
) -> SidePlans:
    """The failover's steps on both servers, refused (:class:`RefusedPlan`) when a
    lifecycle observes a resource they write, a policy denies them (exit 3) or the
    shared verdict refuses them otherwise; nothing is changed here."""
    _refuse_observed(the_plan, request)
    origin_server = await origin.server_info() if origin is not None else ServerInfo("", 0)
    standby_server = await standby.server_info()
    origin_steps: list[Step] = []
    standby_steps: list[Step] = []
    origin_live: dict[str, Mapping[str, Any]] = {}
    standby_live: dict[str, Mapping[str, Any]] = {}
    specs: list[Spec] = []
    for state in the_plan.states:
        if not the_plan.actions(state):
            continue
        pair = state.pair
        specs += [pair.stream, *pair.consumers]
        live = await _info(origin, state.name)
        if live is not None:
            config = dict(live.get("config") or {})
            origin_live[state.name] = config
            step = _origin_step(state, config, the_plan)
            if step is not None:
                origin_steps.append(step)
        if the_plan.rollback:
            continue
        mirror = await _info(standby, state.name)
        if mirror is None:
            continue
        config = dict(mirror.get("config") or {})
        standby_live[state.name] = config
        promoted = config
        if not state.promoted:
            restored = _restored(state, config, the_plan)
            if restored is not config:
                why = "failover: restore the mirror's duplicate_window before the fence"
                standby_steps.append(_mirror_update(pair, restored, config, why))
            promoted = promoted_config(restored, state.subjects, state.pair.stream.config)
            why = "failover: promote the mirror (`mirror` dropped, subjects given)"
            standby_steps.append(_mirror_update(pair, promoted, restored, why))
        for spec in pair.consumers:
            if spec.name not in state.consumers_missing:
                continue
            made = desired_config(
                spec, standby_server, stream_config=promoted, owner=request.standby.owner
            )
            standby_steps.append(
                Create(
                    ref=spec.ref,
                    config=made,
                    source=spec.source,
                    reasons=("failover: created at the origin's ack floor + 1",),
                )
            )
    sides = SidePlans(
        await _evaluated(
            Plan(origin_server, tuple(origin_steps)), request.origin, origin_live, specs
        ),
        await _evaluated(
            Plan(standby_server, tuple(standby_steps)), request.standby, standby_live, specs
        ),
    )
    if origin is not None and sides.origin.changes:
        sides = replace(sides, origin=await _against_live(origin, sides.origin, specs))
    if sides.standby.changes:
        sides = replace(sides, standby=await _against_live(standby, sides.standby, specs))
    for side in (sides.origin, sides.standby):
        refuse(verdict(side))  # the shared verdict (the plan's checks first): nothing allowed
    return sides


async def _against_live(client: JetStreamClient, plan: Plan, specs: Sequence[Spec]) -> Plan:
    """``plan`` judged against every stream of its server as apply's plan is: the
    subjects it gives overlapping another stream's (the server refuses the promotion
    then, with the origin fenced: neither side takes writes), the other live checks
    (``planning.live_checks``), and the account's room for what it creates, counted as
    apply counts it (``capacity_checks.with_capacity``): checks the verdict raises."""
    live = await client.fetch_live()
    checked = with_check(plan, RefusalKind.INVALID, live_problems(specs, plan.changes, live))
    return await with_capacity(client, checked, live, specs, lock_ahead=False)


def _mirror_update(pair: Pair, config: dict[str, Any], live: dict[str, Any], why: str) -> Update:
    """One of the failover's updates of the standby's mirror, as a plan step."""
    return Update(
        ref=pair.stream.ref, config=config, live=live, source=pair.stream.source, reasons=(why,)
    )


def _restored(state: PairState, live: dict[str, Any], the_plan: FailoverPlan) -> dict[str, Any]:
    """The mirror's config once the failover gave it back the duplicate window it lacks
    (``live`` itself when it lacks none): before the fence, so a planned failover only;
    otherwise the promotion gives it (``model.standby.promoted_config``)."""
    lacking = lacking_window(live, state.pair.stream.config)
    if lacking is None or state.origin_fenced or the_plan.unplanned:
        return live
    return {**live, "duplicate_window": lacking[1]}


def _origin_step(state: PairState, live: Mapping[str, Any], the_plan: FailoverPlan) -> Step | None:
    """The origin's update: fenced (its subjects -> the fence subject), or in a rollback
    given its own subjects back; None when it changes nothing there."""
    fenced = [fence_subject(state.name)]
    if the_plan.rollback:
        if not state.origin_fenced:
            return None
        subjects, why = state.subjects, "failover rollback: the origin's subjects given back"
    else:
        if state.origin_fenced or the_plan.unplanned:
            return None
        subjects, why = fenced, f"failover: fence the origin (subjects -> {fenced[0]})"
    stream = state.pair.stream
    return Update(
        ref=stream.ref,
        config={**live, "subjects": subjects},
        live=live,
        source=stream.source,
        reasons=(why,),
    )


async def _evaluated(
    plan: Plan, side: PlanRequest, live: Mapping[str, Mapping[str, Any]], specs: Sequence[Spec]
) -> Plan:
    """``plan`` with the policy findings of ``side``'s policy files (none: as it is)."""
    policy = load_policy(side.policies)
    if not policy or not plan.changes:
        return plan
    live_state = LiveState(server=plan.server, streams=dict(live))
    findings = await evaluate_policy(policy, plan, specs, live_state, environment=side.env)
    return replace(plan, policy=findings)


def _refuse_observed(the_plan: FailoverPlan, request: FailoverRequest) -> None:
    """An environment or a resource in lifecycle ``mode: observe`` is never written: a
    pair whose failover would write one is refused, naming where it was declared."""
    problems: list[str] = []
    for state in the_plan.states:
        if not the_plan.actions(state):
            continue
        pair = state.pair
        sides: list[tuple[PlanRequest, Spec, str]] = []
        # the origin is written by a fence (not yet fenced) or a rollback (fenced); never
        # by an unplanned failover
        if not the_plan.unplanned and state.origin_fenced == the_plan.rollback:
            sides.append((request.origin, pair.stream, "its stream on the origin"))
        if not the_plan.rollback:
            if not state.promoted:
                sides.append((request.standby, pair.stream, "its stream on the standby"))
            sides += [
                (request.standby, spec, f"its consumer {spec.name}")
                for spec in pair.consumers
                if spec.name in state.consumers_missing
            ]
        for side, spec, what in sides:
            lifecycle: Lifecycle = spec.lifecycle.merged(side.lifecycle)
            if lifecycle.observe:
                problems.append(
                    f"{state.name}: {what} ({side.env}) has lifecycle mode observe "
                    f"({lifecycle.observed_at}): never written"
                )
    if problems:
        raise RefusedPlan(
            "refusing to fail over; nothing was changed:",
            details=[printable(p) for p in dict.fromkeys(problems)],
            kind=RefusalKind.PREVENTED,
        )
