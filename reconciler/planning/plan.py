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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.door_words import Allowance, say
from reconciler.errors import Problem, RefusalKind, SpecError, UnsupportedField
from reconciler.identity import ResourceRef, is_reserved
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
    copies_back,
    copy_bytes,
    finished,
    is_temp,
    overflow,
    refused_fields,
    serving_note,
    temp_name,
    unheld,
)
from reconciler.model.normalize import (
    CONSUMER_NAME_FIELDS,
    DesiredConfigs,
    desired_config,
    is_managed,
    live_config,
    owner_of,
    preserved_fields,
    unsupported_fields,
    with_claim_kept,
)
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.model.values import written_as
from reconciler.planning.groups import (
    LiveConfig,
    StreamGroup,
    StreamPlan,
    choose_with,
    migrate_hint,
    migrating,
)
from reconciler.planning.groups import identity as _identity
from reconciler.planning.groups import unchanged as _unchanged
from reconciler.planning.lifecycles import (
    governed,
    governed_entries,
    governed_part,
    holding,
    ignores,
    ignoring,
    observed,
    prevented,
    protection,
    salt,
    settled,
    with_lifecycle,
)
from reconciler.planning.live_checks import live_problems
from reconciler.planning.memo import Memo
from reconciler.planning.steps import (
    Check,
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
    order_waves,
    sort_key,
)
from reconciler.specs.checks import mirror_direct_problem
from reconciler.specs.lifecycle import MANAGE, Lifecycle
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
        take_over = say(Allowance.TAKE_OVER)
        message = (
            f"{spec.ref.label} is managed by owner {holder!r}, not {self.owner!r}: declare it "
            "in that project"
            + (f", or re-run with {take_over} to take it over" if take_over else "")
        )
        return Problem(spec.source, "", message), ()


#: The default owner, taking nothing over.
DEFAULT_OWNERSHIP = Ownership()


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
    desired: DesiredConfigs | None = None,
) -> StreamPlan:
    """The entries of one stream and its consumers (pure), each resource's lifecycle
    honoured (``lifecycle``: the environment's, merged into every spec's; see
    :func:`governed_part`). ``migrate``: a stream whose
    change an update cannot make is migrated (its messages kept), not replaced; and the
    consent an interrupted migration needs. ``migration``: the way out of an interrupted
    migration whose target the specs no longer declare (:data:`CHOICES`). ``memo``:
    what earlier plans found unchanged (:mod:`reconciler.planning.memo`); what this plan
    finds unchanged is added to it. ``desired``: the plan's desired configs, each
    consumer shape worked out once (:class:`DesiredConfigs`; else this stream's own)."""
    if not lifecycle.is_default:
        group = with_lifecycle(group, lifecycle)
        prune = prune and not lifecycle.observe  # an observed environment is never written
    if ignores(group):
        memo = None  # what it plans depends on live values the memo's digests skip
    out = _stream_entries(
        group,
        server,
        prune=prune,
        ownership=ownership,
        migrate=migrate,
        memo=memo,
        migration=migration,
        desired=DesiredConfigs() if desired is None else desired,
    )
    return governed_part(out, group, lifecycle)


