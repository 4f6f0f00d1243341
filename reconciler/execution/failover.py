"""``reconcile failover``: the standby of each pair takes over its primary's writes.

Per pair (docs/dr.md; the server facts in docs/jetstream-notes.md), under the apply lock
of both servers:

1. **fence** the origin: its subjects become one nobody publishes to
   (``model.standby.fence_subject``), so no write is acknowledged there any more; its
   messages and consumers stay;
2. **wait**, at most ``wait`` seconds, until the mirror's last sequence is the origin's;
   else the origin gets its subjects back and the pair is refused, its lag shown;
3. **promote** the mirror: one update drops ``mirror`` and gives it the origin's subjects
   (nats-server 2.12+; older servers are refused before anything changes);
4. **consumers**: each declared consumer is created on the promoted stream at the
   origin's ack floor + 1 (no message skipped; in-flight ones are delivered again): created
   paused, moved with CONSUMER.RESET (2.14+) and resumed, so its config stays the one
   declared; before 2.14 it is created ``by_start_sequence``;
5. **verify**: the last sequences are equal, the message counts are compared, and a
   probe published on the stream's subjects is answered by the promoted stream (refused
   by an impossible ``Nats-Expected-Last-Sequence``, so nothing is stored).

Every step reads the live state first and does only what is left, so a re-run after an
interruption (kill -9, a lost server) finishes the failover; ``rollback`` instead gives
the origin its subjects back while no mirror has been promoted. Progress is recorded in
the standby's lock bucket (key ``failover.<stream>``), written under the lock: it is shown,
never trusted to decide a step. An unplanned failover (``unplanned``: the origin cannot be
read) promotes without fencing and says what may be lost: the mirror's last contact and
sequence; its consumers start at the stream's first message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.errors import NotFound, ReconcileError, RefusedPlan, ServerError
from reconciler.execution import lock
from reconciler.execution.lock import Fence
from reconciler.execution.requests import PlanRequest
from reconciler.execution.run import _validated, check_approved
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import JetStreamClient, open_client
from reconciler.model.normalize import desired_config
from reconciler.model.standby import (
    PairHealth,
    fence_subject,
    is_fenced,
    pair_health,
    promoted_config,
    promotion_supported,
)
from reconciler.model.timestamps import rfc3339
from reconciler.model.values import printable
from reconciler.planning.standby import Pair, pairs
from reconciler.specs.spec import Spec

__all__ = [
    "FailoverPlan",
    "FailoverRequest",
    "FailoverResult",
    "PairState",
    "fail_over",
    "pair_states",
]

Say = Callable[[str], None]
#: How often the mirror's last sequence is read while waiting for it.
POLL_SECONDS = 0.05
#: The first release with CONSUMER.RESET (a consumer moved without changing its config).
_RESET_LEVEL = 4
#: Test hook: ``RECONCILE_FAILOVER_PAUSE=<phase>`` sleeps after that phase is recorded, so a
#: test can kill the process there (a step takes milliseconds: no window to hit otherwise).
PAUSE_ENV = "RECONCILE_FAILOVER_PAUSE"
PHASES = ("fenced", "converged", "promoted", "consumers", "done")


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
class PairState:
    """What a pair is now, read on both sides, and what the failover will do to it."""

    pair: Pair
    health: PairHealth
    origin_fenced: bool
    promoted: bool  # the standby is no mirror any more
    standby_exists: bool
    consumers_missing: tuple[str, ...]
    starts: Mapping[str, int | None]  # consumer -> its start on the promoted side

    @property
    def name(self) -> str:
        return self.pair.name

    @property
    def subjects(self) -> list[str]:
        return list(self.pair.stream.config.get("subjects") or [])

    @property
    def done(self) -> bool:
        return self.promoted and not self.consumers_missing and self.origin_fenced

    def actions(self, *, unplanned: bool, rollback: bool) -> list[str]:
        """What a failover (or its rollback) does to this pair, in order."""
        subjects = ", ".join(self.subjects)
        if rollback:
            if self.promoted:
                return []
            return ["give the origin its subjects back"] if self.origin_fenced else []
        steps: list[str] = []
        if not self.origin_fenced and not unplanned:
            steps.append(f"fence the origin: subjects {subjects} -> {fence_subject(self.name)}")
        if self.done:
            return steps
        if not self.promoted:
            if not unplanned:
                steps.append("wait until the mirror's last sequence is the origin's")
            steps.append(f"promote the mirror: drop `mirror`, subjects {subjects}")
        for name in self.consumers_missing:
            start = self.starts.get(name)
            at = "the stream's first message" if start is None else f"sequence {start}"
            steps.append(f"create consumer {name} from {at}")
        if steps:
            steps.append("verify: last sequences, message counts, a probe answered")
        return steps


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
            out.append(f"  {state.name}: {_health_line(state.health)}")
            if self.unplanned and not state.promoted:
                out.append(f"    possible loss: {_loss_line(state.health)}")
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


def _health_line(health: PairHealth) -> str:
    lag = "unknown" if health.lag is None else str(health.lag)
    seen = "never" if health.active_seconds is None else f"{health.active_seconds:.1f}s ago"
    origin = "unread" if health.origin_last_seq is None else str(health.origin_last_seq)
    mirror = "unread" if health.mirror_last_seq is None else str(health.mirror_last_seq)
    verdict = "healthy" if health.healthy else "NOT healthy: " + "; ".join(health.problems)
    return f"last seq origin {origin}, mirror {mirror}, lag {lag}, last contact {seen}: {verdict}"


def _loss_line(health: PairHealth) -> str:
    seen = (
        "never"
        if health.active_seconds is None
        else f"{health.active_seconds:.1f}s before {rfc3339(time.time())}"
    )
    return (
        f"the mirror holds up to sequence {health.mirror_last_seq}, its last contact with "
        f"the origin was {seen} (it then reported lag {health.reported_lag}); every write "
        "the origin acknowledged after that is not on the standby"
    )


# --- reading both sides -------------------------------------------------------------------


async def _info(client: JetStreamClient | None, stream: str) -> dict[str, Any] | None:
    if client is None:
        return None
    try:
        return await client.stream_info(stream)
    except NotFound:
        return None


async def _ack_floor(client: JetStreamClient | None, stream: str, name: str) -> int | None:
    """The origin consumer's ack floor (stream sequence); None when it cannot be read."""
    if client is None:
        return None
    try:
        info = await client.consumer_info(stream, name)
    except NotFound:
        return None
    return int((info.get("ack_floor") or {}).get("stream_seq", 0))


