"""Two environments healed in one account undo each other's heals forever
(each heal is the other's drift, at once by its advisory). The start refuses them when
the project file says so (``cli.watch_cmd``: the same ``servers``, credentials and
``domain`` as text); :class:`Seats` refuses them when the servers say so: each
environment healed by this process, once connected, takes the seat its server tells
(:class:`~reconciler.model.server_identity.Seat`: the server or cluster, the account and
its lineage; not the user: two users of one account write the same streams, and healed
as two environments they fought until the flapping hold stopped them), and one whose
seat another environment holds is refused, at its line, before its first plan.
``nats://localhost:4222`` and ``nats://127.0.0.1:4222``, two nodes of one cluster, or two
users of one account, are one seat. Each environment takes its seat in its own task: one
whose server is down delays no other. Agents of other processes (other shards) compare seats
through the claims :mod:`.claims` writes on the server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from reconciler.errors import (
    Problem,
    ReconcileError,
    RequestTimeout,
    ServerError,
    SpecError,
    brief,
)
from reconciler.execution import lineage
from reconciler.jetstream import JetStreamClient
from reconciler.jetstream.server_identity import seat
from reconciler.model.server_identity import Seat
from reconciler.specs.project import Environment

#: Why two environments are one seat, as the refusal says it.
SAME_TEXT = "the same servers, credentials and domain"
SAME_SEAT = "one account of one server or cluster, as the servers say"


def apart_error(env: Environment, other: Environment, how: str) -> SpecError:
    """The refusal of ``env``, which writes where ``other`` does (``how`` they are one)."""
    return _refused(env, f"environments.{other.name} ({other.where})", how)


def claimed_error(
    env: Environment, other: str, how: str, peers: Mapping[str, Environment]
) -> SpecError:
    """:func:`apart_error` for an environment named by a claim read from the server
    (:mod:`.claims`: maybe forged, so escaped unless a plain name; at its line when one
    of ``peers``, the project's environments)."""
    if other in peers:
        return apart_error(env, peers[other], how)
    shown = other if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", other) else brief(other)
    return _refused(env, f"environments.{shown}", how)


def _refused(env: Environment, other: str, how: str) -> SpecError:
    message = (
        f"writes where {other} does ({how}): healing "
        "both, each would undo the other's heals; give one its own account, or "
        "lifecycle: {mode: observe}"
    )
    return SpecError([Problem(env.where, f"environments.{env.name}", message)])


#: "JetStream system temporarily unavailable": a cluster without its meta leader.
UNAVAILABLE_FOR_NOW = 10008


def unanswered(err: BaseException) -> bool:
    """Whether ``err`` says the server could not answer now (no answer in time, JetStream
    temporarily unavailable: a cluster electing its leaders), not that it cannot say:
    the seat is then asked again (the connection fails and is opened again with the
    backoff), never left out for the connection's life, which healed unchecked beside
    the shard holding the seat. An account without JetStream still does not say."""
    if isinstance(err, ServerError):
        return err.err_code == UNAVAILABLE_FOR_NOW
    return isinstance(err, RequestTimeout)


async def seat_of(client: JetStreamClient) -> Seat | None:
    """The seat the connection writes in, with its account's lineage, written first when
    the account has none (:func:`lineage.keep`, as ``plan --out`` does: two nodes of one
    cluster then read one value, two servers two); None when the server does not say (an
    account without JetStream, replies no server sends): the project file's text rule
    still holds. A server that could not answer now raises (:func:`unanswered`)."""
    try:
        found = await seat(client)
        try:
            kept: str | None = await lineage.keep(client)
        except ReconcileError:  # a user who may not write it: read, maybe none
            kept = await lineage.read(client)
    except Exception as err:  # any reply may be forged here: unknown, never a crash
        if unanswered(err):
            raise
        return None
    return replace(found, server=replace(found.server, lineage=kept))


class Seats:
    """The seat each environment healed by this process took (the last connection's)."""

    def __init__(self) -> None:
        self._taken: dict[str, tuple[Environment, Seat]] = {}

    def take(self, env: Environment, found: Seat) -> None:
        """``env`` writes in ``found``; refused (:class:`SpecError` at its line) when
        another environment holds it."""
        self._taken.pop(env.name, None)
        for other, held in self._taken.values():
            if found.same_as(held):
                raise apart_error(env, other, SAME_SEAT)
        self._taken[env.name] = (env, found)

    def leave(self, env: str) -> None:
        """``env`` writes nothing from now on (put in ``lifecycle: {mode: observe}``,
        removed by a commit): its seat is free for another environment."""
        self._taken.pop(env, None)
