"""The one executor: turns a frozen Plan into requests, safely.

Safety comes first and is decided before the first request: a plan holding destructive
steps (a replace, a delete, or an update that deletes stored messages in place) is
refused as a whole unless the caller allowed it, so a refused plan changes nothing at all.
Then the steps run wave by wave (streams before their consumers, origins before the
streams sourcing them, deletes in reverse), each wave's steps concurrently up to
``concurrency``. When a step fails,
the steps of later waves are skipped and reported; re-running converges because every
step is planned from the live state of that run. A ``stop`` event (Ctrl-C) lets the
steps in flight finish and skips the rest, so nothing is half-written.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

from reconciler.errors import (
    ApplyFailed,
    ApplyReport,
    ConcurrentChange,
    ConnectError,
    LockError,
    MigrationIncomplete,
    NotFound,
    ReconcileError,
    RequestTimeout,
    ServerError,
    unforeseen,
)
from reconciler.execution.migrate import migrate
from reconciler.execution.recreate import create_afresh, create_stream
from reconciler.execution.rollback import Made, Rollback, created_of, refused_for_room, roll_back
from reconciler.execution.verdict import Allowances, describe, refuse, verdict
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient
from reconciler.jetstream.transport import WRONG_LAST_SEQUENCE
from reconciler.model.defaults import CONSUMER_FIELDS, OPTIONAL, STREAM_FIELDS, Field
from reconciler.planning.steps import (
    Create,
    Delete,
    Migrate,
    Plan,
    Replace,
    Step,
    Update,
)

__all__ = [
    "ApplyResult",
    "StepEvent",
    "apply_plan",
    "check_allowed",
    "describe",
    "execute",
    "lease_lost",
]

Outcome = Literal["applied", "failed", "skipped", "planned"]


@dataclass(frozen=True, slots=True)
class StepEvent:
    """Progress of one step, for progress bars and CI log lines."""

    step: Step
    outcome: Outcome
    error: str | None = None
    done: int = 0
    total: int = 0
    seconds: float = 0.0  # how long the step's requests took


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan
    dry_run: bool
    applied: tuple[Step, ...] = ()
    failed: tuple[tuple[Step, str], ...] = ()
    skipped: tuple[Step, ...] = ()
    interrupted: bool = False
    cancelled: bool = False  # the person at the terminal did not confirm: nothing changed

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted

    def __repr__(self) -> str:
        """Counts, not every step: ``asyncio.run`` (3.11, 3.12) builds the repr of the
        value a coroutine returns, and a full one of 100k steps costs seconds."""
        return (
            f"ApplyResult({self.plan!r}, dry_run={self.dry_run}, applied={len(self.applied)}, "
            f"failed={len(self.failed)}, skipped={len(self.skipped)}, "
            f"interrupted={self.interrupted}, cancelled={self.cancelled})"
        )

    def report(self) -> ApplyReport:
        return ApplyReport(
            applied=[describe(s) for s in self.applied],
            failed=[f"{describe(s)}: {err}" for s, err in self.failed],
            skipped=[describe(s) for s in self.skipped],
        )


def check_allowed(
    plan: Plan,
    *,
    allow_replace: bool,
    allow_data_loss: bool = False,
    allow_with: str | None = None,
) -> None:
    """Refuse the whole plan when the verdict (:mod:`reconciler.execution.verdict`) has a
    refusal: it destroys data and that was not allowed, it holds a step no flag allows
    (lifecycle), a migration it may not act on, or a policy deny. ``allow_with`` names a
    front door's own way to allow a destructive step (the Pulumi resource's
    ``allow_destroy``) instead of the CLI's flags."""
    allowances = Allowances(
        allow_replace=allow_replace, allow_data_loss=allow_data_loss, allow_with=allow_with
    )
    refuse(verdict(plan, allowances))


