"""What ``pulumi preview`` says about a resource: no change, update in place, or replace.

Pure: the provider's last outputs hold the live config and the facts of the server it came
from, so a diff needs no connection (a replace's is then checked against the server:
``operations.judge_replace``). The answer is the engine's own plan for the resource
(``reconciler.planning.plan.build_plan``), exactly what ``reconcile plan`` shows for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi_provider.connection import public_connection
from pulumi_provider.inputs import (
    IDENTITY_FIELDS,
    has_unknowns,
    plain,
    secret_inputs,
    spec_body,
    to_spec,
)
from pulumi_provider.operations import (
    NO_ENVIRONMENT,
    Environment,
    Live,
    request_for,
    with_stream,
)
from reconciler.errors import RefusalKind
from reconciler.execution import stages
from reconciler.model.state import LiveState, ServerInfo
from reconciler.model.values import bucket_field_name
from reconciler.planning.plan import build_plan
from reconciler.planning.steps import Observed, Replace, Unchanged
from reconciler.specs.spec import Spec


@dataclass(frozen=True)
class Change:
    """The answer to Diff: whether anything changes, and which properties force a replace."""

    changes: bool
    replaces: list[str] = field(default_factory=list)


def compare(
    olds: Mapping[str, Any],
    news: Mapping[str, Any],
    policies: Sequence[str] = (),
    environment: Environment = NO_ENVIRONMENT,
) -> Change:
    """Compare the last outputs with the new (checked) inputs, planned in ``environment``
    (its lifecycle); a replace is judged by the policy files ``policies``
    (:func:`config_change`)."""
    identity = [f for f in IDENTITY_FIELDS if _value(olds, f) != _value(news, f)]
    if identity:
        return Change(True, identity)
    if has_unknowns(spec_body(news)):
        return Change(True)
    control = _control_changed(olds, news)
    live = recorded_live(olds)
    if live is None:  # outputs written without a live config: compare inputs only
        return Change(control or spec_body(olds) != spec_body(news))
    migrate = bool(_value(news, "migrate"))
    replaces, changed = config_change(
        news, live, migrate=migrate, policies=policies, environment=environment
    )
    # Name the declared properties when they explain the replace; derived defaults that
    # move with them (max_waiting when a pull consumer becomes push) add only noise.
    declared = [f for f in replaces if f in spec_body(news) or f in spec_body(olds)]
    return Change(control or changed, declared or replaces)


def config_change(
    news: Mapping[str, Any],
    live: Live,
    *,
    migrate: bool = False,
    policies: Sequence[str] = (),
    environment: Environment = NO_ENVIRONMENT,
) -> tuple[list[str], bool]:
    """(properties forcing a replace, anything changed): the engine's plan for ``news``;
    with ``migrate``, a change only a migration can make is an update (nothing replaced).

    Pulumi makes a replace itself (delete, then create), never through the executor, so
    the replace is judged here, before anything changes, as apply judges the replace
    step of its plan: refused when the new lifecycle prevents it, or when a policy
    deny rule does not hold for it (``step.action == "replace"``, evaluated on the plan
    against the recorded config: the delete and the create that follow are judged
    again, with the server's counts)."""
    spec = to_spec(news)
    specs = with_stream(spec)
    state = recorded_state(spec, live)
    plan = build_plan(specs, state, migrate=migrate, lifecycle=environment.lifecycle)
    everything = stages.Allowances(allow_replace=True, allow_data_loss=True)
    stages.refuse([r for r in stages.verdict(plan, everything) if r.kind is RefusalKind.PREVENTED])
    entry = next(
        e
        for e in (*plan.changes, *plan.unchanged, *plan.observed)
        if (e.kind, e.stream, e.name) == (spec.kind, spec.stream, spec.name)
    )
    if isinstance(entry, Replace) and policies:
        request = request_for(migrate=migrate, policies=policies, environment=environment)
        judged = asyncio.run(stages.with_policy(plan, specs, state, request))
        stages.refuse([r for r in stages.verdict(judged) if r.kind is RefusalKind.POLICY])
    if isinstance(entry, Unchanged | Observed):  # observed: never written, nothing to do
        return [], False
    if not isinstance(entry, Replace):
        return [], True
    return replaced_properties(entry), True


def replaced_properties(step: Replace) -> list[str]:
    """The properties whose change forces the replace, named as the resource's inputs."""
    return sorted({bucket_field_name(step.kind, reason.field) for reason in step.because})


def recorded_state(spec: Spec, live: Live) -> LiveState:
    """The live state the outputs recorded, shaped as the planner reads a server."""
    stream = spec.stream_name
    if spec.kind != "Consumer":
        return LiveState(server=live.server, streams={stream: live.config})
    return LiveState(
        server=live.server,
        streams={stream: live.stream_config or {}},
        consumers={(stream, spec.name): live.config},
    )


def recorded_live(outputs: Mapping[str, Any]) -> Live | None:
    """The live config and server facts stored in a resource's outputs."""
    config = plain(outputs.get("live_config"))
    server = plain(outputs.get("server"))
    if not isinstance(config, dict) or not isinstance(server, dict):
        return None
    facts = ServerInfo.from_json(server)
    stream_config = plain(outputs.get("stream_config"))
    return Live(facts, config, stream_config=stream_config if stream_config else None)


def server_facts(server: ServerInfo) -> dict[str, Any]:
    """The server facts kept in outputs (enough for a later pure diff): the plan's."""
    return server.to_json()


#: The boolean control inputs: turning one on or off is an update of the outputs.
CONTROL_FLAGS = ("allow_destroy", "migrate")


def _control_changed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """Whether an input that steers the provider changed: an update, so the outputs
    (what Pulumi's delete gets) record it. ``lifecycle`` is one: a delete is governed
    by the lifecycle recorded (``mode: observe`` changes no config, so no plan shows it);
    which inputs are secrets is another (the outputs holding them become secrets)."""
    flags = any(bool(_value(olds, f)) != bool(_value(news, f)) for f in CONTROL_FLAGS)
    flags = flags or _value(olds, "lifecycle") != _value(news, "lifecycle")
    flags = flags or secret_inputs(olds) != secret_inputs(news)  # which outputs are secret
    old_conn = public_connection(_value(olds, "connection"))
    new_conn = public_connection(_value(news, "connection"))
    return flags or old_conn != new_conn


def _value(props: Mapping[str, Any], key: str) -> Any:
    return plain(props.get(key))
