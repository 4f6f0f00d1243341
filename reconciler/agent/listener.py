"""One environment's advisories: what they named since the last cycle, and who did it.

:class:`AdvisoryListener` subscribes to :data:`~reconciler.agent.advisories.SUBJECTS` on
the environment's connection, keeps the streams and consumers advisories named since the
last cycle (at most :data:`MAX_PENDING` + 1: one more means "a full plan") and the last
cause per resource (at most :data:`MAX_CAUSES`), and wakes the cycle loop. What an
advisory says decides what to re-plan and whom to name, never what to change.
"""

from __future__ import annotations

import asyncio
import time

from reconciler.agent import advisories
from reconciler.agent.advisories import Cause, Touch
from reconciler.agent.logs import Log
from reconciler.agent.metrics import EnvironmentMetrics
from reconciler.agent.status import Key
from reconciler.jetstream import JetStreamClient

#: Causes remembered at most (advisories may name resources nobody declares).
MAX_CAUSES = 10_000
#: Resources an advisory cycle re-plans one by one at most: past this many named since
#: the last cycle (a burst, or a client forging advisories), the cycle is a full plan.
MAX_PENDING = 1_000
#: Seconds an event waits for its audit to count as awaited (the two come together).
AUDIT_AGE = 2.0


class AdvisoryListener:
    """Advisories of one connection at a time (:meth:`subscribe` on each new one)."""

    def __init__(self, log: Log, metrics: EnvironmentMetrics, *, enabled: bool = True) -> None:
        self.log = log
        self.metrics = metrics
        self.enabled = enabled
        self.wake = asyncio.Event()
        self.pending: set[Key] = set()
        self.causes: dict[Key, Cause] = {}
        #: audits remembered so far, and the count when each resource's cause came: a
        #: cycle forgets only causes older than its read (:meth:`forget`)
        self.heard = 0
        self._heard_at: dict[Key, int] = {}
        #: per resource named, its events less its API audits (who did it), and when the
        #: last came: the server sends an event and its audit at once, in either order
        #: (:meth:`awaiting`)
        self._balance: dict[Key, tuple[int, float]] = {}
        #: set when an audit comes (the cycle loop waits on it for :meth:`awaiting`)
        self.audited = asyncio.Event()
        #: whether API audits reach this connection (subscribed and not denied)
        self.audits = False
        self.state = "not subscribed yet"
        #: the agent's own client on the server (``JetStreamClient.identity``): its heals
        #: are not drift
        self.identity: tuple[str, int | None] | None = None

    async def subscribe(self, client: JetStreamClient, interval: float) -> None:
        self.identity = client.identity
        self.audits = False
        self._balance.clear()
        if not self.enabled:
            self.state = "off (--no-advisories): polling every interval"
            return
        for subject in advisories.SUBJECTS:
            await client.subscribe(subject, self.on_advisory)
        await asyncio.sleep(0.05)  # a refusal comes back as an async error
        denied = sorted(client.denied_subscriptions)
        self.audits = advisories.SUBJECTS[0] not in denied
        if denied:
            self.state = f"denied ({', '.join(denied)}): polling every interval"
            self.log.event(
                "notice",
                "this account may not subscribe to JetStream advisories: no attribution, "
                f"changes are found by the plan every {interval:g}s",
                denied=denied,
            )
            self.metrics.advisories_subscribed.set(0)
        else:
            self.state = "subscribed"
            self.metrics.advisories_subscribed.set(1)

    def disconnected(self) -> None:
        self.identity = None
        self.metrics.advisories_subscribed.set(0)

    def on_advisory(self, subject: str, data: bytes) -> None:
        self.metrics.advisories.labels(advisories.advisory_type(subject)).inc()
        touch = advisories.parse(subject, data)
        if touch is None:
            return
        if touch.cause is not None:  # an audit, the agent's own heals' included
            self._count(touch.key, -1)
            self.audited.set()
        elif self.audits:
            self._count(touch.key, 1)
        if self._own(touch):
            return
        if touch.cause is not None:
            self._remember(touch)
        if len(self.pending) <= MAX_PENDING:  # one more means "too many": a full plan
            self.pending.add(touch.key)
        self.wake.set()

    def targets(self) -> frozenset[str] | None:
        """The streams named since the last cycle (None: too many, plan them all), and
        forget them: the cycle that asks plans them."""
        named = None if len(self.pending) > MAX_PENDING else frozenset(s for s, _ in self.pending)
        self.pending.clear()
        return named

    def awaiting(self) -> set[Key]:
        """The resources named by an event in the last :data:`AUDIT_AGE` seconds whose
        audit has not come yet. An event without an audit (the server deleting an idle
        consumer) stops counting then; an audit without an event (a purge, a consumer
        update) only makes the balance negative."""
        stale = time.monotonic() - AUDIT_AGE
        for key in [k for k, (_, at) in self._balance.items() if at < stale]:
            del self._balance[key]
        return {key for key, (n, _) in self._balance.items() if n > 0}

    def _count(self, key: Key, step: int) -> None:
        n = self._balance.get(key, (0, 0.0))[0] + step
        if n == 0:
            self._balance.pop(key, None)
        elif key in self._balance or len(self._balance) <= MAX_PENDING:
            self._balance[key] = (n, time.monotonic())

    def forget(self, key: Key, heard: int) -> None:
        """A resource back in sync in a cycle that began when :attr:`heard` was
        ``heard``: its cause is no longer news, unless it came after that cycle began
        reading (a change its plan did not see yet, healed by the next cycle, which
        names who made it)."""
        if self._heard_at.get(key, 0) <= heard:
            self.causes.pop(key, None)
            self._heard_at.pop(key, None)

    def _own(self, touch: Touch) -> bool:
        """The agent's own change (a heal): already known."""
        return touch.origin is not None and touch.origin == self.identity

    def _remember(self, touch: Touch) -> None:
        assert touch.cause is not None
        self.heard += 1
        self.causes.pop(touch.key, None)
        self.causes[touch.key] = touch.cause
        self._heard_at[touch.key] = self.heard
        while len(self.causes) > MAX_CAUSES:
            oldest = next(iter(self.causes))
            self.causes.pop(oldest)
            self._heard_at.pop(oldest, None)