async def _consumer_names(client: JetStreamClient, stream: str) -> set[str]:
    try:
        return set(await client.consumer_names(stream))
    except NotFound:
        return set()


async def pair_state(
    pair: Pair, origin: JetStreamClient | None, standby: JetStreamClient, unread: str = ""
) -> PairState:
    """One pair read on both sides (``origin`` None: it could not be reached)."""
    origin_info, mirror_info = await asyncio.gather(
        _info(origin, pair.name), _info(standby, pair.name)
    )
    health = pair_health(pair.name, origin_info, mirror_info, unread=unread)
    origin_config = (origin_info or {}).get("config") or {}
    mirror_config = (mirror_info or {}).get("config") or {}
    promoted = mirror_info is not None and not mirror_config.get("mirror")
    present = await _consumer_names(standby, pair.name) if mirror_info else set()
    missing = tuple(c.name for c in pair.consumers if c.name not in present)
    floors = await asyncio.gather(*(_ack_floor(origin, pair.name, n) for n in missing))
    starts = {name: None if f is None else f + 1 for name, f in zip(missing, floors, strict=True)}
    return PairState(
        pair=pair,
        health=health,
        origin_fenced=origin_info is not None and is_fenced(origin_config),
        promoted=promoted,
        standby_exists=mirror_info is not None,
        consumers_missing=missing,
        starts=starts,
    )


async def pair_states(
    selected: Sequence[Pair], origin: JetStreamClient | None, standby: JetStreamClient, unread: str
) -> list[PairState]:
    limit = asyncio.Semaphore(32)

    async def one(pair: Pair) -> PairState:
        async with limit:
            return await pair_state(pair, origin, standby, unread)

    return list(await asyncio.gather(*(one(pair) for pair in selected)))


# --- the run ------------------------------------------------------------------------------


