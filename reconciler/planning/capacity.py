"""What a plan asks of the account, summed before anything is applied (pure).

The server reserves room for a stream when it is created or updated: its ``max_bytes``
(times its replicas on an account without tiers; a tier's limit already counts its
replicas) against the account's ``max_storage``/``max_memory``, the stream count
against ``max_streams``, and it refuses a stream without ``max_bytes`` on a
``max_bytes_required`` account. :func:`assess` adds up the live streams (before) and the
streams as the plan leaves them (after) per storage type and tier, and finds, per
resource, what the server would refuse: so a plan is refused before its first step, not
half-way. The rules, measured on nats-server 2.10 to 2.15 (docs/capacity.md):

- a stream with ``max_bytes`` -1 reserves nothing, but the server still needs one byte
  free to create it (a full account refuses even an unlimited stream);
- deletes and replaces free their reservation (the plan's end state is what counts);
- ``max_consumers`` of an account limits the consumers of each stream, not their sum;
- a migration's temporary stream has no ``max_bytes`` and is one more stream while the
  migration runs; from the handover on, a ``discard: new`` target's ``max_bytes`` is
  its own (``model.migration.handover_bytes``), reserved in the old stream's storage
  beside the old stream, then beside the new one (counted in the peak);
- an over-commit is an error only when the plan adds to it: an account already over a
  limit lowered later blocks nothing the plan does not make worse;
- ending within 10% of a limit the plan adds to is a warning; -1 (unlimited) never warns;
- the server's own ``max_file_store``/``max_memory_store`` hold against every account's
  reservations (its ``/jsz``: :class:`ServerRoom`), by the same rules; where they were
  not read, the plan says they are unknown (``Capacity.server``), never unlimited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.door_words import Allowance, say
from reconciler.errors import Problem
from reconciler.identity import BUCKET_KINDS, EXPECTED_REVISION, EXPECTED_STREAM
from reconciler.locations import Location
from reconciler.model.migration import Record, copies_back, handover_bytes, temp_name
from reconciler.model.state import LiveState
from reconciler.planning.steps import Create, Delete, Migrate, Plan, Replace, Step, Update
from reconciler.planning.totals import STORAGES, Capacity, Total
from reconciler.specs.spec import Spec
from reconciler.specs.units import approx_size

_BYTES_KEYS = {"file": ("max_storage", "storage"), "memory": ("max_memory", "memory")}
_SERVER_KEYS = {"file": "max_file_store", "memory": "max_memory_store"}
_STREAM_BYTES_KEYS = {"file": "storage_max_stream_bytes", "memory": "memory_max_stream_bytes"}


@dataclass(frozen=True)
class Scope:
    """The limits that apply to one tier's streams (``tier`` None: the whole account),
    as ``$JS.API.INFO`` reports them; None where unlimited."""

    tier: str | None
    bytes_limit: Mapping[str, int | None]  # storage -> max_storage / max_memory
    used: Mapping[str, int]  # storage -> bytes stored now (all replicas)
    max_streams: int | None = None
    max_consumers: int | None = None  # per stream (the server counts each stream's)
    max_stream_bytes: Mapping[str, int | None] = field(default_factory=dict)
    max_bytes_required: bool = False
    max_ack_pending: int | None = None  # per consumer (a consumer leaving it out gets it)


@dataclass(frozen=True)
class Assessment:
    """:func:`assess`'s answer: the totals and warnings, and the errors (refused)."""

    capacity: Capacity
    errors: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class ServerRoom:
    """The server's own JetStream limits (``max_file_store``, ``max_memory_store``) and
    what every account has reserved on it, from its ``/jsz``; or, with ``limits``
    empty, why they are unknown (``said``)."""

    said: str
    limits: Mapping[str, int] = field(default_factory=dict)  # storage -> bytes
    reserved: Mapping[str, int] = field(default_factory=dict)  # every account's
    used: Mapping[str, int] = field(default_factory=dict)  # bytes stored now

    @property
    def known(self) -> bool:
        return bool(self.limits)


#: Said when nothing named a way to read the server's limits.
UNREAD = "not read; give --monitor URL or --system-creds/--system-context to read them"


def server_room(jsz: Mapping[str, Any], source: str) -> ServerRoom:
    """A server's ``/jsz`` answer as a :class:`ServerRoom` (unknown when it has no
    JetStream limits of its own: it is not a JetStream server)."""
    config = jsz.get("config")
    config = config if isinstance(config, Mapping) else {}
    limits = {
        storage: value
        for storage, key in (("file", "max_storage"), ("memory", "max_memory"))
        if type(value := config.get(key)) is int and value >= 0
    }
    if not limits:
        return ServerRoom(f"{source} reports no JetStream limits of the server's own")

    def count(key: str) -> int:
        value = jsz.get(key)
        return value if type(value) is int and value > 0 else 0

    return ServerRoom(
        f"read from {source}",
        limits,
        {"file": count("reserved_storage"), "memory": count("reserved_memory")},
        {"file": count("storage"), "memory": count("memory")},
    )


