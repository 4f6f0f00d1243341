"""Standby pairs read on both sides: each stream's info, the origin's consumers' ack
floors, the promoted side's consumers; each pair's health as plan and drift show it
(docs/dr.md). Reads only."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.errors import NotFound, ReconcileError, ServerError
from reconciler.execution.environments import environment_target
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.model.normalize import owner_of
from reconciler.model.promotion import Gap, Guards, Refusal, promotion_gaps
from reconciler.model.standby import (
    PairHealth,
    fence_subject,
    is_fenced,
    lacking_window,
    left_paused,
    mirror_config,
    mirrors_the_origin,
    pair_health,
    takes_writes,
)
from reconciler.model.state import lacking, same_stored
from reconciler.model.timestamps import rfc3339
from reconciler.model.values import printable
from reconciler.planning.standby import Pair, origin_api
from reconciler.specs.project import Project
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby
from reconciler.specs.units import format_duration

__all__ = [
    "PairState",
    "SidedHealth",
    "Sides",
    "diverged",
    "foreign_origin_consumers",
    "gap_warnings",
    "health_line",
    "lacks_origin",
    "loss_line",
    "pair_state",
    "pair_states",
    "pairs_health",
    "same_message",
    "unlike_declared",
]


@dataclass(frozen=True)
class PairState:
    """What a pair is now, read on both sides, and what the failover will do to it."""

    pair: Pair
    health: PairHealth
    origin_fenced: bool
    #: The standby's stream takes writes: no mirror, not fenced
    #: (``model.standby.takes_writes``: promoted, by a failover or by hand)
    promoted: bool
    standby_exists: bool
    consumers_missing: tuple[str, ...]
    starts: Mapping[str, int | None]  # consumer -> its start on the promoted side
    #: Why the pair must not be touched, read on both sides (empty: it may), each with
    #: the moves it refuses (``model.promotion.Guards``): another owner's stream, a
    #: standby that is no copy of the origin, a consumer someone made, a standby that a
    #: promotion would keep unlike the spec (``unlike_declared``), one promoted already
    problems: tuple[Refusal, ...] = ()
    #: What the standby's stream does unlike the spec that a promotion keeps and
    #: nothing refuses (``model.promotion.WARNED``): said in the plan
    warnings: tuple[str, ...] = ()
    #: A promoted standby that is no copy of the origin (empty: it is): the failover
    #: fences the origin, then stops the pair (docs/dr.md)
    diverged: str = ""
    #: The unpromoted mirror's duplicate_window and the one the pair needs, when its own
    #: is shorter (a restart of its server drops it): the failover gives it back
    #: (``model.standby.lacking_window``); None: it lacks none
    window: tuple[int, int] | None = None
    #: The standby's stream is fenced: an old origin (of an earlier failover or
    #: failback), no mirror and taking no writes; a failover is refused, a rollback not
    standby_fenced: bool = False

    @property
    def name(self) -> str:
        return self.pair.name

    @property
    def subjects(self) -> list[str]:
        return list(self.pair.stream.config.get("subjects") or [])

    def refusals(self, *, rollback: bool) -> tuple[str, ...]:
        """Why the pair must not be touched by a failover (or its ``rollback``): only the
        problems guarding that move. A rollback promotes nothing and writes only the
        origin's subjects: a mirror lacking messages, a consumer made on it, another
        owner's mirror, what its promotion would keep refuse the failover, not it."""
        return tuple(p.text for p in self.problems if p.refuses(rollback=rollback))

    def actions(self, *, unplanned: bool, rollback: bool) -> list[str]:
        """What a failover (or its rollback) does to this pair, in order."""
        subjects = ", ".join(self.subjects)
        if rollback:
            if self.promoted:  # it takes writes: refused (``_promoted_no_rollback``)
                return []
            return ["give the origin its subjects back"] if self.origin_fenced else []
        if self.standby_fenced:  # an old origin: nothing to promote (refused)
            return []
        steps: list[str] = []
        fences = not self.origin_fenced and not unplanned
        window = None if self.promoted else self.window
        if window is not None and fences:
            steps.append(
                f"restore the mirror's {_window_change(window)}, then wait before the fence "
                "until the messages it mirrored without it are out of it (at most "
                f"{format_duration(window[1])}; the origin takes the writes meanwhile)"
            )
        if fences:
            steps.append(f"fence the origin: subjects {subjects} -> {fence_subject(self.name)}")
        if not self.promoted:
            if not unplanned:
                steps.append("wait until the mirror's last sequence is the origin's")
            promote = f"promote the mirror: drop `mirror`, subjects {subjects}"
            if window is not None and not fences:  # no write comes to record: no wait
                promote += (
                    f", {_window_change(window)}: it knows no Nats-Msg-Id of the messages "
                    "it mirrored without it, a retry of one is stored again"
                )
            steps.append(promote)
        for name in self.consumers_missing:
            start = self.starts.get(name)
            at = "the stream's first message" if start is None else f"sequence {start}"
            steps.append(f"create consumer {name} from {at}")
        if steps:
            steps.append("verify: last sequences, message counts, a probe on each subject answered")
        elif self.promoted:  # a verify that failed is never taken for one that passed
            steps.append(
                "verify again (every other step is done): last sequences, message counts, "
                "a probe on each subject answered"
            )
        return steps