def _selected(request: FailoverRequest, say: Say) -> list[Pair]:
    """The pairs from ``origin`` to ``standby`` the specs declare (as the primary
    environment reads them: the streams with their subjects and their consumers)."""
    specs, warnings = _validated(request.origin)
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
    """The origin's client, or (unplanned only) None and why it could not be reached."""
    try:
        async with open_client(request.origin.options, on_notice=say) as client:
            await client.server_info()
            yield client, ""
            return
    except ReconcileError as err:
        if not request.unplanned or request.rollback:
            raise ReconcileError(
                f"the origin ({request.origin.env}) cannot be read: {err}; a failover "
                "without it is an unplanned one (--unplanned), which may lose writes"
            ) from err
        reason = str(err)
    yield None, reason


async def fail_over(
    request: FailoverRequest,
    *,
    say: Say,
    confirm: Callable[[FailoverPlan], Any] | None = None,
    on_plan: Callable[[FailoverPlan], None] | None = None,
) -> FailoverResult:
    """Plan, ask (``confirm``) or refuse without approval like apply, then fail over."""
    selected = _selected(request, say)
    async with (
        open_client(request.standby.options, on_notice=say) as standby,
        _origin_client(request, say) as (origin, unread),
    ):
        server = await standby.server_info()
        if not promotion_supported(server.version):
            raise RefusedPlan(
                f"the standby ({request.standby.env}) runs nats-server {server.version}: a "
                "mirror is promoted by an update only since 2.12 (nats-server#7171; older "
                "servers refuse it with err 10055): nothing was changed"
            )
        unplanned = request.unplanned and origin is None
        if request.unplanned and origin is not None:
            say("the origin can be read: this failover is a planned one (the origin is fenced)")
        states = await pair_states(selected, origin, standby, unread)
        the_plan = FailoverPlan(
            request.origin.env or "",
            request.standby.env or "",
            tuple(states),
            unplanned,
            request.rollback,
            server.version,
            unread,
        )
        _check_plan(the_plan)
        if on_plan is not None:
            on_plan(the_plan)
        if request.check or not the_plan.has_changes:
            return FailoverResult(the_plan)
        if confirm is not None:
            if not await confirm(the_plan):
                return FailoverResult(the_plan, cancelled=True)
        else:
            check_approved(request.approved, server, request.standby.options, "fail over")
        async with _locks(request, origin, standby, say) as fences:
            return await _run(the_plan, request, origin, standby, fences, say)


def _check_plan(the_plan: FailoverPlan) -> None:
    """Refusals before anything changes: a pair without its mirror, a rollback of a
    promoted pair."""
    problems: list[str] = []
    for state in the_plan.states:
        if not state.standby_exists:
            problems.append(
                f"{state.name}: no stream {state.name} in {the_plan.standby}: apply the "
                f"standby environment first (reconcile apply --env {the_plan.standby})"
            )
        elif the_plan.rollback and state.promoted:
            problems.append(
                f"{state.name}: the mirror in {the_plan.standby} is already promoted: a "
                "rollback would lose the writes it took; finish the failover instead"
            )
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
            fence = await stack.enter_async_context(
                lock.for_apply(client, timeout=request.lock_timeout, on_notice=say)
            )
            if fence is not None:
                fences.append(fence)
        yield fences


async def _verify_locks(fences: Sequence[Fence]) -> None:
    for fence in fences:
        await fence.verify()


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
        async with limit:
            steps = _Steps(state, the_plan, request, origin, standby, fences, say)
            try:
                if request.rollback:
                    await steps.roll_back()
                else:
                    await steps.run()
            except ReconcileError as err:
                problems.append(printable(f"{state.name}: {err}"))
                return
            done.append(state.name)
            if steps.window is not None:
                unavailable[state.name] = steps.window

    await asyncio.gather(*(one(state) for state in the_plan.states if the_plan.actions(state)))
    return FailoverResult(the_plan, tuple(sorted(done)), tuple(problems), False, unavailable)


