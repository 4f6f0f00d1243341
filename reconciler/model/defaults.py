"""Server default tables: every config field the reconciler knows, per kind.

Each field records the value the server means when the field is *absent* from a config
(Go ``omitempty`` fields are left out of INFO answers when zero) and the first server
release / JetStream API level that understands it. Fields marked :data:`OPTIONAL` have no
default: absent means "not configured" (a mirror, a placement, a backoff list...).

Read against the ``StreamConfig`` / ``ConsumerConfig`` structs of nats-server v2.10.26,
v2.11.11, v2.12.8, v2.14.5 and main (2.15.0-dev), and against live servers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from reconciler.model.state import ServerInfo


class _Optional:
    """Marker: the field has no default; absent means not configured."""

    def __repr__(self) -> str:
        return "OPTIONAL"


OPTIONAL: Final = _Optional()

Version = tuple[int, int, int]
BASE: Final[Version] = (2, 10, 0)


@dataclass(frozen=True)
class Field:
    """One config field: its value when absent, and since when servers know it."""

    absent: Any
    since: Version = BASE
    api_level: int = 0  # the JetStream API level of ``since`` (0 before 2.11)

    @property
    def since_text(self) -> str:
        return f"{self.since[0]}.{self.since[1]}"


def _v211(absent: Any) -> Field:
    return Field(absent, (2, 11, 0), 1)


def _v212(absent: Any) -> Field:
    return Field(absent, (2, 12, 0), 2)


def _v214(absent: Any) -> Field:
    return Field(absent, (2, 14, 0), 4)


STREAM_FIELDS: Final[Mapping[str, Field]] = {
    "name": Field(""),
    "description": Field(""),
    "subjects": Field(OPTIONAL),
    "retention": Field("limits"),
    "max_consumers": Field(-1),
    "max_msgs": Field(-1),
    "max_bytes": Field(-1),
    "max_age": Field(0),
    "max_msgs_per_subject": Field(-1),
    "max_msg_size": Field(-1),
    "discard": Field("old"),
    "storage": Field("file"),
    "num_replicas": Field(1),
    "no_ack": Field(False),
    "duplicate_window": Field(0),
    "placement": Field(OPTIONAL),
    "mirror": Field(OPTIONAL),
    "sources": Field(OPTIONAL),
    "compression": Field("none"),
    "first_seq": Field(0),
    "subject_transform": Field(OPTIONAL),
    "republish": Field(OPTIONAL),
    "allow_direct": Field(False),
    "mirror_direct": Field(False),
    "discard_new_per_subject": Field(False),
    "sealed": Field(False),
    "deny_delete": Field(False),
    "deny_purge": Field(False),
    "allow_rollup_hdrs": Field(False),
    "consumer_limits": Field({}),
    "metadata": Field({}),
    "allow_msg_ttl": _v211(False),
    "subject_delete_marker_ttl": _v211(0),
    "allow_msg_counter": _v212(False),
    "allow_atomic": _v212(False),
    "allow_msg_schedules": _v212(False),
    "persist_mode": _v212("default"),
    "allow_batched": _v214(False),
}

CONSUMER_FIELDS: Final[Mapping[str, Field]] = {
    "durable_name": Field(""),
    "name": Field(""),
    "description": Field(""),
    "deliver_policy": Field("all"),
    "opt_start_seq": Field(0),
    "opt_start_time": Field(OPTIONAL),
    # The server's own default; clients usually send "explicit". Desired = defaults +
    # declared, so a spec that leaves ack_policy out asks for what the server does: none.
    "ack_policy": Field("none"),
    "ack_wait": Field(0),
    "max_deliver": Field(-1),
    "backoff": Field(OPTIONAL),
    "filter_subject": Field(""),
    "filter_subjects": Field(OPTIONAL),
    "replay_policy": Field("instant"),
    "rate_limit_bps": Field(0),
    "sample_freq": Field(""),
    "max_waiting": Field(0),
    "max_ack_pending": Field(0),
    "idle_heartbeat": Field(0),
    "flow_control": Field(False),
    "headers_only": Field(False),
    "max_batch": Field(0),
    "max_expires": Field(0),
    "max_bytes": Field(0),
    "deliver_subject": Field(""),
    "deliver_group": Field(""),
    "inactive_threshold": Field(0),
    "num_replicas": Field(0),
    "mem_storage": Field(False),
    "direct": Field(False),
    "metadata": Field({}),
    "pause_until": _v211(OPTIONAL),
    "priority_groups": _v211(OPTIONAL),
    "priority_policy": _v211("none"),
    "priority_timeout": _v211(0),
    "sourcing": _v214(False),
}

#: Values newer than their field: (kind, field, value) -> since when servers accept them.
VALUE_FIELDS: Final[Mapping[tuple[str, str, str], Field]] = {
    ("Consumer", "priority_policy", "prioritized"): _v212(None),
    ("Consumer", "ack_policy", "flow_control"): _v214(None),
}

#: Fields a server reports that are not configuration the reconciler manages:
#: never diffed, but kept (``preserve``) so an update sends them back unchanged.
STREAM_PASSTHROUGH: Final = frozenset({"template_owner"})

#: Stream limits where 0 (and, from 2.12 on every server, anything below -1) means -1.
UNLIMITED_WHEN_ZERO: Final = (
    "max_consumers",
    "max_msgs",
    "max_bytes",
    "max_msgs_per_subject",
    "max_msg_size",
)

DEFAULT_DUPLICATE_WINDOW: Final = 120_000_000_000  # 2 minutes in ns


def default_duplicate_window(max_age: int) -> int:
    """The duplicate window a stream gets when it sets none: 2 minutes, or its
    ``max_age`` when shorter (nanoseconds)."""
    return min(max_age, DEFAULT_DUPLICATE_WINDOW) if max_age > 0 else DEFAULT_DUPLICATE_WINDOW


DEFAULT_ACK_WAIT: Final = 30_000_000_000
DEFAULT_MAX_ACK_PENDING: Final = 1000
DEFAULT_MAX_WAITING: Final = 512
DEFAULT_PINNED_TTL: Final = 120_000_000_000
#: ack_policy flow_control (2.14) sets flow_control and this idle heartbeat (1s).
FLOW_CONTROL_HEARTBEAT: Final = 1_000_000_000
#: From 2.14 a stream with sources gets no default duplicate window.
SOURCES_SKIP_DEDUPE_SINCE: Final[Version] = (2, 14, 0)


def field_table(kind: str) -> Mapping[str, Field]:
    """The field table of a wire config: consumers, or streams (buckets are streams)."""
    return CONSUMER_FIELDS if kind == "Consumer" else STREAM_FIELDS


def server_knows(entry: Field, server: ServerInfo) -> bool:
    """Whether ``server`` understands a field (by release, or by API level)."""
    if entry.since == BASE:
        return True
    return server.version_tuple >= entry.since or server.api_level >= max(entry.api_level, 1)


@functools.lru_cache(maxsize=64)
def unknown_fields(kind: str, server: ServerInfo) -> Mapping[str, Field]:
    """The fields of ``kind`` the connected server does not understand (read-only)."""
    return MappingProxyType(
        {name: f for name, f in field_table(kind).items() if not server_knows(f, server)}
    )


@functools.lru_cache(maxsize=64)
def unknown_values(kind: str, server: ServerInfo) -> Mapping[tuple[str, str], Field]:
    """(field, value) pairs of ``kind`` whose value the connected server does not know."""
    return MappingProxyType(
        {
            (name, value): f
            for (table, name, value), f in VALUE_FIELDS.items()
            if table == kind and not server_knows(f, server)
        }
    )


@functools.lru_cache(maxsize=64)
def known_fields(kind: str, server: ServerInfo) -> Mapping[str, Field]:
    """The fields of ``kind`` the connected server understands (read-only)."""
    table = {name: f for name, f in field_table(kind).items() if server_knows(f, server)}
    return MappingProxyType(table)


def newest_server() -> ServerInfo:
    """The newest semantics the field tables know (for configs read without a server:
    snapshots that omit theirs, files being imported)."""
    tables = (*STREAM_FIELDS.values(), *CONSUMER_FIELDS.values())
    since = max(entry.since for entry in tables)
    level = max(entry.api_level for entry in tables)
    return ServerInfo(version=".".join(map(str, since)), api_level=level)
