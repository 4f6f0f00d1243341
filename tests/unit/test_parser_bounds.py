"""The bounds on what one connection holds (``connection.overrun``) read nats-py's parser
state: the client's parser (``_ps``), its ``buf``, ``state`` and ``needed``. A nats-py
release that moves them would leave connections unbounded without a word (the guard
degrades to nats-py's own behaviour rather than refusing every connection): these
tests fail first. The attacks themselves, against a listener: tests/integration/
test_read_bounds.py."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import pytest
from nats.aio.client import Client, Srv
from nats.aio.subscription import Subscription
from nats.errors import ProtocolError

from reconciler.jetstream.connection import MAX_LINE, MAX_MESSAGE, _Client, overrun

READ = 32 * 1024  # what nats-py's read loop hands its parser at a time (at most)


def _client() -> _Client:
    """A client as its read loop has it: connected to a server with a password."""
    client = _Client()
    client._current_server = Srv(urlparse("nats://alice:hunter2@127.0.0.1:4222"))
    client._status = Client.CONNECTED
    return client


def _fed(client: _Client, *chunks: bytes) -> None:
    async def feed() -> None:
        for chunk in chunks:
            await client._ps.parse(chunk)

    asyncio.run(feed())


def test_the_clients_parser_is_the_bounded_one_and_reads_nats_pys_state() -> None:
    client = _client()
    parser = client._ps
    assert parser.nc is client
    assert {"buf", "state", "needed"} <= set(vars(parser)), "nats-py's parser state moved"
    assert overrun(parser) is None


def test_a_message_announced_over_the_bound_ends_the_connection_naming_the_server() -> None:
    client = _client()
    with pytest.raises(ProtocolError):
        _fed(client, b"MSG _INBOX.x 1 " + str(MAX_MESSAGE + 1).encode() + b"\r\n" + b"y" * 10)
    assert client.cut is not None
    assert "nats://127.0.0.1:4222" in client.cut and "hunter2" not in client.cut
    assert f"{MAX_MESSAGE + 1:,}" in client.cut


def test_a_message_at_the_bound_is_read_on() -> None:
    client = _client()
    _fed(client, b"MSG _INBOX.x 1 " + str(MAX_MESSAGE).encode() + b"\r\n", b"y" * READ)
    assert client.cut is None
    assert len(client._ps.buf) == READ  # waiting for the rest


def test_a_line_with_no_end_is_held_up_to_the_bound_and_no_further() -> None:
    client = _client()
    chunks = [b"-ERR '"] + [b"z" * READ] * (MAX_LINE // READ)
    _fed(client, *chunks[:-1])
    assert client.cut is None  # under the bound: maybe a long INFO still coming
    with pytest.raises(ProtocolError):
        _fed(client, chunks[-1], b"z" * READ)
    assert client.cut is not None and "127.0.0.1:4222" in client.cut
    assert len(client._ps.buf) <= MAX_LINE + READ


def test_a_long_message_split_over_reads_and_the_lines_after_it_are_parsed() -> None:
    client = _client()
    payload = b"p" * (4 * MAX_LINE)  # a reply far longer than any line may be
    wire = b"MSG _INBOX.x 1 " + str(len(payload)).encode() + b"\r\n" + payload + b"\r\nPONG\r\n"
    _fed(client, *(wire[i : i + READ] for i in range(0, len(wire), READ)))
    assert client.cut is None
    assert not client._ps.buf


def test_a_parser_without_nats_pys_state_is_left_unbounded_rather_than_refused() -> None:
    assert overrun(object()) is None  # type: ignore[arg-type]


def test_a_raw_subscriptions_messages_reach_its_handler_as_sent() -> None:
    """``_Client.raw_replies`` (a batched read's replies) takes each message from nats-py's
    parser as it came: the header block and the body, the status line included. A
    nats-py release that calls ``_process_msg`` otherwise fails here first."""
    client = _client()
    got: list[tuple[bytes, bytes]] = []
    client.raw_replies[7] = lambda headers, body: got.append((headers, body))
    message = b"NATS/1.0\r\nA: b\r\nNats-Sequence: 3\r\n\r\n"
    end = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\n\r\n"
    wire = b""
    for headers, body in ((message, b"value"), (end, b"")):
        size = len(headers) + len(body)
        wire += b"HMSG _INBOX.x 7 %d %d\r\n%s%s\r\n" % (len(headers), size, headers, body)
    _fed(client, wire)
    assert got == [(message, b"value"), (end, b"")]
    # Transport.replies registers a subscription by nats-py's id of it
    assert Subscription(client, 7, "_INBOX.x")._id == 7
