"""The engine's entry points: the same four moves behind every front door.

``plan`` and ``apply`` validate every spec before anything is written or planned (a
plan with a server named reads the live state while it validates), read the live state
once (paged), build a frozen :class:`~reconciler.planning.plan.Plan` and, for apply,
hand it to the one executor. The CLI, the GitHub Action, the drift report and the
fleet snapshot all call these; none of them re-implements a phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from reconciler.errors import ReconcileError, RefusalKind, RefusedPlan
from reconciler.execution import pipeline
from reconciler.execution.apply import ApplyResult
from reconciler.execution.pair_reads import pairs_health
from reconciler.execution.requests import QUIET, ApplyRequest, Observer, PlanRequest
from reconciler.execution.saved_plans import (
    check_plan,
    check_specs,
    same_server,
    saved_identity,
    saved_request,
    spec_digest,
)
from reconciler.execution.verdict import Allowances, checked, refuse, verdict
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.plan import (
    DEFAULT_OWNERSHIP,
    Ownership,
)
from reconciler.planning.policy import check_policy
from reconciler.planning.review import differences
from reconciler.planning.saved import SavedPlan
from reconciler.planning.steps import Plan
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.policy import NO_POLICY, Policy, load_policy
from reconciler.specs.spec import Spec

Notice = Callable[[str], None]
_T = TypeVar("_T")

#: Why an apply to a named server without a question nor ``approved`` changes nothing.
NOT_APPROVED = "no terminal to confirm on; pass --yes"


def _quiet(_: str) -> None:
    """Default notice sink: say nothing."""


def check_approved(
    approved: bool, server: ServerInfo, options: ConnectionOptions, verb: str
) -> None:
    """Changes nobody was asked about: refused unless ``approved`` (``--yes``, or a
    library call) or the server is the embedded one (``apply``, ``restore``)."""
    if not (approved or server.embedded):
        where = server.address or options.display_servers
        message = f"{NOT_APPROVED} to {verb} to {where}: nothing was changed"
        raise RefusedPlan(message, kind=RefusalKind.NOT_APPROVED)


def approvable(approved: bool, asks: bool, client: JetStreamClient) -> bool:
    """Whether a change can be approved at all: ``approved`` (``--yes``, a library call),
    a person asked at a terminal (``asks``) or the embedded server. When none can, the
    plan is only read (a plan with changes is refused by :func:`check_approved`), so no
    lock is taken: its bucket and lease are writes, and "nothing was changed" is said."""
    return approved or asks or client.embedded


async def _confirmed(
    confirm: Callable[[Plan], Awaitable[bool]], the_plan: Plan, stop: asyncio.Event
) -> bool:
    """The answer to ``confirm``; Ctrl-C (``stop``) while it waits is a no."""
    answer = asyncio.ensure_future(confirm(the_plan))
    halted = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({answer, halted}, return_when=asyncio.FIRST_COMPLETED)
    halted.cancel()
    if answer not in done:
        answer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answer
        return False
    return bool(answer.result())


def server_line(info: ServerInfo, options: ConnectionOptions) -> str | None:
    """Which server a plan or apply talks to, credentials removed: ``using nats-server
    2.12.1 at nats://10.0.0.5:4222``. None for the embedded server, which
    :func:`~reconciler.jetstream.open_client` names as it starts it."""
    if info.embedded:
        return None
    where = info.address or options.display_servers or "an unnamed server"
    return f"using nats-server {info.version} at {where}"


def _say_server(the_plan: Plan, options: ConnectionOptions, observer: Observer) -> None:
    line = server_line(the_plan.server, options)
    if line is not None:
        observer.notice(line)
    for warning in the_plan.capacity.warnings if the_plan.capacity else ():
        observer.notice(str(warning))  # near a limit (docs/capacity.md)


async def _as_reviewed(
    client: JetStreamClient,
    specs: Sequence[Spec],
    shown: Plan,
    request: PlanRequest,
) -> Plan:
    """The plan made again after the person said yes: the live state moved on while the
    question waited. Refused, naming what changed, unless it is the plan shown
    (:mod:`reconciler.planning.review`)."""
    now = await pipeline.plan_reading(client, specs, request, locked=True)
    refuse(checked(now))
    changed = differences(shown, now)
    if changed:
        raise RefusedPlan(
            "the server changed since the plan was shown; nothing was changed. Run apply "
            "again to review the new plan.",
            details=changed,
            kind=RefusalKind.CHANGED,
        )
    return now


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """No cyclic garbage collection for the duration of one run, nor later over what
    the run leaves (restored after, and when nested, by the outermost).

    A run builds long-lived objects by the hundred thousand (specs, live configs, plan
    entries) and frees its temporaries by reference counting; each collection walks the
    survivors again and finds next to nothing: after a whole apply and a plan of 21,000
    resources, a collection frees 88 objects. So the collector is off while the run
    works, and what is alive when it ends is frozen (``gc.freeze``: never walked again,
    still freed when its last reference goes); without the freeze, the first
    collection after the run walks it all. Measured on a re-plan of 101,000 resources
    in fresh processes, in turns: 7.3 to 8.6 s against 7.8 to 9.5 s with the thresholds
    used before (50,000, 20, 100), and the same peak memory (VmHWM 380 MiB).
    The price: a reference cycle among frozen objects is never collected. For a command
    that ends after its run that costs nothing; a long-lived process calling runs again
    and again can ``gc.unfreeze()`` now and then.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