def _limit(value: Any, *, zero_is_none: bool) -> int | None:
    """A limit as the server reads it: negative (or, for counts, 0) is no limit."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if value < 0 or (zero_is_none and value == 0):
        return None
    return value


def _scope(tier: str | None, source: Mapping[str, Any]) -> Scope:
    limits = source.get("limits") or {}
    return Scope(
        tier=tier,
        bytes_limit={
            storage: _limit(limits.get(key), zero_is_none=False)
            for storage, (key, _) in _BYTES_KEYS.items()
        },
        used={storage: int(source.get(used) or 0) for storage, (_, used) in _BYTES_KEYS.items()},
        max_streams=_limit(limits.get("max_streams"), zero_is_none=True),
        max_consumers=_limit(limits.get("max_consumers"), zero_is_none=True),
        max_stream_bytes={
            storage: _limit(limits.get(key), zero_is_none=True)
            for storage, key in _STREAM_BYTES_KEYS.items()
        },
        max_bytes_required=bool(limits.get("max_bytes_required")),
        max_ack_pending=_limit(limits.get("max_ack_pending"), zero_is_none=True),
    )


def scopes(account: Mapping[str, Any]) -> dict[str | None, Scope]:
    """The account's limits from its ``$JS.API.INFO`` answer: one scope per tier
    (``R1``, ``R3``) when it has tiered limits, else one (``None``) for the account."""
    tiers = account.get("tiers")
    if isinstance(tiers, Mapping):
        tiered = {
            str(name): _scope(str(name), tier)
            for name, tier in tiers.items()
            if isinstance(tier, Mapping) and isinstance(tier.get("limits"), Mapping)
        }
        if tiered:
            return dict(sorted(tiered.items()))
    return {None: _scope(None, account)}


def facts(config: Mapping[str, Any]) -> tuple[str, int, int]:
    """The three fields capacity reads from a stream config, read once: its storage
    (``file`` or ``memory``), replicas (1 when unset) and ``max_bytes`` (0 when
    unlimited: -1, 0 or unset reserve nothing)."""
    storage = "memory" if config.get("storage") == "memory" else "file"
    replicas = config.get("num_replicas")
    if type(replicas) is not int or replicas < 1:
        replicas = 1
    size = config.get("max_bytes")
    return storage, replicas, size if type(size) is int and size > 0 else 0


def replicas_of(config: Mapping[str, Any]) -> int:
    return facts(config)[1]


def tier_of(config: Mapping[str, Any], tiered: bool) -> str | None:
    """The tier a stream counts in (``R3``), or None on an account without tiers."""
    return _tier(facts(config)[1], tiered)


def _tier(replicas: int, tiered: bool) -> str | None:
    return f"R{replicas}" if tiered else None


def storage_of(config: Mapping[str, Any]) -> str:
    return facts(config)[0]


def max_bytes_of(config: Mapping[str, Any]) -> int:
    """The stream's ``max_bytes``; 0 or less (``-1``) is unlimited and reserves nothing."""
    return facts(config)[2]


def _reserved(replicas: int, size: int, tiered: bool) -> int:
    return size if tiered else size * replicas


def reservation(config: Mapping[str, Any], tiered: bool) -> int:
    """What the server reserves for a stream: ``max_bytes`` times its replicas on an
    account without tiers, ``max_bytes`` alone in a tier (its limit counts replicas)."""
    _, replicas, size = facts(config)
    return _reserved(replicas, size, tiered)


def after_streams(
    live: Mapping[str, Mapping[str, Any]], steps: Iterable[Step]
) -> dict[str, Mapping[str, Any]]:
    """Every stream's config once the plan is applied: the live ones, changed, created
    or deleted by the steps (a bucket's steps carry its stream's config)."""
    after = dict(live)
    for step in steps:
        if step.ref.is_child:
            continue
        if isinstance(step, Delete):
            after.pop(step.stream_name, None)
        else:
            after[step.stream_name] = step.config
    return after


Sums = dict[tuple[str, Any], int]


def _share(config: Mapping[str, Any] | None, tiered: bool) -> Sums:
    """One stream's part: bytes reserved per (storage, tier), and (``streams``, tier): 1."""
    if config is None:
        return {}
    tier = tier_of(config, tiered)
    return {(storage_of(config), tier): reservation(config, tiered), ("streams", tier): 1}


