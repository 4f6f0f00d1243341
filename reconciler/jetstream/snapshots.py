"""Stream data snapshots over the wire: ``$JS.API.STREAM.SNAPSHOT`` and ``STREAM.RESTORE``.

Read against nats-server's ``jetstream_api.go`` (``jsStreamSnapshotRequest``,
``streamSnapshot``, ``jsStreamRestoreRequest``, ``processStreamRestore``) and jsm.go's
``snapshots.go`` (what ``nats stream backup`` / ``nats account backup`` run):

- SNAPSHOT ``{deliver_subject, no_consumers, chunk_size, jsck}`` answers ``{config,
  state}`` (the stream as the snapshot holds it), then the server sends the snapshot (an
  S2-compressed tar) in chunks to ``deliver_subject``. A chunk carries a reply subject
  ``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>``: an empty message there gives the
  server room for one more chunk (it keeps at most a window, 8 MiB by default, in
  flight, and gives up after 5 s without an ack). The last data chunk may have no reply.
  The end is an empty message whose status is ``204`` (or ``408``/``500`` and a
  description when the server gave up).
- RESTORE ``{config, state}`` answers ``{deliver_subject}``; each chunk is sent there as a
  request (the reply is empty, or an error); an empty request ends the transfer and its
  reply is the stream's info (a ``stream_create_response``) or the error. The server
  drops a restore that sees no chunk for 5 s.

Memory is bounded: a snapshot chunk is handed to ``sink`` and acknowledged only then
(so at most the server's window waits in the client), a restore reads its file chunk by
chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout

from reconciler.errors import ConnectError, ReconcileError, RequestTimeout
from reconciler.jetstream.api import JetStreamClient
from reconciler.jetstream.connection import cancelled_and_taken

#: What the server sends per chunk by default (it clamps to 1 KiB .. 1 MiB).
SNAPSHOT_CHUNK = 128 * 1024
#: What a restore sends per request (the nats CLI sends 64 KiB; the server takes up to
#: its max_payload, 1 MiB by default).
RESTORE_CHUNK = 128 * 1024
#: How long the server may take to check and prepare a snapshot, or to finish a restore,
#: as long as it answers a PING within the request timeout meanwhile.
SLOW_SECONDS = 600.0
#: Where a snapshot chunk's reply carries its index (``$JS.SNAPSHOT.ACK.<s>.<id>.<n>.<i>``).
_ACK_INDEX = 7

ChunkSink = Callable[[bytes], None]


class SnapshotFailed(ReconcileError):
    """A snapshot or restore the server, the link or the data ended before it finished."""


@dataclass(frozen=True)
class Snapshot:
    """What the server said a finished snapshot holds, and what arrived."""

    config: dict[str, Any]
    state: dict[str, Any]
    size: int
    chunks: int


def _chunk_index(reply: str) -> int | None:
    tokens = reply.split(".")
    if len(tokens) != _ACK_INDEX + 1:
        return None
    try:
        return int(tokens[_ACK_INDEX])
    except ValueError:
        return None


def _end_status(headers: dict[str, str] | None) -> str | None:
    """None when the end-of-snapshot message says it finished; else what went wrong."""
    if not headers:
        return None
    status = headers.get("Status", "")
    if not status or status.startswith("204"):
        return None
    return f"{status} {headers.get('Description', '')}".strip()


async def snapshot_stream(
    client: JetStreamClient,
    stream: str,
    sink: ChunkSink,
    *,
    consumers: bool = True,
    check: bool = True,
    chunk_size: int = SNAPSHOT_CHUNK,
    idle: float | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> Snapshot:
    """Take a snapshot of ``stream``, each chunk handed to ``sink`` in order before it is
    acknowledged. Raises :class:`SnapshotFailed` when the server gives up, a chunk is
    missing, the link drops, nothing arrives for ``idle`` seconds (None: the client's
    request timeout, ``--timeout``; the server sends the chunks at once after its reply,
    and itself gives up after 5 s without an ack), or the server stops answering a PING
    within that timeout while it checks the stream before its reply: what ``sink`` got
    is then not a snapshot."""
    idle = client.timeout if idle is None else idle
    nc = client.nc
    inbox = nc.new_inbox()
    with _dropped(stream):
        sub = await nc.subscribe(inbox, pending_bytes_limit=64 * 1024 * 1024)
    try:
        body = {
            "deliver_subject": inbox,
            "no_consumers": not consumers,
            "chunk_size": chunk_size,
            "jsck": check,
        }
        timeout = max(client.timeout, SLOW_SECONDS if check else client.timeout)
        asked = client.request(f"STREAM.SNAPSHOT.{stream}", body, timeout=timeout)
        reply = await _while_answering(client, stream, asked)
        size, chunks = await _receive(client, stream, sub, sink, idle=idle, on_chunk=on_chunk)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return Snapshot(dict(reply.get("config") or {}), dict(reply.get("state") or {}), size, chunks)


async def _while_answering(
    client: JetStreamClient, stream: str, asked: Awaitable[dict[str, Any]]
) -> dict[str, Any]:
    """The snapshot request's reply, waited for as long as the server checks the stream
    (up to :data:`SLOW_SECONDS`) while it answers a PING within the request timeout: a
    server that stopped (SIGSTOP, a network dropping packets) is given up then."""
    task = asyncio.ensure_future(asked)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=client.timeout)
            if done:
                return task.result()
            if not await client.answers():
                raise SnapshotFailed(
                    f"the server stopped answering while it prepared the snapshot of "
                    f"{stream} (no PONG within {client.timeout:g}s, the request timeout)"
                )
    finally:
        await cancelled_and_taken(task, wait=client.timeout)


@contextlib.contextmanager
def _dropped(stream: str) -> Iterator[None]:
    """A connection closed under a snapshot (the server killed, the link gone) is the
    snapshot's failure, named, never a raw client error; a timeout passes through."""
    try:
        yield
    except NatsTimeout:
        raise
    except NatsError as err:
        raise SnapshotFailed(
            f"the connection dropped during the snapshot of {stream} ({type(err).__name__})"
        ) from None


