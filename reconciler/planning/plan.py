"""Planning: declared specs against the live state, one stream at a time (pure).

A JetStream stream and its consumers are planned together and independently of every
other stream, by :func:`plan_stream`: the declared stream (or bucket) and consumers, the
stream's live config and live consumers, and the server's facts go in; the plan's
entries for that stream come out. :func:`build_plan` groups a whole server by stream and
loops over it; the fleet pipeline calls :func:`plan_stream` once per (environment,
stream) group on its workers. The rules live here once:

- declared and live: compared in canonical form; no difference is ``Unchanged``, an
  immutable field makes a ``Replace`` (which takes the stream's consumers with it: the
  declared ones are created again, the undeclared ones are not listed), anything else
  an ``Update``;
- declared, not live: ``Create``; ``external: true`` streams must exist and are never
  planned themselves;
- live, not declared: ``Unmanaged`` without the managed marker; ``Foreign`` when another
  project (owner) manages it, never touched; else an ``Orphan`` (a ``Delete`` with
  ``prune``). Declaring a resource another owner manages is refused unless the plan may
  take it over (:class:`Ownership`). An undeclared consumer is listed only when its stream
  is declared (otherwise it goes with its undeclared stream); the tool's own streams
  (the apply lock's bucket) are never listed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.errors import Problem, SpecError, UnsupportedField
from reconciler.identity import ResourceRef, is_reserved, stream_of
from reconciler.model.buckets import bucket_config
from reconciler.model.diff import FieldChange, diff_configs, replace_reasons
from reconciler.model.loss import (
    CONSUMER_STATE,
    Loss,
    claimed_losses,
    consumer_gone,
    filter_narrowed,
    held,
    update_losses,
)
from reconciler.model.migration import (
    TEMP_PREFIX,
    Record,
    Volume,
    binding_problem,
    blockers,
    can_mirror,
    consumer_fates,
    copy_bytes,
    finished,
    is_temp,
    overflow,
    temp_name,
    unheld,
)
from reconciler.model.normalize import (
    CONSUMER_NAME_FIELDS,
    desired_config,
    is_managed,
    live_config,
    owner_of,
    preserved_fields,
    unsupported_fields,
)
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.model.values import written_as
from reconciler.planning.live_checks import live_problems
from reconciler.planning.memo import Memo
from reconciler.planning.steps import (
    Create,
    Delete,
    Foreign,
    Migrate,
    Observed,
    Orphan,
    Plan,
    PlanEntry,
    Replace,
    Step,
    Unchanged,
    Unmanaged,
    Update,
    destroys,
    order_waves,
    recorded_reason,
    sort_key,
)
from reconciler.specs.checks import mirror_direct_problem
from reconciler.specs.lifecycle import MANAGE, PROTECT_KEY, Lifecycle, recorded_protection
from reconciler.specs.spec import DEFAULT_OWNER, Spec

__all__ = [
    "ADOPT_REASON",
    "DEFAULT_OWNERSHIP",
    "Ownership",
    "StreamGroup",
    "StreamPlan",
    "build_plan",
    "governed",
    "governed_entries",
    "group_streams",
    "holding",
    "plan_stream",
    "removal",
]

ADOPT_REASON = "adopt: add the managed-by marker"
PRUNE_REASON = "no spec declares it: deleted with --prune"

LiveConfig = Mapping[str, Any]


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


@dataclass(frozen=True)
class Ownership:
    """Whose resources this plan manages, and whether it may take others' over."""

    owner: str = DEFAULT_OWNER
    take_over: bool = False

    def claim(self, spec: Spec, raw: LiveConfig) -> tuple[Problem | None, tuple[str, ...]]:
        """(a refusal, or the reasons to note) for declaring a live resource."""
        holder = owner_of(raw)
        if holder is None or holder == self.owner:
            return None, ()
        if self.take_over:
            return None, (f"take over from owner {holder!r}",)
        message = (
            f"{spec.ref.label} is managed by owner {holder!r}, not {self.owner!r}: declare it "
            "in that project, or re-run with --take-over to take it over"
        )
        return Problem(spec.source, "", message), ()


#: The default owner, taking nothing over.
DEFAULT_OWNERSHIP = Ownership()


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


def stream_problems(group: StreamGroup, *, live_present: bool | None = None) -> list[Problem]:
    """What stops a stream from being planned: a missing external stream, or consumers
    whose stream is neither declared nor live. ``live_present`` overrides ``group.live``
    for callers that know only whether the stream exists."""
    present = group.live is not None if live_present is None else live_present
    declared = group.declared
    if declared is not None and declared.external and not present:
        message = f"external stream {group.name} does not exist on the server"
        return [Problem(declared.source, "", message)]
    if declared is not None or present:
        return []
    message = f"stream {group.name} is neither declared nor on the server"
    return [Problem(spec.where("stream"), "stream", message) for spec in group.consumers]


