"""Plans and heals on a connection the caller keeps open: the agent's entry points.

``reconcile watch`` keeps one client for hours (it listens to the server's advisories on
it), so it cannot use :func:`~reconciler.execution.run.plan_for`, which opens and closes
its own. These are the same moves on a given client: :func:`plan_on` validates the specs
while the live state is read and plans them with the request's flags (``pipeline.plan_reading``,
the one place they become the planner's arguments); :func:`heal_on` takes the apply lock,
plans again *under the lock* (so a heal never applies what an apply that finished
meanwhile already changed, nor fights a newer state), keeps the steps
:func:`~reconciler.planning.heal.split_for_heal` allows and hands them to the one
executor, the lock's fence verified before each step. The lock is held only for that
and released before it returns: an idle agent holds nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from reconciler.execution import lock, pipeline
from reconciler.execution.apply import ApplyResult
from reconciler.execution.requests import Observer, PlanRequest
from reconciler.execution.verdict import checked, refuse
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient
from reconciler.model.state import LiveState
from reconciler.planning.heal import HealSplit, split_for_heal
from reconciler.planning.steps import Plan, origins
from reconciler.specs.spec import Spec


@dataclass(frozen=True)
class Planned:
    """A plan, the specs it was made from and the live state it read (the streams'
    message counts: what a stream deleted later held)."""

    plan: Plan
    specs: tuple[Spec, ...]
    live: LiveState


async def _read(client: JetStreamClient, only: frozenset[str] | None) -> LiveState:
    """The whole account's live state, or only the streams ``only`` names (each one's
    INFO and consumer list: what a stream or consumer advisory asks to look at again)."""
    return await pipeline.read(client, pipeline.Scope(only))


#: Each stream's specs with their places in the request's list (:func:`index_of`).
SpecIndex = Mapping[str, Sequence[tuple[int, Spec]]]


def index_of(specs: Sequence[Spec]) -> dict[str, list[tuple[int, Spec]]]:
    """``specs`` by stream, each with its place in ``specs`` (a caller that plans the
    same specs again and again keeps it: a targeted plan then costs what its streams do)."""
    index: dict[str, list[tuple[int, Spec]]] = {}
    for place, spec in enumerate(specs):
        index.setdefault(spec.stream_name, []).append((place, spec))
    return index


def scope(index: SpecIndex, only: frozenset[str]) -> frozenset[str]:
    """``only`` with the streams its declared streams mirror or source (to a fixed
    point): a targeted plan sees the origins its steps depend on."""
    found = set(only)
    todo = list(only)
    while todo:
        for _, spec in index.get(todo.pop(), ()):
            for origin in origins(spec.config):
                if origin not in found:
                    found.add(origin)
                    todo.append(origin)
    return frozenset(found)


async def plan_on(
    client: JetStreamClient,
    request: PlanRequest,
    observer: Observer,
    *,
    only: frozenset[str] | None = None,
    specs: Sequence[Spec] | None = None,
    index: SpecIndex | None = None,
) -> Planned:
    """Validate ``request``'s specs (in a thread) while the live state is read, then plan.
    A ``SpecError`` cancels the read.

    ``only``: a targeted plan of the specs of these streams (their consumers, KeyValue
    entries and origins with them) against a read of just those streams; None: every
    spec against the whole account. A targeted plan lists no other resource and cannot
    see a subject overlap with a stream it did not read (the server then refuses the
    create, and the next full plan says why). ``specs``: the request's specs as a plan
    validated them before (the files unchanged since): not validated again; ``index``:
    their :func:`index_of`, kept with them."""
    reading = asyncio.ensure_future(_read(client, None)) if only is None else None
    if specs is None:
        specs = await pipeline.loaded_while(request, observer, reading)
    if reading is None:
        assert only is not None
        index = index_of(specs) if index is None else index
        only = scope(index, only)
        chosen = sorted(pair for stream in only for pair in index.get(stream, ()))
        specs = [spec for _, spec in chosen]  # in the request's order
        reading = asyncio.ensure_future(_read(client, only))
    the_plan = await pipeline.plan_reading(client, specs, request, reading=reading)
    refuse(checked(the_plan))  # the verdict of the plan's own checks
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
    still_wanted: Callable[[], Awaitable[bool]] | None = None,
    stop: asyncio.Event | None = None,
    only: frozenset[str] | None = None,
    held_back: Mapping[ResourceRef, str] = MappingProxyType({}),
) -> Healed:
    """Under the apply lock: plan ``specs`` again, apply the steps a heal may, release.

    ``still_wanted`` is awaited once the lock is held, before the plan: False (the agent
    looked at the branch head and found a newer commit) applies nothing. ``stop``
    (SIGTERM) lets the steps in flight finish. A lease lost meanwhile stops this heal's
    steps (``ApplyFailed``), never ``stop``: the caller goes on.
    ``only``: as for :func:`plan_on` (``specs`` are then that plan's, already scoped).
    ``held_back``: resources not healed for now, each with why (``split_for_heal``).
    """
    stop = stop or asyncio.Event()
    halt = asyncio.Event()  # this heal's steps stop: ``stop``, or the lease lost
    relay = asyncio.ensure_future(stop.wait())
    relay.add_done_callback(lambda _: halt.set())
    try:
        async with pipeline.locked(
            client,
            timeout=lock_timeout,
            on_notice=observer.notice,
            on_lost=halt.set,
            stop=stop,
            keep_lineage=False,
        ) as held:
            wanted = True if still_wanted is None else await still_wanted()
            reading = asyncio.ensure_future(_read(client, only))
            the_plan = await pipeline.plan_reading(
                client, specs, request, reading=reading, locked=True
            )
            refuse(checked(the_plan))
            split = split_for_heal(the_plan, held_back)
            if not split.steps or not wanted or halt.is_set():
                return Healed(the_plan, split, None)
            result = await pipeline.execute(
                split.safe, client, observer=observer, held=held, stop=halt
            )
            return Healed(the_plan, split, result)
    finally:
        relay.cancel()