def _sums(streams: Mapping[str, Mapping[str, Any]], tiered: bool) -> Sums:
    """Reserved bytes per (storage, tier), and streams per (``streams``, tier): what
    :func:`_share` gives each stream, added up with one read of each config (at 100,000
    live streams this is a plan's one pass over them all)."""
    sums: Sums = {}
    for config in streams.values():
        storage, replicas, size = facts(config)
        tier = _tier(replicas, tiered)
        if size:
            key = (storage, tier)
            sums[key] = sums.get(key, 0) + _reserved(replicas, size, tiered)
        count = ("streams", tier)
        sums[count] = sums.get(count, 0) + 1
    return sums


def _moved(
    before: Sums, plan: Plan, live: LiveState, tiered: bool, own: Iterable[Mapping[str, Any]]
) -> tuple[Sums, Sums]:
    """The sums once the plan is applied, and at its peak: apply runs every create,
    update and replace before any delete (``steps.order_waves``), and the steps of a
    wave at once, so until the deletes a changed stream may hold the larger of its old
    and new reservation, and a deleted one still holds its own. ``own``: the streams
    apply makes before its steps (its lock's bucket), counted from the start."""
    after, peak = dict(before), dict(before)
    for config in own:
        for key, value in _share(config, tiered).items():
            after[key] = after.get(key, 0) + value
            peak[key] = peak.get(key, 0) + value
    for step in plan.changes:
        if step.ref.is_child:
            continue
        old = _share(live.streams.get(step.stream_name), tiered)
        new = {} if isinstance(step, Delete) else _share(step.config, tiered)
        for key in {*old, *new}:
            after[key] = after.get(key, 0) + new.get(key, 0) - old.get(key, 0)
            peak[key] = peak.get(key, 0) + max(new.get(key, 0) - old.get(key, 0), 0)
        for key, value in _handover(step, live, tiered).items():
            peak[key] = peak.get(key, 0) + value
    return after, peak


def _handover(step: Step, live: LiveState, tiered: bool) -> Sums:
    """What a migration's temporary stream reserves once it takes the publishes, more
    than it reserves now: the ``max_bytes`` a ``discard: new`` target gives it
    (:func:`~reconciler.model.migration.handover_bytes`, figured from what the
    migration holds now), in the old stream's storage, replicas and tier, from the
    handover to the end: beside the old stream, then beside the new one (a peak: the
    after figure has no temporary stream). Nothing past the handover (its limits are
    live, counted with the live streams), nor for a rollback before it (the temporary
    stream is deleted)."""
    if not isinstance(step, Migrate) or step.phase not in (None, "copy", "handover"):
        return {}
    temp = None if step.phase is None else live.streams.get(temp_name(step.stream_name))
    record = None if temp is None else Record.of(temp)
    if step.phase is not None and (record is None or not copies_back(record, step.config)):
        return {}
    states = [live.stream_state.get(n) for n in (step.stream_name, temp_name(step.stream_name))]
    held = max((s for s in states if s is not None), key=lambda s: s.messages, default=None)
    storage, replicas, _ = facts(temp if temp is not None else step.live)
    size = handover_bytes(step.config, storage, held, step.mirrors)
    lift = _reserved(replicas, size, tiered) - (reservation(temp, tiered) if temp else 0)
    return {(storage, _tier(replicas, tiered)): lift} if size and lift > 0 else {}


def _totals(
    scoped: Mapping[str | None, Scope],
    before: Sums,
    moved: tuple[Sums, Sums],
    temporary: Mapping[str | None, int],
) -> tuple[Total, ...]:
    after, peak = moved
    totals = []
    tiers = sorted({key[1] for key in (*before, *peak)} | set(scoped), key=lambda t: t or "")
    for tier in tiers:
        scope = scoped.get(tier)
        for what in (*STORAGES, "streams"):
            key = (what, tier)
            if what == "streams":
                limit, used = (scope.max_streams if scope else None), None
                top = peak.get(key, 0) + temporary.get(tier, 0)
            else:
                limit = scope.bytes_limit[what] if scope else None
                used, top = (scope.used[what] if scope else None), peak.get(key, 0)
            figures = (before.get(key, 0), after.get(key, 0), top)
            totals.append(Total(what, tier, *figures, limit=limit, used=used))
    return tuple(totals)


class _Where:
    """A step's spec lines: the field's own line, else the document's."""

    def __init__(self, specs: Iterable[Spec]) -> None:
        self._specs = {spec.ref: spec for spec in specs}

    def __call__(self, step: Step, key: str) -> Location | None:
        spec = self._specs.get(step.ref)
        if spec is None:
            return step.source
        if key == "num_replicas" and spec.kind in BUCKET_KINDS:
            key = "replicas"
        return spec.where(key)

    def declared(self, step: Building) -> Mapping[str, Any]:
        """The fields the spec declares (the step's config has defaults filled in)."""
        spec = self._specs.get(step.ref)
        return step.config if spec is None else spec.config


