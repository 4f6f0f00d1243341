"""The agent's HTTP endpoints on the event loop (asyncio streams; no thread, no framework).

``GET /metrics`` (Prometheus text), ``/healthz`` (the process answers), ``/readyz``
(200 when connected and the last plan succeeded within twice the interval, else 503
with the reason), ``/status`` (JSON: the last cycle). Anything else is 404; only GET
and HEAD are served, one request per connection, request heads cut at 8 KiB, and at
most :data:`MAX_CONNECTIONS` open at once: a new one closes the oldest, so clients
that open connections and send nothing, or never read the answer (each held up to
5 s), never take the file descriptors the cycles need (a spec file read, a
connection to a server), while a probe, whose request comes at once, is still
answered. A body is handed to its connection a part (:data:`WRITE_PART`) at a time,
each once the last has left: a client that never reads holds one part, never a copy of
a large ``/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

READ_LIMIT = 8192
READ_SECONDS = 5.0
#: Connections open at once; a new one closes the oldest (a scrape and two probes need 3).
MAX_CONNECTIONS = 64
#: Bytes of a body handed to a connection at once: 64 clients that never read a 10 MB
#: ``/status`` held a copy each (its unsent rest), 0.5 GB, never given back.
WRITE_PART = 65536


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Route = Callable[[], Reply]
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _head(reply: Reply) -> bytes:
    lines = [
        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
        "Connection: close",
        "",
        "",
    ]
    return "\r\n".join(lines).encode()


async def _send(writer: asyncio.StreamWriter, reply: Reply, method: str) -> None:
    writer.write(_head(reply))
    body = memoryview(b"" if method == "HEAD" else reply.body)
    for start in range(0, len(body), WRITE_PART):
        writer.write(body[start : start + WRITE_PART])
        await writer.drain()
    await writer.drain()


async def _serve_one(
    routes: dict[str, Route], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        line = await asyncio.wait_for(reader.readline(), READ_SECONDS)
        parts = line.decode("latin-1").split()
        method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            reply = Reply(405, b"only GET\n")
        elif path in routes:
            reply = routes[path]()
        else:
            reply = Reply(404, b"not found: /metrics /healthz /readyz /status\n")
        await asyncio.wait_for(_send(writer, reply, method), READ_SECONDS)
    except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def exposure(host: str) -> str | None:
    """What listening on ``host`` shows to others, or None for a loopback address (the
    endpoints answer anyone who can connect: no authentication)."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    if host == "localhost":
        return None
    return (
        f"listening on {host}, not only this machine: /status and /metrics answer anyone "
        "who can connect (resource names, drifted fields, and the client, user and host "
        "that changed them); restrict it with a firewall or a network policy"
    )


async def serve(host: str, port: int, routes: dict[str, Route]) -> asyncio.Server:
    """Listen on ``host:port`` (port 0: any free port; ``server.sockets`` tells which)."""

    open_now: dict[asyncio.StreamWriter, None] = {}  # oldest first

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while len(open_now) >= MAX_CONNECTIONS:  # the oldest closed: its descriptor freed
            oldest = next(iter(open_now))
            del open_now[oldest]
            oldest.transport.abort()
        open_now[writer] = None
        try:
            await _serve_one(routes, reader, writer)
        finally:
            open_now.pop(writer, None)

    # the backlog bounds how many connections one wake accepts (asyncio accepts up to
    # that many at once), so those closed meanwhile hold few descriptors too
    return await asyncio.start_server(handle, host, port, limit=READ_LIMIT, backlog=MAX_CONNECTIONS)
