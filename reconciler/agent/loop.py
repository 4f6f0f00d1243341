"""The agent: a loop of plans (and heals) driven by a timer, advisories and git commits.

One connection is kept open; on it the agent listens to the server's advisories
(:mod:`reconciler.agent.advisories`) and plans (:func:`~reconciler.execution.standing.plan_on`).
A cycle runs:

- at least every ``interval`` (a full re-plan, whatever else happened: advisories are
  not kept for a subscriber that was away);
- within ``debounce`` of an advisory naming a resource (advisories arriving meanwhile
  join the same cycle);
- as soon as a new commit of the git branch is seen (polled every ``git_poll``);
- after a failure, with exponential backoff (1 s, 2 s, 4 s, ... up to ``interval``).

In heal mode a cycle whose plan has steps a heal may apply takes the apply lock, plans
again under it and applies them (:func:`~reconciler.execution.standing.heal_on`); the
lock is never held between cycles. A lost connection is opened again (with the same
backoff), and the first cycle after it is a full re-plan. ``stop`` (SIGTERM, SIGINT)
ends the loop: a plan under way is cancelled, a heal's steps in flight finish, the lock
is released, the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections import deque
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from reconciler.agent import advisories
from reconciler.agent.advisories import Cause, Touch
from reconciler.agent.http import Reply, Route, exposure, serve
from reconciler.agent.logs import Log
from reconciler.agent.metrics import Metrics
from reconciler.agent.source import Source
from reconciler.agent.status import (
    DRIFT_STATES,
    Key,
    Lost,
    ResourceStatus,
    State,
    counts,
    outcome_of,
    statuses,
)
from reconciler.errors import ApplyFailed, ConnectError, ReconcileError
from reconciler.execution.apply import StepEvent, describe
from reconciler.execution.requests import PlanRequest
from reconciler.execution.run import fewer_collections
from reconciler.execution.standing import Planned, heal_on, plan_on
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient, open_client
from reconciler.model.state import StreamState
from reconciler.model.timestamps import rfc3339
from reconciler.planning.heal import split_for_heal
from reconciler.planning.steps import Plan
from reconciler.specs.spec import Spec

Mode = Literal["observe", "heal"]
_T = TypeVar("_T")

#: ``--once``'s exit status when a policy rule denies the plan (as ``plan`` exits).
POLICY_DENIED = 3
#: Specs validated once are reused while their files are unchanged, and validated again
#: at least this often (seconds) all the same.
REVALIDATE_SECONDS = 600.0
#: Causes remembered at most (advisories may name resources nobody declares).
MAX_CAUSES = 10_000
RECENT_CHANGES = 100
#: Resources an advisory cycle re-plans one by one at most: past this many named since
#: the last cycle (a burst, or a client forging advisories), the cycle is a full plan.
MAX_PENDING = 1_000
#: A heal looks at the branch head under the apply lock for at most this long (seconds):
#: past it, it goes on with the last commit fetched (a git server that stops answering
#: never keeps the lock).
HEAD_CHECK_SECONDS = 10.0
#: A full collection (over what runs froze) at most this often, and every so many cycles.
GC_SECONDS = 60.0
GC_CYCLES = 20


@dataclass(frozen=True)
class WatchSettings:
    interval: float = 60.0
    mode: Mode = "observe"
    once: bool = False
    listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    debounce: float = 0.05  # advisories of one burst (a script's creates) join one plan
    git_poll: float | None = None  # default: the interval
    lock_timeout: float = 60.0
    first_backoff: float = 1.0
    advisories: bool = True  # False: plan every interval only (--no-advisories)
    #: An advisory's re-plan reads and plans only the streams advisories named (False:
    #: a full re-plan each time; the bench compares both).
    targeted: bool = True


Files = tuple[tuple[str, int, int], ...]


def fingerprint(request: PlanRequest, named: tuple[Path, ...] = ()) -> Files | None:
    """Every spec and overlay file of ``request`` (and the files specs ``named``: a
    KeyValue entry's ``value_file``) with its size and modification time (None when one
    cannot be read): the same value means the same files, so the specs validated once
    serve the next plans (up to :data:`REVALIDATE_SECONDS`)."""
    found: list[tuple[str, int, int]] = []
    try:
        for root in (*request.paths, *request.overlays, *named):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
            for path in files:
                stat = path.stat()
                found.append((str(path), stat.st_size, stat.st_mtime_ns))
    except OSError:
        return None
    return tuple(found)


class _Stopped(Exception):
    """``stop`` was set while a plan was under way (it was cancelled)."""


@dataclass
class Cycle:
    """The last cycle, as ``/status`` shows it."""

    started_at: float
    finished_at: float
    trigger: str
    commit: str | None
    ok: bool
    error: str | None
    resources: list[ResourceStatus]

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": rfc3339(self.started_at),
            "finished_at": rfc3339(self.finished_at),
            "trigger": self.trigger,
            "commit": self.commit,
            "ok": self.ok,
            "error": self.error,
            "summary": counts(self.resources),
            "resources": [r.to_json() for r in self.resources],
        }


class _Observer:
    """The run's observer: notices and failed steps go to the log."""

    asks = False

    def __init__(self, log: Log) -> None:
        self.log = log

    def notice(self, message: str) -> None:
        self.log.event("notice", message)

    def show_plan(self, plan: Plan) -> None:
        pass

    async def confirm(self, plan: Plan) -> bool:
        return False

    def step(self, event: StepEvent) -> None:
        if event.outcome == "failed":
            self.log.event("error", f"{describe(event.step)} failed", error=event.error)

    def show_result(self, result: Any) -> None:
        pass