def lease_lost(reason: str, applied: Sequence[Step], skipped: Sequence[Step]) -> ApplyFailed:
    """The error of an apply that lost its lock: it stopped before its next step."""
    report = ApplyReport(
        applied=[describe(s) for s in applied], skipped=[describe(s) for s in skipped]
    )
    return ApplyFailed(
        f"{reason}: stopped before its next step ({len(applied)} applied, {len(skipped)} not "
        "started); another apply may hold the lock now: re-plan before applying again",
        report,
    )


@dataclass
class _Run:
    client: JetStreamClient
    total: int
    on_step: Callable[[StepEvent], None] | None
    guard: Callable[[], Awaitable[None]] | None = None
    fenced: str | None = None  # why the guard refused: start nothing more
    applied: list[Step] = field(default_factory=list)
    failed: list[tuple[Step, str]] = field(default_factory=list)
    skipped: list[Step] = field(default_factory=list)
    unreachable: bool = False  # a request timed out or the connection broke: start no more
    made: list[Made] = field(default_factory=list)  # streams and consumers this apply created
    for_room: bool = False  # a step was refused for room or limits (docs/capacity.md)

    def emit(
        self, step: Step, outcome: Outcome, error: str | None = None, seconds: float = 0.0
    ) -> None:
        if self.on_step is not None:
            done = len(self.applied) + len(self.failed) + len(self.skipped)
            self.on_step(StepEvent(step, outcome, error, done, self.total, seconds))


async def apply_plan(
    plan: Plan,
    client: JetStreamClient,
    *,
    allow_replace: bool = False,
    allow_data_loss: bool = False,
    dry_run: bool = False,
    concurrency: int = 16,
    on_step: Callable[[StepEvent], None] | None = None,
    stop: asyncio.Event | None = None,
    guard: Callable[[], Awaitable[None]] | None = None,
) -> ApplyResult:
    """Apply ``plan``; raises RefusedPlan before any change, ApplyFailed after a failure.

    ``guard`` runs before each step (the apply lock's fence); when it raises
    :class:`LockError`, no further step starts and the error says how far it got.
    """
    check_allowed(plan, allow_replace=allow_replace, allow_data_loss=allow_data_loss)
    if dry_run:
        return ApplyResult(plan=plan, dry_run=True)
    run = _Run(client=client, total=len(plan.steps), on_step=on_step, guard=guard)
    waves = plan.waves()
    for index, wave in enumerate(waves):
        if run.failed or run.fenced or (stop is not None and stop.is_set()):
            for rest in waves[index:]:
                for step in rest:
                    run.skipped.append(step)
                    run.emit(step, "skipped")
            break
        await _run_wave(run, wave, max(1, concurrency), stop)
    if run.fenced is not None:
        raise lease_lost(run.fenced, run.applied, run.skipped)
    result = ApplyResult(
        plan=plan,
        dry_run=False,
        applied=tuple(run.applied),
        failed=tuple(run.failed),
        skipped=tuple(run.skipped),
        interrupted=stop is not None and stop.is_set(),
    )
    if result.failed:
        step, error = result.failed[0]
        report = result.report()
        undone = await _roll_back(run, report) if run.for_room and run.made else ""
        raise ApplyFailed(f"{describe(step)} failed: {error}{undone}", report)
    return result


async def _roll_back(run: _Run, report: ApplyReport) -> str:
    """After a refusal for room: remove again what this apply made, still empty
    (``execution.rollback``), under the lock's fence like any step; what it says."""
    if run.guard is not None:
        try:
            await run.guard()
        except LockError as err:
            report.kept = [f"{made.label} (the apply lock was lost)" for made in run.made]
            return f"; nothing removed again: {err}"
    rollback = await roll_back(run.client, run.made)
    report.removed, report.kept = rollback.removed, rollback.kept
    return _undone(rollback)


def _undone(rollback: Rollback) -> str:
    if not rollback.removed:
        return "; what this apply created stays (see kept)" if rollback.kept else ""
    return f"; {len(rollback.removed)} resource(s) this apply created removed again (still empty)"


