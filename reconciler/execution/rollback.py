"""What an apply refused for resources removes again: only what it created itself, and
only while still empty (docs/capacity.md).

A plan checks what it can know of the account's and the server's limits; where the
server's own are unknown (no monitoring endpoint, no system account user named), the
server may still refuse a step for room (err 10047, ...) after earlier steps created
streams. Then apply removes again each stream (or bucket) and consumer that *this*
apply created, read back first: it must still be the one this apply created (the
``created`` time the server answered the create with), hold no message and never have
held one (``last_seq`` 0), and a stream must carry no consumer this apply did not
create. Anything else stays, and is said. A message published between the read-back
and the delete is the one window left (one round trip).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.errors import NotFound, ReconcileError, ServerError
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient

#: The server's refusals for room or limits: storage (10047), memory (10028), streams
#: (10027), consumers (10026), resources (10023), max_bytes required (10113), a stream
#: over the largest allowed (10122), max_ack_pending over the account's (10121), no
#: peers with room (10005), a message over a stream's limit (10054, 10077).
FOR_ROOM = frozenset({10047, 10028, 10027, 10026, 10023, 10113, 10122, 10121, 10005, 10054, 10077})


def refused_for_room(err: BaseException) -> bool:
    return isinstance(err, ServerError) and err.err_code in FOR_ROOM


@dataclass(frozen=True)
class Made:
    """A stream, bucket or consumer this apply created, as the server answered it."""

    ref: ResourceRef
    label: str
    created: str  # the server's ``created`` time of what this apply made


@dataclass
class Rollback:
    """What was removed again, and what stayed and why."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def created_of(reply: Mapping[str, Any] | None) -> str | None:
    """The ``created`` time of a create's answer (a StreamInfo or ConsumerInfo)."""
    value = (reply or {}).get("created")
    return value if isinstance(value, str) and value else None


async def roll_back(client: JetStreamClient, made: Sequence[Made]) -> Rollback:
    """Remove again what ``made`` lists, consumers first, each only if still its own and
    empty (read back first); never anything else."""
    done = Rollback()
    consumers = [m for m in made if m.ref.kind == "Consumer"]
    streams = [m for m in made if m.ref.kind != "Consumer"]
    ours: dict[str, set[str]] = {}
    for item in consumers:
        ours.setdefault(item.ref.stream_name, set()).add(item.ref.name)
    going = {m.ref.stream_name for m in streams}
    for item in consumers:
        if item.ref.stream_name not in going:  # else it goes with its stream
            await _one(done, item, _consumer_check(client, item))
    for item in streams:
        await _one(done, item, _stream_check(client, item, ours.get(item.ref.stream_name, set())))
    return done


async def _one(done: Rollback, item: Made, check: Any) -> None:
    try:
        why = await check
    except NotFound:
        return  # gone already
    except ReconcileError as err:
        done.kept.append(f"{item.label} (not read back: {err})")
        return
    if why:
        done.kept.append(f"{item.label} ({why})")
    else:
        done.removed.append(item.label)


async def _stream_check(client: JetStreamClient, item: Made, ours: set[str]) -> str | None:
    """Why the stream stays, or None once deleted."""
    name = item.ref.stream_name
    info = await client.stream_info(name)
    if created_of(info) != item.created:
        return "no longer the stream this apply created"
    state = info.get("state") or {}
    if state.get("messages") or state.get("last_seq"):
        return "it has stored messages since"
    if int(state.get("consumer_count") or 0):
        others = set(await client.consumer_names(name)) - ours
        if others:
            return "it has consumers this apply did not create"
    await client.delete_stream(name)
    return None


async def _consumer_check(client: JetStreamClient, item: Made) -> str | None:
    """Why the consumer stays, or None once deleted."""
    stream, name = item.ref.stream_name, item.ref.name
    info = await client.consumer_info(stream, name)
    if created_of(info) != item.created:
        return "no longer the consumer this apply created"
    delivered = info.get("delivered") or {}
    if delivered.get("consumer_seq") or info.get("num_ack_pending"):
        return "it has delivered messages since"
    await client.delete_consumer(stream, name)
    return None
