"""``reconcile restore DIR``: plan, ask, restore through the RESTORE API, verify.

1. Read the folder (our manifest, or the nats CLI's ``backup.json`` folders) and check
   every selected stream's files (digests, sizes, the S2 framing) before anything is
   sent: a damaged or truncated snapshot is refused with the file named.
2. Plan against the server: a stream that is not there is restored; one that holds
   exactly what the backup holds (state and consumer positions) was restored already (a
   re-run after an interruption finishes the rest); one that is what an interrupted
   restore of it left (:func:`leftover`) is deleted and restored again; any other
   stream of the same name is refused unless ``replace_existing``, and then it is a
   destructive step that needs the flags a replace needs (``--allow-replace`` or
   ``--allow-data-loss``).
3. Restore up to ``parallel`` streams at once, each read from disk chunk by chunk, then
   compare the restored stream with the backup (message count, bytes, first and last
   sequence and time; each consumer's delivered and ack-floor positions): a difference
   is an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from reconciler.backup.layout import BackupError, chunks
from reconciler.backup.manifest import (
    Contents,
    StreamRecord,
    completeness,
    file_problems,
    mark,
    positions,
    read_contents,
    state_of,
)
from reconciler.backup.memory import DELIVERED, FLOOR, memory_refused, restore_memory, restoring
from reconciler.errors import NotFound, ReconcileError, RefusedPlan
from reconciler.execution.migrate import without_server_metadata
from reconciler.execution.run import check_approved
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.jetstream.snapshots import RESTORE_CHUNK, restore_stream
from reconciler.model.migration import resettable
from reconciler.model.state import ServerInfo
from reconciler.planning.steps import ALLOW_DATA_LOSS, ALLOW_REPLACE, allows, recorded_reason
from reconciler.specs.lifecycle import recorded_protection

#: Streams restored at once unless told otherwise: one. nats-server 2.15.1 died (Go's
#: "concurrent map iteration and map write" in ``jsAccount.tieredReservation``, called
#: from ``RestoreStreamV2``) restoring 1,000 small streams 4 at a time; one at a time it
#: restored them all (bench/bench_backup.py).
PARALLEL = 1

#: restored: the server holds it already, as the backup does; resume: the server holds
#: what an interrupted restore of it left (:func:`leftover`), deleted and restored again.
Action = Literal["restore", "replace", "restored", "resume"]
Notice = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class RestoreStep:
    record: StreamRecord
    action: Action
    size: int  # bytes of the snapshot file

    @property
    def destructive(self) -> bool:
        return self.action == "replace"


@dataclass(frozen=True)
class RestorePlan:
    contents: Contents
    steps: tuple[RestoreStep, ...]
    server: ServerInfo

    @property
    def has_changes(self) -> bool:
        return any(s.action != "restored" for s in self.steps)


@dataclass(frozen=True)
class RestoreResult:
    plan: RestorePlan
    restored: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    cancelled: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Flags:
    replace_existing: bool = False
    allow_replace: bool = False
    allow_data_loss: bool = False
    only: tuple[str, ...] = ()


@dataclass
class _Events:
    on_notice: Notice = _quiet
    on_plan: Callable[[RestorePlan], None] | None = None
    on_progress: Callable[[str, int, bool], None] | None = None
    seen: dict[str, int] = field(default_factory=dict)


def check_folder(root: Path, only: Sequence[str] = ()) -> tuple[Contents, list[StreamRecord]]:
    """The folder's contents and the selected streams, every file checked (no server):
    :class:`BackupError` names each damaged or missing file."""
    contents = read_contents(root)
    known = {s.name for s in contents.streams}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise BackupError(f"{root}: holds no stream " + ", ".join(repr(n) for n in unknown))
    selected = [s for s in contents.streams if not only or s.name in only]
    problems = completeness(contents)
    for record in selected:
        problems += file_problems(contents, record)
    if problems:
        raise BackupError(
            "the backup cannot be restored as it is; nothing was sent:\n"
            + "\n".join(f"    {p}" for p in problems)
        )
    return contents, selected


def differences(
    record: StreamRecord, info: Mapping[str, Any], consumers: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Where the live stream differs from the backup: state fields, consumers missing,
    and positions (within the range the backup saw for a consumer at work)."""
    found = []
    expected, live = state_of(record.state), state_of(info.get("state") or {})
    for name, value in expected.items():
        if value is not None and live.get(name) != value:
            found.append(f"{record.name}: {name} is {live.get(name)}, the backup has {value}")
    return found + consumer_differences(record, consumers)


