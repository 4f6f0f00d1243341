"""``reconcile failover``: the standby of each pair takes over its primary's writes.

Before it asks and before anything changes, its server changes are judged as apply's
plan steps (:mod:`reconciler.execution.failover_rules`: each side's policies, the
lifecycle's ``mode: observe``, the shared verdict). Then per pair (docs/dr.md; the server
facts in docs/jetstream-notes.md), under the apply lock of both servers:

0. a mirror whose ``duplicate_window`` is shorter than the pair needs (a restart of its
   server drops it) gets it back, and the fence waits until the messages it mirrored
   without it are out of it (only ids mirrored after the update are known: a retry of
   one of those would be stored again), the origin taking the writes meanwhile;
1. **fence** the origin: its subjects become one nobody publishes to
   (``model.standby.fence_subject``), so no write is acknowledged there any more; its
   messages and consumers stay;
2. **wait**, at most ``wait`` seconds, until the mirror's last sequence is the origin's;
   else the origin gets its subjects back and the pair is refused, its lag shown (as it
   does when any step before the promotion is refused, or interrupted by Ctrl-C);
3. **promote** the mirror: one update drops ``mirror`` and gives it the origin's subjects
   (nats-server 2.12+; older servers are refused before anything changes);
4. **consumers**: each declared consumer is created on the promoted stream at the
   origin's ack floor + 1 (no message skipped; in-flight ones are delivered again): created
   paused, moved with CONSUMER.RESET (2.14+) and resumed, so its config stays the one
   declared; before 2.14, or when its deliver policy refuses a reset (``new``, ``last``,
   ``last_per_subject``), it is created ``by_start_sequence``;
5. **verify**: the promoted stream is the declared one (``model.promotion``, judged
   before the fence too), the last sequences are equal, the message counts are
   compared, and a probe published on the stream's subjects is answered by the promoted
   stream (refused by an impossible ``Nats-Expected-Last-Sequence``, so nothing is
   stored).

Every step reads the live state first and does only what is left, so a re-run after an
interruption (kill -9, a lost server) finishes the failover, and verifies again a pair
whose other steps are done (a failed verify is never taken for a passed one);
``rollback`` instead gives the origin its subjects back while the standby's stream takes
no writes (still a mirror, or fenced: an old origin of an earlier failover or failback).
Progress is recorded in the standby's lock bucket (key ``failover.<stream>``), written
under the lock: it is shown, never trusted to decide a step. An unplanned failover
(``unplanned``: the origin cannot be read) promotes without fencing and says what may be
lost: the mirror's last contact and sequence; its consumers start at the stream's first
message (a window the mirror lacks is given by the promotion, and the plan says its ids
are not known).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.errors import ReconcileError, RefusedPlan, unforeseen
from reconciler.execution import lock
from reconciler.execution.failover_rules import judged
from reconciler.execution.failover_steps import PairSteps
from reconciler.execution.lock import Fence
from reconciler.execution.pair_reads import (
    PairState,
    Sides,
    _info,
    health_line,
    loss_line,
    pair_states,
    unfence_by_hand,
)
from reconciler.execution.pipeline import locked, validated
from reconciler.execution.requests import QUIET, Observer, PlanRequest
from reconciler.execution.run import check_approved
from reconciler.jetstream import JetStreamClient, open_client
from reconciler.model.standby import is_fenced, promotion_supported
from reconciler.model.state import ServerInfo
from reconciler.model.values import printable
from reconciler.planning.standby import Pair, pairs

__all__ = [
    "FailoverPlan",
    "FailoverRequest",
    "FailoverResult",
    "PairState",
    "fail_over",
    "pair_states",
]

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class FailoverRequest:
    """From ``origin`` (the primary environment) to ``standby``."""

    origin: PlanRequest
    standby: PlanRequest
    streams: tuple[str, ...] = ()
    wait: float = 30.0
    unplanned: bool = False
    rollback: bool = False
    approved: bool = False
    lock_timeout: float | None = lock.DEFAULT_TIMEOUT
    concurrency: int = 16
    check: bool = False  # read and show each pair's health only


@dataclass(frozen=True)
class FailoverPlan:
    origin: str
    standby: str
    states: tuple[PairState, ...]
    unplanned: bool
    rollback: bool
    standby_version: str
    origin_unread: str = ""  # why the origin could not be read (unplanned)

    @property
    def has_changes(self) -> bool:
        return any(self.actions(state) for state in self.states)

    def actions(self, state: PairState) -> list[str]:
        return state.actions(unplanned=self.unplanned, rollback=self.rollback)

    def lines(self) -> list[str]:
        verb = "roll back the failover" if self.rollback else "fail over"
        out = [f"{verb} from {self.origin} to {self.standby} ({len(self.states)} pair(s))"]
        if self.unplanned:
            out.append(f"UNPLANNED: the origin is not read ({self.origin_unread or 'unreachable'})")
        for state in self.states:
            out.append(f"  {state.name}: {health_line(state.health)}")
            if self.unplanned and not state.promoted:
                out.append(f"    possible loss: {loss_line(state.health)}")
            refused = state.refusals(rollback=self.rollback)
            out += [f"    REFUSED: {problem}" for problem in refused]
            out += [f"    WARNING: {warning}" for warning in state.warnings]
            if state.diverged and not self.rollback:
                out.append(
                    f"    DIVERGED: {state.diverged}: the origin is fenced, then the pair "
                    "stops (no consumer is created)"
                )
            steps = self.actions(state)
            out += [f"    - {step}" for step in steps] or ["    nothing to do"]
        return [printable(line) for line in out]


@dataclass(frozen=True)
class FailoverResult:
    plan: FailoverPlan
    done: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    cancelled: bool = False
    #: seconds each stream took no write: from its fence to its promotion
    unavailable: Mapping[str, float] = field(default_factory=dict)
    #: every remark the observer heard, in order (kept whatever the observer)
    remarks: tuple[str, ...] = ()


# --- the run ------------------------------------------------------------------------------


def _selected(request: FailoverRequest, say: Say) -> list[Pair]:
    """The pairs from ``origin`` to ``standby`` the specs declare (as the primary
    environment reads them: the streams with their subjects and their consumers)."""
    specs, warnings = validated(request.origin)
    for warning in warnings:
        say(str(warning))
    origin, standby = request.origin.env or "", request.standby.env or ""
    found = pairs(specs, primary=origin, standby=standby, streams=request.streams)
    if not found:
        raise ReconcileError(
            f"no stream declares a standby with primary {origin!r} and environment {standby!r}"
        )
    return found


@contextlib.asynccontextmanager
async def _origin_client(
    request: FailoverRequest, say: Say
) -> AsyncIterator[tuple[JetStreamClient | None, str]]:
    """The origin's client, or (unplanned only) None and why it could not be reached.
    Only opening it and its first read are the origin's errors: a refusal while it is
    open is the run's own, as it is."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            client = await stack.enter_async_context(
                open_client(request.origin.options, on_notice=say)
            )
            await client.server_info()
        except ReconcileError as err:
            # a failover without it is an unplanned one; a --check reads the standby only
            if not (request.unplanned or request.check) or request.rollback:
                raise ReconcileError(
                    f"the origin ({request.origin.env}) cannot be read: {err}; a failover "
                    "without it is an unplanned one (--unplanned), which may lose writes"
                ) from err
            yield None, str(err)
            return
        yield client, ""


