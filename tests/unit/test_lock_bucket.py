"""The lock bucket made on first use: a 10049 from STREAM.CREATE (a deleted bucket's
files still being removed, which nats-server answers now and then: docs/jetstream-notes.md)
is asked again, as the executor asks again for any stream; another refusal is not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reconciler.errors import ConnectError, ConnectRefused, ServerError
from reconciler.execution import lock, recreate


class Creates:
    """A store whose STREAM.CREATE answers ``refusals`` first, then succeeds."""

    def __init__(self, *refusals: int) -> None:
        self.refusals = list(refusals)
        self.asked = 0

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if self.refusals:
            code = self.refusals.pop(0)
            raise ServerError(500, code, "refused", subject="$JS.API.STREAM.CREATE.X")
        return {"config": config}


def test_a_lock_bucket_refused_with_10049_is_asked_again_until_made() -> None:
    store = Creates(recreate.STORE_NOT_CREATED, recreate.STORE_NOT_CREATED)
    asyncio.run(lock.ensure_bucket(store, "RECONCILE_LOCKS"))  # type: ignore[arg-type]
    assert store.asked == 3 and not store.refusals


def test_another_refusal_of_the_lock_bucket_is_not_asked_again() -> None:
    store = Creates(10_999)
    with pytest.raises(ServerError):
        asyncio.run(lock.ensure_bucket(store, "RECONCILE_LOCKS"))  # type: ignore[arg-type]
    assert store.asked == 1


class NoResponderYet:
    """A fresh bucket's store: reads are answered, while the first ``misses`` writes of
    the lock's key find no responder (a node that does not know the route to the new
    leader's subscription yet)."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.writes = 0

    async def kv_entry(self, bucket: str, key: str) -> None:
        return None

    async def kv_create(self, bucket: str, key: str, value: bytes) -> int:
        self.writes += 1
        if self.writes <= self.misses:
            raise ConnectError(f"no JetStream answers on $KV.{bucket}.{key}")
        return 1


def test_the_lock_key_is_written_again_while_a_fresh_bucket_has_no_responder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three tries with no pause were spent within a second on a loaded fresh cluster
    (an agent's environment failed, 'JetStream is not enabled'); the write is now sent
    again after a growing pause, seven times."""
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(lock.asyncio, "sleep", pause)
    store = NoResponderYet(misses=5)
    settings = lock.LockSettings()
    assert asyncio.run(lock.create_first(store, settings, b"lease")) == 1  # type: ignore[arg-type]
    assert store.writes == 6
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8]


def test_a_refused_connection_is_not_asked_again() -> None:
    class Refused(NoResponderYet):
        async def kv_create(self, bucket: str, key: str, value: bytes) -> int:
            self.writes += 1
            raise ConnectRefused("authorization violation")

    store = Refused(misses=0)
    with pytest.raises(ConnectRefused):
        asyncio.run(lock.create_first(store, lock.LockSettings(), b"lease"))  # type: ignore[arg-type]
    assert store.writes == 1