def consumer_differences(
    record: StreamRecord, consumers: Mapping[str, Mapping[str, Any]], *, missing: bool = True
) -> list[str]:
    """Where the live consumers' positions are not the backup's (``missing``: a consumer
    of the backup that is not there counts)."""
    found = []
    for consumer in record.consumers:
        got = consumers.get(consumer.name)
        if got is None:
            if missing:
                found.append(f"{record.name}: consumer {consumer.name} is missing")
            continue
        now = positions(got)
        low = consumer.earliest or consumer.positions
        if record.through_mirror:  # moved by CONSUMER.RESET: pending ones come again
            if consumer.config is not None and not resettable(consumer.config):
                continue  # made as it is (a reset refuses its deliver policy)
            floor = consumer.positions.get(FLOOR, 0)
            if now.get(FLOOR) != floor or now.get(DELIVERED) != floor:
                found.append(
                    f"{record.name}: consumer {consumer.name} is at {now.get(FLOOR)} "
                    f"(delivered {now.get(DELIVERED)}), the backup has its ack floor at {floor}"
                )
            continue
        for key, high in consumer.positions.items():
            lowest = min(low.get(key, high), high)
            if not lowest <= now.get(key, -1) <= high:
                found.append(
                    f"{record.name}: consumer {consumer.name} {key} is {now.get(key)}, "
                    f"the backup has {high}"
                )
    return found


async def _live(
    client: JetStreamClient, name: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
    try:
        info = await client.stream_info(name)
    except NotFound:
        return None
    listed = await client.list_consumers(name)
    return info, {str(c.get("name")): c for c in listed}


def _ns(text: object) -> int | None:
    """An RFC 3339 time with nanoseconds (as the server writes them) in ns since 1970."""
    raw = str(text or "").removesuffix("Z")
    whole, _, fraction = raw.partition(".")
    try:
        seconds = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
        return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])
    except ValueError:
        return None


def _prefix_of(record: StreamRecord, info: Mapping[str, Any]) -> bool:
    """The live stream's config is the backup's and its state a first part of it."""
    live = without_server_metadata(info.get("config") or {})
    if live != without_server_metadata(record.config) and live != restoring(record):
        return False
    state, backup = info.get("state") or {}, record.state
    first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
    count = int(state.get("messages") or 0)
    if count == 0:
        return True
    return (
        first == int(backup.get("first_seq") or -1)
        and first <= last <= int(backup.get("last_seq") or 0)
        and count <= min(int(backup.get("messages") or 0), last - first + 1)
    )


