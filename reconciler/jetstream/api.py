"""The JetStream API calls that change a server, and :class:`JetStreamClient` with them
all: requests and errors (:mod:`.transport`), the live read (:mod:`.live`), KeyValue
(:mod:`.kv`). :func:`open_client` opens a client for
:class:`~reconciler.jetstream.connection.ConnectionOptions`, starting the embedded server
when nothing is configured.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from reconciler.errors import ReconcileError, ServerError
from reconciler.jetstream.connection import DEFAULT_STORE, ConnectionOptions
from reconciler.jetstream.embedded import EmbeddedServer
from reconciler.jetstream.kv import KeyValueCalls
from reconciler.jetstream.live import LiveRead
from reconciler.jetstream.server_limits import ServerLimitsCalls
from reconciler.jetstream.transport import NO_MESSAGE, parse_headers

Notice = Callable[[str], None]


def _ignore(message: str) -> None:
    return None


class JetStreamClient(LiveRead, KeyValueCalls, ServerLimitsCalls):
    """Async client of the JetStream API; configs in and out are plain dicts."""

    # -- streams --------------------------------------------------------------------------
    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self.request(f"STREAM.CREATE.{config['name']}", config)

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        """Replace the whole config (fields left out go back to their defaults)."""
        return await self.request(f"STREAM.UPDATE.{config['name']}", config)

    async def delete_stream(self, name: str) -> None:
        await self.request(f"STREAM.DELETE.{name}")

    # -- consumers ------------------------------------------------------------------------
    async def create_consumer(
        self, stream: str, config: dict[str, Any], *, action: Literal["create", "update"]
    ) -> dict[str, Any]:
        """``action="create"`` fails on a different existing consumer, ``update`` on none."""
        name = config.get("name") or config.get("durable_name")
        if not name:
            raise ValueError("a managed consumer needs a name or durable_name")
        body = {"stream_name": stream, "config": config, "action": action}
        return await self.request(f"CONSUMER.CREATE.{stream}.{name}", body)

    async def delete_consumer(self, stream: str, name: str) -> None:
        await self.request(f"CONSUMER.DELETE.{stream}.{name}")

    async def pause_consumer(self, stream: str, name: str, until: str | None) -> dict[str, Any]:
        """Pause until an RFC 3339 time, or resume with ``None`` (server 2.11+)."""
        body = {"pause_until": until} if until else {}
        return await self.request(f"CONSUMER.PAUSE.{stream}.{name}", body)

    async def reset_consumer(self, stream: str, name: str, seq: int) -> dict[str, Any]:
        """Move a consumer so ``seq`` is the next message it delivers (nats-server 2.14+;
        its ack floor becomes ``seq - 1``, its config is unchanged)."""
        return await self.request(f"CONSUMER.RESET.{stream}.{name}", {"seq": seq})

    async def account_info(self) -> dict[str, Any]:
        """``$JS.API.INFO``: the account's usage and limits (not cached)."""
        return await self.request("INFO")

    # -- messages -------------------------------------------------------------------------
    async def stored_message(self, stream: str, query: dict[str, Any]) -> dict[str, Any] | None:
        """STREAM.MSG.GET with ``query`` (``seq``, ``last_by_subj``, ...): the stored
        message with its headers parsed into ``headers``; None when there is none."""
        try:
            reply = await self.request(f"STREAM.MSG.GET.{stream}", query)
        except ServerError as err:
            if err.err_code == NO_MESSAGE:
                return None
            raise
        message = dict(reply["message"])
        message["headers"] = parse_headers(message.get("hdrs"))
        return message


@asynccontextmanager
async def open_client(
    options: ConnectionOptions, *, on_notice: Notice = _ignore
) -> AsyncIterator[JetStreamClient]:
    """A connected client; with no server configured, on the embedded server.

    The embedded server is started (or a running one for the same store reused) and is
    stopped at exit when no other run uses it; ``on_notice`` is told which server is used,
    and, when stopping it takes memory streams with it, which ones and how to keep them.
    """
    options = options.with_context()
    embedded: EmbeddedServer | None = None
    if not options.is_configured:
        embedded = EmbeddedServer(options.store)
        url = await asyncio.to_thread(embedded.acquire)
        options = replace(options, servers=url)
    memory: list[str] = []
    try:
        client = await JetStreamClient.connect(options, embedded=embedded is not None)
        try:
            if embedded is not None:
                info = await client.server_info()
                on_notice(
                    f"using embedded nats-server {info.version} at {embedded.url} "
                    f"(state in {options.store}/)"
                )
            # else its INFO is asked with the first request that needs it: over a slow
            # link a round trip of its own would cost more than the rest of a read
            yield client
            if embedded is not None:
                memory = await _memory_streams(client)
        finally:
            await client.close()
    finally:
        if embedded is not None and embedded.release() and memory:
            on_notice(_memory_lost(memory, options.store))


async def _memory_streams(client: JetStreamClient) -> list[str]:
    """The embedded server's memory streams, which die with it (none when it cannot say:
    only a notice depends on it)."""
    try:
        streams = await client.list_streams()
    except (ReconcileError, OSError, TimeoutError):
        return []
    configs = [s.get("config") for s in streams if isinstance(s, dict)]
    return sorted(
        str(c.get("name")) for c in configs if isinstance(c, dict) and c.get("storage") == "memory"
    )


def _memory_lost(names: list[str], store: Path) -> str:
    """What stopping the embedded server at the end of a command did to its memory
    streams: a memory stream lives only as long as its server, so the next command would
    plan (or restore) it anew. The command that keeps it names its store when that is not
    the default (a project environment's, ``.reconcile/dev``): ``reconcile server`` alone
    would keep another server running."""
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    keep = "reconcile server"
    if store != DEFAULT_STORE:
        keep += f" --store {shlex.quote(str(store))}"
    return (
        f"stopped the embedded nats-server, and with it its memory stream(s) {shown}: "
        f"memory storage lives only as long as its server; `{keep}` keeps it "
        "running between commands"
    )
