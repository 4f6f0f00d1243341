"""The agent process: one or many environments watched, one HTTP listener, one stop.

:class:`Agent` runs a :class:`~reconciler.agent.cycles.Watch` per environment, each in a
task of its own with its own connection, apply lock, status entry, metric labels and log
lines (``env=NAME``): a slow or unreachable server delays only its own environment. It
serves ``/metrics``, ``/healthz``, ``/readyz`` and ``/status``
(:class:`~reconciler.agent.endpoints.Endpoints`) and ends every watch on ``stop``
(SIGTERM, SIGINT).

``Agent(source, settings, log)`` watches one target (spec PATHS, or one ``--env``) exactly
as before: ``/status`` is that target's document, metrics carry no ``env`` label.
:meth:`Agent.serving` watches a project's environments (``--all-envs``, ``--env`` more
than once, ``--shard``): ``/status`` holds one document per environment and every series
an ``env`` label. The jobs live in modules of their own: :mod:`.cycles` (connection and
cycles), :mod:`.memory` (what cycles keep), :mod:`.commits` (git), :mod:`.listener`
(advisories), :mod:`.report` (log and counters of what cycles found), :mod:`.endpoints`
(HTTP), :mod:`.metrics`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.agent.cycles import POLICY_DENIED, Cycle, Watch, WatchSettings
from reconciler.agent.endpoints import Endpoints, StatusBody
from reconciler.agent.logs import Log
from reconciler.agent.memory import Collector
from reconciler.agent.metrics import Metrics
from reconciler.agent.seats import Seats
from reconciler.agent.shards import Shard
from reconciler.agent.source import Source
from reconciler.door_words import Allowance, Setting, Words, spoken
from reconciler.errors import ExitStatus, ReconcileError, unforeseen

__all__ = ["POLICY_DENIED", "WORDS", "Agent", "NotServed", "WatchSettings", "worst"]


def _or_field(flag: str, field: str) -> str:
    """A connection setting as the agent takes it: its flag, or the field of the watched
    environment in the project file."""
    return f"{flag} (or the environment's {field})"


#: What the agent's messages name for a way to allow something
#: (:mod:`reconciler.door_words`): ``reconcile watch`` has no ``--take-over``,
#: ``--migrate``, ``--migration`` or ``--no-lock``, so the command that does it once is
#: named (None: left out, or the CLI command the message names itself); its
#: ``--lock-timeout`` is the CLI's. A connection setting is its flag or the project
#: file's field of the environment watched (``docs/environments.md``).
WORDS: Words = {
    Allowance.MIGRATE: "`reconcile apply --migrate`",
    Allowance.MIGRATE_RUN: "`reconcile apply --migrate`",
    Allowance.MIGRATION: None,
    Allowance.TAKE_OVER: "`reconcile apply --take-over`",
    Allowance.NO_LOCK: None,
    Setting.CREDS: _or_field("--creds", "creds"),
    Setting.NKEY: _or_field("--nkey", "nkey"),
    Setting.TLS_CA: _or_field("--tls-ca", "tls.ca"),
    Setting.CLIENT_CERT: _or_field("--tls-cert/--tls-key", "tls.cert/tls.key"),
    Setting.USER_PASSWORD: _or_field("--user/--password or --token", "user/password or token"),
    Setting.MONITOR: _or_field("--monitor", "monitor"),
    Setting.SYSTEM_USER: _or_field(
        "--system-creds, --system-context", "system_creds, system_context"
    ),
}


class NotServed:
    """The environments the project file names for this agent (its shard's share) that it
    does not serve: it serves those it started with, each with its task, connection and
    seat; one added since, by an edit or a commit, is served after a restart. Each is
    said once in the log, listed in ``/status`` (``not_served``, with why) and counted
    (``reconcile_environment_not_served{env}`` 1) until a project file read no longer
    names it."""

    def __init__(self, served: Iterable[str], log: Log) -> None:
        self.served = frozenset(served)
        self.log = log
        self.named: dict[str, str] = {}  # each environment not served -> why
        self.metrics: Metrics | None = None  # the agent's, once made: a series each

    def saw(self, listed: Iterable[str], commit: str | None) -> None:
        """``listed``: the environments for this agent in the project file read now (of
        ``commit``, with ``--git``)."""
        by = f"commit {commit[:7]}" if commit else "an edit of the project file"
        found: dict[str, str] = {}
        for name in listed:
            if name in self.served:
                continue
            found[name] = self.named.get(name) or (
                f"added by {by} after the agent started: a running agent serves the "
                "environments it started with; restart it to serve this one"
            )
            if name not in self.named:
                self.log.event(
                    "serving",
                    f"environment {name} added by {by}: not served until the agent restarts",
                    environment=name,
                    commit=commit,
                )
        self.named = found
        self.counted()

    def counted(self, metrics: Metrics | None = None) -> None:
        """``reconcile_environment_not_served``: one series per environment named (an
        alert's only way to see one: it has no other series); ``metrics``: the agent's."""
        self.metrics = metrics or self.metrics
        if self.metrics is not None:
            self.metrics.set_not_served(self.named)

    def to_json(self) -> dict[str, str]:
        return dict(self.named)


def worst(codes: list[int]) -> int:
    """The exit status of several ``--once`` cycles: 1 (an error) over 3 (a policy deny)
    over 2 (drift) over 0, as ``plan --all-envs`` exits."""
    for code in (ExitStatus.ERROR, POLICY_DENIED, ExitStatus.CHANGES):
        if code in codes:
            return code
    return max(codes, default=ExitStatus.OK)


class Agent:
    def __init__(
        self,
        source: Source | None,
        settings: WatchSettings,
        log: Log,
        *,
        environments: Mapping[str, Source] | None = None,
        shard: Shard | None = None,
        endpoints: Endpoints | None = None,
        not_served: NotServed | None = None,
    ) -> None:
        self.settings = settings
        self.log = log
        self.shard = shard
        self.many = environments is not None
        self.not_served = not_served or NotServed(environments or (), log)
        self.metrics = Metrics(by_env=self.many)
        self.not_served.counted(self.metrics)
        self.stop = asyncio.Event()
        collector = Collector()
        seats = Seats() if self.many else None  # one environment's connection each
        targets: dict[str | None, Source] = (
            {env: target for env, target in environments.items()}
            if environments is not None
            else {None: _given(source)}
        )
        self.watches: dict[str | None, Watch] = {
            env: Watch(
                target,
                settings,
                log if env is None else log.bound(env=env),
                self.metrics.of(env),
                env=env,
                stop=self.stop,
                collector=collector,
                seats=seats,
            )
            for env, target in targets.items()
        }
        answers = (self.metrics, StatusBody(self.status), self.not_ready)
        if endpoints is None:
            endpoints = Endpoints(*answers)
        else:  # listening since before the agent was made (Endpoints.starting)
            endpoints.answer(*answers)
        self.endpoints = endpoints

    @classmethod
    def serving(
        cls,
        environments: Mapping[str, Source],
        settings: WatchSettings,
        log: Log,
        *,
        shard: Shard | None = None,
        endpoints: Endpoints | None = None,
        not_served: NotServed | None = None,
    ) -> Agent:
        """An agent watching each of ``environments`` (a project's, or a shard's of them);
        ``endpoints``: already listening (:meth:`Endpoints.starting`), now the agent's;
        ``not_served``: told of the environments a project file read since names."""
        return cls(
            None,
            settings,
            log,
            environments=environments,
            shard=shard,
            endpoints=endpoints,
            not_served=not_served,
        )

    @property
    def watch(self) -> Watch:
        """The one target of an agent made with a source."""
        assert not self.many, "an agent of several environments has no single watch"
        return self.watches[None]

    @property
    def http(self) -> asyncio.Server | None:
        return self.endpoints.server

    # -- the whole run --------------------------------------------------------------------
    async def run(self) -> int:
        """Run until ``stop`` (or one cycle each with ``once``); the exit status. The
        engine's messages say a way to allow something in the agent's words (:data:`WORDS`)."""
        with spoken(WORDS):
            return await self._run()

    async def _run(self) -> int:
        if self.settings.listen is not None and self.endpoints.server is None:
            await self.endpoints.open(*self.settings.listen, self.log)
        try:
            if self.many:
                self._say_what_is_served()
            if self.settings.once:
                return await self._once()
            await self._forever()
            return ExitStatus.OK
        finally:
            await self.endpoints.close()
            self.log.event("stopped")

    def _say_what_is_served(self) -> None:
        names = [str(env) for env in self.watches]
        shard = {"shard": str(self.shard)} if self.shard is not None else {}
        if names:
            self.log.event("serving", f"{len(names)} environment(s)", environments=names, **shard)
        else:
            self.log.event("serving", "no environment falls to this shard", **shard)

    async def _once(self) -> int:
        if not self.many:
            return await self.watch.once()

        async def one(watch: Watch) -> int:
            try:
                return await watch.once()
            except ReconcileError as err:
                said = err
            except Exception as err:  # what no server sends, or a bug: its own failure
                said = ReconcileError(unforeseen(err))
            watch.link.failed(said, watch.said(said))
            watch.log.event("error", str(said))
            return 1

        codes = list(await asyncio.gather(*(one(w) for w in self.watches.values())))
        return ExitStatus.INTERRUPTED if ExitStatus.INTERRUPTED in codes else worst(codes)

    async def _forever(self) -> None:
        if not self.watches:
            await self.stop.wait()
            return
        try:
            await asyncio.gather(*(w.forever() for w in self.watches.values()))
        except BaseException:
            self.stop.set()  # a bug in one watch ends the others cleanly, not silently
            raise

    # -- what /status and /readyz say -----------------------------------------------------
    def not_ready(self) -> str | None:
        """Why the agent is not ready, or None. One target: its own readiness. Several
        environments: ready once every one was tried, none is refused, and one or more
        planned or every one's server is down. An environment whose server is down is
        the world's fault, not the agent's: a Kubernetes rollout must not stall on it,
        also on a shard whose only environment it is (``/status`` and
        ``reconcile_connected`` say which). One whose server answers and refuses us
        (credentials, TLS, a greeting no NATS server sends: ``link.refused``) is the
        configuration's fault, which a rollout brings (a Secret, a flag): 503, the
        rollout stops. Every environment reachable and none planning still is 503: that
        may be the agent's own fault (a release that cannot plan), and the rollout stops."""
        if not self.many:
            return self.watch.not_ready()
        reasons = {env: w.not_ready() for env, w in self.watches.items()}
        starting = [str(env) for env, w in self.watches.items() if not w.tried]
        if starting:
            return f"starting: {', '.join(starting)} not tried yet"
        refused = {env: w.link.error for env, w in self.watches.items() if w.link.refused}
        if refused:
            listed = "; ".join(f"{env}: {error}" for env, error in refused.items())
            return f"refused by the server or the settings: {listed}"
        if all(w.link.reachable is False for w in self.watches.values()):
            return None  # the world's fault (also true of no environment at all)
        if all(reason is not None for reason in reasons.values()):
            listed = "; ".join(f"{env}: {reason}" for env, reason in reasons.items())
            return f"no environment is ready: {listed}"
        return None

    def status(self, cycle: Callable[[Cycle], Any] = Cycle.to_json) -> dict[str, Any]:
        """The ``/status`` document (:class:`~reconciler.agent.endpoints.StatusBody`
        serves it); ``cycle``: what stands for each environment's last cycle."""
        if not self.many:
            return {"format_version": 1, **self.watch.status(cycle)}
        return {
            "format_version": 1,
            "mode": self.settings.mode,
            "shard": None if self.shard is None else str(self.shard),
            "ready": self.not_ready() is None,
            "environments": {str(env): w.status(cycle) for env, w in self.watches.items()},
            "not_served": self.not_served.to_json(),
        }


def _given(source: Source | None) -> Source:
    if source is None:
        raise TypeError("Agent needs a source, or environments (Agent.serving)")
    return source