#: The request of a library call that names no files (``plan_with``): options unused.
NO_OPTIONS = ConnectionOptions()


async def plan_with(
    client: JetStreamClient,
    specs: Sequence[Spec],
    *,
    prune: bool = False,
    ownership: Ownership = DEFAULT_OWNERSHIP,
    migrate: bool = False,
    migration: str | None = None,
    reading: asyncio.Future[LiveState] | None = None,
    lifecycle: Lifecycle = MANAGE,
    policy: Policy = NO_POLICY,
    environment: str | None = None,
    refuse_capacity: bool = True,
    lock_ahead: bool = True,
) -> Plan:
    """Plan ``specs`` against the server behind ``client`` (reads only). ``migrate``:
    changes an update cannot make keep the messages (a migrate step, refused when the
    account has no room for the copies) instead of replacing the stream; and the consent
    an interrupted migration needs to be resumed. ``migration``: the way out of an
    interrupted migration whose target the specs no longer declare (``resume``,
    ``rollback``, ``continue``: docs/migrate.md). ``lifecycle``: the environment's,
    merged into every spec's (``planning.plan.plan_stream``). ``policy``: rules evaluated
    on the plan (``Plan.policy``; ``environment`` is their ``resource.environment``).
    ``reading``: the client's
    ``fetch_live()`` already under way (started while the specs were validated).

    The keywords as a request for :func:`~reconciler.execution.pipeline.plan_reading`
    (a library call, tests)."""
    settings = PlanRequest(
        paths=(),
        options=NO_OPTIONS,
        owner=ownership.owner,
        take_over=ownership.take_over,
        prune=prune,
        migrate=migrate,
        migration=migration,
        lifecycle=lifecycle,
        env=environment,
        drift=not refuse_capacity,
    )
    the_plan = await pipeline.plan_reading(
        client, specs, settings, reading=reading, locked=not lock_ahead, policy=policy
    )
    refuse(checked(the_plan))  # the verdict of the plan's own checks
    return the_plan


async def plan_for(request: PlanRequest, observer: Observer = QUIET) -> Plan:
    """Validate the spec files and plan them against the server (reads only).

    With a server named, the connection is made and the live state read while the
    files are validated (in a thread): a plan only reads, and nothing is planned until
    every file is valid. When one is not, the read is cancelled and its ``SpecError`` is
    raised, whatever the read met (an unreachable server included). With no server
    named, validation comes first: invalid specs never start the embedded server.
    """
    with fewer_collections():
        if not request.options.is_configured:
            return await _planned_in_session(request, pipeline.load(request, observer), observer)
        load_policy(request.policies)  # a broken rule: before the server is asked at all
        specs: asyncio.Future[list[Spec]] = asyncio.get_running_loop().create_future()
        planning = asyncio.ensure_future(_planned_in_session(request, specs, observer))
        try:
            loaded = await pipeline.loaded_while(request, observer, None)
        except BaseException:
            # The planning task waits for these specs: cancelling the future it waits on
            # ends it even where its own cancel was lost. Python 3.11's wait_for returns
            # a result that is ready as it is cancelled (our connect's: the cancel then
            # went unseen, the task went on to wait here, and `plan` hung for good, once
            # in 113 runs of an invalid spec under load).
            specs.cancel()
            await pipeline.cancelled(planning)
            raise
        specs.set_result(loaded)
        return await planning


