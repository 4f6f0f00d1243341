"""Resources healed again and again: held back for a while, the hold doubling.

Another writer may keep changing what the agent heals: a second agent (or environment)
with other specs on the same account, an application setting its own config, a cron job.
Each heal then undoes the other's change, and the two fight for as long as both run (a
probe of two environments on one account as two users: 111 heals in 10 s). After
:data:`LIMIT` heals of one resource within :data:`WINDOW` seconds it is held back for
:data:`FIRST_HOLD` seconds: its steps are refused as ``needs_person`` (``contested``),
naming why and until when. A heal after the hold that finds it changed again holds it
twice as long (at most :data:`MAX_HOLD`); a resource not healed for :data:`WINDOW`
seconds starts afresh. What a heal may apply is still decided by the plan
(``planning.heal.split_for_heal``); this only delays it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from reconciler.identity import ResourceRef
from reconciler.model.timestamps import rfc3339

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


class Flapping:
    """One environment's recent heals, per resource."""

    def __init__(self) -> None:
        self._heals: dict[ResourceRef, _Heals] = {}

    def healed(self, refs: Iterable[ResourceRef], now: float, wall: float) -> None:
        """``refs`` were healed at ``now`` (monotonic; ``wall``: the same instant)."""
        for ref in refs:
            heals = self._heals.setdefault(ref, _Heals())
            _forget_before(heals, now - WINDOW)
            heals.at.append(now)
            if len(heals.at) >= LIMIT:
                heals.hold = min(MAX_HOLD, heals.hold * 2 or FIRST_HOLD)
                heals.until, heals.until_wall = now + heals.hold, wall + heals.hold
                heals.due = True

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
