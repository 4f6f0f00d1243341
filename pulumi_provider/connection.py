"""Where the provider finds its NATS server: resource input, stack config, then ``NATS_URL``.

A resource's ``connection`` input wins field by field over the stack configuration
(``jetstream:servers``, ``jetstream:creds``, ...), which wins over the ``NATS_URL``
environment variable. The provider never starts the embedded server: with no server
configured anywhere, every call fails with a :class:`~reconciler.errors.ConnectError`
telling the user where to set one.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

from reconciler.errors import ConnectError, ReconcileError
from reconciler.jetstream import ConnectionOptions
from reconciler.jetstream.connection import url_secrets

#: Stack config namespace: ``pulumi config set jetstream:servers nats://...``.
CONFIG_NAMESPACE = "jetstream"

#: Fields of the ``connection`` input / stack config: ConnectionOptions' own names, less
#: what only the CLI sets (a context's API prefix, the embedded server's store).
CONNECTION_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ConnectionOptions) if f.name not in {"api_prefix", "store"}
)

#: Fields that are credentials: secret inputs, never written to outputs.
SECRET_FIELDS = frozenset({"creds", "nkey", "password", "token", "system_creds"})

_NUMBER_FIELDS = frozenset({"timeout", "connect_timeout"})


def stack_connection(config: Any) -> dict[str, Any]:
    """The ``jetstream:*`` stack config values (``pulumi.dynamic.Config`` or a mapping).

    Accepts both snake_case (``jetstream:tls_ca``) and camelCase (``jetstream:tlsCa``) keys.
    """
    found: dict[str, Any] = {}
    for field in CONNECTION_FIELDS:
        for key in (field, _camel(field)):
            value = config.get(f"{CONFIG_NAMESPACE}:{key}")
            if value not in (None, ""):
                found[field] = value
                break
    return found


def resolve_connection(
    *layers: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> ConnectionOptions:
    """Merge connection layers (first wins per field) and fall back to ``NATS_URL``.

    Raises ConnectError when no layer names a server (or a ``nats`` CLI context): the
    provider never falls back to the embedded server.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        for field, value in (layer or {}).items():
            if field in CONNECTION_FIELDS and value not in (None, "", []):
                merged.setdefault(field, value)
    env = os.environ if environ is None else environ
    if "servers" not in merged and env.get("NATS_URL"):
        merged["servers"] = env["NATS_URL"]
    options = ConnectionOptions(**{k: _coerce(k, v) for k, v in merged.items()})
    if not options.with_context().servers:
        raise ConnectError(
            "no NATS server configured for the JetStream provider: set the resource's "
            "`connection` input, `pulumi config set jetstream:servers nats://HOST:4222`, "
            "or NATS_URL"
        )
    return options


def public_connection(connection: Mapping[str, Any] | None) -> dict[str, Any]:
    """The connection without its credentials: what may appear in outputs. A server URL
    holding a password or token (``nats://app:pw@host``, as
    :func:`~reconciler.jetstream.connection.url_secrets` finds them) is left out like
    ``password``: read and delete take it from the captured connection."""
    return {
        field: value
        for field, value in (connection or {}).items()
        if field in CONNECTION_FIELDS
        and field not in SECRET_FIELDS
        and not (field == "servers" and url_secrets(_coerce(field, value)))
    }


def unknown_connection_fields(connection: Mapping[str, Any] | None) -> list[str]:
    """Keys of a ``connection`` input the provider does not know (reported by check)."""
    return sorted(k for k in (connection or {}) if k not in CONNECTION_FIELDS)


def _coerce(field: str, value: Any) -> Any:
    if field == "servers" and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if field in _NUMBER_FIELDS:
        return seconds(_where(field), value, minimum=MIN_TIMEOUT)
    return str(value)


#: The shortest connection timeout accepted, as the CLI's ``--timeout`` accepts.
MIN_TIMEOUT = 0.1


def _where(field: str) -> str:
    return set_with(field)


def set_with(*fields: str) -> str:
    """How a program sets the connection's ``fields``, as a message names them: ``the
    connection's creds (jetstream:creds or the `connection` input)``."""
    config = "/".join(f"{CONFIG_NAMESPACE}:{_camel(field)}" for field in fields)
    return f"the connection's {'/'.join(fields)} ({config} or the `connection` input)"


def connection_problems(connection: Mapping[str, Any] | None) -> list[str]:
    """Why a ``connection`` input's values cannot be used (a timeout that is no time),
    each a sentence (check reports them before any change)."""
    found = []
    for field in sorted(_NUMBER_FIELDS & (connection or {}).keys()):
        try:
            seconds(_where(field), (connection or {})[field], minimum=MIN_TIMEOUT)
        except ReconcileError as err:
            found.append(str(err))
    return found


def seconds(where: str, value: Any, *, minimum: float = 0.0) -> float:
    """``value`` (a number, or a text such as ``30``, ``2.5``, ``2m``) in seconds; a value
    that is not a finite time of ``minimum`` or more is an error naming ``where`` it was
    set (never a wait, or a timeout, the user did not ask for; never a traceback)."""
    from reconciler.specs.units import UnitError, parse_seconds

    text = str(value)
    try:
        found = parse_seconds(text)
    except UnitError:
        found = float("nan")
    if not math.isfinite(found) or found < minimum:
        raise ReconcileError(
            f"{where} must be a time of {minimum:g} or more (30, 2.5, 2m), not {text[:40]!r}"
        )
    return found


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


#: How long a create, update or delete waits for another run's apply lock: the stack
#: config ``jetstream:lockTimeout`` (seconds or a duration: ``30``, ``2m``), else
#: ``RECONCILE_LOCK_TIMEOUT``, else the CLI's ``--lock-timeout`` default.
LOCK_TIMEOUT_CONFIG = f"{CONFIG_NAMESPACE}:lockTimeout"
LOCK_TIMEOUT_ENV = "RECONCILE_LOCK_TIMEOUT"


def stack_lock_timeout(config: Any) -> str | None:
    """The stack's ``jetstream:lockTimeout`` (or ``jetstream:lock_timeout``) as written."""
    for key in (LOCK_TIMEOUT_CONFIG, f"{CONFIG_NAMESPACE}:lock_timeout"):
        value = config.get(key)
        if value not in (None, ""):
            return str(value)
    return None


def lock_timeout(
    written: str | None, default: float, environ: Mapping[str, str] | None = None
) -> float:
    """The lock wait in seconds from the stack config's text, else the environment's,
    else ``default``. A value that is not a time of 0 or more is an error naming where
    it was set (never a wait the user did not ask for)."""
    env = os.environ if environ is None else environ
    where, text = LOCK_TIMEOUT_CONFIG, written
    if text is None and env.get(LOCK_TIMEOUT_ENV, "").strip():
        where, text = LOCK_TIMEOUT_ENV, env[LOCK_TIMEOUT_ENV]
    if text is None:
        return default
    return seconds(where, text)
