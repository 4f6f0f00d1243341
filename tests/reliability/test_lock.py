"""The lease lock against a real server, with an injected clock (no waiting on real time)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from nats.errors import NoRespondersError

from reconciler.errors import LockError, ReconcileError, RequestTimeout
from reconciler.execution import lock
from reconciler.execution.lock import Holder, LockSettings
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client

pytestmark = pytest.mark.integration


class FakeTime:
    """A clock that only moves when a test (or a waiting acquirer) sleeps."""

    def __init__(self, start: float = 1_800_000_000.0, *, real_pause: float = 0.0) -> None:
        self.now = start
        self.real_pause = real_pause  # real seconds per sleep, so other tasks get turns
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(self.real_pause)


def _holder(name: str) -> Holder:
    return Holder(owner=name, host=f"{name}-host", pid=100, run=uuid.uuid4().hex)


def _settings() -> LockSettings:
    return LockSettings(bucket=f"LOCKTEST_{uuid.uuid4().hex[:8]}", lease_seconds=30)


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[JetStreamClient]:
    async with open_client(ConnectionOptions(servers=url)) as client:
        yield client


def _go(url: str, body: Callable[[JetStreamClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with _client(url) as client:
            return await body(client)

    return asyncio.run(main())


def test_first_acquire_creates_the_bucket_and_records_the_holder(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        lease = await lock.acquire(
            client, _holder("alice"), timeout=0, clock=t.clock, settings=settings
        )
        return lease, await lock.read_lease(client, bucket=settings.bucket)

    lease, stored = _go(clean_server.url, body)

    assert lease.revision > 0
    assert stored is not None
    assert stored.holder == lease.holder
    assert stored.expires_at == t.now + 30


def _taken_after_one_failure(
    url: str, wrap: Callable[[Any], Any], *, made_before: bool = False
) -> None:
    """alice acquires the lock through ``wrap(client)``, a client one of whose requests
    fails once (its ``failed`` counts them; ``made_before``: the bucket made first, as by
    another run): the lease is taken and stored, after exactly one failure."""
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        if made_before:
            await lock.prepare(client, settings)
        wrapped = wrap(client)
        lease = await lock.acquire(
            wrapped, _holder("alice"), timeout=0, clock=t.clock, settings=settings
        )
        return wrapped.failed, lease, await lock.read_lease(client, bucket=settings.bucket)

    failed, lease, stored = _go(url, body)
    assert failed == 1
    assert stored is not None and stored.holder == lease.holder


class _LeaderMoved:
    """The client, but the first write of a lease finds no responder, as when the new
    bucket's stream changed leader just after its first read was answered (seen on a
    loaded three-node cluster: the first apply failed). The write fails where the server
    says so, at the connection (``nc.request``): the client sends it again
    (``transport.PUBLISH_SETTLING``, the one rule for every publish)."""

    def __init__(self, client: JetStreamClient) -> None:
        self.client, self.failed = client, 0
        request = client.nc.request

        async def first_unanswered(subject: str, payload: bytes = b"", **kw: Any) -> Any:
            if subject.startswith("$KV.") and not self.failed:
                self.failed += 1
                raise NoRespondersError
            return await request(subject, payload, **kw)

        client.nc.request = first_unanswered  # type: ignore[method-assign]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_first_lease_write_nobody_answered_in_a_new_bucket_is_sent_again(
    clean_server,
) -> None:
    _taken_after_one_failure(clean_server.url, _LeaderMoved)


def test_a_first_lease_write_nobody_answered_in_a_bucket_another_run_made_is_sent_again(
    clean_server,
) -> None:
    """The bucket was made an instant before by another run (another environment of one
    agent on a fresh cluster, its lineage kept first): this run read it, found no lease,
    and its create found no responder as the bucket's leader moved. It failed (JetStream
    "not enabled"), where a bucket made by this run was retried; now both are."""
    _taken_after_one_failure(clean_server.url, _LeaderMoved, made_before=True)


class _SlowCreate:
    """The client, but the bucket's first STREAM.CREATE is not answered in time: sent on
    (``made``: the server makes it, its answer comes too late) or lost."""

    def __init__(self, client: JetStreamClient, *, made: bool) -> None:
        self.client, self.made, self.failed = client, made, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        if not self.failed:
            self.failed += 1
            if self.made:
                await self.client.create_stream(config)
            raise RequestTimeout(f"no answer to $JS.API.STREAM.CREATE.{config['name']} within 5s")
        return await self.client.create_stream(config)


@pytest.mark.parametrize("made", [True, False], ids=["answered-late", "lost"])
def test_a_lock_bucket_create_not_answered_in_time_is_sent_again(clean_server, made: bool) -> None:
    """A loaded cluster made the lock's bucket after the request timeout (5 s): the run's
    first ``plan --out`` failed, saying no answer came. The create is sent again: the
    bucket made late is answered as made, a lost create is made now; the lease is taken."""
    _taken_after_one_failure(clean_server.url, lambda c: _SlowCreate(c, made=made))


def test_second_acquire_fails_naming_holder_host_and_since(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> None:
        await lock.acquire(client, _holder("alice"), timeout=0, clock=t.clock, settings=settings)
        await lock.acquire(
            client, _holder("bob"), timeout=5, clock=t.clock, sleep=t.sleep, settings=settings
        )

    with pytest.raises(LockError) as caught:
        _go(clean_server.url, body)

    message = str(caught.value)
    assert "alice on alice-host (pid 100) since 2027-01-15T08:00:00Z" in message
    assert "gave up after 5s" in message
    assert "reconcile lock break" in message


def test_waiter_takes_over_once_the_lease_expires(clean_server) -> None:
    settings, t = _settings(), FakeTime()
    waits: list[str] = []

    async def body(client: JetStreamClient) -> Any:
        await lock.acquire(client, _holder("alice"), timeout=0, clock=t.clock, settings=settings)
        lease = await lock.acquire(
            client,
            _holder("bob"),
            timeout=60,
            clock=t.clock,
            sleep=t.sleep,
            settings=settings,
            on_wait=lambda held: waits.append(held.holder.owner),
        )
        return lease, await lock.read_lease(client, bucket=settings.bucket)

    lease, stored = _go(clean_server.url, body)

    assert lease.holder.owner == "bob"
    assert stored.holder.owner == "bob"
    assert waits == ["alice"]
    assert sum(t.slept) >= 30


def test_two_takeovers_of_one_expired_lease_have_exactly_one_winner(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> list[Any]:
        await lock.acquire(client, _holder("dead"), timeout=0, clock=t.clock, settings=settings)
        t.now += 31
        return await asyncio.gather(
            *(
                lock.try_acquire(client, _holder(f"racer{i}"), now=t.now, settings=settings)
                for i in range(8)
            )
        )

    outcomes = _go(clean_server.url, body)

    winners = [ours for ours, _ in outcomes if ours is not None]
    assert len(winners) == 1
    assert all(theirs is not None for ours, theirs in outcomes if ours is None)


def test_refresh_extends_and_fails_once_another_run_took_the_key(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        lease = await lock.acquire(
            client, _holder("alice"), timeout=0, clock=t.clock, settings=settings
        )
        t.now += 10
        lease = await lock.refresh(client, lease, now=t.now, settings=settings)
        extended = lease.expires_at
        await lock.break_lock(client, settings=settings)
        await lock.acquire(client, _holder("bob"), timeout=0, clock=t.clock, settings=settings)
        with pytest.raises(LockError, match="lost the apply lock"):
            await lock.refresh(client, lease, now=t.now, settings=settings)
        released = await lock.release(client, lease, settings=settings)
        return extended, released, await lock.read_lease(client, bucket=settings.bucket)

    extended, released, stored = _go(clean_server.url, body)

    assert extended == t.now + 30
    assert released is False, "a lease taken over by another run is left alone"
    assert stored.holder.owner == "bob"


def test_hold_refreshes_in_the_background_and_releases_at_exit(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        async with lock.hold(
            client,
            timeout=0,
            holder=_holder("alice"),
            clock=t.clock,
            sleep=t.sleep,
            settings=settings,
        ) as fence:
            lease = fence.lease
            while t.now < lease.expires_at + 60:  # the keeper's sleeps move the clock
                await asyncio.sleep(0.01)
            during = await lock.read_lease(client, bucket=settings.bucket)
        after = await lock.read_lease(client, bucket=settings.bucket)
        return lease, during, after

    lease, during, after = _go(clean_server.url, body)

    assert during is not None and during.holder == lease.holder
    assert during.revision > lease.revision, "refreshed"
    assert not during.expired(lease.expires_at + 60 - 30)
    assert after is None, "released"


def test_hold_reports_a_lost_lease(clean_server) -> None:
    settings, t = _settings(), FakeTime(real_pause=0.02)
    lost: list[str] = []

    async def body(client: JetStreamClient) -> None:
        async with lock.hold(
            client,
            timeout=0,
            holder=_holder("alice"),
            clock=t.clock,
            sleep=t.sleep,
            settings=settings,
            on_lost=lost.append,
        ):
            await lock.break_lock(client, settings=settings)
            await lock.acquire(client, _holder("bob"), timeout=0, clock=t.clock, settings=settings)
            for _ in range(500):
                if lost:
                    break
                await asyncio.sleep(0.01)

    _go(clean_server.url, body)

    assert lost and "lost the apply lock" in lost[0]


def test_break_removes_a_stale_lease_and_frees_the_lock(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        await lock.acquire(client, _holder("crashed"), timeout=0, clock=t.clock, settings=settings)
        broken = await lock.break_lock(client, settings=settings)
        again = await lock.acquire(
            client, _holder("bob"), timeout=0, clock=t.clock, settings=settings
        )
        return broken, again, await lock.break_lock(client, settings=settings)

    broken, again, second = _go(clean_server.url, body)

    assert broken.holder.owner == "crashed"
    assert again.holder.owner == "bob"
    assert second.holder.owner == "bob"


def test_an_unreadable_lease_counts_as_expired(clean_server) -> None:
    settings, t = _settings(), FakeTime()

    async def body(client: JetStreamClient) -> Any:
        await lock.ensure_bucket(client, settings.bucket)
        await client.kv_create(settings.bucket, settings.key, b"not json")
        return await lock.acquire(
            client, _holder("bob"), timeout=0, clock=t.clock, settings=settings
        )

    assert _go(clean_server.url, body).holder.owner == "bob"


def test_the_fence_refuses_a_step_once_another_run_took_the_lease(clean_server) -> None:
    settings = _settings()
    outcomes: list[str] = []

    async def body(client: JetStreamClient) -> None:
        async with lock.hold(
            client, timeout=0, holder=_holder("alice"), settings=settings
        ) as fence:
            await fence.verify()  # fresh: no request
            outcomes.append("held")
            await lock.break_lock(client, settings=settings)
            await lock.acquire(client, _holder("bob"), timeout=0, settings=settings)
            await asyncio.sleep(lock.FRESH_SECONDS + 0.1)  # no longer fresh: checked
            try:
                await fence.verify()
            except LockError as err:
                outcomes.append(str(err))
            try:
                await fence.verify()  # lost is final
            except LockError:
                outcomes.append("still lost")

    _go(clean_server.url, body)

    assert outcomes[0] == "held"
    assert "lost the apply lock" in outcomes[1] and outcomes[2] == "still lost"


@pytest.mark.parametrize("text", ["abc", "-5", "0", "nan", "inf"])
def test_a_lease_that_is_not_a_positive_number_is_an_error_not_a_disabled_lock(
    text: str,
) -> None:
    with pytest.raises(ReconcileError, match="RECONCILE_LOCK_LEASE must be a number"):
        lock.lease_from_env(text)
    assert lock.lease_from_env("") == lock.LEASE_SECONDS
    assert lock.lease_from_env("2.5") == 2.5