async def _receive(
    client: JetStreamClient,
    stream: str,
    sub: Any,
    sink: ChunkSink,
    *,
    idle: float,
    on_chunk: Callable[[int], None] | None,
) -> tuple[int, int]:
    """Read chunks until the end message: (bytes, chunks)."""
    nc = client.nc
    size = chunks = 0
    expected = 1
    last = time.monotonic()  # when the reply or the last chunk came
    while True:
        if not nc.is_connected:
            raise SnapshotFailed(f"the connection dropped during the snapshot of {stream}")
        try:
            with _dropped(stream):
                msg = await sub.next_msg(timeout=min(1.0, idle))
        except (TimeoutError, NatsTimeout):
            if time.monotonic() - last >= idle:
                raise SnapshotFailed(
                    f"no snapshot data for {stream} within {idle:g}s (the request timeout): "
                    "the server stopped sending"
                ) from None
            continue
        last = time.monotonic()
        if not msg.data:
            problem = _end_status(msg.headers)
            if problem is not None:
                raise SnapshotFailed(f"the server ended the snapshot of {stream}: {problem}")
            return size, chunks
        if msg.reply:
            index = _chunk_index(msg.reply)
            if index is not None and index != expected:
                raise SnapshotFailed(
                    f"snapshot of {stream}: chunk {expected} was lost (chunk {index} came)"
                )
            expected += 1
        sink(msg.data)
        size += len(msg.data)
        chunks += 1
        if msg.reply:
            with _dropped(stream):
                await nc.publish(msg.reply, b"")
        if on_chunk is not None:
            on_chunk(len(msg.data))


async def restore_stream(
    client: JetStreamClient,
    config: dict[str, Any],
    state: dict[str, Any],
    chunks: Iterable[bytes],
    *,
    on_chunk: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Create the stream ``config['name']`` from a snapshot's ``chunks`` (read lazily, in
    order); the restored stream's info. The server refuses a stream that exists."""
    stream = str(config["name"])
    reply = await client.request(f"STREAM.RESTORE.{stream}", {"config": config, "state": state})
    deliver = str(reply.get("deliver_subject") or "")
    if not deliver:
        raise SnapshotFailed(f"the server gave no subject to restore {stream} to")
    for chunk in _within(chunks, _largest(client)):
        answer = await _send(client, deliver, chunk, stream, client.timeout)
        if answer:
            client._decode(deliver, answer)  # an error reply raises
            raise SnapshotFailed(f"unexpected answer while restoring {stream}")
        if on_chunk is not None:
            on_chunk(len(chunk))
    final = await _send(client, deliver, b"", stream, max(client.timeout, SLOW_SECONDS))
    return client._decode(deliver, final)


def _largest(client: JetStreamClient) -> int:
    """The most a restore request may carry: the server's ``max_payload`` (measured: a
    server started with ``max_payload: 32768`` could not be restored to in chunks of
    ``RESTORE_CHUNK``, 128 KiB), never below 1 KiB."""
    limit = getattr(client.nc, "max_payload", None)
    return max(1024, limit) if isinstance(limit, int) and limit > 0 else RESTORE_CHUNK


def _within(chunks: Iterable[bytes], largest: int) -> Iterator[bytes]:
    """``chunks`` cut to at most ``largest`` bytes each, in order (the server appends a
    restore's data as it comes, whatever its cuts)."""
    for chunk in chunks:
        for start in range(0, len(chunk), largest):
            yield chunk[start : start + largest]


async def _send(
    client: JetStreamClient, subject: str, chunk: bytes, stream: str, timeout: float
) -> bytes:
    try:
        return await client.raw_request(subject, chunk, timeout=timeout)
    except RequestTimeout:
        raise SnapshotFailed(
            f"the server stopped answering while {stream} was restored: run restore again"
        ) from None
    except ConnectError as err:
        raise SnapshotFailed(f"restore of {stream}: {err}: run restore again") from None