def assess(
    plan: Plan,
    live: LiveState,
    account: Mapping[str, Any],
    specs: Sequence[Spec] = (),
    own: Mapping[str, Mapping[str, Any]] | None = None,
    server: ServerRoom | None = None,
) -> Assessment:
    """The plan's totals against the account's limits (``account``: its
    ``$JS.API.INFO`` answer) and, where known, the server's own (``server``), with what
    the server would refuse as errors naming each resource and its spec's line.
    ``own``: streams (name -> config) apply makes itself before its first step when the
    plan changes something (the lock's bucket, when the account has none yet)."""
    own = own if own and plan.changes else {}
    server = server or ServerRoom(UNREAD)
    scoped = scopes(account)
    tiered = None not in scoped
    after = after_streams(live.streams, plan.changes)
    starting = [s for s in plan.changes if isinstance(s, Migrate) and s.phase is None]
    temporary: dict[str | None, int] = {}
    for step in starting:
        tier = tier_of(step.live, tiered)
        temporary[tier] = temporary.get(tier, 0) + 1
    before = _sums(live.streams, tiered)
    totals = _totals(scoped, before, _moved(before, plan, live, tiered, own.values()), temporary)
    totals += _server_totals(server, plan, live, own.values())
    where = _Where(specs)
    errors = [
        *_stream_limits(plan, scoped, tiered, where),
        *_over_committed(plan, live, totals, tiered, where, own),
        *_consumer_limits(plan, live, after, scoped, tiered, where),
        *_ack_pending(plan, after, scoped, tiered, where),
        *_entries_room(plan, live, after),
    ]
    warnings = _near(totals)
    capacity = Capacity(
        totals, tuple(warnings), tuple(sorted(own)), server=server.said, server_known=server.known
    )
    return Assessment(capacity, tuple(errors))


def _server_totals(
    server: ServerRoom, plan: Plan, live: LiveState, own: Iterable[Mapping[str, Any]]
) -> tuple[Total, ...]:
    """The server's reservations (every account's) before, after and at the peak of
    the plan, per storage type: what the plan adds to this account's reservations (a
    single server holds one replica of each stream) on top of what ``/jsz`` says."""
    if not server.known:
        return ()
    before = _sums(live.streams, False)
    after, peak = _moved(before, plan, live, False, own)
    totals = []
    for storage, limit in server.limits.items():
        key = (storage, None)
        now = server.reserved.get(storage, 0)
        moved = (after.get(key, 0) - before.get(key, 0), peak.get(key, 0) - before.get(key, 0))
        figures = (now, max(now + moved[0], 0), max(now + moved[1], 0))
        used = server.used.get(storage)
        totals.append(Total(storage, None, *figures, limit=limit, used=used, scope="server"))
    return tuple(totals)


def _tier_words(tier: str | None) -> str:
    return f" (tier {tier})" if tier else ""


def _whose(total: Total) -> str:
    """Whose limit a total is: ``account's``, or the server's (every account counts)."""
    if total.scope == "server":
        return "server's"
    return f"account's{_tier_words(total.tier)}"


Building = Create | Update | Replace | Migrate


def _made(plan: Plan) -> list[Building]:
    """The streams and buckets the plan creates or changes (with a config)."""
    return [s for s in plan.changes if not s.ref.is_child and not isinstance(s, Delete)]


def _stream_limits(
    plan: Plan, scoped: Mapping[str | None, Scope], tiered: bool, where: _Where
) -> list[Problem]:
    """Per stream or bucket made or changed, and per migration starting: what the
    server would refuse whatever the totals."""
    problems = []
    for step in _made(plan):
        tier = tier_of(step.config, tiered)
        scope = scoped.get(tier)
        if scope is None:
            message = (
                f"{step.label}: {replicas_of(step.config)} replicas, but the account has no "
                f"limits for tier {tier} (it has {', '.join(str(t) for t in scoped)}); "
                "the server would refuse it"
            )
            problems.append(Problem(where(step, "num_replicas"), "num_replicas", message))
        else:
            problems += _one_stream(step, scope, where)
    for migration in plan.changes:
        if isinstance(migration, Migrate) and migration.phase is None:
            scope = scoped.get(tier_of(migration.live, tiered))
            if scope is not None and scope.max_bytes_required:
                message = (
                    f"migrating {migration.label} needs a temporary stream without max_bytes, "
                    "which this account refuses (max_bytes_required); nothing was changed"
                )
                problems.append(Problem(migration.source, "max_bytes", message))
    return problems


