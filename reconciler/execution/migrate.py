"""Run a migration (:mod:`reconciler.model.migration`) against a server, resumably.

Each phase is written to the temporary stream's metadata before its work starts, and
every action of a phase is idempotent (it looks at the server first), so a migration
killed anywhere is finished by running it again: :func:`migrate` reads the phase back
and goes on from there. Nothing is deleted before its messages are somewhere else:
the old stream only once the temporary stream holds all of them, the temporary stream
only once the new stream holds all of them and has its final config.

``on_phase`` is called at every boundary (``copy``, ``handover``, ``retired``,
``serving``, ``remembered``, ``deleted``, ``created``, ``restored``, ``refill``,
``cutover``, ``final``, ``done``); the fault tests kill the process there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from reconciler.errors import (
    MigrationStalled,
    NotFound,
    RefusedPlan,
    RequestTimeout,
    ServerError,
)
from reconciler.execution.recreate import create_afresh
from reconciler.jetstream import JetStreamClient
from reconciler.model.migration import (
    FILLING_KEY,
    NOTHING,
    SOURCE_HEADER,
    SUBJECT_FIELDS,
    Progress,
    Record,
    at_position,
    can_keep_positions,
    can_mirror,
    consumer_copy,
    copied_by,
    filling_config,
    finished,
    holds_consumers,
    is_durable,
    is_filling,
    new_sequence,
    over_limits,
    overfull,
    per_subject_limit,
    placeholder,
    remembered,
    resettable,
    retired_config,
    serving_config,
    stream_seq,
    temp_config,
    temp_name,
)
from reconciler.model.normalize import owner_of
from reconciler.planning.groups import choose_with, migrating

PhaseHook = Callable[[str], Awaitable[None]]
#: How often a handover looks at the copy (publishes are refused meanwhile).
FAST_POLL = 0.002
#: How often a bulk copy is looked at.
SLOW_POLL = 0.01
#: A copy that has not moved for this long is reported (the migration stays resumable).
STALL_SECONDS = 60.0
#: A restored consumer waits paused until this time, or until it is at its position.
HELD_UNTIL = "2999-01-01T00:00:00Z"
CONSUMER_EXISTS = 10148  # CONSUMER.CREATE: a different consumer already exists
#: How many times a consumer reset is sent before its silence is an error.
RESET_TRIES = 4
SERVER_METADATA_PREFIX = "_nats."


async def _nothing(_: str) -> None:
    return None


async def migrate(
    client: JetStreamClient,
    stream: str,
    target: Mapping[str, Any],
    *,
    on_phase: PhaseHook | None = None,
    stall_seconds: float = STALL_SECONDS,
) -> Progress:
    """Move ``stream`` to the wire config ``target`` keeping its messages.

    When ``stream`` has an interrupted migration (the planner checked its record and the
    person's consent), ``target`` says where it goes: its recorded target (resume), the
    old stream's config (rollback: back to where it started, every message kept), or
    another config (continue: the migration goes on to the config declared now)."""
    run = _Migration(client, stream, on_phase or _nothing, stall_seconds)
    return await run.go(target)


async def reset_until_moved(
    client: JetStreamClient, stream: str, name: str, seq: int, *, tries: int = RESET_TRIES
) -> None:
    """Make ``seq`` the next message of the paused consumer ``name``, surely.

    A replicated consumer's reset is answered by its leader once its peers have applied
    it. A leader elected meanwhile (a new consumer, a busy or partitioned cluster) never
    answers, and the request times out whether or not the reset happened. Moving a
    paused consumer to the same place again changes nothing, so on silence its info
    decides: at ``seq``, done; anywhere else (or no answer), the reset is sent again.
    """
    for attempt in range(1, tries + 1):
        try:
            await client.reset_consumer(stream, name, seq)
            return
        except RequestTimeout:
            with contextlib.suppress(RequestTimeout):
                if at_position(await client.consumer_info(stream, name), seq):
                    return
            if attempt == tries:
                raise


class _Migration:
    def __init__(
        self, client: JetStreamClient, stream: str, hook: PhaseHook, stall_seconds: float
    ) -> None:
        self.client = client
        self.stream = stream
        self.temp = temp_name(stream)
        self.hook = hook
        self.stall_seconds = stall_seconds
        self.progress = Progress(stream)

    async def go(self, target: Mapping[str, Any]) -> Progress:
        record = await self._record()
        if record is None:
            record = await self._start(target)
        elif dict(target) != dict(record.target):
            if dict(target) == dict(record.origin):
                record = await self._rollback(record)
            else:
                record = await self._retarget(record, target)
        phases = {
            "copy": self._copy,
            "handover": self._handover,
            "serving": self._serving,
            "refill": self._refill,
            "cutover": self._cutover,
        }
        while record is not None:
            record = await phases[record.phase](record)
        return self.progress

    # -- the record ------------------------------------------------------------------
    async def _info(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.stream_info(name)
        except NotFound:
            return None

    async def _record(self) -> Record | None:
        info = await self._info(self.temp)
        return None if info is None else Record.of(info["config"])

    async def _advance(self, record: Record, phase: str) -> Record:
        """Write the next phase to the temporary stream (its config otherwise unchanged)."""
        record = await self._write(record.at(phase))
        await self.hook(phase)
        return record

    async def _write(self, record: Record) -> Record:
        """Write ``record`` to the temporary stream, bound to the temporary stream's own
        ``created`` (a fact the server sets)."""
        info = await self._info(self.temp)
        assert info is not None
        record = replace(record, temp_created=info.get("created") or record.temp_created)
        config = dict(info["config"])
        config["metadata"] = {**(config.get("metadata") or {}), **record.metadata()}
        await self.client.update_stream(config)
        return record

    async def _start(self, target: Mapping[str, Any]) -> Record:
        info = await self.client.stream_info(self.stream)
        live, state = info["config"], info.get("state") or {}
        server = await self.client.server_info()
        record = Record(
            stream=self.stream,
            phase="copy",
            target=dict(target),
            subjects={key: live.get(key) for key in SUBJECT_FIELDS},
            first_seq=int(state.get("first_seq") or 1),
            keep_positions=can_keep_positions(server),
            mirrors=can_mirror(server),
            owner=owner_of(target),
            origin=without_server_metadata(live),
            created=info.get("created"),
        )
        await self.client.create_stream(temp_config(live, record))
        await self._hold_consumers(record)
        await self.hook("copy")
        return record

    # -- another way out: rollback, or on to another target ----------------------------
    async def _rollback(self, record: Record) -> Record | None:
        """Back to the old stream's config, every message kept. Before the temporary
        stream takes the publishes (``copy``, ``handover``) the old stream holds every
        message: it gets its subjects back and the temporary stream goes. From then on
        the temporary stream holds them all: the migration goes on, to the old config."""
        if record.phase not in ("copy", "handover"):
            return await self._retarget(record, record.origin)
        old, temp = await self._info(self.stream), await self._info(self.temp)
        if old is None or is_filling(old["config"], self.stream):
            raise self._refused(record, f"stream {self.stream} is not the old stream any more")
        if temp is not None and _takes_publishes(temp["config"], self.temp):
            raise self._refused(record, f"{self.temp} takes publishes")
        if old["config"].get("subjects") == [placeholder(self.stream)]:
            await self._give_back_subjects(old["config"], record)
        for consumer in await self.client.list_consumers(self.stream):
            if consumer["config"].get("pause_until") == HELD_UNTIL:
                await self.client.pause_consumer(self.stream, str(consumer["name"]), None)
        await self.client.delete_stream(self.temp)
        await self.hook("rolled back")
        return None

    async def _give_back_subjects(self, config: Mapping[str, Any], record: Record) -> None:
        """The old stream (its live ``config``) takes publishes again: its config as it
        was before it was retired in this run, or, retired already, the subject fields
        the record kept."""
        config = dict(config)
        if config.get("subjects") == [placeholder(self.stream)]:
            for key in SUBJECT_FIELDS:
                config.pop(key, None)
            config.update({k: v for k, v in record.subjects.items() if v not in (None, [], {})})
        await self.client.update_stream(config)

    async def _retarget(self, record: Record, target: Mapping[str, Any]) -> Record:
        """The interrupted migration goes on to ``target``. Until the new stream is made,
        only the record changes; a new stream still being filled (a copy of the
        temporary stream, which holds every message) is made again for ``target``: its
        consumers are remembered again on the temporary stream, the temporary stream
        takes the publishes again, the new stream is deleted and the migration goes on
        from ``serving``."""
        info = await self._info(self.stream)
        live = None if info is None else info["config"]
        moved = replace(record, target=dict(target))
        if finished(record, live):
            raise self._refused(record, "it has finished but for deleting its temporary stream")
        if live is not None and not is_filling(live, self.stream):
            if record.phase not in ("copy", "handover", "serving"):
                raise self._refused(record, f"stream {self.stream} is not its new stream")
            return await self._write(moved)
        if live is not None:
            temp = await self._info(self.temp)
            assert temp is not None
            if not _takes_publishes(temp["config"], self.temp):
                await self.client.update_stream(await self._serving_config(record, temp))
            await self._hold_consumers(record, new=True)
            await self._remember_consumers(record, from_new=True)
            await self._check_not_copied()
            await self.client.delete_stream(self.stream)
        return await self._write(replace(moved, phase="serving", stream_created=None))

    def _refused(self, record: Record, why: str) -> RefusedPlan:
        return RefusedPlan(
            f"the migration of stream {self.stream} (phase {record.phase}) cannot go another "
            f"way: {why}; nothing was changed. `reconcile apply --migrate --migration resume` "
            "finishes it"
        )

    # -- phases ----------------------------------------------------------------------
    async def _copy(self, record: Record) -> Record:
        """Bulk copy while the old stream still takes publishes."""
        await self._check_copies(self.temp, self.stream)
        await self._hold_consumers(record)
        await self._wait(self.temp, self.stream, fast=False)
        return await self._advance(record, "handover")

    async def _handover(self, record: Record) -> Record:
        """Freeze the old stream, take its last messages, take its subjects."""
        info = await self._info(self.stream)
        started = time.monotonic()
        old = None
        if info is not None and FILLING_KEY not in (info["config"].get("metadata") or {}):
            old = info["config"]
            await self._check_copies(self.temp, self.stream)
            await self._hold_consumers(record)
            if info["config"].get("subjects") != [placeholder(self.stream)]:
                await self.client.update_stream(retired_config(info["config"]))
                started = time.monotonic()
                await self.hook("retired")
            await self._wait(self.temp, self.stream, fast=True)
        temp = await self._info(self.temp)
        assert temp is not None
        config = await self._serving_config(record, temp, give_back=old)
        try:
            await self.client.update_stream(config)
        except ServerError:
            # the subjects are taken (another stream took them after the plan looked):
            # the old stream, which holds every message, takes the publishes back
            if old is not None:
                await self._give_back_subjects(old, record)
            raise
        self.progress.windows_ms.append((time.monotonic() - started) * 1000)
        await self.hook("serving")
        return record.at("serving")

    async def _serving(self, record: Record) -> Record:
        """Remember the consumers, delete the old stream, create the new one empty with
        its consumers restored, then let it copy."""
        info = await self._info(self.stream)
        if info is not None and FILLING_KEY not in (info["config"].get("metadata") or {}):
            await self._hold_consumers(record)
            await self._remember_consumers(record)
            await self.hook("remembered")
            await self._check_holds(record, info)
            await self._check_not_copied()
            await self.client.delete_stream(self.stream)
            await self.hook("deleted")
            info = None
        if info is None:
            await create_afresh(self.client, filling_config(record, copying=False))
            await self.hook("created")
            info = await self._info(self.stream)
        made = (info or {}).get("created")
        record = replace(record, stream_created=made or record.stream_created)
        await self._restore_consumers(record, late=False)
        await self.hook("restored")
        return await self._advance(record, "refill")

    async def _refill(self, record: Record) -> Record:
        """Copy everything back while publishers still write to the temporary stream."""
        info = await self._info(self.stream)
        assert info is not None, f"stream {self.stream} vanished during its migration"
        sources = info["config"].get("sources") or []
        if not record.mirrors and any(s.get("filter_subject") == NOTHING for s in sources):
            await self.client.update_stream(filling_config(record, copying=True))
        await self._wait(self.stream, self.temp, fast=False)
        return await self._advance(record, "cutover")

    async def _cutover(self, record: Record) -> None:
        """Freeze the temporary stream, take its last messages, take the final config."""
        info = await self._info(self.stream)
        assert info is not None, f"stream {self.stream} vanished during its migration"
        if FILLING_KEY in (info["config"].get("metadata") or {}):
            temp = await self._info(self.temp)
            assert temp is not None
            started = time.monotonic()
            if temp["config"].get("subjects") != [placeholder(self.temp)]:
                metadata = record.at("cutover").metadata()
                await self.client.update_stream(retired_config(temp["config"], metadata=metadata))
                started = time.monotonic()
            await self._wait(self.stream, self.temp, fast=True)
            await self._restore_consumers(record, late=True)
            try:
                await self.client.update_stream(dict(record.target))
            except ServerError:
                await self._serve_again(record)
                raise
            self.progress.windows_ms.append((time.monotonic() - started) * 1000)
            await self.hook("final")
        final = await self._info(self.stream)
        self.progress.copied = int(((final or {}).get("state") or {}).get("messages") or 0)
        await self.client.delete_stream(self.temp)
        await self.hook("done")

    async def _serve_again(self, record: Record) -> None:
        """The new stream refused its final config (say, another stream took its
        subjects after the plan looked): the temporary stream, which holds every
        message, takes the publishes back, so none is refused until the next apply
        finishes the cutover (the record stays in it)."""
        temp = await self._info(self.temp)
        assert temp is not None
        config = await self._serving_config(record, temp)
        config["metadata"] = {**config["metadata"], **record.at("cutover").metadata()}
        await self.client.update_stream(config)

    async def _serving_config(
        self,
        record: Record,
        temp: Mapping[str, Any],
        *,
        give_back: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The config by which the temporary stream (its ``temp`` info) takes the
        publishes. A target refusing a subject's publishes past ``max_msgs_per_subject``
        needs the most the copy holds on one subject (read only when it holds more
        messages than that limit): more than the limit, and the copy back would stall;
        so would more than its ``discard: new`` ``max_msgs`` or ``max_bytes`` in all
        (:func:`~reconciler.model.migration.over_limits`). Then the old stream (its
        config ``give_back``, when it still exists) takes the publishes back and the
        migration stops there, every message where it was; without it, the limits stay
        at what the copy holds."""
        state = temp.get("state") or {}
        held = int(state.get("messages") or 0)
        per = per_subject_limit(record.target)
        fullest = None
        if per is not None and held > per:
            fullest = await self.client.fullest_subject(self.temp, held)
        why = over_limits(record, str(temp["config"].get("storage") or "file"), state)
        if why is None and fullest is not None:
            why = overfull(record.target, *fullest)
        if why is not None and give_back is not None:
            await self._give_back_subjects(give_back, record)
            raise RefusedPlan(
                f"migrating {self.stream}: {why}. Stream {self.stream} takes the publishes "
                f"again and holds its messages; nothing was lost. {choose_with()} rollback "
                "ends this migration; then migrate again with its publishers paused, or a "
                "higher limit"
            )
        return serving_config(temp["config"], record, state, fullest[1] if fullest else 0)

    # -- consumers -------------------------------------------------------------------
    async def _remember_consumers(self, record: Record, *, from_new: bool = False) -> None:
        """A copy on the temporary stream of every durable consumer of the old stream
        (``from_new``: of the new stream, made again for another target): its config,
        and where it is (its ack floor's next message, in the temporary stream's
        sequences: unacknowledged messages are delivered again)."""
        for consumer in await self.client.list_consumers(self.stream):
            config = dict(consumer["config"])
            if not is_durable(config):
                continue  # an ephemeral consumer goes with its stream (the plan said so)
            name = str(config["durable_name"])
            metadata = {
                key: value
                for key, value in (config.get("metadata") or {}).items()
                if not key.startswith(SERVER_METADATA_PREFIX)
            }
            restore = (
                {**config, "metadata": metadata}
                if metadata
                else {k: v for k, v in config.items() if k != "metadata"}
            )
            if restore.get("pause_until") == HELD_UNTIL:
                del restore["pause_until"]  # held by a restore that had not finished
            floor = stream_seq(consumer, "ack_floor")
            if record.mirrors:
                start = floor + 1
            elif from_new:  # the inverse of new_sequence
                start = floor + 2 - max(record.first_seq, 1)
            else:
                start = await self._temp_position(floor + 1)
            try:
                await self.client.create_consumer(
                    self.temp, consumer_copy(name, restore, start), action="create"
                )
            except ServerError as err:
                if err.err_code != CONSUMER_EXISTS:
                    raise  # else remembered by an earlier attempt, at an earlier position

    async def _hold_consumers(self, record: Record, *, new: bool = False) -> None:
        """Pause every consumer of the old stream of a ``workqueue`` or ``interest``
        migration (:func:`holds_consumers`) until it is restored on the new stream (its
        copy forgets the pause): an acknowledgement there would delete a message the
        copy already holds, and the copy would bring it back (``new``: the consumers of a
        new stream made again for another target, remembered again). Idempotent; a
        rollback resumes them. A consumer already paused (by its owner) is left as it is."""
        retention = (record.target if new else record.origin).get("retention")
        if not holds_consumers(retention, await self.client.server_info()):
            return
        for consumer in await self.client.list_consumers(self.stream):
            if not consumer["config"].get("pause_until"):
                await self.client.pause_consumer(self.stream, str(consumer["name"]), HELD_UNTIL)

    async def _restore_consumers(self, record: Record, *, late: bool) -> None:
        """Create the remembered consumers on the new stream: the ones a reset moves
        (``late=False``) before the copy back, at their positions; the others
        (``late=True``) once it is complete, before publishes resume."""
        for copy in await self.client.list_consumers(self.temp):
            memory = remembered(copy["config"])
            if memory is None or resettable(memory.config) == late:
                continue
            moved = record.keep_positions and not late
            config = dict(memory.config)
            if moved and not config.get("pause_until"):
                # Paused until it is at its position: a push consumer would otherwise
                # deliver from the start of what is already copied.
                config["pause_until"] = HELD_UNTIL
            try:
                try:
                    await self.client.create_consumer(self.stream, config, action="create")
                except ServerError as err:
                    if err.err_code != CONSUMER_EXISTS:
                        raise
                if moved:
                    seq = new_sequence(memory.start, record)
                    await reset_until_moved(self.client, self.stream, memory.name, seq)
                    if not memory.config.get("pause_until"):
                        await self.client.pause_consumer(self.stream, memory.name, None)
            except ServerError as err:
                self.progress.not_restored.append(f"{memory.name}: {err}")
                continue
            await self.client.delete_consumer(self.temp, memory.name)
            self.progress.restored.append(memory.name)

    async def _temp_position(self, origin_seq: int) -> int:
        """The first message of the temporary stream copied from ``origin_seq`` or later
        (found by bisection on the copies' ``Nats-Stream-Source`` headers; a message
        published to the temporary stream itself has none and comes after them all)."""
        info = await self._info(self.temp)
        state = (info or {}).get("state") or {}
        low, high = int(state.get("first_seq") or 1), int(state.get("last_seq") or 0) + 1
        while low < high:
            middle = (low + high) // 2
            message = await self.client.stored_message(self.temp, {"seq": middle})
            source = None if message is None else _source_seq(message["headers"])
            if source is not None and source < origin_seq:
                low = middle + 1
            else:
                high = middle
        return low

    # -- what must be true before a step that cannot be undone -------------------------
    async def _check_copies(self, stream: str, origin: str) -> None:
        """Refuse to go on unless ``stream`` copies ``origin`` (a temporary stream that
        someone else made may copy nothing: the old stream must not be retired then)."""
        config = (await self._info(stream) or {}).get("config") or {}
        copies = [config.get("mirror"), *(config.get("sources") or [])]
        if not any(c and c.get("name") == origin for c in copies):
            raise RefusedPlan(
                f"migrating {self.stream}: {stream} does not copy {origin}, so it is not this "
                "migration's copy; nothing was deleted"
            )

    async def _check_holds(self, record: Record, old: Mapping[str, Any]) -> None:
        """Refuse to delete the old stream unless the temporary stream holds every one of
        its messages: as many, and the old stream's last message among them (with
        mirrors at its very sequence and time)."""
        state = old.get("state") or {}
        count = int(state.get("messages") or 0)
        if count == 0:
            return
        temp = await self._info(self.temp) or {}
        try:
            last = await self.client.stored_message(self.stream, {"last_by_subj": ">"})
        except ServerError:
            last = await self.client.stored_message(self.stream, {"seq": state.get("last_seq")})
        held = int((temp.get("state") or {}).get("messages") or 0) >= count
        if held and last is not None:
            held = await self._has_copy(record, last)
        if not held:
            raise RefusedPlan(
                f"refusing to delete stream {self.stream}: {self.temp} does not hold its "
                f"{count} messages; nothing was deleted"
            )

    async def _check_not_copied(self) -> None:
        """Refuse to delete the stream while another stream sources or mirrors it: one
        made after the plan looked (which refuses those it sees) would copy every
        message again once the stream is made anew (measured: AGG, made during the
        copy, 100 -> 200 some 15 s after the migration)."""
        streams = await self.client.list_streams()
        others = [(str(i["config"]["name"]), i["config"]) for i in streams if i.get("config")]
        copies = copied_by(self.stream, others)
        if copies:
            named = ", ".join(f"{name!r} ({how})" for name, how in copies)
            raise RefusedPlan(
                f"refusing to delete stream {self.stream} during its migration: {named} "
                "copies its messages (made after the plan looked), and would copy them all "
                f"again. Take {self.stream} out of its sources (or mirror), then "
                f"{migrating()} resumes; nothing was deleted"
            )

    async def _has_copy(self, record: Record, last: Mapping[str, Any]) -> bool:
        """Whether the temporary stream holds a copy of the old stream's ``last`` message."""
        seq = int(last["seq"])
        mirror = record.mirrors
        where = seq if mirror else await self._temp_position(seq)
        copy = await self.client.stored_message(self.temp, {"seq": where})
        if copy is None or copy.get("subject") != last.get("subject"):
            return False
        if copy.get("data") != last.get("data"):
            return False
        if mirror:
            return bool(copy.get("time") == last.get("time"))
        return _source_seq(copy.get("headers") or {}) == seq

    # -- waiting for a copy ----------------------------------------------------------
    async def _last_stored(self, origin: str) -> int:
        """The sequence of the last message ``origin`` holds (0: none)."""
        try:
            message = await self.client.stored_message(origin, {"last_by_subj": ">"})
            return 0 if message is None else int(message["seq"])
        except ServerError:
            info = await self._info(origin)
            return int(((info or {}).get("state") or {}).get("last_seq") or 0)

    async def _copied_upto(
        self, stream: str, info: Mapping[str, Any], source: Mapping[str, Any] | None
    ) -> int:
        """The origin sequence ``stream`` has copied up to: a mirror's last sequence (a
        mirror keeps them), a source's ``seq`` (nats-server 2.14+), else the
        ``Nats-Stream-Source`` header of its last message."""
        if source is None:
            return 0
        if info.get("mirror") is source:
            return int((info.get("state") or {}).get("last_seq") or 0)
        if "seq" in source:
            return int(source.get("seq") or 0)
        last = await self.client.stored_message(stream, {"last_by_subj": ">"})
        return 0 if last is None else (_source_seq(last["headers"]) or 0)

    async def _wait(self, stream: str, origin: str, *, fast: bool) -> None:
        """Until ``stream`` has copied ``origin`` up to the last message it holds now."""
        goal = await self._last_stored(origin)
        pause = FAST_POLL if fast else SLOW_POLL
        seen, moved = -1, time.monotonic()
        while True:
            info = await self._info(stream) or {}
            copies = [info.get("mirror"), *(info.get("sources") or [])]
            source = next((s for s in copies if s and s.get("name") == origin), None)
            at = await self._copied_upto(stream, info, source)
            if at >= goal and not (source or {}).get("lag"):
                return
            if at != seen:
                seen, moved = at, time.monotonic()
            elif time.monotonic() - moved > self.stall_seconds:
                error = (source or {}).get("error") or {}
                why = f": {error.get('description')}" if error else ""
                raise MigrationStalled(
                    f"migrating {self.stream}: copying from {origin} into {stream} stopped at "
                    f"sequence {at} of {goal}{why}; no message is lost, and the next apply "
                    "resumes the migration"
                )
            await asyncio.sleep(pause)


def without_server_metadata(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stream's config less the metadata the server writes itself (``_nats.``)."""
    metadata = {
        k: v
        for k, v in (config.get("metadata") or {}).items()
        if not k.startswith(SERVER_METADATA_PREFIX)
    }
    out = {k: v for k, v in config.items() if k != "metadata"}
    if metadata:
        out["metadata"] = metadata
    return out


def _takes_publishes(config: Mapping[str, Any], name: str) -> bool:
    """Whether a stream listens on subjects of its own (not its placeholder)."""
    subjects = config.get("subjects") or []
    return bool(subjects) and subjects != [placeholder(name)]


def _source_seq(headers: Mapping[str, str]) -> int | None:
    """The origin sequence in a ``Nats-Stream-Source`` header (``NAME SEQ ...``)."""
    parts = headers.get(SOURCE_HEADER, "").split()
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1])