async def leftover(
    client: JetStreamClient,
    record: StreamRecord,
    info: Mapping[str, Any],
    consumers: Mapping[str, Any],
) -> bool:
    """Whether the live stream is what an interrupted restore of ``record`` left: the
    backup's config, only the backup's consumers (at their backup positions), the
    backup's first message (sequence,
    time, subject, headers and payload, as the manifest marks it), a last message no
    later than the backup's (and the backup's own last message when it is at the same
    sequence). Messages published by anyone since the backup are later than its last
    one; a stream of other messages has another first message: either is refused."""
    if not _prefix_of(record, info) or set(consumers) - {c.name for c in record.consumers}:
        return False
    if consumer_differences(record, consumers, missing=False):
        return False  # a consumer moved since: someone's work
    state = info.get("state") or {}
    if not int(state.get("messages") or 0):
        return True
    name, backup_last = record.name, int(record.state.get("last_seq") or 0)
    first_mark, last_mark = record.marks.get("first"), record.marks.get("last")
    if first_mark is None or last_mark is None:
        return False  # a nats CLI folder, or a backup taken before marks were recorded
    first = await client.stored_message(name, {"seq": int(state["first_seq"])})
    last = await client.stored_message(name, {"seq": int(state["last_seq"])})
    if first is None or last is None or mark(first) != first_mark:
        return False
    if int(last["seq"]) == backup_last:
        return mark(last) == last_mark
    when, latest = _ns(last.get("time")), _ns(last_mark.get("time"))
    return when is not None and latest is not None and when <= latest


def _interrupted(record: StreamRecord, info: Mapping[str, Any]) -> str:
    """A hint when the live stream looks like a first part of the backup that is not
    certainly the restore's own (:func:`leftover` said no)."""
    if _prefix_of(record, info) and (info.get("state") or {}).get("messages"):
        return (
            ": it looks like the first part of the backup, but its messages are not "
            "certainly the backup's (someone else's would be lost)"
        )
    return ""


async def plan_restore(
    client: JetStreamClient, contents: Contents, selected: Sequence[StreamRecord], flags: Flags
) -> RestorePlan:
    """What a restore would do on the server behind ``client`` (reads only)."""
    server = await client.server_info()
    too_old = [why for r in selected if (why := memory_refused(r, server))]
    if too_old:
        raise RefusedPlan("refusing to restore; nothing was changed:", details=too_old)
    steps: list[RestoreStep] = []
    refused: list[str] = []
    lives: list[tuple[dict[str, Any], dict[str, dict[str, Any]]]] = []  # one per step
    for record in selected:
        size = contents.folder(record.name).data.stat().st_size
        live = await _live(client, record.name)
        lives.append(live or ({}, {}))
        if live is None:
            steps.append(RestoreStep(record, "restore", size))
        elif not (differ := differences(record, *live)):
            steps.append(RestoreStep(record, "restored", size))
        elif await leftover(client, record, *live):
            steps.append(RestoreStep(record, "resume", size))
        elif flags.replace_existing:
            steps.append(RestoreStep(record, "replace", size))
        else:
            more = f" (and {len(differ) - 1} more)" if differ[1:] else ""
            refused.append(differ[0] + more + _interrupted(record, live[0]))
    if refused:
        raise RefusedPlan(
            "refusing to restore: the server holds stream(s) of the same name that differ "
            "from the backup; nothing was changed. Pass --replace-existing (and "
            f"{ALLOW_REPLACE}) to delete and replace them.",
            details=refused,
        )
    replacing = [s.record.name for s in steps if s.destructive]
    protected = [
        f"replace Stream {step.record.name}: {recorded_reason(at)}"
        for step, (info, _) in zip(steps, lives, strict=True)
        if step.destructive and (at := recorded_protection(info.get("config"))) is not None
    ]
    if protected:  # lifecycle prevent_destroy, as the server records it
        raise RefusedPlan(
            f"refusing to restore: {len(protected)} stream(s) protected by lifecycle "
            "prevent_destroy (no flag allows replacing them); nothing was changed.",
            details=protected,
        )
    allowed = allows(
        whole=True, allow_replace=flags.allow_replace, allow_data_loss=flags.allow_data_loss
    )
    if replacing and not allowed:
        raise RefusedPlan(
            f"refusing to restore: replacing {', '.join(replacing)} deletes their messages; "
            f"nothing was changed. Re-run with {ALLOW_REPLACE} (or {ALLOW_DATA_LOSS})."
        )
    return RestorePlan(contents, tuple(steps), server)


