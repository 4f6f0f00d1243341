"""``reconcile restore DIR``: check the folder, plan, judge, ask, restore, verify.

1. Read the folder (our manifest, or the nats CLI's ``backup.json`` folders) and check
   every selected stream's files (digests, sizes, the S2 framing) before anything is
   sent: a damaged or truncated snapshot is refused with the file named.
2. Take the server's apply lock (the lock stage, ``execution.stages.locked``, as apply
   does), then plan (:mod:`reconciler.backup.restore_plan`, the restore's own stage)
   and judge the plan with apply's verdict (``stages.verdict``: a policy deny exits 3,
   lifecycle ``prevent_destroy`` refuses whatever the flags, a replace needs
   ``--allow-replace``), before the question and before ``--yes`` is looked at.
3. Restore up to ``parallel`` streams at once (the lease verified before each), each
   read from disk chunk by chunk and written with a restore marker
   (:mod:`reconciler.backup.restore_checks`), then compare the restored stream with the
   backup; only a stream that verified loses its marker (and gets its recorded
   protection back). A difference is an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.backup.folder import reading
from reconciler.backup.layout import BackupError, chunks
from reconciler.backup.manifest import Contents, StreamRecord, completeness, file_problems
from reconciler.backup.memory import restore_memory, temp_config
from reconciler.backup.restore_checks import differences, leftover, with_marker
from reconciler.backup.restore_plan import (
    Flags,
    RestorePlan,
    RestoreStep,
    live_stream,
    plan_restore,
    protected_now,
    refuse_observed,
    seen_state,
)
from reconciler.errors import LockError, ReconcileError
from reconciler.execution import stages
from reconciler.execution.migrate import without_server_metadata
from reconciler.execution.stages import QUIET, Observer
from reconciler.identity import backup_mirror
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client
from reconciler.jetstream.snapshots import RESTORE_CHUNK, restore_stream
from reconciler.model.state import ServerInfo

__all__ = [
    "PARALLEL",
    "Flags",
    "RestorePlan",
    "RestoreResult",
    "RestoreStep",
    "check_folder",
    "plan_restore",
    "restore",
]

#: Streams restored at once unless told otherwise: one. nats-server 2.15.1 died (Go's
#: "concurrent map iteration and map write" in ``jsAccount.tieredReservation``, called
#: from ``RestoreStreamV2``) restoring 1,000 small streams 4 at a time; one at a time it
#: restored them all (bench/bench_backup.py).
PARALLEL = 1

Guard = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class RestoreResult:
    plan: RestorePlan
    restored: tuple[str, ...] = ()  # restored and verified
    problems: tuple[str, ...] = ()
    cancelled: bool = False
    seconds: float = 0.0
    #: streams whose restore was started (verified or not): what the last line counts
    attempted: tuple[str, ...] = ()
    #: streams not started because the lease was lost
    not_started: tuple[str, ...] = ()


@dataclass
class _Events:
    observer: Observer = QUIET
    guard: Guard | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def check_folder(root: Path, only: Sequence[str] = ()) -> tuple[Contents, list[StreamRecord]]:
    """The folder's contents and the selected streams, every file checked (no server):
    :class:`BackupError` names each damaged or missing file."""
    from reconciler.backup.manifest import read_contents

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


async def restore(
    options: ConnectionOptions,
    root: Path,
    flags: Flags,
    *,
    parallel: int = PARALLEL,
    observer: Observer = QUIET,
    approved: bool = True,
    on_plan: Callable[[RestorePlan], None] | None = None,
) -> RestoreResult:
    """Check the folder; under the apply lock plan, judge (apply's verdict), ask the
    ``observer`` when it :attr:`~Observer.asks` (else refuse without ``approved`` like
    apply does), restore and verify. Problems found by the verification are in the
    result; a refusal raises before anything is changed."""
    with reading(root):  # what is sent is what was checked: no backup rewrites it meanwhile
        return await _restore(options, root, flags, parallel, observer, approved, on_plan)


async def _restore(
    options: ConnectionOptions,
    root: Path,
    flags: Flags,
    parallel: int,
    observer: Observer,
    approved: bool,
    on_plan: Callable[[RestorePlan], None] | None,
) -> RestoreResult:
    started = time.monotonic()
    contents, selected = check_folder(root, flags.only)
    refuse_observed(flags)  # before the lock: its bucket is a write too
    declared = stages.load(flags.declared, observer) if flags.declared is not None else []
    events = _Events(observer)
    async with (
        open_client(options, on_notice=observer.notice) as client,
        stages.locked(
            client,
            timeout=(
                flags.lock_timeout
                if stages.approvable(approved, observer.asks, client)
                else None  # nothing can be written: no lock (its bucket is a write)
            ),
            on_notice=observer.notice,
            on_lost=events.stop.set,
            stop=events.stop,
            keep_lineage=False,
        ) as held,
    ):
        the_plan = await plan_restore(client, contents, selected, flags, declared=declared)
        stages.refuse(stages.checked(the_plan.plan))  # its checks (capacity): not shown
        for name, why in the_plan.skipped:
            observer.notice(f"not restored: {name} ({why})")
        if on_plan is not None:
            on_plan(the_plan)
        if (older := _older_server(contents, the_plan.server)) is not None:
            observer.notice(older)
        allowances = stages.Allowances(
            allow_replace=flags.allow_replace, allow_data_loss=flags.allow_data_loss
        )
        stages.refuse(stages.verdict(the_plan.plan, allowances))
        if not the_plan.has_changes:
            return RestoreResult(the_plan, seconds=time.monotonic() - started)
        if observer.asks:
            if not await observer.confirm(the_plan.plan):
                return RestoreResult(the_plan, cancelled=True)
        else:
            stages.check_approved(approved, the_plan.server, options, "restore")
        events.guard = held.guard
        return await _run(client, the_plan, parallel, events, started)


async def _clear_temp(client: JetStreamClient, record: StreamRecord, marker: str | None) -> None:
    """Delete the temporary stream of memory stream ``record`` an interrupted restore of
    this backup left: proven by the same rule as a leftover stream of the restore
    (``restore_checks.leftover``: this backup's marker, only the backup's sequences, its
    first message the backup's...) and the snapshot's config. Anything else under the
    reserved name is someone's and an error (never deleted)."""
    name = backup_mirror(record.name)
    live = await live_stream(client, name)
    if live is None:
        return
    config = without_server_metadata(live[0].get("config") or {})
    expected = temp_config(record)  # the server adds defaults: subjects, duplicate_window
    if (
        marker is None
        or "mirror" in config
        or any(config.get(k) != v for k, v in expected.items() if k != "metadata")
        or not await leftover(client, record, *live, marker, stream=name)
    ):
        raise BackupError(
            f"stream {name} exists and is not this restore's (nothing of {record.name} was "
            "changed): delete or rename it"
        )
    await client.delete_stream(name)


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
    client: JetStreamClient,
    the_plan: RestorePlan,
    parallel: int,
    events: _Events,
    started: float,
) -> RestoreResult:
    limit = asyncio.Semaphore(max(1, parallel))
    todo = [s for s in the_plan.steps if s.action != "restored"]
    begun: list[str] = []

    async def one(step: RestoreStep) -> list[str] | None:
        async with limit:
            if events.stop.is_set():
                return None  # the lease was lost: nothing more starts
            try:
                if events.guard is not None:
                    await events.guard()
                begun.append(step.record.name)
                return await _restore_one(client, the_plan.contents, step, events)
            except LockError as err:
                events.stop.set()
                return [f"{step.record.name}: not started: {err}"]
            except ReconcileError as err:
                return [f"{step.record.name}: {err}"]

    found = await asyncio.gather(*(one(step) for step in todo))
    restored = tuple(s.record.name for s, p in zip(todo, found, strict=True) if p == [])
    not_started = tuple(
        s.record.name for s, p in zip(todo, found, strict=True) if s.record.name not in begun
    )
    problems = tuple(line for lines in found for line in lines or ())
    attempted = tuple(name for name in (s.record.name for s in todo) if name in begun)
    return RestoreResult(
        the_plan,
        restored,
        problems,
        seconds=time.monotonic() - started,
        attempted=attempted,
        not_started=not_started,
    )


async def _restore_one(
    client: JetStreamClient, contents: Contents, step: RestoreStep, events: _Events
) -> list[str]:
    record = step.record
    if record.through_mirror:  # before anything is deleted: a stream in the way stops it
        await _clear_temp(client, record, step.marker)
    if step.action in ("resume", "replace"):
        # read again: protected, or written to, since the plan (while the question waited)?
        live = await live_stream(client, record.name)
        if live is not None:
            if why := protected_now(live):
                return [f"{record.name}: {why}; not deleted"]
            if step.action == "resume":
                same = step.marker is not None and await leftover(
                    client, record, *live, step.marker
                )
            else:
                same = seen_state(live) == step.seen
            if not same:
                return [f"{record.name}: changed since the plan; not deleted. Run restore again"]
            await client.delete_stream(record.name)
    folder = contents.folder(record.name)
    sent = 0

    def progress(size: int) -> None:
        nonlocal sent
        sent += size
        events.observer.progress(f"restored {record.name}", sent, None)

    def marked(config: Mapping[str, Any]) -> dict[str, Any]:
        return with_marker(config, step.marker)

    if record.through_mirror:
        await restore_memory(
            client, record, chunks(folder.data, RESTORE_CHUNK), progress, marked=marked
        )
    else:
        await restore_stream(
            client,
            with_marker(record.config, step.marker),
            record.state,
            chunks(folder.data, RESTORE_CHUNK),
            on_chunk=progress,
        )
    events.observer.progress(f"restored {record.name}", sent, sent)
    live = await live_stream(client, record.name)
    if live is None:
        return [f"{record.name}: not on the server after its restore"]
    if found := differences(record, *live):
        return found  # the marker stays: a re-run recognises this stream as its own
    if step.marker is not None:  # verified: the stream is the user's from now on
        await client.update_stream(with_marker(record.config, None))
    return []
