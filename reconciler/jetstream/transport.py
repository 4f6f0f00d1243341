"""Requests and replies over one nats-py connection, with plain dicts and typed errors.

Every request goes to ``$JS.API.<op>`` (``$JS.<domain>.API.<op>`` with a domain). A JSON
error reply becomes :class:`~reconciler.errors.ServerError` (``NotFound`` for 10059 and
10014), a missing answer :class:`~reconciler.errors.RequestTimeout`, a permissions
violation reported by the server :class:`~reconciler.errors.PermissionDenied`.
:class:`Transport` also holds the server's facts (``$JS.API.INFO``, asked once) and the
paging primitive every list goes through (:meth:`Transport.paged`), and
:meth:`Transport.replies`, a request answered by many messages (a batched direct get),
each handed over as the server sent it. The calls built on
it: :mod:`.live` (the live read), :mod:`.kv` (KeyValue), :mod:`.api` (the rest, and
:class:`~reconciler.jetstream.api.JetStreamClient` with them all).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Self

import orjson
from nats.aio.client import Client as NATS
from nats.errors import ConnectionClosedError, MaxPayloadError, NoRespondersError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout

from reconciler.errors import (
    ConnectError,
    NoResponders,
    NotFound,
    PermissionDenied,
    ReconcileError,
    RequestTimeout,
    ServerError,
)
from reconciler.jetstream.connection import (
    ConnectionOptions,
    close_quietly,
    connect,
    server_address,
)
from reconciler.model.state import ServerInfo

NOT_FOUND_CODES = frozenset({10059, 10014})
NO_MESSAGE = 10037  # STREAM.MSG.GET: no message found
WRONG_LAST_SEQUENCE = 10071  # publish with an expected last (subject) sequence that differs
LIST_ATTEMPTS = 3  # reads of a paged list that changed while it was read
#: The most items a paged list may say it holds: ten times the largest account this tool
#: is measured at (101,000 resources). A reply saying more is no NATS server's (on an
#: account without JetStream any client may answer): its pages would never end.
MAX_LISTED = 1_000_000
#: How far a paged list's total may grow past the total its first page said during one
#: read: this many items, or a tenth of that total when more. A real account grows by
#: what is created meanwhile (a burst past it is read again, from its new total); every
#: read growing more is no server's (a forger raising the total page after page, fresh
#: items on each).
LIST_GROWTH = 1_000
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "?([^"\s]+)"?')


class _Waiter:
    """A request in flight, for :meth:`Transport.note_error` to fail: ``denied``
    says what the server refused, and ``task`` is cancelled to stop the wait."""

    __slots__ = ("closed", "denied", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.denied: str | None = None
        self.closed = False  # the connection was lost while it waited


def parse_headers(encoded: str | None) -> dict[str, str]:
    """A stored message's headers (STREAM.MSG.GET's ``hdrs``, base64) as a dict."""
    if not encoded:
        return {}
    return header_lines(base64.b64decode(encoded).decode(errors="replace").split("\r\n")[1:])


def header_lines(lines: Iterable[str]) -> dict[str, str]:
    """A header block's lines, its status line left off, as a dict (a name said twice:
    the last). The one reading of a message's headers, read whole or in a batch."""
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {name.strip(): value.strip() for name, value in pairs}


