"""One environment's advisories: what they named since the last cycle, and who did it.

:class:`AdvisoryListener` subscribes to :data:`~reconciler.agent.advisories.SUBJECTS` on
the environment's connection, keeps the streams and consumers advisories named since the
last cycle (at most :data:`MAX_PENDING` + 1: one more means "a full plan") and the last
cause per resource (at most :data:`MAX_CAUSES`), and wakes the cycle loop. What an
advisory says decides what to re-plan and whom to name, never what to change.
"""

from __future__ import annotations

import asyncio

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


class AdvisoryListener:
    """Advisories of one connection at a time (:meth:`subscribe` on each new one)."""

    def __init__(self, log: Log, metrics: EnvironmentMetrics, *, enabled: bool = True) -> None:
        self.log = log
        self.metrics = metrics
        self.enabled = enabled
        self.wake = asyncio.Event()
        self.pending: set[Key] = set()
        self.causes: dict[Key, Cause] = {}
        #: resources a stream or consumer event named whose API audit (who did it) has
        #: not come yet: the server sends the event first, the audit right after
        self.unaudited: set[Key] = set()
        #: set when an audit comes (the cycle loop waits on it for :attr:`unaudited`)
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
        self.unaudited.clear()
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
            self.unaudited.discard(touch.key)
            self.audited.set()
        elif self.audits and len(self.unaudited) <= MAX_PENDING:
            self.unaudited.add(touch.key)
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
        self.unaudited.clear()  # an audit coming later wakes the next cycle
        return named

    def forget(self, key: Key) -> None:
        """A resource back in sync: its cause is no longer news."""
        self.causes.pop(key, None)

    def _own(self, touch: Touch) -> bool:
        """The agent's own change (a heal): already known."""
        return touch.origin is not None and touch.origin == self.identity

    def _remember(self, touch: Touch) -> None:
        assert touch.cause is not None
        self.causes.pop(touch.key, None)
        self.causes[touch.key] = touch.cause
        while len(self.causes) > MAX_CAUSES:
            self.causes.pop(next(iter(self.causes)))
