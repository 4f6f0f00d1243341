"""The plan: a frozen, serialisable list of steps built without side effects.

Steps are a closed set of small frozen dataclasses sharing ``kind, name, stream, fields,
reasons, source``: :class:`Create`, :class:`Update`, :class:`Replace`, :class:`Delete`.
Notes that are not steps: :class:`Unchanged`, :class:`Unmanaged` (live, not ours, never
touched) and :class:`Orphan` (ours, no longer declared: deleted only with ``prune``).

Every step carries ``config``, the complete wire config to send: the desired config plus
the ``preserve`` fields of the live config that the tables do not know (a newer server),
so an update never resets them. ``live`` is the canonical live config (updates,
replaces, deletes). Destructiveness is a property of the step type: a replace, or the
delete of a stream or bucket, destroys messages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from reconciler.buckets import classify_stream
from reconciler.diff import FieldChange, diff_configs, replace_reasons
from reconciler.errors import Location, Problem, SpecError, UnsupportedField
from reconciler.lock import LOCK_BUCKET
from reconciler.normalize import (
    desired_config,
    is_managed,
    live_config,
    preserved_fields,
    unsupported_fields,
)
from reconciler.spec import KV_PREFIX, OBJ_PREFIX, Kind, Spec
from reconciler.state import LiveState, ServerInfo

FORMAT_VERSION = 1
SUMMARY_KEYS = ("create", "update", "replace", "delete", "unchanged")
_KIND_ORDER = {"Stream": 0, "KeyValue": 1, "ObjectStore": 2, "Consumer": 3}


@dataclass(frozen=True)
class Entry:
    """What every plan entry shares: the resource, its field changes, why, and where."""

    kind: Kind
    name: str
    stream: str | None = None
    fields: tuple[FieldChange, ...] = ()
    reasons: tuple[str, ...] = ()
    source: Location | None = None
    config: Mapping[str, Any] | None = None
    live: Mapping[str, Any] | None = None
    preserve: Mapping[str, Any] = field(default_factory=dict)

    action: ClassVar[str] = ""

    @property
    def destructive(self) -> bool:
        return False

    @property
    def stream_name(self) -> str:
        """The JetStream stream this resource is or lives in."""
        if self.kind == "Consumer":
            assert self.stream is not None
            return self.stream
        prefix = {"KeyValue": KV_PREFIX, "ObjectStore": OBJ_PREFIX}.get(self.kind, "")
        return prefix + self.name

    @property
    def label(self) -> str:
        """``Stream ORDERS``, ``Consumer ORDERS/NEW``, ``KeyValue config``."""
        where = f"{self.stream}/" if self.stream else ""
        return f"{self.kind} {where}{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "kind": self.kind,
            "name": self.name,
            "stream": self.stream,
            "fields": [change.to_json() for change in self.fields],
            "reasons": list(self.reasons),
            "source": str(self.source) if self.source else None,
            "destructive": self.destructive,
        }


@dataclass(frozen=True)
class Create(Entry):
    action: ClassVar[str] = "create"


@dataclass(frozen=True)
class Update(Entry):
    action: ClassVar[str] = "update"


@dataclass(frozen=True)
class Replace(Entry):
    """Delete and create again: an update cannot change an immutable field."""

    action: ClassVar[str] = "replace"

    @property
    def destructive(self) -> bool:
        return True


@dataclass(frozen=True)
class Delete(Entry):
    """Prune a managed resource no spec declares any more."""

    action: ClassVar[str] = "delete"

    @property
    def destructive(self) -> bool:
        return self.kind != "Consumer"


@dataclass(frozen=True)
class Unchanged(Entry):
    action: ClassVar[str] = "unchanged"


@dataclass(frozen=True)
class Unmanaged(Entry):
    """A live resource without the managed-by marker that no spec declares: never touched."""

    action: ClassVar[str] = "unmanaged"


@dataclass(frozen=True)
class Orphan(Entry):
    """A managed resource no spec declares any more: deleted only with ``--prune``."""

    action: ClassVar[str] = "orphan"


Step = Create | Update | Replace | Delete
Note = Unchanged | Unmanaged | Orphan


@dataclass(frozen=True)
class Plan:
    """The steps to apply (in dependency order) and the notes, for one server."""

    server: ServerInfo
    changes: tuple[Step, ...] = ()
    unchanged: tuple[Unchanged, ...] = ()
    unmanaged: tuple[Unmanaged, ...] = ()
    orphans: tuple[Orphan, ...] = ()

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
    def summary(self) -> dict[str, int]:
        counts = dict.fromkeys(SUMMARY_KEYS, 0)
        for step in self.changes:
            counts[step.action] += 1
        counts["unchanged"] = len(self.unchanged)
        return counts

    def waves(self) -> list[list[Step]]:
        """Steps grouped by dependency level; the steps of one wave are independent."""
        return order_waves(self.changes)

    def to_json(self) -> dict[str, Any]:
        """The document described by ``schemas/plan.schema.json``."""
        return {
            "format_version": FORMAT_VERSION,
            "server": {
                "version": self.server.version,
                "api_level": self.server.api_level,
                "clustered": self.server.clustered,
                "domain": self.server.domain,
            },
            "summary": self.summary,
            "changes": [step.to_json() for step in self.changes],
            "unmanaged": [_note_json(note) for note in self.unmanaged],
            "orphans": [_note_json(note) for note in self.orphans],
        }


def _note_json(note: Entry) -> dict[str, Any]:
    return {"kind": note.kind, "name": note.name, "stream": note.stream}


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
    streams = {step.stream_name: i for i, step in enumerate(steps) if step.kind != "Consumer"}
    deps: list[list[int]] = []
    for index, step in enumerate(steps):
        names = {step.stream_name} if step.kind == "Consumer" else origins(step.config)
        deps.append([streams[n] for n in sorted(names) if streams.get(n, index) != index])
    return deps


def _delete_dependencies(steps: Sequence[Step]) -> list[list[int]]:
    """Deletes in reverse: consumers, then the streams sourcing an origin, then the origin."""
    consumers: dict[str, list[int]] = defaultdict(list)
    sourcing: dict[str, list[int]] = defaultdict(list)
    for index, step in enumerate(steps):
        if step.kind == "Consumer":
            consumers[step.stream_name].append(index)
        else:
            for origin in origins(step.live):
                sourcing[origin].append(index)
    return [
        [] if step.kind == "Consumer" else consumers[step.stream_name] + sourcing[step.stream_name]
        for step in steps
    ]


def _levels(deps: Sequence[Sequence[int]]) -> list[int]:
    """The longest dependency chain below each node (Kahn's algorithm; a cycle goes last)."""
    levels = [0] * len(deps)
    waiting = [len(set(d)) for d in deps]
    children: dict[int, list[int]] = defaultdict(list)
    for index, parents in enumerate(deps):
        for parent in set(parents):
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


def sort_key(entry: Entry) -> tuple[int, str, str]:
    return (_KIND_ORDER.get(entry.kind, 9), entry.stream or "", entry.name)


# --- building ---------------------------------------------------------------------------

ADOPT_REASON = "adopt: add the managed-by marker"
#: Streams the tool keeps for itself (the apply lock's bucket): never planned or listed.
INTERNAL_STREAMS = frozenset({KV_PREFIX + LOCK_BUCKET})


@dataclass
class _Builder:
    """Accumulates the entries of one plan; every method is pure over its inputs."""

    live: LiveState
    prune: bool
    steps: list[Step] = field(default_factory=list)
    unchanged: list[Unchanged] = field(default_factory=list)
    unmanaged: list[Unmanaged] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    stream_configs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)
    by_stream: dict[str, list[str]] = field(default_factory=dict)

    @property
    def server(self) -> ServerInfo:
        return self.live.server

    def add(self, entry: Step | Unchanged) -> None:
        if isinstance(entry, Unchanged):
            self.unchanged.append(entry)
        else:
            self.steps.append(entry)

    def stream(self, spec: Spec) -> None:
        raw = self.live.streams.get(spec.stream_name)
        if spec.external:
            if raw is None:
                message = f"external stream {spec.stream_name} does not exist on the server"
                self.problems.append(Problem(spec.source, "", message))
            else:
                self.stream_configs[spec.stream_name] = raw
            return
        desired = desired_config(spec, self.server)
        self.stream_configs[spec.stream_name] = desired
        if raw is None:
            self.add(Create(**_identity(spec), fields=self.created(spec, desired), config=desired))
            return
        entry = self.compare(spec, desired, raw)
        if isinstance(entry, Replace):
            self.replaced.add(spec.stream_name)
            extra = self.lost_consumers(spec.stream_name)
            entry = replace(entry, reasons=(*entry.reasons, *extra))
        self.add(entry)

    def lost_consumers(self, stream: str) -> tuple[str, ...]:
        """The reason line naming the live consumers that vanish with ``stream``."""
        if not self.by_stream:
            for parent, name in self.live.consumers:
                self.by_stream.setdefault(parent, []).append(name)
        gone = sorted(self.by_stream.get(stream, []))
        return (f"its consumers are deleted with it: {', '.join(gone)}",) if gone else ()

    def consumer(self, spec: Spec) -> None:
        assert spec.stream is not None
        stream_config = self.stream_configs.get(spec.stream, self.live.streams.get(spec.stream))
        if stream_config is None:
            message = f"stream {spec.stream} is neither declared nor on the server"
            self.problems.append(Problem(spec.where("stream"), "stream", message))
            return
        desired = desired_config(spec, self.server, stream_config=stream_config)
        raw = self.live.consumers.get((spec.stream, spec.name))
        if raw is None or spec.stream in self.replaced:
            reasons = (f"re-created: stream {spec.stream} is replaced",) if raw else ()
            created = self.created(spec, desired, stream_config=stream_config)
            self.add(Create(**_identity(spec), fields=created, reasons=reasons, config=desired))
            return
        self.add(self.compare(spec, desired, raw))

    def compare(
        self, spec: Spec, desired: Mapping[str, Any], raw: Mapping[str, Any]
    ) -> Step | Unchanged:
        current = live_config(spec.kind, raw, self.server)
        preserve = preserved_fields(spec.kind, raw, self.server)
        changes = tuple(diff_configs(desired, current))
        common = {
            **_identity(spec),
            "fields": changes,
            "config": {**preserve, **desired},
            "live": current,
            "preserve": preserve,
        }
        if not changes:
            return Unchanged(**common)
        reasons = replace_reasons(spec.kind, desired, current, self.server)
        if reasons:
            return Replace(**common, reasons=tuple(reasons))
        return Update(**common, reasons=() if is_managed(raw) else (ADOPT_REASON,))

    def created(
        self,
        spec: Spec,
        desired: Mapping[str, Any],
        *,
        stream_config: Mapping[str, Any] | None = None,
    ) -> tuple[FieldChange, ...]:
        """The fields a new resource sets away from a bare resource of its kind."""
        bare = Spec(
            kind=spec.kind, name=spec.name, config={}, source=spec.source, stream=spec.stream
        )
        baseline = desired_config(bare, self.server, stream_config=stream_config)
        return tuple(FieldChange(c.path, None, c.after) for c in diff_configs(desired, baseline))

    def undeclared(self, streams: set[str], consumers: set[tuple[str, str]]) -> None:
        for name, raw in sorted(self.live.streams.items()):
            if name not in streams and name not in INTERNAL_STREAMS:
                kind, resource = classify_stream(name, raw)
                self.note(kind, resource, None, raw)
        for (stream, name), raw in sorted(self.live.consumers.items()):
            if (stream, name) in consumers or stream not in streams or stream in self.replaced:
                continue  # declared; or listed with its undeclared stream; or gone with it
            self.note("Consumer", name, stream, raw)

    def note(self, kind: Kind, name: str, stream: str | None, raw: Mapping[str, Any]) -> None:
        current = live_config(kind, raw, self.server)
        if not is_managed(raw):
            self.unmanaged.append(Unmanaged(kind=kind, name=name, stream=stream, live=current))
        elif self.prune:
            lost = () if kind == "Consumer" else self.lost_consumers(raw.get("name", name))
            reasons = ("its messages are deleted", *lost) if kind != "Consumer" else ()
            step = Delete(kind=kind, name=name, stream=stream, live=current, reasons=reasons)
            self.steps.append(step)
        else:
            reason = "no spec declares it: deleted with --prune"
            orphan = Orphan(kind=kind, name=name, stream=stream, live=current, reasons=(reason,))
            self.orphans.append(orphan)