class Agent:
    def __init__(self, source: Source, settings: WatchSettings, log: Log) -> None:
        self.source = source
        self.settings = settings
        self.log = log
        self.metrics = Metrics()
        self.observer = _Observer(log)
        self.stop = asyncio.Event()
        self.wake = asyncio.Event()
        self.causes: dict[Key, Cause] = {}
        self.lost: dict[str, Lost] = {}
        self.streams: Mapping[str, StreamState] = {}
        self.known: dict[ResourceRef, State] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_CHANGES)
        self.last: Cycle | None = None
        self.last_success: float | None = None
        self.connected = False
        self.advisories_state = "not subscribed yet"
        self.failures = 0
        self.cycles = 0
        self.denied = 0
        self.pending: set[Key] = set()
        self._specs: dict[tuple[str | None, Files], tuple[Spec, ...]] = {}
        self._named: tuple[Path, ...] = ()  # value files the specs read
        self._validated_at = -REVALIDATE_SECONDS
        self.identity: tuple[str, int | None] | None = None
        self.git_error: tuple[str, float] | None = None  # the last fetch's error, since
        self._fetch: asyncio.Future[bool] | None = None  # the fetch under way (one at once)
        self.http: asyncio.Server | None = None
        self._collected_at = time.monotonic()

    # -- the whole run --------------------------------------------------------------------
    async def run(self) -> int:
        """Run until ``stop`` (or one cycle with ``once``); the exit status."""
        if self.settings.listen is not None:
            host, port = self.settings.listen
            try:
                self.http = await serve(host, port, self.routes())
            except OSError as err:
                reason = (err.strerror or str(err)).lower()
                raise ReconcileError(f"cannot listen on {host}:{port}: {reason}") from None
            bound = self.http.sockets[0].getsockname()
            self.log.event("listening", f"http://{bound[0]}:{bound[1]}/metrics")
            if (exposed := exposure(host)) is not None:
                self.log.event("notice", exposed)
        try:
            if self.settings.once:
                return await self._once()
            await self._forever()
            return 0
        finally:
            if self.http is not None:
                self.http.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.http.wait_closed(), 1.0)
            self.log.event("stopped")

    async def _once(self) -> int:
        await self.source.refresh()
        async with open_client(self.source.request().options, on_notice=self.observer.notice) as c:
            self._connected(c, True)
            ok = await self._cycle(c, "once")
        if not ok:
            return self._error_code
        assert self.last is not None
        if self.denied:
            return POLICY_DENIED
        return 2 if any(r.state in DRIFT_STATES for r in self.last.resources) else 0

    _error_code = 1

    async def _forever(self) -> None:
        while not self.stop.is_set():
            try:
                await self._unless_stopped(self._refreshing())
                options = self.source.request().options
                async with open_client(options, on_notice=self.observer.notice) as client:
                    self._connected(client, True)
                    self.failures = 0
                    await self._subscribe(client)
                    await self._serve(client)
            except _Stopped:
                break
            except ReconcileError as err:
                self.failures += 1
                self.log.event("error", str(err), failures=self.failures)
            finally:
                self._connected(None, False)
            if not self.stop.is_set():
                await self._pause(self._backoff())

    def _connected(self, client: JetStreamClient | None, up: bool) -> None:
        self.connected = up
        self.metrics.connected.set(1 if up else 0)
        self.identity = client.identity if client is not None else None
        if not up:
            self.metrics.advisories_subscribed.set(0)

    def _backoff(self) -> float:
        n = max(self.failures - 1, 0)
        return float(min(self.settings.first_backoff * 2**n, max(self.settings.interval, 1.0)))

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def _unless_stopped(self, work: Awaitable[_T]) -> _T:
        """``work``, cancelled when ``stop`` is set first (raises :class:`_Stopped`)."""
        task = asyncio.ensure_future(work)
        halt = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({task, halt}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise _Stopped
        return task.result()

    # -- advisories -----------------------------------------------------------------------
    async def _subscribe(self, client: JetStreamClient) -> None:
        if not self.settings.advisories:
            self.advisories_state = "off (--no-advisories): polling every interval"
            return
        for subject in advisories.SUBJECTS:
            await client.subscribe(subject, self._on_advisory)
        await asyncio.sleep(0.05)  # a refusal comes back as an async error
        denied = sorted(client.denied_subscriptions)
        if denied:
            self.advisories_state = f"denied ({', '.join(denied)}): polling every interval"
            self.log.event(
                "notice",
                "this account may not subscribe to JetStream advisories: no attribution, "
                f"changes are found by the plan every {self.settings.interval:g}s",
                denied=denied,
            )
            self.metrics.advisories_subscribed.set(0)
        else:
            self.advisories_state = "subscribed"
            self.metrics.advisories_subscribed.set(1)

    def _on_advisory(self, subject: str, data: bytes) -> None:
        self.metrics.advisories.labels(advisories.advisory_type(subject)).inc()
        touch = advisories.parse(subject, data)
        if touch is None or self._own(touch):
            return
        if touch.cause is not None:
            self._remember(touch)
        if len(self.pending) <= MAX_PENDING:  # one more means "too many": a full plan
            self.pending.add(touch.key)
        self.wake.set()

    def _own(self, touch: Touch) -> bool:
        """The agent's own change (a heal): already known."""
        return touch.origin is not None and touch.origin == self.identity

    def _remember(self, touch: Touch) -> None:
        assert touch.cause is not None
        self.causes.pop(touch.key, None)
        self.causes[touch.key] = touch.cause
        while len(self.causes) > MAX_CAUSES:
            self.causes.pop(next(iter(self.causes)))

    # -- the loop on one connection -------------------------------------------------------
    async def _serve(self, client: JetStreamClient) -> None:
        trigger = "connected"
        while not self.stop.is_set():
            ok = await self._unless_stopped(self._cycle(client, trigger))
            if client.lost.is_set():
                raise ConnectError("connection to the server lost")
            self.failures = 0 if ok else self.failures + 1
            wait = self.settings.interval if ok else self._backoff()
            trigger = await self._next_trigger(client, time.monotonic() + wait)
            if trigger == "stop":
                return
            if trigger == "lost":
                raise ConnectError("connection to the server lost")

    async def _next_trigger(self, client: JetStreamClient, deadline: float) -> str:
        """Wait for the next reason to plan: stop, lost, advisory, commit or interval."""
        poll = self.settings.git_poll or self.settings.interval
        while True:
            if self.stop.is_set():
                return "stop"
            if client.lost.is_set():
                return "lost"
            if self.last is not None and self.last.commit != self.source.commit:
                return "commit"  # fetched during the cycle (a heal looks under the lock)
            now = time.monotonic()
            if now >= deadline:
                return "interval"
            waits = [asyncio.ensure_future(e.wait()) for e in (self.stop, client.lost, self.wake)]
            timeout = min(deadline - now, poll) if self.source.commit else deadline - now
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if self.wake.is_set() and not self.stop.is_set() and not client.lost.is_set():
                await self._pause(self.settings.debounce)  # gather the advisories of a burst
                self.wake.clear()
                return "advisory"
            if self.source.commit and not self.stop.is_set():
                try:  # a git server that stops answering never holds up a stop
                    if await self._unless_stopped(asyncio.shield(self._refreshing())):
                        return "commit"
                except _Stopped:
                    return "stop"

    def _refreshing(self) -> asyncio.Future[bool]:
        """The fetch under way, or a new one: never two at once into the same clone (a
        fetch the heal stopped waiting for goes on in its thread)."""
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.ensure_future(self._git_refresh())
        return self._fetch

    async def _git_refresh(self) -> bool:
        """Look for a new commit; a fetch that fails keeps the last one (and is logged)."""
        try:
            new = await self.source.refresh()
        except ReconcileError as err:
            if self.source.commit is None:
                raise
            self.log.event("error", str(err), commit=self.source.commit)
            self.git_error = (str(err), self.git_error[1] if self.git_error else time.time())
            return False
        self.git_error = None
        if new:
            self.log.event("commit", "new commit to plan", commit=self.source.commit)
        return new

    # -- one cycle ------------------------------------------------------------------------
    async def _cycle(self, client: JetStreamClient, trigger: str) -> bool:
        """Plan (and heal); record what was found. False when the cycle failed."""
        started = time.time()
        commit = self.source.commit
        only = self._targets(trigger, commit)
        self.pending.clear()
        error: str | None = None
        resources: list[ResourceStatus] = []
        try:
            with fewer_collections():
                resources = await self._plan_and_heal(client, commit, only)
        except ConnectError:
            raise
        except ReconcileError as err:
            if client.lost.is_set():
                raise ConnectError(str(err)) from None
            error = str(err)
            self._error_code = getattr(err, "exit_code", 1)
        finally:
            self._collect()
        self.cycles += 1
        self.last = Cycle(started, time.time(), trigger, commit, error is None, error, resources)
        self.metrics.cycles.labels("ok" if error is None else "error").inc()
        if error is None:
            self.last_success = time.time()
            self.metrics.last_success.set(self.last_success)
            self._record(resources, commit)
        if self.source.committed_at is not None:
            self.metrics.git_head_age.set(max(time.time() - self.source.committed_at, 0))
        self._log_cycle(trigger, commit, resources, error)
        return error is None

    def _targets(self, trigger: str, commit: str | None) -> frozenset[str] | None:
        """The streams an advisory's cycle plans (None: all of them). A full plan when
        the last one failed or planned another commit, or when nothing was named."""
        last = self.last
        if (
            trigger != "advisory"
            or not self.settings.targeted
            or not self.pending
            or len(self.pending) > MAX_PENDING
            or last is None
            or not last.ok
            or last.commit != commit
        ):
            return None
        return frozenset(stream for stream, _ in self.pending)

    async def _plan_and_heal(
        self, client: JetStreamClient, commit: str | None, only: frozenset[str] | None
    ) -> list[ResourceStatus]:
        request = self.source.request()
        began = time.monotonic()
        files = fingerprint(request, self._named)
        fresh = time.monotonic() - self._validated_at < REVALIDATE_SECONDS
        known = self._specs.get((commit, files)) if files and (fresh or only) else None
        if known is None:  # files changed since the last full plan: plan them all (a
            only = None  # targeted plan would skip a policy deny or refusal elsewhere)
        planned = await plan_on(client, request, self.observer, only=only, specs=known)
        if only is None and known is None:  # validated now: later plans may reuse them
            self._named = tuple(Path(s.value_file) for s in planned.specs if s.value_file)
            files = fingerprint(request, self._named) if self._named else files
            self._specs = {(commit, files): planned.specs} if files else {}
            self._validated_at = time.monotonic()
        scope = "full" if only is None else "targeted"
        self.metrics.plan_seconds.labels(scope).observe(time.monotonic() - began)
        the_plan, split, result = planned.plan, split_for_heal(planned.plan), None
        self.denied = len(getattr(the_plan, "denied", ()))  # policy deny findings
        if self.settings.mode == "heal" and split.steps:
            began = time.monotonic()
            try:
                healed = await heal_on(
                    client,
                    request,
                    planned.specs,
                    self.observer,
                    lock_timeout=self.settings.lock_timeout,
                    still_wanted=lambda: self._still_head(commit),
                    stop=self.stop,
                    only=only,
                )
            except ApplyFailed as err:
                raise ReconcileError(f"heal failed: {err}") from None
            finally:
                self.metrics.apply_seconds.observe(time.monotonic() - began)
            the_plan, split, result = healed.plan, healed.split, healed.result
        found = statuses(
            the_plan,
            split,
            outcome=outcome_of(result),
            causes=self.causes,
            previous=self.streams,
        )
        if only is None:
            self.streams = planned.live.stream_state
            return [self._with_lost(r) for r in found]
        return self._merged(found, only | {s.stream_name for s in planned.specs}, planned)

    async def _still_head(self, commit: str | None) -> bool:
        """Under the apply lock: whether ``commit`` is still the branch head (the branch is
        fetched now; a heal never applies a commit older than a pushed one)."""
        if commit is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._refreshing()), HEAD_CHECK_SECONDS)
            except TimeoutError:
                self.log.event(
                    "error",
                    f"the branch head did not answer within {HEAD_CHECK_SECONDS:g}s: "
                    "healing the last commit fetched",
                    commit=commit,
                )
        return self.source.commit == commit

    def _merged(
        self, found: list[ResourceStatus], scoped: frozenset[str], planned: Planned
    ) -> list[ResourceStatus]:
        """A targeted plan's resources in place of those streams' in the last full
        list (and their states in place of theirs)."""
        assert self.last is not None
        streams = {k: v for k, v in self.streams.items() if k not in scoped}
        self.streams = {**streams, **planned.live.stream_state}
        kept = [r for r in self.last.resources if r.ref.stream_name not in scoped]
        merged = kept + [self._with_lost(r) for r in found]
        return sorted(merged, key=lambda r: r.ref.sort_key)

    def _with_lost(self, resource: ResourceStatus) -> ResourceStatus:
        """A deleted stream's loss is remembered until it is back in sync."""
        stream = resource.ref.stream_name
        if resource.lost is not None:
            self.lost[stream] = resource.lost
        elif resource.state in ("in_sync", "unmanaged"):
            self.lost.pop(stream, None)
        elif not resource.ref.is_child and stream in self.lost:
            return replace(resource, lost=self.lost[stream])
        return resource

    def _collect(self) -> None:
        """What the runs froze, collected now and then (``fewer_collections``: a cycle
        among frozen objects is never collected otherwise)."""
        if self.cycles % GC_CYCLES == 0 or time.monotonic() - self._collected_at > GC_SECONDS:
            gc.unfreeze()
            gc.collect()
            self._collected_at = time.monotonic()

    # -- what a cycle found ---------------------------------------------------------------
    def _record(self, resources: list[ResourceStatus], commit: str | None) -> None:
        """Log and count each change of state; forget causes of resources back in sync."""
        first = not self.known
        seen: dict[ResourceRef, State] = {}
        for r in resources:
            seen[r.ref] = r.state
            before = self.known.get(r.ref)
            if r.state == before and r.state not in ("healed",):
                continue
            if r.state in ("in_sync", "unmanaged"):
                self.causes.pop(r.key, None)
                if before is None or r.state == "unmanaged":
                    continue
            if r.state != "in_sync" and before in (None, "in_sync", "healed"):
                cause = (
                    "api" if r.cause else ("commit" if before is None and not first else "unknown")
                )
                self.metrics.drift_events.labels(cause).inc()
            if r.state == "healed":
                self.metrics.heals.labels(r.ref.kind).inc()
            if r.state == "needs_person" and before != "needs_person":
                self.metrics.refused.labels(self._action_of(r)).inc()
            self._log_change(r, before, commit)
        self.known = seen
        self.metrics.set_resources(resources)

    @staticmethod
    def _action_of(resource: ResourceStatus) -> str:
        why = resource.why or ""
        for action in ("replace", "delete", "migration", "update", "depends"):
            if action in why or (action == "delete" and "prune" in why):
                return action
        return "other"

    def _log_change(self, r: ResourceStatus, before: State | None, commit: str | None) -> None:
        record: dict[str, Any] = {
            "resource": r.ref.label,
            "state": r.state,
            "was": before,
            "fields": list(r.fields) or None,
            "why": r.why,
            "commit": commit,
        }
        if r.cause is not None:
            record["cause"] = r.cause.to_json()
        if r.lost is not None:
            record["lost"] = r.lost.to_json()
        message = self._sentence(r)
        self.recent.append({"time": rfc3339(time.time()), "message": message, **record})
        self.log.event("change", message, **record)

    @staticmethod
    def _sentence(r: ResourceStatus) -> str:
        says = {
            "in_sync": "is in sync again",
            "drifted": "has drifted",
            "missing": "is missing",
            "healed": "was healed",
            "needs_person": "needs a person",
            "failed": "could not be healed",
            "unmanaged": "is unmanaged",
        }
        parts = [f"{r.ref.label} {says[r.state]}"]
        if r.cause is not None:
            verb = {"create": "created", "update": "changed", "delete": "deleted"}
            parts.append(f"{verb[r.cause.operation]} by {r.cause.describe()}")
        if r.lost is not None:
            parts.append(f"it held {r.lost.messages} message(s) when last read")
        return "; ".join(parts)

    def _log_cycle(
        self, trigger: str, commit: str | None, resources: list[ResourceStatus], error: str | None
    ) -> None:
        found = {state: n for state, n in counts(resources).items() if n}
        if error is not None:
            self.log.event("cycle", "cycle failed", trigger=trigger, commit=commit, error=error)
        else:
            self.log.event("cycle", "", trigger=trigger, commit=commit, **found)

    # -- HTTP -----------------------------------------------------------------------------
    def routes(self) -> dict[str, Route]:
        return {
            "/metrics": lambda: Reply(200, self.metrics.text(), "text/plain; version=0.0.4"),
            "/healthz": lambda: Reply(200, b"ok\n"),
            "/readyz": self._ready,
            "/status": lambda: Reply(
                200, json.dumps(self.status(), default=str).encode(), "application/json"
            ),
        }

    def not_ready(self) -> str | None:
        """Why the agent is not ready, or None."""
        if not self.connected:
            return "not connected to the server"
        if self.last is None or self.last_success is None:
            return "no plan has succeeded yet"
        if not self.last.ok:
            return f"the last plan failed: {self.last.error}"
        if time.time() - self.last_success > 2 * self.settings.interval:
            return "the last successful plan is older than twice the interval"
        return None

    def _ready(self) -> Reply:
        reason = self.not_ready()
        if reason is None:
            return Reply(200, b"ready\n")
        return Reply(503, (reason + "\n").encode())

    def status(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "mode": self.settings.mode,
            "commit": self.source.commit,
            "git": {
                "error": self.git_error[0] if self.git_error else None,
                "failing_since": rfc3339(self.git_error[1]) if self.git_error else None,
            },
            "connected": self.connected,
            "advisories": self.advisories_state,
            "ready": self.not_ready() is None,
            "last_successful_plan_at": (
                rfc3339(self.last_success) if self.last_success is not None else None
            ),
            "last_cycle": None if self.last is None else self.last.to_json(),
            "recent_changes": list(self.recent),
        }