def _window_change(window: tuple[int, int]) -> str:
    """A mirror's duplicate window given back, as a plan step says it."""
    live, needed = (format_duration(w) for w in window)
    return f"duplicate_window {live} -> {needed} (a restart of its server drops it)"


def health_line(health: PairHealth) -> str:
    lag = "unknown" if health.lag is None else str(health.lag)
    seen = "never" if health.active_seconds is None else f"{health.active_seconds:.1f}s ago"
    origin = "unread" if health.origin_last_seq is None else str(health.origin_last_seq)
    mirror = "unread" if health.mirror_last_seq is None else str(health.mirror_last_seq)
    verdict = "healthy" if health.healthy else "NOT healthy: " + "; ".join(health.problems)
    return f"last seq origin {origin}, mirror {mirror}, lag {lag}, last contact {seen}: {verdict}"


def loss_line(health: PairHealth) -> str:
    seen = (
        "never"
        if health.active_seconds is None
        else f"{health.active_seconds:.1f}s before {rfc3339(time.time())}"
    )
    return (
        f"the mirror holds up to sequence {health.mirror_last_seq}, its last contact with "
        f"the origin was {seen} (it then reported lag {health.reported_lag}); every write "
        "the origin acknowledged after that is not on the standby"
    )


# --- reading both sides -------------------------------------------------------------------


async def _info(client: JetStreamClient | None, stream: str) -> dict[str, Any] | None:
    """A side's STREAM.INFO of ``stream`` (None: not there, or that side unread). A reply
    no server sends (its config, state or mirror no object: on an account without
    JetStream any client may answer) is that side's read error, so the side is unread,
    never a crash of the other environment's plan or agent reading it."""
    if client is None:
        return None
    try:
        info = await client.stream_info(stream)
    except NotFound:
        return None
    if any(not isinstance(info.get(part) or {}, dict) for part in ("config", "state", "mirror")):
        raise ServerError(0, 0, f"unexpected reply on STREAM.INFO.{stream}")
    return info


def _floor_of(info: Mapping[str, Any]) -> int | None:
    """A consumer's ack floor (stream sequence) from its CONSUMER.INFO; None: empty."""
    return int((info.get("ack_floor") or {}).get("stream_seq", 0)) if info else None


async def _consumer(client: JetStreamClient | None, stream: str, name: str) -> dict[str, Any]:
    """A consumer's CONSUMER.INFO; empty when it is gone (or its server unread: None)."""
    if client is None:
        return {}
    try:
        return await client.consumer_info(stream, name)
    except NotFound:
        return {}


async def _consumer_names(client: JetStreamClient, stream: str) -> set[str]:
    try:
        return set(await client.consumer_names(stream))
    except NotFound:
        return set()


@dataclass(frozen=True)
class Sides:
    """The two environments of a failover, as its refusals name them, and the owner
    whose streams it may write (the project's)."""

    origin: str = "the origin"
    standby: str = "the standby"
    owner: str | None = None  # None: not checked (health only)
    #: Every environment of the project and its domain: the API a mirror must name
    domains: Mapping[str, str | None] = field(default_factory=dict)
    #: Both clients are connected to one server process (its ``server_id``)
    same_server: bool = False


async def same_message(
    origin: JetStreamClient, standby: JetStreamClient, stream: str, seq: int
) -> bool | None:
    """Whether the standby holds the origin's message at ``seq`` (a mirror keeps its
    origin's sequence, subject, headers, data and time: docs/jetstream-notes.md); None
    when the origin holds none there (deleted: nothing to compare with)."""
    if seq <= 0:
        return None
    theirs, ours = await asyncio.gather(
        origin.stored_message(stream, {"seq": seq}), standby.stored_message(stream, {"seq": seq})
    )
    return same_stored(theirs, ours)