def plan_stream(
    group: StreamGroup,
    server: ServerInfo,
    *,
    prune: bool = False,
    ownership: Ownership = DEFAULT_OWNERSHIP,
    migrate: bool = False,
    memo: Memo | None = None,
    migration: str | None = None,
    lifecycle: Lifecycle = MANAGE,
) -> StreamPlan:
    """The entries of one stream and its consumers (pure), each resource's lifecycle
    honoured (``lifecycle``: the environment's, merged into every spec's; see
    :func:`_governed`). ``migrate``: a stream whose
    change an update cannot make is migrated (its messages kept), not replaced; and the
    consent an interrupted migration needs. ``migration``: the way out of an interrupted
    migration whose target the specs no longer declare (:data:`CHOICES`). ``memo``:
    what earlier plans found unchanged (:mod:`reconciler.planning.memo`); what this plan
    finds unchanged is added to it."""
    if not lifecycle.is_default:
        group = _with_lifecycle(group, lifecycle)
        prune = prune and not lifecycle.observe  # an observed environment is never written
    if _ignores(group):
        memo = None  # what it plans depends on live values the memo's digests skip
    out = _stream_entries(
        group,
        server,
        prune=prune,
        ownership=ownership,
        migrate=migrate,
        memo=memo,
        migration=migration,
    )
    return _governed(out, group, lifecycle)


def _stream_entries(
    group: StreamGroup,
    server: ServerInfo,
    *,
    prune: bool,
    ownership: Ownership,
    migrate: bool,
    memo: Memo | None,
    migration: str | None,
) -> StreamPlan:
    """The entries of one stream and its consumers, lifecycles aside but for
    ``ignore_changes`` (:func:`_ignoring`) and an observed stream's entry."""
    resumed = _resumed(group, server, ownership, migrate=migrate, choice=migration)
    if resumed is not None:
        return StreamPlan(steps=[resumed])
    if group.declared is None and group.live is not None and is_temp(group.live):
        return StreamPlan()  # a migration's own stream, seen alone (the fleet's snapshots)
    out = StreamPlan(problems=stream_problems(group))
    if out.problems:
        return out
    declared, live = group.declared, group.live
    stream_config: LiveConfig | None = live
    replaced = False
    owner = ownership.owner
    if declared is None:
        if live is not None and not is_reserved(group.name):
            ref = ResourceRef.of_stream(group.name, live)
            out.add(_undeclared(ref, live, server, group, prune, owner))
    elif not declared.external:
        entry, stream_config = _declared_stream(declared, group, server, ownership, migrate, memo)
        if isinstance(entry, Problem):
            out.problems.append(entry)  # refused: another owner's
            return out
        replaced = isinstance(entry, Replace)
        out.add(entry)
    basis = b"" if memo is None else memo.basis(declared, live)
    bare: LiveConfig | None = None  # a consumer of this stream declaring nothing
    for spec in group.consumers:
        raw = group.live_consumers.get(spec.name)
        key = (
            None
            if memo is None or raw is None or replaced
            else memo.key(spec, raw, basis + _salt(spec))
        )
        if memo is not None and key is not None and memo.unchanged(key):
            out.add(Unchanged(**_identity(spec)))
            continue
        if stream_config is None:
            assert declared is not None  # stream_problems: declared or live
            stream_config = desired_config(declared, server, owner=owner)
        heeded = spec if raw is None or replaced else _ignoring(spec, raw)  # created: declared
        desired = desired_config(heeded, server, stream_config=stream_config, owner=owner)
        if raw is None or replaced:
            reasons = (f"re-created: stream {group.name} is replaced",) if raw else ()
            if bare is None:
                bare = _bare(spec, server, stream_config)
            created = _created(spec, desired, bare)
            current = None if raw is None else live_config(spec.kind, raw, server)
            out.add(
                Create(
                    **_identity(spec), fields=created, reasons=reasons, config=desired, live=current
                )
            )
            continue
        refusal, notes = ownership.claim(spec, raw)
        if refusal is not None:
            out.problems.append(refusal)
            continue
        out.add(
            _remembered(
                memo,
                key,
                _consumer_replaced(_compare(spec, desired, raw, server, None, notes), group),
            )
        )
    if declared is not None and not replaced:
        names = {spec.name for spec in group.consumers}
        for name, raw in sorted(group.live_consumers.items()):
            if name not in names:
                ref = ResourceRef("Consumer", name, group.name)
                out.add(_undeclared(ref, raw, server, group, prune, owner))
    return out


def _consumer_replaced(entry: Update | Replace | Unchanged, group: StreamGroup) -> PlanEntry:
    """A consumer's replace deletes it first: the last consumer of an interest stream
    takes the stream's messages along (:func:`~reconciler.model.loss.consumer_gone`);
    an update narrowing its filter deletes those only it still needed
    (:func:`~reconciler.model.loss.filter_narrowed`)."""
    if isinstance(entry, Replace):
        return replace(entry, losses=(consumer_gone(group.live, group.state, entry.live),))
    if isinstance(entry, Update):
        lost = filter_narrowed(group.live, group.state, entry.live, entry.config)
        return entry if lost is None else replace(entry, losses=(lost,))
    return entry


