"""The plan's types: a closed set of small frozen steps, the notes, and the Plan itself.

Steps change the server: :class:`Create`, :class:`Update`, :class:`Replace`,
:class:`Delete`. Notes change nothing: :class:`Unchanged`, :class:`Unmanaged` (live, not
ours, never touched) and :class:`Orphan` (ours, no longer declared: deleted only with
``prune``). Every entry names its resource with a :class:`~reconciler.identity.ResourceRef`.

What a step carries is what its execution needs and nothing else: a create, update or
replace has ``config``, the complete wire config to send (the desired config plus the
``preserve`` fields of the live config the tables do not know, so an update never resets
them); update, replace and delete have ``live``, the canonical live config; a delete has
no config. A replace says why in :class:`~reconciler.model.diff.ReplaceReason` s.
Destructiveness is a property of the step: a replace or a delete destroys data (messages,
or a consumer's delivery state), and so does an update whose ``losses`` are not empty.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from reconciler.errors import Problem, RefusalKind, SpecError, UnsupportedField
from reconciler.identity import Kind, ResourceRef
from reconciler.locations import Location
from reconciler.model.diff import FieldChange, ReplaceReason
from reconciler.model.loss import Loss
from reconciler.model.migration import ConsumerFate, Volume
from reconciler.model.state import ServerInfo
from reconciler.model.values import printable
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.totals import Capacity
from reconciler.specs.ignore import NO_RULES, Hidden, IgnoreRules
from reconciler.specs.lifecycle import recorded_protection

FORMAT_VERSION = 1


class Action(StrEnum):
    """What a plan entry does (or, for a note, is): one closed set shared by the plan,
    the executor, the renderers and drift. A ``StrEnum``, so the plan JSON and every line
    printed keep the same words (``"create"``)."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    MIGRATE = "migrate"
    DELETE = "delete"
    UNCHANGED = "unchanged"
    UNMANAGED = "unmanaged"
    ORPHAN = "orphan"
    FOREIGN = "foreign"
    OBSERVED = "observed"


SUMMARY_KEYS: tuple[str, ...] = tuple(
    str(a) for a in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE, Action.UNCHANGED)
)


#: What :meth:`Unchanged.of` makes an entry with (a frozen dataclass refuses ``setattr``).
_NEW, _SET = object.__new__, object.__setattr__


@dataclass(frozen=True, kw_only=True)
class Entry:
    """What every plan entry shares: the resource, its field changes, why, and where."""

    ref: ResourceRef
    fields: tuple[FieldChange, ...] = ()
    reasons: tuple[str, ...] = ()
    source: Location | None = None
    losses: tuple[Loss, ...] = ()  # what the step deletes (reconciler.model.loss)
    #: Why no flag allows this step (``lifecycle.prevent_destroy``): see :func:`prevention`.
    prevented: str = ""
    #: Durations and sizes as the spec wrote them, by config path (for display only).
    written: Mapping[str, str] = field(default_factory=dict)

    action: ClassVar[Action]

    @property
    def kind(self) -> Kind:
        return self.ref.kind

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def stream(self) -> str | None:
        return self.ref.stream

    @property
    def stream_name(self) -> str:
        """The JetStream stream this resource is or lives in."""
        return self.ref.stream_name

    @property
    def label(self) -> str:
        """``Stream ORDERS``, ``Consumer ORDERS/NEW``, ``KeyValue config``."""
        return self.ref.label

    @property
    def destructive(self) -> bool:
        return False

    def to_json(self) -> dict[str, Any]:
        return {
            "action": str(self.action),
            "kind": self.kind,
            "name": self.name,
            "stream": self.stream,
            "fields": [change.to_json() for change in self.fields],
            "reasons": list(self.reasons),
            "source": str(self.source) if self.source else None,
            "destructive": self.destructive,
            "loss": [loss.to_json() for loss in self.losses],
        }


@dataclass(frozen=True, kw_only=True)
class Create(Entry):
    config: Mapping[str, Any]
    #: A consumer created again because its stream is replaced: its live config now.
    live: Mapping[str, Any] | None = None

    action: ClassVar[Action] = Action.CREATE


@dataclass(frozen=True, kw_only=True)
class Update(Entry):
    config: Mapping[str, Any]
    live: Mapping[str, Any]
    preserve: Mapping[str, Any] = field(default_factory=dict)

    action: ClassVar[Action] = Action.UPDATE

    @property
    def destructive(self) -> bool:
        """An update the live state shows would delete stored messages."""
        return bool(self.losses)


