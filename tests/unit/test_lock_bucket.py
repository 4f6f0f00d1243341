"""The lock bucket made on first use: a 10049 from STREAM.CREATE (a deleted bucket's
files still being removed, which nats-server answers now and then: docs/jetstream-notes.md)
is asked again, as the executor asks again for any stream; another refusal is not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reconciler.errors import ServerError
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
