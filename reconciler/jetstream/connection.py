"""Connection settings and opening a nats-py connection with clear, secret-free errors.

:class:`ConnectionOptions` is what every front door builds (CLI flags, Pulumi inputs,
Action inputs). :func:`connect` opens one nats-py connection without reconnect loops, so
an unreachable server or rejected credentials fail within ``connect_timeout`` with a
:class:`~reconciler.errors.ConnectError` that never shows a password, token or seed: a
:class:`~reconciler.errors.ConnectRefused` when the listener answered and refused us
(:func:`refuses`) or the settings cannot connect, the configuration's fault rather
than the world's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import nats
from nats.aio.client import Client as NATS
from nats.errors import AuthorizationError, NoServersError, ProtocolError, SecureConnRequiredError
from nats.protocol.parser import AWAITING_CONTROL_LINE, AWAITING_MSG_PAYLOAD, Parser

from reconciler.door_words import Setting, say
from reconciler.errors import ConnectError, ConnectRefused, raised_at
from reconciler.jetstream.contexts import NatsContext, load_context
from reconciler.specs.server_url import split_scheme, userinfo

ErrorCallback = Callable[[Exception], Awaitable[None]]
#: What a raw subscription hands each message to: its header block (``NATS/1.0...``, or
#: empty) and its body.
RawReply = Callable[[bytes, bytes], None]
_SECRET_FIELDS = frozenset({"password", "token"})
DEFAULT_STORE = Path(".reconcile")


#: The longest protocol line (``INFO``, ``MSG``, ``PONG``, ``-ERR``...) an open
#: connection takes: a 3-node cluster's INFO is 459 bytes (its ``connect_urls`` grow by
#: ~20 a server), nats-py reads no greeting over 32 KiB (its reader's line limit, which
#: bounds every line read while connecting), a MSG line holds subjects (4 KiB at the
#: server's default ``max_control_line``). No more: nats-py scans the whole pending line
#: again on every read (measured: 16 ms a read at 1 MiB, 1 ms at 64 KiB).
MAX_LINE = 64 * 1024
#: The largest message an open connection takes, by the size its MSG line announces
#: (the server's ``max_payload`` is the server's word: no bound against it). The largest
#: reply this tool reads is a STREAM.MSG.GET of a message at the largest ``max_payload``
#: a server takes without a raised ``max_pending``, 64 MiB: 86 MiB as base64 in JSON. A
#: STREAM.INFO page of 100,000 subjects (of 1 KiB each) or of 256 stream infos is less.
MAX_MESSAGE = 128 * 1024 * 1024
#: URL schemes this tool connects with (nats-py's TCP transport).
SCHEMES = frozenset({"nats", "tls"})
#: The user part of a URL: everything up to its authority's last ``@`` (a password may
#: hold one), as urllib and nats-py read it.


def redact_url(url: str) -> str:
    """A URL with any credentials replaced: ``nats://user:secret@host`` →
    ``nats://user:***@host``, ``TOKEN@host`` → ``***@host``, in every form nats-py
    accepts (with or without a scheme; an unparseable URL is redacted just the same)."""
    scheme, rest = split_scheme(url)
    credentials = userinfo(rest)
    if credentials is None:
        return url.strip()
    user, colon, _ = credentials[0].partition(":")
    shown = f"{user}:***" if colon else "***"
    prefix = f"{scheme}://" if scheme else ""
    return f"{prefix}{shown}@{credentials[1]}"


def url_secrets(servers: str) -> list[str]:
    """The secrets inside server URLs (comma separated), as :func:`redact_url` hides
    them: each password (``alice:s3cret@h`` → ``s3cret``), each token (``T0KEN@h``), with
    or without a scheme. For masking them in logs (the GitHub Action)."""
    found: list[str] = []
    for url in servers.split(","):
        credentials = userinfo(split_scheme(url)[1])
        if credentials is None:
            continue
        user, colon, secret = credentials[0].partition(":")
        shown = secret if colon else user
        if shown:
            found.append(shown)
    return found


def check_server_url(url: str) -> None:
    """Refuse, with the URL redacted, what nats-py would fail on with a traceback."""
    scheme, rest = split_scheme(url)
    where = redact_url(url)
    if scheme and scheme not in SCHEMES:
        hint = (
            " (WebSocket is not supported: use the server's client port)"
            if scheme
            in (
                "ws",
                "wss",
            )
            else ""
        )
        raise ConnectError(f"{where}: unsupported scheme {scheme}:// (nats:// or tls://){hint}")
    credentials = userinfo(rest)
    if credentials is not None and any(mark in credentials[0] for mark in "/?#"):
        raise ConnectError(
            f"{where}: the credentials in the URL hold a '/', '?' or '#', which ends them "
            f"there: give them apart from the URL with {say(Setting.USER_PASSWORD)}"
        )
    try:
        parts = urlsplit(f"nats://{rest}")
        port = parts.port
    except ValueError:
        raise ConnectError(f"{where}: not a valid server URL (nats://HOST:PORT)") from None
    if not parts.hostname:
        raise ConnectError(f"{where}: no host (nats://HOST:PORT)")
    if port is not None and not 0 < port < 65536:
        raise ConnectError(f"{where}: port {port} is out of range (1-65535)")


@dataclass(frozen=True)
class ConnectionOptions:
    """How to reach a server; with nothing set, the embedded server is used."""

    servers: str | None = None  # comma-separated URLs
    creds: str | None = None  # path to a .creds file (JWT + seed)
    nkey: str | None = None  # path to an nkey seed file
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    context: str | None = None
    domain: str | None = None
    api_prefix: str | None = None  # from a context's jetstream_api_prefix
    timeout: float = 5.0
    connect_timeout: float = 5.0
    store: Path = DEFAULT_STORE
    #: Where the server's own JetStream limits are read (docs/capacity.md): its HTTP
    #: monitoring endpoint (``http://HOST:8222``), or a user of the system account.
    monitor: str | None = None
    system_creds: str | None = None  # a .creds file of a system account user
    system_context: str | None = None  # a nats CLI context of a system account user

    def __post_init__(self) -> None:
        if self.servers is not None and not self.server_urls:
            raise ConnectError(
                "the server URL given is empty: name a server (nats://HOST:PORT), or give "
                "none at all to use the embedded nats-server"
            )

    def __repr__(self) -> str:
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if item.name in _SECRET_FIELDS:
                value = "***"
            elif item.name == "servers":
                value = self.display_servers
            shown.append(f"{item.name}={value!r}")
        return f"ConnectionOptions({', '.join(shown)})"

    __str__ = __repr__

    @property
    def is_configured(self) -> bool:
        """Whether anything points at a server (otherwise the embedded one is used)."""
        pointers = (self.servers, self.creds, self.nkey, self.user, self.token, self.context)
        return any(pointers) or any((self.tls_ca, self.tls_cert, self.tls_key))

    @property
    def server_urls(self) -> list[str]:
        return [u.strip() for u in (self.servers or "").split(",") if u.strip()]

    @property
    def display_servers(self) -> str:
        """The server URLs with any credentials masked, for messages."""
        return ",".join(redact_url(u) for u in self.server_urls)

    def with_context(self, *, directory: Path | None = None) -> ConnectionOptions:
        """Fill unset fields from the named ``nats`` context; explicit values win."""
        if not self.context:
            return self
        return merge_context(self, load_context(self.context, directory=directory))


def merge_context(options: ConnectionOptions, ctx: NatsContext) -> ConnectionOptions:
    """``options`` with every unset field taken from context ``ctx``."""
    from_context: dict[str, Any] = {
        "servers": ctx.url,
        "creds": ctx.creds,
        "nkey": ctx.nkey,
        "user": ctx.user,
        "password": ctx.password,
        "token": ctx.token,
        "tls_ca": ctx.ca,
        "tls_cert": ctx.cert,
        "tls_key": ctx.key,
        "domain": ctx.jetstream_domain,
        "api_prefix": ctx.jetstream_api_prefix,
    }
    changes = {k: v for k, v in from_context.items() if v and getattr(options, k) is None}
    return replace(options, **changes)


def tls_context(options: ConnectionOptions) -> ssl.SSLContext | None:
    """An SSL context when TLS files are given or a URL asks for ``tls://``."""
    wants_tls = any(u.startswith("tls://") for u in options.server_urls)
    if not (wants_tls or options.tls_ca or options.tls_cert):
        return None
    try:
        context = ssl.create_default_context(cafile=options.tls_ca)
        if options.tls_cert:
            context.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as err:
        raise ConnectError(f"cannot load TLS files: {err}") from None
    return context