def copy_problem(sides: Sides, seq: int, origin_last: int, standby_last: int) -> str:
    """Why a standby that lacks the origin's message at ``seq`` is no copy of it."""
    return (
        f"the stream in {sides.standby} does not hold {sides.origin}'s message at sequence "
        f"{seq} ({sides.origin} holds up to {origin_last}, {sides.standby} up to "
        f"{standby_last}): it is no copy of {sides.origin}'s messages (made, promoted or "
        f"written by someone else, or {sides.origin} took writes after its promotion)"
    )


async def diverged(
    origin: JetStreamClient | None,
    standby: JetStreamClient,
    name: str,
    sides: Sides,
    expected: int = 0,
) -> str:
    """Why the standby is no copy of the origin (empty: it is, or nothing to compare):
    up to the last sequence both have, it must hold every sequence the origin holds (a
    message deleted on the standby by someone would be lost by a promotion), and the
    origin's message at that last sequence. ``expected``: that sequence as the caller
    knows it (the fenced origin's last, reached by the mirror): its messages are read
    together with both sides' state, one round trip fewer while no write is taken."""
    if origin is None:
        return ""
    ahead = [
        client.stored_message(name, {"seq": expected}) for client in (origin, standby) if expected
    ]
    try:
        theirs, ours, *messages = await asyncio.gather(
            origin.stream_info(name, deleted=True),
            standby.stream_info(name, deleted=True),
            *ahead,
        )
    except NotFound:
        return ""
    origin_last, standby_last = _last(theirs), _last(ours)
    upto = min(origin_last, standby_last)
    count, first = lacking(theirs.get("state") or {}, ours.get("state") or {}, upto)
    if count:
        shown = ", ".join(str(seq) for seq in first) + (", ..." if count > len(first) else "")
        return (
            f"the stream in {sides.standby} lacks {count} message(s) {sides.origin} holds "
            f"(sequence {shown}): deleted there by someone, they would be lost"
        )
    if messages and upto == expected:
        same = same_stored(*messages)
    else:
        same = await same_message(origin, standby, name, upto)
    if same is False:
        return copy_problem(sides, upto, origin_last, standby_last)
    return ""


def unfence_by_hand(pair: Pair) -> str:
    """The nats CLI command giving a fenced stream its declared subjects back, quoted for
    a shell (a subject may hold any character but a space) and for the CLI's parser: each
    subject joined to its flag by ``=`` and the name after ``--``, so that neither is
    read as a flag, whatever it starts with (``-``, ``@``: the schema allows both)."""
    subjects = " ".join(
        shlex.quote(f"--subjects={subject}") for subject in pair.stream.config.get("subjects") or ()
    )
    return f"`nats stream edit -f {subjects} -- {shlex.quote(pair.name)}`"


def _taking_over(pair: Pair, env: str, info: Mapping[str, Any], holder: str) -> str:
    """How a stream of another owner is taken over: by ``apply --take-over``, unless it
    is fenced, whose subjects apply never gives back (the failover rules prevent it):
    then its owner's project rolls its failover back, or a person gives the subjects
    back by hand (once no standby takes its writes) before the take-over."""
    take_over = f"reconcile apply --env {env} --take-over"
    if not is_fenced(info.get("config") or {}):
        return f"{take_over} takes it over"
    return (
        f"it is fenced, and apply never gives a fenced stream its subjects back: the "
        f"project of owner {holder!r} rolls its failover back (reconcile failover "
        f"--rollback with its project file), or, once no standby takes its writes, give it its "
        f"subjects back by hand, {unfence_by_hand(pair)}, then {take_over}"
    )


