"""One environment's cycles: its connection, the loop of plans (and heals) on it.

A :class:`Watch` keeps one connection to its environment's server open; on it the
:class:`~reconciler.agent.listener.AdvisoryListener` hears advisories and each cycle plans
(:func:`~reconciler.execution.standing.plan_on`). A cycle runs:

- at least every ``interval`` (a full re-plan, whatever else happened: advisories are
  not kept for a subscriber that was away), counted from the last full one: advisories'
  targeted cycles between never put it off;
- within ``debounce`` of an advisory naming a resource (advisories arriving meanwhile
  join the same cycle);
- as soon as a new commit of the git branch is seen (polled every ``git_poll``);
- after a failure, with exponential backoff (1 s, 2 s, 4 s, ... up to ``interval``).

In heal mode a cycle whose plan has steps a heal may apply takes the environment's apply
lock, plans again under it and applies them (:func:`~reconciler.execution.standing.heal_on`);
the lock is never held between cycles. A lost connection is opened again (with the same
backoff), and the first cycle after it is a full re-plan. ``stop`` (SIGTERM, SIGINT) ends
the loop: a plan under way is cancelled, a heal's steps in flight finish, the lock is
released, the seat's claim deleted (:meth:`~.claims.SeatClaim.stopping`), the connection
closed. Each watch runs in a task of its own: a slow or
unreachable server delays only its own environment. Its standby pairs' health is read
beside its cycles (:mod:`.standby`): a standby's server that hangs delays no cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeVar

from reconciler.agent.claims import SeatClaim
from reconciler.agent.commits import Commits
from reconciler.agent.flapping import Flapping
from reconciler.agent.listener import AdvisoryListener
from reconciler.agent.logs import Log
from reconciler.agent.memory import Collector, SpecCache, Streams
from reconciler.agent.metrics import EnvironmentMetrics
from reconciler.agent.report import Report
from reconciler.agent.seats import Seats, seat_of
from reconciler.agent.source import Source
from reconciler.agent.standby import PairReads
from reconciler.agent.status import (
    DRIFT_STATES,
    NOTHING,
    Resources,
    State,
    outcome_of,
    statuses,
)
from reconciler.errors import (
    ApplyFailed,
    ConnectError,
    ConnectRefused,
    ExitStatus,
    ReconcileError,
    changes_status,
    unforeseen,
)
from reconciler.execution.apply import StepEvent, describe
from reconciler.execution.requests import Observer, PlanRequest
from reconciler.execution.run import fewer_collections
from reconciler.execution.standing import heal_on, plan_on
from reconciler.identity import ResourceRef
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.model.state import StreamState
from reconciler.model.timestamps import rfc3339
from reconciler.planning.heal import split_for_heal
from reconciler.specs.ignore import IGNORE_FILE
from reconciler.specs.project import Environment

Mode = Literal["observe", "heal"]
_T = TypeVar("_T")

#: ``--once``'s exit status when a policy rule denies the plan (as ``plan`` exits).
POLICY_DENIED = ExitStatus.POLICY_DENY


@dataclass(frozen=True)
class WatchSettings:
    interval: float = 60.0
    mode: Mode = "observe"
    once: bool = False
    listen: tuple[str, int] | None = ("127.0.0.1", 9464)
    debounce: float = 0.05  # advisories of one burst (a script's creates) join one plan
    #: how long past the debounce a cycle waits for the API audit of an event naming a
    #: known resource (the audit says who did it; under load it may come late)
    audit_wait: float = 1.0
    git_poll: float | None = None  # default: the interval
    lock_timeout: float = 60.0
    first_backoff: float = 1.0
    advisories: bool = True  # False: plan every interval only (--no-advisories)
    #: An advisory's re-plan reads and plans only the streams advisories named (False:
    #: a full re-plan each time; the bench compares both).
    targeted: bool = True


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
    resources: Resources

    @cached_property
    def encoded(self) -> bytes:
        """:meth:`to_json` as JSON, made once: ``/status`` serves it at every request
        (3 MB for 21,000 resources)."""
        return json.dumps(self.to_json(), default=str).encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": rfc3339(self.started_at),
            "finished_at": rfc3339(self.finished_at),
            "trigger": self.trigger,
            "commit": self.commit,
            "ok": self.ok,
            "error": self.error,
            "summary": self.resources.counts(),
            "resources": [r.to_json() for r in self.resources],
        }


class Link:
    """The environment's connection as ``/status`` shows it: up, or why and since when
    not. ``reachable`` false: the server is down (refused at TCP, no answer, the
    connection lost): the world's fault. ``refused``: it answered and refused us
    (credentials, TLS, a greeting no NATS server sends), or the settings cannot connect
    (``reachable`` then None: no server was asked): the configuration's fault."""

    def __init__(self) -> None:
        self.connected = False
        self.reachable: bool | None = None  # None: not tried yet, or failed before connecting
        self.refused = False
        self.error: str | None = None
        self.since: float | None = None  # unreachable since

    def up(self) -> None:
        self.connected, self.reachable, self.error, self.since = True, True, None, None
        self.refused = False

    def failed(self, err: ReconcileError, said: str | None = None) -> None:
        """``err`` failed the connection (``said``: its text as shown, else its own)."""
        self.error = str(err) if said is None else said
        if isinstance(err, ConnectRefused):
            self.reachable = True if err.answered else None
            self.refused, self.since = True, None
        elif isinstance(err, ConnectError):
            self.reachable, self.refused = False, False
            self.since = self.since or time.time()

    def to_json(self) -> dict[str, Any]:
        return {
            "connected": self.connected,
            "reachable": self.reachable,
            "refused": self.refused,
            "unreachable_since": rfc3339(self.since) if self.since is not None else None,
            "error": self.error,
        }


