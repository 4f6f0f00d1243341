"""The server's JetStream advisories, read as "this resource changed, and who did it".

The agent subscribes (core NATS) to :data:`SUBJECTS`:

- ``$JS.EVENT.ADVISORY.API``: the audit of every JetStream API call
  (``io.nats.jetstream.advisory.v1.api_audit``): ``client`` (``name``, ``user`` when
  authenticated, ``acc``, ``host``, ``id``, ``server``), the API ``subject`` called and
  the request body (read only for a consumer's ``action``) and the server's reply (only
  whether it is an error: a refused call changed nothing and names no one);
- ``$JS.EVENT.ADVISORY.STREAM.{CREATED,UPDATED,DELETED}.<stream>`` and
  ``$JS.EVENT.ADVISORY.CONSUMER.{CREATED,DELETED}.<stream>.<consumer>`` (``action``
  create / modify / delete; no client).

Everything in an advisory is untrusted text: it names what to re-plan and who to credit,
and decides nothing else (the plan decides; a forged advisory costs one re-plan). Text
is cut to :data:`MAX_TEXT` characters and escaped where it is printed. Payloads as
measured on nats-server 2.15.1: docs/jetstream-notes.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.backup.layout import valid_stream_name

#: What the agent listens to.
SUBJECTS: tuple[str, ...] = (
    "$JS.EVENT.ADVISORY.API",
    "$JS.EVENT.ADVISORY.STREAM.CREATED.>",
    "$JS.EVENT.ADVISORY.STREAM.UPDATED.>",
    "$JS.EVENT.ADVISORY.STREAM.DELETED.>",
    "$JS.EVENT.ADVISORY.CONSUMER.CREATED.>",
    "$JS.EVENT.ADVISORY.CONSUMER.DELETED.>",
)
MAX_TEXT = 200

Operation = Literal["create", "update", "delete"]
#: advisory type -> metrics label (bounded)
AdvisoryType = Literal["api_audit", "stream_action", "consumer_action", "other"]

# API subject (after "$JS.API." or "$JS.<domain>.API.") -> (operation, consumer named)
_API_OPS: dict[tuple[str, ...], tuple[Operation, bool]] = {
    ("STREAM", "CREATE"): ("create", False),
    ("STREAM", "UPDATE"): ("update", False),
    ("STREAM", "DELETE"): ("delete", False),
    ("CONSUMER", "CREATE"): ("create", True),
    ("CONSUMER", "DURABLE", "CREATE"): ("create", True),
    ("CONSUMER", "DELETE"): ("delete", True),
}


@dataclass(frozen=True)
class Cause:
    """Who changed a resource, as an API audit advisory says (each text field at most
    :data:`MAX_TEXT` characters; None when the advisory did not say)."""

    operation: Operation
    client: str | None  # the client's connect name
    user: str | None
    account: str | None
    host: str | None
    at: str | None  # the advisory's timestamp (server clock, RFC 3339)

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "client": self.client,
            "user": self.user,
            "account": self.account,
            "host": self.host,
            "at": self.at,
        }

    def describe(self) -> str:
        """``client 'alice-laptop' (user bob, account $G, host 10.0.0.7) at 2026-...``:
        raw advisory text, to be escaped by whoever prints it."""
        who = f"client {self.client!r}" if self.client else "an unnamed client"
        facts = [
            f"{label} {value}"
            for label, value in (
                ("user", self.user),
                ("account", self.account),
                ("host", self.host),
            )
            if value
        ]
        inside = f" ({', '.join(facts)})" if facts else ""
        return f"{who}{inside}" + (f" at {self.at}" if self.at else "")


@dataclass(frozen=True)
class Touch:
    """An advisory that names a resource: its stream, its consumer (None for a stream or
    bucket), and who did it when the advisory says (the API audit)."""

    stream: str
    consumer: str | None
    kind: AdvisoryType
    cause: Cause | None = None
    origin: tuple[str, int | None] | None = None  # (server id, client id) of the caller

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.stream, self.consumer)


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)[:MAX_TEXT]


def _api_target(subject: str) -> tuple[Operation, str, str | None] | None:
    """``$JS.API.STREAM.UPDATE.S`` -> ("update", "S", None); None for calls that change
    no resource's config (reads, purges, message gets, ephemeral consumers)."""
    tokens = subject.split(".")
    if "API" not in tokens[:3]:
        return None
    rest = tokens[tokens.index("API") + 1 :]
    for prefix, (operation, named) in _API_OPS.items():
        if tuple(rest[: len(prefix)]) != prefix:
            continue
        args = rest[len(prefix) :]
        if named and len(args) >= 2:
            return operation, args[0], args[1]
        if not named and len(args) == 1:
            return operation, args[0], None
        return None
    return None