def _declared_stream(
    declared: Spec,
    group: StreamGroup,
    server: ServerInfo,
    ownership: Ownership,
    migrate: bool,
    memo: Memo | None,
) -> tuple[PlanEntry | Problem, LiveConfig | None]:
    """The entry of a stream (or bucket) managed here, and the config its consumers are
    planned against (None when the memo answered: made when a consumer needs it)."""
    live = group.live
    if live is None:
        desired = desired_config(declared, server, owner=ownership.owner)
        created = Create(
            **_identity(declared),
            fields=_created(declared, desired, _bare(declared, server)),
            config=desired,
        )
        return (_observed(created, declared) if declared.lifecycle.observe else created), desired
    key = None if memo is None else memo.key(declared, live, _salt(declared))
    if memo is not None and key is not None and memo.unchanged(key):
        return Unchanged(**_identity(declared)), None
    desired = desired_config(_ignoring(declared, live), server, owner=ownership.owner)
    refusal, notes = ownership.claim(declared, live)
    if refusal is not None:
        return refusal, desired
    entry: PlanEntry = _compare(declared, desired, live, server, group.state, notes)
    if declared.lifecycle.observe:
        return _observed(entry, declared), desired
    if isinstance(entry, Replace):
        entry = _migration(entry, group, server) if migrate else _migratable(entry)
    if isinstance(entry, Replace):
        entry = _with_reasons(entry, _lost_consumers(group))
    return _remembered(memo, key, entry), desired


def _remembered(memo: Memo | None, key: bytes | None, entry: PlanEntry) -> PlanEntry:
    """``entry``, remembered in ``memo`` when it is ``Unchanged``."""
    if memo is not None and key is not None and isinstance(entry, Unchanged):
        memo.remember(key)
    return entry


def _identity(spec: Spec) -> dict[str, Any]:
    return {"ref": spec.ref, "source": spec.source, "written": written_as(spec.kind, spec.written)}


def _with_reasons(entry: Replace, extra: tuple[str, ...]) -> Replace:
    return replace(entry, reasons=(*entry.reasons, *extra))


def _migration(entry: Replace, group: StreamGroup, server: ServerInfo) -> Migrate | Replace:
    """The replace as a migration, or the replace saying why it cannot be one."""
    why_not = blockers(entry.config, entry.live)
    if (full := overflow(entry.config, group.state, entry.live)) is not None:
        why_not.append(full)
    if why_not:
        return _with_reasons(entry, tuple(f"cannot migrate: {reason}" for reason in why_not))
    state = group.state
    fates = tuple(consumer_fates(group.live_consumers, server))
    taken = _name_taken(group)
    warning = unheld(entry.live, server)
    return Migrate(
        ref=entry.ref,
        fields=entry.fields,
        reasons=(
            *entry.reasons,
            *(fate.note for fate in fates),
            *((warning,) if warning else ()),
            *((f"blocked: {taken}",) if taken else ()),
        ),
        source=entry.source,
        written=entry.written,
        config=entry.config,
        live=entry.live,
        because=entry.because,
        volume=Volume(state.messages if state else 0, copy_bytes(state)),
        consumers=fates,
        losses=tuple(
            update_losses(
                entry.config, entry.live, state, consumers=sum(fate.kept for fate in fates)
            )
        ),
        mirrors=can_mirror(server),
        blocked=taken,
    )


def _name_taken(group: StreamGroup) -> str:
    """Why a migration of ``group`` cannot start: its temporary stream's name is taken
    by a stream that is no migration record (planned apart, as what it is)."""
    if group.migration is None:
        return ""
    return (
        f"stream {temp_name(group.name)} already exists and is not a migration of "
        f"{group.name}: a migration needs that name; rename or delete that stream first"
    )


MIGRATE_HINT = "apply --migrate keeps its messages"


def _migratable(entry: Replace) -> Replace:
    """A stream replace that a migration could make says so."""
    if blockers(entry.config, entry.live):
        return entry
    return _with_reasons(entry, (MIGRATE_HINT,))


def _resumed(
    group: StreamGroup,
    server: ServerInfo,
    ownership: Ownership,
    *,
    migrate: bool,
    choice: str | None,
) -> Migrate | None:
    """An interrupted migration of a stream this run declares; None when there is none
    (or the stream is not declared here: a record is never a reason to touch a stream
    no spec of this run declares).

    The record on ``MIGRATING_<stream>`` was possibly written by anyone: the step is
    blocked (apply refuses the whole plan) unless the record is bound to this owner and
    this stream (:func:`binding_problem`) and the run consents (``migrate``, as a new
    migration needs). A recorded target never wins over the specs: when they declare
    something else now, the person chooses (``choice``) to finish to the recorded
    target, go back to the old config, or go on to the declared one."""
    declared, temp = group.declared, group.migration
    record = None if temp is None else Record.of(temp)
    if declared is None or declared.external or record is None:
        return None
    state = group.migration_state
    problem = _foreign_record(group, record, ownership)
    desired = desired_config(declared, server, owner=ownership.owner)
    recorded = live_config(declared.kind, record.target, server)
    changes = () if problem else tuple(diff_configs(desired, recorded))
    way = choice or ("resume" if not changes else None)
    blocked = problem or _not_allowed(record, group, migrate=migrate, way=way)
    config = record.target if blocked else _way_out(declared, desired, record, server, way)
    if not blocked and (why_not := blockers(config, record.origin)):
        blocked = f"cannot {way}: " + "; ".join(why_not)
    reasons = [f"interrupted in phase {record.phase}: apply --migrate finishes the migration"]
    if changes:
        reasons.append(
            "the specs changed after it stopped: the fields show its recorded target and "
            "what the specs declare now"
        )
    if way is not None and not blocked and choice is not None:
        reasons.append(f"--migration {way}: {WAYS[way]}")
    return Migrate(
        **_identity(declared),
        fields=changes,
        reasons=(*reasons, *((f"blocked: {blocked}",) if blocked else ())),
        config=config,
        live=group.live or {},
        volume=Volume(state.messages if state else 0, copy_bytes(state)),
        losses=() if blocked else _losses(declared, config, record, group, server),
        phase=record.phase,
        mirrors=record.mirrors,
        blocked=blocked,
    )