def _stream_entries(
    group: StreamGroup,
    server: ServerInfo,
    *,
    prune: bool,
    ownership: Ownership,
    migrate: bool,
    memo: Memo | None,
    migration: str | None,
    desired: DesiredConfigs,
) -> StreamPlan:
    """The entries of one stream and its consumers, lifecycles aside but for
    ``ignore_changes`` (:func:`ignoring`) and an observed stream's entry."""
    resumed = _resumed(group, server, ownership, migrate=migrate, choice=migration)
    if resumed is not None:
        return StreamPlan(steps=[resumed])
    if (temporary := _temporary(group)) is not None:
        return temporary
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
            else memo.key(spec, raw, basis + salt(spec))
        )
        if memo is not None and key is not None and memo.unchanged(key):
            out.add(_unchanged(spec))
            continue
        if stream_config is None:
            assert declared is not None  # stream_problems: declared or live
            stream_config = desired_config(declared, server, owner=owner)
        heeded = spec if raw is None or replaced else ignoring(spec, raw)  # created: declared
        wanted = desired.of(heeded, server, stream_config=stream_config, owner=owner)
        if raw is None or replaced:
            reasons = (f"re-created: stream {group.name} is replaced",) if raw else ()
            if bare is None:
                bare = _bare(spec, server, stream_config)
            created = _created(spec, wanted, bare)
            current = None if raw is None else live_config(spec.kind, raw, server)
            out.add(
                Create(
                    **_identity(spec), fields=created, reasons=reasons, config=wanted, live=current
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
                _consumer_replaced(_compare(spec, wanted, raw, server, None, notes), group),
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
        return (observed(created, declared) if declared.lifecycle.observe else created), desired
    key = None if memo is None else memo.key(declared, live, salt(declared))
    if memo is not None and key is not None and memo.unchanged(key):
        return _unchanged(declared), None
    desired = desired_config(ignoring(declared, live), server, owner=ownership.owner)
    refusal, notes = ownership.claim(declared, live)
    if refusal is not None:
        return refusal, desired
    entry: PlanEntry = _compare(declared, desired, live, server, group.state, notes)
    if declared.lifecycle.observe:
        return observed(entry, declared), desired
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
    refusing = serving_note(entry.config, entry.live, state, can_mirror(server))
    return Migrate(
        ref=entry.ref,
        fields=entry.fields,
        reasons=(
            *entry.reasons,
            *(fate.note for fate in fates),
            *((refusing,) if refusing else ()),
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


def _temporary(group: StreamGroup) -> StreamPlan | None:
    """The plan of a migration's temporary stream (a live stream carrying a record),
    which no spec may declare; None for any other stream.

    Seen alone (no spec), nothing is planned: its migration is planned with the stream
    it migrates (the fleet's snapshots show it too); an ``external`` spec is planned as
    any (nothing changes such a stream). Declared, it was planned as a stream of its
    own: its update took away the record and the subjects of the one stream holding
    every message (publishes to ORDERS got "no responders", the migration failed, and
    no plan knew of it any more)."""
    declared = group.declared
    if group.live is None or not is_temp(group.live) or (declared and declared.external):
        return None
    if declared is None:
        return StreamPlan()
    name = group.name
    origin = name.removeprefix(TEMP_PREFIX) if name.startswith(TEMP_PREFIX) else ""
    message = (
        f"stream {name} on the server is the temporary stream of a migration"
        f"{f' of stream {origin}' if origin else ''} (its metadata holds a migration "
        f"record): no spec may declare it. Finish the migration ({migrating()}) or roll it "
        "back first, or name this stream otherwise"
    )
    return StreamPlan(problems=[Problem(declared.where("name"), "name", message)])


def _migratable(entry: Replace) -> Replace:
    """A stream replace that a migration could make says so."""
    if blockers(entry.config, entry.live):
        return entry
    return _with_reasons(entry, (migrate_hint(),))


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
    reasons = [f"interrupted in phase {record.phase}: {migrating()} finishes the migration"]
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
            f"stream {group.name}: an interrupted migration is resumed only with "
            f"{say(Allowance.MIGRATE)} (the consent it started with)"
        )
    if way is None:
        return (
            f"stream {group.name}: the specs changed after its migration stopped; choose "
            f"{choose_with()} resume (finish to its recorded target), rollback (back to the "
            "old config) or continue (on to the declared config)"
        )
    if way != "resume" and finished(record, group.live):
        return (
            f"stream {group.name}: its migration has finished but for deleting "
            f"{temp_name(group.name)}: only {choose_with()} resume"
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
    claims it (:func:`claimed_losses`: the record is data, its old config may be forged).
    A limit the new stream meets by refusing the copy back (``discard: new``) deletes
    nothing: the copy would stall there, which the plan refuses
    (``execution.migration_checks.stall_problems``); before, a subject over
    ``max_msgs_per_subject`` with ``discard_new_per_subject`` was a loss ("deletes at
    least 3")."""
    old = live_config(declared.kind, record.origin, server)
    states = [s for s in (group.state, group.migration_state) if s is not None]
    state = max(states, key=lambda s: s.messages, default=None)
    new = live_config(declared.kind, config, server)
    refused = refused_fields(new) if copies_back(record, config) else frozenset()
    found = claimed_losses(new, old, state, back=new == old)
    return tuple(loss for loss in found if loss.field not in refused)


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
    changes = tuple(diff_configs(settled(desired, current), current))
    config = with_claim_kept({**preserve, **desired}, raw)
    if not changes:
        # Nothing to apply: the configs are not kept (at 100k resources they would be
        # most of the plan's memory, and nothing reads them).
        return _unchanged(spec)
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
    declared = set(written_as(spec.kind, spec.config))
    if spec.kind == "Consumer":
        declared.difference_update(CONSUMER_NAME_FIELDS)
    return tuple(
        c if c.before is None else FieldChange(c.path, None, c.after)
        for c in diff_configs(desired, bare, only=declared)
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
    desired = DesiredConfigs()
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
            desired=desired,
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


def removal(
    ref: ResourceRef,
    live: LiveState,
    lifecycle: Lifecycle = MANAGE,
    owner: str = DEFAULT_OWNER,
    *,
    declared: Spec | None = None,
) -> Plan:
    """The plan that deletes the one live resource ``ref`` (Pulumi's destroy; empty when
    the server does not hold it): the step ``--prune`` plans for it, with the same loss
    and the same protections (lifecycle, the protection its live config records, a
    protected consumer going with its stream, an interest stream's messages). A live
    resource another project manages (its marker names another ``owner``) is no longer
    the one this project made: no step, and a check refusing it (``--prune`` never
    deletes another owner's resource either). Nor is one without the managed-by marker
    (made again outside this tool since): ``--prune`` leaves it alone as unmanaged, and
    so does a removal, by the same rule (:func:`_undeclared`). ``declared``: the spec the
    resource was last declared with (Pulumi's recorded inputs), whose ``lifecycle``
    governs its delete as it governs every step planned for it: ``prevent_destroy``
    prevents it (a protection record removed from the server by hand or not),
    ``mode: observe`` leaves the resource as it is (no step; an ``Observed`` note)."""
    group = next((g for g in group_streams((), live) if g.name == ref.stream_name), None)
    raw = None
    if group is not None and group.live is not None:
        raw = group.live_consumers.get(ref.name) if ref.is_child else group.live
    if group is None or raw is None:
        return Plan(server=live.server, owner=owner)
    own = lifecycle if declared is None else declared.lifecycle.merged(lifecycle)
    if own.observe:  # never written, as an observed environment is never pruned
        why = f"lifecycle mode observe ({own.observed_at}): never written; left on the server"
        source = None if declared is None else declared.source
        note = Observed(ref=ref, source=source, reasons=(why,))
        return Plan(server=live.server, owner=owner, observed=(note,))
    found = _undeclared(ref, raw, live.server, group, prune=True, owner=owner)
    if isinstance(found, Foreign | Unmanaged):
        whose = (
            f"is managed by owner {found.owner!r}, not {owner!r}: another project's resource"
            if isinstance(found, Foreign)
            else "does not carry this tool's managed-by marker: not the resource this "
            "project made (made again outside this tool since?), it"
        )
        message = f"{ref.label} {whose} is never deleted; nothing was changed"
        refused = Check(RefusalKind.INVALID, (Problem(None, "", message),))
        return Plan(server=live.server, owner=owner, checks=(refused,))
    assert isinstance(found, Delete)  # prune=True: this owner's resource is deleted
    step: Step = prevented(found, protection(found, declared, group, lifecycle))
    return Plan(server=live.server, changes=(step,), owner=owner)