def _one_stream(step: Building, scope: Scope, where: _Where) -> list[Problem]:
    """``max_bytes_required``, the largest stream the account allows, and
    ``max_consumers`` above the account's: the server's checks of one config."""
    config, tier = step.config, _tier_words(scope.tier)
    storage, size = storage_of(config), max_bytes_of(config)
    largest = scope.max_stream_bytes.get(storage)
    problems = []
    if scope.max_bytes_required and size == 0:
        message = (
            f"{step.label} sets no max_bytes, but the account{tier} requires every "
            "stream to set it (max_bytes_required)"
        )
        problems.append(Problem(where(step, "max_bytes"), "max_bytes", message))
    elif largest is not None and size > largest:
        message = (
            f"{step.label}: max_bytes {approx_size(size)} is over the largest {storage} "
            f"stream the account{tier} allows ({approx_size(largest)})"
        )
        problems.append(Problem(where(step, "max_bytes"), "max_bytes", message))
    own = config.get("max_consumers")
    if isinstance(own, int) and scope.max_consumers is not None and own > scope.max_consumers:
        message = (
            f"{step.label}: max_consumers {own} is over the account's limit of "
            f"{scope.max_consumers} consumers per stream{tier}"
        )
        problems.append(Problem(where(step, "max_consumers"), "max_consumers", message))
    return problems


def _adds(step: Step, live: LiveState, what: str, tier: str | None, tiered: bool) -> int:
    """What ``step`` adds to one total (bytes reserved, or streams): 0 if nothing; a
    migration's temporary stream's ``max_bytes`` from the handover on included."""
    return _own_adds(step, live, what, tier, tiered) + _handover(step, live, tiered).get(
        (what, tier), 0
    )


def _own_adds(step: Step, live: LiveState, what: str, tier: str | None, tiered: bool) -> int:
    """What ``step``'s own stream adds to one total: 0 if nothing."""
    if step.ref.is_child or isinstance(step, Delete):
        return 0
    config = step.config
    if tier_of(config, tiered) != tier:
        return 0
    old = live.streams.get(step.stream_name)
    same = old is not None and tier_of(old, tiered) == tier
    if what == "streams":
        return 0 if same else 1
    if storage_of(config) != what:
        return 0
    before = reservation(old, tiered) if same and old is not None and storage_of(old) == what else 0
    return max(reservation(config, tiered) - before, 0)


def _over_committed(
    plan: Plan,
    live: LiveState,
    totals: Sequence[Total],
    tiered: bool,
    where: _Where,
    own: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Problem]:
    """Totals over their limit that the plan adds to: one error per resource adding,
    at its spec's line. An unlimited stream created needs one byte free."""
    problems: list[Problem] = []
    account_tiered = tiered
    for total in totals:
        if total.limit is None:
            continue
        tiered = account_tiered and total.scope != "server"  # a server counts replicas
        named = len(problems)
        over = total.peak > total.limit
        full = total.is_bytes and total.peak >= total.limit
        key = (total.what, total.tier)
        lifts = [_handover(s, live, tiered).get(key, 0) for s in plan.changes if over or full]
        steps_peak = total.peak - sum(lifts)  # without the temporary streams' max_bytes
        for step, lift in zip(plan.changes if over or full else (), lifts, strict=True):
            added = _adds(step, live, total.what, total.tier, tiered) if over else 0
            if added:
                owned = sorted(own or {})
                problems.append(_over(step, total, added, where, owned, lift, steps_peak))
            elif full and _unlimited_new(step, total, live, tiered):
                problems.append(_no_byte_left(step, total, where))
            elif full and _temporary_in(step, total, tiered) and total.peak - lift >= total.limit:
                # (made before its own handover reserves its max_bytes)
                problems.append(_no_byte_for_temporary(step, total))
        if len(problems) == named:  # else the plan's own resources say it already
            problems += _own_refused(total, own or {}, tiered)
    return problems


def _own_refused(total: Total, own: Mapping[str, Mapping[str, Any]], tiered: bool) -> list[Problem]:
    """Apply's own streams (``own``: its lock's bucket), made before the plan's first
    step, that the server would refuse: the account's streams already at its limit (err
    10027) or, without ``max_bytes``, every byte already reserved (err 10047)."""
    limit = total.limit or 0
    problems = []
    for name, config in sorted(own.items()):
        if tier_of(config, tiered) != total.tier:
            continue
        if total.is_bytes:
            if storage_of(config) != total.what or max_bytes_of(config) or total.before < limit:
                continue
            why = (
                f"the server needs at least one byte of {total.what} storage free to create "
                f"it: all {approx_size(limit)} of the {_whose(total)} are reserved"
            )
        elif total.before >= limit:
            why = (
                f"the account has {total.before} streams of the {limit} it allows"
                f"{_tier_words(total.tier)}"
            )
        else:
            continue
        no_lock = say(Allowance.NO_LOCK)
        message = (
            f"apply makes {name} (its lock) first, and {why}"
            + (f" ({no_lock} makes none)" if no_lock else "")
            + "; nothing was changed"
        )
        problems.append(Problem(None, "", message))
    return problems


