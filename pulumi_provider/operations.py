"""The provider's server work: one resource read, created, updated or deleted.

Everything here goes through the engine: ``reconciler.planning.plan`` plans the one resource,
``reconciler.execution.apply`` (the CLI's executor) applies it, ``reconciler.jetstream`` speaks the
API.
Each function takes an open client; the provider opens one per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reconciler.errors import ApplyFailed, NotFound, ReconcileError, RefusedPlan
from reconciler.execution.apply import apply_plan, check_allowed
from reconciler.execution.requests import QUIET, Observer
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient
from reconciler.model.loss import Loss, consumer_gone
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.planning.plan import build_plan, holding
from reconciler.planning.policy import check_policy
from reconciler.planning.steps import Delete, Plan
from reconciler.specs.spec import Spec

#: The identity of a managed resource: enough to find it on a server. Its Pulumi id is
#: ``ref.path``: the stream name, ``STREAM/CONSUMER``, or the bucket name.
Target = ResourceRef

#: How a Pulumi program allows what the executor refuses (an update that deletes stored
#: messages, a delete of a stream holding some).
ALLOW_WITH = "It deletes stored messages: set allow_destroy=True on the resource to allow it."


@dataclass(frozen=True)
class Live:
    """A resource as the server holds it: its config verbatim and the server's facts."""

    server: ServerInfo
    config: Mapping[str, Any]  # a consumer's config, or the (bucket's) stream config
    messages: int = 0
    stream_config: Mapping[str, Any] | None = None  # consumers: their stream's config


async def observe(client: JetStreamClient, target: Target) -> Live | None:
    """The live resource, or None when the server does not have it."""
    server = await client.server_info()
    try:
        stream = await client.stream_info(target.stream_name)
        if target.kind != "Consumer":
            messages = int(stream.get("state", {}).get("messages", 0))
            return Live(server, stream["config"], messages)
        info = await client.consumer_info(target.stream_name, target.name)
    except NotFound:
        return None
    return Live(server, info["config"], stream_config=stream["config"])


async def converge(
    client: JetStreamClient,
    spec: Spec,
    *,
    allow_data_loss: bool = False,
    migrate: bool = False,
    observer: Observer = QUIET,
    policies: Sequence[str] = (),
) -> Live:
    """Create or update the resource exactly as ``reconcile apply`` would, then read it.

    The engine plans this one spec against the live resource and its one executor applies
    the plan: an existing resource without the managed-by marker is adopted, an update
    sends the complete config. A replace is refused here: Pulumi plans replaces itself
    (Diff), so one showing up now means the server changed since the last refresh. An
    update that would delete stored messages (a tighter limit on a stream holding them)
    is refused unless the resource sets ``allow_destroy``, like a delete. With
    ``migrate``, a change an update cannot make migrates the messages (the resource's
    ``migrate`` input). The provider reads only the resource's own stream, so it never
    sees, and never acts on, a migration record left by an interrupted migration:
    ``reconcile apply --migrate`` finishes or rolls back such a migration
    (docs/migrate.md).
    """
    target = spec.ref
    state = await live_state(client, target)
    plan = build_plan(with_stream(spec), state, migrate=migrate)
    plan = await with_policy(plan, policies, [spec], state)
    check_policy(plan.policy)  # a deny rule: refused before any step, naming the rule
    if plan.lossy_updates or plan.prevented:  # the executor's refusal (lifecycle: says why)
        check_allowed(
            plan, allow_replace=False, allow_data_loss=allow_data_loss, allow_with=ALLOW_WITH
        )
    try:
        await apply_plan(
            plan,
            client,
            allow_replace=False,
            allow_data_loss=allow_data_loss,
            on_step=observer.step,
        )
    except RefusedPlan as err:
        raise RefusedPlan(
            f"{spec.kind} {target.path} changed on the server in a way an update "
            "cannot undo; run `pulumi refresh`, then `pulumi up` replaces it"
        ) from err
    live = await observe(client, target)
    if live is None:
        observed = [note.reasons[0] for note in plan.observed if note.missing]  # lifecycle
        why = observed[0] if observed else "vanished right after apply"
        raise ReconcileError(f"{spec.kind} {target.path}: {why}")
    return live


