"""The connected server's identity (:class:`~reconciler.model.server_identity.ServerIdentity`):
the INFO the server sent on connect, its JetStream domain, and the account the user is
bound to, asked once with ``$SYS.REQ.USER.INFO`` (nats-server answers it in every
account, with the user; an older server, or a user not allowed to ask, leaves both
unknown)."""

from __future__ import annotations

from typing import Any

from reconciler.errors import ReconcileError
from reconciler.jetstream.transport import Transport
from reconciler.model.server_identity import Seat, ServerIdentity

USER_INFO = "$SYS.REQ.USER.INFO"
#: How long the account question may take (seconds): a server without an answer waits.
USER_INFO_TIMEOUT = 2.0


async def server_identity(client: Transport) -> ServerIdentity:
    """Who the client is connected to (one request: the account)."""
    return (await seat(client)).server


async def seat(client: Transport) -> Seat:
    """Who the client is connected to, and as which user (one request)."""
    info: dict[str, Any] = dict(getattr(client.nc, "_server_info", None) or {})
    facts = await client.server_info()
    told = await _user_info(client)
    user = told.get("user")
    server = ServerIdentity(
        name=_text(info.get("server_name")),
        server_id=_text(info.get("server_id")),
        cluster=_text(info.get("cluster")),
        domain=facts.domain,
        account=_text(told.get("account")),
        version=facts.version,
    )
    return Seat(server, user if isinstance(user, str) else None)


async def _user_info(client: Transport) -> dict[str, Any]:
    """``$SYS.REQ.USER.INFO``'s ``data`` (empty when not answered)."""
    try:
        data = await client.raw_request(USER_INFO, b"", timeout=USER_INFO_TIMEOUT)
        reply = Transport._decode(USER_INFO, data)
    except ReconcileError:
        return {}
    body = reply.get("data")
    return body if isinstance(body, dict) else {}


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None
