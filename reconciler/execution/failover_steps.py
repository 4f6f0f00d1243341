"""One standby pair's failover steps (``reconcile failover``, docs/dr.md): each reads
what is live and does what is left, so a re-run after an interruption finishes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler.errors import NotFound, ReconcileError, ServerError
from reconciler.execution.lock import Fence
from reconciler.execution.pair_reads import (
    PairState,
    Sides,
    _consumer,
    _consumer_names,
    _floor_of,
    _info,
    diverged,
    foreign_origin_consumers,
    lacks_origin,
    unlike_declared,
)
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import JetStreamClient
from reconciler.jetstream.transport import WRONG_LAST_SEQUENCE
from reconciler.model.migration import resettable
from reconciler.model.normalize import desired_config
from reconciler.model.promotion import promotion_gaps
from reconciler.model.standby import (
    FAILOVER_PAUSE_UNTIL,
    fence_subject,
    is_fenced,
    lacking_window,
    left_paused,
    promoted_config,
    takes_writes,
    unknown_ids_for,
)
from reconciler.model.timestamps import rfc3339
from reconciler.specs.spec import Spec
from reconciler.specs.units import format_duration

if TYPE_CHECKING:
    from reconciler.execution.failover import FailoverPlan, FailoverRequest

Say = Callable[[str], None]
#: How often the mirror's last sequence is read while waiting for it.
POLL_SECONDS = 0.05
#: The first release with CONSUMER.RESET (a consumer moved without changing its config).
_RESET_LEVEL = 4
#: Test hook: ``RECONCILE_FAILOVER_PAUSE=<phase>`` sleeps after that phase is recorded, so a
#: test can kill the process there (a step takes milliseconds: no window to hit otherwise).
PAUSE_ENV = "RECONCILE_FAILOVER_PAUSE"
#: The header marking the verify's probe for the stream's core subscribers (docs/dr.md).
PROBE_HEADER = "Reconcile-Probe"
PHASES = (
    "window restored",
    "fenced",
    "converged",
    "promoted",
    "consumer paused",
    "consumers",
    "done",
)


async def verify_locks(fences: Sequence[Fence]) -> None:
    """Every lease still ours, before a step changes a server."""
    for fence in fences:
        await fence.verify()


@dataclass
class PairSteps:
    """One pair's failover: each step reads what is live and does what is left."""

    state: PairState
    the_plan: FailoverPlan
    request: FailoverRequest
    origin: JetStreamClient | None
    standby: JetStreamClient
    fences: Sequence[Fence]
    say: Say
    fenced_at: float | None = None
    window: float | None = None

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def sides(self) -> Sides:
        return Sides(self.the_plan.origin, self.the_plan.standby)

    async def run(self) -> None:
        try:
            if self.origin is not None:
                await self.fence()
            promoted = self.state.promoted
            if not promoted:
                last = await self.converged() if self.origin is not None else None
                await self.promote(last)
        except asyncio.CancelledError:  # Ctrl-C: neither side would take writes
            await self.interrupted()
            raise
        except ReconcileError as err:  # refused by a server, say: the same
            try:
                back = await self.interrupted()
            except ReconcileError as lost:
                raise ReconcileError(
                    f"{err}; {self.the_plan.origin} could not be given its subjects back "
                    f"({lost}): run the failover again, or with --rollback"
                ) from err
            if back:  # said in the problem too: a caller may not hear the remarks
                raise ReconcileError(
                    f"{err}; {self.the_plan.origin} has its subjects back (it takes the "
                    "writes), nothing was promoted"
                ) from err
            raise
        if promoted:
            await self.check_copy()
        await self.consumers()
        await self.verify()
        await self.record("done")

    async def check_copy(self) -> None:
        """A standby found promoted holds what the (now fenced) origin holds (no message
        past its last sequence, the origin's at the last both have:
        ``pair_reads.lacks_origin``); else the pair stops here: the origin stays fenced (it keeps
        its messages), the standby takes the writes, no consumer is created (the origin's
        ack floors are sequences of other messages there)."""
        if self.origin is None:  # unplanned: nothing to compare with
            return
        unlike = await lacks_origin(self.origin, self.standby, self.name, self.sides)
        if unlike:
            raise ReconcileError(
                f"{unlike}; {self.the_plan.origin} is fenced and keeps its messages, "
                f"{self.the_plan.standby} takes the writes, no consumer was created: "
                "compare both sides"
            )

    async def interrupted(self) -> bool:
        """Stopped (Ctrl-C, or a step refused) between the fence and the promotion: the
        origin gets its subjects back, unless the mirror was promoted after all (its
        update sent before the stop, its answer lost): then a re-run finishes. Whether
        the origin was given them back now."""
        if self.origin is None:
            return False
        mirror = await _info(self.standby, self.name)
        if mirror is None or mirror["config"].get("mirror"):
            return await self.unfence()
        return False

    async def restore_window(self) -> float:
        """Before the fence, the mirror gets back the duplicate window it lacks (a restart
        of its server drops it: ``model.standby.lacking_window``); how long the fence must
        then wait (seconds): until the messages it mirrored without it are out of it, as
        only ids mirrored after the update are known (``model.standby.unknown_ids_for``)
        and a publisher's retry, within the window, of a message the origin stored before
        would be stored again on the promoted stream. The origin takes the writes
        meanwhile. Nothing is done (0) without the origin, or once it is fenced (a re-run):
        no write comes to record, and the promotion gives the window. A server that does
        not keep the window (a clustered JetStream keeps none on a mirror) is said so,
        and not waited for."""
        if self.origin is None:
            return 0.0
        origin, mirror = await asyncio.gather(
            _info(self.origin, self.name), _info(self.standby, self.name)
        )
        if origin is None or is_fenced(origin["config"]):
            return 0.0
        if mirror is None or not mirror["config"].get("mirror"):
            return 0.0
        lacking = lacking_window(mirror["config"], self.state.pair.stream.config)
        if lacking is None:
            return 0.0
        await verify_locks(self.fences)
        await self.standby.update_stream({**mirror["config"], "duplicate_window": lacking[1]})
        restored = await _info(self.standby, self.name) or {}
        if lacking_window(restored.get("config") or {}, self.state.pair.stream.config):
            self.say(  # no id is recorded: waiting would only delay the fence
                f"{self.name}: the server of {self.the_plan.standby} did not keep the "
                "mirror's duplicate_window (a clustered JetStream keeps none on a mirror: "
                "docs/jetstream-notes.md): it knows no Nats-Msg-Id, a retry of a message "
                f"{self.the_plan.origin} stored is stored again; the promotion gives the window"
            )
            return 0.0
        hold = unknown_ids_for(restored, lacking[1])
        self.say(
            f"{self.name}: the mirror in {self.the_plan.standby} has its duplicate_window "
            f"back ({format_duration(lacking[1])}); the fence waits {hold:.1f}s, until the "
            "messages it mirrored without it are out of it"
        )
        await self.record("window restored", hold_seconds=round(hold, 3))
        return hold

    async def fence(self) -> None:
        assert self.origin is not None
        info = await _info(self.origin, self.name)
        if info is None:
            raise ReconcileError(f"no stream {self.name} on the origin any more")
        config = dict(info["config"])
        if is_fenced(config):
            return
        if self.state.promoted:
            self.say(f"{self.name}: the standby is promoted and the origin takes writes again")
        await verify_locks(self.fences)
        config["subjects"] = [fence_subject(self.name)]
        await self.origin.update_stream(config)
        self.fenced_at = time.monotonic()
        self.say(
            f"{self.name}: {self.the_plan.origin} fenced: it listens only on "
            f"{fence_subject(self.name)}, so no write is acknowledged there"
        )
        await self.record("fenced")

    async def converged(self) -> int:
        """The origin's last sequence once the mirror has it; else the fence is lifted
        and the pair refused with its lag."""
        assert self.origin is not None
        origin_info = await _info(self.origin, self.name)
        target = int(((origin_info or {}).get("state") or {}).get("last_seq", 0))
        deadline = time.monotonic() + self.request.wait
        mirror_last = -1
        while True:
            mirror = await _info(self.standby, self.name)
            mirror_last = int(((mirror or {}).get("state") or {}).get("last_seq", 0))
            if mirror_last >= target:
                unlike = await diverged(self.origin, self.standby, self.name, self.sides, target)
                if unlike:
                    await self.unfence()
                    raise ReconcileError(f"{unlike}; the origin has its subjects back")
                break
            if time.monotonic() >= deadline:
                await self.unfence()
                raise ReconcileError(
                    f"the mirror did not reach the origin's last sequence {target} within "
                    f"{self.request.wait:g}s (it has {mirror_last}: lag {target - mirror_last}); "
                    "the origin has its subjects back, nothing was promoted"
                )
            await asyncio.sleep(POLL_SECONDS)
        await self.record("converged", origin_last_seq=target)
        return target

    async def unfence(self) -> bool:
        """The origin's subjects back; whether it was fenced (else nothing is done)."""
        assert self.origin is not None
        info = await _info(self.origin, self.name)
        if info is None or not is_fenced(info["config"]):
            return False
        await verify_locks(self.fences)
        await self.origin.update_stream({**info["config"], "subjects": self.state.subjects})
        self.say(f"{self.name}: {self.the_plan.origin} takes writes again (its subjects back)")
        return True

    async def roll_back(self) -> None:
        """The fenced origin's subjects back, read again first: refused while the
        standby's stream takes writes (``model.standby.takes_writes``: promoted), never
        for one fenced (an old origin, which takes none)."""
        mirror = await _info(self.standby, self.name)
        if mirror is not None and takes_writes(mirror["config"]):
            raise ReconcileError("the mirror is promoted: a rollback would lose its writes")
        await self.unfence()
        await self.record("rolled back")

    async def promote(self, origin_last: int | None) -> None:
        mirror = await _info(self.standby, self.name)
        if mirror is None:
            raise ReconcileError(f"no stream {self.name} on the standby")
        await verify_locks(self.fences)
        state = self.state
        await self.standby.update_stream(
            promoted_config(mirror["config"], state.subjects, state.pair.stream.config)
        )
        if self.fenced_at is not None:
            self.window = time.monotonic() - self.fenced_at
        where = "" if origin_last is None else f" at sequence {origin_last}"
        self.say(f"{self.name}: {self.the_plan.standby} promoted{where}: it takes the writes")
        await self.record("promoted")

    async def consumers(self) -> None:
        present = await _consumer_names(self.standby, self.name)
        info = await _info(self.standby, self.name)
        stream_config = (info or {}).get("config") or {}
        server = await self.standby.server_info()
        owner = self.the_plan_owner
        for spec in self.state.pair.consumers:
            start = await self._start(spec.name)
            if spec.name in present:
                await self._finish_paused(spec, start)
                continue
            config = desired_config(spec, server, stream_config=stream_config, owner=owner)
            await verify_locks(self.fences)
            await self._create(spec, config, start, server.api_level)
        await self.record("consumers")

    @property
    def the_plan_owner(self) -> str:
        return self.request.standby.owner

    async def _start(self, name: str) -> int | None:
        """Where the standby's consumer ``name`` starts: the origin's ack floor + 1
        (None: the origin unread, or its consumer gone: the first message). Judged again
        here, just before the create, with the plan's rule
        (``pair_reads.foreign_origin_consumers``): a consumer made again on the origin
        by someone since the check never decides where the project's starts."""
        info = await _consumer(self.origin, self.name, name)
        sides = Sides(self.the_plan.origin, self.the_plan.standby, self.the_plan_owner)
        if foreign_origin_consumers(sides, {name: info}):
            origin, standby = self.the_plan.origin, self.the_plan.standby
            raise ReconcileError(
                f"consumer {name} on the stream in {origin} is not managed by "
                f"{sides.owner!r} any more (made again by someone during the failover): its "
                f"ack floor is no position of this project's, so {name} was not created in "
                f"{standby}; delete it in {origin} and run the failover again ({name} then "
                "starts at the stream's first message: everything delivered again, nothing "
                "skipped)"
            )
        floor = _floor_of(info)
        return None if floor is None else floor + 1

    async def _create(
        self, spec: Spec, config: dict[str, Any], start: int | None, level: int
    ) -> None:
        where = "the stream's first message" if start is None else f"sequence {start}"
        movable = resettable(config)  # CONSUMER.RESET refuses new, last, last_per_subject
        if start is None and movable:
            await self.standby.create_consumer(self.name, config, action="create")
        elif start is not None and level >= _RESET_LEVEL and movable:
            paused = {**config, "pause_until": FAILOVER_PAUSE_UNTIL}
            await self.standby.create_consumer(self.name, paused, action="create")
            await self.record("consumer paused", consumer=spec.name)
            await self.standby.reset_consumer(self.name, spec.name, start)
            await self.standby.pause_consumer(self.name, spec.name, None)
        else:  # by sequence, from the first message when the origin was not read
            moved = {**config, "deliver_policy": "by_start_sequence", "opt_start_seq": start or 1}
            await self.standby.create_consumer(self.name, moved, action="create")
        self.say(f"{self.name}: consumer {spec.name} created from {where}")

    async def _finish_paused(self, spec: Spec, start: int | None) -> None:
        """A consumer created paused by an interrupted run: moved and resumed now."""
        try:
            info = await self.standby.consumer_info(self.name, spec.name)
        except NotFound:
            return
        if not left_paused(info):
            return
        await verify_locks(self.fences)
        if start is None:  # the origin unread (unplanned): it stays at the first message
            await self.standby.pause_consumer(self.name, spec.name, None)
            self.say(f"{self.name}: consumer {spec.name} resumed from the stream's first message")
            return
        await self.standby.reset_consumer(self.name, spec.name, start)
        await self.standby.pause_consumer(self.name, spec.name, None)
        self.say(f"{self.name}: consumer {spec.name} moved to sequence {start} and resumed")

    async def verify(self) -> None:
        mirror = await _info(self.standby, self.name)
        origin = await _info(self.origin, self.name)
        if mirror is None:
            raise ReconcileError("the promoted stream is gone")
        # refused before the fence (pair_reads): changed by someone since, it is said
        server = await self.standby.server_info()
        gaps = promotion_gaps(mirror["config"], self.state.pair.stream.config, server)
        unlike = unlike_declared(self.sides, gaps, promoted=True)
        if unlike:
            raise ReconcileError(unlike)
        if origin is not None and self.origin is not None:
            o_state, m_state = origin["state"], mirror["state"]
            if int(m_state["last_seq"]) < int(o_state["last_seq"]):
                raise ReconcileError(
                    f"the promoted stream's last sequence {m_state['last_seq']} is below "
                    f"the origin's {o_state['last_seq']}"
                )
            unlike = await diverged(self.origin, self.standby, self.name, self.sides)
            if unlike:
                raise ReconcileError(unlike)
            if int(m_state["messages"]) < int(o_state["messages"]):
                self.say(
                    f"{self.name}: {m_state['messages']} messages promoted, "
                    f"{o_state['messages']} on the origin"
                )
        await self.probe()

    async def probe(self) -> None:
        await probe(self.standby, self.name, self.state.subjects)

    async def record(self, phase: str, **facts: Any) -> None:
        """The pair's progress in the standby's lock bucket (shown, never trusted)."""
        body = {
            "stream": self.name,
            "from": self.the_plan.origin,
            "to": self.the_plan.standby,
            "phase": phase,
            "at": rfc3339(time.time()),
            **facts,
        }
        key = f"failover.{self.name}"
        with contextlib.suppress(ServerError):
            value = json.dumps(body).encode()
            entry = await self.standby.kv_entry(LOCK_BUCKET, key)
            if entry is None:
                await self.standby.kv_create(LOCK_BUCKET, key, value)
            else:
                await self.standby.kv_update(LOCK_BUCKET, key, value, entry.revision)
        if os.environ.get(PAUSE_ENV) == phase:
            await asyncio.sleep(3600)


