"""An in-memory ``$JS.API`` at the transport seam, for fast offline tests of the stages.

httpx tests a client against ``MockTransport``; here :class:`MemoryServer` stands where
the nats-py connection stands under :class:`~reconciler.jetstream.transport.Transport`
(``request(subject, payload)`` answering bytes), so the whole client above it (paging,
typed errors, the live read, the calls that change a server) runs unchanged:

    server = MemoryServer(limits={"max_streams": 1})
    client = server.client()
    live = await client.fetch_live()

It answers the part of the API the stages use (``INFO``, streams and consumers: create,
update, info, list, names, delete) with the server's error codes, keeps every config as
it was sent (a real server fills its defaults; the planner fills both sides the same),
and holds no messages: :meth:`MemoryServer.hold` sets what a stream's state reports. It
is a fake, never a stand-in for a server in an integration test: what only a server
proves (its defaults, its refusals, its storage) is tested on real ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from reconciler.jetstream.api import JetStreamClient

__all__ = ["MemoryServer"]

#: The server's error codes the client and the planner know.
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
STREAM_NAME_IN_USE = 10058
CONSUMER_EXISTS = 10148
CONSUMER_DOES_NOT_EXIST = 10149
MAXIMUM_STREAMS = 10027
CREATED = "2026-01-01T00:00:00Z"


@dataclass
class _Reply:
    """What nats-py's request returns: the reply's bytes."""

    data: bytes


@dataclass
class _Stream:
    config: dict[str, Any]
    messages: int = 0
    bytes: int = 0
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        state = {
            "messages": self.messages,
            "bytes": self.bytes,
            "first_seq": 1 if self.messages else 0,
            "last_seq": self.messages,
            "consumer_count": len(self.consumers),
        }
        return {"config": self.config, "state": state, "created": CREATED}


class _Error(Exception):
    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.body = {"code": code, "err_code": err_code, "description": description}


class MemoryServer:
    """Streams and consumers in dicts, answered as ``$JS.API`` would (see the module)."""

    def __init__(
        self, *, version: str = "2.12.0", api_level: int = 2, limits: dict[str, Any] | None = None
    ) -> None:
        self.streams: dict[str, _Stream] = {}
        self.limits = {"max_memory": -1, "max_storage": -1, "max_streams": -1} | (limits or {})
        self.api_level = api_level
        self.requests: list[str] = []  # every subject asked, in order
        self._server_info = {"version": version, "server_name": "memory", "server_id": "memory"}
        self.connected_url = None
        self.is_closed = False

    def client(self, *, timeout: float = 1.0) -> JetStreamClient:
        """A client whose connection is this server."""
        return JetStreamClient(cast(Any, self), timeout=timeout)

    def add(self, config: dict[str, Any], *consumers: dict[str, Any]) -> None:
        """A stream made out of band (by another tool), with ``consumers``."""
        self.streams[str(config["name"])] = _Stream(
            dict(config), consumers={str(c["name"]): dict(c) for c in consumers}
        )

    def hold(self, stream: str, messages: int, size: int = 0) -> None:
        """Make ``stream``'s state report ``messages`` (``size`` bytes)."""
        self.streams[stream].messages = messages
        self.streams[stream].bytes = size or 100 * messages

    # -- what nats-py's Client offers the transport ---------------------------------------
    async def close(self) -> None:
        self.is_closed = True

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> _Reply:
        self.requests.append(subject)
        body = json.loads(payload) if payload else {}
        op = subject.split(".API.", 1)[1]
        try:
            answer = self._answer(op.split("."), body)
        except _Error as err:
            answer = {"error": err.body}
        return _Reply(json.dumps(answer).encode())

    # -- the API --------------------------------------------------------------------------
    def _answer(self, op: list[str], body: dict[str, Any]) -> dict[str, Any]:
        match op:
            case ["INFO"]:
                return self._account()
            case ["STREAM", "CREATE", name]:
                return self._create_stream(name, body)
            case ["STREAM", "UPDATE", name]:
                self._stream(name).config = body
                return self._stream(name).info()
            case ["STREAM", "INFO", name]:
                return self._stream(name).info()
            case ["STREAM", "DELETE", name]:
                self._stream(name)
                del self.streams[name]
                return {"success": True}
            case ["STREAM", "LIST"]:
                infos = [self.streams[n].info() for n in sorted(self.streams)]
                return self._page("streams", infos, body, 256)
            case ["STREAM", "NAMES"]:
                return self._page("streams", sorted(self.streams), body, 1024)
            case ["CONSUMER", "CREATE", stream, name]:
                return self._create_consumer(stream, name, body)
            case ["CONSUMER", "INFO", stream, name]:
                return self._consumer_info(stream, name)
            case ["CONSUMER", "DELETE", stream, name]:
                self._consumer_info(stream, name)
                del self._stream(stream).consumers[name]
                return {"success": True}
            case ["CONSUMER", "LIST", stream]:
                found = self._stream(stream).consumers
                infos = [self._consumer_info(stream, n) for n in sorted(found)]
                return self._page("consumers", infos, body, 256)
            case ["CONSUMER", "NAMES", stream]:
                return self._page("consumers", sorted(self._stream(stream).consumers), body, 1024)
        raise _Error(400, 0, f"not answered by the in-memory fake: {'.'.join(op)}")

    def _account(self) -> dict[str, Any]:
        used = {"memory": 0, "file": 0}
        for stream in self.streams.values():
            storage = "memory" if stream.config.get("storage") == "memory" else "file"
            used[storage] += stream.bytes
        consumers = sum(len(s.consumers) for s in self.streams.values())
        return {
            "memory": used["memory"],
            "storage": used["file"],
            "streams": len(self.streams),
            "consumers": consumers,
            "limits": dict(self.limits),
            "api": {"level": self.api_level, "total": len(self.requests), "errors": 0},
        }

    def _stream(self, name: str) -> _Stream:
        if name not in self.streams:
            raise _Error(404, STREAM_NOT_FOUND, "stream not found")
        return self.streams[name]

    def _create_stream(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        if name in self.streams:
            if self.streams[name].config != config:
                raise _Error(400, STREAM_NAME_IN_USE, "stream name already in use")
            return self.streams[name].info()
        if 0 <= int(self.limits["max_streams"]) <= len(self.streams):
            raise _Error(400, MAXIMUM_STREAMS, "maximum number of streams reached")
        self.streams[name] = _Stream(config)
        return self.streams[name].info()

    def _create_consumer(self, stream: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumers = self._stream(stream).consumers
        action, config = body.get("action"), body["config"]
        if action == "create" and name in consumers and consumers[name] != config:
            raise _Error(400, CONSUMER_EXISTS, "consumer already exists")
        if action == "update" and name not in consumers:
            raise _Error(404, CONSUMER_DOES_NOT_EXIST, "consumer does not exist")
        consumers[name] = config
        return self._consumer_info(stream, name)

    def _consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        consumers = self._stream(stream).consumers
        if name not in consumers:
            raise _Error(404, CONSUMER_NOT_FOUND, "consumer not found")
        return {"stream_name": stream, "name": name, "config": consumers[name], "created": CREATED}

    @staticmethod
    def _page(key: str, items: list[Any], body: dict[str, Any], limit: int) -> dict[str, Any]:
        offset = int(body.get("offset") or 0)
        page = items[offset : offset + limit]
        return {"total": len(items), "offset": offset, "limit": limit, key: page}
