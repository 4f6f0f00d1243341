"""The problems found in the input and the exception hierarchy of the engine (where a
value came from: :mod:`reconciler.locations`).

Every error the tool reports on purpose is a :class:`ReconcileError`; the CLI renders
it in exactly one place as one line (``FILE:LINE: message`` where a location is known)
and exits 1. Anything else reaching the CLI is a bug and is shown with a traceback only
under ``--debug``.

    ReconcileError
    ├── SpecError            invalid input files; carries every Problem found
    ├── ConnectError         cannot reach or authenticate to the server
    │   ├── ConnectRefused   the server answered and refused us (or our settings cannot connect)
    │   └── NoResponders     nothing answers a subject (no JetStream, or no stream yet)
    ├── ServerError          the server answered a request with an API error (err_code)
    │   ├── NotFound         stream / consumer not found (10059, 10014)
    │   └── PermissionDenied the user may not publish to the API subject
    ├── RequestTimeout       the server did not answer in time
    ├── UnsupportedField     a spec uses a field the connected server does not know
    ├── RefusedPlan          the verdict refuses the plan (its ``kind``: a RefusalKind)
    │   ├── SavedPlanRefused a saved plan is not what apply would run now (nothing changed)
    │   └── PolicyDenied     a policy rule at level deny does not hold (exit status 3)
    ├── ApplyFailed          a step failed mid-apply; carries what was applied and skipped
    ├── LockError            another apply holds the lease lock
    ├── MigrationStalled     a migration's copy made no progress (it resumes on the next apply)
    ├── MigrationIncomplete  a migration kept the messages but could not restore a consumer
    ├── LeftoverStream       a stream deleted and created again came back with its old messages
    └── ConcurrentChange     a KeyValue entry changed after it was planned (compare-and-set)
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from reconciler.locations import Location

#: The longest message a Problem prints.
MAX_MESSAGE = 400
#: How much of a value an error message quotes.
BRIEF_LIMIT = 80


def brief(value: Any, limit: int = BRIEF_LIMIT) -> str:
    """A value quoted for an error message: its repr, cut to ``limit`` characters (a huge
    value is never echoed back whole)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, (str, bytes, list, dict)) else len(text)
    return (
        f"{text[: limit - 1]}… ({size} characters)"
        if isinstance(value, str)
        else (f"{text[: limit - 1]}… ({size} long)")
    )


def raised_at(err: BaseException) -> str:
    """An error no check foresaw, said as its type and where it was raised
    (``KeyError at steps.py:120``), never its text: that may quote a server's reply, a
    value or a secret."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(err).__name__}{where}"


def unforeseen(err: BaseException) -> str:
    """An error no check foresaw, as every door says it (:func:`raised_at`, never its
    text): a reply no NATS server sends, or a bug."""
    return (
        f"unexpected {raised_at(err)}: a reply no NATS server sends (on an account without "
        "JetStream any client may answer its API), or a bug"
    )


class ExitStatus(IntEnum):
    """The one exit status type of every front door (the CLI, the Action, the agent's
    ``--once``, drift and the fleet job): an ``int``, so ``sys.exit`` takes it."""

    OK = 0
    ERROR = 1  # invalid specs, the server refused, a refused plan, a failed step
    CHANGES = 2  # a plan with changes (--detailed-exitcode), drift found
    POLICY_DENY = 3  # a policy rule at level deny does not hold
    INTERRUPTED = 130  # Ctrl-C / SIGINT


class RefusalKind(StrEnum):
    """Why the verdict refuses a plan: what the agent, ``/status`` and the metrics read
    (never the English text of a message)."""

    POLICY = "policy"  # a deny rule (exit status 3)
    PREVENTED = "prevented"  # lifecycle prevent_destroy / observe: no flag allows it
    BLOCKED = "blocked"  # a migration record this plan may not act on
    DATA_LOSS = "data_loss"  # a destructive step the flags do not allow
    NOT_APPROVED = "not_approved"  # nobody approved the changes (no terminal, no --yes)
    CHANGED = "changed"  # the server changed since the plan was shown or saved
    SAVED_PLAN = "saved_plan"  # a saved plan is not what apply would run now
    # a plan's own checks (FILE:LINE problems, on the plan as ``Plan.checks``):
    INVALID = "invalid"  # the specs are invalid, or invalid against the live state
    UNSUPPORTED = "unsupported"  # a field or a replica count the server does not support
    ROOM = "room"  # no room for a migration's copies: the account's, the new stream's
    WORKING = "working"  # consumers work on a stream a migration would start
    CAPACITY = "capacity"  # the account's (or server's) limits refuse part of the plan


def changes_status(changed: bool, *, detailed: bool = True) -> ExitStatus:
    """CHANGES when there are changes (a plan with ``--detailed-exitcode``, drift found),
    else OK."""
    return ExitStatus.CHANGES if changed and detailed else ExitStatus.OK


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where, which field, what."""

    location: Location | None
    path: str  # dotted field path inside the document ("" for the document itself)
    message: str
    #: Odd but accepted by every server (and converging): reported, not refused, unless
    #: the run is ``--strict``.
    warning: bool = False

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        where += "warning: " if self.warning else ""
        what = f"{self.path}: " if self.path else ""
        message = self.message
        if len(message) > MAX_MESSAGE:  # a safety net: messages quote values with brief()
            message = message[: MAX_MESSAGE - 1] + "…"
        return f"{where}{what}{message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.location.file if self.location else None,
            "line": self.location.line if self.location else None,
            "path": self.path,
            "message": self.message,
            "severity": "warning" if self.warning else "error",
        }