@dataclass(frozen=True, kw_only=True)
class Replace(Entry):
    """Delete and create again: an update cannot change an immutable field."""

    config: Mapping[str, Any]
    live: Mapping[str, Any]
    preserve: Mapping[str, Any] = field(default_factory=dict)
    because: tuple[ReplaceReason, ...] = ()

    action: ClassVar[Action] = Action.REPLACE

    @property
    def destructive(self) -> bool:
        return True


#: What a migration changes, said in the plan and in docs/migrate.md: with mirrors
#: (nats-server 2.12+) nothing but the publish window; with sources, more.
MIRRORED_CHANGES = (
    "messages are mirrored out to a temporary stream and back: subjects, payloads, "
    "headers, sequence numbers (gaps included) and timestamps stay exactly as they are",
    "publishes are refused (the publisher gets an error, nothing is lost silently) only "
    "while each of the two handovers waits for the last messages, typically milliseconds",
)
SOURCED_CHANGES = (
    "messages are copied out to a temporary stream and back (sources: this server cannot "
    "turn a mirror into a stream before 2.12), in order, with their subjects, payloads and "
    "headers (Nats-Msg-Id included)",
    "sequence numbers stay when the stream has no gaps (the new stream starts at the old "
    "first sequence); otherwise the gaps close and consumers are moved to match",
    "each message's timestamp becomes the time it was copied back, so max_age counts from "
    "the migration",
    "each message gets a Nats-Stream-Source header naming the temporary stream",
    MIRRORED_CHANGES[1],
)


@dataclass(frozen=True, kw_only=True)
class Migrate(Entry):
    """Move a stream (or bucket) to a config an update cannot reach, keeping its messages
    (:mod:`reconciler.model.migration`). ``phase`` is set when an interrupted migration is
    found on the server: apply finishes it (with ``--migrate``, unless ``blocked``)."""

    config: Mapping[str, Any]
    live: Mapping[str, Any] = field(default_factory=dict)
    because: tuple[ReplaceReason, ...] = ()
    volume: Volume = field(default_factory=Volume)
    consumers: tuple[ConsumerFate, ...] = ()
    phase: str | None = None
    mirrors: bool = True  # the copies are mirrors (nats-server 2.12+), else sources
    #: why apply refuses this step, and the whole plan with it (an interrupted migration
    #: this run may not act on: see ``planning.plan._resumed``); empty: it may run
    blocked: str = ""

    action: ClassVar[Action] = Action.MIGRATE

    @property
    def changes(self) -> tuple[str, ...]:
        """What the migration changes, for this server."""
        return MIRRORED_CHANGES if self.mirrors else SOURCED_CHANGES

    @property
    def destructive(self) -> bool:
        """Only when the new limits delete part of what is copied back."""
        return bool(self.losses)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["migration"] = {
            **self.volume.to_json(),
            "phase": self.phase,
            "consumers": [
                {"name": c.name, "kept": c.kept, "position": c.position, "note": c.note}
                for c in self.consumers
            ],
            "changes": list(self.changes),
            "blocked": self.blocked or None,
        }
        return out