#: What each way out of an interrupted migration does (``--migration``).
WAYS = {
    "resume": "finishes the migration to its recorded target",
    "rollback": "goes back to the old stream's config, every message kept",
    "continue": "goes on to the config the specs declare now",
}


def _foreign_record(group: StreamGroup, record: Record, ownership: Ownership) -> str:
    """Why the record on ``MIGRATING_<name>`` is not this project's migration of this
    stream (empty: it is)."""
    temp = temp_name(group.name)
    holder = None if group.live is None else owner_of(group.live)
    if holder is not None and holder != ownership.owner and not ownership.take_over:
        return f"stream {group.name} is managed by owner {holder!r}, not {ownership.owner!r}"
    problem = binding_problem(
        record,
        stream=group.name,
        owner=ownership.owner,
        temp_created=group.migration_state.created if group.migration_state else None,
        live=group.live,
        live_created=group.state.created if group.state else None,
    )
    if problem is None:
        return ""
    return (
        f"{temp} is not a migration of {group.name} that this project started ({problem}): "
        f"nothing acts on it; if nobody here started it, look at {temp} and delete it"
    )


def _not_allowed(record: Record, group: StreamGroup, *, migrate: bool, way: str | None) -> str:
    """Why this run may not act on a migration that is its own (empty: it may)."""
    if not migrate:
        return (
            f"stream {group.name}: an interrupted migration is resumed only with --migrate "
            "(the consent it started with)"
        )
    if way is None:
        return (
            f"stream {group.name}: the specs changed after its migration stopped; choose "
            "--migration resume (finish to its recorded target), rollback (back to the old "
            "config) or continue (on to the declared config)"
        )
    if way != "resume" and finished(record, group.live):
        return (
            f"stream {group.name}: its migration has finished but for deleting "
            f"{temp_name(group.name)}: only --migration resume"
        )
    return ""


def _way_out(
    declared: Spec, desired: LiveConfig, record: Record, server: ServerInfo, way: str | None
) -> Mapping[str, Any]:
    """The config the chosen way out goes to: the recorded target, the old stream's
    config (also when the declared config is the old one), or the declared config."""
    if way == "resume":
        return record.target
    back = not diff_configs(desired, live_config(declared.kind, record.origin, server))
    if way == "rollback" or back:
        return record.origin
    return {**preserved_fields(declared.kind, record.origin, server), **desired}


def _losses(
    declared: Spec,
    config: LiveConfig,
    record: Record,
    group: StreamGroup,
    server: ServerInfo,
) -> tuple[Loss, ...]:
    """What going to ``config`` deletes of the migration's messages (the old stream holds
    them all until the temporary stream takes the publishes, the temporary stream from
    then on: the fuller of the two), against the old stream's config as the record
    claims it (:func:`claimed_losses`: the record is data, its old config may be forged)."""
    old = live_config(declared.kind, record.origin, server)
    states = [s for s in (group.state, group.migration_state) if s is not None]
    state = max(states, key=lambda s: s.messages, default=None)
    new = live_config(declared.kind, config, server)
    return tuple(claimed_losses(new, old, state, back=new == old))


def _lost_consumers(group: StreamGroup) -> tuple[str, ...]:
    """The reason line naming the live consumers that vanish with the stream."""
    gone = sorted(group.live_consumers)
    return (f"its consumers are deleted with it: {', '.join(gone)}",) if gone else ()


def _compare(
    spec: Spec,
    desired: LiveConfig,
    raw: LiveConfig,
    server: ServerInfo,
    state: StreamState | None,
    notes: tuple[str, ...] = (),
) -> Update | Replace | Unchanged:
    current = live_config(spec.kind, raw, server)
    preserve = preserved_fields(spec.kind, raw, server)
    changes = tuple(diff_configs(_settled(desired, current), current))
    config = {**preserve, **desired}
    if not changes:
        # Nothing to apply: the configs are not kept (at 100k resources they would be
        # most of the plan's memory, and nothing reads them).
        return Unchanged(**_identity(spec))
    because = tuple(replace_reasons(spec.kind, desired, current, server))
    if because:
        return Replace(
            **_identity(spec),
            fields=changes,
            reasons=(*(reason.message for reason in because), *notes),
            config=config,
            live=current,
            preserve=preserve,
            because=because,
            losses=(_all_of(spec.ref, state),),
        )
    return Update(
        **_identity(spec),
        fields=changes,
        reasons=notes if is_managed(raw) else (ADOPT_REASON,),
        config=config,
        live=current,
        preserve=preserve,
        losses=() if spec.kind == "Consumer" else tuple(update_losses(desired, current, state)),
    )