@contextlib.asynccontextmanager
async def _standby_client(
    request: FailoverRequest, selected: Sequence[Pair], say: Say
) -> AsyncIterator[tuple[JetStreamClient, ServerInfo]]:
    """The standby's client and server. Only opening it and its first read are the
    standby's errors: they name the standby and what to do (a rollback without it)."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            client = await stack.enter_async_context(
                open_client(request.standby.options, on_notice=say)
            )
            server = await client.server_info()
        except ReconcileError as err:
            if request.rollback:
                fenced = await _fenced_streams(request, selected)
                raise ReconcileError(_rollback_without_standby(request, fenced, err)) from err
            raise ReconcileError(
                f"the standby ({request.standby.env}) cannot be read: {err}; a failover "
                "promotes its mirrors: nothing was changed"
            ) from err
        yield client, server


async def _fenced_streams(request: FailoverRequest, selected: Sequence[Pair]) -> list[Pair] | None:
    """The pairs whose stream is fenced on the origin (reads only); None: unread."""
    try:
        async with open_client(request.origin.options) as origin:
            infos = await asyncio.gather(*(_info(origin, pair.name) for pair in selected))
    except ReconcileError:
        return None
    return [
        p for p, info in zip(selected, infos, strict=True) if info and is_fenced(info["config"])
    ]


def _rollback_without_standby(
    request: FailoverRequest, fenced: Sequence[Pair] | None, err: ReconcileError
) -> str:
    """Why a rollback never gives the origin its subjects back without reading the
    standby, and what an operator does: the standby may have been promoted (a failover
    stopped after its promotion, or a person), and then both sides would take writes;
    its progress record is in the standby too, and never decides a step anyway."""
    origin, standby = request.origin.env, request.standby.env
    head = (
        f"the standby ({standby}) cannot be read: {err}. A rollback gives {origin} its "
        f"subjects back only once {standby}'s stream is read as taking no writes (still a "
        f"mirror, or fenced): promoted "
        f"(by the failover before it stopped, or by hand), {origin} and {standby} would "
        "both take writes. Nothing was changed. "
    )
    again = (
        f"Bring {standby} back and run `reconcile failover --from {origin} --to {standby} "
        "--rollback` again"
    )
    if fenced is None:
        return head + again + f" ({origin} could not be read either)."
    if not fenced:
        return head + again + f"; no stream of these pairs is fenced in {origin}: it takes writes."
    manual = "; ".join(unfence_by_hand(pair) for pair in fenced)
    return (
        head + again + f". Only if {standby} is lost for good and can take no write (its servers "
        f"stopped), give {origin}'s fenced stream(s) their subjects back by hand, on "
        f"{origin}: {manual}."
    )


async def fail_over(
    request: FailoverRequest,
    observer: Observer = QUIET,
    *,
    confirm: Callable[[FailoverPlan], Any] | None = None,
    on_plan: Callable[[FailoverPlan], None] | None = None,
    on_locked: Callable[[], None] | None = None,
) -> FailoverResult:
    """Plan, ask (``confirm``) or refuse without approval like apply, then fail over;
    ``observer`` hears every remark (the servers, the locks, each pair's steps), as the
    other stages' listener does. The plan is a :class:`FailoverPlan` (pairs, not steps):
    ``on_plan`` shows it and ``confirm`` asks about it. ``on_locked`` is called once both
    apply locks are held, before anything can change (until then, a stop changed
    nothing).

    The result holds every remark too (:attr:`FailoverResult.remarks`), and each pair's
    problem says what its sides were left as, so a caller keeping the default observer
    (:data:`QUIET`, which hears nothing) loses no report of a partial failover (a lower
    message count promoted, an origin given its subjects back)."""
    remarks: list[str] = []

    def say(message: str) -> None:
        remarks.append(message)
        observer.notice(message)

    result = await _fail_over(request, say, confirm, on_plan, on_locked)
    return replace(result, remarks=tuple(remarks))


async def _fail_over(
    request: FailoverRequest,
    say: Say,
    confirm: Callable[[FailoverPlan], Any] | None,
    on_plan: Callable[[FailoverPlan], None] | None,
    on_locked: Callable[[], None] | None,
) -> FailoverResult:
    selected = _selected(request, say)
    async with (
        _standby_client(request, selected, say) as (standby, server),
        _origin_client(request, say) as (origin, unread),
    ):
        if not promotion_supported(server.version):
            raise RefusedPlan(
                f"the standby ({request.standby.env}) runs nats-server {server.version}: a "
                "mirror is promoted by an update only since 2.12 (nats-server#7171; older "
                "servers refuse it with err 10055): nothing was changed"
            )
        unplanned = (request.unplanned or request.check) and origin is None
        if request.unplanned and origin is not None:
            say("the origin can be read: this failover is a planned one (the origin is fenced)")
        sides = Sides(
            request.origin.env or "",
            request.standby.env or "",
            request.standby.owner,
            dict(request.standby.domains),
            same_server=origin is not None
            and bool(standby.connected_server_id())
            and origin.connected_server_id() == standby.connected_server_id(),
        )
        states = await pair_states(selected, origin, standby, unread, sides)
        the_plan = FailoverPlan(
            request.origin.env or "",
            request.standby.env or "",
            tuple(states),
            unplanned,
            request.rollback,
            server.version,
            unread,
        )
        if on_plan is not None:
            on_plan(the_plan)
        if request.check:
            return FailoverResult(the_plan)
        _check_plan(the_plan)
        if not the_plan.has_changes:
            return FailoverResult(the_plan)
        await judged(the_plan, request, origin, standby)  # refuses before anything changes
        if confirm is not None:
            if not await confirm(the_plan):
                return FailoverResult(the_plan, cancelled=True)
        else:
            check_approved(request.approved, server, request.standby.options, "fail over")
        async with _locks(request, origin, standby, say) as fences:
            if on_locked is not None:
                on_locked()
            # Read and judged again with both locks held, as apply plans again under its
            # lock: a policy, a lifecycle or a stream changed while the question waited
            # is seen before the first step.
            states = await pair_states(selected, origin, standby, unread, sides)
            the_plan = dataclasses.replace(the_plan, states=tuple(states))
            _check_plan(the_plan)
            await judged(the_plan, request, origin, standby)
            return await _run(the_plan, request, origin, standby, fences, say)


def _check_plan(the_plan: FailoverPlan) -> None:
    """Refusals before anything changes: each pair's problems guarding this move
    (``PairState.refusals``): a failover's (a pair without its mirror, another owner's
    stream, a standby that is no copy of the origin, a consumer someone made on the
    mirror, a promotion unlike the spec), or a rollback's (a promoted standby, another
    owner's origin): a rollback is never refused for what only a promotion guards."""
    problems: list[str] = []
    for state in the_plan.states:
        refused = state.refusals(rollback=the_plan.rollback)
        problems += [f"{state.name}: {problem}" for problem in refused]
    if problems:
        raise RefusedPlan(printable("; ".join(problems)) + ": nothing was changed")


