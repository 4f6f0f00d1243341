"""A publish nothing answers is sent again after a growing pause (``Transport.publish``,
``PUBLISH_SETTLING``): in a cluster a stream just made is heard of on the other servers
a moment after its create is answered, and a KeyValue entry put at once got no
responders, as the apply lock's first write on a loaded fresh cluster had (the lock's
own copy of this rule, folded into this one). Nothing received such a request, so
sending it again stores nothing twice. The stand-in below is the client seam
(``nc.request``), no server: what it answers is the only thing under test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.errors import NoRespondersError

from reconciler.errors import ConnectRefused, NoResponders
from reconciler.jetstream import transport
from reconciler.jetstream.transport import Transport

pytestmark = pytest.mark.unit


class _Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data


class _Answering:
    """Raises no responders ``silent`` times, then acks each publish it is sent."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.sent: list[str] = []

    async def request(self, subject: str, payload: bytes, **_: Any) -> _Reply:
        self.sent.append(subject)
        if len(self.sent) <= self.silent:
            raise NoRespondersError
        return _Reply(b'{"stream":"KV_cfg","seq":%d}' % len(self.sent))


def _publish(nc: _Answering) -> dict[str, Any]:
    client = Transport(nc)  # type: ignore[arg-type]
    return asyncio.run(client.publish("$KV.cfg.a", b"v", headers={"X": "1"}))


def test_a_publish_no_stream_heard_yet_is_sent_again_until_one_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(transport.asyncio, "sleep", pause)
    nc = _Answering(silent=5)
    assert _publish(nc) == {"stream": "KV_cfg", "seq": 6}
    assert nc.sent == ["$KV.cfg.a"] * 6  # once each try, and stored once
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8]


def test_a_refused_connection_is_not_asked_again() -> None:
    class Refused(_Answering):
        async def request(self, subject: str, payload: bytes, **_: Any) -> _Reply:
            self.sent.append(subject)
            raise ConnectRefused("authorization violation")

    nc = Refused(silent=0)
    with pytest.raises(ConnectRefused):
        _publish(nc)
    assert len(nc.sent) == 1


def test_a_publish_nothing_ever_answers_is_the_error_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "PUBLISH_SETTLING", (0.0, 0.0))
    nc = _Answering(silent=10)
    with pytest.raises(NoResponders) as failed:
        _publish(nc)
    assert "$KV.cfg.a" in str(failed.value)
    assert len(nc.sent) == 3
