"""The agent's Prometheus metrics (prometheus-client), on one registry per process.

Every label has a small closed set of values: ``state`` (:data:`~reconciler.agent.status.STATES`),
``kind`` (the five resource kinds), ``cause`` (``api``: an advisory named who did it;
``unknown``: found by a plan, nobody named; ``commit``: a resource the specs declare
anew), ``type`` (four advisory types), ``outcome`` (``ok``/``error``), ``scope``
(``full``/``targeted``). An agent serving several environments of a project (``--all-envs``,
``--env`` given more than once, ``--shard``) labels every series with ``env`` too (the
project file's environment names: a set the repository fixes); one serving a single
target has no ``env`` label, as before; ``reconcile_environment_not_served`` is one
series per environment the project file names for it that it does not serve (added
since it started: served after a restart). The ``reconcile_standby_*`` gauges carry
``stream``: a stream whose spec declares a standby (a set the repository bounds;
docs/dr.md#2-watch-each-pairs-health). No resource, client or user name and no spec
value is ever a label: they are in ``/status`` and the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reconciler.agent.status import STATES, Tally
from reconciler.identity import KINDS
from reconciler.model.standby import PairHealth

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    """One registry per process; :meth:`text` is the ``/metrics`` body, :meth:`of` the
    series of one environment. ``by_env``: every series carries an ``env`` label."""

    def __init__(self, *, by_env: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.by_env = by_env
        r, env = self.registry, ["env"] if by_env else []
        self.resources = Gauge(
            "reconcile_resources",
            "Resources by state and kind.",
            [*env, "state", "kind"],
            registry=r,
        )
        self.last_success = Gauge(
            "reconcile_last_successful_plan_timestamp_seconds",
            "When the last plan succeeded (Unix time).",
            env,
            registry=r,
        )
        self.drift_events = Counter(
            "reconcile_drift_events",
            "Resources found away from the specs, by cause.",
            [*env, "cause"],
            registry=r,
        )
        self.heals = Counter(
            "reconcile_heals_applied", "Steps a heal applied, by kind.", [*env, "kind"], registry=r
        )
        self.refused = Counter(
            "reconcile_steps_refused",
            "Steps a heal left to a person (counted when first refused), by action.",
            [*env, "action"],
            registry=r,
        )
        self.plan_seconds = Histogram(
            "reconcile_plan_duration_seconds",
            "Plan time: full (the whole account), targeted (the streams an advisory named).",
            [*env, "scope"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.apply_seconds = Histogram(
            "reconcile_apply_duration_seconds",
            "Heal time (lock, re-plan and steps).",
            env,
            buckets=_BUCKETS,
            registry=r,
        )
        self.advisories = Counter(
            "reconcile_advisories", "Advisories received, by type.", [*env, "type"], registry=r
        )
        self.cycles = Counter(
            "reconcile_cycles", "Cycles, by outcome.", [*env, "outcome"], registry=r
        )
        self.git_head_age = Gauge(
            "reconcile_git_head_age_seconds",
            "Age of the planned commit (its committer time); 0 without --git.",
            env,
            registry=r,
        )
        self.connected = Gauge(
            "reconcile_connected", "1 while connected to the server.", env, registry=r
        )
        self.connection_refused = Gauge(
            "reconcile_connection_refused",
            "1 while the server answers and refuses the connection (credentials, TLS, a "
            "greeting no NATS server sends) or the settings cannot make one; 0 otherwise "
            "(connected, or the server down).",
            env,
            registry=r,
        )
        self.not_served = Gauge(
            "reconcile_environment_not_served",
            "1 for each environment the project file names for this agent (its shard's "
            "share) that it does not serve: added since it started; restart it to serve it.",
            ["env"],  # one target: no series (it has no list to add to)
            registry=r,
        )
        self._not_served: set[str] = set()
        self.advisories_subscribed = Gauge(
            "reconcile_advisories_subscribed",
            "1 while advisories arrive; 0: polling at --interval only.",
            env,
            registry=r,
        )

        self.standby_lag = Gauge(
            "reconcile_standby_lag_messages",
            "Each standby pair's lag: the origin's last sequence minus the mirror's, each "
            "read on its own server (-1: a side could not be read).",
            [*env, "stream"],
            registry=r,
        )
        self.standby_seen = Gauge(
            "reconcile_standby_seconds_since_active",
            "Seconds since each mirror last heard from its origin (-1: no contact).",
            [*env, "stream"],
            registry=r,
        )
        self.standby_healthy = Gauge(
            "reconcile_standby_healthy",
            "1 while the standby pair is healthy (docs/dr.md#2-watch-each-pairs-health), else 0.",
            [*env, "stream"],
            registry=r,
        )
        self.standby_read = Gauge(
            "reconcile_standby_read_timestamp_seconds",
            "When the standby pair's health shown was read (Unix time; read beside the "
            "cycles, each side within its own deadline).",
            [*env, "stream"],
            registry=r,
        )

    def set_not_served(self, envs: Iterable[str]) -> None:
        """The ``reconcile_environment_not_served`` series: exactly ``envs`` (several
        environments only: one target has no list to add to)."""
        if not self.by_env:
            return
        wanted = set(envs)
        for env in self._not_served - wanted:
            self.not_served.remove(env)
        for env in wanted:
            self.not_served.labels(env).set(1)
        self._not_served = wanted

    def of(self, env: str | None) -> EnvironmentMetrics:
        """The series of environment ``env`` (None: the only target, no ``env`` label)."""
        return EnvironmentMetrics(self, env if self.by_env else None)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _Bound:
    """A labelled family with the ``env`` label filled in."""

    def __init__(self, family: Any, env: str) -> None:
        self._family = family
        self._env = env

    def labels(self, *values: str) -> Any:
        return self._family.labels(self._env, *values)


class EnvironmentMetrics:
    """One environment's series, with the same names as :class:`Metrics`' families: a
    labelled family answers ``labels(...)`` (``env`` filled in), an unlabelled one is the
    series itself (``set``, ``observe``)."""

    def __init__(self, metrics: Metrics, env: str | None) -> None:
        self.registry = metrics.registry

        def family(metric: Any) -> Any:
            return metric if env is None else _Bound(metric, env)

        def series(metric: Any) -> Any:
            return metric if env is None else metric.labels(env)

        self.resources = family(metrics.resources)
        self.drift_events = family(metrics.drift_events)
        self.heals = family(metrics.heals)
        self.refused = family(metrics.refused)
        self.plan_seconds = family(metrics.plan_seconds)
        self.advisories = family(metrics.advisories)
        self.cycles = family(metrics.cycles)
        self.last_success = series(metrics.last_success)
        self.apply_seconds = series(metrics.apply_seconds)
        self.git_head_age = series(metrics.git_head_age)
        self.connected = series(metrics.connected)
        self.connection_refused = series(metrics.connection_refused)
        self.advisories_subscribed = series(metrics.advisories_subscribed)
        self._env = env
        self._standby = (
            metrics.standby_lag,
            metrics.standby_seen,
            metrics.standby_healthy,
            metrics.standby_read,
        )
        self._standby_streams: set[str] = set()
        for state in STATES:
            for kind in KINDS:
                self.resources.labels(state, kind).set(0)
        for cause in ("api", "unknown", "commit"):
            self.drift_events.labels(cause)
        for outcome in ("ok", "error"):
            self.cycles.labels(outcome)

    def set_standby(self, pairs: Iterable[PairHealth], *, read_at: float) -> None:
        """The standby gauges for exactly these pairs, read at ``read_at`` (Unix time; a
        pair no longer declared goes)."""
        lag, seen, healthy, read = self._standby
        env = () if self._env is None else (self._env,)
        found = list(pairs)
        for stream in self._standby_streams - {pair.stream for pair in found}:
            for gauge in self._standby:
                gauge.remove(*env, stream)
        for pair in found:
            lag.labels(*env, pair.stream).set(-1 if pair.lag is None else pair.lag)
            since = pair.active_seconds
            seen.labels(*env, pair.stream).set(-1.0 if since is None else since)
            healthy.labels(*env, pair.stream).set(1 if pair.healthy else 0)
            read.labels(*env, pair.stream).set(read_at)
        self._standby_streams = {pair.stream for pair in found}

    def set_resources(self, tally: Tally) -> None:
        """The ``reconcile_resources`` gauges: resources by (state, kind)."""
        found: dict[tuple[str, str], int] = {(s, k): 0 for s in STATES for k in KINDS}
        for key, n in tally.items():
            found[key] = n
        for (state, kind), n in found.items():
            self.resources.labels(state, kind).set(n)
