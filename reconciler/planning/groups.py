"""What the planner plans one stream at a time: a :class:`StreamGroup` in (the declared
stream and consumers, the live ones), a :class:`StreamPlan` out (its entries and what
stops it). The planner (:mod:`reconciler.planning.plan`), the lifecycle rules
(:mod:`reconciler.planning.lifecycles`) and the fleet's workers share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.door_words import Allowance, say
from reconciler.errors import Problem
from reconciler.model.state import StreamState
from reconciler.model.values import written_as
from reconciler.planning.steps import (
    Foreign,
    Observed,
    Orphan,
    PlanEntry,
    Step,
    Unchanged,
    Unmanaged,
)
from reconciler.specs.spec import Spec

__all__ = [
    "LiveConfig",
    "StreamGroup",
    "StreamPlan",
    "identity",
    "migrate_hint",
    "migrating",
]

LiveConfig = Mapping[str, Any]


def migrating() -> str:
    """The run that migrates a stream's messages, in the words of the run's door
    (``apply --migrate``, ``migrate=True``), else the CLI's command."""
    return say(Allowance.MIGRATE_RUN) or "`reconcile apply --migrate`"


def choose_with() -> str:
    """How the run's door chooses the way out of an interrupted migration: its own
    words, else the CLI's command (a door without the choice)."""
    return say(Allowance.MIGRATION) or "`reconcile apply --migrate --migration`"


def migrate_hint() -> str:
    """The reason a replace gives when a migration would keep its messages instead (the
    lifecycle rules take it out again, said in the same door's words)."""
    return f"{migrating()} keeps its messages"


@dataclass(frozen=True)
class StreamGroup:
    """One JetStream stream as the planner sees it: what is declared, what is live."""

    name: str
    declared: Spec | None = None  # the stream or bucket spec (maybe external)
    consumers: tuple[Spec, ...] = ()  # the declared consumers of this stream
    live: LiveConfig | None = None  # the live stream config, verbatim
    live_consumers: Mapping[str, LiveConfig] = field(default_factory=dict)
    state: StreamState | None = None  # what the live stream holds
    #: the live stream named ``MIGRATING_<name>`` of a declared stream (the temporary
    #: stream of an interrupted migration, or another stream of that name), and its state
    migration: LiveConfig | None = None
    migration_state: StreamState | None = None


@dataclass
class StreamPlan:
    """The entries of one stream, and what stops it from being planned."""

    steps: list[Step] = field(default_factory=list)
    unchanged: list[Unchanged] = field(default_factory=list)
    unmanaged: list[Unmanaged] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    foreign: list[Foreign] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)

    @property
    def entries(self) -> list[PlanEntry]:
        return [
            *self.steps,
            *self.unchanged,
            *self.unmanaged,
            *self.orphans,
            *self.foreign,
            *self.observed,
        ]

    def add(self, entry: PlanEntry) -> None:
        match entry:
            case Unchanged():
                self.unchanged.append(entry)
            case Unmanaged():
                self.unmanaged.append(entry)
            case Orphan():
                self.orphans.append(entry)
            case Foreign():
                self.foreign.append(entry)
            case Observed():
                self.observed.append(entry)
            case _:
                self.steps.append(entry)


def identity(spec: Spec) -> dict[str, Any]:
    """The fields every entry of ``spec`` starts with: its ref, source and written texts."""
    return {"ref": spec.ref, "source": spec.source, "written": written_as(spec.kind, spec.written)}


def unchanged(spec: Spec) -> Unchanged:
    """``spec``'s Unchanged entry (its :func:`identity`)."""
    return Unchanged.of(spec.ref, spec.source, written_as(spec.kind, spec.written))