@dataclass(frozen=True, kw_only=True)
class Delete(Entry):
    """Prune a managed resource no spec declares any more (its messages, or a consumer's
    delivery and ack state, go with it)."""

    live: Mapping[str, Any] = field(default_factory=dict)

    action: ClassVar[Action] = Action.DELETE

    @property
    def destructive(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class Unchanged(Entry):
    """A declared resource whose live config is what its spec asks for. It keeps no
    config: nothing reads one (two empty dicts per entry were 14 MiB at 101,000)."""

    action: ClassVar[Action] = Action.UNCHANGED

    @classmethod
    def of(cls, ref: ResourceRef, source: Location | None, written: Mapping[str, str]) -> Unchanged:
        """``Unchanged(ref=ref, source=source, written=written)``, made without the
        frozen dataclass's ``__init__`` (1.1 us an entry, this 0.4; a re-plan of 21,000
        makes one per resource): the three fields set, the others read from the class,
        where the dataclass keeps their defaults. The same value
        (tests/unit/test_plan.py); as small (``__dict__`` written whole took 336 bytes
        an entry against 144: 20 MiB at 101,000)."""
        entry = _NEW(cls)
        _SET(entry, "ref", ref)
        _SET(entry, "source", source)
        _SET(entry, "written", written)
        return entry


@dataclass(frozen=True, kw_only=True)
class Unmanaged(Entry):
    """A live resource without the managed-by marker that no spec declares: never touched.
    ``live`` is its config exactly as the server sent it (not normalised: at 100,000
    resources that was a third of a re-plan, and only the fleet report shows it)."""

    live: Mapping[str, Any] = field(default_factory=dict)

    action: ClassVar[Action] = Action.UNMANAGED


@dataclass(frozen=True, kw_only=True)
class Orphan(Entry):
    """A managed resource no spec declares any more: deleted only with ``--prune``,
    unless ``prevented`` says why even ``--prune`` will not delete it (lifecycle
    ``prevent_destroy``, declared or recorded on the server)."""

    live: Mapping[str, Any] = field(default_factory=dict)

    action: ClassVar[Action] = Action.ORPHAN


@dataclass(frozen=True, kw_only=True)
class Foreign(Entry):
    """A resource another project (``owner``) manages: listed, never touched (its config
    is not kept, as for :class:`Unmanaged`)."""

    owner: str = ""

    action: ClassVar[Action] = Action.FOREIGN


Step = Create | Update | Replace | Migrate | Delete


@dataclass(frozen=True, kw_only=True)
class Observed(Entry):
    """A declared resource in lifecycle ``mode: observe`` that differs from its spec:
    read and compared, never written. ``fields``: how the live config differs (before:
    live, after: declared); ``missing``: not on the server (never created)."""

    missing: bool = False

    action: ClassVar[Action] = Action.OBSERVED


Note = Unchanged | Unmanaged | Orphan | Foreign | Observed
PlanEntry = Step | Note


@dataclass(frozen=True)
class Check:
    """What one of the plan's checks found that refuses it (fields or replicas the server
    does not support, a migration's room, consumers working, KeyValue entries, the
    account's capacity): its kind and its problems, each at its FILE:LINE. A value on
    the plan; the verdict (``execution.verdict``) is what raises it."""

    kind: RefusalKind
    problems: tuple[Problem, ...]

    def error(self) -> SpecError | UnsupportedField:
        """The refusal as the error the verdict raises (its ``kind`` kept)."""
        if self.kind is RefusalKind.UNSUPPORTED:
            return UnsupportedField(list(self.problems))
        return SpecError(list(self.problems), kind=self.kind)


@dataclass(frozen=True)
class Plan:
    """The steps to apply (in dependency order) and the notes, for one server."""

    server: ServerInfo
    changes: tuple[Step, ...] = ()
    unchanged: tuple[Unchanged, ...] = ()
    unmanaged: tuple[Unmanaged, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    foreign: tuple[Foreign, ...] = ()
    owner: str = "default"
    #: Resources in lifecycle ``mode: observe`` that differ from their specs: never steps.
    observed: tuple[Observed, ...] = ()
    #: Unmanaged notes the ignore rules left out, per rule (``planning.hidden``), and the
    #: rules themselves (drift's field rules read them): never a step, never compared.
    hidden: tuple[Hidden, ...] = ()
    ignore: IgnoreRules = field(default=NO_RULES, compare=False, repr=False)
    #: What the policy rules found (``planning.policy``): ``deny`` ones refuse the plan.
    policy: tuple[PolicyFinding, ...] = ()
    #: The account's reserved bytes and streams before and after, against its limits
    #: (``planning.capacity``); None when not read (a plan without a server).
    capacity: Capacity | None = None
    #: What the plan's checks found that refuses it (``Check``); the verdict raises it.
    checks: tuple[Check, ...] = ()

    def __repr__(self) -> str:
        # Cheap on purpose: asyncio.run() (3.11/3.12) formats the returned value's repr.
        counts = ", ".join(f"{key}={value}" for key, value in self.summary.items())
        return f"Plan(nats-server {self.server.version}: {counts})"

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.changes

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    @property
    def destructive_steps(self) -> tuple[Step, ...]:
        return tuple(step for step in self.changes if step.destructive)

    @property
    def lossy_updates(self) -> tuple[Update | Migrate, ...]:
        """Updates (and migrations) that delete stored messages: allowed only with
        --allow-data-loss."""
        return tuple(s for s in self.changes if isinstance(s, Update | Migrate) and s.destructive)

    def refused(self, *, allow_replace: bool, allow_data_loss: bool) -> tuple[Step, ...]:
        """The destructive steps the flags do not allow: the one rule the executor
        enforces (``execution.apply.check_allowed``) and the renderers announce.

        ``allow_data_loss`` allows every step that destroys data; ``allow_replace`` allows
        replaces and deletes (the resource goes as a whole, as the plan says), not updates
        that delete part of a stream's messages in place.
        """
        return tuple(
            step
            for step in self.changes
            if step.destructive
            and not prevention(step)
            and not allows(
                whole=isinstance(step, Replace | Delete),
                allow_replace=allow_replace,
                allow_data_loss=allow_data_loss,
            )
        )

    @property
    def prevented(self) -> tuple[Step, ...]:
        """The steps lifecycle ``prevent_destroy`` forbids (:func:`prevention`): no flag
        allows them; the executor refuses the whole plan (``execution.apply.check_allowed``)."""
        return tuple(step for step in self.changes if prevention(step))

    @property
    def prevented_destroy(self) -> bool:
        """Whether every prevented step destroys data (lifecycle ``prevent_destroy``);
        False when a rule prevents a change that destroys nothing too (a failover's
        fenced origin given its subjects back)."""
        return all(step.destructive for step in self.prevented)

    @property
    def denied(self) -> tuple[PolicyFinding, ...]:
        """The policy findings at level ``deny``: apply refuses the plan, plan exits 3."""
        return tuple(finding for finding in self.policy if finding.denies)

    @property
    def entries(self) -> tuple[PlanEntry, ...]:
        """Every entry: steps, then unchanged, unmanaged and orphaned resources."""
        return (
            *self.changes,
            *self.unchanged,
            *self.unmanaged,
            *self.orphans,
            *self.foreign,
            *self.observed,
        )

    @property
    def summary(self) -> dict[str, int]:
        counts = dict.fromkeys(SUMMARY_KEYS, 0)
        for step in self.changes:
            counts[str(step.action)] = counts.get(str(step.action), 0) + 1
        counts["unchanged"] = len(self.unchanged)
        return counts

    def waves(self) -> list[list[Step]]:
        """Steps grouped by dependency level; the steps of one wave are independent."""
        return order_waves(self.changes)

    def to_json(self) -> dict[str, Any]:
        """The document described by ``schemas/plan.schema.json``."""
        return {
            "format_version": FORMAT_VERSION,
            "server": self.server.to_json(),
            "summary": self.summary,
            "changes": [step.to_json() for step in self.changes],
            "unmanaged": [_note_json(note) for note in self.unmanaged],
            "orphans": [
                {**_note_json(note), "prevented": note.prevented or None} for note in self.orphans
            ],
            "owner": self.owner,
            "foreign": [{**_note_json(note), "owner": note.owner} for note in self.foreign],
            "observed": [_observed_json(note) for note in self.observed],
            "hidden": [hidden.to_json() for hidden in self.hidden],
            "policy": [finding.to_json() for finding in self.policy],
            "capacity": self.capacity.to_json() if self.capacity else None,
        }


def _note_json(note: Entry) -> dict[str, Any]:
    return {"kind": note.kind, "name": note.name, "stream": note.stream}


def _observed_json(note: Observed) -> dict[str, Any]:
    fields = [change.to_json() for change in note.fields]
    reasons = list(note.reasons)
    return {**_note_json(note), "missing": note.missing, "fields": fields, "reasons": reasons}


def destroys(step: Step) -> bool:
    """Whether ``step`` deletes, replaces or migrates its resource, or deletes part of
    what it holds: what lifecycle ``prevent_destroy`` forbids. A consumer created again
    (its stream replaced) goes first."""
    if isinstance(step, Replace | Delete | Migrate) or step.destructive:
        return True
    return isinstance(step, Create) and step.live is not None


def prevention(step: Step) -> str:
    """Why no flag allows ``step`` (empty: none of lifecycle's business): the reason
    the planner gave (``prevented``), or, for a step that :func:`destroys` its resource,
    the protection its live config records on the server (a step made without the
    planner: Pulumi's delete). The record is data anyone could write: it only adds
    protection, and is escaped here."""
    if step.prevented:
        return step.prevented
    if not destroys(step):
        return ""
    at = recorded_protection(step.live)
    return "" if at is None else recorded_reason(at)


#: How much of a recorded protection's location a reason quotes (the server takes up
#: to 128 KiB of metadata: a forged record is never echoed whole).
RECORD_SHOWN = 200


def recorded_reason(at: str) -> str:
    """The reason a protection recorded on the server gives (``at``: untrusted, escaped
    and cut to :data:`RECORD_SHOWN` characters)."""
    shown = printable(at)
    if len(shown) > RECORD_SHOWN:
        shown = f"{shown[: RECORD_SHOWN - 1]}… ({len(at):,} characters)"
    return (
        f"prevented: the server records lifecycle prevent_destroy for it (last declared at "
        f"{shown}); no flag allows this"
    )


def sort_key(entry: Entry) -> tuple[int, str, str]:
    return entry.ref.sort_key


# --- ordering ---------------------------------------------------------------------------


def origins(config: Mapping[str, Any] | None) -> set[str]:
    """The streams a stream config mirrors or sources from."""
    if not config:
        return set()
    names = {source.get("name") for source in config.get("sources") or []}
    mirror = config.get("mirror") or {}
    names.add(mirror.get("name"))
    return {name for name in names if isinstance(name, str) and name}


def _build_dependencies(steps: Sequence[Step]) -> list[list[int]]:
    """Creates, updates, replaces: consumers after their stream, streams after origins."""
    refs = [step.ref for step in steps]
    streams = {ref.stream_name: i for i, ref in enumerate(refs) if not ref.is_child}
    deps: list[list[int]] = []
    for index, (step, ref) in enumerate(zip(steps, refs, strict=True)):
        if ref.is_child:  # its stream (a consumer's, an entry's bucket)
            parent = streams.get(ref.stream_name, index)
            deps.append([] if parent == index else [parent])
            continue
        names = origins(None if isinstance(step, Delete) else step.config)
        deps.append([streams[n] for n in sorted(names) if streams.get(n, index) != index])
    return deps


def _delete_dependencies(steps: Sequence[Delete]) -> list[list[int]]:
    """Deletes in reverse: consumers, then the streams sourcing an origin, then the origin."""
    consumers: dict[str, list[int]] = defaultdict(list)
    sourcing: dict[str, list[int]] = defaultdict(list)
    for index, step in enumerate(steps):
        if step.ref.is_child:
            consumers[step.stream_name].append(index)
        else:
            for origin in origins(step.live):
                sourcing[origin].append(index)
    return [
        [] if step.ref.is_child else consumers[step.stream_name] + sourcing[step.stream_name]
        for step in steps
    ]


def _levels(deps: Sequence[Sequence[int]]) -> list[int]:
    """The longest dependency chain below each node (Kahn's algorithm; a cycle goes last)."""
    levels = [0] * len(deps)
    waiting = [len(d) if len(d) < 2 else len(set(d)) for d in deps]
    children: dict[int, list[int]] = defaultdict(list)
    for index, parents in enumerate(deps):
        for parent in parents if len(parents) < 2 else set(parents):
            children[parent].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for child in children[node]:
            levels[child] = max(levels[child], levels[node] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if done < len(deps):
        last = max(levels, default=0) + 1
        levels = [last if count else level for level, count in zip(levels, waiting, strict=True)]
    return levels


def _grouped(steps: Sequence[Step], deps: Sequence[Sequence[int]]) -> list[list[Step]]:
    levels = _levels(deps)
    waves: list[list[Step]] = [[] for _ in range(max(levels, default=-1) + 1)]
    for step, level in zip(steps, levels, strict=True):
        waves[level].append(step)
    return [sorted(wave, key=_step_key) for wave in waves if wave]


#: The flags that allow destructive steps, as the CLI (and the Action's inputs) name them.
ALLOW_REPLACE = "--allow-replace"
ALLOW_DATA_LOSS = "--allow-data-loss"


def allows(*, whole: bool, allow_replace: bool, allow_data_loss: bool) -> bool:
    """Whether the flags allow a step that destroys data: ``allow_data_loss`` every one,
    ``allow_replace`` one where a resource goes as a whole (``whole``: a replace, a delete,
    a restore replacing a stream), never one deleting part of its messages in place. The
    one rule behind :meth:`Plan.refused` and the restore's replaces."""
    return allow_data_loss or (allow_replace and whole)


def allowing_flag(steps: Sequence[Step]) -> str:
    """The flag that allows every one of ``steps``: ``--allow-data-loss`` once one of them
    deletes messages in place (an update or a migration), else ``--allow-replace``."""
    return ALLOW_DATA_LOSS if any(isinstance(s, Update | Migrate) for s in steps) else ALLOW_REPLACE


def order_waves(steps: Sequence[Step]) -> list[list[Step]]:
    """Group steps into waves: each step's dependencies sit in earlier waves.

    Creates, updates and replaces come first; deletes after all of them, in reverse.
    """
    builds = [step for step in steps if not isinstance(step, Delete)]
    deletes = [step for step in steps if isinstance(step, Delete)]
    return _grouped(builds, _build_dependencies(builds)) + _grouped(
        deletes, _delete_dependencies(deletes)
    )


def _step_key(step: Step) -> tuple[int, str, str]:
    """Within a wave: streams first, but consumers first among deletes."""
    kind, stream, name = sort_key(step)
    return (-kind if isinstance(step, Delete) else kind, stream, name)
