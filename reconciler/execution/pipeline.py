"""The stages' work (the public names are :mod:`reconciler.execution.stages`'s).

- :func:`load` validates a request's spec files; :func:`loaded_while` does it in a
  thread while a read goes on, and cancels the read when a file is invalid (the one
  copy of "validate in a thread, cancel the read").
- :func:`read` reads the live state of a :class:`Scope`: the whole account, or the
  streams one resource (Pulumi) or one advisory (the agent) is about.
- :func:`plan` plans specs against a live state with the request's flags and runs every
  check that needs the server (:func:`judged`): fields and replicas it supports, the
  room a migration's copies need, the consumers working on a stream a migration would
  start, the interest counts of a loss, the KeyValue entries, the account's capacity,
  the policy rules. What a check finds that refuses the plan is a value on it
  (``Plan.checks``, with a kind): the verdict raises it, never the plan stage.
  :func:`plan_removal` is the plan of one resource's delete (Pulumi's destroy): the
  step ``--prune`` would plan, with the same loss and protections.
- :func:`locked`: the apply lock around whatever a door reads, plans, judges and
  executes to change a server (the lease held and kept, the account's lineage kept);
  it yields the :class:`Held` lock whose guard :func:`execute` verifies before each step.
- :func:`execute`: the verdict (:mod:`reconciler.execution.verdict`), then the one
  executor (:mod:`reconciler.execution.apply`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from reconciler.errors import Problem, RefusalKind
from reconciler.execution import lineage, lock, memo_store
from reconciler.execution.apply import ApplyResult, StepEvent, apply_plan, lease_lost
from reconciler.execution.capacity_checks import capacity_of
from reconciler.execution.interest_counts import with_interest_counts
from reconciler.execution.migration_checks import stall_problems, working_problems
from reconciler.execution.pair_reads import StandbyWrites, failback_losses, standby_writes
from reconciler.execution.requests import QUIET, Observer, PlanRequest
from reconciler.execution.verdict import NOTHING_ALLOWED, Allowances, refuse, verdict
from reconciler.identity import ENTRY, ResourceRef, stream_of
from reconciler.jetstream import ConnectionOptions, JetStreamClient
from reconciler.model.migration import shortfalls
from reconciler.model.normalize import replica_problems, unsupported_fields
from reconciler.model.state import LiveState, StreamState
from reconciler.planning.entries import (
    MANAGED_HEADER,
    LiveEntry,
    deleted_buckets,
    fresh_buckets,
    missing_buckets,
    plan_entries,
    with_entries,
)
from reconciler.planning.hidden import hide_notes
from reconciler.planning.lifecycles import governed, governed_entries
from reconciler.planning.memo import Memo
from reconciler.planning.plan import StreamPlan, build_plan, removal
from reconciler.planning.policy import evaluate as evaluate_policy
from reconciler.planning.standby import failbacks, for_environment, guarded, made_primaries
from reconciler.planning.steps import Check, Migrate, Plan
from reconciler.specs.cache import cache_folder
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.policy import NO_POLICY, Policy, load_policy
from reconciler.specs.spec import Spec
from reconciler.specs.units import approx_size
from reconciler.specs.validate import load_specs

__all__ = [
    "EVERYTHING",
    "Held",
    "Scope",
    "execute",
    "judged",
    "load",
    "loaded_while",
    "locked",
    "plan",
    "plan_reading",
    "plan_removal",
    "read",
    "resource_request",
    "validated",
    "with_policy",
]

_T = TypeVar("_T")


# --- load -------------------------------------------------------------------------------


def validated(request: PlanRequest) -> tuple[list[Spec], list[Problem]]:
    """The request's specs and their warnings (a ``SpecError`` when any is invalid);
    every policy rule compiles before anything is planned."""
    warnings: list[Problem] = []
    ahead = request.ahead
    try:
        specs = load_specs(
            list(request.paths),
            overlays=list(request.overlays),
            warnings=warnings,
            strict=request.strict,
            cache=cache_folder(),
            loading=None if ahead is None else ahead.load,
        )
    finally:
        if ahead is not None:
            ahead.close()  # what was not taken is let go; the child is reaped
    load_policy(request.policies)
    # a stream's standby is a mirror in its standby environment (docs/dr.md)
    specs = for_environment(specs, request.env, dict(request.domains)).specs
    return specs, warnings


def load(request: PlanRequest, observer: Observer = QUIET) -> list[Spec]:
    """Validate the request's spec files (with its overlays merged in); warnings are
    said (errors under ``strict``)."""
    specs, warnings = validated(request)
    for warning in warnings:
        observer.notice(str(warning))
    return specs


#: The interpreter's switch interval while the read and validation share it (seconds).
#: The default 5 ms made each of the read's socket calls wait for the validating thread
#: to hand the GIL back: 0.3 s of a 21,000-resource re-plan went to sending requests.
OVERLAP_SWITCH_INTERVAL = 0.0005


async def in_thread(work: Callable[[PlanRequest], _T], request: PlanRequest) -> _T:
    """``work(request)`` in a thread, the GIL handed over more often meanwhile."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, OVERLAP_SWITCH_INTERVAL))
    try:
        return await asyncio.to_thread(work, request)
    finally:
        sys.setswitchinterval(interval)


