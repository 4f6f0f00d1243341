"""What the agent knows after a cycle: each resource's state, with who changed it.

A cycle's plan (and, in heal mode, the heal made under the lock) becomes one
:class:`ResourceStatus` per resource the plan lists:

- ``in_sync``: declared and live agree;
- ``drifted`` (fields differ) / ``missing`` (declared, not on the server): a heal may
  repair it (observe mode reports it; heal mode repairs it in the same cycle);
- ``healed``: the heal applied its step in this cycle;
- ``needs_person``: its repair is a replace, delete, migration or lossy update (or waits
  for one), which no heal applies; an orphan (prune) too;
- ``failed``: the heal's step failed (the error is in the log);
- ``unmanaged``: live, declared by no spec, not ours: listed, never drift.

Drift states carry the field paths that differ (never their values: no spec or secret
value leaves the agent), the advisory's :class:`~reconciler.agent.advisories.Cause`
when one named the resource, and for a stream deleted out of band what it held when the
previous cycle read it (``lost``). Pure: no clock, no network.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import Any, Literal

from reconciler.agent.advisories import Cause
from reconciler.execution.apply import ApplyResult
from reconciler.identity import ResourceRef
from reconciler.model.state import StreamState
from reconciler.planning.drift import resource_from_entry
from reconciler.planning.heal import HealSplit, NeedsPerson
from reconciler.planning.steps import Plan, Unchanged

State = Literal["in_sync", "drifted", "missing", "healed", "needs_person", "failed", "unmanaged"]
STATES: tuple[State, ...] = (
    "in_sync",
    "drifted",
    "missing",
    "healed",
    "needs_person",
    "failed",
    "unmanaged",
)
#: States that leave the server away from the specs (``--once`` exits 2).
DRIFT_STATES: frozenset[State] = frozenset({"drifted", "missing", "needs_person", "failed"})
_OF_DRIFT: Mapping[str, State] = {
    "in_sync": "in_sync",
    "drifted": "drifted",
    "missing": "missing",
    "orphaned": "needs_person",
    "unmanaged": "unmanaged",
}
ORPHAN_WHY = "no spec declares it any more: only `reconcile apply --prune` deletes it"
OBSERVED = "observed"  # the plan's note for a resource in lifecycle ``mode: observe``
OBSERVE_WHY = "lifecycle mode observe: reported, never written"

Key = tuple[str, str | None]


@dataclass(frozen=True)
class Lost:
    """What a stream held when the previous cycle read it (a stream deleted since)."""

    messages: int
    bytes: int
    read_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {"messages": self.messages, "bytes": self.bytes, "read_at": self.read_at}


@dataclass(frozen=True)
class ResourceStatus:
    ref: ResourceRef
    state: State
    fields: tuple[str, ...] = ()  # config paths that differ
    why: str | None = None  # needs_person / failed: why
    cause: Cause | None = None
    lost: Lost | None = None
    refusal: NeedsPerson | None = None  # needs_person: why, as a value

    @property
    def key(self) -> Key:
        """(stream, consumer): how advisories name it."""
        return (self.ref.stream_name, self.ref.name if self.ref.is_child else None)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.ref.kind,
            "name": self.ref.name,
            "stream": self.ref.stream,
            "state": self.state,
            "fields": list(self.fields),
            "why": self.why,
            "refusal": None if self.refusal is None else str(self.refusal),
            "cause": None if self.cause is None else self.cause.to_json(),
            "lost": None if self.lost is None else self.lost.to_json(),
        }


def key_of(ref: ResourceRef) -> Key:
    return (ref.stream_name, ref.name if ref.is_child else None)


@dataclass(frozen=True)
class Outcome:
    """What a heal did, by resource."""

    healed: frozenset[ResourceRef] = frozenset()
    failed: Mapping[ResourceRef, str] = field(default_factory=dict)


def outcome_of(result: ApplyResult | None) -> Outcome:
    if result is None:
        return Outcome()
    return Outcome(
        healed=frozenset(s.ref for s in result.applied),
        failed={s.ref: err for s, err in result.failed},
    )


def statuses(
    plan: Plan,
    split: HealSplit,
    *,
    outcome: Outcome = Outcome(),
    causes: Mapping[Key, Cause] = {},
    previous: Mapping[str, StreamState] = {},
) -> list[ResourceStatus]:
    """Each resource of ``plan`` with its state (foreign resources left out: another
    owner's). ``previous``: the streams' states the cycle before read (for ``lost``)."""
    refused = {r.step.ref: r for r in split.refused}
    touched = refused.keys() | outcome.healed | outcome.failed.keys()
    out: list[ResourceStatus] = []
    for entry in plan.entries:
        if type(entry) is Unchanged and entry.ref not in touched:  # most of them: in sync
            out.append(ResourceStatus(entry.ref, "in_sync"))
            continue
        drift = resource_from_entry(entry)
        if drift.status == "foreign":
            continue
        ref = entry.ref
        state: State = _OF_DRIFT.get(drift.status, "drifted")
        why = ORPHAN_WHY if drift.status == "orphaned" else None
        if str(entry.action) == OBSERVED:  # lifecycle mode observe: the plan never writes it
            state = "missing" if getattr(entry, "missing", False) else "drifted"
            why = "; ".join(entry.reasons) or OBSERVE_WHY
        if ref in outcome.failed:
            state, why = "failed", outcome.failed[ref]
        elif ref in outcome.healed:
            state = "healed"
        elif ref in refused:
            state, why = "needs_person", refused[ref].why
        changes = drift.fields or (entry.fields if str(entry.action) == OBSERVED else ())
        fields = tuple(change.path for change in changes)
        key = key_of(ref)
        lost = None
        if drift.status == "missing" and not ref.is_child and ref.stream_name in previous:
            held = previous[ref.stream_name]
            lost = Lost(held.messages, held.bytes, held.observed_at)
        cause = causes.get(key) if state not in ("in_sync", "unmanaged") else None
        kind = refused[ref].kind if state == "needs_person" and ref in refused else None
        out.append(ResourceStatus(ref, state, fields, why, cause, lost, kind))
    return out


def counts(resources: Iterable[ResourceStatus]) -> dict[State, int]:
    found = dict.fromkeys(STATES, 0)
    for resource in resources:
        found[resource.state] += 1
    return found


#: Resources by (state, kind): the ``reconcile_resources`` gauges.
Tally = Mapping[tuple[State, str], int]


class Resources:
    """The resources a cycle knows, grouped by stream (a stream and its consumers and
    entries; a bucket): a targeted cycle replaces only the groups of the streams it
    planned (:meth:`replaced`), in time proportional to them, never to the account (at
    101,000 resources re-sorting and recounting the whole list took longer than the
    targeted plan itself). Iterated in :attr:`ResourceRef.sort_key` order (sorted when
    first iterated: ``/status``, ``--once``)."""

    def __init__(
        self, groups: Mapping[str, tuple[ResourceStatus, ...]], tally: dict[tuple[State, str], int]
    ) -> None:
        self._groups = groups
        self._tally = tally

    @classmethod
    def of(cls, found: Iterable[ResourceStatus]) -> Resources:
        groups: dict[str, list[ResourceStatus]] = {}
        for r in found:
            groups.setdefault(r.ref.stream_name, []).append(r)
        frozen = {stream: tuple(group) for stream, group in groups.items()}
        return cls(frozen, dict(Counter((r.state, r.ref.kind) for r in found_all(frozen))))

    def replaced(self, streams: Iterable[str], found: Iterable[ResourceStatus]) -> Resources:
        """These resources: the groups of ``streams`` replaced by ``found`` (which names
        no other stream)."""
        groups = dict(self._groups)
        tally = dict(self._tally)
        for stream in streams:
            _count(tally, groups.pop(stream, ()), -1)
        fresh = Resources.of(found)
        for stream, group in fresh._groups.items():
            _count(tally, groups.pop(stream, ()), -1)  # (``found`` names only ``streams``)
            groups[stream] = group
        _count(tally, chain.from_iterable(fresh._groups.values()), 1)
        return Resources(groups, tally)

    def unordered(self) -> Iterator[ResourceStatus]:
        """Every resource, in no particular order (without sorting them)."""
        return found_all(self._groups)

    def of_streams(self, streams: Iterable[str]) -> Iterator[ResourceStatus]:
        """The resources of ``streams`` (in no particular order)."""
        for stream in streams:
            yield from self._groups.get(stream, ())

    @property
    def tally(self) -> Tally:
        return self._tally

    def counts(self) -> dict[State, int]:
        found = dict.fromkeys(STATES, 0)
        for (state, _), n in self._tally.items():
            found[state] += n
        return found

    @cached_property
    def _ordered(self) -> list[ResourceStatus]:
        return sorted(self.unordered(), key=lambda r: r.ref.sort_key)

    def __iter__(self) -> Iterator[ResourceStatus]:
        return iter(self._ordered)

    def __len__(self) -> int:
        return sum(self._tally.values())

    def __bool__(self) -> bool:
        return bool(self._groups)


def found_all(groups: Mapping[str, tuple[ResourceStatus, ...]]) -> Iterator[ResourceStatus]:
    return chain.from_iterable(groups.values())


def _count(tally: dict[tuple[State, str], int], found: Iterable[ResourceStatus], by: int) -> None:
    for r in found:
        key = (r.state, r.ref.kind)
        tally[key] = tally.get(key, 0) + by


NOTHING = Resources({}, {})