class Transport:
    """One connection's requests, errors, server facts and paged lists."""

    def __init__(
        self,
        nc: NATS,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
        embedded: bool = False,
        options: ConnectionOptions | None = None,
    ) -> None:
        self.nc = nc
        #: The options connected with (the monitoring endpoint, the system account's user)
        self.options = options
        self.domain = domain
        self.api_prefix = (api_prefix or (f"$JS.{domain}.API" if domain else "$JS.API")).rstrip(".")
        self.timeout = timeout
        self.embedded = embedded
        self._waiting: dict[str, set[_Waiter]] = {}
        self._server_info: ServerInfo | None = None
        self._asking: asyncio.Future[ServerInfo] | None = None  # $JS.API.INFO in flight
        #: Set once the connection is lost (no reconnects: a long-lived caller, the agent,
        #: waits on it and opens a new client).
        self.lost = asyncio.Event()
        #: Subscriptions the server refused (permissions violations), lower-cased subjects.
        self.denied_subscriptions: set[str] = set()

    @classmethod
    async def connect(cls, options: ConnectionOptions, *, embedded: bool = False) -> Self:
        """Connect with ``options`` (contexts already merged) and wrap the connection."""
        holder: list[Self] = []

        async def on_error(err: Exception) -> None:
            if holder:
                holder[0].note_error(err)

        def on_closed() -> None:
            if holder:
                holder[0].note_closed()

        nc = await connect(options, error_cb=on_error, closed_cb=on_closed)
        client = cls(
            nc,
            domain=options.domain,
            api_prefix=options.api_prefix,
            timeout=options.timeout,
            embedded=embedded,
            options=options,
        )
        holder.append(client)
        if nc.is_closed:  # closed before the client was there to hear it (an INFO refused
            client.note_closed()  # right after the greeting, a server gone at once)
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
        if kind == "subscription":
            self.denied_subscriptions.add(subject)
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

    def note_closed(self) -> None:
        """The connection is lost: fail every request in flight now. nats-py leaves them
        waiting for their whole timeout (a snapshot's is ten minutes)."""
        self.lost.set()
        for waiters in self._waiting.values():
            for waiter in waiters:
                if waiter.denied is None and not waiter.closed:
                    waiter.closed = True
                    waiter.task.cancel()

    def closed(self, what: str) -> ConnectError:
        """The error of the connection found closed (``what`` was being done): with why,
        when this side cut it (a line or a message over the bounds, naming the server:
        :func:`~reconciler.jetstream.connection.overrun`)."""
        cut = getattr(self.nc, "cut", None)
        return ConnectError(f"{what}: {cut}" if cut else what)

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
        with self._requesting(subject, payload):
            try:
                msg = await self.nc.request(subject, payload, timeout=wait, headers=headers)
                return bytes(msg.data)
            except NoRespondersError:
                raise NoResponders(self._no_responders(subject)) from None
            except (TimeoutError, NatsTimeout):
                raise RequestTimeout(f"no answer to {subject} within {wait:g}s") from None

    @contextlib.contextmanager
    def _requesting(self, subject: str, payload: bytes) -> Iterator[None]:
        """A request to ``subject`` waiting (:meth:`raw_request`, :meth:`replies`): what
        ends it said as this tool says it, the one rule of both. A cancel by
        :meth:`note_error` (a permissions violation) or :meth:`note_closed` (the
        connection lost) is that error (:meth:`_cut_short`), one by the caller goes on;
        the connection closed, or ``payload`` over the server's max_payload, an error
        naming the subject."""
        key = subject.lower()
        waiter = self._waiter(key)
        try:
            yield
        except asyncio.CancelledError:
            failed = self._cut_short(waiter, subject)
            if failed is None:
                raise  # cancelled by the caller
            raise failed from None
        except ConnectionClosedError:
            raise self.closed(f"connection closed while requesting {subject}") from None
        except MaxPayloadError:
            raise self._too_large(subject, payload) from None
        finally:
            self._done_waiting(key, waiter)

    def _too_large(self, subject: str, payload: bytes) -> ServerError:
        limit = getattr(self.nc, "max_payload", None)
        return ServerError(
            0,
            0,
            f"a message of {len(payload)} bytes is over the server's max_payload "
            f"({limit} bytes): nothing was sent",
            subject=subject,
        )

    def _waiter(self, key: str) -> _Waiter:
        """The current task, waiting on the subject ``key`` (lower-cased) until
        :meth:`_done_waiting`: :meth:`note_error` and :meth:`note_closed` fail it."""
        task = asyncio.current_task()
        assert task is not None  # always awaited in a task
        waiter = _Waiter(task)
        self._waiting.setdefault(key, set()).add(waiter)
        return waiter

    def _done_waiting(self, key: str, waiter: _Waiter) -> None:
        waiters = self._waiting.get(key)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiting[key]

    def _cut_short(self, waiter: _Waiter, subject: str) -> ReconcileError | None:
        """Why a request to ``subject`` was cancelled while it waited: note_error cancels
        the request a permissions violation hit, note_closed every request when the
        connection is lost (no task of its own per request: at 100,000 requests that was
        a third of an apply's time). None: its caller cancelled it."""
        if (waiter.denied is None and not waiter.closed) or waiter.task.uncancel() > 0:
            return None
        if waiter.denied is None:
            return self.closed(f"connection closed while requesting {subject}")
        # the server's report lowercases the subject; subjects are case-sensitive
        denied = f"publish to {subject}" if subject.lower() in waiter.denied else waiter.denied
        message = f"permission denied: the user may not {denied}"
        return PermissionDenied(message, subject=subject)

    async def replies(
        self, subject: str, payload: bytes, on_reply: Callable[[bytes, bytes], bool]
    ) -> None:
        """One request whose answer is many messages (a batched direct get): ``payload``
        sent to ``subject`` with a reply inbox of its own, each reply handed to
        ``on_reply`` as the server sent it (its header block and body, never parsed by
        nats-py: :attr:`connection._Client.raw_replies`) until it returns True. Errors as
        :meth:`raw_request`'s: ``RequestTimeout`` when no reply comes within the timeout
        of the one before (or of the request), ``PermissionDenied``, ``ConnectError``
        when the connection is lost; what ``on_reply`` raises ends the wait and is raised.
        Only on this tool's connections (:attr:`takes_raw_replies`)."""
        nc: Any = self.nc
        handlers: dict[int, Callable[[bytes, bytes], None]] = nc.raw_replies
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        heard = [loop.time()]

        def deliver(headers: bytes, data: bytes) -> None:
            if done.done():
                return
            heard[0] = loop.time()
            try:
                finished = on_reply(headers, data)
            except Exception as err:  # handed to the wait below, raised there
                done.set_exception(err)
                return
            if finished:
                done.set_result(None)

        sub = None
        try:
            with self._requesting(subject, payload):
                sub = await nc.subscribe(nc.new_inbox())
                handlers[sub._id] = deliver
                await nc.publish(subject, payload, reply=sub.subject)
                while not done.done():
                    left = heard[0] + self.timeout - loop.time()
                    if left <= 0:
                        raise RequestTimeout(f"no answer to {subject} within {self.timeout:g}s")
                    await asyncio.wait({done}, timeout=left)
                done.result()
        finally:
            if sub is not None:
                handlers.pop(sub._id, None)
                with contextlib.suppress(NatsError, OSError):
                    await sub.unsubscribe()

    @property
    def takes_raw_replies(self) -> bool:
        """Whether :meth:`replies` can be used: the connection is this tool's
        (``connection._Client``), not a stand-in."""
        return isinstance(getattr(self.nc, "raw_replies", None), dict)

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
            fields = error if isinstance(error, dict) else {"code": None}  # an error as text
            code, err_code = fields.get("code", 0), fields.get("err_code", 0)
            if type(code) is not int or type(err_code) is not int:  # no server's error
                raise ServerError(0, 0, f"unexpected reply on {subject}", subject=subject)
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
            # its outcome is taken even when every caller was cancelled meanwhile (a
            # failed read beside it stopped the others): never "Task exception was never
            # retrieved" on the user's terminal when it fails later
            self._asking.add_done_callback(settled)
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
            clustered=clustered(info),
            cluster_size=len(advertised) if info.get("cluster") and advertised else None,
            domain=account.get("domain") or info.get("domain") or self.domain,
            embedded=self.embedded,
            address=self._address(),
            max_payload=_positive(info.get("max_payload")),
        )

    def _address(self) -> str | None:
        """The URL the client is connected to, credentials removed."""
        return server_address(self.nc)

    # -- paged lists ----------------------------------------------------------------------
    async def paged(
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
        for a declared resource it did not see (``LiveRead.confirm``) before planning a
        create.
        ``keep``: the part of each item to return (the rest is dropped as its page is read).
        ``on_page``: called with each page's items as they come, before the next request.
        A reply no server sends never keeps it reading: a total over :data:`MAX_LISTED`
        is refused, a total grown past its read's first page's by more than
        :data:`LIST_GROWTH` (or a tenth) ends that read (read again: refused in the
        last), and a page that brings nothing this read had not brought yet ends the
        read (a forged page given again and again).
        """
        seen: dict[str, Any] = {}
        for attempt in range(1, LIST_ATTEMPTS + 1):
            offset, totals = 0, set()
            this_read: set[str] = set()
            first: int | None = None
            while True:
                reply = await self.request(op, {"offset": offset})
                page = reply.get(key) or []
                total = int(reply.get("total", 0))
                first = total if first is None else first
                totals.add(total)
                if not self._total_holds(op, first, total, last=attempt == LIST_ATTEMPTS):
                    break  # grown past the bound: read again, from its new total
                if on_page is not None:
                    on_page(page)
                known = len(this_read)
                for item in page:
                    name = ident(item)
                    this_read.add(name)
                    seen[name] = keep(item)
                offset += len(page)
                if len(this_read) == known or offset >= total:  # (an empty page too)
                    break
            if len(totals) == 1 and len(seen) >= totals.pop():
                break
        return list(seen.values())

    def _total_holds(self, op: str, first: int, total: int, *, last: bool) -> bool:
        """Whether a paged list's ``total`` may be read on: refused when no server says
        it (over :data:`MAX_LISTED`); False when grown past ``first`` (the first page's
        of this read) by more than a real account grows while it is read
        (:data:`LIST_GROWTH`, or a tenth of ``first``): a burst of creates, read again;
        refused in the ``last`` read (a forger raising it page after page)."""
        if total > MAX_LISTED:
            raise ServerError(
                0, 0, f"unexpected reply on {self.subject(op)}: over {MAX_LISTED:,} items"
            )
        if total <= first + max(LIST_GROWTH, first // 10):
            return True
        if not last:
            return False
        raise ServerError(
            0,
            0,
            f"unexpected reply on {self.subject(op)}: the list grew from {first:,} to "
            f"{total:,} items while it was read",
        )

    async def subscribe(self, subject: str, on_message: Callable[[str, bytes], None]) -> Any:
        """A core NATS subscription (never JetStream's): ``on_message(subject, data)`` for
        each message, on the event loop. The server is asked at once (a flush), so a
        refusal is in :attr:`denied_subscriptions` when this returns (or soon after).
        Returns the subscription (``await sub.unsubscribe()``)."""

        async def deliver(msg: Any) -> None:
            on_message(str(msg.subject), bytes(msg.data))

        try:
            sub = await self.nc.subscribe(subject, cb=deliver)
            await self.nc.flush(timeout=max(int(self.timeout), 1))
        except (ConnectionClosedError, NatsTimeout, TimeoutError):
            raise self.closed(f"connection lost while subscribing to {subject}") from None
        return sub

    async def answers(self) -> bool:
        """Whether the server still answers on this connection: its PONG to a PING within
        the request timeout (whole seconds). A server that hangs (stopped, or a network
        that drops packets) keeps the TCP connection open: nats-py's own pings notice it
        only after minutes, and until then every request merely times out."""
        try:
            await self.nc.flush(timeout=max(math.ceil(self.timeout), 1))
        except (NatsError, TimeoutError, OSError):  # closed, or no PONG in time
            return False
        return True

    @property
    def identity(self) -> tuple[str, int | None]:
        """This connection as the server's advisories name it (``client.server``,
        ``client.id``): (the server's name, which is its id unless configured; client id)."""
        info: dict[str, Any] = dict(getattr(self.nc, "_server_info", None) or {})
        server = info.get("server_name") or info.get("server_id") or ""
        cid = getattr(self.nc, "_client_id", None)
        return str(server), (int(cid) if cid is not None else None)

    async def publish(
        self, subject: str, data: bytes, *, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Publish to a stream subject and wait for the PubAck (``{stream, seq}``); sent
        again while no stream listens there yet (:data:`PUBLISH_SETTLING`)."""
        for pause in (*PUBLISH_SETTLING, None):
            try:
                reply = await self.raw_request(subject, data, headers=headers)
            except NoResponders:
                if pause is None:
                    raise
                await asyncio.sleep(pause)
            else:
                return self._decode(subject, reply)
        raise AssertionError("unreachable: the last try raises or returns")


#: The pauses (seconds) before a publish nothing answered is sent again: 0.05 s doubled
#: up to 1 s, eight tries, 3.55 s in all. In a cluster, a stream just made is heard of
#: on the other servers a moment after its create is answered, and a new replicated
#: stream may change its leader right after: a KeyValue entry put right after its new
#: 3-replica bucket was made got no responders (an apply's create of the bucket and its
#: entries, in a CI run), and so did the apply lock's first write on a loaded fresh
#: cluster (three tries with no pause were spent within a second). A request nothing
#: answered reached no stream, so sending it again cannot store it twice; one that still
#: finds none after them is the error it was (JetStream off for the account, say).
PUBLISH_SETTLING = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0)


def settled(future: asyncio.Future[Any]) -> None:
    """A done callback for a future shared by several awaiters (each through
    ``asyncio.shield``): its exception is taken here, so it is never logged as "never
    retrieved" when every awaiter was cancelled before it failed (a cancelled shield
    stops listening to the future it guards). Awaiters still get the exception."""
    if not future.cancelled():
        future.exception()


def clustered(info: dict[str, Any]) -> bool:
    """Whether the server of this INFO runs JetStream clustered: it names a cluster, and
    not the one a single server with a leafnode link names itself. nats-server gives a
    server with leafnode remotes and no cluster block its own name as the cluster's
    (``leafNoCluster``: no routes, so no cluster; a disaster-recovery standby, an edge
    site), and it advertises no other server, where a cluster advertises its members
    (``connect_urls``) unless ``no_advertise`` (docs/jetstream-notes.md)."""
    cluster = info.get("cluster")
    if not cluster:
        return False
    return bool(info.get("connect_urls")) or cluster != info.get("server_name")


def _positive(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


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
