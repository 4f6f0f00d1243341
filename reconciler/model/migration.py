"""Data-preserving migration of a stream's immutable fields: the rules (pure).

An update cannot change a stream's storage, its retention to or from ``workqueue``, turn
``sealed``/``deny_delete``/``deny_purge``/``allow_msg_ttl`` off, or change ``persist_mode``
(:func:`reconciler.model.diff.replace_reasons`). A replace deletes the messages; a
migration keeps them by moving them twice with JetStream's own sourcing:

1. ``copy``: a temporary stream (:func:`temp_name`) sources the stream while it keeps
   taking publishes.
2. ``handover``: the stream's subjects move to a placeholder, the temporary stream takes
   the last messages, the durable consumers' positions are recorded on it as consumers of
   its own, and it takes the subjects: publishers write to it from then on.
3. ``serving``: the old stream is deleted and created again with the desired config, no
   subjects yet, and its consumers restored at their positions (nats-server 2.14+).
4. ``refill``: the new stream sources the temporary one while publishers still write there.
5. ``cutover``: the temporary stream's subjects move to a placeholder, the new stream takes
   the last messages and the desired subjects; the temporary stream is deleted.

Publishes are refused (no stream answers: the publisher sees an error) only inside the
two handovers, which wait for the last few messages, never for the whole stream. The
temporary stream carries a :class:`Record` in its metadata (the phase, the target config,
what the old stream published on), so a new apply finds an interrupted migration and
finishes it from the server's state alone.

What changes: sequence numbers (kept when the old stream had no gaps: the new one starts
at the old first sequence), each message's timestamp (the time it was copied back, so
``max_age`` counts from the migration), and a ``Nats-Stream-Source`` header naming the
temporary stream on every message copied. Subjects, payloads, the other headers
(``Nats-Msg-Id`` included) and the order are kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.model.normalize import nanoseconds_between
from reconciler.model.state import ServerInfo, StreamState
from reconciler.model.values import printable

#: Metadata key of the temporary stream: the migration's record (JSON).
RECORD_KEY = "io.jetstream-gitops/migration"
#: Metadata key of a new stream still being filled: the temporary stream it sources.
FILLING_KEY = "io.jetstream-gitops/migration-source"
#: Metadata key of a consumer copy on the temporary stream: the consumer to restore.
CONSUMER_KEY = "io.jetstream-gitops/migrated-consumer"
TEMP_PREFIX = "MIGRATING_"
#: Subjects nothing publishes on: where a stream's subjects go while another takes them.
PLACEHOLDER = "_jetstream_gitops.migrating"
#: A source filter that matches nothing: a source that copies nothing yet.
NOTHING = PLACEHOLDER + ".nothing"
PHASES = ("copy", "handover", "serving", "refill", "cutover")
#: The ways out of an interrupted migration whose target is no longer what the specs
#: declare (``--migration``): finish it to its recorded target, go back to the old
#: stream's config, or go on to the config declared now.
CHOICES = ("resume", "rollback", "continue")
#: nats-server release with CONSUMER.RESET (a consumer moved to a sequence).
RESET_VERSION = (2, 14, 0)
#: nats-server release where an update turns a mirror into a plain stream: from there on
#: both copies are mirrors, which keep sequences, timestamps and headers exactly.
MIRROR_VERSION = (2, 12, 0)
#: The header a copy adds to each message: ``NAME SEQ ...`` of the stream it came from.
SOURCE_HEADER = "Nats-Stream-Source"
#: Bytes a copy adds to each message: the ``Nats-Stream-Source`` header and its framing.
HEADER_OVERHEAD = 64

#: The fields that say what a stream takes publishes on; the record keeps the old ones.
SUBJECT_FIELDS = ("subjects", "subject_transform", "republish", "duplicate_window")
#: Fields the temporary stream never takes from the old one.
_TEMP_DROPS = (
    *SUBJECT_FIELDS,
    "mirror",
    "sources",
    "first_seq",
    "max_msgs",
    "max_bytes",
    "max_age",
    "max_msgs_per_subject",
    "max_msg_size",
    "max_consumers",
    "discard",
    "discard_new_per_subject",
    "deny_delete",
    "deny_purge",
    "sealed",
    "allow_direct",
    "mirror_direct",
    "consumer_limits",
    "subject_delete_marker_ttl",
    "metadata",
    "retention",
)


def temp_name(stream: str) -> str:
    """The temporary stream of ``stream``'s migration."""
    return TEMP_PREFIX + stream


def placeholder(stream: str) -> str:
    """The subject a stream listens on while it must take no publishes."""
    return f"{PLACEHOLDER}.{stream}"