@dataclass
class _Steps:
    """One pair's failover: each step reads what is live and does what is left."""

    state: PairState
    the_plan: FailoverPlan
    request: FailoverRequest
    origin: JetStreamClient | None
    standby: JetStreamClient
    fences: Sequence[Fence]
    say: Say
    fenced_at: float | None = None
    window: float | None = None

    @property
    def name(self) -> str:
        return self.state.name

    async def run(self) -> None:
        if self.origin is not None:
            await self.fence()
        promoted = self.state.promoted
        if not promoted:
            last = await self.converged() if self.origin is not None else None
            await self.promote(last)
        await self.consumers()
        await self.verify()
        await self.record("done")

    async def fence(self) -> None:
        assert self.origin is not None
        info = await _info(self.origin, self.name)
        if info is None:
            raise ReconcileError(f"no stream {self.name} on the origin any more")
        config = dict(info["config"])
        if is_fenced(config):
            return
        if self.state.promoted:
            self.say(f"{self.name}: the standby is promoted and the origin takes writes again")
        await _verify_locks(self.fences)
        config["subjects"] = [fence_subject(self.name)]
        await self.origin.update_stream(config)
        self.fenced_at = time.monotonic()
        self.say(
            f"{self.name}: {self.the_plan.origin} fenced: it listens only on "
            f"{fence_subject(self.name)}, so no write is acknowledged there"
        )
        await self.record("fenced")

    async def converged(self) -> int:
        """The origin's last sequence once the mirror has it; else the fence is lifted
        and the pair refused with its lag."""
        assert self.origin is not None
        origin_info = await _info(self.origin, self.name)
        target = int(((origin_info or {}).get("state") or {}).get("last_seq", 0))
        deadline = time.monotonic() + self.request.wait
        mirror_last = -1
        while True:
            mirror = await _info(self.standby, self.name)
            mirror_last = int(((mirror or {}).get("state") or {}).get("last_seq", 0))
            if mirror_last >= target:
                break
            if time.monotonic() >= deadline:
                await self.unfence()
                raise ReconcileError(
                    f"the mirror did not reach the origin's last sequence {target} within "
                    f"{self.request.wait:g}s (it has {mirror_last}: lag {target - mirror_last}); "
                    "the origin has its subjects back, nothing was promoted"
                )
            await asyncio.sleep(POLL_SECONDS)
        await self.record("converged", origin_last_seq=target)
        return target

    async def unfence(self) -> None:
        assert self.origin is not None
        info = await _info(self.origin, self.name)
        if info is None or not is_fenced(info["config"]):
            return
        await _verify_locks(self.fences)
        await self.origin.update_stream({**info["config"], "subjects": self.state.subjects})
        self.say(f"{self.name}: {self.the_plan.origin} takes writes again (its subjects back)")

    async def roll_back(self) -> None:
        mirror = await _info(self.standby, self.name)
        if mirror is not None and not (mirror["config"].get("mirror")):
            raise ReconcileError("the mirror is promoted: a rollback would lose its writes")
        await self.unfence()
        await self.record("rolled back")

    async def promote(self, origin_last: int | None) -> None:
        mirror = await _info(self.standby, self.name)
        if mirror is None:
            raise ReconcileError(f"no stream {self.name} on the standby")
        await _verify_locks(self.fences)
        await self.standby.update_stream(promoted_config(mirror["config"], self.state.subjects))
        if self.fenced_at is not None:
            self.window = time.monotonic() - self.fenced_at
        where = "" if origin_last is None else f" at sequence {origin_last}"
        self.say(f"{self.name}: {self.the_plan.standby} promoted{where}: it takes the writes")
        await self.record("promoted")

    async def consumers(self) -> None:
        present = await _consumer_names(self.standby, self.name)
        info = await _info(self.standby, self.name)
        stream_config = (info or {}).get("config") or {}
        server = await self.standby.server_info()
        owner = self.the_plan_owner
        for spec in self.state.pair.consumers:
            start = await self._start(spec.name)
            if spec.name in present:
                await self._finish_paused(spec, start)
                continue
            config = desired_config(spec, server, stream_config=stream_config, owner=owner)
            await _verify_locks(self.fences)
            await self._create(spec, config, start, server.api_level)
        await self.record("consumers")

    @property
    def the_plan_owner(self) -> str:
        return self.request.standby.owner

    async def _start(self, name: str) -> int | None:
        floor = await _ack_floor(self.origin, self.name, name)
        return None if floor is None else floor + 1

    async def _create(
        self, spec: Spec, config: dict[str, Any], start: int | None, level: int
    ) -> None:
        where = "the stream's first message" if start is None else f"sequence {start}"
        if start is None:
            await self.standby.create_consumer(self.name, config, action="create")
        elif level >= _RESET_LEVEL:
            paused = {**config, "pause_until": "2999-01-01T00:00:00Z"}
            await self.standby.create_consumer(self.name, paused, action="create")
            await self.standby.reset_consumer(self.name, spec.name, start)
            await self.standby.pause_consumer(self.name, spec.name, None)
        else:
            moved = {**config, "deliver_policy": "by_start_sequence", "opt_start_seq": start}
            await self.standby.create_consumer(self.name, moved, action="create")
        self.say(f"{self.name}: consumer {spec.name} created from {where}")

    async def _finish_paused(self, spec: Spec, start: int | None) -> None:
        """A consumer created paused by an interrupted run: moved and resumed now."""
        try:
            info = await self.standby.consumer_info(self.name, spec.name)
        except NotFound:
            return
        if not info.get("paused") or start is None:
            return
        await _verify_locks(self.fences)
        await self.standby.reset_consumer(self.name, spec.name, start)
        await self.standby.pause_consumer(self.name, spec.name, None)
        self.say(f"{self.name}: consumer {spec.name} moved to sequence {start} and resumed")

    async def verify(self) -> None:
        mirror = await _info(self.standby, self.name)
        origin = await _info(self.origin, self.name)
        if mirror is None:
            raise ReconcileError("the promoted stream is gone")
        if origin is not None:
            o_state, m_state = origin["state"], mirror["state"]
            if int(m_state["last_seq"]) < int(o_state["last_seq"]):
                raise ReconcileError(
                    f"the promoted stream's last sequence {m_state['last_seq']} is below "
                    f"the origin's {o_state['last_seq']}"
                )
            if int(m_state["messages"]) < int(o_state["messages"]):
                self.say(
                    f"{self.name}: {m_state['messages']} messages promoted, "
                    f"{o_state['messages']} on the origin"
                )
        await self.probe(mirror)

    async def probe(self, mirror: Mapping[str, Any]) -> None:
        """A publish on the stream's subjects, answered by the promoted stream and
        refused by an impossible expected last sequence (nothing is stored)."""
        subject = _probe_subject(self.state.subjects)
        headers = {"Nats-Expected-Last-Sequence": str(2**63 - 1)}
        try:
            reply = await self.standby.raw_request(subject, b"", headers=headers)
        except ReconcileError as err:
            raise ReconcileError(f"nobody answers a publish on {subject}: {err}") from err
        answer: Any = json.loads(reply) if reply else {}
        if not isinstance(answer, dict) or answer.get("stream") != self.name:
            raise ReconcileError(f"a publish on {subject} is not answered by {self.name}")

    async def record(self, phase: str, **facts: Any) -> None:
        """The pair's progress in the standby's lock bucket (shown, never trusted)."""
        body = {
            "stream": self.name,
            "from": self.the_plan.origin,
            "to": self.the_plan.standby,
            "phase": phase,
            "at": rfc3339(time.time()),
            **facts,
        }
        key = f"failover.{self.name}"
        with contextlib.suppress(ServerError):
            value = json.dumps(body).encode()
            entry = await self.standby.kv_entry(LOCK_BUCKET, key)
            if entry is None:
                await self.standby.kv_create(LOCK_BUCKET, key, value)
            else:
                await self.standby.kv_update(LOCK_BUCKET, key, value, entry.revision)
        if os.environ.get(PAUSE_ENV) == phase:
            await asyncio.sleep(3600)


def _probe_subject(subjects: Sequence[str]) -> str:
    tokens = (subjects[0] if subjects else "").split(".")
    return ".".join("_reconcile_probe" if t in ("*", ">") else t for t in tokens)


def failover_request(origin: PlanRequest, standby: PlanRequest, **flags: Any) -> FailoverRequest:
    """A request from the two environments' plan requests; ``flags``: the other fields."""
    return replace(FailoverRequest(origin=origin, standby=standby), **flags)