def _temporary_in(step: Step, total: Total, tiered: bool) -> bool:
    """A migration starting whose temporary stream (no ``max_bytes``, in the live
    stream's storage and tier) is made in ``total``'s storage and tier."""
    if not isinstance(step, Migrate) or step.phase is not None:
        return False
    return storage_of(step.live) == total.what and tier_of(step.live, tiered) == total.tier


def _no_byte_for_temporary(step: Step, total: Total) -> Problem:
    message = (
        f"migrating {step.label} needs a temporary stream without max_bytes, and the "
        f"server needs at least one byte of {total.what} storage free to create it: the "
        f"plan reserves all {approx_size(total.limit or 0)} of the "
        f"{_whose(total)}; nothing was changed"
    )
    return Problem(step.source, "max_bytes", message)


def _unlimited_new(step: Step, total: Total, live: LiveState, tiered: bool) -> bool:
    """A stream created without ``max_bytes`` in ``total``'s storage and tier."""
    if step.ref.is_child or isinstance(step, Delete) or step.stream_name in live.streams:
        return False
    config = step.config
    return (
        storage_of(config) == total.what
        and tier_of(config, tiered) == total.tier
        and max_bytes_of(config) == 0
    )


#: Said when a plan's deletes would have made room: apply runs them last.
DELETES_LAST = (
    "; apply deletes last, so its deletes free no room for its creates (apply the "
    "deletes first, on their own)"
)


def _over(
    step: Step,
    total: Total,
    added: int,
    where: _Where,
    own: Sequence[str],
    temporary: int = 0,
    steps_peak: int | None = None,
) -> Problem:
    """``step`` adds ``added`` to ``total``, over its limit: ``temporary`` of it is its
    migration's temporary stream's ``max_bytes`` from the handover on; ``steps_peak``,
    the peak without any temporary stream's (the deletes' word is for that one)."""
    tier = _tier_words(total.tier)
    limit = total.limit or 0
    top = total.peak if steps_peak is None else steps_peak
    later = DELETES_LAST if total.after <= limit < top else ""
    label, whose = step.label, ""
    if temporary:
        label = f"migrating {step.label}"
        whose = (
            f" ({approx_size(temporary)} of it its temporary stream's max_bytes, from the "
            "handover until the migration ends: beside the old stream, then the new one)"
        )
    if total.scope == "server":
        message = (
            f"{label} reserves {approx_size(added)} more {total.what} storage{whose}; with "
            f"every account's streams the server would reserve {approx_size(total.peak)} of "
            f"the server's {approx_size(limit)} ({_SERVER_KEYS[total.what]}; now "
            f"{approx_size(total.before)}){later}: nothing was changed"
        )
        return Problem(where(step, "max_bytes"), "max_bytes", message)
    if own and not total.is_bytes:
        later += f"; apply makes {', '.join(own)} (its lock) first, one of them"
    if total.is_bytes:
        message = (
            f"{label} reserves {approx_size(added)} more {total.what} storage{whose}; the plan "
            f"would reserve {approx_size(total.peak)} (max_bytes x replicas) of the "
            f"account's {approx_size(limit)}{tier} (now "
            f"{approx_size(total.before)}){later}: nothing was changed"
        )
        return Problem(where(step, "max_bytes"), "max_bytes", message)
    message = (
        f"{step.label} would make {total.peak} streams; the account allows "
        f"{total.limit}{tier} ({total.before} now){later}: nothing was changed"
    )
    return Problem(step.source, "", message)


def _no_byte_left(step: Step, total: Total, where: _Where) -> Problem:
    message = (
        f"{step.label} has no max_bytes, and the server needs at least one byte of "
        f"{total.what} storage free to create it: the plan reserves all "
        f"{approx_size(total.limit or 0)} of the {_whose(total)}"
    )
    return Problem(where(step, "max_bytes"), "max_bytes", message)


def _consumer_limits(
    plan: Plan,
    live: LiveState,
    after: Mapping[str, Mapping[str, Any]],
    scoped: Mapping[str | None, Scope],
    tiered: bool,
    where: _Where,
) -> list[Problem]:
    """Consumers per stream after the plan against the stream's ``max_consumers`` and
    the account's (which the server applies to each stream): only streams the plan
    adds consumers to."""
    created: dict[str, list[Step]] = {}
    for step in plan.changes:
        if step.kind == "Consumer" and not isinstance(step, Delete) and not _live_of(step):
            created.setdefault(step.stream_name, []).append(step)
    if not created:
        return []
    counts: dict[str, int] = {}
    for stream, _ in live.consumers:
        counts[stream] = counts.get(stream, 0) + 1
    for step in plan.changes:
        if step.kind == "Consumer" and isinstance(step, Delete):
            counts[step.stream_name] = counts.get(step.stream_name, 0) - 1
    problems = []
    for stream, steps in sorted(created.items()):
        config = after.get(stream) or {}
        count = (counts.get(stream, 0) if stream in live.streams else 0) + len(steps)
        limit = _consumer_limit(config, scoped.get(tier_of(config, tiered)))
        if limit is not None and count > limit:
            for step in steps:
                message = (
                    f"{step.label} would make {count} consumers on stream {stream}; "
                    f"the limit is {limit} per stream: nothing was changed"
                )
                problems.append(Problem(where(step, "name"), "", message))
    return problems