@contextlib.asynccontextmanager
async def _locks(
    request: FailoverRequest, origin: JetStreamClient | None, standby: JetStreamClient, say: Say
) -> AsyncIterator[list[Fence]]:
    """The apply lock of both servers (the standby's first), held for the whole run."""
    fences: list[Fence] = []
    async with contextlib.AsyncExitStack() as stack:
        for client in (standby, origin):
            if client is None:
                continue
            held = await stack.enter_async_context(
                locked(client, timeout=request.lock_timeout, on_notice=say, keep_lineage=False)
            )
            if held.fence is not None:
                fences.append(held.fence)
        yield fences


async def _run(
    the_plan: FailoverPlan,
    request: FailoverRequest,
    origin: JetStreamClient | None,
    standby: JetStreamClient,
    fences: Sequence[Fence],
    say: Say,
) -> FailoverResult:
    limit = asyncio.Semaphore(max(request.concurrency, 1))
    done: list[str] = []
    problems: list[str] = []
    unavailable: dict[str, float] = {}

    async def one(state: PairState) -> None:
        steps = PairSteps(state, the_plan, request, origin, standby, fences, say)
        try:
            if not request.rollback:
                async with limit:
                    hold = await steps.restore_window()
                # the mirror's window given back: the pairs wait together, the origin
                # taking the writes, nothing fenced (a stop here changes nothing else)
                await asyncio.sleep(hold)
            async with limit:
                if request.rollback:
                    await steps.roll_back()
                else:
                    await steps.run()
        except ReconcileError as err:
            problems.append(printable(f"{state.name}: {err}"))
            return
        except Exception as err:  # one pair's: reported, and the others go on
            problems.append(printable(f"{state.name}: {_unforeseen(err, request)}"))
            return
        done.append(state.name)
        if steps.window is not None:
            unavailable[state.name] = steps.window

    await asyncio.gather(*(one(state) for state in the_plan.states if the_plan.actions(state)))
    return FailoverResult(the_plan, tuple(sorted(done)), tuple(problems), False, unavailable)


def _unforeseen(err: Exception, request: FailoverRequest) -> str:
    """A pair's error no check foresaw: where it was raised (never its text), and how the
    pair is finished. It stopped where it was; the other pairs went on, under the locks
    and the fence record, which a rerun reads to resume (or a rollback to undo)."""
    origin, standby = request.origin.env, request.standby.env
    return (
        f"stopped by an {unforeseen(err)}; the pair is left as that step found it: "
        f"`reconcile failover --from "
        f"{origin} --to {standby} --check` shows where it stands; run the failover again "
        "to finish it, or with --rollback to undo it"
    )


def failover_request(origin: PlanRequest, standby: PlanRequest, **flags: Any) -> FailoverRequest:
    """A request from the two environments' plan requests; ``flags``: the other fields."""
    return replace(FailoverRequest(origin=origin, standby=standby), **flags)