def _bare(
    spec: Spec, server: ServerInfo, stream_config: LiveConfig | None = None
) -> dict[str, Any]:
    """The desired config of a resource like ``spec`` that declares nothing: what a create
    is compared with. For a consumer it serves every consumer of its stream (the name
    decides only :data:`CONSUMER_NAME_FIELDS`, left out of the comparison)."""
    bare = Spec(kind=spec.kind, name=spec.name, config={}, source=spec.source, stream=spec.stream)
    return desired_config(bare, server, stream_config=stream_config)


def _created(spec: Spec, desired: LiveConfig, bare: LiveConfig) -> tuple[FieldChange, ...]:
    """The declared fields a new resource sets away from a bare resource of its kind.

    Fields the spec does not declare are left out even when a declared one moves their
    default (a push consumer's ``max_waiting: 0``, a mirror's absent ``subjects``).
    """
    declared = set(written_as(spec.kind, {key: key for key in spec.config}))
    if spec.kind == "Consumer":
        declared -= set(CONSUMER_NAME_FIELDS)
    return tuple(
        FieldChange(c.path, None, c.after) for c in diff_configs(desired, bare, only=declared)
    )


def _undeclared(
    ref: ResourceRef,
    raw: LiveConfig,
    server: ServerInfo,
    group: StreamGroup,
    prune: bool,
    owner: str,
) -> Unmanaged | Orphan | Delete | Foreign:
    holder = owner_of(raw)
    if holder is None:
        return Unmanaged(ref=ref, live=raw)
    if holder != owner:
        return Foreign(ref=ref, owner=holder)
    current = live_config(ref.kind, raw, server)
    if not prune:
        return Orphan(ref=ref, live=current, reasons=(PRUNE_REASON,))
    return _deletion(ref, current, group)


def _deletion(ref: ResourceRef, current: LiveConfig, group: StreamGroup) -> Delete:
    """The delete of a live resource and what it destroys: the one rule for prune and
    for Pulumi's destroy (:func:`removal`)."""
    reasons = (
        () if ref.kind == "Consumer" else ("its messages are deleted", *_lost_consumers(group))
    )
    if ref.kind == "Consumer":  # an interest stream's last one takes the messages along
        lost = consumer_gone(group.live, group.state, current)
        return Delete(ref=ref, live=current, reasons=reasons, losses=(lost,))
    return Delete(ref=ref, live=current, reasons=reasons, losses=(held(group.state),))


def _all_of(ref: ResourceRef, state: StreamState | None) -> Loss:
    """What goes when the whole resource goes."""
    return CONSUMER_STATE if ref.kind == "Consumer" else held(state)


# --- a whole server ---------------------------------------------------------------------


def group_streams(specs: Sequence[Spec], live: LiveState) -> list[StreamGroup]:
    """Specs and live resources grouped by JetStream stream, sorted by stream name."""
    declared: dict[str, Spec] = {}
    consumers: dict[str, list[Spec]] = {}
    for spec in specs:
        if spec.kind == "Consumer":
            consumers.setdefault(spec.stream_name, []).append(spec)
        elif spec.kind != "KeyValueEntry":  # values, planned by reconciler.planning.entries
            declared[spec.stream_name] = spec
    live_consumers: dict[str, dict[str, LiveConfig]] = {}
    for (stream, name), config in live.consumers.items():
        live_consumers.setdefault(stream, {})[name] = config
    migrations: dict[str, str] = {}  # declared stream -> the live MIGRATING_<stream>
    for temp in live.streams:
        origin = temp[len(TEMP_PREFIX) :] if temp.startswith(TEMP_PREFIX) else None
        if origin is not None and origin in declared and not declared[origin].external:
            migrations[origin] = temp
    records = {t for t in migrations.values() if Record.of(live.streams[t]) is not None}
    streams = [name for name in live.streams if name not in records]
    names = sorted({*declared, *consumers, *streams, *migrations})
    return [
        StreamGroup(
            name=name,
            declared=declared.get(name),
            consumers=tuple(consumers.get(name, ())),
            live=live.streams.get(name),
            live_consumers=live_consumers.get(name, {}) if name in live.streams else {},
            state=live.stream_state.get(name),
            migration=live.streams[migrations[name]] if name in migrations else None,
            migration_state=live.stream_state.get(migrations.get(name, "")),
        )
        for name in names
    ]


def _live_origin_problems(specs: Sequence[Spec], live: LiveState) -> list[Problem]:
    """The mirror rule validation could not check: mirrors of streams no spec declares
    (or declares external), judged against the origin's live config."""
    managed = {s.stream_name for s in specs if s.kind != "Consumer" and not s.external}
    problems = []
    for spec in specs:
        origin = str((spec.config.get("mirror") or {}).get("name") or "")
        if spec.kind == "Stream" and origin and origin not in managed and origin in live.streams:
            problem = mirror_direct_problem(spec, live.streams[origin])
            if problem is not None:
                problems.append(problem)
    return problems


