"""A plan against the account's JetStream limits, read before any step (docs/capacity.md).

``$JS.API.INFO`` answers the account's limits and usage (per tier when it has tiered
limits); the server's own limits (``max_file_store``) and every account's reservations
come from its ``/jsz`` where the connection names a way to read it (the monitoring
endpoint, a system account user: ``jetstream.server_limits``), and are said to be
unknown otherwise. :func:`reconciler.planning.capacity.assess` sums the plan against
them. What the server would refuse is a list of problems naming each resource and its
spec's line: the plan's ``Check`` (:func:`capacity_of`, :func:`with_capacity`), raised
by the verdict, in ``plan`` as in ``apply``, a restore and a failover: nothing has been
written then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reconciler.errors import Problem, RefusalKind
from reconciler.execution.lock import LOCK_MAX_BYTES, bucket_config
from reconciler.identity import LOCK_BUCKET, stream_of
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.capacity import UNREAD, ServerRoom, assess, scopes, server_room, tier_of
from reconciler.planning.steps import Check, Plan
from reconciler.specs.spec import Spec


async def with_capacity(
    client: JetStreamClient,
    the_plan: Plan,
    live: LiveState,
    specs: Sequence[Spec],
    *,
    lock_ahead: bool = True,
) -> Plan:
    """``the_plan`` with its capacity totals and warnings (``Plan.capacity``) and, when
    the account would refuse part of it, a ``capacity`` check on it (``Plan.checks``:
    the verdict raises it). ``lock_ahead``: count the apply lock's bucket when the
    account has none yet (a plan; an apply has made it already, or runs without it)."""
    the_plan, errors = await capacity_of(client, the_plan, live, specs, lock_ahead=lock_ahead)
    return with_check(the_plan, RefusalKind.CAPACITY, errors)


def with_check(the_plan: Plan, kind: RefusalKind, problems: Sequence[Problem]) -> Plan:
    """``the_plan`` with a ``kind`` check of ``problems`` added (none: as it is)."""
    if not problems:
        return the_plan
    return replace(the_plan, checks=(*the_plan.checks, Check(kind, tuple(problems))))


async def capacity_of(
    client: JetStreamClient,
    the_plan: Plan,
    live: LiveState,
    specs: Sequence[Spec],
    *,
    refuse: bool = True,
    lock_ahead: bool = True,
) -> tuple[Plan, list[Problem]]:
    """:func:`with_capacity` with what the account would refuse as values: the plan with
    its totals and warnings, and the problems that refuse it (none when not ``refuse``:
    then they are among the warnings)."""
    account = await client.account_info()
    own = _lock_bucket(live, account) if lock_ahead else {}
    server = await _server_room(client, live)
    found = assess(the_plan, live, account, specs, own=own, server=server)
    errors = list(found.errors) if refuse else []
    told = tuple(
        replace(error, warning=True, message=f"{error.message} (plan and apply refuse it)")
        for error in (() if refuse else found.errors)
    )
    lock = stream_of("KeyValue", LOCK_BUCKET)
    capacity = replace(
        found.capacity,
        warnings=(*told, *found.capacity.warnings),
        lock=lock if lock in live.streams else None,
    )
    return replace(the_plan, capacity=capacity), errors


#: Why a cluster's server limits are not checked.
IN_A_CLUSTER = (
    "not checked in a cluster: each server has its own, and the cluster places each "
    "stream's replicas on servers of its choosing"
)


async def _server_room(client: JetStreamClient, live: LiveState) -> ServerRoom:
    """The connected server's own limits and reservations, or why they are unknown."""
    if live.server.clustered:
        return ServerRoom(IN_A_CLUSTER)
    found = await client.server_jsz()
    if found is None:
        return ServerRoom(UNREAD)
    return server_room(found.jsz, found.source)


def _lock_bucket(live: LiveState, account: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The apply lock's bucket, as ``lock.ensure_bucket`` will make it, when the account
    has none yet: a stream of the account like any other, which apply makes before
    its first step."""
    config = bucket_config(LOCK_BUCKET, replicas=1)
    if config["name"] in live.streams:
        return {}
    scoped = scopes(account)
    scope = scoped.get(tier_of(config, None not in scoped))
    if scope is not None and scope.max_bytes_required:
        config = bucket_config(LOCK_BUCKET, replicas=1, max_bytes=LOCK_MAX_BYTES)
    return {str(config["name"]): config}