async def save_plan_for(
    request: PlanRequest, observer: Observer = QUIET, *, root: Path, project: Path | None = None
) -> tuple[Plan, SavedPlan]:
    """:func:`plan_for`, and the plan as a saved plan (``plan --out``): the request's
    flags (paths relative to ``root``), the digests of the files read (``project``: the
    project file the run read), the server's identity (docs/saved-plans.md)."""
    with fewer_collections():
        kept = saved_request(request, root)
        specs = pipeline.load(request, observer)
        digest = spec_digest(request, specs, root=root, project=project)
        async with open_client(request.options, on_notice=observer.notice) as client:
            the_plan = await pipeline.plan_reading(client, specs, request)
            refuse(checked(the_plan))
            _say_server(the_plan, request.options, observer)
            # the account's lineage kept first (only read where the environment observes)
            observed = request.lifecycle.observed_at if request.lifecycle.observe else ""
            identity = await saved_identity(client, observed)
        return the_plan, SavedPlan.of(the_plan, kept, digest, identity)


async def _planned_in_session(
    request: PlanRequest,
    specs: Sequence[Spec] | asyncio.Future[list[Spec]],
    observer: Observer,
) -> Plan:
    """Connect, read the live state and plan ``specs`` (when they are still being
    validated, the read starts now and is cancelled if they are not valid)."""
    async with open_client(request.options, on_notice=observer.notice) as client:
        reading = None
        if isinstance(specs, asyncio.Future):
            reading = asyncio.ensure_future(client.fetch_live())
            try:
                specs = await specs
            except BaseException:
                await pipeline.cancelled(reading)
                raise
        the_plan = await pipeline.plan_reading(client, specs, request, reading=reading)
        refuse(checked(the_plan))  # the verdict of the plan's own checks: FILE:LINE problems
        _say_server(the_plan, request.options, observer)
    await _say_standby_health(request, specs, observer)
    return the_plan


async def _say_standby_health(
    request: PlanRequest, specs: Sequence[Spec], observer: Observer
) -> None:
    """docs/dr.md#2-watch-each-pairs-health: one notice per standby pair the environment
    is a side of, both sides read, each on its own server (nothing without a project's
    environment)."""
    if request.project is None or request.env is None:
        return
    if not any(spec.standby is not None for spec in specs):
        return
    base, owner = request.options, request.owner
    for pair in await pairs_health(request.project, request.env, specs, base, owner):
        observer.notice(pair.line())


@dataclass(frozen=True)
class EnvironmentPlan:
    """One environment's outcome in :func:`plan_environments`: its plan, or why not."""

    request: PlanRequest
    plan: Plan | None = None
    error: ReconcileError | None = None


async def plan_environments(
    requests: Sequence[PlanRequest],
    observer: Observer = QUIET,
    *,
    begin: Callable[[PlanRequest], None] | None = None,
) -> AsyncIterator[EnvironmentPlan]:
    """Plan several environments, one after the other, for every front door.

    Every environment is validated before any is planned: a broken spec or overlay in
    any of them raises its ``SpecError`` before a server is asked. Then each is planned
    (``begin`` is called first) and yielded as it is done; one that cannot be planned
    (its server unreachable, say) is yielded with its error and the others still are.
    """
    with fewer_collections():
        loaded = [(request, pipeline.load(request, observer)) for request in requests]
        for request, specs in loaded:
            if begin is not None:
                begin(request)
            try:
                the_plan = await _planned_in_session(request, specs, observer)
            except ReconcileError as err:
                yield EnvironmentPlan(request, error=err)
                continue
            yield EnvironmentPlan(request, the_plan)


async def fetch_live(options: ConnectionOptions, *, on_notice: Notice | None = None) -> LiveState:
    """The live state of the server, as it answered (for export and snapshots)."""
    with fewer_collections():
        async with open_client(options, on_notice=on_notice or _quiet) as client:
            return await client.fetch_live()


