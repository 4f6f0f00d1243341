"""Where the credentials are in a server URL: one rule for the connection (which redacts
them and refuses what it cannot read) and the project file (which refuses any)."""

from __future__ import annotations


def split_scheme(url: str) -> tuple[str, str]:
    """``(scheme, rest)``: nats-py takes a URL without a scheme as ``nats://``."""
    scheme, found, rest = url.strip().partition("://")
    return (scheme.lower(), rest) if found else ("", url.strip())


def userinfo(rest: str) -> tuple[str, str] | None:
    """``(userinfo, hosts)`` of a URL without its scheme, split at its last ``@`` (a
    host never holds one), or None without credentials. Everything before it is taken
    as the credentials, whatever it holds: a password typed with a ``/``, ``?`` or ``#``
    unencoded (``alice:pa/ss@host``) is a secret still, though no URL parser reads it as
    one (the ``/`` ends the user info there: such a password was printed whole)."""
    info, found, hosts = rest.rpartition("@")
    return (info, hosts) if found else None
