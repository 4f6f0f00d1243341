"""The JetStream JSON API over one nats-py connection, with plain dicts and typed errors.

Every request goes to ``$JS.API.<op>`` (``$JS.<domain>.API.<op>`` with a domain). A JSON
error reply becomes :class:`~reconciler.errors.ServerError` (``NotFound`` for 10059 and
10014), a missing answer :class:`~reconciler.errors.RequestTimeout`, a permissions
violation reported by the server :class:`~reconciler.errors.PermissionDenied`. Lists are
always paged. :func:`open_client` opens a client for :class:`ConnectionOptions`, starting
the embedded server when nothing is configured.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson
from nats.aio.client import Client as NATS
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from reconciler.errors import ConnectError, NotFound, PermissionDenied, RequestTimeout, ServerError
from reconciler.identity import kv_subject, stream_of
from reconciler.jetstream.connection import (
    ConnectionOptions,
    close_quietly,
    connect,
    redact_url,
)
from reconciler.jetstream.embedded import EmbeddedServer
from reconciler.model.state import LiveState, ServerInfo, StreamState

NOT_FOUND_CODES = frozenset({10059, 10014})
NO_MESSAGE = 10037  # STREAM.MSG.GET: no message found
WRONG_LAST_SEQUENCE = 10071  # publish with an expected last (subject) sequence that differs
LIST_CONCURRENCY = 32
LIST_ATTEMPTS = 3  # reads of a paged list that changed while it was read
#: Resources (streams listed, and the consumers they count) from which a read of the
#: live state shares equal values (:class:`SharedValues`). Below, the walk costs more
#: than it saves: a sixth of the read at 12,000 resources (6,000 consumer and stream
#: configs held twice over would be a few MiB).
SHARE_FROM = 20_000
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "?([^"\s]+)"?')

Notice = Callable[[str], None]


def _ignore(message: str) -> None:
    return None


def _as_is(value: Any) -> Any:
    """A decoded value kept as it is (what a read below ``SHARE_FROM`` does)."""
    return value


class _Waiter:
    """A request in flight, for :meth:`JetStreamClient.note_error` to fail: ``denied``
    says what the server refused, and ``task`` is cancelled to stop the wait."""

    __slots__ = ("denied", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.denied: str | None = None


class SharedValues:
    """Makes equal strings and integers in freshly decoded configs one object each.

    100,000 consumer configs repeat the same few values ("explicit", "all", 30000000000,
    their owner's marker): the JSON decoder makes a new object for every one. Sharing
    them takes a third off the memory of a large live state and is no slower than
    keeping the copies (measured with 200,000 consumers: 333 -> 212 MiB).

    The values are replaced in place: a dict or list given here must be one the decoder
    just made and nothing else holds (rebuilding every dict instead took 40% longer at
    21,000 consumers). Dict keys are left alone: orjson already shares short keys.
    """

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict:
            return self._dict(value)
        if kind is list:
            return self._list(value)
        if kind is str or kind is int:
            return self._seen.setdefault(value, value)
        return value

    # The two walks below are __call__ inlined, one call per dict or list rather than
    # one per value: half the time of the plain recursion (a warm re-plan at 21,000).

    def _dict(self, value: dict[str, Any]) -> dict[str, Any]:
        seen = self._seen
        for name, item in value.items():
            kind = type(item)
            if kind is str or kind is int:
                value[name] = seen.setdefault(item, item)
            elif kind is dict:
                self._dict(item)
            elif kind is list:
                self._list(item)
        return value

    def _list(self, value: list[Any]) -> list[Any]:
        seen = self._seen
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str or kind is int:
                value[index] = seen.setdefault(item, item)
            elif kind is dict:
                self._dict(item)
            elif kind is list:
                self._list(item)
        return value


@dataclass(frozen=True)
class KvEntry:
    """The last message of a key in a KeyValue bucket."""

    key: str
    value: bytes
    revision: int
    operation: str = "PUT"  # PUT, DEL or PURGE
    headers: Mapping[str, str] = field(default_factory=dict)


def _parse_headers(encoded: str | None) -> dict[str, str]:
    if not encoded:
        return {}
    lines = base64.b64decode(encoded).decode(errors="replace").split("\r\n")[1:]
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {name.strip(): value.strip() for name, value in pairs}


class JetStreamClient:
    """Async client of the JetStream API; configs in and out are plain dicts."""

    def __init__(
        self,
        nc: NATS,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
        embedded: bool = False,
    ) -> None:
        self.nc = nc
        self.domain = domain
        self.api_prefix = (api_prefix or (f"$JS.{domain}.API" if domain else "$JS.API")).rstrip(".")
        self.timeout = timeout
        self.embedded = embedded
        self._waiting: dict[str, set[_Waiter]] = {}
        self._server_info: ServerInfo | None = None
        self._asking: asyncio.Future[ServerInfo] | None = None  # $JS.API.INFO in flight

    @classmethod
    async def connect(
        cls, options: ConnectionOptions, *, embedded: bool = False
    ) -> JetStreamClient:
        """Connect with ``options`` (contexts already merged) and wrap the connection."""
        holder: list[JetStreamClient] = []

        async def on_error(err: Exception) -> None:
            if holder:
                holder[0].note_error(err)

        nc = await connect(options, error_cb=on_error)
        client = cls(
            nc,
            domain=options.domain,
            api_prefix=options.api_prefix,
            timeout=options.timeout,
            embedded=embedded,
        )
        holder.append(client)
        return client

    async def close(self) -> None:
        await close_quietly(self.nc)

    # -- errors reported out of band -------------------------------------------------
    def note_error(self, err: Exception) -> None:
        """nats-py's error callback: fail the requests a permissions violation hits."""
        match = _VIOLATION.search(str(err).lower())
        if match is None:
            return
        kind, subject = match.groups()
        targets = (
            self._waiting.values()
            if kind == "subscription"
            else [self._waiting.get(subject, set())]
        )
        for waiters in targets:
            for waiter in waiters:
                if waiter.denied is None:
                    waiter.denied = f"{kind} to {subject}"
                    waiter.task.cancel()

    # -- requests -----------------------------------------------------------------------
    def subject(self, op: str) -> str:
        return f"{self.api_prefix}.{op}"

    async def request(
        self, op: str, body: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send ``body`` to ``$JS.API.<op>``; the reply dict, or a typed error."""
        subject = self.subject(op)
        payload = b"" if body is None else _dumps(body)
        data = await self.raw_request(subject, payload, timeout=timeout)
        return self._decode(subject, data)

    async def raw_request(
        self,
        subject: str,
        payload: bytes,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """One request on any subject, with JetStream-aware error mapping; the reply body."""
        wait = self.timeout if timeout is None else timeout
        key = subject.lower()
        task = asyncio.current_task()
        assert task is not None  # always awaited in a task
        waiter = _Waiter(task)
        self._waiting.setdefault(key, set()).add(waiter)
        try:
            msg = await self.nc.request(subject, payload, timeout=wait, headers=headers)
            return bytes(msg.data)
        except asyncio.CancelledError:
            # note_error cancels the request a permissions violation hit (no task of its
            # own per request: at 100,000 requests that was a third of an apply's time).
            if waiter.denied is None or task.uncancel() > 0:
                raise  # cancelled by the caller
            raise PermissionDenied(f"permission denied: the user may not {waiter.denied}") from None
        except NoRespondersError:
            raise ConnectError(self._no_responders(subject)) from None
        except (TimeoutError, NatsTimeout):
            raise RequestTimeout(f"no answer to {subject} within {wait:g}s") from None
        except ConnectionClosedError:
            raise ConnectError(f"connection closed while requesting {subject}") from None
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[key]

    def _no_responders(self, subject: str) -> str:
        where = f" in domain {self.domain!r}" if self.domain else ""
        return (
            f"no JetStream answers on {subject}: JetStream is not enabled{where} "
            "for this account, or the user may not use it"
        )

    @staticmethod
    def _decode(subject: str, data: bytes) -> dict[str, Any]:
        try:
            reply: Any = _loads(data) if data else {}
        except ValueError:
            raise ServerError(0, 0, f"invalid JSON reply on {subject}", subject=subject) from None
        if not isinstance(reply, dict):
            raise ServerError(0, 0, f"unexpected reply on {subject}", subject=subject)
        error = reply.get("error")
        if error:
            code = int(error.get("code", 0))
            err_code = int(error.get("err_code", 0))
            description = str(error.get("description", "unknown error"))
            kind = NotFound if err_code in NOT_FOUND_CODES else ServerError
            raise kind(code, err_code, description, subject=subject)
        return reply

    # -- server facts -------------------------------------------------------------------
    async def server_info(self) -> ServerInfo:
        """Version and API level of the server (``$JS.API.INFO`` read once: callers
        asking while it is in flight share its answer; a failed read is asked again)."""
        if self._server_info is not None:
            return self._server_info
        if self._asking is None or self._asking.done():
            self._asking = asyncio.ensure_future(self._read_server_info())
        asking = self._asking
        try:
            # shielded: one caller cancelled does not cancel the others' answer
            self._server_info = await asyncio.shield(asking)
        finally:
            if asking.done() and (asking.cancelled() or asking.exception() is not None):
                self._asking = None
        return self._server_info

    async def _read_server_info(self) -> ServerInfo:
        account = await self.request("INFO")
        info: dict[str, Any] = dict(getattr(self.nc, "_server_info", None) or {})
        api = account.get("api") or {}
        advertised = {str(url) for url in info.get("connect_urls") or ()}
        return ServerInfo(
            version=str(info.get("version", "0.0.0")),
            api_level=int(api.get("level", 0) or 0),
            clustered=bool(info.get("cluster")),
            cluster_size=len(advertised) if info.get("cluster") and advertised else None,
            domain=account.get("domain") or info.get("domain") or self.domain,
            embedded=self.embedded,
            address=self._address(),
        )

    def _address(self) -> str | None:
        """The URL the client is connected to, credentials removed."""
        url = getattr(self.nc, "connected_url", None)
        if url is None or not getattr(url, "hostname", None):
            return None
        return redact_url(f"{url.scheme}://{url.hostname}:{url.port}")

    # -- paged lists ----------------------------------------------------------------------
    async def _paged(
        self,
        op: str,
        key: str,
        ident: Callable[[Any], str],
        keep: Callable[[Any], Any] = lambda item: item,
        on_page: Callable[[list[Any]], None] | None = None,
    ) -> list[Any]:
        """Every item of a paged list, each once, read while the server may change.

        Pages are read by offset, so a create or delete between two pages shifts the
        rest: an item can come twice or be skipped. Items are kept once (by ``ident``);
        when the reported total changed while reading, or fewer distinct items came than
        the total says, the list is read again (at most ``LIST_ATTEMPTS`` times). What is
        still missing then was created or deleted during the read; the planner looks again
        for a declared resource it did not see (:meth:`confirm`) before planning a create.
        ``keep``: the part of each item to return (the rest is dropped as its page is read).
        ``on_page``: called with each page's items as they come, before the next request.
        """
        seen: dict[str, Any] = {}
        for _ in range(LIST_ATTEMPTS):
            offset, totals = 0, set()
            while True:
                reply = await self.request(op, {"offset": offset})
                page = reply.get(key) or []
                totals.add(int(reply.get("total", 0)))
                if on_page is not None:
                    on_page(page)
                for item in page:
                    seen[ident(item)] = keep(item)
                offset += len(page)
                if not page or offset >= int(reply.get("total", 0)):
                    break
            if len(totals) == 1 and len(seen) >= totals.pop():
                break
        return list(seen.values())

    async def stream_names(self) -> list[str]:
        return [str(n) for n in await self._paged("STREAM.NAMES", "streams", str)]

    async def list_streams(
        self, on_page: Callable[[list[Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        """Every stream's info (config, state, ...), 256 a page; ``on_page``: see
        :meth:`_paged`."""
        return await self._paged(
            "STREAM.LIST", "streams", lambda i: str(i["config"]["name"]), on_page=on_page
        )

    async def consumer_names(self, stream: str) -> list[str]:
        names = await self._paged(f"CONSUMER.NAMES.{stream}", "consumers", str)
        return [str(n) for n in names]

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        """Every consumer info of ``stream``, 256 a page."""
        return await self._paged(f"CONSUMER.LIST.{stream}", "consumers", lambda i: str(i["name"]))

    async def consumer_configs(
        self, stream: str, shared: Callable[[Any], Any] = _as_is
    ) -> list[tuple[str, dict[str, Any]]]:
        """Every consumer of ``stream`` as (name, config), the config's values passed
        through ``shared`` (a :class:`SharedValues`, or kept as they are). Only the
        configs are kept: at 100,000 consumers the rest of their infos (state, cluster,
        times) held until the last page came would more than double the memory a plan
        needs."""
        return await self._paged(
            f"CONSUMER.LIST.{stream}",
            "consumers",
            lambda i: str(i["name"]),
            keep=lambda i: (shared(str(i["name"])), shared(i["config"])),
        )

    async def fetch_live(self) -> LiveState:
        """Everything on the server: streams, their state, consumers, configs verbatim.

        A stream's consumers are listed as soon as the page of the stream list naming it
        arrives, while the rest of that list is still read: over a slow link the
        consumer lists no longer wait for the stream list's last page (nor the stream
        list for the server's INFO). Equal values are shared once the resources counted
        so far reach ``SHARE_FROM``."""
        asking = asyncio.ensure_future(self.server_info())
        shared = SharedValues()
        counted = 0  # streams listed and the consumers they count, so far
        limit = asyncio.Semaphore(LIST_CONCURRENCY)
        reading: dict[str, asyncio.Future[list[tuple[str, dict[str, Any]]]]] = {}
        state: dict[str, StreamState] = {}

        async def consumers_of(
            stream: str, share: Callable[[Any], Any]
        ) -> list[tuple[str, dict[str, Any]]]:
            async with limit:
                try:
                    return await self.consumer_configs(stream, share)
                except NotFound:
                    return []  # deleted while we read: its consumers went with it

        def sharing() -> Callable[[Any], Any]:
            return shared if counted >= SHARE_FROM else _as_is

        def read(page: list[Any]) -> None:
            # A stream reporting no consumers needs no CONSUMER.LIST round trip.
            nonlocal counted
            for info in page:
                name = str(info["config"]["name"])
                found = StreamState.from_info(info)
                if name not in state:
                    counted += 1 + found.consumer_count
                state[name] = found
                if name not in reading and found.consumer_count > 0:
                    reading[name] = asyncio.ensure_future(consumers_of(name, sharing()))

        try:
            # every page goes through read(), pages read again too: ``state`` ends with
            # an entry per stream kept, each from the last page naming it (as kept)
            infos = await self.list_streams(read)
            listed = [name for name in state if name in reading]
            pages = await asyncio.gather(*(reading[name] for name in listed))
            server = await asking
        except BaseException:
            others: list[asyncio.Future[Any]] = [asking, *reading.values()]
            for task in others:  # one read failed: the others stop too
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            raise
        share = sharing()
        streams = {share(str(i["config"]["name"])): share(i["config"]) for i in infos}
        consumers = {
            (stream, name): config
            for stream, page in zip(listed, pages, strict=True)
            for name, config in page
        }
        return LiveState(
            server=server,
            streams=streams,
            stream_state=state,
            consumers=consumers,
            peers=frozenset(name for info in infos for name in _peers(info)),
        )

    async def confirm(
        self, live: LiveState, streams: Iterable[str], consumers: Iterable[tuple[str, str]]
    ) -> LiveState:
        """``live`` plus the declared streams and consumers that a list did not show but
        exist when looked for again (created while the list was read): planned as what
        they are, not as creates."""
        missing = sorted({name for name in streams if name not in live.streams})
        unseen = {key for key in consumers if key not in live.consumers}
        if not missing and not unseen:
            return live  # the usual case: no copy of 100,000 entries to find nothing
        if len(missing) > 1:
            # One paged STREAM.NAMES (1,024 a page) says which of them exist now; an
            # apply from nothing would otherwise ask for each missing stream's INFO.
            # A user not allowed to list names still gets the INFO of each.
            with contextlib.suppress(PermissionDenied):
                present = set(await self.stream_names())
                missing = [name for name in missing if name in present]
        found_streams = dict(live.streams)
        found_state = dict(live.stream_state)
        found_consumers = dict(live.consumers)
        limit = asyncio.Semaphore(LIST_CONCURRENCY)

        async def stream(
            name: str,
        ) -> tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]] | None:
            async with limit:
                try:
                    info = await self.stream_info(name)
                    return name, info, await self.consumer_configs(name)
                except NotFound:
                    return None

        for found in await asyncio.gather(*(stream(name) for name in missing)):
            if found is None:
                continue
            name, info, listed = found
            found_streams[name] = info["config"]
            found_state[name] = StreamState.from_info(info)
            for consumer_name, config in listed:
                found_consumers[(name, consumer_name)] = config

        async def consumer(stream: str, name: str) -> tuple[tuple[str, str], Any] | None:
            async with limit:
                try:
                    return (stream, name), (await self.consumer_info(stream, name))["config"]
                except NotFound:
                    return None

        wanted = sorted(
            (stream, name)
            for stream, name in unseen
            if stream in found_streams and (stream, name) not in found_consumers
        )
        for found_consumer in await asyncio.gather(*(consumer(s, n) for s, n in wanted)):
            if found_consumer is not None:
                found_consumers[found_consumer[0]] = found_consumer[1]
        unchanged = len(found_streams) == len(live.streams)
        if unchanged and len(found_consumers) == len(live.consumers):
            return live
        return replace(
            live, streams=found_streams, stream_state=found_state, consumers=found_consumers
        )

    # -- streams --------------------------------------------------------------------------
    async def stream_info(self, name: str) -> dict[str, Any]:
        return await self.request(f"STREAM.INFO.{name}")

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self.request(f"STREAM.CREATE.{config['name']}", config)

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        """Replace the whole config (fields left out go back to their defaults)."""
        return await self.request(f"STREAM.UPDATE.{config['name']}", config)

    async def delete_stream(self, name: str) -> None:
        await self.request(f"STREAM.DELETE.{name}")

    # -- consumers ------------------------------------------------------------------------
    async def consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return await self.request(f"CONSUMER.INFO.{stream}.{name}")

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
        message["headers"] = _parse_headers(message.get("hdrs"))
        return message

    async def publish(
        self, subject: str, data: bytes, *, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Publish to a stream subject and wait for the PubAck (``{stream, seq}``)."""
        reply = await self.raw_request(subject, data, headers=headers)
        return self._decode(subject, reply)

    # -- KeyValue primitives (the apply lock) ----------------------------------------------
    async def kv_entry(self, bucket: str, key: str) -> KvEntry | None:
        """The last message of ``key``, delete markers included; None if never written."""
        body = {"last_by_subj": kv_subject(bucket, key)}
        try:
            reply = await self.request(f"STREAM.MSG.GET.{stream_of('KeyValue', bucket)}", body)
        except NotFound:
            raise
        except ServerError as err:
            if err.err_code == NO_MESSAGE:
                return None
            raise
        message = reply["message"]
        headers = _parse_headers(message.get("hdrs"))
        return KvEntry(
            key=key,
            value=base64.b64decode(message.get("data") or ""),
            revision=int(message["seq"]),
            operation=headers.get("KV-Operation", "PUT"),
            headers=headers,
        )

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The current value of ``key``; None when missing or deleted."""
        entry = await self.kv_entry(bucket, key)
        return entry if entry is not None and entry.operation == "PUT" else None

    async def _kv_put(
        self,
        bucket: str,
        key: str,
        value: bytes,
        *,
        expect: int | None,
        operation: str = "",
        extra: Mapping[str, str] | None = None,
    ) -> int:
        headers = dict(extra or {})
        if expect is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expect)
        if operation:
            headers["KV-Operation"] = operation
        ack = await self.publish(kv_subject(bucket, key), value, headers=headers or None)
        return int(ack["seq"])

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, headers: Mapping[str, str] | None = None
    ) -> int:
        """Write ``key`` only if it has no value; the new revision.

        Fails with ``ServerError`` err_code 10071 when the key holds a value.
        """
        try:
            return await self._kv_put(bucket, key, value, expect=0, extra=headers)
        except ServerError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            entry = await self.kv_entry(bucket, key)
            if entry is None or entry.operation == "PUT":
                raise
            return await self._kv_put(bucket, key, value, expect=entry.revision, extra=headers)

    async def kv_update(
        self,
        bucket: str,
        key: str,
        value: bytes,
        revision: int,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Write ``key`` only if its last revision is ``revision`` (else err_code 10071)."""
        return await self._kv_put(bucket, key, value, expect=revision, extra=headers)

    async def kv_keys(self, bucket: str) -> list[str]:
        """Every key of ``bucket`` with a message (delete markers included), read from
        the stream's subject counts, page by page."""
        prefix = kv_subject(bucket, "")
        keys: list[str] = []
        offset = 0
        while True:
            body = {"subjects_filter": kv_subject(bucket), "offset": offset}
            info = await self.request(f"STREAM.INFO.{stream_of('KeyValue', bucket)}", body)
            subjects = (info.get("state") or {}).get("subjects") or {}
            keys.extend(subject.removeprefix(prefix) for subject in subjects)
            total = int(info.get("total") or 0)
            offset += len(subjects)
            if not subjects or offset >= total:
                return sorted(set(keys))

    async def kv_delete(self, bucket: str, key: str, *, revision: int | None = None) -> None:
        """Put a delete marker on ``key`` (only at ``revision`` when given)."""
        await self._kv_put(bucket, key, b"", expect=revision, operation="DEL")


@asynccontextmanager
async def open_client(
    options: ConnectionOptions, *, on_notice: Notice = _ignore
) -> AsyncIterator[JetStreamClient]:
    """A connected client; with no server configured, on the embedded server.

    The embedded server is started (or a running one for the same store reused) and is
    stopped at exit when no other run uses it; ``on_notice`` is told which server is used.
    """
    options = options.with_context()
    embedded: EmbeddedServer | None = None
    if not options.is_configured:
        embedded = EmbeddedServer(options.store)
        url = await asyncio.to_thread(embedded.acquire)
        options = replace(options, servers=url)
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
        finally:
            await client.close()
    finally:
        if embedded is not None:
            embedded.release()


def _dumps(body: Any) -> bytes:
    """A request body as JSON: orjson, or the standard library for what orjson refuses
    (an integer beyond 64 bits, say: the server then answers with its own error)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


def _loads(data: bytes) -> Any:
    """A JSON reply, decoded by orjson (about twice as fast on big list pages). The
    server's integers are Go int64/uint64 values, which orjson keeps exact; anything
    orjson refuses (a non-finite number) goes to the standard library's decoder."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _peers(info: Mapping[str, Any]) -> Iterator[str]:
    """The servers a StreamInfo's ``cluster`` names: its leader and its replicas."""
    cluster = info.get("cluster")
    if not isinstance(cluster, dict):
        return
    if isinstance(cluster.get("leader"), str) and cluster["leader"]:
        yield cluster["leader"]
    for replica in cluster.get("replicas") or ():
        if isinstance(replica, dict) and isinstance(replica.get("name"), str):
            yield replica["name"]