async def _run_wave(
    run: _Run, wave: Sequence[Step], concurrency: int, stop: asyncio.Event | None
) -> None:
    """The steps of one wave, ``concurrency`` at a time, started in order: a few workers
    taking the next step (not one task per step: a wave can hold 100,000 of them)."""
    steps = iter(wave)
    halted = False

    async def worker() -> None:
        for step in steps:
            if halted:
                return
            await _guarded(run, step, stop)

    # Shielded as a whole (one shield per wave, not a task per step): a cancelled apply
    # lets the steps in flight finish and be reported, and starts nothing new.
    everything = asyncio.gather(*(worker() for _ in range(min(concurrency, len(wave)))))
    try:
        await asyncio.shield(everything)
    except asyncio.CancelledError:
        halted = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(everything)
        raise


async def _guarded(run: _Run, step: Step, stop: asyncio.Event | None) -> None:
    """One step: fenced by the lock, shielded from cancellation, reported."""
    if run.unreachable or run.fenced or (stop is not None and stop.is_set()):
        run.skipped.append(step)
        run.emit(step, "skipped")
        return
    if run.guard is not None:
        try:
            await run.guard()
        except LockError as err:
            run.fenced = run.fenced or str(err)
            run.skipped.append(step)
            run.emit(step, "skipped")
            return
    started = time.monotonic()
    try:
        reply = await execute(run.client, step, guard=run.guard)
    except Exception as err:  # refused, or what no check foresaw (a forged reply's shape,
        # said by type and place): this step failed, and the wave goes on as after any
        said = str(err) if isinstance(err, ReconcileError) else unforeseen(err)
        run.unreachable = run.unreachable or isinstance(err, RequestTimeout | ConnectError)
        run.for_room = run.for_room or refused_for_room(err)
        run.failed.append((step, said))
        run.emit(step, "failed", said, time.monotonic() - started)
        return
    run.applied.append(step)
    if isinstance(step, Create) and (created := created_of(reply)) is not None:
        run.made.append(Made(step.ref, step.label, created))
    run.emit(step, "applied", seconds=time.monotonic() - started)


async def execute(
    client: JetStreamClient, step: Step, *, guard: Callable[[], Awaitable[None]] | None = None
) -> dict[str, Any] | None:
    """Send the requests of one step; a create's answer (the new stream's or consumer's
    info), None for the others. A migration, which runs for long, confirms the
    apply lock (``guard``) at each of its phase boundaries: a lost lease stops it at one,
    where the next apply resumes it."""
    match step:
        case (
            Create(ref=ResourceRef(kind="KeyValueEntry"))
            | Update(ref=ResourceRef(kind="KeyValueEntry"))
        ):
            await _put_entry(client, step)
        case Delete(ref=ResourceRef(kind="KeyValueEntry")):
            bucket, key = str(step.ref.stream), step.name
            await _compare_and_set(
                step, client.kv_delete(bucket, key, revision=int(step.live["revision"]))
            )
        case Create():
            return await _create(client, step.ref, step.config)
        case Update(ref=ResourceRef(kind="Consumer", stream=str(stream))):
            await client.create_consumer(stream, dict(step.config), action="update")
            if any(change.path == "pause_until" for change in step.fields):
                # Consumer updates ignore pause_until; CONSUMER.PAUSE sets it.
                until = step.config.get("pause_until")
                await client.pause_consumer(stream, step.name, until)
        case Update():
            await client.update_stream(dict(step.config))
        case Replace(ref=ResourceRef(kind="Consumer")):
            await _delete(client, step.ref)
            await _create(client, step.ref, step.config)
        case Replace():
            await _still_empty(client, step)
            await _delete(client, step.ref)
            await create_afresh(client, step.config)
        case Migrate():

            async def fenced(_: str) -> None:
                if guard is not None:
                    await guard()

            progress = await migrate(client, step.stream_name, step.config, on_phase=fenced)
            if progress.not_restored:
                raise MigrationIncomplete(
                    f"the messages of {step.stream_name} were migrated, but these consumers "
                    "could not be created again: " + "; ".join(progress.not_restored)
                )
        case Delete():
            await _still_empty(client, step)
            await _delete(client, step.ref)
        case _:
            assert_never(step)
    return None