def _auth_kwargs(options: ConnectionOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    needs_nkeys = bool(options.creds or options.nkey)
    if needs_nkeys and importlib.util.find_spec("nkeys") is None:  # nats-py needs it
        raise ConnectError(f"{say(Setting.CREDS)} and {say(Setting.NKEY)} need the 'nkeys' package")
    for path in (options.creds, options.nkey):
        if path and not _is_file(path):
            raise ConnectError(f"credentials file not found: {shown_path(path)}")
    if options.creds:
        _check_creds(options.creds)
        kwargs["user_credentials"] = options.creds
    elif options.nkey:
        _check_seed(options.nkey)
        kwargs["nkeys_seed"] = options.nkey
    if options.user:
        kwargs["user"] = options.user
        kwargs["password"] = options.password or ""
    if options.token:
        kwargs["token"] = options.token
    return kwargs


#: A run of key characters no readable file name holds: an nkey seed (58), a JWT's parts.
_KEYLIKE = re.compile(r"[A-Za-z0-9_+=-]{40,}")


def _is_file(path: str) -> bool:
    """Whether ``path`` names a file; False for a value no file system takes (a name over
    255 bytes, a NUL), where ``Path.is_file`` raises."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def shown_path(path: str) -> str:
    """A credentials path that was not found, as an error may print it: a variable meant
    to name the file (``creds: {env: NAME}``, ``NATS_CREDS``) may hold the secret itself
    (the creds file's text, a seed, a JWT); one that does not read as a path (a line
    break, a space or control character, a run of 40 key characters) is never printed."""
    if len(path) > 1024 or _KEYLIKE.search(path) or not path.isprintable() or " " in path:
        return f"(a value of {len(path)} characters that is no file path: not printed)"
    return path


def _check_seed(path: str) -> None:
    """An nkey file must hold a seed (a line starting with ``S``); never echo its text."""
    import nkeys

    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").split()
        seed = next((line for line in lines if line.startswith("S")), "")
        nkeys.from_seed(seed.encode())
    except Exception:  # nkeys raises its own errors; none may show the file's text
        raise ConnectError(
            f"{say(Setting.NKEY)} {path}: not an nkey seed (a line starting with 'S')"
        ) from None


def _check_creds(path: str) -> None:
    """A creds file must hold a JWT and a seed between the nats CLI's markers, the seed
    one nkeys reads (nats-py signs the server's nonce with it, and raised nkeys' own
    error out of the connect: a traceback, and every environment's agent stopped); its
    text is never echoed."""
    import nkeys

    wrong = f"{say(Setting.CREDS)} {path}: not a NATS credentials file (JWT and nkey seed)"
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ConnectError(
            f"{say(Setting.CREDS)} {path}: cannot be read ({err.strerror})"
        ) from None
    if "BEGIN NATS USER JWT" not in text or "BEGIN USER NKEY SEED" not in text:
        raise ConnectError(wrong)
    after = text.split("BEGIN USER NKEY SEED", 1)[1].split("\n")  # the marker's line end
    seed = after[1] if len(after) > 1 else ""  # the next line, as nats-py reads it
    try:
        nkeys.from_seed(seed.encode())
    except Exception:  # nkeys raises its own errors; none may show the file's text
        raise ConnectError(f"{wrong}: its seed is not an nkey seed") from None


def _creds_jwt(path: str) -> str:
    """The user JWT of a creds file as nats-py sends it (the line after the marker), or
    "" when there is none to read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return ""
    after = text.split("BEGIN NATS USER JWT", 1)[1:]
    lines = after[0].split("\n") if after else []
    return lines[1].strip() if len(lines) > 1 and len(lines[1].strip()) >= 16 else ""


#: What a NATS server answers a client at one of its ports for other servers (route,
#: gateway, leaf node: ``attempted to connect to route port``): the address names the
#: wrong port.
_OTHER_PORT = "attempted to connect to"


def refuses(err: BaseException) -> bool:
    """Whether a failed attempt was the listener's answer against us: credentials
    refused, TLS it asks for or cannot do, a certificate that does not verify (ours, the
    connection it ends after the handshake: :class:`TlsEnded`), a port of
    the server's that is not for clients, a greeting no NATS server sends. The
    configuration's fault (a rollout that brought it should stop). Anything else
    (refused at TCP, no answer in time, a reset, a connection that ended) is the
    world's: a server that is down, or a network."""
    if isinstance(err, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return False  # the connection ended mid-handshake
    said = str(err).lower()
    return isinstance(
        err,
        AuthorizationError | SecureConnRequiredError | ssl.SSLError | NotNatsGreeting | TlsEnded,
    ) or (not isinstance(err, OSError) and ("authorization" in said or _OTHER_PORT in said))


def describe_failure(url: str, err: BaseException, *, timeout: float) -> str:
    """A one-line reason for a failed connection attempt, free of secrets."""
    where = redact_url(url)
    if isinstance(err, AuthorizationError) or "authorization" in str(err).lower():
        return f"authorization violation at {where}: check credentials"
    if isinstance(err, SecureConnRequiredError):
        return f"{where} requires TLS: use a tls:// URL or {say(Setting.TLS_CA)}"
    if isinstance(err, ssl.SSLError):
        plain = err.reason == "WRONG_VERSION_NUMBER"  # a plaintext server's INFO read as TLS
        hint = " (the server speaks no TLS)" if plain else ""
        return f"TLS handshake with {where} failed: {err.reason or err}{hint}"
    if isinstance(err, ConnectionResetError):
        return f"cannot connect to {where}: connection reset by the server"
    if isinstance(err, ConnectionRefusedError):
        return f"cannot connect to {where}: connection refused"
    if isinstance(err, asyncio.TimeoutError | TimeoutError):
        return f"cannot connect to {where}: no answer within {timeout:g}s"
    if isinstance(err, OSError):
        reason = (err.strerror or str(err) or type(err).__name__).lower()
        return f"cannot connect to {where}: {reason}"
    return f"cannot connect to {where}: {err or type(err).__name__}"


def server_address(nc: NATS) -> str | None:
    """The URL ``nc`` is connected to, as scheme, host and port (no credentials)."""
    url = getattr(nc, "connected_url", None)
    if url is None or not getattr(url, "hostname", None):
        return None
    return redact_url(f"{url.scheme}://{url.hostname}:{url.port}")


async def close_quietly(nc: NATS, *, timeout: float = 2.0) -> None:
    """Close ``nc``; a connection broken mid-handshake can hang nats-py's close."""
    if nc.is_closed:
        return
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), timeout)


async def _quiet(err: Exception) -> None:
    """Default error callback: nats-py would otherwise log every failure."""


async def connect(
    options: ConnectionOptions,
    *,
    error_cb: ErrorCallback | None = None,
    closed_cb: Callable[[], None] | None = None,
) -> NATS:
    """Open one connection to the first reachable server of ``options``.

    Tries each URL in order within one ``connect_timeout`` budget; no reconnects.
    ``closed_cb`` is called once the open connection is lost (the server gone).
    """
    urls = options.server_urls or ["nats://127.0.0.1:4222"]
    try:
        for url in urls:
            check_server_url(url)
        kwargs = _auth_kwargs(options)
        tls = tls_context(options)
    except ConnectError as err:  # the settings cannot connect: no server was asked
        raise ConnectRefused(str(err), answered=False) from None
    if tls is not None:
        kwargs["tls"] = tls
    deadline = time.monotonic() + options.connect_timeout
    reasons: list[str] = []
    refused = False  # one listener answered and refused us: the settings' fault
    for url in urls:
        remaining = max(deadline - time.monotonic(), 0.05)
        try:
            return await asyncio.wait_for(
                _open(url, remaining, error_cb or _quiet, kwargs, closed_cb),
                timeout=remaining,
            )
        except (TimeoutError, OSError, nats.errors.Error, ssl.SSLError) as err:
            reason = describe_failure(url, err, timeout=options.connect_timeout)
            if tls is not None and reason.endswith("connection lost"):
                certificate = say(Setting.CLIENT_CERT)
                reason += f" (does the server require a client certificate? {certificate})"
            reasons.append(reason)
            refused = refused or refuses(err)
        except Exception as err:  # nats-py reading a greeting that no NATS server sends
            reasons.append(unreadable_greeting(url, err))
            refused = True
    said = without_secrets("; ".join(reasons), options)
    raise ConnectRefused(said) if refused else ConnectError(said)


def without_secrets(text: str, options: ConnectionOptions) -> str:
    """``text`` with every secret ``options`` sends a server (the password, the token,
    those in the URLs, as written and decoded, the creds file's user JWT) shown as
    ``***``: whatever listens at the address got them in the CONNECT, and its ``-ERR``
    may say them back."""
    found = {*url_secrets(options.servers or ""), options.password or "", options.token or ""}
    found |= {unquote(secret) for secret in found}
    if options.creds:  # the user JWT goes in the CONNECT too: a bearer one is a password
        found.add(_creds_jwt(options.creds))
    for secret in sorted(found - {""}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def unreadable_greeting(url: str, err: Exception) -> str:
    """The reason for an attempt that nats-py broke off on what the listener at ``url``
    sent (an INFO that is a JSON list, a ``max_payload`` that is text, another protocol
    altogether): said as the error's type and where, never its text, which may quote
    what was sent. The next URL is still tried."""
    return (
        f"cannot connect to {redact_url(url)}: what it sent is no NATS server's greeting "
        f"({raised_at(err)})"
    )


class _Client(NATS):
    """nats-py's client, except that a connection asked for TLS (a ``tls://`` URL or TLS
    files: :func:`tls_context`) never goes on in plaintext. nats-py upgrades only when
    the server's INFO says ``tls_required``, so a server without TLS, or anyone on the
    way who strips that flag, received the CONNECT with the password or token in the
    clear. As nats.go does for a secure connection, the upgrade is made whatever INFO
    says: a server that cannot do TLS fails the handshake, before any credential is
    sent (``tests/integration/test_new_user6.py``).

    Every INFO is checked (:func:`_check_greeting`): the greeting, and each one a server
    sends later on the open connection (a cluster's changes), which :class:`_Parser`
    turns into the connection's end when it is no NATS server's.

    ``cut``: why this side ended the connection (a line or a message over the bounds),
    naming the server; None while it did not.

    ``raw_replies``: subscriptions (by id) whose messages go, as the server sent them, to
    a function of their header block and body, and nowhere else (no ``Msg``, no
    header dict, no queue): a batched read's thousands of replies
    (``Transport.replies``). nats-py's parsing of each message's headers took 3 of the
    3.9 s a batched read of 100,000 keys took."""

    def __init__(self) -> None:
        super().__init__()
        self._ps = _Parser(self)
        self.cut: str | None = None
        self.raw_replies: dict[int, RawReply] = {}

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        """nats-py's, except for a subscription of :attr:`raw_replies`."""
        handler = self.raw_replies.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
        else:
            handler(headers or b"", data)

    async def _process_connect_init(self) -> None:
        """nats-py's handshake, the listener's first line checked as it comes
        (:func:`_check_first_line`): nats-py said the same of a banner of another
        protocol as of a connection that ended, and of an INFO that is no JSON at all
        as of a server's."""
        transport = self._transport
        assert transport is not None, "called by nats-py's connect, once connected"
        read = transport.readline

        async def first_line() -> bytes:
            vars(transport).pop("readline", None)  # the lines after it, as nats-py reads them
            line = await read()
            _check_first_line(line)
            return line

        setattr(transport, "readline", first_line)  # noqa: B010 (a method, for one read)
        try:
            await super()._process_connect_init()
        except (ConnectionResetError, BrokenPipeError):
            if not _tls_up(transport):
                raise
            # TLS 1.3: the server checks our certificate after the handshake, and its
            # alert races our CONNECT: read, an SSLError; else the connection it ended
            raise TlsEnded("nats: the server ended the TLS connection: connection lost") from None
        finally:
            vars(transport).pop("readline", None)

    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        _check_greeting(info)
        if initial_connection and "tls" in self.options:
            info["tls_required"] = True  # the dict nats-py reads next to decide the upgrade
        await super()._process_info(info, initial_connection=initial_connection)


class _Parser(Parser):
    """nats-py's protocol parser, except that a line it cannot read on an open connection
    (an INFO that is no JSON object, or whose fields are not of a NATS server's types; an
    ``-ERR`` that is no UTF-8) is a protocol error: the connection is closed, as after any
    other (a long-lived caller, the agent, connects again). nats-py's read loop printed
    a traceback of it on stderr, which may quote what was sent, and stopped reading: the
    connection stayed open and dead, every request timing out.

    What it holds is bounded (:func:`overrun`): a line longer than :data:`MAX_LINE` or a
    message announced over :data:`MAX_MESSAGE` ends the connection too, its reason in
    the client's ``cut``. nats-py buffered either without limit (a listener announcing a
    message of a terabyte, then sending bytes), until the process died for lack of
    memory: with the agent, every environment's. It is checked after each read (nats-py
    reads 32 KiB at a time), so no more than a read past the bound is ever held."""

    async def parse(self, data: bytes = b"") -> None:
        try:
            await super().parse(data)
        except (ProtocolError, OSError):
            raise
        except Exception:
            raise ProtocolError from None
        over = overrun(self)
        if over is not None:
            self.nc.cut = f"{server_address(self.nc) or 'the server'} {over}"
            raise ProtocolError(self.nc.cut)


def overrun(parser: Parser) -> str | None:
    """What nats-py's ``parser`` holds past the bounds, said (None: nothing): a message
    announced over :data:`MAX_MESSAGE`, a line not ended within :data:`MAX_LINE`. It
    reads the parser's state, nats-py's internals (``tests/unit/test_parser_bounds.py``
    fails when a release changes them): a parser without them is left unbounded, as
    nats-py has it, rather than every connection refused by a nats-py upgrade."""
    try:
        state, needed, held = parser.state, int(parser.needed), len(parser.buf)
    except (AttributeError, TypeError, ValueError):
        return None
    if state == AWAITING_MSG_PAYLOAD and needed > MAX_MESSAGE:
        return f"announced a message of {needed:,} bytes (more than {MAX_MESSAGE >> 20} MiB)"
    if state == AWAITING_CONTROL_LINE and held > MAX_LINE:
        return f"sent a protocol line with no end within {MAX_LINE >> 10} KiB"
    return None


#: The INFO fields nats-py (and the server facts) read from a server's greeting, and
#: the JSON type each has in every NATS server's.
_GREETING_TYPES: dict[str, type] = {
    "server_id": str,
    "server_name": str,
    "version": str,
    "max_payload": int,
    "client_id": int,
    "client_ip": str,
    "nonce": str,
    "headers": bool,
    "auth_required": bool,
    "tls_required": bool,
    "jetstream": bool,
    "cluster": str,
    "domain": str,
    "connect_urls": list,
}


class NotNatsGreeting(nats.errors.Error):
    """An INFO whose fields are not of the types a NATS server sends."""


class TlsEnded(nats.errors.Error):
    """The server ended the connection once the TLS handshake was done, before the
    CONNECT was answered: it refused our certificate (none given, or one it does not
    trust), as a NATS server that verifies clients does."""


def _tls_up(transport: Any) -> bool:
    """Whether nats-py's ``transport`` finished its TLS handshake."""
    writer = getattr(transport, "_io_writer", None)
    return writer is not None and writer.get_extra_info("ssl_object") is not None


def _check_first_line(line: bytes) -> None:
    """Refuse a listener's first line that is whole and no NATS server's greeting: not
    ``INFO`` followed by JSON (an SSH or SMTP banner, a port of another service). A
    connection that ended first (nothing, or part of a line) is left to nats-py: a
    server that is down."""
    if not line.endswith(b"\n"):
        return
    verb, _, body = line.partition(b" ")
    if verb == b"INFO":
        with contextlib.suppress(ValueError):  # no JSON (nor UTF-8)
            json.loads(body)
            return
    raise NotNatsGreeting("nats: what the listener sent first is no NATS server's INFO")


def _check_greeting(info: dict[str, Any]) -> None:
    """Refuse a greeting whose fields are not of the types a NATS server sends: nats-py
    takes them as they come, and a ``max_payload`` that is text failed the first publish
    with a ``TypeError`` (a traceback, or an agent stopped for every environment)."""
    if not isinstance(info, dict):
        raise NotNatsGreeting("nats: the server's INFO is not a JSON object")
    for name, kind in _GREETING_TYPES.items():
        value = info.get(name)
        if value is None:
            continue
        wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if name == "max_payload" and not wrong:
            wrong = value <= 0
        if name == "connect_urls" and not wrong:
            wrong = not all(isinstance(url, str) for url in value)
        if wrong:
            raise NotNatsGreeting(f"nats: the server's INFO is not a NATS server's ({name})")


async def cancelled_and_taken(task: asyncio.Future[Any], wait: float = 0.5) -> None:
    """``task`` cancelled and its end taken, whatever it was (waited for up to ``wait``
    seconds): a task that failed as its waiter was cancelled (Ctrl-C while a connect or
    a request timed out, in the same moment), or that turned its cancel into another
    error (nats-py's connect re-raises what it met), was left to the interpreter, which
    printed 'Task exception was never retrieved' and a traceback after the command's own
    last line. One still running after ``wait`` (a loaded machine) has its end taken
    whenever it comes."""
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait({task}, timeout=wait)
    if not task.done():
        task.add_done_callback(_taken)
    elif not task.cancelled():
        task.exception()


def _taken(task: asyncio.Future[Any]) -> None:
    """A finished task's end taken (its exception never left for the interpreter to print)."""
    if not task.cancelled():
        task.exception()


async def _open(
    url: str,
    timeout: float,
    error_cb: ErrorCallback,
    kwargs: dict[str, Any],
    closed_cb: Callable[[], None] | None = None,
) -> NATS:
    """Connect to ``url``; the first failure ends the attempt (nats-py would retry)."""
    nc = _Client()
    first_error: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    connected = False

    async def on_error(err: Exception) -> None:
        if connected:
            await error_cb(err)
        elif not first_error.done():
            first_error.set_result(err)

    async def on_disconnect() -> None:
        if connected and closed_cb is not None:
            closed_cb()  # no reconnects: a disconnect is the end of this connection

    attempt: asyncio.Future[Any] = asyncio.ensure_future(
        nc.connect(
            servers=[url],
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=max(int(timeout + 0.999), 1),
            name="reconcile",
            **kwargs,
        )
    )
    try:
        racing: set[asyncio.Future[Any]] = {attempt, first_error}
        await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        if not attempt.done():
            await cancelled_and_taken(attempt)
            raise first_error.result()
        attempt.result()
    except NoServersError as err:
        raise ConnectionRefusedError("connection refused") from err
    except BaseException:
        await cancelled_and_taken(attempt)
        await close_quietly(nc, timeout=0.5)
        raise
    connected = True
    return nc
