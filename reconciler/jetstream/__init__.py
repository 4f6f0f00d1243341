"""The only code that talks to a server: JetStream's JSON API over nats-py.

    async with open_client(ConnectionOptions(servers="nats://127.0.0.1:4222")) as client:
        live = await client.fetch_live()

The client is built in layers: :mod:`.transport` (requests, errors, timeouts, paging),
:mod:`.live` (the live read), :mod:`.kv` (KeyValue) and :mod:`.api` (the other calls,
and :class:`JetStreamClient` with them all).

With no server configured, :func:`open_client` runs against the embedded ``nats-server``
(state kept in ``options.store``, default ``.reconcile/``).
"""

from reconciler.jetstream.api import JetStreamClient, open_client
from reconciler.jetstream.connection import ConnectionOptions, connect, redact_url
from reconciler.jetstream.contexts import NatsContext, context_dir, load_context
from reconciler.jetstream.embedded import EmbeddedServer, find_binary
from reconciler.jetstream.kv import KvEntry

__all__ = [
    "ConnectionOptions",
    "EmbeddedServer",
    "JetStreamClient",
    "KvEntry",
    "NatsContext",
    "connect",
    "context_dir",
    "find_binary",
    "load_context",
    "open_client",
    "redact_url",
]
