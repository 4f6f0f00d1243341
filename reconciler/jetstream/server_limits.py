"""The connected server's own JetStream limits (``jetstream { max_file_store }``) and what
every account has reserved on it: its ``/jsz`` answer (docs/capacity.md).

An ordinary account's ``$JS.API.INFO`` says nothing of them. They are read only where
the user names a way:

- ``ConnectionOptions.monitor``: the server's HTTP monitoring endpoint, ``GET URL/jsz``;
- ``ConnectionOptions.system_creds`` / ``system_context``: a user of the system account,
  which asks ``$SYS.REQ.SERVER.<id>.JSZ`` of the server the client is connected to.

Either answer must be the connected server's own (its ``server_id``): a monitoring URL
of another server is refused, naming both. :meth:`ServerLimitsCalls.server_jsz` returns
the answer and where it came from, or None when no way was named.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass, replace
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from reconciler.door_words import Setting, say
from reconciler.errors import ConnectError
from reconciler.jetstream.connection import ConnectionOptions, close_quietly, connect, redact_url
from reconciler.jetstream.transport import Transport

#: The most of a ``/jsz`` answer read (it is small: no account or stream details asked).
_JSZ_LIMIT = 1 << 20


@dataclass(frozen=True)
class ServerJsz:
    """One server's ``/jsz`` answer (``config.max_storage``, ``reserved_storage``, ...)
    and where it was read (``the monitoring endpoint http://...``)."""

    jsz: dict[str, Any]
    source: str


def system_options(options: ConnectionOptions) -> ConnectionOptions | None:
    """The connection of the system account's user named by ``options``, to the same
    servers (TLS files kept); None when none is named."""
    if not (options.system_creds or options.system_context):
        return None
    return ConnectionOptions(
        servers=options.servers,
        creds=options.system_creds,
        context=options.system_context,
        tls_ca=options.tls_ca,
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        timeout=options.timeout,
        connect_timeout=options.connect_timeout,
    ).with_context()


def _http_jsz(url: str, timeout: float) -> dict[str, Any]:
    """``GET URL/jsz`` (blocking: called in a thread), the whole exchange within
    ``timeout``: a socket's timeout bounds each read, not their sum, and an endpoint that
    answers a byte at a time kept the thread (the plan waiting on it, the agent's exit
    waiting for the executor's threads) for as long as it went on. At the deadline the
    socket is shut down (:func:`_cut`), which ends a read blocked in another thread."""
    import http.client  # only for --monitor
    import ssl
    import threading
    from urllib.parse import urlsplit

    where = redact_url(url)
    base = url.rstrip("/")
    target = base if base.endswith("/jsz") else f"{base}/jsz"
    if not target.startswith(("http://", "https://")):
        raise ConnectError(f"{say(Setting.MONITOR)} {where}: not an http:// or https:// URL")
    failed = f"cannot read the server's limits at {where}/jsz"
    try:
        parts = urlsplit(target)
        host, port = parts.hostname or "", parts.port
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
            if parts.scheme == "https"
            else http.client.HTTPConnection(host, port, timeout=timeout)
        )
    except ValueError as err:  # a port that is no number, out of range
        raise ConnectError(f"{failed}: {err}") from None
    deadline = threading.Timer(timeout, _cut, (conn,))
    deadline.start()
    try:
        conn.request("GET", path or "/")
        response = conn.getresponse()
        if response.status != 200:
            raise ConnectError(f"{failed}: HTTP {response.status} {response.reason}")
        body = response.read(_JSZ_LIMIT + 1)
    except (http.client.HTTPException, OSError, ValueError) as err:
        if not deadline.is_alive():
            raise ConnectError(f"{failed}: not answered within {timeout:g}s") from None
        raise ConnectError(f"{failed}: {err}") from None
    finally:
        deadline.cancel()
        conn.close()
    if len(body) > _JSZ_LIMIT:
        raise ConnectError(f"{where}/jsz: the answer is over {_JSZ_LIMIT} bytes")
    try:
        found: Any = json.loads(body)
    except ValueError:
        raise ConnectError(f"{where}/jsz: not a JSON answer (is it the monitoring port?)") from None
    if not isinstance(found, dict):
        raise ConnectError(f"{where}/jsz: not a JetStream report")
    return found


def _cut(conn: Any) -> None:
    """End the exchange of ``conn`` (an ``http.client`` connection) now: a read blocked on
    its socket returns."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class ServerLimitsCalls(Transport):
    """Reads the connected server's ``/jsz`` where the options name a way."""

    def connected_server_id(self) -> str:
        info: dict[str, Any] = dict(getattr(self.nc, "_server_info", None) or {})
        return str(info.get("server_id") or "")

    async def server_jsz(self) -> ServerJsz | None:
        """The connected server's ``/jsz``: from the monitoring endpoint when named,
        else from the system account when its user is named; None when neither is.
        A named way that fails, or answers for another server, is a ``ConnectError``."""
        options = self.options
        if options is None:
            return None
        wanted = self.connected_server_id()
        if options.monitor:
            jsz = await asyncio.to_thread(_http_jsz, options.monitor, self.timeout)
            source = f"the monitoring endpoint {redact_url(options.monitor)}"
        else:
            system = system_options(options)
            if system is None:
                return None
            jsz = await self._system_jsz(system, wanted)
            source = "the system account"
        found = str(jsz.get("server_id") or "")
        if found != wanted:
            raise ConnectError(
                f"{source} reports server {found or 'with no id'}, but the plan talks to "
                f"server {wanted}: name the same server's monitoring endpoint"
            )
        return ServerJsz(jsz, source)

    async def _system_jsz(self, system: ConnectionOptions, server_id: str) -> dict[str, Any]:
        subject = f"$SYS.REQ.SERVER.{server_id}.JSZ"
        nc = await connect(replace(system, timeout=self.timeout))
        try:
            msg = await nc.request(subject, b"{}", timeout=self.timeout)
        except NoRespondersError:
            raise ConnectError(
                f"no answer on {subject}: the user named by {say(Setting.SYSTEM_USER)} is "
                "not one of the system account"
            ) from None
        except (TimeoutError, NatsTimeout):
            raise ConnectError(f"no answer to {subject} within {self.timeout:g}s") from None
        finally:
            await close_quietly(nc)
        try:
            reply: Any = json.loads(msg.data)
        except ValueError:
            raise ConnectError(f"invalid JSON reply on {subject}") from None
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, dict):
            raise ConnectError(f"{subject}: the answer holds no JetStream report")
        return data
