"""The apply lock: a lease in a KeyValue bucket on the server itself.

Two applies against one server must not interleave. Before applying, a run takes the
lease ``RECONCILE_LOCKS/apply`` (a KeyValue key, so stream ``KV_RECONCILE_LOCKS``)::

    {"owner": "alice", "host": "ci-7", "pid": 4242, "run": "…",
     "acquired_at": "2026-11-22T02:40:00Z", "expires_at": "2026-11-22T02:40:30Z"}

- acquire: a KV *create* (fails when the key holds a lease), or the takeover of an
  *expired* lease by a KV *update* at the lease's revision (compare-and-swap: of two
  runs taking over the same expired lease, exactly one wins);
- while the apply runs, a task refreshes the lease (an update at our revision) every
  third of its duration; if that update fails because someone else took the key, the run
  is told (``on_lost``) so it can stop before its next step;
- at the end the lease is deleted at our revision (a lease someone took over is left
  alone); a crashed holder's lease simply expires;
- a waiting run polls until ``timeout`` and then raises :class:`LockError` naming the
  holder, its host and since when; :func:`break_lock` removes a stale lease by hand
  (``reconcile lock break``).

Time comes from the caller (``clock`` returns seconds since the epoch, ``sleep`` waits),
so the rules are testable without waiting; expiry compares the holder's ``expires_at``
with the reader's clock, so hosts' clocks are assumed to agree within a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from reconciler.door_words import Allowance, say
from reconciler.errors import (
    ConnectError,
    LockError,
    LockWaitStopped,
    NotFound,
    ReconcileError,
    RequestTimeout,
    ServerError,
)
from reconciler.execution.recreate import create_stream
from reconciler.identity import LOCK_BUCKET, kv_subject, stream_of
from reconciler.model.timestamps import rfc3339

LOCK_KEY = "apply"
LEASE_SECONDS = 30.0
POLL_SECONDS = 1.0
DEFAULT_TIMEOUT = 60.0  # how long an apply waits for the lock (--lock-timeout)
WRONG_LAST_SEQUENCE = 10071
STREAM_NAME_IN_USE = 10058
#: The account requires every stream to set ``max_bytes`` (``max_bytes_required``).
MAX_BYTES_REQUIRED = 10113
#: The lock bucket's size on such an account: a lease is one small record per key.
LOCK_MAX_BYTES = 256 * 1024

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class KvEntryLike(Protocol):
    """The last message of a key (``KvEntry`` of the client)."""

    @property
    def value(self) -> bytes: ...
    @property
    def revision(self) -> int: ...
    @property
    def operation(self) -> str: ...


class LockStore(Protocol):
    """What the lock needs from :class:`~reconciler.jetstream.JetStreamClient`."""

    async def kv_entry(self, bucket: str, key: str) -> KvEntryLike | None: ...
    async def kv_create(self, bucket: str, key: str, value: bytes) -> int: ...
    async def kv_update(self, bucket: str, key: str, value: bytes, revision: int) -> int: ...
    async def kv_delete(self, bucket: str, key: str, *, revision: int | None = None) -> None: ...
    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Holder:
    """Who asks for the lock: shown to anyone who has to wait for it."""

    owner: str
    host: str
    pid: int
    run: str

    @classmethod
    def current(cls, owner: str | None = None) -> Holder:
        """This process; the owner defaults to the CI actor or the login name."""
        return cls(
            owner=owner or os.environ.get("GITHUB_ACTOR") or _login_name(),
            host=socket.gethostname(),
            pid=os.getpid(),
            run=uuid.uuid4().hex,
        )


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@dataclass(frozen=True)
class Lease:
    """A lease as stored in the bucket, with the revision it was read or written at."""

    holder: Holder
    acquired_at: float
    expires_at: float
    revision: int = 0

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def to_bytes(self) -> bytes:
        body = {
            "owner": self.holder.owner,
            "host": self.holder.host,
            "pid": self.holder.pid,
            "run": self.holder.run,
            "acquired_at": rfc3339(self.acquired_at),
            "expires_at": rfc3339(self.expires_at),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, revision: int) -> Lease:
        """Parse a stored lease; an unreadable value counts as an already expired lease."""
        try:
            body = json.loads(data)
            holder = Holder(str(body["owner"]), str(body["host"]), int(body["pid"]), body["run"])
            acquired, expires = _parse_time(body["acquired_at"]), _parse_time(body["expires_at"])
        except (ValueError, KeyError, TypeError):
            holder = Holder("<unreadable lease>", "?", 0, "")
            acquired = expires = 0.0
        return cls(holder, acquired, expires, revision)

    def describe(self, now: float) -> str:
        """``alice on ci-7 (pid 4242) since 2026-…Z, lease expires in 12s``."""
        h = self.holder
        left = self.expires_at - now
        expiry = f"expires in {left:.0f}s" if left > 0 else f"expired {-left:.0f}s ago"
        return f"{h.owner} on {h.host} (pid {h.pid}) since {rfc3339(self.acquired_at)}, {expiry}"


def _parse_time(text: Any) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


# --- the bucket ------------------------------------------------------------------------


def bucket_config(bucket: str, *, replicas: int, max_bytes: int = -1) -> dict[str, Any]:
    """The stream behind the lock bucket: a KeyValue bucket with history 1, unbounded
    unless the account requires a ``max_bytes``."""
    return {
        "name": stream_of("KeyValue", bucket),
        "description": "reconcile: apply lock (lease); see `reconcile lock status`",
        "subjects": [kv_subject(bucket)],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "deny_delete": True,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "storage": "file",
        "num_replicas": replicas,
        "max_bytes": max_bytes,
    }


async def ensure_bucket(
    store: LockStore, bucket: str, *, replicas: int = 1, max_bytes: int = -1
) -> None:
    """Create the lock bucket (idempotent); falls back to one replica if R3 is refused,
    and to a bounded bucket (``LOCK_MAX_BYTES``) on an account that requires
    ``max_bytes`` (an unbounded one never reserves room where no limit asks for it)."""
    try:  # a 10049 (a deleted bucket's files still being removed) asked again
        await _made(store, bucket_config(bucket, replicas=replicas, max_bytes=max_bytes))
    except ServerError as err:
        if err.err_code == STREAM_NAME_IN_USE:  # there already, maybe made by another tool
            return
        if err.err_code == MAX_BYTES_REQUIRED and max_bytes < 0:
            await ensure_bucket(store, bucket, replicas=replicas, max_bytes=LOCK_MAX_BYTES)
            return
        if replicas == 1:
            raise
        await ensure_bucket(store, bucket, replicas=1, max_bytes=max_bytes)


async def _made(store: LockStore, config: dict[str, Any], *, tries: int = 3) -> None:
    """The bucket's STREAM.CREATE, sent again when it was not answered in time (at most
    ``tries`` times): on a loaded cluster a first replicated stream can take longer than
    the request timeout to be made (a run's first ``plan --out`` failed). A create of the
    config it has is answered as made; one made meanwhile otherwise is a 10058."""
    for _ in range(tries - 1):
        try:
            await create_stream(store, config)
            return
        except RequestTimeout:
            continue
    await create_stream(store, config)


async def read_lease(
    store: LockStore, *, bucket: str = LOCK_BUCKET, key: str = LOCK_KEY, missing: bool = False
) -> Lease | None:
    """The current lease, or None when the lock is free.

    A missing bucket also reads as free, unless ``missing`` asks for its ``NotFound``.
    """
    try:
        entry = await store.kv_entry(bucket, key)
    except NotFound:
        if missing:
            raise
        return None
    if entry is None or entry.operation != "PUT":
        return None
    return Lease.from_bytes(entry.value, entry.revision)


# --- acquire, refresh, release ------------------------------------------------------------


@dataclass(frozen=True)
class LockSettings:
    bucket: str = LOCK_BUCKET
    key: str = LOCK_KEY
    lease_seconds: float = LEASE_SECONDS
    poll_seconds: float = POLL_SECONDS
    replicas: int = 1


def crashed_here(lease: Lease) -> bool:
    """Whether the lease's holder ran on this host and its process is gone.

    Such a lease can be taken over at once instead of after it expires. A process id
    still in use (perhaps by another program) counts as alive: then the lease expires.
    """
    holder = lease.holder
    if holder.host != socket.gethostname() or holder.pid <= 0 or holder.pid == os.getpid():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (not ours to signal)
    return False


async def try_acquire(
    store: LockStore,
    holder: Holder,
    *,
    now: float,
    settings: LockSettings = LockSettings(),
    on_takeover: Callable[[Lease], None] | None = None,
) -> tuple[Lease | None, Lease | None]:
    """One attempt: ``(our lease, None)`` when taken, ``(None, the live lease)`` when not.

    An expired lease, or one whose holder crashed on this host, is taken over with a
    compare-and-set at its revision (of two runs taking it over, one wins).
    """
    ours = Lease(holder, now, now + settings.lease_seconds)
    try:
        current = await read_lease(store, bucket=settings.bucket, key=settings.key, missing=True)
    except NotFound:
        await prepare(store, settings)
        current = None
    try:
        if current is None:
            revision = await create_first(store, settings, ours.to_bytes())
        elif current.expired(now) or crashed_here(current):
            revision = await store.kv_update(
                settings.bucket, settings.key, ours.to_bytes(), current.revision
            )
            if on_takeover is not None and not current.expired(now):
                on_takeover(current)
        else:
            return None, current
    except ServerError as err:
        if err.err_code != WRONG_LAST_SEQUENCE:
            raise
        return None, await read_lease(store, bucket=settings.bucket, key=settings.key)
    return replace(ours, revision=revision), None


async def create_first(store: LockStore, settings: LockSettings, value: bytes) -> int:
    """``settings.key`` written where none is (a KeyValue create: its revision). A bucket
    made just now (by this run, or by another an instant before: two environments of
    one agent on one fresh cluster) may change its leader right after a read was
    answered, and a node may answer reads before it knows the route to the new leader's
    subscription: the write then finds no responder, and the client sends it again after
    a growing pause (``jetstream.transport.PUBLISH_SETTLING``: the one rule for every
    publish; a run's first apply failed here, saying JetStream was not enabled)."""
    return await store.kv_create(settings.bucket, settings.key, value)


async def prepare(store: LockStore, settings: LockSettings) -> None:
    """The bucket made (:func:`ensure_bucket`) and ready to take a write of ``settings.key``."""
    await ensure_bucket(store, settings.bucket, replicas=settings.replicas)
    await _until_writable(store, settings)


def replicas_for(clustered: bool) -> int:
    """The lock bucket's replicas: three on a clustered server (losing a node keeps it)."""
    return 3 if clustered else 1


async def _until_writable(store: LockStore, settings: LockSettings, *, tries: int = 50) -> None:
    """A new replicated bucket takes a moment to elect its leader; until then a write finds
    no responders. Wait (at most ``tries`` times 0.1 s) until a read through the leader works."""
    for _ in range(tries - 1):
        try:
            await store.kv_entry(settings.bucket, settings.key)
            return
        except (ConnectError, RequestTimeout, ServerError):
            await asyncio.sleep(0.1)
    await store.kv_entry(settings.bucket, settings.key)


async def acquire(
    store: LockStore,
    holder: Holder,
    *,
    timeout: float,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
    settings: LockSettings = LockSettings(),
    on_wait: Callable[[Lease], None] | None = None,
    stop: asyncio.Event | None = None,
    on_takeover: Callable[[Lease], None] | None = None,
) -> Lease:
    """Take the lease, waiting up to ``timeout`` seconds; :class:`LockError` after that,
    or as soon as ``stop`` is set (Ctrl-C while waiting)."""
    deadline = clock() + timeout
    told = False
    while True:
        now = clock()
        ours, theirs = await try_acquire(
            store, holder, now=now, settings=settings, on_takeover=on_takeover
        )
        if ours is not None:
            return ours
        if now >= deadline:
            raise LockError(_held_message(theirs, now=now, timeout=timeout, settings=settings))
        if stop is not None and stop.is_set():
            who = theirs.describe(now) if theirs is not None else "another run"
            raise LockWaitStopped(
                f"stopped while waiting for the apply lock held by {who}: nothing was changed"
            )
        if theirs is not None and on_wait is not None and not told:
            on_wait(theirs)
            told = True
        await sleep(min(settings.poll_seconds, max(deadline - now, 0.0)) or settings.poll_seconds)


def _held_message(
    lease: Lease | None, *, now: float, timeout: float, settings: LockSettings
) -> str:
    where = f"{settings.bucket}/{settings.key}"
    who = lease.describe(now) if lease is not None else "another run"
    return (
        f"apply lock {where} is held by {who}; gave up after {timeout:g}s "
        f"({say(Allowance.LOCK_TIMEOUT)}). If that run crashed, its lease expires by itself; "
        "`reconcile lock break` removes it now."
    )


async def refresh(
    store: LockStore, lease: Lease, *, now: float, settings: LockSettings = LockSettings()
) -> Lease:
    """Extend our lease; :class:`LockError` when another run has taken the key."""
    fresh = replace(lease, expires_at=now + settings.lease_seconds)
    try:
        revision = await store.kv_update(
            settings.bucket, settings.key, fresh.to_bytes(), lease.revision
        )
    except ServerError as err:
        if err.err_code != WRONG_LAST_SEQUENCE:
            raise
        raise LockError(f"lost the apply lock {settings.bucket}/{settings.key}") from None
    return replace(fresh, revision=revision)


async def release(
    store: LockStore, lease: Lease, *, settings: LockSettings = LockSettings()
) -> bool:
    """Delete our lease (only while it is still ours); whether it was deleted.

    A refresh cancelled in flight may have landed after all: then the key holds our run
    at a newer revision, which is deleted instead.
    """
    revision = lease.revision
    for _ in range(3):
        try:
            await store.kv_delete(settings.bucket, settings.key, revision=revision)
        except ServerError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            current = await read_lease(store, bucket=settings.bucket, key=settings.key)
            if current is None or current.holder.run != lease.holder.run:
                return False
            revision = current.revision
            continue
        return True
    return False


async def break_lock(store: LockStore, *, settings: LockSettings = LockSettings()) -> Lease | None:
    """Remove the current lease whoever holds it; the lease removed (None if free).

    The delete is made at the revision read, so a refresh landing in between is retried
    rather than silently kept.
    """
    for _ in range(10):
        lease = await read_lease(store, bucket=settings.bucket, key=settings.key)
        if lease is None:
            return None
        try:
            await store.kv_delete(settings.bucket, settings.key, revision=lease.revision)
        except ServerError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            continue
        return lease
    raise LockError(f"could not break {settings.bucket}/{settings.key}: it keeps changing")


# --- holding the lock for the duration of an apply -------------------------------------------


@contextlib.asynccontextmanager
async def hold(
    store: LockStore,
    *,
    timeout: float,
    holder: Holder | None = None,
    clock: Clock = time.time,
    sleep: Sleep = asyncio.sleep,
    settings: LockSettings = LockSettings(),
    on_wait: Callable[[Lease], None] | None = None,
    on_lost: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    on_takeover: Callable[[Lease], None] | None = None,
) -> AsyncIterator[Fence]:
    """Hold the lease while the block runs: acquire, refresh in the background, release.

    The block gets the :class:`Fence` (its ``lease``, and ``verify`` before each step).
    """
    lease = await acquire(
        store,
        holder or Holder.current(),
        timeout=timeout,
        clock=clock,
        sleep=sleep,
        settings=settings,
        on_wait=on_wait,
        stop=stop,
        on_takeover=on_takeover,
    )
    keeper = Fence(store, lease, clock=clock, sleep=sleep, settings=settings, on_lost=on_lost)
    task = asyncio.create_task(keeper.run())
    try:
        yield keeper
    finally:
        keeper.stopping = True
        if not keeper.busy:  # a refresh in flight is let finish (it is bounded by the timeout)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not keeper.lost:
            with contextlib.suppress(ReconcileError):
                await release(store, keeper.lease, settings=settings)


#: A lease verified this recently (seconds, monotonic clock) is not verified again.
FRESH_SECONDS = 0.5


@dataclass
class Fence:
    """Keeps the lease: refreshes it every third of its duration until cancelled or lost,
    and :meth:`verify` checks it before a step.

    A run paused (SIGSTOP, a stalled VM) past its lease may find another run holding the
    lock when it resumes. Before each step the executor calls :meth:`verify`: unless the
    lease was confirmed within the last ``FRESH_SECONDS`` (monotonic, so a pause counts),
    it is refreshed by a compare-and-set at our revision, which fails once anyone else
    has written the key. A lost lease is final: every later step is refused.
    """

    store: LockStore
    lease: Lease
    clock: Clock
    sleep: Sleep
    settings: LockSettings
    on_lost: Callable[[str], None] | None
    lost: str = ""  # why the lease was lost ("" while held)
    stopping: bool = False
    busy: bool = False
    verified_at: float = field(default_factory=time.monotonic)
    _turn: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self) -> None:
        while not self.stopping:
            await self.sleep(self.settings.lease_seconds / 3)
            if self.stopping:
                return
            self.busy = True
            try:
                await self._refresh(force=True)
            except LockError:
                return
            except ReconcileError:
                continue  # a timeout or a server blip: try again at the next beat
            finally:
                self.busy = False

    async def verify(self) -> None:
        """Raise :class:`LockError` unless the lease is still ours."""
        if self.lost:
            raise LockError(self.lost)
        if time.monotonic() - self.verified_at < FRESH_SECONDS:
            return
        await self._refresh()

    async def _refresh(self, *, force: bool = False) -> None:
        async with self._turn:
            if self.lost:
                raise LockError(self.lost)
            if not force and time.monotonic() - self.verified_at < FRESH_SECONDS:
                return  # another step just confirmed it
            try:
                self.lease = await refresh(
                    self.store, self.lease, now=self.clock(), settings=self.settings
                )
            except LockError as err:
                self.lost = str(err)
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                raise
            self.verified_at = time.monotonic()


def lease_from_env(text: str) -> float:
    """``RECONCILE_LOCK_LEASE``: seconds, above 0 (empty: the default). A value that is
    not a positive number is an error, never a lock that expires at once."""
    return seconds_from_env("RECONCILE_LOCK_LEASE", text, LEASE_SECONDS)


def seconds_from_env(name: str, text: str, default: float) -> float:
    """The seconds variable ``name`` holds as ``text``: a number above 0, ``default``
    when empty; anything else an error naming the variable (a lease or a claim that
    expires at once, or never, is no setting)."""
    if not text.strip():
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ReconcileError(f"{name} must be a number of seconds above 0, not {text[:40]!r}")
    return seconds


@contextlib.asynccontextmanager
async def for_apply(
    client: Any,
    *,
    timeout: float | None,
    on_notice: Callable[[str], None] | None = None,
    on_lost: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> AsyncIterator[Fence | None]:
    """The lock around one apply (``timeout=None``: no lock, e.g. ``--no-lock``).

    On a clustered server the bucket gets three replicas, so losing a node keeps it.
    The lease lasts ``RECONCILE_LOCK_LEASE`` seconds (default 30) from the last refresh.
    ``on_notice`` hears that the run waits and if the lease is lost; ``on_lost`` is called
    then too (the apply should stop before its next step). Waiting ends when ``stop`` is set.
    """
    if timeout is None:
        yield None
        return
    info = await client.server_info()
    lease_seconds = lease_from_env(os.environ.get("RECONCILE_LOCK_LEASE", ""))
    settings = LockSettings(replicas=replicas_for(info.clustered), lease_seconds=lease_seconds)
    say = on_notice or (lambda message: None)

    def waiting(lease: Lease) -> None:
        say(f"waiting up to {timeout:g}s for the apply lock held by {lease.describe(time.time())}")

    def taken(lease: Lease) -> None:
        h = lease.holder
        say(f"took over the apply lock from {h.owner} (pid {h.pid} on {h.host} is gone)")

    def lost(message: str) -> None:
        say(f"{message}: stopping after the steps in flight")
        if on_lost is not None:
            on_lost()

    async with hold(
        client,
        timeout=timeout,
        settings=settings,
        on_wait=waiting,
        on_lost=lost,
        stop=stop,
        on_takeover=taken,
    ) as fence:
        yield fence