def build_plan(
    specs: Sequence[Spec],
    live: LiveState,
    *,
    prune: bool = False,
    ownership: Ownership = DEFAULT_OWNERSHIP,
    migrate: bool = False,
    memo: Memo | None = None,
    migration: str | None = None,
    lifecycle: Lifecycle = MANAGE,
) -> Plan:
    """Compare validated specs with the live state (pure). ``migrate``, ``migration``,
    ``lifecycle`` and ``memo``: see :func:`plan_stream`; without a memo kept between plans, one for
    this plan alone (resources declared alike are compared once).

    Raises :class:`UnsupportedField` when a spec uses a field the server does not know,
    and :class:`SpecError` when an external stream is missing or a consumer's stream is
    neither declared nor live.
    """
    problems = unsupported_fields(specs, live.server)
    if problems:
        raise UnsupportedField(problems)
    total = StreamPlan(problems=_live_origin_problems(specs, live))
    memo = memo or Memo(b"this plan")
    for group in group_streams(specs, live):
        part = plan_stream(
            group,
            live.server,
            prune=prune,
            ownership=ownership,
            migrate=migrate,
            memo=memo,
            migration=migration,
            lifecycle=lifecycle,
        )
        total.problems += part.problems
        total.steps += part.steps
        total.unchanged += part.unchanged
        total.unmanaged += part.unmanaged
        total.orphans += part.orphans
        total.foreign += part.foreign
        total.observed += part.observed
    total.problems += live_problems(specs, total.steps, live)
    if total.problems:
        raise SpecError(total.problems)
    return Plan(
        server=live.server,
        changes=tuple(step for wave in order_waves(total.steps) for step in wave),
        unchanged=tuple(sorted(total.unchanged, key=sort_key)),
        unmanaged=tuple(sorted(total.unmanaged, key=sort_key)),
        orphans=tuple(sorted(total.orphans, key=sort_key)),
        foreign=tuple(sorted(total.foreign, key=sort_key)),
        owner=ownership.owner,
        observed=tuple(sorted(total.observed, key=sort_key)),
    )


def removal(ref: ResourceRef, live: LiveState, lifecycle: Lifecycle = MANAGE) -> Plan:
    """The plan that deletes the one live resource ``ref`` (Pulumi's destroy; empty when
    the server does not hold it): the step ``--prune`` plans for it, with the same loss
    and the same protections (lifecycle, the protection its live config records, a
    protected consumer going with its stream, an interest stream's messages)."""
    group = next((g for g in group_streams((), live) if g.name == ref.stream_name), None)
    raw = None
    if group is not None and group.live is not None:
        raw = group.live_consumers.get(ref.name) if ref.is_child else group.live
    if group is None or raw is None:
        return Plan(server=live.server)
    step: Step = _deletion(ref, live_config(ref.kind, raw, live.server), group)
    step = _prevented(step, _protection(step, None, group, lifecycle))
    return Plan(server=live.server, changes=(step,))


# --- lifecycles -------------------------------------------------------------------------


def governed(specs: Sequence[Spec], lifecycle: Lifecycle) -> list[Spec]:
    """``specs`` with an environment's ``lifecycle`` merged into each one's (safety
    wins: :meth:`Lifecycle.merged`); a spec that already has it is kept as it is (the
    plan memo digests each spec object once)."""
    merged: dict[Lifecycle, Lifecycle] = {}

    def one(spec: Spec) -> Spec:
        own = spec.lifecycle
        if own not in merged:
            merged[own] = own.merged(lifecycle)
        return spec if merged[own] == own else spec.with_lifecycle(merged[own])

    return [one(spec) for spec in specs]


def _with_lifecycle(group: StreamGroup, lifecycle: Lifecycle) -> StreamGroup:
    """``group`` with the environment's ``lifecycle`` merged into each spec's."""
    before = [*((group.declared,) if group.declared else ()), *group.consumers]
    specs = governed(before, lifecycle)
    if all(new is old for new, old in zip(specs, before, strict=True)):
        return group  # merged already (run.plan_with merges once, before the memo)
    declared = specs.pop(0) if group.declared is not None else None
    return replace(group, declared=declared, consumers=tuple(specs))


def _ignores(group: StreamGroup) -> bool:
    """Whether a spec of ``group`` has ``ignore_changes``."""
    specs = (*((group.declared,) if group.declared else ()), *group.consumers)
    return any(spec.lifecycle.ignore_changes for spec in specs)


def _salt(spec: Spec) -> bytes:
    """What a spec's lifecycle adds to its memo key (its desired metadata records the
    protection, and where): nothing for the default."""
    return b"" if spec.lifecycle.is_default else _lifecycle_salt(spec.lifecycle)


@functools.lru_cache(maxsize=256)
def _lifecycle_salt(lifecycle: Lifecycle) -> bytes:
    return b"P" + repr(sorted(lifecycle.to_json().items())).encode()


#: Fields that name a resource: taken from the spec even under ``ignore_changes: all``.
_NAMING_FIELDS = frozenset({"name", "durable_name"})


