"""What a server holds, as plain data: the input of the diff opposite the specs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServerInfo:
    """Facts about the connected server that decide which fields and rules apply."""

    version: str  # "2.12.3"
    api_level: int  # 0 before 2.11
    clustered: bool = False
    # servers the cluster advertises to clients (its ``connect_urls``); None when it
    # advertises none (``no_advertise``) or is not clustered
    cluster_size: int | None = None
    domain: str | None = None
    embedded: bool = False
    # where the client is connected, credentials removed ("nats://***@host:4222")
    address: str | None = None
    # the largest message the server takes (its INFO's max_payload), headers included
    max_payload: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The facts a plan records (``schemas/plan.schema.json``'s ``server``; the
        Pulumi provider's ``server`` output): the one place they are written."""
        return {
            "version": self.version,
            "api_level": self.api_level,
            "clustered": self.clustered,
            "domain": self.domain,
        }

    @classmethod
    def from_json(cls, facts: Mapping[str, Any]) -> ServerInfo:
        """The facts :meth:`to_json` wrote (read back from a saved plan or outputs)."""
        domain = facts.get("domain")
        return cls(
            version=str(facts.get("version", "0.0.0")),
            api_level=int(facts.get("api_level", 0)),
            clustered=bool(facts.get("clustered", False)),
            domain=str(domain) if domain else None,
        )

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        parts = [*self.version.split("-")[0].split("."), "0", "0", "0"][:3]
        return (int(parts[0]), int(parts[1]), int(parts[2]))


@dataclass(frozen=True)
class StreamState:
    """What a stream holds, as its INFO (or LIST) answer said, and when (server clock)."""

    messages: int = 0
    bytes: int = 0
    consumer_count: int = 0
    num_subjects: int = 0
    first_ts: str | None = None
    observed_at: str | None = None  # the answer's ``ts``: the server's clock
    first_seq: int = 0
    last_seq: int = 0
    created: str | None = None  # when the server made the stream (a fact nobody chooses)

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> StreamState:
        """The state of a StreamInfo (STREAM.INFO / STREAM.LIST item)."""
        state = info.get("state") or {}
        first = state.get("first_ts")
        return cls(
            messages=int(state.get("messages") or 0),
            bytes=int(state.get("bytes") or 0),
            consumer_count=int(state.get("consumer_count") or 0),
            num_subjects=int(state.get("num_subjects") or 0),
            first_ts=first if isinstance(first, str) and not first.startswith("0001-") else None,
            observed_at=info.get("ts") if isinstance(info.get("ts"), str) else None,
            first_seq=int(state.get("first_seq") or 0),
            last_seq=int(state.get("last_seq") or 0),
            created=info.get("created") if isinstance(info.get("created"), str) else None,
        )


def holds_leftovers(config: Mapping[str, Any], state: StreamState) -> bool:
    """Whether a stream just created from ``config`` (one that copies nothing when
    created) holds what only an older stream of its name could have stored.

    A new stream holds no message and its last sequence is one before its first
    (``first_seq``, 1 when unset). nats-server 2.15.1 can answer a stream delete without
    removing its files, and a create of the same name then brings them back
    (docs/jetstream-notes.md).
    """
    start = int(config.get("first_seq") or 1)
    return state.messages > 0 or state.last_seq > start - 1


def lacking(
    origin: Mapping[str, Any], standby: Mapping[str, Any], upto: int
) -> tuple[int, list[int]]:
    """How many sequences up to ``upto`` the origin holds and the standby does not, and
    the first few (from each side's first sequence and deleted sequences: each a
    STREAM.INFO ``state`` read with its deleted details). The one rule of "a copy holds
    what its origin holds": a failover's standby (``execution.pair_reads``), and the
    other way round, a backup's temporary mirror holding nothing its origin lost
    (``backup.memory``)."""
    origin_first = int(origin.get("first_seq") or 0)
    if not int(origin.get("messages") or 0) or not origin_first or upto < origin_first:
        return 0, []
    origin_deleted = {int(seq) for seq in origin.get("deleted") or ()}
    standby_first = int(standby.get("first_seq") or 0) or upto + 1
    before = range(origin_first, min(standby_first, upto + 1))  # trimmed off the standby
    lacking = [seq for seq in before[:5] if seq not in origin_deleted]
    count = len(before) - sum(1 for seq in origin_deleted if seq in before)
    gaps = sorted(
        int(seq)
        for seq in standby.get("deleted") or ()
        if origin_first <= int(seq) <= upto and int(seq) not in origin_deleted
    )
    return count + len(gaps), sorted(lacking + gaps)[:5]


def same_stored(theirs: Mapping[str, Any] | None, ours: Mapping[str, Any] | None) -> bool | None:
    """Whether ``ours`` is ``theirs`` (two STREAM.MSG.GET messages): a mirror keeps its
    origin's sequence, subject, headers, data and time (docs/jetstream-notes.md); None
    when ``theirs`` is None (nothing to compare with)."""
    if theirs is None:
        return None
    if ours is None:
        return False
    return all(theirs.get(key) == ours.get(key) for key in ("subject", "hdrs", "data", "time"))


@dataclass(frozen=True)
class LiveState:
    """Every stream and consumer on the server, with configs exactly as the server sent them."""

    server: ServerInfo
    streams: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> config
    stream_state: Mapping[str, StreamState] = field(default_factory=dict)
    # (stream, consumer) -> config
    consumers: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    # cluster servers named as leader or replica of some stream (offline ones included)
    peers: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        # Cheap on purpose, as Plan's: asyncio.run() (3.11/3.12) formats the repr of what
        # its coroutine returned when it puts the SIGINT handler back; the dataclass repr
        # of 21,000 consumer configs cost an export 0.15 s of CPU.
        return (
            f"LiveState(nats-server {self.server.version}: {len(self.streams)} streams, "
            f"{len(self.consumers)} consumers)"
        )
