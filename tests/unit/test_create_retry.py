"""A stream create the server refuses with 10049 ("error creating store for stream": a
deleted stream's folder of that name still being removed) is asked again, bounded; any
other refusal is not (execution.recreate.create_stream, used by every create of apply)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reconciler.errors import ServerError
from reconciler.execution import recreate


class Refusing:
    """A client whose STREAM.CREATE is refused ``times`` times with ``err_code``."""

    def __init__(self, times: int, err_code: int) -> None:
        self.times, self.err_code, self.asked = times, err_code, 0

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if self.asked <= self.times:
            raise ServerError(500, self.err_code, "refused")
        return {"config": config, "state": {"messages": 0}}


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recreate, "FIRST_WAIT", 0.0)


def test_a_store_not_created_is_asked_again_until_it_is() -> None:
    client = Refusing(3, recreate.STORE_NOT_CREATED)
    info = asyncio.run(recreate.create_stream(client, {"name": "S"}))  # type: ignore[arg-type]
    assert info["config"] == {"name": "S"} and client.asked == 4


def test_another_refusal_is_never_asked_again() -> None:
    client = Refusing(1, 10058)  # stream name already in use
    with pytest.raises(ServerError):
        asyncio.run(recreate.create_stream(client, {"name": "S"}))  # type: ignore[arg-type]
    assert client.asked == 1


def test_a_store_never_created_ends_at_its_patience() -> None:
    client = Refusing(10**6, recreate.STORE_NOT_CREATED)
    with pytest.raises(ServerError):
        asyncio.run(recreate.create_stream(client, {"name": "S"}, patience=0.05))  # type: ignore[arg-type]
    assert client.asked >= 1