async def _still_empty(client: JetStreamClient, step: Delete | Replace) -> None:
    """A stream (or bucket) planned as holding no message is deleted only if it still
    holds none: the plan said it loses nothing, and messages published since (a plan
    saved an hour ago, a question answered late) would go with nobody told. JetStream
    has no conditional delete, so the window narrows to one round trip. A step planned
    to delete messages was allowed for its stream's data as it was; a consumer holds
    none."""
    if step.ref.kind == "Consumer" or any(loss.messages != 0 for loss in step.losses):
        return
    try:
        info = await client.stream_info(step.ref.stream_name)
    except NotFound:
        return  # gone: the delete says so
    held = int((info.get("state") or {}).get("messages") or 0)
    if held:
        raise ConcurrentChange(
            f"{step.label} was planned holding no message and now holds {held}: nothing "
            "was deleted; plan again to see what the delete would lose"
        )


async def _put_entry(client: JetStreamClient, step: Create | Update) -> None:
    """Write a KeyValue entry with this tool's marker headers: a create only where the
    key holds no value, an update only at the revision the plan read."""
    bucket, key = str(step.ref.stream), step.name
    value = base64.b64decode(str(step.config["value"]))
    headers = dict(step.config.get("headers") or {})
    if isinstance(step, Update):
        revision = int(step.live["revision"])
        await _compare_and_set(
            step, client.kv_update(bucket, key, value, revision, headers=headers)
        )
    else:
        await _compare_and_set(step, client.kv_create(bucket, key, value, headers=headers))


async def _compare_and_set(step: Step, write: Awaitable[Any]) -> None:
    """Run a compare-and-set write; a concurrent writer is reported, never overwritten
    (the message names the key, never its value)."""
    try:
        await write
    except ServerError as err:
        if err.err_code != WRONG_LAST_SEQUENCE:
            raise
        raise ConcurrentChange(
            f"{step.label} changed on the server since it was planned: nothing was "
            "overwritten; plan again to see the new value"
        ) from None


async def _create(
    client: JetStreamClient, ref: ResourceRef, config: Mapping[str, Any]
) -> dict[str, Any]:
    if ref.kind == "Consumer":
        sent = sent_on_create(CONSUMER_SCALARS, config)
        return await client.create_consumer(ref.stream_name, sent, action="create")
    return await create_stream(client, sent_on_create(STREAM_SCALARS, config))  # recreate.py


def _scalar_defaults(table: Mapping[str, Field]) -> dict[str, Any]:
    """The fields of ``table`` whose value when absent is a plain JSON scalar (a string, a
    number, a boolean): what the server reads a missing field as."""
    return {
        name: entry.absent
        for name, entry in table.items()
        if entry.absent is not OPTIONAL and isinstance(entry.absent, str | int | bool)
    }


STREAM_SCALARS = _scalar_defaults(STREAM_FIELDS)
CONSUMER_SCALARS = _scalar_defaults(CONSUMER_FIELDS)


def sent_on_create(absent: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A create's config without the scalar fields holding the value the server gives
    them when they are missing (:mod:`reconciler.model.defaults`: an ``omitempty`` zero,
    ``-1`` for a limit): the server stores the same config, read back identical on every
    release of the matrix (tests/integration/test_create_payload.py), from a third of the
    bytes to parse. ``False`` is never taken for ``0`` (the types must match too);
    objects and lists are always sent. Updates send the whole config (JETSTREAM.md)."""
    get = absent.get
    return {
        name: value
        for name, value in config.items()
        if (default := get(name, _NONE)) != value or type(value) is not type(default)
    }


_NONE = object()  # no default: the field is always sent


async def _delete(client: JetStreamClient, ref: ResourceRef) -> None:
    if ref.kind == "Consumer":
        await client.delete_consumer(ref.stream_name, ref.name)
    else:
        await client.delete_stream(ref.stream_name)