def _ignoring(spec: Spec, raw: LiveConfig) -> Spec:
    """``spec`` with its ``ignore_changes`` fields as the live config ``raw`` holds them
    (absent when it has none), so they never differ and an update sends them back as
    they are; defaults derived from them follow the live values too. The tool's own
    metadata keys (owner, protection) are added again by ``desired_config``."""
    lifecycle = spec.lifecycle
    if not lifecycle.ignore_changes:
        return spec
    live = bucket_config(spec.kind, spec.name, raw) if spec.ref.is_bucket else raw
    if lifecycle.ignores_all:
        config = {k: v for k, v in live.items() if k not in _NAMING_FIELDS}
    else:
        ignored = lifecycle.ignore_changes
        config = {k: v for k, v in spec.config.items() if k not in ignored}
        config.update((k, live[k]) for k in ignored if k in live)
    for key in _NAMING_FIELDS & set(spec.config):
        config[key] = spec.config[key]
    return replace(spec, config=config)


def _settled(desired: LiveConfig, current: LiveConfig) -> LiveConfig:
    """``desired`` with the protection the server records at another line taken as it
    is there: the same protection (no update each time a spec file's lines move)."""
    mine = desired.get("metadata") or {}
    theirs = current.get("metadata") or {}
    if PROTECT_KEY in mine and PROTECT_KEY in theirs and mine[PROTECT_KEY] != theirs[PROTECT_KEY]:
        return {**desired, "metadata": {**mine, PROTECT_KEY: theirs[PROTECT_KEY]}}
    return desired


def observe_reason(lifecycle: Lifecycle, *, missing: bool) -> str:
    """What the plan says of a resource in ``mode: observe`` that differs."""
    said = f"lifecycle mode observe ({lifecycle.observed_at}): never written"
    return said + ("; not on the server: not created" if missing else "; differences are drift")


def _observed(entry: PlanEntry, spec: Spec, why: str = "") -> PlanEntry:
    """A step for an observed resource as a note saying how it differs (``why``: the
    reason, by default :func:`observe_reason`); notes stay as they are."""
    if not isinstance(entry, Create | Update | Replace | Migrate):
        return entry
    missing = isinstance(entry, Create) and entry.live is None
    fields = entry.fields
    if isinstance(entry, Create) and entry.live is not None:  # its stream is replaced
        fields = tuple(diff_configs(entry.config, entry.live))
    return Observed(
        **_identity(spec),
        fields=fields,
        reasons=(why or observe_reason(spec.lifecycle, missing=missing),),
        missing=missing,
    )


def _governed(out: StreamPlan, group: StreamGroup, lifecycle: Lifecycle) -> StreamPlan:
    """``out`` with the lifecycles of ``group`` applied: observed consumers' steps become
    notes, and every step that :func:`destroys` a protected resource is marked
    ``prevented`` (the executor refuses the whole plan), saying why."""
    consumers = {spec.name: spec for spec in group.consumers}
    declared = group.declared
    stream_missing = declared is not None and declared.lifecycle.observe and group.live is None
    steps: list[Step] = []
    for step in out.steps:
        spec = consumers.get(step.name) if step.kind == "Consumer" else declared
        if spec is not None and step.kind == "Consumer" and spec.lifecycle.observe:
            out.add(_observed(step, spec))
        elif spec is not None and step.kind == "Consumer" and stream_missing:
            why = f"stream {group.name} is observed and not on the server: not created"
            out.add(_observed(step, spec, why))
        else:
            steps.append(_prevented(step, _protection(step, spec, group, lifecycle)))
    out.steps = steps
    out.orphans = [_protected_orphan(o, group, lifecycle) for o in out.orphans]
    return out


def _prevented(step: Step, why: str) -> Step:
    """``step`` marked as no flag allows it (``why``); a replace no longer says that
    ``--migrate`` would keep its messages (a migration is prevented too)."""
    if not why:
        return step
    reasons = tuple(r for r in step.reasons if r != MIGRATE_HINT)
    return replace(step, prevented=why, reasons=(*reasons, why))


def _protection(step: Step, spec: Spec | None, group: StreamGroup, lifecycle: Lifecycle) -> str:
    """Why ``step`` may not destroy its resource (empty: it may): its lifecycle (the
    spec's merged with the environment's), the environment's for an undeclared
    resource, the protection its live config records, or, for a stream, a protected or
    observed consumer that would go with it; for a consumer, the messages its protected
    or observed stream keeps for it (:func:`holding`)."""
    own = lifecycle if spec is None else spec.lifecycle
    if step.ref.is_child:
        stream = lifecycle if group.declared is None else group.declared.lifecycle
        if held := holding(step, group.live, stream) or _expiring(step, own):
            return held
    if not destroys(step):
        return ""
    if own.prevent_destroy:
        return f"prevented by lifecycle prevent_destroy ({own.protected_at}); no flag allows this"
    at = recorded_protection(step.live)
    if at is not None:
        return recorded_reason(at)
    if step.ref.is_child:
        return ""
    for consumer in group.consumers:
        if consumer.lifecycle.prevent_destroy or consumer.lifecycle.observe:
            setting = "prevent_destroy" if consumer.lifecycle.prevent_destroy else "mode observe"
            return (
                f"prevented: its consumer {consumer.name} has lifecycle {setting} and would "
                "go with it; no flag allows this"
            )
    for name, raw in sorted(group.live_consumers.items()):
        at = recorded_protection(raw)
        if at is not None:
            return f"prevented: its consumer {name} would go with it; {recorded_reason(at)}"
    return ""