@dataclass(frozen=True)
class Record:
    """What a migration needs to finish after a crash, kept on its temporary stream.

    Anyone who can create a stream can write one, so a record is data, never authority:
    the planner acts on it only when it is bound to this run's owner and to the streams
    it names (:func:`binding_problem`), the run consents (``--migrate``) and the target is
    what the specs declare now (or the person chose another way out)."""

    stream: str
    phase: str
    target: Mapping[str, Any]  # the desired wire config of the new stream
    subjects: Mapping[str, Any]  # the old stream's SUBJECT_FIELDS
    first_seq: int = 1  # the old stream's first sequence: the new one starts there
    keep_positions: bool = True  # the server can reset consumers to a sequence
    mirrors: bool = True  # the copies are mirrors (2.12+), else sources
    owner: str | None = None  # the project (owner) whose apply started it
    origin: Mapping[str, Any] = field(default_factory=dict)  # the old stream's config
    created: str | None = None  # the old stream's ``created`` (server-set)
    temp_created: str | None = None  # the temporary stream's ``created``, once known
    stream_created: str | None = None  # the new stream's ``created``, once made

    def at(self, phase: str) -> Record:
        return replace(self, phase=phase)

    def metadata(self) -> dict[str, str]:
        body = {
            "stream": self.stream,
            "phase": self.phase,
            "target": self.target,
            "subjects": self.subjects,
            "first_seq": self.first_seq,
            "keep_positions": self.keep_positions,
            "mirrors": self.mirrors,
            "owner": self.owner,
            "origin": self.origin,
            "created": self.created,
            "temp_created": self.temp_created,
            "stream_created": self.stream_created,
        }
        return {RECORD_KEY: json.dumps(body, sort_keys=True, separators=(",", ":"))}

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Record | None:
        """The record a temporary stream's config carries; None for any other stream."""
        raw = (config.get("metadata") or {}).get(RECORD_KEY)
        if not isinstance(raw, str):
            return None
        try:
            body = _parsed(raw)
            phase = str(body["phase"])
            return cls(
                stream=str(body["stream"]),
                phase=phase if phase in PHASES else PHASES[0],
                target=dict(body["target"]),
                subjects=dict(body.get("subjects") or {}),
                first_seq=int(body.get("first_seq") or 1),
                keep_positions=bool(body.get("keep_positions", True)),
                mirrors=bool(body.get("mirrors", False)),
                owner=_text(body.get("owner")),
                origin=dict(body.get("origin") or {}),
                created=_text(body.get("created")),
                temp_created=_text(body.get("temp_created")),
                stream_created=_text(body.get("stream_created")),
            )
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            return None  # OverflowError: a first_seq of 1e400 (JSON's infinity)