class _Observer(Observer):
    """The run's listener: notices and failed steps go to the log."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def notice(self, message: str) -> None:
        self.log.event("notice", message)

    def step(self, event: StepEvent) -> None:
        if event.outcome == "failed":
            self.log.event("error", f"{describe(event.step)} failed", error=event.error)


class Watch:
    """One environment (or the one target of PATHS): its connection and its cycles."""

    def __init__(
        self,
        source: Source,
        settings: WatchSettings,
        log: Log,
        metrics: EnvironmentMetrics,
        *,
        env: str | None = None,
        stop: asyncio.Event | None = None,
        collector: Collector | None = None,
        seats: Seats | None = None,
    ) -> None:
        self.env = env
        self.seats = seats
        self.source = source
        self.settings = settings
        log = log.showing(source.shown)  # every line names files as the user knows them
        self.log = log
        self.metrics = metrics
        self.stop = stop or asyncio.Event()
        self.collector = collector or Collector()
        self.observer = _Observer(log)
        self.listener = AdvisoryListener(log, metrics, enabled=settings.advisories)
        self.commits = Commits(source, log)
        self.report = Report(log, metrics, self.listener)
        self.specs = SpecCache()
        self.link = Link()
        self.failures = 0
        self.cycles = 0
        self.denied = 0
        self.error_code = 1
        self.last: Cycle | None = None
        self.last_success: float | None = None
        self.memory = Streams()
        self.flapping = Flapping()  # resources healed again and again: held back a while
        self.claim = SeatClaim(log, settings.interval)  # its seat, claimed on the server
        self.seated = False  # the seat taken on this connection (it heals)
        self.pair_reads = PairReads(log, metrics, settings.interval)  # beside the cycles
        self._full_at: float | None = None  # the last full cycle ended (monotonic)
        self._options: ConnectionOptions | None = None  # those of the connection open
        self._project_said: tuple[int, str | None] = (0, None)  # reads, error: logged

    @property
    def connected(self) -> bool:
        return self.link.connected

    @property
    def streams(self) -> Mapping[str, StreamState]:
        """What the last plans read of each stream."""
        return self.memory.read

    @property
    def tried(self) -> bool:
        """A cycle ran, or connecting failed: this environment's state is known."""
        return self.cycles > 0 or self.link.error is not None

    @property
    def known(self) -> Mapping[ResourceRef, State]:
        """Each resource's state after the last successful cycle."""
        return self.report.known

    # -- the whole run --------------------------------------------------------------------
    async def once(self) -> int:
        """One cycle: 0 in sync (or healed), 2 drift remains, 3 a policy deny, 1 error;
        130 when ``stop`` (Ctrl-C, SIGTERM) came first: a plan or a connection under way
        is dropped, a heal's steps in flight finish."""
        try:
            await self._unless_stopped(self.commits.refreshing())
            async with contextlib.AsyncExitStack() as opened:
                c = await self._open(opened)
                self._connected(c)
                await self._unless_stopped(self._take_seat(c, claim=False))
                ok = await self._unless_stopped(self._cycle(c, "once"))
            await self._unless_stopped(self.pair_reads.settled())  # its lines, then exit
        except _Stopped:
            return ExitStatus.INTERRUPTED
        finally:
            await self.pair_reads.close()
        if not ok:
            return self.error_code
        assert self.last is not None
        if self.denied:
            return POLICY_DENIED
        return changes_status(any(r.state in DRIFT_STATES for r in self.last.resources))

    async def forever(self) -> None:
        """Connect, plan, heal, until ``stop``; every failure is logged and retried."""
        try:
            await self._forever()
        finally:
            await self.pair_reads.close()  # a standby's read is never waited for

    async def _forever(self) -> None:
        while not self.stop.is_set():
            moved = False  # the connection settings changed (the project file's): at once
            try:
                # the first commit is waited for (nothing to plan before it); later ones
                # are polled between cycles: a reconnect never waits for a hung git server
                if not self.commits.following:
                    await self._unless_stopped(self.commits.refreshing())
                async with contextlib.AsyncExitStack() as opened:
                    client = await self._open(opened)
                    self._connected(client)
                    try:
                        await self._unless_stopped(self._take_seat(client))
                        # failures are reset by a cycle that succeeds, never by connecting:
                        # a server that takes the connection and fails every cycle
                        # (JetStream off) is retried with the backoff, not every
                        # first_backoff forever
                        await self.listener.subscribe(client, self.settings.interval)
                        moved = await self._serve(client)
                    finally:
                        if self.stop.is_set():  # its claim deleted, not left to go stale
                            await self._leave_seat(client, stopping=True)
            except _Stopped:
                break
            except ReconcileError as err:
                self._failed(err)
            except Exception as err:  # what no server sends, or a bug: this environment's
                self._failed(ReconcileError(unforeseen(err)))  # failure, never the others'
            finally:
                self._disconnected()
            if not self.stop.is_set() and not moved:
                await self._pause(self._backoff())

    async def _open(self, opened: contextlib.AsyncExitStack) -> JetStreamClient:
        """A client of this environment's server, closed with ``opened``. A stop never
        waits for a server that has not answered yet (up to ``connect_timeout``): the
        agent's exit is every environment's. Raises :class:`_Stopped`."""
        options = self._request().options
        client = open_client(options, on_notice=self.observer.notice)
        opened_client = await self._unless_stopped(opened.enter_async_context(client))
        self._options = options
        return opened_client

    def _request(self) -> PlanRequest:
        """The source's request now; a project file read again (or an edit of it that
        cannot be served, the last one kept) is said in the log once."""
        request = self.source.request()
        error = self.source.project_error
        said = (self.source.project_reads, error[0] if error else None)
        if said != self._project_said:
            self._project_said = said
            edited = self.source.edited
            if edited is None and request.project is not None:
                edited = request.project.path
            where = str(edited or "")
            what = (
                IGNORE_FILE if edited is not None and edited.name == IGNORE_FILE else "project file"
            )
            if error is not None:
                self.log.event(
                    "error",
                    f"the {what} changed and cannot be served (the last valid one "
                    f"is kept): {error[0]}",
                    file=where,
                )
            else:
                self.log.event("project", f"the {what} changed: read again", file=where)
        return request

    def _served_now(self) -> PlanRequest | None:
        """The request the next cycle serves, read before it; None when it cannot be
        made (a commit's invalid project file): nothing moves, the cycle fails saying
        why, at its commit, on the connection open."""
        try:
            return self._request()
        except ReconcileError:
            return None

    def _moved(self, request: PlanRequest | None) -> bool:
        """Whether the project file now names other connection settings (a server,
        credentials) than the connection open: it is opened again."""
        if self._options is None or request is None:
            return False
        return request.options != self._options

    def said(self, err: BaseException) -> str:
        """``err``'s text naming files as the user knows them (:meth:`Source.shown`),
        as ``/status`` and ``/readyz`` show it."""
        return self.source.shown(str(err))

    def _failed(self, err: ReconcileError) -> None:
        self.failures += 1
        self.link.failed(err, self.said(err))
        self.pair_reads.expire()  # no full cycle reads the pairs meanwhile
        self.metrics.connection_refused.set(1 if self.link.refused else 0)
        self.log.event("error", str(err), failures=self.failures)

    def _connected(self, client: JetStreamClient) -> None:
        self.link.up()
        self.listener.identity = client.identity
        self.metrics.connected.set(1)
        self.metrics.connection_refused.set(0)

    def _writer(self, request: PlanRequest) -> Environment | None:
        """The project's environment this watch heals as ``request`` says it, or None:
        it writes nothing (``--mode observe``, spec PATHS, ``lifecycle: {mode: observe}``)."""
        if self.settings.mode != "heal" or request.project is None or request.env is None:
            return None
        env = request.project.environments.get(request.env)
        return None if env is None or env.lifecycle.observe else env

    async def _take_seat(self, client: JetStreamClient, *, claim: bool = True) -> None:
        """Healing an environment: the seat the server says this connection writes in,
        refused (before any plan) when another environment of this process holds it
        (:mod:`.seats`), or an agent of another process claims it on the server
        (:mod:`.claims`; ``claim`` False: only read, as ``--once`` does). An environment
        in ``lifecycle: {mode: observe}`` writes nothing."""
        self.seated = False
        request = self._request()
        env = self._writer(request)
        if env is None:
            return
        found = await seat_of(client)
        if found is not None and self.seats is not None:
            self.seats.take(env, found)
        peers = request.project.environments if request.project is not None else {}
        await self.claim.take(client, env, found, request.owner, peers=peers, write=claim)
        self.seated = True

    async def _keep_seat(self, client: JetStreamClient, served: PlanRequest | None) -> None:
        """Before each cycle: the seat follows the project ``served``, not only the one
        the connection was opened with. An environment that writes from now on (an edit
        or a commit lifting its ``lifecycle: {mode: observe}``) takes its seat first
        (refused as at a connection: it healed unchecked beside the environment holding
        it); one that writes nothing from now on leaves it (the other environment of the
        seat is served at its next try: it stayed refused until a restart); else the
        claim held is renewed. One whose project cannot be served (:meth:`_served_now`:
        a commit removing it, or whose project file is invalid) heals nothing until a
        commit mends it, and holds no seat meanwhile: a commit removing the environment
        holding a seat (the refusal's other way out) left the other refused until a
        restart, and then until the claim went stale (three intervals). An edit of the
        project's owner, which the claim's key holds, leaves the seat and takes it again
        under the new key: the old claim kept refusing nobody, and an agent of another
        process took the seat under the new key while this one still healed in it."""
        writes = served is not None and self._writer(served) is not None
        if served is not None and self.seated and served.owner != self.claim.owner:
            await self._leave_seat(client)  # the old owner's claim deleted
        if writes and not self.seated:
            await self._take_seat(client)
        elif not writes:
            await self._leave_seat(client)
        slow = self.last.finished_at - self.last.started_at if self.last else 0.0
        await self.claim.renew(client, slow=slow)  # refused if another took the seat

    async def _leave_seat(self, client: JetStreamClient, *, stopping: bool = False) -> None:
        """The seat taken on ``client`` freed, in this process and on the server (its
        claim deleted): this environment writes nothing there from now on. ``stopping``:
        the agent stops (:meth:`SeatClaim.stopping`: a server not answering never holds
        the stop up)."""
        if not self.seated:
            return
        self.seated = False
        if self.seats is not None and self.env is not None:
            self.seats.leave(self.env)
        await (self.claim.stopping(client) if stopping else self.claim.release(client))

    def _disconnected(self) -> None:
        self.link.connected = False
        self.metrics.connected.set(0)
        self.listener.disconnected()

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

    # -- the loop on one connection -------------------------------------------------------
    async def _serve(self, client: JetStreamClient) -> bool:
        """Cycles on ``client`` until ``stop`` (False) or until the project file names
        other connection settings (True: open a connection with them at once)."""
        trigger = "connected"
        while not self.stop.is_set():
            served = self._served_now()
            if self._moved(served):
                self.log.event("project", "the connection settings changed: connecting again")
                # its seat here freed at once: another environment refused it (the
                # refusal's advice: another account or user) waited for the claim to go
                # stale, three intervals; the new connection takes the seat it says
                await self._unless_stopped(self._leave_seat(client))
                return True
            await self._unless_stopped(self._keep_seat(client, served))  # refused if lost
            ok = await self._unless_stopped(self._cycle(client, trigger))
            if client.lost.is_set():
                raise client.closed("connection to the server lost")
            self.failures = 0 if ok else self.failures + 1
            due = time.monotonic() + (self.settings.interval if ok else self._backoff())
            if ok and self._full_at is not None:  # a full cycle every interval, however
                due = min(due, self._full_at + self.settings.interval)  # many advisories
            trigger = await self._next_trigger(client, due)
            if trigger == "stop":
                return False
            if trigger == "lost":
                raise client.closed("connection to the server lost")
        return False

    async def _next_trigger(self, client: JetStreamClient, deadline: float) -> str:
        """Wait for the next reason to plan: stop, lost, advisory, commit, a hold over
        (:mod:`.flapping`) or interval."""
        poll = self.settings.git_poll or self.settings.interval
        wake = self.listener.wake
        # a poll of the branch under way: waited for beside the rest, never instead of it
        # (a git server that stops answering holds up neither an advisory, the interval
        # nor a stop; the fetch goes on, and its new commit is planned when it comes)
        fetch: asyncio.Future[bool] | None = None
        while True:
            if self.stop.is_set():
                return "stop"
            if client.lost.is_set():
                return "lost"
            if self.last is not None and self.last.commit != self.source.commit:
                return "commit"  # fetched during the cycle (a heal looks under the lock)
            if fetch is not None and fetch.done():
                if not fetch.cancelled() and fetch.result():
                    return "commit"
                fetch = None
            now = time.monotonic()
            if now >= deadline:
                return "interval"
            hold_over = self.flapping.next_due()
            if hold_over is not None and now >= hold_over:
                for ref in self.flapping.due(now):  # planned as an advisory's streams are
                    self.listener.pending.add((ref.stream_name, ref.name if ref.is_child else None))
                return "hold over"
            waits: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(e.wait()) for e in (self.stop, client.lost, wake)
            ]
            if fetch is not None:
                waits.append(asyncio.ensure_future(asyncio.shield(fetch)))
            polling = self.commits.following and fetch is None
            timeout = min(deadline - now, poll) if polling else deadline - now
            if hold_over is not None:
                timeout = min(timeout, hold_over - now)
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if wake.is_set() and not self.stop.is_set() and not client.lost.is_set():
                await self._pause(self.settings.debounce)  # gather the advisories of a burst
                await self._await_audits(client)
                wake.clear()
                return "advisory"
            if polling and not self.stop.is_set():
                fetch = self.commits.refreshing()

    async def _await_audits(self, client: JetStreamClient) -> None:
        """Until the API audits of the events naming known resources have come (at most
        ``audit_wait``): a heal planned before its audit would not say who changed what."""
        give_up = time.monotonic() + self.settings.audit_wait
        audited = self.listener.audited
        while self._unaudited_known() and not self.stop.is_set() and not client.lost.is_set():
            left = give_up - time.monotonic()
            if left <= 0:
                return
            audited.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (self.stop, client.lost, audited)]
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _unaudited_known(self) -> bool:
        """Whether an event without its audit yet named a resource the last cycle knew
        (never an ephemeral consumer's, nor an unmanaged stream's: nothing heals those)."""
        unaudited = self.listener.awaiting()
        if not unaudited or self.last is None:
            return False
        named = self.last.resources.of_streams({stream for stream, _ in unaudited})
        return any(r.key in unaudited for r in named if r.state != "unmanaged")

    # -- one cycle ------------------------------------------------------------------------
    async def _cycle(self, client: JetStreamClient, trigger: str) -> bool:
        """Plan (and heal); record what was found. False when the cycle failed."""
        started = time.time()
        heard = self.listener.heard  # causes that come later may be of changes not read
        commit = self.source.commit
        only = self._targets(trigger, commit, self.listener.targets())
        error: str | None = None
        before = self.last.resources if self.last is not None else NOTHING
        resources, scoped = NOTHING, None
        try:
            # the tree of ``commit`` is kept while this cycle reads it (a newer commit's
            # checkout by another environment's poll removed it under the plan)
            with fewer_collections(), self.source.holding():
                try:
                    resources, scoped = await self._plan_and_heal(client, commit, only)
                finally:
                    self.collector.young(full=scoped is None)
        except ConnectError:
            raise
        except ReconcileError as err:
            if client.lost.is_set():
                raise ConnectError(str(err)) from None
            error = self.said(err)
            self.error_code = err.exit_code
        except Exception as err:  # a reply no server sends (forged by a client), or a bug
            error = unforeseen(err)  # this environment's failed cycle, never the others'
            self.error_code = ExitStatus.ERROR
        finally:
            self.collector.after_cycle(full=scoped is None)
        if scoped is None:  # the pairs read, every stream planned: the interval begins
            self._full_at = time.monotonic()
        self.cycles += 1
        self.last = Cycle(started, time.time(), trigger, commit, error is None, error, resources)
        self.metrics.cycles.labels("ok" if error is None else "error").inc()
        if error is None:
            self.last_success = time.time()
            self.metrics.last_success.set(self.last_success)
            self.report.record(resources, commit, streams=scoped, before=before, heard=heard)
        if self.source.committed_at is not None:
            self.metrics.git_head_age.set(max(time.time() - self.source.committed_at, 0))
        self.report.cycle(trigger, commit, resources, error)
        self.pair_reads.expire()
        if error is not None and not await client.answers():
            # a hung server keeps the connection open and times every request out: it is
            # unreachable (/status, reconcile_connected 0) and its connection opened again
            raise ConnectError(f"the server stopped answering (not even a PING): {error}")
        return error is None

    def _targets(
        self, trigger: str, commit: str | None, named: frozenset[str] | None
    ) -> frozenset[str] | None:
        """The streams an advisory's cycle plans (None: all of them). A full plan when
        the last one failed or planned another commit, or when nothing (or too much) was
        named."""
        last = self.last
        if (
            trigger not in ("advisory", "hold over")
            or not self.settings.targeted
            or not named
            or last is None
            or not last.ok
            or last.commit != commit
        ):
            return None
        return named

    async def _plan_and_heal(
        self, client: JetStreamClient, commit: str | None, only: frozenset[str] | None
    ) -> tuple[Resources, frozenset[str] | None]:
        """The resources known after this cycle's plan (and heal), and the streams it
        planned (None: a full plan, every resource)."""
        request = self._request()
        if self._options is not None and request.options != self._options:
            # the project file changed since this connection was opened: never planned
            # (nor healed) on the server it named before; the next cycle connects again
            raise ReconcileError("the connection settings changed: connecting again")
        began = time.monotonic()
        known = self.specs.get(request, commit, targeted=only is not None)
        if known is None:  # files changed since the last full plan: plan them all (a
            only = None  # targeted plan would skip a policy deny or refusal elsewhere)
        index = self.specs.index if known is not None else None
        planned = await plan_on(client, request, self.observer, only=only, specs=known, index=index)
        if only is None and known is None:  # validated now: later plans may reuse them
            self.specs.keep(request, commit, planned.specs)
        scope = "full" if only is None else "targeted"
        self.metrics.plan_seconds.labels(scope).observe(time.monotonic() - began)
        self.flapping.declared(planned.specs)  # declared anew: a person's, never held
        held_back = self.flapping.held(time.monotonic())  # fought over: not healed for now
        the_plan, split, result = planned.plan, split_for_heal(planned.plan, held_back), None
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
                    still_wanted=lambda: self.commits.still_head(commit),
                    stop=self.stop,
                    only=only,
                    held_back=held_back,
                )
            except ApplyFailed as err:
                raise ReconcileError(f"heal failed: {err}") from None
            finally:
                self.metrics.apply_seconds.observe(time.monotonic() - began)
            the_plan, split, result = healed.plan, healed.split, healed.result
            if result is not None:
                self.flapping.healed(
                    (s.ref for s in result.applied), planned.specs, time.monotonic(), time.time()
                )
        # a change made while this cycle read is in its plan, and its audit may not be
        # here yet: waited for (as after the debounce) so the report names who did it
        await self._await_audits(client)
        found = statuses(
            the_plan,
            split,
            outcome=outcome_of(result),
            causes=self.listener.causes,
            previous=self.memory.read,
        )
        if only is None:  # read in a task of its own: a hung standby never delays a cycle
            self.pair_reads.start(request, planned.specs)
            return self.memory.full(found, planned), None
        assert self.last is not None
        scoped = only | {s.stream_name for s in planned.specs}
        return self.memory.merged(self.last.resources, found, scoped, planned), scoped

    # -- what /status and /readyz say -----------------------------------------------------
    def _project_json(self) -> dict[str, Any]:
        """The project file's edits read while running (:class:`FixedSource`): how many
        are served, and the last one's error, kept until mended (the last valid is)."""
        error = self.source.project_error
        return {
            "reads": self.source.project_reads,
            "error": error[0] if error else None,
            "failing_since": rfc3339(error[1]) if error else None,
        }

    def not_ready(self) -> str | None:
        """Why this environment is not ready, or None."""
        if not self.link.connected:
            return "not connected to the server"
        if self.last is None or self.last_success is None:
            return "no plan has succeeded yet"
        if not self.last.ok:
            return f"the last plan failed: {self.last.error}"
        if time.time() - self.last_success > 2 * self.settings.interval:
            return "the last successful plan is older than twice the interval"
        return None

    def status(self, cycle: Callable[[Cycle], Any] = Cycle.to_json) -> dict[str, Any]:
        """The ``/status`` document; ``cycle``: what stands for the last cycle."""
        return {
            "env": self.env,
            "mode": self.settings.mode,
            "commit": self.source.commit,
            "git": self.commits.to_json(),
            "project": self._project_json(),
            **self.link.to_json(),
            "advisories": self.listener.state,
            "ready": self.not_ready() is None,
            "last_successful_plan_at": (
                rfc3339(self.last_success) if self.last_success is not None else None
            ),
            "last_cycle": None if self.last is None else cycle(self.last),
            "recent_changes": list(self.report.recent),
            "standby": self.pair_reads.to_json(),
        }
