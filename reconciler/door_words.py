"""How the front door a run came through names what a person may allow or set.

The engine's messages name an allowance abstractly (:class:`Allowance`) and say it in
the words of the door the run came through (:func:`say`): the CLI's flags
(``--migrate``) unless a door speaks its own (:func:`spoken`: the Pulumi provider's
resource arguments, ``migrate=True``). A door without the allowance has no words for it
(None): the message leaves that way out, or names the CLI command that has it. The rule
behind each message stays where it is; only its words follow the door.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from enum import StrEnum

__all__ = ["CLI", "Allowance", "say", "spoken"]


class Allowance(StrEnum):
    """What a person allows or sets for a run, named by no door."""

    MIGRATE = "migrate"  # consent to migrate the messages (and resume a migration)
    MIGRATION = "migration"  # the way out of an interrupted migration
    TAKE_OVER = "take_over"  # manage a resource another owner manages
    LOCK_TIMEOUT = "lock_timeout"  # how long a change waits for another run's apply lock
    NO_LOCK = "no_lock"  # a change made without the apply lock


#: The CLI's words (the Action's inputs are the same flags).
CLI: Mapping[Allowance, str | None] = {
    Allowance.MIGRATE: "--migrate",
    Allowance.MIGRATION: "--migration",
    Allowance.TAKE_OVER: "--take-over",
    Allowance.LOCK_TIMEOUT: "--lock-timeout",
    Allowance.NO_LOCK: "apply --no-lock",
}

_WORDS: ContextVar[Mapping[Allowance, str | None]] = ContextVar("door_words", default=CLI)


def say(allowance: Allowance) -> str | None:
    """``allowance`` in the words of the door this run came through; None: that door
    has no way to allow it."""
    return _WORDS.get().get(allowance)


@contextlib.contextmanager
def spoken(words: Mapping[Allowance, str | None]) -> Iterator[None]:
    """The engine's messages made inside say each allowance of ``words`` in those words
    (the others as the CLI does)."""
    token = _WORDS.set({**CLI, **words})
    try:
        yield
    finally:
        _WORDS.reset(token)