async def cancelled(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` and wait for it to end (whatever it raised)."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def loaded_while(
    request: PlanRequest, observer: Observer, reading: asyncio.Future[Any] | None
) -> list[Spec]:
    """:func:`load` in a thread while ``reading`` (a read, a plan waiting for these specs)
    goes on; when a file is invalid (or the wait is cancelled) ``reading`` is cancelled
    and the ``SpecError`` raised, whatever the read met."""
    try:
        specs, warnings = await in_thread(validated, request)
    except BaseException:
        await cancelled(reading)
        raise
    for warning in warnings:
        observer.notice(str(warning))
    return specs


def resource_request(
    *,
    migrate: bool = False,
    policies: Sequence[Path] = (),
    lifecycle: Lifecycle = MANAGE,
    env: str | None = None,
) -> PlanRequest:
    """The request of one resource whose spec is not a file (a Pulumi resource's inputs):
    no paths, the default owner, ``migrate``, the policy files given, and the lifecycle
    and name of the project environment it belongs to (a Target's: docs/environments.md)."""
    return PlanRequest(
        paths=(),
        options=ConnectionOptions(),
        migrate=migrate,
        policies=tuple(policies),
        lifecycle=lifecycle,
        env=env,
    )


# --- read -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a read looks at. ``streams`` None: the whole account. Else those streams
    (their INFO and consumers); ``listed`` adds every other stream of the account,
    without its consumers, so the capacity and subject checks count the whole account
    (Pulumi's one resource)."""

    streams: frozenset[str] | None = None
    listed: bool = False

    @classmethod
    def of(cls, *refs: ResourceRef) -> Scope:
        """The streams of ``refs``, the rest of the account listed."""
        return cls(frozenset(ref.stream_name for ref in refs), listed=True)


EVERYTHING = Scope()


async def read(client: JetStreamClient, scope: Scope = EVERYTHING) -> LiveState:
    """The live state ``scope`` asks for (reads only)."""
    if scope.streams is None:
        return await client.fetch_live()
    server = await client.server_info()
    if not scope.listed:  # what a stream or consumer advisory asks to look at again
        unread = LiveState(server=server)
        return await client.confirm(unread, streams=sorted(scope.streams), consumers=())
    infos = await client.list_streams()
    streams = {str(i["config"]["name"]): i["config"] for i in infos}
    state = {name: StreamState.from_info(i) for name, i in zip(streams, infos, strict=True)}
    consumers = {}
    for name in sorted(scope.streams & streams.keys()):
        if state[name].consumer_count:
            for consumer, config in await client.consumer_configs(name):
                consumers[(name, consumer)] = config
    return LiveState(server=server, streams=streams, stream_state=state, consumers=consumers)


# --- plan -------------------------------------------------------------------------------


#: Specs prepared between two looks at the replies while the live state is read.
PREPARE_SLICE = 1000


def _governed(specs: Sequence[Spec], request: PlanRequest) -> tuple[list[Spec], list[Spec]]:
    """The resources (with the request's lifecycle rules applied) and the KeyValue entries."""
    entries = [s for s in specs if s.kind == ENTRY]
    resources = [s for s in specs if s.kind != ENTRY]
    if not request.lifecycle.is_default:
        resources = governed(resources, request.lifecycle)
    return resources, entries


async def plan_reading(
    client: JetStreamClient,
    specs: Sequence[Spec],
    request: PlanRequest,
    *,
    reading: asyncio.Future[LiveState] | None = None,
    locked: bool = False,
    policy: Policy | None = None,
) -> Plan:
    """:func:`read` the whole account and :func:`plan`, overlapped: the read
    (``reading``, the client's ``fetch_live()`` already under way, or started now) goes
    on while the specs' share of the work is done (in slices, so the replies are read
    between them; over a slow link that work costs nothing): the fields the server
    supports, the plan memo (kept in the cache folder) prepared, the names to look for
    again (``LiveRead.confirm``). ``policy``: rules already loaded (else the request's).
    The plan of the CLI, the Action and the agent."""
    resources, entries = _governed(specs, request)  # once, before the memo digests them
    reading = reading or asyncio.ensure_future(client.fetch_live())
    try:
        await asyncio.sleep(0)  # the read sends its first requests
        server = await client.server_info()  # the read's own request, shared
        folder = cache_folder()
        memo = memo_store.load(folder, server, request.owner)
        streams: list[str] = []
        consumers: list[tuple[str, str]] = []
        for start in range(0, len(resources), PREPARE_SLICE):
            part = resources[start : start + PREPARE_SLICE]
            streams += (s.stream_name for s in part if s.kind != "Consumer")
            consumers += ((s.stream_name, s.name) for s in part if s.kind == "Consumer")
            if memo is not None:
                memo.prepare(part)
            await asyncio.sleep(0)
        live = await reading
    except BaseException:
        await cancelled(reading)
        raise
    live = await client.confirm(live, streams=streams, consumers=consumers)
    the_plan = await judged(
        client,
        resources,
        entries,
        live,
        request,
        policy=load_policy(request.policies) if policy is None else policy,
        lock_ahead=not locked,
        memo=memo,
    )
    memo_store.store(folder, memo)
    return hide_notes(the_plan, request.ignore)  # notes only: never a step


async def plan(
    client: JetStreamClient,
    specs: Sequence[Spec],
    live: LiveState,
    request: PlanRequest,
    *,
    locked: bool = False,
) -> Plan:
    """Plan ``specs`` against ``live`` with the request's flags, every check that needs
    the server run (what refuses the plan: ``Plan.checks``, raised by the verdict).
    ``locked``: an apply planning under its lock (or without one): the lock's bucket is
    not counted ahead (docs/capacity.md)."""
    resources, entries = _governed(specs, request)
    the_plan = await judged(
        client,
        resources,
        entries,
        live,
        request,
        policy=load_policy(request.policies),
        lock_ahead=not locked,
    )
    return hide_notes(the_plan, request.ignore)  # notes only: never a step


async def judged(
    client: JetStreamClient,
    resources: Sequence[Spec],
    entries: Sequence[Spec],
    live: LiveState,
    request: PlanRequest,
    *,
    policy: Policy = NO_POLICY,
    lock_ahead: bool = True,
    memo: Memo | None = None,
) -> Plan:
    """The plan of ``resources`` (lifecycles merged in) and ``entries`` against ``live``,
    and every check that needs the server, once: the one place a request's flags become
    the planner's arguments. What a check finds that refuses the plan is on it
    (``Plan.checks``: fields and replicas the server does not support, a migration's
    room, consumers working, KeyValue entries, the account's capacity), each check run
    on its own so a plan shows every refusal at once; the verdict raises them."""
    checks: list[Check] = []

    def found(kind: RefusalKind, problems: Sequence[Problem]) -> None:
        if problems:
            checks.append(Check(kind, tuple(problems)))

    fields = unsupported_fields(resources, live.server)
    found(RefusalKind.UNSUPPORTED, fields + replica_problems(resources, live.server, live))
    if fields:  # the planner cannot compare a field the server does not know
        return Plan(server=live.server, owner=request.owner, checks=tuple(checks))
    lifecycle = request.lifecycle
    the_plan = build_plan(
        resources,
        live,
        prune=request.prune,
        ownership=request.ownership,
        migrate=request.migrate,
        migration=request.migration,
        memo=memo,
        lifecycle=lifecycle,
    )
    losses: dict[str, str] = {}  # docs/dr.md: never undo a failover, nor lose in a failback
    if request.env is not None and (back := failbacks(the_plan, resources, request.env)):
        losses = await failback_losses(
            client, back, request.project, request.env, request.options, request.owner
        )
    read = StandbyWrites()  # docs/dr.md: a lost origin made again beside its standby
    if request.env is not None and (made := made_primaries(the_plan, resources, request.env)):
        read = await standby_writes(
            made, request.project, request.env, request.options, request.owner
        )
    the_plan = guarded(
        the_plan, resources, request.env, losses, taken=read.taken, unread=read.unread
    )
    found(RefusalKind.ROOM, await room_problems(client, the_plan, live))
    found(RefusalKind.ROOM, await stall_problems(client, the_plan, live))
    found(RefusalKind.WORKING, await working_problems(client, the_plan))
    the_plan = await with_interest_counts(client, the_plan, live)  # docs/jetstream-notes.md
    if entries or request.prune:
        prune = request.prune and not lifecycle.observe
        part, problems = await _entries_part(
            client, the_plan, entries, resources, live, prune, request
        )
        found(RefusalKind.INVALID, problems)
        if part is not None:
            the_plan = with_entries(the_plan, governed_entries(part, lifecycle, resources, live))
    # docs/capacity.md (entries included); a drift report: a warning
    the_plan, problems = await capacity_of(
        client, the_plan, live, resources, refuse=not request.drift, lock_ahead=lock_ahead
    )
    found(RefusalKind.CAPACITY, problems)
    if policy:  # docs/policy.md: the rules of every planned resource, on the plan
        findings = await evaluate_policy(policy, the_plan, resources, live, environment=request.env)
        the_plan = replace(the_plan, policy=findings)
    return replace(the_plan, checks=tuple(checks))


async def plan_removal(
    client: JetStreamClient,
    target: ResourceRef,
    live: LiveState,
    request: PlanRequest,
    *,
    declared: Spec | None = None,
) -> Plan:
    """The plan that deletes ``target`` (Pulumi's destroy): the planner's delete step,
    its interest losses counted, the policy rules evaluated. Empty when it is gone.
    ``declared``: the spec it was last declared with, whose lifecycle governs the delete
    (``planning.plan.removal``)."""
    the_plan = removal(target, live, request.lifecycle, request.owner, declared=declared)
    the_plan = await with_interest_counts(client, the_plan, live)
    return await with_policy(the_plan, (), live, request)


async def with_policy(
    the_plan: Plan, resources: Sequence[Spec], live: LiveState, request: PlanRequest
) -> Plan:
    """``the_plan`` (of ``resources`` against ``live``) with the request's policy rules
    evaluated on it (``Plan.policy``, which the verdict reads). Pulumi judges a replace
    it plans itself (its diff) this way, as the replace the CLI's plan shows."""
    policy = load_policy(request.policies)
    if not policy:
        return the_plan
    findings = await evaluate_policy(policy, the_plan, resources, live, environment=request.env)
    return replace(the_plan, policy=findings)


async def _entries_part(
    client: JetStreamClient,
    the_plan: Plan,
    entries: Sequence[Spec],
    resources: Sequence[Spec],
    live: LiveState,
    prune: bool,
    request: PlanRequest,
) -> tuple[StreamPlan | None, list[Problem]]:
    """The KeyValue entries' part of the plan, and the problems that refuse it (None and
    the problems when an entry's bucket is neither live nor declared). Read: each
    declared key, and the keys carrying the tool's marker among every key of the buckets
    that declare entries or are declared here (to find this owner's entries no spec
    declares any more: ``JetStreamClient.kv_scan``); buckets this plan creates or
    replaces are empty."""
    declared = {s.stream_name: s for s in resources if not s.ref.is_child}
    deleted = deleted_buckets(the_plan)
    if problems := missing_buckets(list(entries), live.streams, declared, deleted):
        return None, list(problems)
    fresh = fresh_buckets(the_plan)
    wanted = {str(s.stream) for s in entries} | {s.name for s in resources if s.kind == "KeyValue"}
    scan = frozenset(
        b for b in wanted if stream_of("KeyValue", b) in live.streams and b not in fresh
    )
    named: dict[str, set[str]] = {bucket: set() for bucket in scan}
    for spec in entries:
        if str(spec.stream) in scan:
            named[str(spec.stream)].add(spec.name)
    # the other keys of a bucket: only those carrying the marker (the planner skips the
    # rest), found without holding their values (an application's bucket may hold millions)
    found = await client.kv_scan(named, MANAGED_HEADER)
    current = {
        (bucket, key): LiveEntry(
            bucket, key, base64.b64encode(entry.value).decode(), entry.revision, entry.headers
        )
        for (bucket, key), entry in sorted(found.items())
        if entry.operation == "PUT"
    }
    part = plan_entries(
        list(entries),
        current,
        fresh_buckets=fresh,
        scanned_buckets=scan,
        prune=prune,
        ownership=request.ownership,
    )
    if part.problems:
        return None, list(part.problems)
    return part, []


async def room_problems(client: JetStreamClient, the_plan: Plan, live: LiveState) -> list[Problem]:
    """Why the account has no room for the plan's new migrations, with the numbers."""
    starting = [s for s in the_plan.steps if isinstance(s, Migrate) and s.phase is None]
    if not starting:
        return []
    account = await client.account_info()
    problems = []
    for step in starting:
        state = live.stream_state.get(step.stream_name)
        for short in shortfalls(step.live, step.config, state, account):
            room = short.room
            limit = (
                f" (limit {approx_size(room.limit)}, {approx_size(room.used)} used)"
                if room.limit is not None
                else ""
            )
            message = (
                f"migrating {step.label} needs {approx_size(short.needed)} of {short.storage} "
                f"storage for its copies; the account has {approx_size(room.free or 0)} free"
                f"{limit}: nothing was changed"
            )
            problems.append(Problem(step.source, "storage", message))
    return problems


# --- lock -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """The apply lock as a run holds it (:func:`locked`): its ``fence``, None when the run
    goes without the lock (``--no-lock``, a dry run)."""

    fence: lock.Fence | None = None

    @property
    def guard(self) -> Callable[[], Awaitable[None]] | None:
        """What the executor verifies before each step: the lease still ours."""
        return None if self.fence is None else self.fence.verify

    def ended(self, result: ApplyResult) -> ApplyResult:
        """``result``, unless the lease was lost and the steps stopped for it: then the
        ``ApplyFailed`` saying what was applied and what was not."""
        if self.fence is not None and self.fence.lost and result.interrupted:
            raise lease_lost(self.fence.lost, result.applied, result.skipped)
        return result


#: A run going without the lock.
UNLOCKED = Held()


def _silent(_: str) -> None:
    """Say nothing."""


@contextlib.asynccontextmanager
async def locked(
    client: JetStreamClient,
    *,
    timeout: float | None,
    on_notice: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    on_lost: Callable[[], None] | None = None,
    keep_lineage: bool = True,
) -> AsyncIterator[Held]:
    """The apply lock stage: everything a door does to change a server (its read, plan,
    verdict and execute) runs inside, so two of them never interleave.

    Waits up to ``timeout`` seconds for the lease (``LockError`` naming its holder
    after that; ``None``: no lock), refreshes it while the block runs, releases it after.
    ``on_notice`` (a listener's ``notice``) hears the wait and a lost lease; ``on_lost``
    is called then (the run stops before its next step); a ``stop`` set while waiting
    ends the wait. With the
    lease held, the account's lineage is kept (``keep_lineage``: a saved plan is bound to
    it, :mod:`reconciler.execution.lineage`)."""
    say = on_notice or _silent
    async with lock.for_apply(
        client, timeout=timeout, on_notice=say, on_lost=on_lost, stop=stop
    ) as fence:
        if fence is not None and keep_lineage:  # kept from the account's first apply
            await lineage.keep_for_apply(client, say)
        yield Held(fence)


# --- execute ----------------------------------------------------------------------------


async def execute(
    the_plan: Plan,
    client: JetStreamClient,
    *,
    observer: Observer = QUIET,
    allowances: Allowances = NOTHING_ALLOWED,
    held: Held = UNLOCKED,
    stop: asyncio.Event | None = None,
    dry_run: bool = False,
    concurrency: int = 16,
) -> ApplyResult:
    """The verdict, then the one executor (each step reported to ``observer``; ``held``:
    the apply lock from :func:`locked`, its lease verified before each step)."""
    refuse(verdict(the_plan, allowances))
    on_step: Callable[[StepEvent], None] = observer.step
    result = await apply_plan(
        the_plan,
        client,
        allow_replace=allowances.allow_replace,
        allow_data_loss=allowances.allow_data_loss,
        dry_run=dry_run,
        concurrency=concurrency,
        on_step=on_step,
        stop=stop,
        guard=held.guard,
    )
    return held.ended(result)
