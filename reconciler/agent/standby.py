"""Each standby pair's health, read beside the cycles (docs/dr.md#2-watch-each-pairs-health).

A full cycle hands the specs it planned to :meth:`PairReads.start` and goes on: the pairs
are read in a task of their own, each side on a connection of its own within a deadline
of its own (that environment's connect timeout plus its request timeout: a side that has
not answered by then is unread). A standby whose server hangs (it takes the TCP
connection and never answers, or answers slowly) costs that task its deadline, never the
primary's plan, heal or report: each full cycle waited for it, up to the connect timeout.
One read at a time: a full cycle that finds one under way starts none.

What the last read found stays shown (the ``reconcile_standby_*`` gauges, ``/status``'s
``standby``) with when it was read (``reconcile_standby_read_timestamp_seconds``,
``read_at``). Unread for longer than :attr:`PairReads.stale_after`
(twice the interval plus the deadline: no full cycle read it meanwhile, the
environment's plans failing or its server down) each pair is shown unread (lag -1, not
healthy), said once in the log. Never a failover.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from reconciler.agent.logs import Log
from reconciler.agent.metrics import EnvironmentMetrics
from reconciler.errors import ReconcileError, unforeseen
from reconciler.execution.pair_reads import SidedHealth, pairs_health
from reconciler.execution.requests import PlanRequest
from reconciler.model.standby import PairHealth
from reconciler.model.timestamps import rfc3339
from reconciler.specs.spec import Spec


class PairReads:
    """One environment's standby pairs: the read under way, and what the last one found."""

    def __init__(self, log: Log, metrics: EnvironmentMetrics, interval: float) -> None:
        self.log = log
        self.metrics = metrics
        self.interval = interval
        self.pairs: list[SidedHealth] = []  # what the last read found (or stale: unread)
        self.read_at: float | None = None  # when (Unix time)
        self.stale = False
        self.deadline = 0.0  # the last read's, for each side
        self._task: asyncio.Task[None] | None = None
        self._since: float | None = None  # the read under way began (Unix time)

    @property
    def reading(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def stale_after(self) -> float:
        """Seconds since the last read past which each pair is shown unread."""
        return 2 * self.interval + self.deadline

    def start(self, request: PlanRequest, specs: Sequence[Spec]) -> None:
        """Read the pairs of ``specs`` this environment is a side of, in a task of its
        own (none when one is under way); returns at once."""
        project, env = request.project, request.env
        if project is None or env is None or self.reading:
            return
        options = request.options
        self.deadline = options.connect_timeout + options.timeout
        self._since = time.time()
        # the read's coroutine is made in the task: a task cancelled before it starts (the
        # agent stopping at once) then leaves no coroutine never awaited (a warning at exit)
        read = functools.partial(
            pairs_health, project, env, specs, options, request.owner, deadline=self.deadline
        )
        self._task = asyncio.ensure_future(self._read(read))

    async def _read(self, read: Callable[[], Awaitable[list[SidedHealth]]]) -> None:
        try:
            found = await read()
        except ReconcileError as err:
            self.log.event("standby", f"pair health not read: {err}")
            return
        except Exception as err:  # a bug: this read's failure, never the cycles'
            self.log.event("standby", f"pair health not read: {unforeseen(err)}")
            return
        finally:
            self._since = None
        self.pairs, self.read_at, self.stale = found, time.time(), False
        self.metrics.set_standby((pair.health for pair in found), read_at=self.read_at)
        for pair in found:
            if not pair.health.healthy:
                self.log.event("standby", pair.line(), stream=pair.health.stream)

    def expire(self) -> None:
        """Each pair shown unread once its last read is older than :attr:`stale_after`."""
        if self.stale or not self.pairs or self.read_at is None:
            return
        age = time.time() - self.read_at
        if age <= self.stale_after:
            return
        self.stale = True
        why = f"not read for {age:.0f}s (last read at {rfc3339(self.read_at)})"
        self.pairs = [
            SidedHealth(
                p.primary,
                p.standby,
                PairHealth(p.health.stream, None, None, None, None, why, (why,)),
            )
            for p in self.pairs
        ]
        self.metrics.set_standby((pair.health for pair in self.pairs), read_at=self.read_at)
        self.log.event("standby", f"pair health {why}: shown unread")

    async def settled(self) -> None:
        """Until the read under way (if any) has ended (``--once``: its lines logged)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Cancel the read under way (the agent stops: never waited for)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def to_json(self) -> dict[str, Any]:
        """``/status``'s ``standby``: the pairs as last read, when, and a read under way."""
        self.expire()  # the same bytes while nothing changed: no age, its read_at
        return {
            "read_at": rfc3339(self.read_at) if self.read_at is not None else None,
            "stale": self.stale,
            "reading_since": rfc3339(self._since) if self._since is not None else None,
            "pairs": [
                {"primary": p.primary, "standby": p.standby, **p.health.to_json()}
                for p in self.pairs
            ],
        }