async def restore(
    options: ConnectionOptions,
    root: Path,
    flags: Flags,
    *,
    parallel: int = PARALLEL,
    confirm: Callable[[RestorePlan], Awaitable[bool]] | None = None,
    approved: bool = True,
    on_notice: Notice = _quiet,
    on_plan: Callable[[RestorePlan], None] | None = None,
    on_progress: Callable[[str, int, bool], None] | None = None,
) -> RestoreResult:
    """Check the folder, plan, ask (``confirm``) or refuse without approval like apply
    does, restore and verify. Problems found by the verification are in the result."""
    started = time.monotonic()
    contents, selected = check_folder(root, flags.only)
    async with open_client(options, on_notice=on_notice) as client:
        the_plan = await plan_restore(client, contents, selected, flags)
        if on_plan is not None:
            on_plan(the_plan)
        if (older := _older_server(contents, the_plan.server)) is not None:
            on_notice(older)
        if not the_plan.has_changes:
            return RestoreResult(the_plan, seconds=time.monotonic() - started)
        if confirm is not None:
            if not await confirm(the_plan):
                return RestoreResult(the_plan, cancelled=True)
        else:
            check_approved(approved, the_plan.server, options, "restore")
        events = _Events(on_notice, on_plan, on_progress)
        restored, problems = await _run(client, the_plan, parallel, events)
    return RestoreResult(
        the_plan, tuple(restored), tuple(problems), seconds=time.monotonic() - started
    )


def _version(text: object) -> tuple[int, ...]:
    parts = str(text or "").split("-")[0].split(".")[:2]
    return tuple(int(p) for p in parts if p.isdigit())


def _older_server(contents: Contents, server: ServerInfo) -> str | None:
    """A warning when the backup comes from a newer nats-server than the target: a 2.15
    snapshot (its new archive format) is refused by 2.14 and 2.12 ("unexpected EOF")."""
    taken = contents.manifest.server.get("version") if contents.manifest else None
    if taken and _version(taken) > _version(server.version):
        return (
            f"warning: the backup was taken on nats-server {taken}, newer than "
            f"{server.version}: an older server may not read its snapshots"
        )
    return None


async def _run(
    client: JetStreamClient, the_plan: RestorePlan, parallel: int, events: _Events
) -> tuple[list[str], list[str]]:
    limit = asyncio.Semaphore(max(1, parallel))
    todo = [s for s in the_plan.steps if s.action != "restored"]

    async def one(step: RestoreStep) -> list[str]:
        async with limit:
            try:
                return await _restore_one(client, the_plan.contents, step, events)
            except ReconcileError as err:
                return [f"{step.record.name}: {err}"]

    found = await asyncio.gather(*(one(step) for step in todo))
    restored = [s.record.name for s, p in zip(todo, found, strict=True) if not p]
    return restored, [line for lines in found for line in lines]


async def _restore_one(
    client: JetStreamClient, contents: Contents, step: RestoreStep, events: _Events
) -> list[str]:
    record = step.record
    if step.action == "resume":
        live = await _live(client, record.name)  # again: published to since the plan?
        if live is not None and not await leftover(client, record, *live):
            return [f"{record.name}: changed since the plan; not deleted. Run restore again"]
        if live is not None:
            await client.delete_stream(record.name)
    if step.action == "replace":
        await client.delete_stream(record.name)
    folder = contents.folder(record.name)
    sent = 0

    def progress(size: int) -> None:
        nonlocal sent
        sent += size
        if events.on_progress is not None:
            events.on_progress(record.name, sent, False)

    if record.through_mirror:
        await restore_memory(client, record, chunks(folder.data, RESTORE_CHUNK), progress)
    else:
        await restore_stream(
            client,
            record.config,
            record.state,
            chunks(folder.data, RESTORE_CHUNK),
            on_chunk=progress,
        )
    if events.on_progress is not None:
        events.on_progress(record.name, sent, True)
    live = await _live(client, record.name)
    if live is None:
        return [f"{record.name}: not on the server after its restore"]
    return differences(record, *live)
