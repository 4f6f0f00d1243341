"""The provider's server work: one resource read, created, updated or deleted.

Everything here goes through the engine: ``reconciler.normalize`` builds the config to
send (the same complete config the CLI sends), ``reconciler.jetstream`` speaks the API.
Each function takes an open client; the provider opens one per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.errors import NotFound, RefusedPlan, UnsupportedField
from reconciler.jetstream import JetStreamClient
from reconciler.normalize import desired_config, unsupported_fields
from reconciler.spec import KV_PREFIX, OBJ_PREFIX, Spec
from reconciler.state import ServerInfo

STREAM_KINDS = frozenset({"Stream", "KeyValue", "ObjectStore"})


@dataclass(frozen=True)
class Target:
    """The identity of a managed resource: enough to find it on a server."""

    kind: str
    name: str
    stream: str | None = None

    @classmethod
    def of(cls, spec: Spec) -> Target:
        return cls(spec.kind, spec.name, spec.stream)

    @property
    def stream_name(self) -> str:
        """The JetStream stream that is (or holds) this resource."""
        if self.kind == "Consumer":
            return self.stream or ""
        prefix = {"KeyValue": KV_PREFIX, "ObjectStore": OBJ_PREFIX}.get(self.kind, "")
        return prefix + self.name

    @property
    def resource_id(self) -> str:
        """The Pulumi id: the stream name, ``STREAM/CONSUMER``, or the bucket name."""
        return f"{self.stream}/{self.name}" if self.kind == "Consumer" else self.name


@dataclass(frozen=True)
class Live:
    """A resource as the server holds it: its config verbatim and the server's facts."""

    server: ServerInfo
    config: Mapping[str, Any]  # a consumer's config, or the (bucket's) stream config
    messages: int = 0
    stream_config: Mapping[str, Any] | None = None  # consumers: their stream's config


async def observe(client: JetStreamClient, target: Target) -> Live | None:
    """The live resource, or None when the server does not have it."""
    server = await client.server_info()
    try:
        stream = await client.stream_info(target.stream_name)
        if target.kind != "Consumer":
            messages = int(stream.get("state", {}).get("messages", 0))
            return Live(server, stream["config"], messages)
        info = await client.consumer_info(target.stream_name, target.name)
    except NotFound:
        return None
    return Live(server, info["config"], stream_config=stream["config"])


async def create(client: JetStreamClient, spec: Spec) -> Live:
    """Create the resource with the complete desired config; fails if it exists."""
    server, stream_config, desired = await _desired(client, spec)
    if spec.kind == "Consumer":
        assert spec.stream is not None
        info = await client.create_consumer(spec.stream, desired, action="create")
    else:
        info = await client.create_stream(desired)
    return Live(server, info["config"], stream_config=stream_config)


async def update(client: JetStreamClient, spec: Spec) -> Live:
    """Update in place, sending the complete desired config (updates replace configs)."""
    server, stream_config, desired = await _desired(client, spec)
    if spec.kind == "Consumer":
        assert spec.stream is not None
        info = await client.create_consumer(spec.stream, desired, action="update")
    else:
        info = await client.update_stream(desired)
    return Live(server, info["config"], stream_config=stream_config)


async def destroy(client: JetStreamClient, target: Target, *, allow_destroy: bool) -> None:
    """Delete the resource; a stream or bucket holding messages needs ``allow_destroy``.

    A resource already gone is not an error: the goal state is reached.
    """
    live = await observe(client, target)
    if live is None:
        return
    if target.kind == "Consumer":
        await _ignore_missing(client.delete_consumer(target.stream_name, target.name))
        return
    if live.messages and not allow_destroy:
        raise RefusedPlan(
            f"{target.kind} {target.name} holds {live.messages} messages and deleting "
            "it (also to replace it) destroys them; set allow_destroy=True on the "
            "resource to allow it"
        )
    await _ignore_missing(client.delete_stream(target.stream_name))


async def _desired(
    client: JetStreamClient, spec: Spec
) -> tuple[ServerInfo, Mapping[str, Any] | None, dict[str, Any]]:
    """The server's facts, the parent stream's config (consumers), the config to send."""
    server = await client.server_info()
    problems = unsupported_fields([spec], server)
    if problems:
        raise UnsupportedField(problems)
    if spec.kind != "Consumer":
        return server, None, desired_config(spec, server)
    assert spec.stream is not None
    stream_config = (await client.stream_info(spec.stream))["config"]
    return server, stream_config, desired_config(spec, server, stream_config=stream_config)


async def _ignore_missing(request: Any) -> None:
    with contextlib.suppress(NotFound):
        await request