def _ack_pending(
    plan: Plan,
    after: Mapping[str, Mapping[str, Any]],
    scoped: Mapping[str | None, Scope],
    tiered: bool,
    where: _Where,
) -> list[Problem]:
    """Consumers created or changed with a ``max_ack_pending`` above the account's
    (measured: err 10121 on create and update, after the plan's streams were made). A
    consumer leaving it out is sent the default (1,000, ``model.defaults``), which the
    server refuses alike: it has to declare one within the limit."""
    problems = []
    for step in plan.changes:
        if step.kind != "Consumer" or isinstance(step, Delete):
            continue
        scope = scoped.get(tier_of(after.get(step.stream_name) or {}, tiered))
        sent = step.config.get("max_ack_pending")
        limit = scope.max_ack_pending if scope else None
        if type(sent) is not int or limit is None or sent <= limit:
            continue
        tier = _tier_words(scope.tier if scope else None)
        unset = "max_ack_pending" not in where.declared(step)
        said = f"sets no max_ack_pending (sent as {sent})" if unset else f"max_ack_pending {sent}"
        message = (
            f"{step.label}: {said} is over the account's limit of {limit}{tier}; declare "
            f"max_ack_pending at most {limit}: nothing was changed"
        )
        problems.append(Problem(where(step, "max_ack_pending"), "max_ack_pending", message))
    return problems


def _live_of(step: Step) -> Any:
    return getattr(step, "live", None)


#: A stored message's bytes besides its subject, headers and payload, at most (the file
#: store's record: 22 + 8; the memory store counts 16).
MESSAGE_OVERHEAD = 30


def _entry_parts(step: Step) -> tuple[int, int]:
    """One KeyValueEntry write as sent (``execution.apply._put_entry``, through
    ``jetstream.kv``): the bytes of its header block (its marker headers, the stream it
    must land in, the compare-and-set header, ``KV-Operation`` of a delete) and of its
    value. The server stores them all and counts them against ``max_value_size``."""
    revision = (_live_of(step) or {}).get("revision", 0)
    headers = {} if isinstance(step, Delete) else dict(step.config.get("headers") or {})
    headers[EXPECTED_STREAM] = step.stream_name
    headers[EXPECTED_REVISION] = str(revision)
    if isinstance(step, Delete):
        headers["KV-Operation"] = "DEL"
    block = len("NATS/1.0\r\n\r\n") + sum(len(f"{k}: {v}\r\n") for k, v in headers.items())
    value = 0 if isinstance(step, Delete) else _decoded(step.config.get("value"))
    return block, value


def _decoded(value: Any) -> int:
    """The length of a base64 value once decoded."""
    text = str(value or "")
    return len(text) * 3 // 4 - text[-2:].count("=")


def entry_bytes(step: Step) -> int:
    """What one KeyValueEntry write stores, at most: subject, headers, value, record."""
    block, value = _entry_parts(step)
    return MESSAGE_OVERHEAD + len(f"$KV.{step.ref.stream}.{step.name}") + block + value


def _net(step: Step, replaces: bool) -> int:
    """What a write adds to its bucket once written: an update of a bucket keeping one
    revision drops the old one (its value, subject and record: its headers unknown)."""
    live = _live_of(step)
    if not replaces or not isinstance(step, Update) or not live:
        return entry_bytes(step)
    old = MESSAGE_OVERHEAD + len(f"$KV.{step.ref.stream}.{step.name}")
    return entry_bytes(step) - old - _decoded(live.get("value"))


