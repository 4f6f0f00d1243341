"""A plan against the account's JetStream limits, read before any step (docs/capacity.md).

``$JS.API.INFO`` answers the account's limits and usage (per tier when it has tiered
limits); :func:`reconciler.planning.capacity.assess` sums the plan against them. What
the server would refuse raises one ``SpecError`` naming each resource and its spec's
line, in ``plan`` as in ``apply``: nothing has been written then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reconciler.errors import SpecError
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.capacity import assess
from reconciler.planning.steps import Plan
from reconciler.specs.spec import Spec


async def with_capacity(
    client: JetStreamClient, the_plan: Plan, live: LiveState, specs: Sequence[Spec]
) -> Plan:
    """``the_plan`` with its capacity totals and warnings (``Plan.capacity``); a
    ``SpecError`` when the account would refuse part of it."""
    account = await client.account_info()
    found = assess(the_plan, live, account, specs)
    if found.errors:
        raise SpecError(list(found.errors))
    return replace(the_plan, capacity=found.capacity)
