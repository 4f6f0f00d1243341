"""Resources healed again and again: held back for a while, the hold doubling.

Another writer may keep changing what the agent heals: a second agent (or environment)
with other specs on the same account, an application setting its own config, a cron job.
Each heal then undoes the other's change, and the two fight for as long as both run (a
probe of two environments on one account as two users: 111 heals in 10 s). After
:data:`LIMIT` heals of one resource within :data:`WINDOW` seconds it is held back for
:data:`FIRST_HOLD` seconds: its steps are refused as ``needs_person`` (``contested``),
naming why and until when. A heal after the hold that finds it changed again holds it
twice as long (at most :data:`MAX_HOLD`); a resource not healed for :data:`WINDOW`
seconds starts afresh. A heal toward another declared config than the last one's (a
commit, an edited file) is a person's decision, not a fight: it starts afresh too, and a
hold ends as soon as the resource is declared otherwise (:meth:`Flapping.declared`). What
a heal may apply is still decided by the plan (``planning.heal.split_for_heal``); this
only delays it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.identity import ResourceRef
from reconciler.model.timestamps import rfc3339
from reconciler.specs.spec import Spec

#: Heals of one resource within :data:`WINDOW` seconds that hold it back.
LIMIT = 5
WINDOW = 600.0
FIRST_HOLD = 60.0
MAX_HOLD = 3600.0


@dataclass
class _Heals:
    at: deque[float] = field(default_factory=deque)  # (monotonic) within the window
    hold: float = 0.0  # the last hold's length (0: never held)
    until: float = 0.0  # monotonic end of the hold
    until_wall: float = 0.0  # the same, as the wall clock says it (for the reason)
    due: bool = False  # held, and not planned again since the hold ended
    #: the declared config the heals applied (another one: a person decided again)
    declared: Mapping[str, Any] | None = None


class Flapping:
    """One environment's recent heals, per resource."""

    def __init__(self) -> None:
        self._heals: dict[ResourceRef, _Heals] = {}

    def healed(
        self, refs: Iterable[ResourceRef], specs: Iterable[Spec], now: float, wall: float
    ) -> None:
        """``refs`` were healed at ``now`` (monotonic; ``wall``: the same instant) toward
        what ``specs`` (the plan's) declare. A heal toward another declared config than the
        last one's starts afresh: the spec changed, nobody fought."""
        healed = set(refs)
        if not healed:
            return
        names = {ref.name for ref in healed}  # a str's hash is kept: 101,000 specs in ms
        for spec in specs:
            if spec.name not in names or spec.ref not in healed:
                continue
            heals = self._heals.get(spec.ref)
            if heals is None or heals.declared != spec.config:
                heals = self._heals[spec.ref] = _Heals(declared=spec.config)
            _forget_before(heals, now - WINDOW)
            heals.at.append(now)
            if len(heals.at) >= LIMIT:
                heals.hold = min(MAX_HOLD, heals.hold * 2 or FIRST_HOLD)
                heals.until, heals.until_wall = now + heals.hold, wall + heals.hold
                heals.due = True

    def declared(self, specs: Iterable[Spec]) -> None:
        """Forget the heals (and the hold) of each resource ``specs`` declare otherwise
        than its heals applied: a commit or an edited file is a person's decision, applied
        at once, never held back as a fight."""
        names = {ref.name for ref in self._heals}
        if not names:
            return
        for spec in specs:
            if spec.name not in names:
                continue
            heals = self._heals.get(spec.ref)
            if heals is not None and heals.declared != spec.config:
                del self._heals[spec.ref]

    def held(self, now: float) -> dict[ResourceRef, str]:
        """The resources held back at ``now``, each with why (and forget those left
        alone for :data:`WINDOW` seconds)."""
        found: dict[ResourceRef, str] = {}
        for ref, heals in list(self._heals.items()):
            _forget_before(heals, now - WINDOW)
            if heals.until > now:
                found[ref] = (
                    f"healed {len(heals.at)} times in {WINDOW / 60:g} min: another writer "
                    "keeps changing it (an agent or environment with other specs on this "
                    "account, an application); not healed again before "
                    f"{rfc3339(heals.until_wall)}"
                )
            elif not heals.at:
                del self._heals[ref]
        return found

    def next_due(self) -> float | None:
        """When the first hold not planned again since ends (monotonic), or None."""
        return min((h.until for h in self._heals.values() if h.due), default=None)

    def due(self, now: float) -> list[ResourceRef]:
        """The resources whose hold has ended by ``now``, once each: the agent plans them
        again then, not an interval later."""
        ended = [ref for ref, h in self._heals.items() if h.due and h.until <= now]
        for ref in ended:
            self._heals[ref].due = False
        return ended


def _forget_before(heals: _Heals, since: float) -> None:
    while heals.at and heals.at[0] < since:
        heals.at.popleft()