class ReconcileError(Exception):
    """Root of every error the tool reports on purpose.

    ``details``: lines under the message (one per resource refused, say). They are kept
    apart so that a console escapes each line on its own and keeps the line breaks
    between them: a line break inside a name or a server's text is escaped, never a new
    line of output. ``str(err)`` is the message with each detail on an indented line.
    """

    details: tuple[str, ...] = ()
    #: The CLI's exit status for this error (``reconciler.cli.main``).
    exit_code: ExitStatus = ExitStatus.ERROR

    def __init__(self, *args: object, details: Sequence[str] = ()) -> None:
        super().__init__(*args)
        self.details = tuple(details)

    @property
    def headline(self) -> str:
        """The message without its details."""
        return super().__str__()

    def __str__(self) -> str:
        return "\n".join([self.headline, *(f"  {line}" for line in self.details)])


class SpecError(ReconcileError):
    """The spec files are invalid; ``problems`` lists every problem found. ``kind``: which
    of a plan's checks found them (a verdict's refusal), else ``INVALID``."""

    kind: RefusalKind = RefusalKind.INVALID

    def __init__(self, problems: list[Problem], *, kind: RefusalKind | None = None) -> None:
        self.problems = sorted(
            problems, key=lambda p: (p.location or Location("", 0), p.path, p.message)
        )
        first = str(self.problems[0]) if self.problems else "invalid spec"
        more = len(self.problems) - 1
        super().__init__(first + (f" (and {more} more)" if more > 0 else ""))
        if kind is not None:
            self.kind = kind


class ConnectError(ReconcileError):
    """The server cannot be reached, or refused our credentials."""


class NoResponders(ConnectError):
    """Nothing subscribes to the subject a request went to (the server said so at once):
    JetStream not enabled for the account or the user, or, for a publish to a stream
    subject, no stream listening there yet. Nothing received the request."""


class ConnectRefused(ConnectError):
    """The connection failed for the configuration's reason, not the world's: what
    listens at the address answered and refused it (credentials, TLS, a greeting no NATS
    server sends), or the settings cannot make one (a URL or credentials file that is
    none; ``answered`` False: no server was asked). A server that is down (refused at
    TCP, no answer in time, a reset) is a plain :class:`ConnectError`."""

    def __init__(self, *args: object, answered: bool = True) -> None:
        super().__init__(*args)
        self.answered = answered


class RequestTimeout(ReconcileError):
    """A request got no answer within the timeout."""


class ServerError(ReconcileError):
    """The server answered with a JetStream API error."""

    def __init__(self, code: int, err_code: int, description: str, *, subject: str = "") -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        self.subject = subject
        super().__init__(f"{description} (err_code {err_code})")


class NotFound(ServerError):
    """Stream or consumer not found."""


class LeftoverStream(ReconcileError):
    """A stream this apply deleted came back, old messages and all, each time it was
    created again (the server had not removed the deleted stream's files)."""


class PermissionDenied(ServerError):
    """The connected user may not use the JetStream API subject: the server refused the
    request (a permissions violation, not an API error: no ``err_code``, 0 here)."""

    def __init__(self, message: str, *, subject: str = "") -> None:
        self.code = 403
        self.err_code = 0
        self.description = message
        self.subject = subject
        ReconcileError.__init__(self, message)


class UnsupportedField(ReconcileError):
    """A spec uses a field the connected server does not understand."""

    kind = RefusalKind.UNSUPPORTED

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class RefusedPlan(ReconcileError):
    """The verdict refuses the plan; nothing was changed. ``kind`` says why as a value
    (:class:`RefusalKind`): steps that destroy data without the flag allowing them (the
    default), steps no flag allows, a blocked migration, changes nobody approved."""

    kind: RefusalKind = RefusalKind.DATA_LOSS

    def __init__(
        self, *args: object, details: Sequence[str] = (), kind: RefusalKind | None = None
    ) -> None:
        super().__init__(*args, details=details)
        if kind is not None:
            self.kind = kind


class PolicyDenied(RefusedPlan):
    """A policy rule at level ``deny`` does not hold for the plan (docs/policy.md):
    ``plan`` exits 3 after showing it, ``apply`` refuses before any step. Exit status 3."""

    exit_code = ExitStatus.POLICY_DENY
    kind = RefusalKind.POLICY


class SavedPlanRefused(RefusedPlan):
    """A saved plan (``reconcile apply FILE``) is not applied: the file was edited or is
    not one, the specs or the server are not those it was made from, or the plan made
    again is not the saved one (docs/saved-plans.md). Nothing was changed."""

    kind = RefusalKind.SAVED_PLAN


#: What the verdict returns for each reason a plan is refused: a refused plan, or the
#: problems one of the plan's checks found (FILE:LINE), each with its ``kind``.
Refusal = RefusedPlan | SpecError | UnsupportedField


@dataclass
class ApplyReport:
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: After a refusal for room: what this apply created and removed again (still
    #: empty), and what it created and kept, with why (``execution.rollback``).
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


class ApplyFailed(ReconcileError):
    """A step failed mid-apply; ``report`` says what was applied, failed and skipped."""

    def __init__(self, message: str, report: ApplyReport) -> None:
        self.report = report
        super().__init__(message)


class LockError(ReconcileError):
    """Another apply holds the lease lock."""


class LockWaitStopped(LockError):
    """Stopped (Ctrl-C) while waiting for the lease lock: nothing was changed."""

    exit_code = ExitStatus.INTERRUPTED


class MigrationStalled(ReconcileError):
    """A migration's copy stopped moving; the data is safe and the next apply resumes."""


class MigrationIncomplete(ReconcileError):
    """A migration moved every message but could not create some consumers again."""


class ConcurrentChange(ReconcileError):
    """A compare-and-set write found another writer's value: nothing was overwritten."""