def _asked_update(request: Any) -> bool:
    """Whether a consumer create request asked for ``action: update`` (the body is
    untrusted text: it only chooses the word a log line uses)."""
    if not isinstance(request, str) or len(request) > 1_000_000:
        return False
    try:
        decoded = json.loads(request)
    except ValueError:
        return False
    return isinstance(decoded, dict) and decoded.get("action") == "update"


def _refused(response: Any) -> bool:
    """Whether an audit's ``response`` (the server's reply, as JSON text) is an error:
    the call changed nothing ("consumer not found"), so it names no one. Untrusted text
    too: it only decides whether someone is credited."""
    if not isinstance(response, str) or len(response) > 1_000_000 or '"error"' not in response:
        return False  # a created stream's whole info is not decoded to learn it is none
    try:
        decoded = json.loads(response)
    except ValueError:
        return False
    return isinstance(decoded, dict) and decoded.get("error") is not None


def _audit(body: dict[str, Any]) -> Touch | None:
    target = _api_target(str(body.get("subject") or ""))
    if target is None or _refused(body.get("response")):
        return None
    operation, stream, consumer = target
    if consumer is not None and operation == "create" and _asked_update(body.get("request")):
        operation = "update"  # CONSUMER.CREATE with action "update": the only word for it
    found = body.get("client")
    client: dict[str, Any] = found if isinstance(found, dict) else {}
    cause = Cause(
        operation=operation,
        client=_text(client.get("name")),
        user=_text(client.get("user")),
        account=_text(client.get("acc")),
        host=_text(client.get("host")),
        at=_text(body.get("timestamp")),
    )
    cid = client.get("id")
    origin = (
        (str(client.get("server") or body.get("server") or ""), int(cid))
        if isinstance(cid, int)
        else None
    )
    return Touch(stream, consumer, "api_audit", cause, origin)


#: Bytes every audit of a call that changes a config holds (in its API subject): an audit
#: without any is a read (a plan's own reads make thousands) and is not decoded at all.
_CHANGES = (b".CREATE.", b".UPDATE.", b".DELETE.")


def parse(subject: str, data: bytes) -> Touch | None:
    """The resource an advisory names, or None (not one of ours, not about a config, not
    JSON, or a name JetStream never accepts: any client may publish an advisory, and a
    name with a space or CR LF would be an invalid subject in the re-plan's request)."""
    touch = _parsed(subject, data)
    if touch is None or not valid_stream_name(touch.stream):
        return None
    if touch.consumer is not None and not valid_stream_name(touch.consumer):
        return None  # a consumer name obeys the same rule (schemas: consumer_name)
    return touch


def _parsed(subject: str, data: bytes) -> Touch | None:
    if subject.endswith(".ADVISORY.API") and not any(word in data for word in _CHANGES):
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    kind = str(body.get("type") or "")
    if kind.endswith(".api_audit"):
        return _audit(body)
    stream = _text(body.get("stream"))
    if stream is None:
        return None
    if kind.endswith(".stream_action"):
        return Touch(stream, None, "stream_action")
    if kind.endswith(".consumer_action") and _text(body.get("consumer")):
        return Touch(stream, _text(body.get("consumer")), "consumer_action")
    return None


def advisory_type(subject: str) -> AdvisoryType:
    """The metrics label of an advisory by its subject (bounded: four values)."""
    if subject.endswith(".ADVISORY.API"):
        return "api_audit"
    if ".ADVISORY.STREAM." in subject:
        return "stream_action"
    if ".ADVISORY.CONSUMER." in subject:
        return "consumer_action"
    return "other"