async def probe(client: JetStreamClient, name: str, subjects: Sequence[str]) -> None:
    """A publish on each of the stream's declared ``subjects`` (one request each, a
    concrete subject made of it: :func:`_probe_subject`) must be answered by stream
    ``name``'s own refusal of it: an impossible ``Nats-Expected-Last-Sequence`` makes the
    stream answer err_code 10071 and store nothing. Any other answer (another stream, an
    error of another kind, a message stored, a reply that is no publish acknowledgement)
    is refused: a responder on the subject naming the stream in an error of its own made
    the verify pass; so is a declared subject the promoted stream does not listen on (the
    first one alone was probed: a stream missing the others passed). Core subscribers of
    the subjects receive the probes too (JetStream cannot stop that): :data:`PROBE_HEADER`
    marks them for them (docs/dr.md). Every subject not answered is named."""
    headers = {
        "Nats-Expected-Last-Sequence": str(2**63 - 1),
        PROBE_HEADER: f"failover verify of {name}",
    }

    async def one(declared: str) -> str:
        subject = _probe_subject(declared)
        shown = subject if subject == declared else f"{subject} (of {declared})"
        try:
            reply = await client.raw_request(subject, b"", headers=headers)
        except ReconcileError as err:
            return f"nobody answers a publish on {shown}: {err}"
        if refused_probe(reply, name):
            return ""
        return (
            f"a publish on {shown} is not answered by {name} (its refusal of the probe, "
            f"err_code {WRONG_LAST_SEQUENCE}): someone else answers there, or the stream "
            "does not take the subject"
        )

    unanswered = [p for p in await asyncio.gather(*(one(s) for s in subjects or [""])) if p]
    if unanswered:
        raise ReconcileError("; ".join(unanswered))


def refused_probe(reply: bytes, name: str) -> bool:
    """Whether ``reply`` is stream ``name``'s publish acknowledgement refusing the probe
    (err_code 10071, nothing stored). Untrusted: anything else is False."""
    try:
        answer = json.loads(reply)
    except ValueError:
        return False
    if not isinstance(answer, dict) or answer.get("stream") != name:
        return False
    error = answer.get("error")
    if not isinstance(error, dict) or error.get("err_code") != WRONG_LAST_SEQUENCE:
        return False
    return answer.get("seq") in (None, 0)  # a sequence: something was stored


def _probe_subject(subject: str) -> str:
    """A concrete subject ``subject`` (a declared one) takes: each wildcard token
    (``*``, ``>``) filled in with ``_reconcile_probe``."""
    tokens = subject.split(".")
    return ".".join("_reconcile_probe" if t in ("*", ">") else t for t in tokens)
