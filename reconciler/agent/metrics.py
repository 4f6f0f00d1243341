"""The agent's Prometheus metrics (prometheus-client), on a registry of its own.

Every label has a small closed set of values: ``state`` (:data:`~reconciler.agent.status.STATES`),
``kind`` (the five resource kinds), ``cause`` (``api``: an advisory named who did it;
``unknown``: found by a plan, nobody named; ``commit``: a resource the specs declare
anew), ``type`` (four advisory types), ``outcome`` (``ok``/``error``), ``scope``
(``full``/``targeted``). No resource,
client or user name and no spec value is ever a label: they are in ``/status`` and the log.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reconciler.agent.status import STATES, ResourceStatus
from reconciler.identity import KINDS

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    """One registry per agent; :meth:`text` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.resources = Gauge(
            "reconcile_resources", "Resources by state and kind.", ["state", "kind"], registry=r
        )
        self.last_success = Gauge(
            "reconcile_last_successful_plan_timestamp_seconds",
            "When the last plan succeeded (Unix time).",
            registry=r,
        )
        self.drift_events = Counter(
            "reconcile_drift_events",
            "Resources found away from the specs, by cause.",
            ["cause"],
            registry=r,
        )
        self.heals = Counter(
            "reconcile_heals_applied", "Steps a heal applied, by kind.", ["kind"], registry=r
        )
        self.refused = Counter(
            "reconcile_steps_refused",
            "Steps a heal left to a person (counted when first refused), by action.",
            ["action"],
            registry=r,
        )
        self.plan_seconds = Histogram(
            "reconcile_plan_duration_seconds",
            "Plan time: full (the whole account), targeted (the streams an advisory named).",
            ["scope"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.apply_seconds = Histogram(
            "reconcile_apply_duration_seconds",
            "Heal time (lock, re-plan and steps).",
            buckets=_BUCKETS,
            registry=r,
        )
        self.advisories = Counter(
            "reconcile_advisories", "Advisories received, by type.", ["type"], registry=r
        )
        self.cycles = Counter("reconcile_cycles", "Cycles, by outcome.", ["outcome"], registry=r)
        self.git_head_age = Gauge(
            "reconcile_git_head_age_seconds",
            "Age of the planned commit (its committer time); 0 without --git.",
            registry=r,
        )
        self.connected = Gauge(
            "reconcile_connected", "1 while connected to the server.", registry=r
        )
        self.advisories_subscribed = Gauge(
            "reconcile_advisories_subscribed",
            "1 while advisories arrive; 0: polling at --interval only.",
            registry=r,
        )
        for state in STATES:
            for kind in KINDS:
                self.resources.labels(state, kind).set(0)
        for cause in ("api", "unknown", "commit"):
            self.drift_events.labels(cause)
        for outcome in ("ok", "error"):
            self.cycles.labels(outcome)

    def set_resources(self, resources: Iterable[ResourceStatus]) -> None:
        found = {(state, kind): 0 for state in STATES for kind in KINDS}
        for resource in resources:
            found[(resource.state, resource.ref.kind)] += 1
        for (state, kind), n in found.items():
            self.resources.labels(state, kind).set(n)

    def text(self) -> bytes:
        return generate_latest(self.registry)