async def live_state(client: JetStreamClient, target: Target) -> LiveState:
    """The live state around one resource: its stream and (consumers) the consumer."""
    server = await client.server_info()
    try:
        stream = await client.stream_info(target.stream_name)
    except NotFound:
        return LiveState(server=server)
    config = stream["config"]
    consumers: dict[tuple[str, str], Mapping[str, Any]] = {}
    if target.kind == "Consumer":
        with contextlib.suppress(NotFound):
            info = await client.consumer_info(target.stream_name, target.name)
            consumers[(target.stream_name, target.name)] = info["config"]
    return LiveState(
        server=server,
        streams={target.stream_name: config},
        stream_state={target.stream_name: StreamState.from_info(stream)},
        consumers=consumers,
    )


def with_stream(spec: Spec) -> list[Spec]:
    """The specs to plan: a consumer comes with an ``external`` declaration of its stream."""
    if spec.kind != "Consumer" or spec.stream is None:
        return [spec]
    stream = Spec(kind="Stream", name=spec.stream, config={}, source=spec.source, external=True)
    return [stream, spec]


async def with_policy(
    plan: Plan, policies: Sequence[str], specs: Sequence[Spec], state: LiveState
) -> Plan:
    """``plan`` with the findings of the policy files ``policies`` (docs/policy.md): the
    engine's rules and evaluation, for the one resource Pulumi plans."""
    if not policies:
        return plan
    from reconciler.planning.policy import evaluate
    from reconciler.specs.policy import load_policy

    findings = await evaluate(load_policy([Path(p) for p in policies]), plan, specs, state)
    return replace(plan, policy=findings)


async def destroy(
    client: JetStreamClient,
    target: Target,
    *,
    allow_destroy: bool,
    observer: Observer = QUIET,
    policies: Sequence[str] = (),
) -> None:
    """Delete the resource through the one executor: a stream or bucket holding messages
    is refused there (:func:`~reconciler.execution.apply.check_allowed`) unless the
    resource sets ``allow_destroy``; so is the last consumer of an interest stream holding
    messages (the server deletes them with it: ``model.loss.consumer_gone``, as the planner
    counts it). Any other consumer, or an empty stream, loses no message.

    A resource already gone is not an error: the goal state is reached.
    """
    live = await observe(client, target)
    if live is None:
        return
    held = 0 if target.kind == "Consumer" else live.messages
    losses = (Loss("", f"holds {held} message(s)", held),) if held else ()
    step = Delete(ref=target, live=live.config, losses=losses)
    if target.kind == "Consumer":  # its protected interest stream needs it (docs/spec-format.md)
        with contextlib.suppress(NotFound):
            info = await client.stream_info(target.stream_name)
            gone = consumer_gone(info["config"], StreamState.from_info(info))  # as the planner
            held = gone.messages or 0  # the last consumer of an interest stream: its messages
            step = replace(step, losses=(gone,), prevented=holding(step, info["config"]))
    plan = Plan(server=live.server, changes=(step,))
    plan = await with_policy(plan, policies, [], LiveState(server=live.server))
    check_policy(plan.policy)
    allowed = allow_destroy or not held
    check_allowed(plan, allow_replace=allowed, allow_with=ALLOW_WITH)
    try:
        await apply_plan(plan, client, allow_replace=allowed, on_step=observer.step)
    except ApplyFailed:
        if await observe(client, target) is not None:
            raise  # gone meanwhile: the goal state is reached


async def _ignore_missing(request: Awaitable[object]) -> None:
    with contextlib.suppress(NotFound):
        await request