def _entries_room(
    plan: Plan, live: LiveState, after: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Entry writes their bucket would refuse (measured, after the plan's bucket and
    first entries were written): headers and value over its ``max_value_size`` (err
    10054), or, on a bucket that discards new, a write that would reach its
    ``max_bytes`` (err 10077), counted in the worst order the writes of a wave may land
    in: the bytes the bucket holds now (none when the plan makes it), every other write
    that adds, then this one."""
    adding: dict[str, list[Step]] = {}
    for step in plan.changes:
        if step.kind == "KeyValueEntry":
            adding.setdefault(step.stream_name, []).append(step)
    fresh = {s.stream_name for s in _made(plan) if isinstance(s, Create | Replace)}
    problems = []
    for stream, writes in sorted(adding.items()):
        config = after.get(stream) or {}
        problems += _too_large(writes, config, live.server.max_payload)
        limit = max_bytes_of(config)
        if not limit or config.get("discard", "new") != "new":
            continue
        state = live.stream_state.get(stream)
        held = 0 if stream in fresh or state is None else state.bytes
        replaces = config.get("max_msgs_per_subject") == 1
        nets = [max(_net(w, replaces), 0) for w in writes]
        rising = sum(nets)
        pairs = zip(writes, nets, strict=True)
        worst = max(held + rising - net + entry_bytes(w) for w, net in pairs)
        if worst >= limit:
            message = (
                f"KeyValue {stream.removeprefix('KV_')}: its entries' writes need up to "
                f"{approx_size(worst)} ({approx_size(held)} held now), and its max_bytes "
                f"{approx_size(limit)} refuses the write that reaches it: raise max_bytes "
                "or write fewer entries; nothing was changed"
            )
            problems.append(Problem(writes[0].source, "", message))
    return problems


def _too_large(
    writes: Sequence[Step], config: Mapping[str, Any], max_payload: int | None
) -> list[Problem]:
    """Writes over the bucket's ``max_value_size``, or over the server's
    ``max_payload`` (measured: nats-py refuses the value before sending it, and the
    server closes a connection whose message is over it, headers included)."""
    largest = config.get("max_msg_size")
    if type(largest) is not int or largest < 0:
        largest = None
    problems = []
    for write in writes:
        block, value = _entry_parts(write)
        if max_payload is not None and block + value > max_payload:
            message = (
                f"{write.label}: its value ({value} bytes) and headers ({block} bytes) are "
                f"over the server's max_payload of {max_payload} bytes, the largest message "
                "it takes; nothing was changed"
            )
            problems.append(Problem(write.source, "value", message))
        elif largest is not None and block + value > largest:
            message = (
                f"{write.label}: its value ({value} bytes) and headers ({block} bytes) are "
                f"over the bucket's max_value_size of {largest} bytes (the server counts "
                "both); nothing was changed"
            )
            problems.append(Problem(write.source, "value", message))
    return problems


def _consumer_limit(config: Mapping[str, Any], scope: Scope | None) -> int | None:
    own = config.get("max_consumers")
    limits = [own if isinstance(own, int) and own > 0 else None]
    limits.append(scope.max_consumers if scope else None)
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _near(totals: Sequence[Total]) -> list[Problem]:
    """Totals the plan adds to that end within 10% of their limit (not over: that is
    an error already)."""
    warnings = []
    for total in totals:
        if total.peak <= total.before or not total.near or total.limit is None:
            continue
        if total.peak > total.limit:
            continue
        share = 100 * total.peak / total.limit
        if total.is_bytes:
            figure = f"{approx_size(total.peak)} of {approx_size(total.limit)}"
            what = f"{total.what} storage reserved"
        else:
            figure, what = f"{total.peak} of {total.limit}", "streams"
        message = (
            f"{what}{_tier_words(total.tier)} after this plan: {figure} "
            f"({share:.0f}%, within 10% of the {_whose(total)} limit)"
        )
        warnings.append(Problem(None, "", message, warning=True))
    return warnings


@dataclass(frozen=True)
class Restored:
    """One stream a restore writes: its config, the bytes its backup holds and the bytes
    of the live stream of that name it deletes first (0 when there is none)."""

    name: str
    config: Mapping[str, Any]
    data: int
    freed: int = 0


def restore_room(account: Mapping[str, Any], streams: Sequence[Restored]) -> list[Problem]:
    """What the account has no room for when ``streams`` are restored into it: the data
    a backup brings (times the replicas) against the account's storage limit less what
    it stores now, per storage type and tier. A stream's ``max_bytes`` reservation is
    :func:`assess`'s; this is the bytes themselves, which a stream without ``max_bytes``
    reserves nothing for, and which the server refuses part-way (err 10047) otherwise."""
    scoped = scopes(account)
    tiered = None not in scoped
    needed: dict[tuple[str | None, str], list[Restored]] = {}
    for stream in streams:
        storage, _, _ = facts(stream.config)
        needed.setdefault((tier_of(stream.config, tiered), storage), []).append(stream)
    problems: list[Problem] = []
    for (tier, storage), group in sorted(needed.items(), key=lambda item: str(item[0])):
        scope = scoped.get(tier)
        limit = None if scope is None else scope.bytes_limit.get(storage)
        if scope is None or limit is None:
            continue
        adds = sum((s.data - s.freed) * replicas_of(s.config) for s in group)
        free = limit - scope.used.get(storage, 0)
        if adds > free:
            names = ", ".join(s.name for s in group)
            problems.append(
                Problem(
                    None,
                    "",
                    f"no room for the restore of {names}: the backup brings "
                    f"{approx_size(adds)} of {storage} storage{_tier_words(tier)}, the "
                    f"account has {approx_size(max(free, 0))} left of its "
                    f"{approx_size(limit)}; nothing was restored",
                )
            )
    return problems