async def _problems(
    pair: Pair,
    sides: Sides,
    live: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None],
    clients: tuple[JetStreamClient | None, JetStreamClient],
    present: set[str],
) -> list[Refusal]:
    """Why the failover, or its rollback, must not touch this pair, from what each side
    holds (everything read back may have been written by someone else: it never decides
    a step unless it matches what the specs declare and the origin's own messages). A
    rollback writes only the origin's subjects and promotes nothing: it is refused by
    what it would write wrongly (one stream read as both sides, another owner's origin,
    a standby that takes the writes already), never by what only a promotion, the fence
    or the consumers' creation would get wrong (``Guards.FAILOVER``)."""
    failover = Guards.FAILOVER
    origin_info, mirror_info = live
    if sides.same_server and origin_info and mirror_info:
        created = origin_info.get("created")
        if created and created == mirror_info.get("created"):  # one stream read twice
            return [
                Refusal(
                    f"{sides.origin} and {sides.standby} reach the same stream {pair.name} "
                    f"(created {created}) on one server: a standby is a mirror in another "
                    "domain or account; check both environments' servers and domain in the "
                    "project file"
                )
            ]
    problems: list[Refusal] = []
    if sides.owner is not None:  # the origin is written by both moves, the standby by one
        for env, info, guards in (
            (sides.origin, origin_info, Guards.BOTH),
            (sides.standby, mirror_info, failover),
        ):
            holder = owner_of((info or {}).get("config") or {}) if info else None
            if holder is not None and holder != sides.owner:
                problems.append(
                    Refusal(
                        f"its stream in {env} is managed by owner {holder!r}, not "
                        f"{sides.owner!r}: a failover never writes another owner's stream "
                        f"({_taking_over(pair, env, info or {}, holder)})",
                        guards,
                    )
                )
    if origin_info is not None:  # an unfenced origin: only a fence writes it
        origin_config = origin_info.get("config") or {}
        problems += _guarding(failover, _subjects_problem(pair, sides, origin_config))
    if mirror_info is None:
        return [
            *problems,
            Refusal(
                f"no stream {pair.name} in {sides.standby}: apply the standby environment "
                f"first (reconcile apply --env {sides.standby})",
                failover,
            ),
        ]
    mirror_config = mirror_info.get("config") or {}
    if is_fenced(mirror_config):
        problems.append(
            Refusal(
                f"the stream in {sides.standby} is fenced: it is an old origin, no copy of "
                f"{sides.origin}'s; make it a mirror first (reconcile apply --env "
                f"{sides.standby} --allow-replace: a failback, a full copy)",
                failover,
            )
        )
    elif mirror_config.get("mirror"):  # not promoted yet
        problems += _guarding(failover, _mirror_problem(pair, sides, mirror_config["mirror"]))
        early = sorted({c.name for c in pair.consumers} & present)
        if early:
            problems.append(
                Refusal(
                    f"consumer(s) {', '.join(early)} already on the mirror in {sides.standby}: "
                    "a failover creates them after the promotion, at the origin's ack floor "
                    "+ 1; these were made by someone else at positions of theirs (delete them "
                    "first)",
                    failover,
                )
            )
        unlike = await diverged(*clients, pair.name, sides)
        if unlike:  # nothing to promote: fencing the origin would leave neither side
            problems.append(
                Refusal(f"{unlike}; compare both sides before anything is failed over", failover)
            )
    else:  # no mirror: promoted (by a failover, or by hand), or made by someone
        problems += _guarding(failover, _promoted_problem(pair, sides, mirror_config))
    if takes_writes(mirror_config):  # the origin must not take them too (a fenced one: none)
        problems.append(Refusal(_promoted_no_rollback(sides), Guards.ROLLBACK))
    return problems


def _guarding(guards: Guards, problems: Sequence[str]) -> list[Refusal]:
    return [Refusal(problem, guards) for problem in problems]


def _promoted_no_rollback(sides: Sides) -> str:
    """Why a promoted pair is not rolled back, and the ways on: the promoted stream
    takes the writes (no update makes it a mirror again), so the origin gets them back
    only by a failback, a full copy; or the failover is finished where it is."""
    origin, standby = sides.origin, sides.standby
    return (
        f"the mirror in {standby} is already promoted: a rollback would lose the writes it "
        f"took. {standby} takes the writes: run the failover again to finish it (a failed "
        "verify or refusal names what to set first), or, to give them to "
        f"{origin} again, fail back: make {standby} the primary in git, "
        f"`reconcile apply --env {origin} --allow-replace` (a fresh mirror of {standby}, a "
        f"full copy), then `reconcile failover --from {standby} --to {origin}` "
        "(docs/dr.md#5-fail-back)"
    )


