"""A plan against the account's JetStream limits, read before any step (docs/capacity.md).

``$JS.API.INFO`` answers the account's limits and usage (per tier when it has tiered
limits); :func:`reconciler.planning.capacity.assess` sums the plan against them. What
the server would refuse raises one ``SpecError`` naming each resource and its spec's
line, in ``plan`` as in ``apply``: nothing has been written then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reconciler.errors import SpecError
from reconciler.execution.lock import LOCK_MAX_BYTES, bucket_config
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.capacity import assess, scopes, tier_of
from reconciler.planning.steps import Plan
from reconciler.specs.spec import Spec


async def with_capacity(
    client: JetStreamClient,
    the_plan: Plan,
    live: LiveState,
    specs: Sequence[Spec],
    *,
    refuse: bool = True,
    lock_ahead: bool = True,
) -> Plan:
    """``the_plan`` with its capacity totals and warnings (``Plan.capacity``); a
    ``SpecError`` when the account would refuse part of it, unless not ``refuse`` (a
    drift report): then that is among the warnings. ``lock_ahead``: count the apply
    lock's bucket when the account has none yet (a plan; an apply has made it already,
    or runs without it)."""
    account = await client.account_info()
    own = _lock_bucket(live, account) if lock_ahead else {}
    found = assess(the_plan, live, account, specs, own=own)
    if found.errors and refuse:
        raise SpecError(list(found.errors))
    told = tuple(
        replace(error, warning=True, message=f"{error.message} (plan and apply refuse it)")
        for error in found.errors
    )
    capacity = replace(found.capacity, warnings=(*told, *found.capacity.warnings))
    return replace(the_plan, capacity=capacity)


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
