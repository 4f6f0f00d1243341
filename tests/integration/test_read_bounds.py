"""A hostile or broken listener at a server's address cannot make a `reconcile` process
hold unbounded memory. nats-py buffered whatever came: a MSG line announcing a message of
a terabyte and then its bytes, a line that never ends (an ``-ERR``, a later ``INFO``),
until the process died for lack of memory; with ``reconcile watch --all-envs``, every
environment's agent with it. An open connection now takes a line of up to
``MAX_LINE`` and a message of up to ``MAX_MESSAGE`` (connection.overrun); the lines read
while connecting (the greeting, the PONG) are held to nats-py's reader's line limit.

The listener counts what it managed to send before the client closed the connection:
what the client held is no more, less what the sockets between them hold unread."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_harness import (
    changes,
    get,
    lines,
    orders_healed_in,
    project_of,
    project_sources,
    running_agent,
    until,
)
from cli_runner import reconcile
from servers import NatsServer, run, write
from test_agent_envs import _declared, _drift
from test_greeting_attacks import ORDERS

from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.jetstream.connection import MAX_LINE

pytestmark = pytest.mark.slow  # attack runs: .ci/run's second stage

#: The attacks: whether the listener greets first (an INFO, then a PONG to the PING),
#: what it sends then, and the byte it goes on sending, never a line's end.
ATTACKS = {
    # while connecting: read by nats-py's reader, one line at a time
    "an INFO that never ends": (False, b'INFO {"server_id":"', b"x"),
    "a PONG that never ends": (True, b"PONG ", b" "),
    # on the open connection: read by the parser
    "a message announced at a terabyte": (True, b"PONG\r\nMSG _INBOX.x 1 1099511627776\r\n", b"y"),
    "an -ERR that never ends": (True, b"PONG\r\n-ERR 'hunter2", b"z"),
    "a later INFO that never ends": (True, b'PONG\r\nINFO {"connect_urls":["', b"u"),
}
GREETING = b'INFO {"server_id":"NX","version":"2.10.0","max_payload":1048576,"headers":true}\r\n'
CHUNK = 64 * 1024
#: What the listener's side holds unsent: its socket's send buffer (set to CHUNK; Linux
#: doubles it) and asyncio's write buffer (its high-water mark, set to CHUNK).
SENDER_HOLDS = 3 * CHUNK


def _receiver_holds() -> int:
    """The most the client's socket may hold unread: the receive buffer's autotuning
    ceiling (the third figure of ``tcp_rmem``)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return 8 * 1024 * 1024


#: What the client may have held when it closed: a line of MAX_LINE and the read past it.
HELD = MAX_LINE + CHUNK
#: The most the listener can have sent to a client holding no more than HELD.
BOUND = HELD + _receiver_holds() + SENDER_HOLDS
#: What the listener tries to send on each connection: well past BOUND, so a client
#: buffering all it gets is caught.
TOTAL = BOUND + 16 * 1024 * 1024


@dataclass
class Sent:
    """One connection, as the listener saw it."""

    bytes: int = 0
    cut_off: bool = False  # the client closed the connection before TOTAL was sent