def _identity(spec: Spec) -> dict[str, Any]:
    return {"kind": spec.kind, "name": spec.name, "stream": spec.stream, "source": spec.source}


def build_plan(specs: Sequence[Spec], live: LiveState, *, prune: bool = False) -> Plan:
    """Compare validated specs with the live state (pure).

    Raises :class:`UnsupportedField` when a spec uses a field the server does not know,
    and :class:`SpecError` when an external stream is missing or a consumer's stream is
    neither declared nor live.
    """
    problems = unsupported_fields(specs, live.server)
    if problems:
        raise UnsupportedField(problems)
    builder = _Builder(live=live, prune=prune)
    streams = [spec for spec in specs if spec.kind != "Consumer"]
    consumers = [spec for spec in specs if spec.kind == "Consumer"]
    for spec in streams:
        builder.stream(spec)
    for spec in consumers:
        builder.consumer(spec)
    builder.undeclared(
        {spec.stream_name for spec in streams},
        {(spec.stream_name, spec.name) for spec in consumers},
    )
    if builder.problems:
        raise SpecError(builder.problems)
    return Plan(
        server=live.server,
        changes=tuple(step for wave in order_waves(builder.steps) for step in wave),
        unchanged=tuple(sorted(builder.unchanged, key=sort_key)),
        unmanaged=tuple(sorted(builder.unmanaged, key=sort_key)),
        orphans=tuple(sorted(builder.orphans, key=sort_key)),
    )
