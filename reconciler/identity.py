"""Who a resource is: one frozen :class:`ResourceRef` for every phase of the pipeline.

JetStream knows streams and consumers; KeyValue and ObjectStore buckets are streams with
a prefix (``KV_<bucket>``, ``OBJ_<bucket>``) and fixed subjects (``$KV.<bucket>.>``,
``$O.<bucket>.C.>`` / ``$O.<bucket>.M.>``). Those names and the order in which kinds are
listed live here, once; specs, plan entries, drift findings and the fleet's rows all
carry a ``ResourceRef``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["Stream", "Consumer", "KeyValue", "ObjectStore", "KeyValueEntry"]
KINDS: tuple[Kind, ...] = ("Stream", "Consumer", "KeyValue", "ObjectStore", "KeyValueEntry")
#: The order kinds are listed in: streams, buckets, consumers, then KeyValue entries.
KIND_ORDER: Mapping[str, int] = {
    "Stream": 0,
    "KeyValue": 1,
    "ObjectStore": 2,
    "Consumer": 3,
    "KeyValueEntry": 4,
}
BUCKET_KINDS: frozenset[str] = frozenset({"KeyValue", "ObjectStore"})
#: Kinds that live inside a stream (``stream`` names it): a consumer in its stream, a
#: KeyValue entry in its bucket (``stream`` is then the bucket's name).
CHILD_KINDS: frozenset[str] = frozenset({"Consumer", "KeyValueEntry"})
ENTRY = "KeyValueEntry"

KV_PREFIX = "KV_"
OBJ_PREFIX = "OBJ_"
_PREFIX: Mapping[str, str] = {"KeyValue": KV_PREFIX, "ObjectStore": OBJ_PREFIX}

#: The KeyValue bucket of the apply lock: the tool's own, never planned, listed or exported.
LOCK_BUCKET = "RECONCILE_LOCKS"
#: Streams the tool keeps for itself.
INTERNAL_STREAMS: frozenset[str] = frozenset({KV_PREFIX + LOCK_BUCKET})
#: The temporary file mirror through which a memory stream is backed up and restored
#: (``RECONCILE_BACKUP_<stream>``): the tool's own while it lives, never planned or exported.
BACKUP_PREFIX = "RECONCILE_BACKUP_"
#: Streams the server makes and owns: MQTT's ($MQTT_msgs, $MQTT_sess, $MQTT_rmsgs,
#: $MQTT_qos2in, $MQTT_out, $MQTT_sess_<hash> on older releases).
SERVER_STREAM_PREFIXES: tuple[str, ...] = ("$MQTT_",)


def tools_own(stream: str) -> bool:
    """A stream of the tool's own (its apply lock's bucket, a backup's temporary mirror):
    never user data, never backed up (a restore would make it on another server), never
    in a snapshot (the fleet's input is the environment's state, not the tool's)."""
    return stream in INTERNAL_STREAMS or is_backup_mirror(stream)


def is_reserved(stream: str) -> bool:
    """A stream no spec manages and no plan, drift report or export lists: the tool's own
    (:func:`tools_own`), or one the server makes for itself (MQTT). Its consumers go
    with it."""
    return tools_own(stream) or stream.startswith(SERVER_STREAM_PREFIXES)


def backup_mirror(stream: str) -> str:
    """The temporary file mirror of memory stream ``stream`` in a backup or restore."""
    return BACKUP_PREFIX + stream


def is_backup_mirror(stream: str) -> bool:
    """Whether ``stream`` is a backup's or restore's temporary mirror (never backed up)."""
    return stream.startswith(BACKUP_PREFIX)


#: The headers of a KeyValue write (``jetstream.kv``), which the server also stores and
#: counts against ``max_value_size`` (``planning.capacity``): the stream that must store
#: it, and the key's revision it must follow (compare-and-set).
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_REVISION = "Nats-Expected-Last-Subject-Sequence"


def kv_subject(bucket: str, key: str = ">") -> str:
    """``$KV.<bucket>.<key>``; the default key is the whole bucket's wildcard."""
    return f"$KV.{bucket}.{key}"


def object_subjects(bucket: str) -> list[str]:
    """The chunk and meta subjects of an ObjectStore bucket."""
    return [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]


def stream_of(kind: str, name: str) -> str:
    """The stream a stream or bucket is (``KeyValue`` ``config`` → ``KV_config``)."""
    return _PREFIX.get(kind, "") + name


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """A resource's identity: its kind, its name and, for consumers, its stream."""

    kind: Kind
    name: str
    stream: str | None = None  # consumers: their stream; KeyValue entries: their bucket

    @property
    def stream_name(self) -> str:
        """The JetStream stream this resource is or lives in."""
        if self.kind == "Consumer":
            if self.stream is None:
                raise ValueError(f"consumer {self.name} has no stream")
            return self.stream
        if self.kind == ENTRY:
            return stream_of("KeyValue", self.stream or "")
        return stream_of(self.kind, self.name)

    @property
    def is_child(self) -> bool:
        return self.kind in CHILD_KINDS

    @property
    def path(self) -> str:
        """``NAME`` or, for consumers, ``STREAM/NAME``."""
        return f"{self.stream}/{self.name}" if self.stream else self.name

    @property
    def label(self) -> str:
        """``Stream ORDERS``, ``Consumer ORDERS/NEW``, ``KeyValue config``."""
        return f"{self.kind} {self.path}"

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Streams, then buckets, then consumers; by stream, then name."""
        return (KIND_ORDER.get(self.kind, 9), self.stream or "", self.name)

    @property
    def is_bucket(self) -> bool:
        return self.kind in BUCKET_KINDS

    @classmethod
    def of_stream(cls, name: str, config: Mapping[str, Any]) -> ResourceRef:
        """What a live stream is: a KeyValue or ObjectStore bucket, or a plain stream.

        A ``KV_``/``OBJ_`` name alone is not enough: the subjects must be the bucket's.
        """
        subjects = list(config.get("subjects") or [])
        if name.startswith(KV_PREFIX):
            bucket = name[len(KV_PREFIX) :]
            # A bucket mirroring another has no subjects: its mirror is a KV_ stream.
            mirror = str((config.get("mirror") or {}).get("name", ""))
            if subjects == [kv_subject(bucket)] or (not subjects and mirror.startswith(KV_PREFIX)):
                return cls("KeyValue", bucket)
        if name.startswith(OBJ_PREFIX):
            bucket = name[len(OBJ_PREFIX) :]
            if sorted(subjects) == sorted(object_subjects(bucket)):
                return cls("ObjectStore", bucket)
        return cls("Stream", name)