@contextlib.contextmanager
def hostile(attack: str) -> Iterator[tuple[str, list[Sent]]]:
    """A listener on 127.0.0.1 running ``attack`` (:data:`ATTACKS`) on each connection,
    up to :data:`TOTAL` bytes: its URL, and each connection's :class:`Sent`."""
    greets, opening, filler = ATTACKS[attack]
    loop = asyncio.new_event_loop()
    connections: list[Sent] = []
    ready: list[str] = []

    async def pump(writer: asyncio.StreamWriter, sent: Sent) -> None:
        writer.write(opening)
        sent.bytes += len(opening)
        chunk = filler * CHUNK
        try:
            while sent.bytes < TOTAL:
                writer.write(chunk)
                sent.bytes += len(chunk)
                await writer.drain()
        except OSError:  # reset, broken pipe: the client closed it
            sent.cut_off = True

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
        writer.transport.set_write_buffer_limits(high=CHUNK)
        sent = Sent()
        connections.append(sent)
        with contextlib.suppress(OSError):
            if greets:
                writer.write(GREETING)
                while (line := await reader.readline()) and not line.startswith(b"PING"):
                    pass
            await pump(writer, sent)
        writer.close()

    async def serve() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        return server

    server = loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield ready[0], connections
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def _bounded(connections: list[Sent]) -> None:
    """Every connection was closed by the client before the listener sent more than a
    client holding at most HELD lets through."""
    assert connections, "the listener was connected to"
    for sent in connections:
        assert sent.cut_off, f"the client read all {sent.bytes:,} bytes sent"
        assert sent.bytes <= BOUND, f"{sent.bytes:,} bytes sent, over {BOUND:,}"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_plan_against_a_listener_sending_without_end_fails_naming_it_and_holds_little(
    attack: str, tmp_path: Path
) -> None:
    """``reconcile plan`` fails (exit 1) with one line naming the server (without the
    URL's password, nor what was sent), no traceback, after the client held no more
    than a line's bound. Before, it read a terabyte's announcement to the end."""
    specs = write(tmp_path, ORDERS, "orders.yaml")
    with hostile(attack) as (address, connections):
        url = f"nats://alice:hunter2@{address}"
        done = reconcile("plan", str(specs), "--server", url, "--timeout", "3", cwd=tmp_path)
        _bounded(connections)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert address in done.stderr
    assert "hunter2" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_agent_serves_the_other_environment_and_says_the_hostile_one_unreachable(
    server_factory: Any, tmp_path: Path
) -> None:
    """``reconcile watch --all-envs`` of two environments, one of them behind a listener
    announcing a message of a terabyte on every connection: that environment is
    unreachable in ``/status``, its error naming the server; every connection it opens
    is closed after holding little; the other environment heals a change by hand. Before,
    the agent's one process read the terabyte, every environment with it."""
    good = server_factory()
    options = ConnectionOptions(timeout=1.0, connect_timeout=1.0)
    with hostile("a message announced at a terabyte") as (address, connections):
        project = project_of(tmp_path, {"good": good.url, "hostile": f"nats://{address}"})
        sources = project_sources(project, options)

        async def scenario() -> None:
            async with running_agent(sources, mode="heal", interval=0.5) as (agent, log):
                await orders_healed_in(log, ["good"])
                link = agent.watches["hostile"].link
                await until(lambda: link.error and len(connections) > 1, what="hostile tried")
                healed = len(changes(log, "Stream ORDERS", "healed", "good"))
                await _drift(good.url, description="changed by hand", max_msgs=7000)
                await until(
                    lambda: len(changes(log, "Stream ORDERS", "healed", "good")) > healed,
                    what="good healed beside the hostile environment",
                )
                assert await _declared(good.url)
                assert not agent.stop.is_set()
                status = json.loads((await get(agent, "/status"))[1])["environments"]
                assert status["good"]["ready"] is True
                hostile_env = status["hostile"]
                assert hostile_env["reachable"] is False and hostile_env["connected"] is False
                assert hostile_env["unreachable_since"] is not None
                assert address in hostile_env["error"]
                said = [
                    line["message"]
                    for line in lines(log)
                    if line["event"] == "error" and line.get("env") == "hostile"
                ]
                assert said and all(address in message for message in said)

        run(scenario())
        _bounded(connections)


def test_a_reply_larger_than_the_servers_max_payload_and_any_line_is_read(
    clean_server: NatsServer,
) -> None:
    """The bounds leave room for what a server sends: a KeyValue value just under the
    server's max_payload (1 MiB) comes back in a STREAM.MSG.GET reply of base64 in
    JSON, a third larger than max_payload and twenty times a line's bound."""
    bucket = {"name": "KV_big", "subjects": ["$KV.big.>"], "storage": "memory"}
    value = os.urandom(1024 * 1024 - 4096)

    async def scenario() -> None:
        async with open_client(ConnectionOptions(servers=clean_server.url)) as client:
            await client.create_stream(bucket)
            revision = await client.kv_create("big", "blob", value)
            reply = await client.request("STREAM.MSG.GET.KV_big", {"last_by_subj": "$KV.big.blob"})
            assert len(json.dumps(reply)) > 1024 * 1024  # over the server's max_payload
            assert base64.b64decode(reply["message"]["data"]) == value
            entry = await client.kv_get("big", "blob")
            assert entry is not None and (entry.value, entry.revision) == (value, revision)

    run(scenario())