def unlike_declared(
    sides: Sides, gaps: Sequence[Gap], *, promoted: bool, missing: bool = False
) -> str:
    """Why the standby's stream must not be promoted, or go on taking the writes, as it
    is ('' when nothing refuses it): the fields a promotion keeps that make it take
    fewer writes or keep less than the spec declares (``model.promotion``), and how
    each is set back. Promoted, it takes the writes already: no rollback gives them back
    to the origin without losing them (``missing``: the failover still has consumers
    to create, so it must run again)."""
    refused = [gap for gap in gaps if gap.refused]
    if not refused:
        return ""
    listed = "; ".join(str(gap) for gap in refused)
    stuck = ", ".join(gap.field for gap in refused if not gap.by_update)
    standby, origin = sides.standby, sides.origin
    if not promoted:
        head = (
            f"the mirror in {standby} has what the spec does not declare, which its "
            f"promotion would keep ({listed})"
        )
        if stuck:
            return (
                f"{head}; no update undoes {stuck}: replace it by a fresh mirror first "
                f"(reconcile apply --env {standby} --allow-replace: a full copy)"
            )
        return f"{head}; set it as declared first (reconcile apply --env {standby})"
    head = (
        f"the promoted stream in {standby} has what the spec does not declare ({listed}), "
        "and takes the writes with it"
    )
    if stuck:
        return (
            f"{head}; no update undoes {stuck}: only a failback gives the writes to "
            f"{origin} again, as declared (docs/dr.md#5-fail-back: a full copy)"
        )
    if missing:
        return (
            f"{head}; set it as declared on {standby}'s stream (`nats stream edit`), then "
            "run the failover again: it creates the consumers still missing"
        )
    return (
        f"{head}; make {standby} the primary in git (standby: primary {standby}, "
        f"environment {origin}: docs/dr.md#5-fail-back) and apply it "
        f"(reconcile apply --env {standby}): an update sets it as declared"
    )


def _guards(gaps: Sequence[Gap]) -> Guards:
    """The moves the refused gaps refuse (each its rule's: ``model.promotion.Rule``)."""
    guards = Guards(0)
    for gap in gaps:
        if gap.refused:
            guards |= gap.guards
    return guards


def gap_warnings(sides: Sides, gaps: Sequence[Gap]) -> tuple[str, ...]:
    """What the standby's stream does unlike the spec, kept by a promotion and not
    refused (``model.promotion.WARNED``)."""
    return tuple(
        f"the stream in {sides.standby}: {gap}; a promotion keeps it "
        f"(reconcile apply --env {sides.standby}"
        f"{'' if gap.by_update else ' --allow-replace'} sets it as declared)"
        for gap in gaps
        if not gap.refused
    )


def _foreign(sides: Sides, infos: Mapping[str, Mapping[str, Any]]) -> str:
    """The declared consumers in ``infos`` (CONSUMER.INFO, empty: gone) that are not
    this project's (another owner's marker, or none), as a list to name; '' for none."""
    return ", ".join(
        sorted(
            name
            for name, info in infos.items()
            if info and owner_of(info.get("config") or {}) != sides.owner
        )
    )


