"""Plans and heals on a connection the caller keeps open: the agent's entry points.

``reconcile watch`` keeps one client for hours (it listens to the server's advisories on
it), so it cannot use :func:`~reconciler.execution.run.plan_for`, which opens and closes
its own. These are the same moves on a given client: :func:`plan_on` validates the specs
while the live state is read and plans them with the request's flags (``run._planned``,
the one place they become the planner's arguments); :func:`heal_on` takes the apply lock,
plans again *under the lock* (so a heal never applies what an apply that finished
meanwhile already changed, nor fights a newer state), keeps the steps
:func:`~reconciler.planning.heal.split_for_heal` allows and hands them to the one
executor, the lock's fence verified before each step. The lock is held only for that
and released before it returns: an idle agent holds nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciler.execution import lock
from reconciler.execution.apply import ApplyResult, apply_plan, lease_lost
from reconciler.execution.requests import Observer, PlanRequest
from reconciler.execution.run import _in_thread, _planned, _validated
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.heal import HealSplit, split_for_heal
from reconciler.planning.steps import Plan
from reconciler.specs.spec import Spec


@dataclass(frozen=True)
class Planned:
    """A plan, the specs it was made from and the live state it read (the streams'
    message counts: what a stream deleted later held)."""

    plan: Plan
    specs: tuple[Spec, ...]
    live: LiveState


async def plan_on(client: JetStreamClient, request: PlanRequest, observer: Observer) -> Planned:
    """Validate ``request``'s specs (in a thread) while the live state is read, then plan.
    A ``SpecError`` cancels the read."""
    reading = asyncio.ensure_future(client.fetch_live())
    try:
        specs, warnings = await _in_thread(_validated, request)
    except BaseException:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        raise
    for warning in warnings:
        observer.notice(str(warning))
    the_plan = await _planned(client, specs, request, reading=reading)
    return Planned(the_plan, tuple(specs), reading.result())


@dataclass(frozen=True)
class Healed:
    """A heal's outcome: the plan made under the lock, how it was split, what ran."""

    plan: Plan
    split: HealSplit
    result: ApplyResult | None  # None: nothing was safe to apply


async def heal_on(
    client: JetStreamClient,
    request: PlanRequest,
    specs: Sequence[Spec],
    observer: Observer,
    *,
    lock_timeout: float | None = lock.DEFAULT_TIMEOUT,
    still_wanted: Callable[[], bool] = lambda: True,
    stop: asyncio.Event | None = None,
) -> Healed:
    """Under the apply lock: plan ``specs`` again, apply the steps a heal may, release.

    ``still_wanted`` is asked once the lock is held: False (a newer commit was seen while
    waiting) applies nothing. ``stop`` (SIGTERM) lets the steps in flight finish.
    """
    stop = stop or asyncio.Event()
    async with lock.for_apply(
        client, timeout=lock_timeout, on_notice=observer.notice, on_lost=stop.set, stop=stop
    ) as fence:
        the_plan = await _planned(client, specs, request)
        split = split_for_heal(the_plan)
        if not split.steps or not still_wanted() or stop.is_set():
            return Healed(the_plan, split, None)
        result = await apply_plan(
            split.safe,
            client,
            on_step=observer.step,
            stop=stop,
            guard=None if fence is None else fence.verify,
        )
        if fence is not None and fence.lost and result.interrupted:
            raise lease_lost(fence.lost, result.applied, result.skipped)
        return Healed(the_plan, split, result)