def _parsed(raw: str) -> Any:
    """JSON anyone may have written (a stream's or consumer's metadata): None when it is
    not JSON, or nested too deep to parse (``[`` x 50,000 raised RecursionError, and
    every plan of the account ended in a traceback)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def is_filling(config: Mapping[str, Any] | None, stream: str) -> bool:
    """Whether a live stream is the new stream of ``stream``'s migration, still filled
    from the temporary stream."""
    return config is not None and (config.get("metadata") or {}).get(FILLING_KEY) == temp_name(
        stream
    )


#: Phases in which the stream of that name is still the old one.
_OLD_STREAM_PHASES = ("copy", "handover", "serving")


def binding_problem(
    record: Record,
    *,
    stream: str,
    owner: str,
    temp_created: str | None,
    live: Mapping[str, Any] | None,
    live_created: str | None,
) -> str | None:
    """Why ``record`` (found on ``MIGRATING_<stream>``) is not a migration this owner's
    apply started on this very stream; None when it is.

    It must name ``stream`` and ``owner``, and agree with facts the server sets and no
    writer chooses: the temporary stream's ``created`` (once the record holds it), and
    the ``created`` of the stream named ``stream``: the old stream's while it exists,
    the new stream's once it is made. A record that does not agree is someone else's
    (or left from another life of the stream): the planner refuses to act on it."""
    if record.stream != stream:
        return f"its record names stream {record.stream!r}, not {stream!r}"
    if record.owner != owner:
        by = "no owner" if record.owner is None else f"owner {record.owner!r}"
        return f"its record was written for {by}, not {owner!r}"
    if not record.origin or record.created is None:
        return "its record does not say which stream it was started on"
    if record.temp_created is not None and record.temp_created != temp_created:
        return f"{temp_name(stream)} is not the stream its record was written on"
    if record.temp_created is None and record.phase != "copy":
        return f"its record is in phase {record.phase} but does not know {temp_name(stream)}"
    return _stream_problem(record, stream, live, live_created, temp_created)


def _stream_problem(
    record: Record,
    stream: str,
    live: Mapping[str, Any] | None,
    live_created: str | None,
    temp_created: str | None,
) -> str | None:
    """Whether the stream named ``stream`` is where ``record``'s phase says it is. The
    server's ``created`` times also order them: the old stream was made before the
    temporary one, the new stream after it (a record edited to take the old stream for
    a finished new one deleted the temporary stream and the 50 messages only it held)."""
    phase = record.phase
    newer = _made_after(live_created, temp_created)
    if live is None:
        ok = phase == "serving"  # the old stream deleted, the new one not made yet
    elif is_filling(live, stream):
        made = record.stream_created
        ok = (
            newer is not False
            and phase in ("serving", "refill", "cutover")
            and (live_created == made or (made is None and phase == "serving"))
        )
    else:
        made = record.stream_created
        ok = (
            newer is not True and phase in _OLD_STREAM_PHASES and live_created == record.created
        ) or (
            newer is not False and phase == "cutover" and made is not None and live_created == made
        )
    if ok:
        return None
    return f"stream {stream} is not the stream its record was written for (phase {phase})"


def _made_after(created: str | None, temp_created: str | None) -> bool | None:
    """Whether a stream made at ``created`` was made after the temporary stream (by the
    server's clock); None when a time is unknown (then the other facts decide)."""
    if created is None or temp_created is None:
        return None
    gap = nanoseconds_between(temp_created, created)
    return None if gap is None else gap > 0


def finished(record: Record, live: Mapping[str, Any] | None) -> bool:
    """Whether the migration is done but for deleting its temporary stream (its new
    stream has its final config): it can only be resumed."""
    return record.phase == "cutover" and live is not None and not is_filling(live, record.stream)


def copies_back(record: Record, target: Mapping[str, Any]) -> bool:
    """Whether going on to ``target`` copies the temporary stream into a new stream: all
    but a rollback before the temporary stream takes the publishes (``copy``,
    ``handover``), where the old stream, which holds every message, takes its subjects
    back and the temporary stream is deleted."""
    return not (record.phase in ("copy", "handover") and dict(target) == dict(record.origin))


def is_temp(config: Mapping[str, Any]) -> bool:
    """Whether a live stream is a migration's temporary stream."""
    return Record.of(config) is not None


def blockers(desired: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """Why sourcing cannot carry this stream's messages to ``desired`` (empty: it can)."""
    reasons = []
    for side, config in (("the stream", live), ("the new config", desired)):
        if config.get("mirror"):
            reasons.append(
                f"{side} is a mirror: its messages are its origin's, and a mirror cannot "
                "take the copy back"
            )
        if config.get("sources"):
            reasons.append(
                f"{side} sources other streams: the new stream could not tell where each "
                "source had got to"
            )
        if config.get("allow_msg_counter"):
            reasons.append(f"{side} is a counter stream: copies of counters are not counters")
        if config.get("allow_msg_schedules"):
            reasons.append(f"{side} holds message schedules: a copy would fire them again")
    if live.get("name") != desired.get("name"):
        reasons.append("the name changes")
    return list(dict.fromkeys(reasons))


def overflow(
    desired: Mapping[str, Any], state: StreamState | None, live: Mapping[str, Any] | None = None
) -> str | None:
    """Why the new stream would refuse part of the copy (``discard: new`` limits): the
    copy would stall there for good."""
    if state is None or desired.get("discard") != "new":
        return None
    max_msgs, max_bytes = desired.get("max_msgs", -1), desired.get("max_bytes", -1)
    if isinstance(max_msgs, int) and 0 <= max_msgs < state.messages:
        return f"max_msgs {max_msgs} with discard new cannot take its {state.messages} messages"
    copied = copy_bytes(state)
    if isinstance(max_bytes, int) and 0 <= max_bytes < copied:
        return f"max_bytes {max_bytes} with discard new cannot take its {copied} bytes"
    return _subject_overflow(desired, state, live or {})


def _subject_overflow(
    desired: Mapping[str, Any], state: StreamState, live: Mapping[str, Any]
) -> str | None:
    """``discard_new_per_subject``: a subject holding more than the new per-subject limit
    stops the copy. None when no subject can: the stream holds no more messages than the
    limit, or its own per-subject limit is no higher."""
    per, held = desired.get("max_msgs_per_subject", -1), live.get("max_msgs_per_subject", -1)
    if not desired.get("discard_new_per_subject") or not isinstance(per, int) or per < 0:
        return None
    if state.messages <= per or (isinstance(held, int) and 0 <= held <= per):
        return None
    where = f" on {state.num_subjects} subjects" if state.num_subjects else ""
    return (
        f"max_msgs_per_subject {per} with discard_new_per_subject cannot take a subject "
        f"holding more than {per} (it holds {state.messages} messages{where}, and its "
        "own per-subject limit is higher)"
    )


def copy_bytes(state: StreamState | None) -> int:
    """What a copy of the stream takes: its bytes and a header per message."""
    if state is None:
        return 0
    return state.bytes + state.messages * HEADER_OVERHEAD


def copied_by(
    stream: str, streams: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[tuple[str, str]]:
    """The streams of ``streams`` (name, config) that mirror or source ``stream``, each as
    (name, ``mirrors it`` or ``sources it``). A migration deletes the stream and creates
    it again: a stream sourcing it copies every message again (measured: 100 -> 200), and
    a mirror follows sequence numbers a migration on older servers does not keep. A
    source in another domain or account (``external``) names another stream; the
    migration's own temporary stream is not counted."""
    found = set()
    for name, config in streams:
        if name == temp_name(stream):
            continue
        mirror = config.get("mirror") or {}
        if mirror.get("name") == stream and not mirror.get("external"):
            found.add((name, "mirrors it"))
        elif any(
            s.get("name") == stream and not s.get("external") for s in config.get("sources") or []
        ):
            found.add((name, "sources it"))
    return sorted(found)


#: Retentions in which an acknowledgement deletes the message.
ACKS_DELETE = frozenset({"workqueue", "interest"})
#: A consumer that delivered a message or had one acknowledged this recently (by the
#: server's clock) is working: a worker between its last ack and its next pull shows
#: nothing else. Sampled alone, the other signs let 1 migration in 20 start beside a live
#: worker; with it, none in 40.
IDLE_AFTER_NS = 1_000_000_000


def working(info: Mapping[str, Any]) -> str | None:
    """What a consumer (its ConsumerInfo) is doing now, when anything: messages delivered
    and not yet acknowledged, pull requests waiting, a push subscriber bound, a delivery
    or an acknowledgement within the last second. On a ``workqueue`` or ``interest``
    stream each acknowledgement deletes a message the migration's copy already holds,
    and the copy brings it back (measured: 28-53 jobs done twice), so such a stream is
    migrated only while its consumers are idle."""
    doing = []
    unacked = int(info.get("num_ack_pending") or 0)
    if unacked:
        doing.append(f"{unacked} unacknowledged")
    waiting = int(info.get("num_waiting") or 0)
    if waiting:
        doing.append(f"{waiting} pull request{'s' if waiting > 1 else ''} waiting")
    if info.get("push_bound"):
        doing.append("a push subscriber bound")
    since = _idle_for(info)
    if since is not None and since < IDLE_AFTER_NS:
        doing.append(f"active {since // 1_000_000} ms ago")
    return ", ".join(doing) or None


def _idle_for(info: Mapping[str, Any]) -> int | None:
    """Nanoseconds since the consumer's last delivery or acknowledgement, by the
    server's clock (the info's ``ts``); None when it never had one or the server does
    not say."""
    now = info.get("ts")
    seen = [
        stamp
        for part in ("delivered", "ack_floor")
        if isinstance(stamp := (info.get(part) or {}).get("last_active"), str)
    ]
    if not isinstance(now, str) or not seen:
        return None
    ages = [age for stamp in seen if (age := nanoseconds_between(stamp, now)) is not None]
    return max(min(ages), 0) if ages else None


#: nats-server release with CONSUMER.PAUSE: a migration holds the old stream's consumers.
PAUSE_VERSION = (2, 11, 0)


def holds_consumers(retention: object, server: ServerInfo) -> bool:
    """Whether a migration pauses the old stream's consumers from the moment its copy
    exists until they are restored on the new stream: on a ``workqueue`` or ``interest``
    stream, where an acknowledgement deletes a message the copy already holds. The plan
    refuses while a consumer works (:func:`working`); a worker started after the plan
    acknowledged jobs the copy brought back (measured: 763 of 2,000 jobs back in the
    stream, below the consumer's position, and 7 done twice). Paused, it does nothing."""
    return str(retention) in ACKS_DELETE and server.version_tuple >= PAUSE_VERSION


def unheld(live: Mapping[str, Any], server: ServerInfo) -> str | None:
    """The plan's warning when a migration cannot hold the consumers of a ``workqueue``
    or ``interest`` stream (nats-server before 2.11, no ``CONSUMER.PAUSE``): measured on
    2.10, a worker started during the migration did 961 of 2,000 jobs twice."""
    retention = live.get("retention")
    if str(retention) not in ACKS_DELETE or holds_consumers(retention, server):
        return None
    return (
        f"nats-server {server.version} cannot pause consumers: a worker started during the "
        "migration would do jobs again (its acknowledgements are undone by the copy); keep "
        "the workers stopped until it is over"
    )


def can_keep_positions(server: ServerInfo) -> bool:
    return server.version_tuple >= RESET_VERSION


def can_mirror(server: ServerInfo) -> bool:
    return server.version_tuple >= MIRROR_VERSION


#: Deliver policies CONSUMER.RESET accepts (the server refuses it for the others).
RESETTABLE = frozenset({"all", "by_start_sequence", "by_start_time"})


def resettable(config: Mapping[str, Any]) -> bool:
    """Whether a consumer can be moved to a sequence: restored before the copy back, at
    its position. The others (``new``, ``last``, ``last_per_subject``) are created once
    the copy is complete, and deliver what is published after the migration."""
    return str(config.get("deliver_policy") or "all") in RESETTABLE


# --- the configs of each phase ------------------------------------------------------------


def temp_config(live: Mapping[str, Any], record: Record) -> dict[str, Any]:
    """The temporary stream: the old one's storage, replicas and placement, every limit
    lifted, a mirror of the old stream (or sourcing it, before 2.12), no subjects and no
    duplicate window (a window would drop messages that repeat a ``Nats-Msg-Id`` outside
    the old stream's window)."""
    config = {key: value for key, value in live.items() if key not in _TEMP_DROPS}
    config.update(
        name=temp_name(record.stream),
        retention="limits",
        allow_rollup_hdrs=True,
        metadata=record.metadata(),
    )
    config.update(_copy_of(record.stream, record.mirrors))
    return config


def _copy_of(origin: str, mirrors: bool, *, waiting: bool = False) -> dict[str, Any]:
    """The fields that make a stream copy ``origin``: a mirror, or one source (through a
    filter matching nothing while ``waiting``)."""
    if mirrors:
        return {"mirror": {"name": origin}}
    source: dict[str, Any] = {"name": origin}
    if waiting:
        source["filter_subject"] = NOTHING
    return {"sources": [source]}


def copies_when_created(config: Mapping[str, Any]) -> bool:
    """Whether a stream created from ``config`` may hold messages at once: a mirror, or a
    source not held back behind a filter matching nothing, copies as soon as it exists."""
    sources = config.get("sources") or []
    return bool(config.get("mirror")) or any(s.get("filter_subject") != NOTHING for s in sources)


def serving_config(
    temp_live: Mapping[str, Any],
    record: Record,
    state: Mapping[str, Any] | None = None,
    fullest: int = 0,
) -> dict[str, Any]:
    """The temporary stream once it takes the publishes, no source: the subject fields
    of the target (what publishers meet once the migration is over), never the
    record's own copy of the old ones, and the limits by which the target refuses
    publishes (:func:`refusing_limits`; ``state``: what the temporary stream holds,
    ``fullest``: the most messages it holds on one subject, read when it matters).
    The target is checked against the specs before anything acts on a record; the
    recorded subject fields are checked by nothing (edited to a transform ``orders.>
    -> stolen.>``, the messages published meanwhile ended in the stream under
    ``stolen.*``)."""
    config = {k: v for k, v in temp_live.items() if k not in (*SUBJECT_FIELDS, "sources", "mirror")}
    fields = {key: record.target.get(key) for key in SUBJECT_FIELDS}
    config.update({k: v for k, v in fields.items() if v not in (None, [], {})})
    storage = str(temp_live.get("storage") or "file")
    growth = counted_more(storage, record.target, record.mirrors, temp_name(record.stream))
    config.update(refusing_limits(record.target, storage, state or {}, growth, fullest))
    config["metadata"] = _with_metadata(temp_live, record.at("serving").metadata())
    return config


#: How many bytes each storage counts a message beyond its subject, headers and
#: payload, without and with headers (nats-server's memStoreMsgSize and
#: fileStoreMsgSize; measured on 2.10 to 2.15: a file stream counts a message 14 bytes
#: more than a memory one, 18 with headers). Both storages of a release refuse at the
#: same edge (under max_bytes up to 2.12, at or under from 2.14), so a bound that holds
#: with one holds with the other.
_OVERHEAD = {"file": (30, 34), "memory": (16, 16)}
#: The most digits of a sequence number (a uint64).
_SEQ_DIGITS = 20


def counted_more(storage: str, target: Mapping[str, Any], mirrors: bool, temp: str) -> int:
    """The most bytes the new stream (``target``) counts a message more than the
    temporary stream (``storage``) does; 0 or less when it never counts one more. A
    mirror copies the headers as they are; a source (before 2.12) gives each message a
    ``Nats-Stream-Source`` header naming ``temp`` (measured on 2.10 and 2.11: 6
    messages of 378 bytes in MIGRATING_ORDERS were 588 bytes copied back)."""
    new = _OVERHEAD.get(str(target.get("storage") or "file"), _OVERHEAD["file"])
    held = _OVERHEAD.get(storage, _OVERHEAD["file"])
    header = f"NATS/1.0\r\n{SOURCE_HEADER}: {temp} {'9' * _SEQ_DIGITS} > >\r\n\r\n"
    added = 0 if mirrors else len(header)
    return max(new[headers or not mirrors] - held[headers] for headers in (False, True)) + added


def per_subject_limit(target: Mapping[str, Any]) -> int | None:
    """``max_msgs_per_subject`` when ``target`` refuses a subject's publishes past it
    (``discard: new`` with ``discard_new_per_subject``); None otherwise (past it the
    subject's oldest message goes: nothing stalls there)."""
    per = target.get("max_msgs_per_subject")
    if target.get("discard") != "new" or not target.get("discard_new_per_subject"):
        return None
    return per if isinstance(per, int) and per > 0 else None


def refusing_limits(
    target: Mapping[str, Any],
    storage: str,
    state: Mapping[str, Any],
    growth: int,
    fullest: int = 0,
) -> dict[str, Any]:
    """The ``discard: new`` limits of ``target`` the temporary stream takes while it
    takes the publishes, so that it refuses what the stream would (the publisher gets an
    error). Without them it took every publish: a stream of ``max_msgs: 3000`` took
    21,951 more during a migration, and the copy back stalled at 3,000 for good (the
    new stream refuses the rest; a resumed apply stalled there again).

    Never below what the temporary stream holds (``state``; ``fullest``: the most it
    holds on one subject): lowering a limit under it deletes messages. ``max_bytes``
    as is when the new stream never counts a message more than the temporary stream
    (``growth``: :func:`counted_more`), else bounded (:func:`_bytes_bound`)."""
    if target.get("discard") != "new":
        return {}
    out: dict[str, Any] = {}
    held, held_bytes = int(state.get("messages") or 0), int(state.get("bytes") or 0)
    max_msgs, max_bytes = target.get("max_msgs", -1), target.get("max_bytes", -1)
    if isinstance(max_msgs, int) and max_msgs > 0:
        out["max_msgs"] = max(max_msgs, held)
    if isinstance(max_bytes, int) and max_bytes > 0 and growth <= 0:
        out["max_bytes"] = max(max_bytes, held_bytes)
    elif isinstance(max_bytes, int) and max_bytes > 0:
        out.update(_bytes_bound(max_bytes, growth, held, held_bytes, out.get("max_msgs")))
    per = per_subject_limit(target)
    if per is not None:
        out.update(max_msgs_per_subject=max(per, fullest), discard_new_per_subject=True)
    return {**out, "discard": "new"} if out else {}


def _bytes_bound(
    max_bytes: int, growth: int, held: int, held_bytes: int, max_msgs: int | None
) -> dict[str, int]:
    """``max_msgs`` and ``max_bytes`` of a temporary stream whose messages the new
    stream counts up to ``growth`` bytes more each (a memory one for a file target, or
    one copied back by sources): ``max_bytes + growth * max_msgs`` is at most the
    target's ``max_bytes``, so the new stream holds whatever it takes, and the copy back
    never stalls. What the new stream has room for once the held messages are in is
    split between the two as the held messages are (their mean size; none held: half
    each): messages like them are refused about where the stream would refuse them,
    smaller ones at the count, a little earlier (a refusal, never a loss)."""
    room = max(max_bytes - held_bytes - growth * held, 0)
    size = held_bytes // held if held else growth
    count = held + room // (size + growth)
    if max_msgs is not None:
        count = min(count, max_msgs)
    return {"max_msgs": count, "max_bytes": max(max_bytes - growth * count, held_bytes)}


def planned_limits(
    target: Mapping[str, Any], storage: str, state: StreamState | None, mirrors: bool
) -> dict[str, Any]:
    """The limits the temporary stream (in ``storage``) takes at the handover
    (:func:`refusing_limits`), figured from what the migration holds now (``state``);
    the handover sets them from what the copy holds then."""
    growth = counted_more(storage, target, mirrors, temp_name(str(target.get("name"))))
    held = {"messages": state.messages, "bytes": state.bytes} if state else {}
    return refusing_limits(target, storage, held, growth)


def handover_bytes(
    target: Mapping[str, Any], storage: str, state: StreamState | None, mirrors: bool
) -> int:
    """The ``max_bytes`` the temporary stream takes at the handover
    (:func:`planned_limits`; 0: none). The server reserves it against the account like
    any stream's ``max_bytes``, in the old stream's storage and tier, beside the old
    stream and then beside the new one (measured: ``max_mem`` 8 MiB, ORDERS in memory
    with ``max_bytes`` 5 MiB and ``discard: new`` to file: the handover was refused, err
    10028, after the plan had said there was room). From memory to file it is less than
    the target's (the bound of :func:`_bytes_bound`)."""
    return int(planned_limits(target, storage, state, mirrors).get("max_bytes") or 0)


def over_limits(record: Record, storage: str, state: Mapping[str, Any]) -> str | None:
    """Why the new stream would refuse part of what the temporary stream (``storage``)
    holds (``state``) under the target's ``discard: new`` ``max_msgs`` or ``max_bytes``
    (:func:`_over_totals`), if it would: the copy back would stall there. The plan checks
    the stream; the copy may hold more: it keeps what the stream discarded while it was
    copied (a ``discard: old`` limit, ``max_age``)."""
    held, held_bytes = int(state.get("messages") or 0), int(state.get("bytes") or 0)
    found = _over_totals(record.target, storage, record, held, held_bytes)
    if found is None:
        return None
    return (
        f"the copy holds {found}: the new stream would refuse the rest and the copy back "
        "would stall there for good (the copy keeps what the stream discarded while it was "
        "copied)"
    )


def _over_totals(
    target: Mapping[str, Any], storage: str, record: Record, held: int, held_bytes: int
) -> str | None:
    """How ``held`` messages of ``held_bytes`` (in the temporary stream's ``storage``)
    pass a ``discard: new`` target's ``max_msgs`` or ``max_bytes``, their bytes as the new
    stream counts them (:func:`counted_more`); None: they fit (0 and -1 are no limit, as
    the server reads them). The one rule of the handover (:func:`over_limits`) and of a
    resumed migration's plan (:func:`copy_back_stall`)."""
    if target.get("discard") != "new":
        return None
    max_msgs, max_bytes = target.get("max_msgs", -1), target.get("max_bytes", -1)
    growth = counted_more(storage, target, record.mirrors, temp_name(record.stream))
    counted = held_bytes + growth * held  # less where the new stream counts less (memory)
    if type(max_msgs) is int and 0 < max_msgs < held:
        return f"{held} messages, more than max_msgs {max_msgs} with discard new"
    if type(max_bytes) is int and 0 < max_bytes < counted:
        return (
            f"{held} messages ({counted} bytes as the new stream counts them), more than "
            f"max_bytes {max_bytes} with discard new"
        )
    return None


def overfull(target: Mapping[str, Any], subject: str, held: int) -> str | None:
    """Why the new stream would refuse part of what the temporary stream holds on
    ``subject`` (``held`` messages), if it would: the copy back would stall there."""
    over = _over_subject(target, subject, held)
    if over is None:
        return None
    return (
        f"{over}: the new stream would refuse the rest and the copy back would stall there "
        "for good (the copy keeps what the stream discarded while it was copied)"
    )


def _over_subject(target: Mapping[str, Any], subject: str, held: int) -> str | None:
    """``subject`` holding ``held`` messages, more than ``target`` takes on one
    (``max_msgs_per_subject`` with ``discard_new_per_subject``); None when it fits."""
    per = per_subject_limit(target)
    if per is None or held <= per:
        return None
    return (
        f"subject '{printable(subject)}' holds {held} messages in the copy, more than "
        f"max_msgs_per_subject {per} with discard_new_per_subject"
    )


def refused_fields(target: Mapping[str, Any]) -> frozenset[str]:
    """The limits of ``target`` that a migration's new stream meets by refusing the
    copy back, never by deleting a message (it is filled by the copy): ``max_msgs`` and
    ``max_bytes`` with ``discard: new``, ``max_msgs_per_subject`` with
    ``discard_new_per_subject`` too. Past them the copy back stalls
    (:func:`copy_back_stall`): no loss to count there."""
    if target.get("discard") != "new":
        return frozenset()
    per = ("max_msgs_per_subject",) if per_subject_limit(target) is not None else ()
    return frozenset(("max_msgs", "max_bytes", *per))


def copy_back_stall(
    target: Mapping[str, Any],
    record: Record,
    storage: str,
    state: StreamState | None,
    fullest: tuple[str, int] | None = None,
) -> str | None:
    """Why an interrupted migration going on to ``target`` would stall: the new stream
    (``discard: new``) would refuse part of what the migration holds (``state``, in the
    temporary stream's ``storage``; ``fullest``: the copy's fullest subject, read when a
    per-subject limit matters). Nothing is deleted there: the copy back stops for good,
    or, before the temporary stream takes the publishes, a subject over
    ``max_msgs_per_subject`` stops the handover again (the stream takes its publishes
    back). None when it fits, or when nothing is copied back (a rollback before the
    handover)."""
    if target.get("discard") != "new" or state is None or not copies_back(record, target):
        return None
    over = None if fullest is None else _over_subject(target, *fullest)
    totals = _over_totals(target, storage, record, state.messages, state.bytes)
    if totals is not None:
        why = f"the migration holds {totals}"
    elif over is not None and record.phase in ("copy", "handover"):
        return (
            f"{over}: the new stream would refuse the rest, so the handover would stop there "
            "again, before the stream gives up its publishes; nothing is deleted"
        )
    elif over is not None:
        why = over
    else:
        return None
    return (
        f"{why}: the new stream would refuse the rest and the copy back would stall there "
        "for good; nothing is deleted"
    )


def serving_note(
    desired: Mapping[str, Any], live: Mapping[str, Any], state: StreamState | None, mirrors: bool
) -> str | None:
    """The plan's word on what the temporary stream refuses while it takes the
    publishes (:func:`refusing_limits`, figured from what the stream holds now; the
    handover sets them from what the copy holds then); None: it refuses nothing."""
    storage = str(live.get("storage") or "file")
    growth = counted_more(storage, desired, mirrors, temp_name(str(desired.get("name"))))
    limits = planned_limits(desired, storage, state, mirrors)
    if not limits:
        return None
    keys = ("max_msgs", "max_bytes", "max_msgs_per_subject")
    note = (
        "while the temporary stream takes the publishes it refuses them past "
        + ", ".join(f"{key} {limits[key]}" for key in keys if key in limits)
        + ", as the stream would (discard new)"
    )
    if growth > 0 and "max_bytes" in limits:
        cause = (
            f"a file stream counts each message up to {growth} bytes more than a memory one"
            if mirrors
            else f"the copy back gives each message a {SOURCE_HEADER} header: the new "
            f"stream counts each up to {growth} bytes more"
        )
        note += (
            f"; {cause}, and the limits leave room for that: a publish may be refused "
            f"before max_bytes {desired.get('max_bytes')} is full (figured from what the "
            "stream holds now, set at the handover)"
        )
    if per_subject_limit(desired) is not None:
        note += (
            "; a subject holding more than max_msgs_per_subject when the publishes move "
            "stops the migration there: the stream keeps its messages and its publishes"
        )
    return note


def retired_config(
    live: Mapping[str, Any], *, metadata: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A stream that must take no more publishes: its subjects moved to a placeholder."""
    config = {k: v for k, v in live.items() if k not in ("subject_transform", "republish")}
    config["subjects"] = [placeholder(str(live["name"]))]
    if metadata is not None:
        config["metadata"] = _with_metadata(live, metadata)
    return config


def filling_config(record: Record, *, copying: bool) -> dict[str, Any]:
    """The new stream while it is filled: the target config without its subjects (and
    without what would act on the copied messages: a subject transform, republishing, a
    duplicate window, a ``max_msg_size`` that older messages may exceed and the copy would
    stall on), copying the temporary stream. The final config brings them back.

    A mirror (2.12+) copies at once and keeps every sequence, so it takes ``interest``
    retention only with its final config (``limits`` until then: an interest stream keeps
    nothing before its consumers exist). A source waits behind a filter matching nothing
    until the consumers are restored (``copying=False``), then copies everything, and
    the stream starts at the old first sequence.
    """
    target = record.target
    held_back = (*SUBJECT_FIELDS, "sealed", "max_msg_size")
    config = {k: v for k, v in target.items() if k not in held_back}
    temp = temp_name(record.stream)
    config.update(_copy_of(temp, record.mirrors, waiting=not copying))
    if record.mirrors:
        if config.get("retention") == "interest":
            config["retention"] = "limits"
    elif record.first_seq > 1:
        config["first_seq"] = record.first_seq
    config["metadata"] = {**(target.get("metadata") or {}), FILLING_KEY: temp}
    return config


def _with_metadata(live: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, str]:
    return {**(live.get("metadata") or {}), **extra}


def consumer_copy(name: str, restore: Mapping[str, Any], start: int) -> dict[str, Any]:
    """A consumer on the temporary stream that only remembers: the consumer to restore
    (its config, in metadata) and its position there (the sequence it delivers next)."""
    return {
        "durable_name": name,
        "ack_policy": "none",
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": max(start, 1),
        "metadata": {CONSUMER_KEY: json.dumps(dict(restore), sort_keys=True)},
    }


@dataclass(frozen=True)
class Remembered:
    """A consumer to restore, read back from its copy on the temporary stream."""

    name: str
    config: Mapping[str, Any]
    start: int  # its next message, as a sequence of the temporary stream


def remembered(copy: Mapping[str, Any]) -> Remembered | None:
    """The consumer a copy on the temporary stream remembers; None for anything else."""
    raw = (copy.get("metadata") or {}).get(CONSUMER_KEY)
    if not isinstance(raw, str):
        return None
    config = _parsed(raw)
    name = copy.get("durable_name") or copy.get("name")
    if not isinstance(config, dict) or not isinstance(name, str):
        return None
    try:
        return Remembered(name, config, int(copy.get("opt_start_seq") or 1))
    except (ValueError, TypeError, OverflowError):
        return None


def new_sequence(temp_seq: int, record: Record) -> int:
    """Where a temporary stream's message lands in the new stream: the same sequence when
    the copies are mirrors; else the copy back starts at the old stream's first sequence
    and keeps the temporary stream's order."""
    if record.mirrors:
        return temp_seq
    return max(record.first_seq, 1) + temp_seq - 1


def stream_seq(info: Mapping[str, Any], part: str) -> int:
    """A ConsumerInfo's stream sequence of ``part`` (``delivered``, ``ack_floor``)."""
    return int((info.get(part) or {}).get("stream_seq") or 0)


def at_position(info: Mapping[str, Any], seq: int) -> bool:
    """Whether a ConsumerInfo shows a consumer a reset made deliver ``seq`` next: nothing
    delivered or acknowledged past ``seq - 1``, and nothing before it outstanding."""
    return stream_seq(info, "delivered") == stream_seq(info, "ack_floor") == seq - 1


@dataclass(frozen=True)
class Volume:
    """What a migration copies (twice: out to the temporary stream, then back)."""

    messages: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {"messages": self.messages, "bytes": self.bytes}


@dataclass(frozen=True)
class ConsumerFate:
    """What a migration does to one live consumer of the stream."""

    name: str
    kept: bool  # restored with its config
    position: bool  # and its position
    note: str = ""


def is_durable(config: Mapping[str, Any]) -> bool:
    """Whether a consumer outlives its subscribers (a migration can restore it)."""
    return bool(config.get("durable_name"))


#: The plan's word on a consumer moved to its ack floor: what it had acknowledged past
#: that floor (out of order) cannot be moved with it, and is delivered again (measured:
#: acked 1-4 and 6-10 of 20, the consumer delivered 5-14 after the migration).
KEPT_POSITION = (
    "consumer {name} keeps its position: its ack floor; the messages past it are delivered "
    "again, those it acknowledged out of order too"
)


def consumer_fates(
    consumers: Mapping[str, Mapping[str, Any]], server: ServerInfo
) -> list[ConsumerFate]:
    """The plan's word on each live consumer, before anything starts."""
    fates = []
    reset = can_keep_positions(server)
    for name, config in sorted(consumers.items()):
        if not is_durable(config):
            fates.append(ConsumerFate(name, False, False, f"ephemeral consumer {name} is not kept"))
        elif not resettable(config):
            policy = config.get("deliver_policy")
            note = (
                f"consumer {name} (deliver_policy {policy}) cannot be moved to a sequence: it "
                "is created again once the copy is complete and delivers what is published "
                "after the migration"
            )
            fates.append(ConsumerFate(name, True, False, note))
        elif reset:
            fates.append(ConsumerFate(name, True, True, KEPT_POSITION.format(name=name)))
        else:
            note = (
                f"consumer {name} is restored but starts again from its deliver policy "
                f"(keeping positions needs nats-server 2.14; connected: {server.version})"
            )
            fates.append(ConsumerFate(name, True, False, note))
    return fates


@dataclass(frozen=True)
class Room:
    """Free space of one storage type in the account (None: no limit)."""

    storage: str
    free: int | None
    limit: int | None = None
    used: int = 0


def rooms(account: Mapping[str, Any], replicas: int = 1) -> dict[str, Room]:
    """Free memory and file storage of the account, from ``$JS.API.INFO``; a tier's
    limits (``R1``, ``R3``) when the account has tiers."""
    tiers = account.get("tiers") or {}
    tier = tiers.get(f"R{replicas}") if isinstance(tiers, Mapping) else None
    source = tier if isinstance(tier, Mapping) and tier.get("limits") else account
    limits = source.get("limits") or {}
    out = {}
    for storage, limit_key, used_key in (
        ("memory", "max_memory", "memory"),
        ("file", "max_storage", "storage"),
    ):
        limit = int(limits.get(limit_key, -1) or -1)
        used = int(source.get(used_key, 0) or 0)
        if limit < 0:
            out[storage] = Room(storage, None, None, used)
        else:
            out[storage] = Room(storage, max(limit - used, 0), limit, used)
    return out


@dataclass(frozen=True)
class Shortfall:
    storage: str
    needed: int
    room: Room


def shortfalls(
    live: Mapping[str, Any],
    desired: Mapping[str, Any],
    state: StreamState | None,
    account: Mapping[str, Any],
) -> list[Shortfall]:
    """Where the account lacks room for the copies: the temporary stream (in the old
    storage) while the old stream still exists, then the new stream (in the desired
    storage) beside the temporary one once the old stream is gone."""
    size = copy_bytes(state)
    if size == 0:
        return []
    old, new = str(live.get("storage", "file")), str(desired.get("storage", "file"))
    replicas = int(live.get("num_replicas", 1) or 1)
    free = rooms(account, replicas)
    held = state.bytes if state is not None else 0
    needs: dict[str, int] = {old: size}
    # After the old stream is deleted: temporary copy (old storage) plus the new stream.
    needs[new] = max(needs.get(new, 0), size + (size - held if new == old else 0))
    out = []
    for storage, needed in needs.items():
        room = free.get(storage)
        if room is not None and room.free is not None and room.free < needed:
            out.append(Shortfall(storage, needed, room))
    return out


@dataclass
class Progress:
    """How a migration went, for the log and the benchmark."""

    stream: str
    copied: int = 0
    windows_ms: list[float] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    not_restored: list[str] = field(default_factory=list)