def _foreign_consumers(sides: Sides, infos: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Declared consumers on the promoted standby that this project's failover did not
    create (another owner's marker, or none): they start where someone else chose."""
    foreign = _foreign(sides, infos)
    if not foreign:
        return []
    return [
        f"consumer(s) {foreign} on the promoted stream in {sides.standby} are "
        f"not managed by {sides.owner!r}: made by someone else, at positions of theirs "
        "(delete them, and the failover creates them at the origin's ack floor + 1)"
    ]


def foreign_origin_consumers(sides: Sides, infos: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Declared consumers on the origin that are not this project's: their ack floor,
    where the failover would start the standby's consumers, is someone else's position
    (a consumer made again delivering only new messages: everything before it skipped)."""
    foreign = _foreign(sides, infos)
    if not foreign:
        return []
    return [
        f"consumer(s) {foreign} on the stream in {sides.origin} are not managed by "
        f"{sides.owner!r}: made by someone else, their ack floor is no position of this "
        "project's consumer and would decide where the failover starts it; apply "
        f"{sides.origin} first (reconcile apply --env {sides.origin})"
    ]


def _mirror_problem(pair: Pair, sides: Sides, mirror: Any) -> list[str]:
    """A mirror that does not mirror what the spec declares: the stream's own name,
    through the primary's API (``planning.standby.origin_api``). With the origin lost
    (unplanned) nothing else says what the standby holds."""
    if not sides.domains:
        return []
    api = origin_api(pair.standby, sides.domains, pair.stream.where("standby"))
    declared = mirror_config(pair.stream.config, api=api, deliver=pair.standby.deliver)
    if mirrors_the_origin(mirror, declared["mirror"]):
        return []
    about = mirror if isinstance(mirror, Mapping) else {}
    name = str(about.get("name") or "")
    through = str((about.get("external") or {}).get("api") or "")
    what = f"{name or 'nothing'} through {through or 'its own account'}"
    if name == pair.name and through == api:  # a part of it, from a later point, elsewhere
        what = f"{name} through {api} but not all of it as declared (a filter, a start, a deliver)"
    return [
        f"the stream in {sides.standby} mirrors {what}, the spec declares {pair.name} "
        f"through {api}: it was made by someone else; apply the standby environment first "
        f"(reconcile apply --env {sides.standby})"
    ]


def _promoted_problem(pair: Pair, sides: Sides, live: Mapping[str, Any]) -> list[str]:
    """A standby that is no mirror and does not listen on the declared subjects: no
    promotion of this pair made it (a promotion gives them all), so it is no promoted
    standby. Taken for one, the failover fenced the origin (DIVERGED, or done) and its
    writes went to no stream; a rollback was then refused, the standby "promoted"."""
    subjects = list(live.get("subjects") or [])
    declared = list(pair.stream.config.get("subjects") or [])
    if sorted(subjects) == sorted(declared):
        return []
    return [
        f"the stream in {sides.standby} is no mirror and listens on "
        f"{', '.join(subjects) or 'no subject'}, the spec declares {', '.join(declared)}: "
        f"no promotion of this pair made it (made or changed by someone), and fencing "
        f"{sides.origin} would leave its writes to no stream; give it the declared "
        f"subjects if it is this pair's stream promoted by hand, else delete it once what "
        f"it holds is kept elsewhere and apply {sides.standby} "
        f"(reconcile apply --env {sides.standby}: a fresh mirror)"
    ]


def _subjects_problem(pair: Pair, sides: Sides, live: Mapping[str, Any]) -> list[str]:
    """An unfenced origin whose subjects are not the declared ones: the fence would take
    them all, the promotion and a rollback give back only those declared."""
    subjects = list(live.get("subjects") or [])
    declared = list(pair.stream.config.get("subjects") or [])
    if is_fenced(live) or sorted(subjects) == sorted(declared):
        return []
    return [
        f"its subjects in {sides.origin} are {', '.join(subjects) or 'none'}, the spec "
        f"declares {', '.join(declared)}: the fence would take them all and the promotion "
        f"(or a rollback) give back only those declared; apply {sides.origin} first "
        f"(reconcile apply --env {sides.origin})"
    ]


def _last(info: Mapping[str, Any]) -> int:
    return int((info.get("state") or {}).get("last_seq") or 0)


async def pair_state(
    pair: Pair,
    origin: JetStreamClient | None,
    standby: JetStreamClient,
    unread: str = "",
    sides: Sides | None = None,
) -> PairState:
    """One pair read on both sides (``origin`` None: it could not be reached)."""
    sides = sides or Sides()
    origin_info, mirror_info = await asyncio.gather(
        _info(origin, pair.name), _info(standby, pair.name)
    )
    health = pair_health(pair.name, origin_info, mirror_info, unread=unread)
    origin_config = (origin_info or {}).get("config") or {}
    mirror_config = (mirror_info or {}).get("config") or {}
    promoted = mirror_info is not None and takes_writes(mirror_config)
    present = await _consumer_names(standby, pair.name) if mirror_info else set()
    declared = [c.name for c in pair.consumers if c.name in present]
    infos = dict(
        zip(
            declared,
            await asyncio.gather(*(_consumer(standby, pair.name, n) for n in declared)),
            strict=True,
        )
    )
    # created paused by a run that was stopped (it creates, then moves and resumes)
    left = {name for name, info in infos.items() if info and left_paused(info)}
    missing = tuple(c.name for c in pair.consumers if c.name not in present or c.name in left)
    # the origin's consumers: their ack floors decide where the standby's start
    sources = dict(
        zip(
            missing,
            await asyncio.gather(*(_consumer(origin, pair.name, n) for n in missing)),
            strict=True,
        )
    )
    floors = {name: _floor_of(info) for name, info in sources.items()}
    starts = {name: None if f is None else f + 1 for name, f in floors.items()}
    problems = await _problems(
        pair, sides, (origin_info, mirror_info), (origin, standby), present - left
    )
    # the promotion keeps the standby's live config (a promoted one takes the writes with
    # it); a stream that is no standby of this pair (refused above) is not judged so
    gaps = (
        promotion_gaps(mirror_config, pair.stream.config, await standby.server_info())
        if mirror_info is not None and not is_fenced(mirror_config)
        else []
    )
    promotion = unlike_declared(sides, gaps, promoted=promoted, missing=bool(missing))
    if promotion and not (promoted and _promoted_problem(pair, sides, mirror_config)):
        problems.append(Refusal(promotion, _guards(gaps)))
    if sides.owner is not None:  # where the standby's consumers start: the failover's
        problems += _guarding(Guards.FAILOVER, foreign_origin_consumers(sides, sources))
    if promoted and sides.owner is not None:
        problems += _guarding(Guards.FAILOVER, _foreign_consumers(sides, infos))
    unlike = ""
    if promoted and origin is not None and origin_info:
        unlike = await lacks_origin(origin, standby, pair.name, sides)
    return PairState(
        pair=pair,
        health=health,
        origin_fenced=origin_info is not None and is_fenced(origin_config),
        promoted=promoted,
        standby_exists=mirror_info is not None,
        consumers_missing=missing,
        starts=starts,
        problems=tuple(problems),
        warnings=gap_warnings(sides, gaps),
        diverged=unlike,
        window=lacking_window(mirror_config, pair.stream.config)
        if mirror_config.get("mirror")
        else None,
        standby_fenced=mirror_info is not None and is_fenced(mirror_config),
    )


async def pair_states(
    selected: Sequence[Pair],
    origin: JetStreamClient | None,
    standby: JetStreamClient,
    unread: str,
    sides: Sides | None = None,
) -> list[PairState]:
    limit = asyncio.Semaphore(32)

    async def one(pair: Pair) -> PairState:
        async with limit:
            return await pair_state(pair, origin, standby, unread, sides)

    return list(await asyncio.gather(*(one(pair) for pair in selected)))


# --- each pair's health, for plan and drift ---------------------------------------------


@dataclass(frozen=True)
class SidedHealth:
    """A pair's health with the environments on each side."""

    primary: str
    standby: str
    health: PairHealth

    def line(self) -> str:
        pair = f"standby {self.health.stream} ({self.primary} -> {self.standby})"
        return printable(f"{pair}: {health_line(self.health)}")


async def pairs_health(
    project: Project,
    environment: str,
    specs: Sequence[Spec],
    base: ConnectionOptions,
    owner: str,
    *,
    deadline: float | None = None,
) -> list[SidedHealth]:
    """The health of every standby pair of ``specs`` that ``environment`` is a side of
    (the agent passes the specs it planned: no second validation). Each side of each
    pair of environments is read at once, on a connection of its own; ``deadline``
    (seconds): a side that has not answered by then is unread (the agent's reads,
    ``agent.standby``)."""
    found = [
        (spec, spec.standby)
        for spec in specs
        if spec.kind == "Stream"
        and spec.standby is not None
        and environment in (spec.standby.primary, spec.standby.environment)
    ]

    async def group_health(sides: tuple[str, str], group: list[Spec]) -> list[SidedHealth]:
        origin_info, mirror_info, unread = await _both_sides(
            project, sides, [s.name for s in group], base, owner, deadline
        )
        return [
            SidedHealth(
                *sides,
                pair_health(
                    spec.name,
                    origin_info.get(spec.name),
                    mirror_info.get(spec.name),
                    unread=unread,
                ),
            )
            for spec in group
        ]

    groups = _by_sides(found)
    read = await asyncio.gather(*(group_health(s, g) for s, g in groups.items()))
    return [pair for group in read for pair in group]


def _by_sides(found: Sequence[tuple[Spec, Standby]]) -> dict[tuple[str, str], list[Spec]]:
    groups: dict[tuple[str, str], list[Spec]] = {}
    for spec, standby in found:
        groups.setdefault((standby.primary, standby.environment), []).append(spec)
    return groups


async def _both_sides(
    project: Project,
    sides: tuple[str, str],
    streams: Sequence[str],
    base: ConnectionOptions,
    owner: str,
    deadline: float | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], str]:
    """Each side's STREAM.INFO of ``streams`` (name -> info; a side that could not be
    read, or not within ``deadline``, is empty) and why a side could not be read."""

    async def side(env: str) -> dict[str, dict[str, Any]]:
        options = environment_target(project, env, base, owner).options
        async with open_client(options) as client:
            infos = await asyncio.gather(*(_info(client, name) for name in streams))
        return {n: i for n, i in zip(streams, infos, strict=True) if i is not None}

    async def bounded(env: str) -> tuple[dict[str, dict[str, Any]], str]:
        try:
            return await asyncio.wait_for(side(env), deadline), ""
        except TimeoutError:
            if deadline is None:
                raise
            return {}, f"{env} could not be read: no answer within {deadline:g}s"
        except ReconcileError as err:
            return {}, f"{env} could not be read: {err}"

    (origin, unread_origin), (mirror, unread_mirror) = await asyncio.gather(
        *(bounded(env) for env in sides)
    )
    return origin, mirror, "; ".join(p for p in (unread_origin, unread_mirror) if p)


# --- what a failback would delete -------------------------------------------------------


async def failback_losses(
    here: JetStreamClient,
    failbacks: Mapping[str, str],
    project: Project | None,
    environment: str,
    base: ConnectionOptions,
    owner: str,
) -> dict[str, str]:
    """For each failback (``planning.standby.failbacks``: stream -> the primary it will
    mirror), why replacing this environment's old origin would delete messages the
    primary lacks ('' for none): a sequence it holds that the primary does not, its
    message at the last sequence both have not the primary's, or messages past the
    primary's last. An unplanned failover promotes without waiting for what had not been
    copied; a replace would lose it for good. A primary that cannot be read is a reason
    too: nothing tells what it lacks."""
    found: dict[str, str] = {}
    for primary, names in _by_environment(failbacks):
        sides = Sides(origin=environment, standby=primary)
        try:
            async with _other_side(project, primary, base, owner) as there:
                for name in names:
                    found[name] = await lacks_origin(here, there, name, sides)
        except ReconcileError as err:
            for name in names:
                found[name] = printable(f"{primary} could not be read ({err})")
    return found


def _by_environment(streams: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Stream -> another environment, as each environment with its streams, in order."""
    grouped: dict[str, list[str]] = {}
    for name, other in streams.items():
        grouped.setdefault(other, []).append(name)
    return sorted(grouped.items())


def _other_side(
    project: Project | None, environment: str, base: ConnectionOptions, owner: str
) -> contextlib.AbstractAsyncContextManager[JetStreamClient]:
    """A client of the project's ``environment`` (a :class:`ReconcileError` when no
    project file names its servers, or when it cannot be reached)."""
    if project is None:
        raise ReconcileError("no project file names its servers")
    return open_client(environment_target(project, environment, base, owner).options)


async def lacks_origin(
    here: JetStreamClient, there: JetStreamClient, name: str, sides: Sides
) -> str:
    """Why ``there`` (``sides.standby``: a promoted standby, or the primary a failback
    copies) does not hold what ``here`` (``sides.origin``) holds ('' when it does):
    messages past its last sequence, or :func:`diverged`. Unlike a mirror's lag, which
    the failover waits out, a stream that takes writes of its own never gets them."""
    try:
        ours, theirs = await asyncio.gather(
            here.stream_info(name, deleted=True), there.stream_info(name, deleted=True)
        )
    except NotFound:
        return f"{sides.standby} has no stream {name}"
    ours_last, theirs_last = _last(ours), _last(theirs)
    if ours_last > theirs_last and int((ours.get("state") or {}).get("messages") or 0):
        return (
            f"{name} in {sides.origin} holds messages up to sequence {ours_last}, "
            f"{sides.standby} only up to {theirs_last}"
        )
    return printable(await diverged(here, there, name, sides))


@dataclass(frozen=True)
class StandbyWrites:
    """What :func:`standby_writes` read: by stream, why it may not be made (``taken``),
    or why that was not checked (``unread``)."""

    taken: dict[str, str] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)


async def standby_writes(
    made: Mapping[str, str],
    project: Project | None,
    environment: str,
    base: ConnectionOptions,
    owner: str,
) -> StandbyWrites:
    """For each stream about to be made with its subjects in ``environment``, the
    primary its spec names (``planning.standby.made_primaries``: stream -> the standby
    environment), why it may not be (``taken``; absent: it may): the standby's stream
    takes writes (no mirror, not fenced: promoted by a failover). A standby that cannot
    be read refuses nothing: an environment is applied where only its own servers are
    known (a job given only east's credentials), and a first apply makes the primary
    before its standby can be reached (docs/dr.md, Not done yet). The plan says so
    (``unread``)."""
    taken: dict[str, str] = {}
    unread: dict[str, str] = {}
    for standby, names in _by_environment(made):
        try:
            async with _other_side(project, standby, base, owner) as there:
                for name in names:
                    info = await _info(there, name)
                    if info is None:
                        continue
                    config = info.get("config") or {}
                    if takes_writes(config):
                        taken[name] = (
                            f"{name} in {standby} takes the writes (promoted by a failover?)"
                        )
        except ReconcileError as err:
            for name in names:
                unread[name] = printable(
                    f"not checked: {standby}, the standby, could not be read ({err}); made "
                    f"while {standby}'s {name} takes writes (promoted), both would "
                    "(docs/dr.md)"
                )
    return StandbyWrites(taken, unread)