async def apply_for(
    request: ApplyRequest, observer: Observer = QUIET, *, stop: asyncio.Event | None = None
) -> ApplyResult:
    """Validate, plan and (unless ``dry_run``) apply; destructive steps need the flags.

    Approval: when the observer :attr:`~Observer.asks`, it is asked about the plan shown;
    after a yes the live state is read again and a plan that is not the one shown is
    refused (nothing changed). With no question, ``approved=False`` (the CLI without a
    terminal and without ``--yes``) refuses a plan with changes unless the server is the
    embedded one. A library call, and the Action's ``mode: apply``, approve by calling
    (``approved=True``). ``stop`` (Ctrl-C) lets the steps in flight finish.

    Planning and applying happen under the server's apply lock (:mod:`reconciler.execution.lock`),
    waiting up to ``lock_timeout`` seconds for it; ``None`` applies without the lock.
    """
    wanted = request.plan
    with fewer_collections():
        specs = pipeline.load(wanted, observer)
        if request.expected is not None:
            check_specs(request.expected, wanted, specs)
        stop = stop or asyncio.Event()
        # an environment in mode: observe is never written: the planner gives it no step,
        # and it takes no lock (the lock's bucket, lease and lineage are writes too; its
        # credentials may well be read-only)
        observed = wanted.lifecycle.observe
        async with (
            open_client(wanted.options, on_notice=observer.notice) as client,
            same_server(client, request.expected),
            pipeline.locked(
                client,
                timeout=(
                    None
                    if request.dry_run
                    or observed
                    or not approvable(request.approved, observer.asks, client)
                    else request.lock_timeout
                ),
                on_notice=observer.notice,
                on_lost=stop.set,
                stop=stop,
            ) as held,
        ):
            the_plan = await pipeline.plan_reading(client, specs, wanted, locked=True)
            refuse(checked(the_plan))  # before it is shown, whatever the flags allow
            if observed and the_plan.has_changes:  # never: unlocked, it is never applied
                raise ReconcileError(
                    f"refusing to apply: the environment has lifecycle mode observe "
                    f"({wanted.lifecycle.observed_at}) yet its plan has steps; nothing was changed"
                )
            _say_server(the_plan, wanted.options, observer)
            observer.show_plan(the_plan)
            if request.expected is not None:
                check_plan(request.expected, the_plan)  # the same steps on the same configs
            allowances = Allowances(
                allow_replace=request.allow_replace, allow_data_loss=request.allow_data_loss
            )
            if observer.asks and the_plan.has_changes and not request.dry_run:
                refuse(verdict(the_plan, allowances))
                if not await _confirmed(observer.confirm, the_plan, stop):
                    interrupted = stop.is_set()  # Ctrl-C at the question
                    return ApplyResult(
                        plan=the_plan, dry_run=True, cancelled=True, interrupted=interrupted
                    )
                the_plan = await _as_reviewed(client, specs, the_plan, wanted)
            elif the_plan.has_changes and not request.dry_run:
                check_policy(the_plan.policy)  # no approval lifts a deny: said first (exit 3)
                check_approved(request.approved, the_plan.server, wanted.options, "apply")
            return await pipeline.execute(
                the_plan,
                client,
                observer=observer,
                allowances=allowances,
                held=held,
                stop=stop,
                dry_run=request.dry_run,
                concurrency=request.concurrency,
            )


async def plan(
    paths: Sequence[str | Path],
    options: ConnectionOptions,
    *,
    observer: Observer = QUIET,
    overlays: Sequence[str | Path] = (),
    ownership: Ownership = DEFAULT_OWNERSHIP,
    **flags: Any,
) -> Plan:
    """:func:`plan_for` with the request's fields as keywords (a library call, tests):
    ``prune``, ``strict``, ``migrate``, ``migration``."""
    request = PlanRequest.of(
        paths, options, overlays=overlays, owner=ownership.owner, take_over=ownership.take_over
    )
    return await plan_for(replace(request, **flags), observer)


async def apply(
    paths: Sequence[str | Path],
    options: ConnectionOptions,
    *,
    observer: Observer = QUIET,
    stop: asyncio.Event | None = None,
    overlays: Sequence[str | Path] = (),
    ownership: Ownership = DEFAULT_OWNERSHIP,
    **flags: Any,
) -> ApplyResult:
    """:func:`apply_for` with the requests' fields as keywords (a library call, tests):
    the plan's (``prune``, ``strict``, ``migrate``, ``migration``) and the apply's
    (``allow_replace``, ``allow_data_loss``, ``approved``, ``dry_run``, ``concurrency``,
    ``lock_timeout``)."""
    plan_fields = {f.name for f in fields(PlanRequest)}
    wanted = PlanRequest.of(
        paths, options, overlays=overlays, owner=ownership.owner, take_over=ownership.take_over
    )
    wanted = replace(wanted, **{k: v for k, v in flags.items() if k in plan_fields})
    request = ApplyRequest(plan=wanted, **{k: v for k, v in flags.items() if k not in plan_fields})
    return await apply_for(request, observer, stop=stop)
