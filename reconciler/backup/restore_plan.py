"""The restore's own plan stage: what ``reconcile restore DIR`` would do to each stream,
and the same steps as apply's :class:`~reconciler.planning.steps.Plan`, so the one
verdict (``execution.stages.verdict``: policy deny, lifecycle ``prevent_destroy``,
the ``--allow-*`` flags) judges a restore as it judges an apply.

Per selected stream (reads only):

- ``restore``: not on the server: a :class:`Create`;
- ``restored``: the server holds what the backup holds (state and consumer positions,
  ``restore_checks.differences``) and no restore marker: :class:`Unchanged`;
- ``resume``: proven to be what this tool's interrupted restore of this backup left
  (``restore_checks.leftover``): deleted and restored again, a :class:`Create` over
  that live stream (no flag needed; lifecycle ``prevent_destroy`` still forbids it);
- ``replace``: any other stream of that name, only with ``replace_existing``: a
  :class:`Replace` that deletes its messages (needs ``--allow-replace``); without
  ``replace_existing`` the plan is refused, naming each difference on the stream's
  line (the first :data:`DIFFERENCES_SHOWN`, then how many more).

The tool's own apply lock (``KV_RECONCILE_LOCKS``) is never restored: the restore holds
the target's own lock while it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from reconciler.backup.layout import s2_unpacked
from reconciler.backup.manifest import Contents, StreamRecord
from reconciler.backup.memory import memory_refused
from reconciler.backup.restore_checks import differences, leftover, lookalike_hint, marked, marker
from reconciler.errors import NotFound, RefusalKind, RefusedPlan
from reconciler.execution.capacity_checks import with_capacity, with_check
from reconciler.execution.pair_reads import StandbyWrites, standby_writes
from reconciler.execution.stages import LOCK_TIMEOUT, PlanRequest
from reconciler.identity import INTERNAL_STREAMS, ResourceRef
from reconciler.jetstream import JetStreamClient
from reconciler.model.loss import held
from reconciler.model.standby import is_fenced
from reconciler.model.state import LiveState, ServerInfo, StreamState
from reconciler.model.values import printable
from reconciler.planning.capacity import Restored, restore_room
from reconciler.planning.live_checks import live_problems
from reconciler.planning.policy import evaluate as evaluate_policy
from reconciler.planning.standby import guarded, made_primaries
from reconciler.planning.steps import (
    ALLOW_REPLACE,
    Create,
    Plan,
    Replace,
    Step,
    Unchanged,
    recorded_reason,
)
from reconciler.specs.lifecycle import MANAGE, Lifecycle, recorded_protection
from reconciler.specs.policy import load_policy
from reconciler.specs.spec import Spec

#: restored: the server holds it already, as the backup does; resume: the server holds
#: what an interrupted restore of it left, deleted and restored again.
Action = Literal["restore", "replace", "restored", "resume"]
Live = tuple[dict[str, Any], dict[str, dict[str, Any]]]  # STREAM.INFO, consumers by name
#: What a replace was planned on: messages, first and last sequence, consumers' names.
Seen = tuple[int, int, int, tuple[str, ...]]


@dataclass(frozen=True)
class Flags:
    """What a restore is asked to do, besides the folder and the server: which streams,
    the flags a destructive step needs, and the rules apply runs too (the environment's
    lifecycle, the policy files: the project's then ``--policy``), and the apply lock
    (``lock_timeout`` seconds to wait for it; None: no lock, ``--no-lock``)."""

    replace_existing: bool = False
    allow_replace: bool = False
    allow_data_loss: bool = False
    only: tuple[str, ...] = ()
    lifecycle: Lifecycle = MANAGE
    policies: tuple[Path, ...] = ()
    environment: str | None = None
    lock_timeout: float | None = LOCK_TIMEOUT
    #: The environment's plan request (``--env``): its specs, as that environment plans
    #: them, judge the restore's steps with apply's rule for standby streams
    #: (``planning.standby.guarded``: a stream declared the standby mirror there is
    #: never restored as a plain stream). None: no spec is read (``--server``).
    declared: PlanRequest | None = None


@dataclass(frozen=True)
class RestoreStep:
    record: StreamRecord
    action: Action
    size: int  # bytes of the snapshot file
    #: the restore marker written while it runs (``restore_checks.marker``); None: none
    #: (a sealed stream cannot be updated to remove it)
    marker: str | None = None
    #: a replace: the live stream's state when planned (messages, first and last
    #: sequence, consumers): it is deleted only while it still holds exactly that
    seen: Seen | None = None
    #: bytes the live stream of that name holds, deleted before the restore (resume, replace)
    freed: int = 0
    #: restored: the live stream holds the backup's messages but is fenced by a failover
    #: (its subjects moved aside, ``model.standby.is_fenced``): not the backup's stream
    #: as it was, and left as it is (the failover rules own it: docs/dr.md)
    fenced: bool = False
    #: bytes the snapshot file unpacks to (``layout.s2_unpacked``); 0: not read
    unpacked: int = 0

    @property
    def destructive(self) -> bool:
        return self.action == "replace"


@dataclass(frozen=True)
class RestorePlan:
    contents: Contents
    steps: tuple[RestoreStep, ...]
    server: ServerInfo
    #: The same steps as apply's plan (creates, replaces, unchanged), policy findings on
    #: it: what the shared verdict judges.
    plan: Plan = field(default_factory=lambda: Plan(ServerInfo("", 0)))
    #: streams of the folder not restored, and why (the tool's own apply lock)
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def has_changes(self) -> bool:
        return any(s.action != "restored" for s in self.steps)


async def live_stream(client: JetStreamClient, name: str) -> Live | None:
    """The live stream ``name`` and its consumers; None when there is none."""
    try:
        info = await client.stream_info(name)
    except NotFound:
        return None
    listed = await client.list_consumers(name)
    return info, {str(c.get("name")): c for c in listed}


def seen_state(live: Live) -> Seen:
    """A live stream's messages, first and last sequence and its consumers' names: what a
    replace was planned on (a consumer made since is someone's new work)."""
    state = live[0].get("state") or {}
    messages, first, last = (int(state.get(k) or 0) for k in ("messages", "first_seq", "last_seq"))
    return messages, first, last, tuple(sorted(live[1]))


def _marker_for(contents: Contents, record: StreamRecord) -> str | None:
    return None if record.config.get("sealed") else marker(contents, record)


def refuse_observed(flags: Flags) -> None:
    """Refused when the environment only observes (lifecycle ``mode: observe``): never
    written, so a restore there is refused before anything is, the apply lock's bucket
    included."""
    if flags.lifecycle.observe:
        raise RefusedPlan(
            f"refusing to restore: the environment has lifecycle mode observe "
            f"({flags.lifecycle.observed_at}): never written; nothing was changed."
        )


async def plan_restore(
    client: JetStreamClient,
    contents: Contents,
    selected: Sequence[StreamRecord],
    flags: Flags,
    *,
    declared: Sequence[Spec] = (),
) -> RestorePlan:
    """What a restore would do on the server behind ``client`` (reads only): refused
    here when a stream of the same name differs and ``replace_existing`` was not given,
    or when the environment only observes; the rest is the verdict's. ``declared``: the
    environment's specs as it plans them (``Flags.declared`` loaded), whose standby
    streams prevent a step making them anything but the mirror."""
    server = await client.server_info()
    too_old = [why for r in selected if (why := memory_refused(r, server))]
    if too_old:
        raise RefusedPlan("refusing to restore; nothing was changed:", details=too_old)
    refuse_observed(flags)
    skipped = tuple((r.name, "the tool's own apply lock") for r in selected if _own(r))
    steps: list[RestoreStep] = []
    lives: list[Live | None] = []
    refused: list[str] = []
    for record in (r for r in selected if not _own(r)):
        data = contents.folder(record.name).data
        size, unpacked = data.stat().st_size, s2_unpacked(data)
        mark = _marker_for(contents, record)
        live = await live_stream(client, record.name)
        lives.append(live)
        if live is None:
            steps.append(RestoreStep(record, "restore", size, mark, unpacked=unpacked))
        elif marked(live[0].get("config")) is None and not differences(record, *live):
            fenced = is_fenced(live[0].get("config") or {})
            steps.append(RestoreStep(record, "restored", size, mark, fenced=fenced))
        elif mark is not None and await leftover(client, record, *live, mark):
            steps.append(
                RestoreStep(record, "resume", size, mark, freed=_bytes(live[0]), unpacked=unpacked)
            )
        elif flags.replace_existing:
            seen = seen_state(live)
            freed = _bytes(live[0])
            steps.append(RestoreStep(record, "replace", size, mark, seen, freed, unpacked=unpacked))
        else:
            refused.append(_differing(record, live))
    if refused:
        raise RefusedPlan(
            "refusing to restore: the server holds stream(s) of the same name that differ "
            "from the backup; nothing was changed. Pass --replace-existing (and "
            f"{ALLOW_REPLACE}) to delete and replace them.",
            details=refused,
        )
    shared = await _shared_plan(server, steps, lives, flags, declared)
    shared = await _with_room(client, shared, steps)
    return RestorePlan(contents, tuple(steps), server, shared, skipped)


#: How many of a stream's differences from the backup its refusal names (then the count)
DIFFERENCES_SHOWN = 24


def _differing(record: StreamRecord, live: Live) -> str:
    """Why a live stream of the backup's name is not taken for it, on one line: each
    difference (``restore_checks.differences``; the first :data:`DIFFERENCES_SHOWN`, then
    how many more), escaped (the live values are read back: anything may be forged)."""
    differ = differences(record, *live)
    if not differ:
        return printable(f"{record.name}: {_MARKED_ONLY}")
    head = f"{record.name}: "
    named = [d.removeprefix(head) for d in differ[:DIFFERENCES_SHOWN]]
    rest = len(differ) - len(named)
    more = f"; and {rest} more ({len(differ)} differences)" if rest else ""
    return printable(head + "; ".join(named) + more + lookalike_hint(record, live[0]))


def _bytes(info: Mapping[str, Any]) -> int:
    return int((info.get("state") or {}).get("bytes") or 0)


async def _with_room(client: JetStreamClient, plan: Plan, steps: Sequence[RestoreStep]) -> Plan:
    """The restore against every stream of the server, as apply's plan is
    (``planning.live_checks``: a restored stream's subjects another stream holds, which
    the server refuses half-way through), and the account's room for it, checked as
    apply checks it (``max_bytes`` reservations, stream counts, the server's own limits
    where known: the plan's capacity) and for the bytes the backup brings (never fewer
    than its snapshot files hold, :func:`_brought`): checks on the plan, raised by the
    verdict before anything is restored."""
    writes = [s for s in steps if s.action != "restored"]
    if not writes:
        return plan
    live = await client.fetch_live()
    plan = with_check(plan, RefusalKind.INVALID, live_problems((), plan.changes, live))
    checked = await with_capacity(client, plan, live, (), lock_ahead=False)
    wanted = [Restored(s.record.name, s.record.config, _brought(s), s.freed) for s in writes]
    problems = restore_room(await client.account_info(), wanted)
    return with_check(checked, RefusalKind.CAPACITY, problems)


def _brought(step: RestoreStep) -> int:
    """The bytes a step brings: the largest of what its state says (the manifest's, or
    ``backup.json``'s: anyone who can write the folder writes them), the size of the
    snapshot file it sends, checked and read from disk, and what that file unpacks to
    (its S2 frames say it: compressible messages fill a small file)."""
    return max(int(step.record.state.get("bytes") or 0), step.size, step.unpacked)


def _own(record: StreamRecord) -> bool:
    return record.name in INTERNAL_STREAMS


#: A stream holding what the backup holds, but marked by a restore not proven this one.
_MARKED_ONLY = "it carries a restore marker, but is not proven a leftover of this backup's restore"


async def _shared_plan(
    server: ServerInfo,
    steps: Sequence[RestoreStep],
    lives: Sequence[Live | None],
    flags: Flags,
    declared: Sequence[Spec],
) -> Plan:
    """The restore's steps as apply's plan, the lifecycle's preventions, apply's rule for
    the streams the environment's specs declare a standby (``planning.standby.guarded``)
    and the policy findings on it."""
    changes: list[Step] = []
    unchanged: list[Unchanged] = []
    streams: dict[str, Mapping[str, Any]] = {}
    for step, live in zip(steps, lives, strict=True):
        record = step.record
        ref = ResourceRef.of_stream(record.name, record.config)
        config = live[0].get("config") or {} if live is not None else {}
        if live is not None:
            streams[record.name] = config
        if step.action == "restored":
            unchanged.append(Unchanged(ref=ref))
            continue
        reasons = (_REASONS[step.action],)
        made: Step
        if step.action == "replace" and live is not None:
            loss = held(StreamState.from_info(live[0]))
            made = Replace(
                ref=ref, config=record.config, live=config, reasons=reasons, losses=(loss,)
            )
        else:
            made = Create(ref=ref, config=record.config, live=config or None, reasons=reasons)
        if live is not None and (why := _prevention(live, flags.lifecycle)):
            made = replace(made, prevented=why, reasons=(*reasons, why))
        changes.append(made)
    brought = {s.record.name: s.record.consumer_count for s in steps}
    plan = Plan(server, tuple(changes), tuple(unchanged))
    read = StandbyWrites()  # docs/dr.md: a lost origin made again beside its standby
    request, env = flags.declared, flags.environment
    if (
        request is not None
        and env is not None
        and (primaries := made_primaries(plan, declared, env))
    ):
        read = await standby_writes(primaries, request.project, env, request.options, request.owner)
    plan = guarded(plan, declared, env, consumers=brought, taken=read.taken, unread=read.unread)
    policy = load_policy(flags.policies)
    if not policy:
        return plan
    live_state = LiveState(server=server, streams=streams)
    findings = await evaluate_policy(policy, plan, (), live_state, environment=flags.environment)
    return replace(plan, policy=findings)


_REASONS: Mapping[Action, str] = {
    "restore": "restored from the backup",
    "replace": "deleted and restored from the backup (--replace-existing)",
    "resume": "left part-restored by an interrupted restore of this backup: deleted and "
    "restored again",
}


def protected_now(live: Live) -> str:
    """Why the live stream may not be deleted as it is now (empty: nothing records it):
    its own recorded ``prevent_destroy``, or a consumer's. Read again just before a
    restore deletes it: a protection recorded while the question waited holds too."""
    at = recorded_protection(live[0].get("config"))
    return recorded_reason(at) if at is not None else _prevention(live, MANAGE)


def _prevention(live: Live, lifecycle: Lifecycle) -> str:
    """Why no flag allows deleting the live stream (empty: none besides what its own
    config records, which ``planning.steps.prevention`` reads): the environment's
    lifecycle ``prevent_destroy``, or a consumer recording its own protection."""
    if lifecycle.prevent_destroy:
        return (
            f"prevented by the environment's lifecycle prevent_destroy "
            f"({lifecycle.protected_at}); no flag allows this"
        )
    for name, raw in sorted(live[1].items()):
        at = recorded_protection(raw.get("config"))
        if at is not None:
            return f"prevented: its consumer {name} would go with it; {recorded_reason(at)}"
    return ""