def _expiring(step: Step, own: Lifecycle) -> str:
    """Why a protected consumer may not be written with an ``inactive_threshold``
    (empty: it may): the server deletes a consumer left without a client that long."""
    if not own.prevent_destroy or step.kind != "Consumer":
        return ""
    if not isinstance(step, Create | Update | Replace) or not step.config.get("inactive_threshold"):
        return ""
    return (
        f"prevented by lifecycle prevent_destroy ({own.protected_at}): with inactive_threshold "
        "the server deletes this consumer when no client uses it that long; no flag allows this"
    )


#: Consumer fields whose update changes which messages an interest stream keeps for it.
INTEREST_FIELDS = frozenset({"filter_subject", "filter_subjects"})


def holding(step: Step, stream: LiveConfig | None, lifecycle: Lifecycle = MANAGE) -> str:
    """Why ``step`` may not delete, replace or narrow a consumer (empty: it may): its
    stream (``stream``: the live config; ``lifecycle``: its declared one, if known) is
    protected or observed, and keeps a message only while a consumer still needs it
    (retention ``interest``), so the consumer's delete deletes the messages only it
    still needed (measured: 10 messages acknowledged by one consumer, gone with the
    other), and so does an update of its filter (:data:`INTEREST_FIELDS`). Pulumi's
    destroy asks it too (its delete step is made without the planner)."""
    narrows = isinstance(step, Update) and any(
        change.path.split(".")[0] in INTEREST_FIELDS for change in step.fields
    )
    if (
        step.kind != "Consumer"
        or not (destroys(step) or narrows)
        or (stream or {}).get("retention") != "interest"
    ):
        return ""
    at = recorded_protection(stream)
    held = (
        f"prevented: stream {step.stream} keeps a message only while a consumer needs it "
        f"(retention interest): this would delete the messages only {step.name} still needs"
    )
    if lifecycle.prevent_destroy:
        protected = f"lifecycle prevent_destroy ({lifecycle.protected_at})"
        return f"{held}; the stream has {protected}; no flag allows this"
    if lifecycle.observe:  # deleting its messages would write the observed stream
        observed = f"lifecycle mode observe ({lifecycle.observed_at}): never written"
        return f"{held}; the stream has {observed}; no flag allows this"
    return "" if at is None else f"{held}; the stream: {recorded_reason(at)}"


def _protected_orphan(orphan: Orphan, group: StreamGroup, lifecycle: Lifecycle) -> Orphan:
    """An orphan that is protected says so: --prune will not delete it (the reason its
    delete would be prevented for: :func:`_protection`)."""
    if lifecycle.prevent_destroy:
        why = f"prevented by the environment's lifecycle prevent_destroy ({lifecycle.protected_at})"
    else:
        why = _protection(Delete(ref=orphan.ref, live=orphan.live), None, group, lifecycle)
    return protected_orphan(orphan, why)


def protected_orphan(orphan: Orphan, why: str) -> Orphan:
    """``orphan`` marked as --prune will not delete it (``why``: the reason its delete
    would be prevented for; empty: it is not protected). The renderers list it apart
    from what --prune deletes (``Orphan.prevented``)."""
    if not why:
        return orphan
    said = f"--prune will not delete it: {why}"
    return replace(orphan, prevented=why, reasons=(*orphan.reasons, said))


def governed_entries(
    part: StreamPlan, lifecycle: Lifecycle, specs: Sequence[Spec], live: LiveState
) -> StreamPlan:
    """``part`` (the KeyValue entries') with their buckets' lifecycles applied: an entry
    follows its bucket's (the spec's, merged with the environment's ``lifecycle`` by
    :func:`governed`; the environment's for a bucket declared elsewhere). An observed
    bucket's entries get no step (notes); a protected bucket's entries (its lifecycle,
    or the protection its stream records on the server) are never pruned: the delete is
    ``prevented``, the orphan says ``--prune`` will not delete it. Declared values are
    still written in a protected bucket (compare-and-set, as any update)."""
    buckets = {spec.name: spec.lifecycle for spec in specs if spec.kind == "KeyValue"}
    out = replace(part, steps=[], orphans=[], observed=list(part.observed))
    for step in part.steps:
        own = buckets.get(str(step.stream), lifecycle)
        if own.observe:
            missing = isinstance(step, Create)
            why = observe_reason(own, missing=missing)
            note = Observed(ref=step.ref, source=step.source, fields=step.fields, reasons=(why,))
            out.add(replace(note, missing=missing))
        else:
            why = _entry_protection(str(step.stream), own, live) if destroys(step) else ""
            out.add(_prevented(step, why))
    for orphan in part.orphans:
        bucket = str(orphan.stream)
        why = _entry_protection(bucket, buckets.get(bucket, lifecycle), live)
        out.orphans.append(protected_orphan(orphan, why))
    return out


def _entry_protection(bucket: str, own: Lifecycle, live: LiveState) -> str:
    """Why an entry of ``bucket`` may not be deleted (empty: it may): the bucket's
    lifecycle (``own``), or the protection its stream records on the server."""
    if own.prevent_destroy:
        return (
            f"prevented by lifecycle prevent_destroy of bucket {bucket} ({own.protected_at}); "
            "no flag allows this"
        )
    at = recorded_protection(live.streams.get(stream_of("KeyValue", bucket)))
    return "" if at is None else f"bucket {bucket}: {recorded_reason(at)}"
