"""What one environment's cycles found, told: a log line per cycle and per change of a
resource's state, the counters of those changes, and the last changes for ``/status``.

Pure bookkeeping over :class:`~reconciler.agent.status.ResourceStatus` lists: no network.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from reconciler.agent.listener import AdvisoryListener
from reconciler.agent.logs import Log
from reconciler.agent.metrics import EnvironmentMetrics
from reconciler.agent.status import NOTHING, Resources, ResourceStatus, State, key_of
from reconciler.identity import ResourceRef
from reconciler.model.timestamps import rfc3339

RECENT_CHANGES = 100

_SAYS: dict[State, str] = {
    "in_sync": "is in sync again",
    "drifted": "has drifted",
    "missing": "is missing",
    "healed": "was healed",
    "needs_person": "needs a person",
    "failed": "could not be healed",
    "unmanaged": "is unmanaged",
}


class Report:
    def __init__(self, log: Log, metrics: EnvironmentMetrics, listener: AdvisoryListener) -> None:
        self.log = log
        self.metrics = metrics
        self.listener = listener
        self.known: dict[ResourceRef, State] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_CHANGES)

    def record(
        self,
        resources: Resources,
        commit: str | None,
        *,
        streams: frozenset[str] | None = None,
        before: Resources = NOTHING,
        heard: int,
    ) -> None:
        """Log and count each change of state; forget the causes, come before the cycle
        began (``heard``: the listener's count of causes then), of the resources it found
        in sync and of those it looked at and did not find (a spec declaring one later is
        a commit's doing, not its deleter's). ``streams``: a targeted cycle's, the only
        ones it looked at (``before``: the resources it replaced): only theirs are
        compared."""
        first = not self.known
        looked = resources.unordered() if streams is None else resources.of_streams(streams)
        seen: dict[ResourceRef, State] = {}
        causes = self.listener.causes
        for r in looked:
            seen[r.ref] = r.state
            before_state = self.known.get(r.ref)
            if causes and r.state in ("in_sync", "unmanaged"):
                self.listener.forget(r.key, heard)  # a change undone, or one changing nothing
            if r.state == before_state and r.state not in ("healed",):
                continue
            if r.state in ("in_sync", "unmanaged") and (
                before_state is None or r.state == "unmanaged"
            ):
                continue
            if r.state != "in_sync" and before_state in (None, "in_sync", "healed"):
                cause = (
                    "api"
                    if r.cause
                    else ("commit" if before_state is None and not first else "unknown")
                )
                self.metrics.drift_events.labels(cause).inc()
            if r.state == "healed":
                self.metrics.heals.labels(r.ref.kind).inc()
            if r.state == "needs_person" and before_state != "needs_person":
                self.metrics.refused.labels(action_of(r)).inc()
            self._change(r, before_state, commit)
        if causes:  # a resource it looked for and did not find (deleted, never declared)
            found = {key_of(ref) for ref in seen}
            for key in [
                k for k in causes if k not in found and (streams is None or k[0] in streams)
            ]:
                self.listener.forget(key, heard)
        if streams is None:
            self.known = seen
        else:
            for gone in before.of_streams(streams):
                self.known.pop(gone.ref, None)
            self.known.update(seen)
        self.metrics.set_resources(resources.tally)

    def _change(self, r: ResourceStatus, before: State | None, commit: str | None) -> None:
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
        message = sentence(r)
        self.recent.append({"time": rfc3339(time.time()), "message": message, **record})
        self.log.event("change", message, **record)

    def cycle(
        self, trigger: str, commit: str | None, resources: Resources, error: str | None
    ) -> None:
        found = {state: n for state, n in resources.counts().items() if n}
        if error is not None:
            self.log.event("cycle", "cycle failed", trigger=trigger, commit=commit, error=error)
        else:
            self.log.event("cycle", "", trigger=trigger, commit=commit, **found)


def action_of(resource: ResourceStatus) -> str:
    """The ``action`` label of a step a heal left to a person: its refusal's kind
    (``planning.heal.NeedsPerson``), never read from the English text of ``why``."""
    return str(resource.refusal) if resource.refusal is not None else "other"


def sentence(r: ResourceStatus) -> str:
    parts = [f"{r.ref.label} {_SAYS[r.state]}"]
    if r.cause is not None:
        verb = {"create": "created", "update": "changed", "delete": "deleted"}
        parts.append(f"{verb[r.cause.operation]} by {r.cause.describe()}")
    if r.lost is not None:
        parts.append(f"it held {r.lost.messages} message(s) when last read")
    return "; ".join(parts)
