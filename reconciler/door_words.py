"""How the front door a run came through names what a person may allow or set.

The engine's messages name an allowance abstractly (:class:`Allowance`), or a connection
setting (:class:`Setting`), and say it in the words of the door the run came through
(:func:`say`): the CLI's flags (``--migrate``, ``--creds``) unless a door speaks its own
(:func:`spoken`: the Pulumi provider's resource arguments and stack config,
``migrate=True``). A door without the allowance has no words for it (None): the message
leaves that way out, or names the CLI command that has it. Every door connects, so a
setting always has words (the CLI's unless the door says its own). The rule behind each
message stays where it is; only its words follow the door.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from enum import StrEnum
from typing import overload

__all__ = ["CLI", "Allowance", "Setting", "Words", "say", "spoken"]


class Allowance(StrEnum):
    """What a person allows or sets for a run, named by no door."""

    MIGRATE = "migrate"  # consent to migrate the messages (and resume a migration)
    MIGRATE_RUN = "migrate_run"  # the run that migrates: keeps a replace's messages, finishes one
    MIGRATION = "migration"  # the way out of an interrupted migration
    TAKE_OVER = "take_over"  # manage a resource another owner manages
    LOCK_TIMEOUT = "lock_timeout"  # how long a change waits for another run's apply lock
    NO_LOCK = "no_lock"  # a change made without the apply lock


class Setting(StrEnum):
    """How a run connects, named by no door (every door has each). Its values are none
    of :class:`Allowance`'s: a StrEnum member is its value as a key of :data:`Words`."""

    CREDS = "creds"  # the user's credentials file (JWT and nkey seed)
    NKEY = "nkey"  # the file holding a user nkey seed
    TLS_CA = "tls_ca"  # the CA that verifies the server
    CLIENT_CERT = "client_cert"  # the client certificate and its key
    USER_PASSWORD = "user_password"  # a user and password, or a token, apart from the URL
    MONITOR = "monitor"  # the server's HTTP monitoring endpoint (its own limits)
    SYSTEM_USER = "system_user"  # a user of the system account (its creds or context)


#: What a door names each allowance and setting (None: it has no way to allow it).
Words = Mapping[Allowance | Setting, str | None]

#: The CLI's words (the Action's inputs are the same flags).
CLI: Words = {
    Allowance.MIGRATE: "--migrate",
    Allowance.MIGRATE_RUN: "apply --migrate",
    Allowance.MIGRATION: "--migration",
    Allowance.TAKE_OVER: "--take-over",
    Allowance.LOCK_TIMEOUT: "--lock-timeout",
    Allowance.NO_LOCK: "apply --no-lock",
    Setting.CREDS: "--creds",
    Setting.NKEY: "--nkey",
    Setting.TLS_CA: "--tls-ca",
    Setting.CLIENT_CERT: "--tls-cert/--tls-key",
    Setting.USER_PASSWORD: "--user/--password (or --token)",
    Setting.MONITOR: "--monitor",
    Setting.SYSTEM_USER: "--system-creds, --system-context",
}

_WORDS: ContextVar[Words] = ContextVar("door_words", default=CLI)


@overload
def say(named: Setting) -> str: ...
@overload
def say(named: Allowance) -> str | None: ...
def say(named: Allowance | Setting) -> str | None:
    """``named`` in the words of the door this run came through; None: that door has no
    way to allow it (a setting always has words: the CLI's when the door gives none)."""
    said = _WORDS.get().get(named)
    return CLI[named] if said is None and isinstance(named, Setting) else said


@contextlib.contextmanager
def spoken(words: Words) -> Iterator[None]:
    """The engine's messages made inside say each allowance and setting of ``words`` in
    those words (the others as the CLI does)."""
    token = _WORDS.set({**CLI, **words})
    try:
        yield
    finally:
        _WORDS.reset(token)
