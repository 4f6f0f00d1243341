"""A stream's standby: the environment that keeps a mirror of it, ready to take over.

``standby:`` on a Stream spec (``schemas/stream.schema.json``; docs/dr.md)::

    standby:
      primary: east        # the project environment that takes the writes today
      environment: west    # the project environment that keeps the mirror
      api: $JS.east.API    # optional: the primary's JetStream API as the standby reaches it
      deliver: dr.ORDERS   # optional: the subject the primary delivers the mirror on

In ``environment`` the stream is planned as a mirror of the primary's (no subjects, its
consumers created only by ``reconcile failover``); in every other environment it is the
stream the spec declares. ``api`` defaults to ``$JS.<primary's domain>.API`` (two
JetStream domains joined by a leafnode); two accounts name the prefix under which the
standby's account imports the primary's API, and the deliver subject it imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.errors import Problem
from reconciler.locations import Location

__all__ = ["Standby", "standby_of"]


@dataclass(frozen=True, slots=True)
class Standby:
    """Where a stream's writes go today (``primary``) and where its mirror is kept."""

    primary: str
    environment: str
    api: str | None = None
    deliver: str | None = None
    where: str = ""  # FILE:LINE of the ``standby:`` block
    #: The origin's declared subjects, kept by the mirror's spec in the environment that
    #: keeps the mirror (``planning.standby.for_environment``; never cached): no other
    #: stream there may listen on them.
    subjects: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain data (the spec cache)."""
        return {
            "primary": self.primary,
            "environment": self.environment,
            "api": self.api,
            "deliver": self.deliver,
            "where": self.where,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Standby:
        api, deliver = raw.get("api"), raw.get("deliver")
        return cls(
            primary=str(raw["primary"]),
            environment=str(raw["environment"]),
            api=None if api is None else str(api),
            deliver=None if deliver is None else str(deliver),
            where=str(raw.get("where", "")),
        )


def standby_of(
    body: Mapping[str, Any], where: Callable[[str], Location], problems: list[Problem]
) -> Standby | None:
    """The ``standby`` block of a Stream document (already valid against its schema);
    a stream that cannot have one (a mirror, an external stream, one without subjects
    of its own) is a problem at the block's line."""
    raw = body.get("standby")
    if not isinstance(raw, Mapping):
        return None
    standby = Standby(
        primary=str(raw["primary"]),
        environment=str(raw["environment"]),
        api=str(raw["api"]) if raw.get("api") else None,
        deliver=str(raw["deliver"]) if raw.get("deliver") else None,
        where=str(where("standby")),
    )
    message = ""
    if standby.primary == standby.environment:
        message = "primary and environment are the same environment: a standby is another one"
    elif body.get("mirror"):
        message = "a mirror cannot declare a standby (declare it on the stream it mirrors)"
    elif body.get("external"):
        message = "an external stream is managed elsewhere: it cannot declare a standby"
    elif not body.get("subjects"):
        message = "a stream with a standby declares its subjects (the standby takes them over)"
    elif body.get("allow_msg_counter"):
        message = (
            "a counter stream (allow_msg_counter) cannot have a standby: the server refuses "
            "a mirror that counts, and a promotion cannot make one count"
        )
    if message:
        problems.append(Problem(where("standby"), "standby", message))
        return None
    return standby
