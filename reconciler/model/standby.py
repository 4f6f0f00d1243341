"""What a standby pair means to the server: the mirror's config, the fence, the health.

Pure rules over plain dicts (docs/dr.md, where the server facts they rest on are named):

- the standby is a mirror with ``external.api`` (another domain or account), no subjects
  and none of the fields a mirror may not have;
- the origin is *fenced* by giving it a subject nobody publishes to
  (:func:`fence_subject`): its publishers get no answer, so no write is acknowledged
  there, and the stream, its messages and its consumers stay as they were (``sealed``
  would be irreversible, and JetStream has no per-stream publish deny);
- a pair's stream *takes writes* (:func:`takes_writes`) when it is neither a mirror nor
  fenced: on the standby's side, one promoted (by a failover, or by hand); a fenced one
  there is an old origin (of an earlier failover or failback), which takes none;
- a pair's health is read on both sides: the mirror's own ``lag`` is 0 with the link
  down (and ``active`` -1), so the lag shown is the origin's last sequence minus the
  mirror's, each read on its own side;
- the mirror's ``duplicate_window`` is what makes a promoted stream answer a publisher's
  retry as a duplicate (:func:`needed_window`); a restart of its server drops it, and an
  update giving it back knows only the ids mirrored after it (:func:`unknown_ids_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.errors import ReconcileError
from reconciler.model.defaults import default_duplicate_window
from reconciler.model.normalize import nanoseconds_between
from reconciler.specs.units import parse_duration

__all__ = [
    "FAILOVER_PAUSE_UNTIL",
    "LAG_CRITICAL_KEY",
    "NOT_ON_A_MIRROR",
    "ONE_WAY",
    "PROMOTION_VERSION",
    "SEEN_CRITICAL_KEY",
    "PairHealth",
    "fence_subject",
    "is_fenced",
    "is_the_mirror",
    "lacking_window",
    "left_paused",
    "mirror_config",
    "mirrors_the_origin",
    "needed_window",
    "pair_health",
    "promoted_config",
    "promotion_supported",
    "takes_writes",
    "unknown_ids_for",
]

#: The nats CLI's own thresholds (``nats server check stream`` reads the same keys).
LAG_CRITICAL_KEY = "io.nats.monitor.lag-critical"
SEEN_CRITICAL_KEY = "io.nats.monitor.seen-critical"
#: The first release whose STREAM.UPDATE promotes a mirror (nats-server#7171); before
#: it, dropping ``mirror`` is refused with err 10055.
PROMOTION_VERSION = (2, 12, 0)
#: Fields a mirror may not carry: it takes its messages from the origin only. The server
#: refuses the first ones on a mirror (an origin's spec declaring
#: ``subject_delete_marker_ttl``, ``allow_msg_schedules``, ``allow_atomic`` or
#: ``allow_batched`` made a standby apply could never create; a memory stream's restore,
#: through a mirror of its snapshot, failed making it: ``backup.memory`` reads this
#: list too). It allows ``republish``, but the origin
#: republishes each message already, and a mirror carrying it published each again on
#: the same subject (measured across two domains joined by a leafnode: every message
#: twice in a stream of the destination, and a destination among the origin's own
#: subjects a loop, the origin storing its mirror's copies without end).
NOT_ON_A_MIRROR = (
    "subjects",
    "sources",
    "subject_transform",
    "first_seq",
    "republish",
    "subject_delete_marker_ttl",
    "allow_msg_schedules",
    "allow_atomic",
    "allow_batched",
)
#: What the promotion gives the promoted stream back from its origin's spec, besides
#: its subjects (one update takes them all, measured on 2.15.1). ``subject_transform``
#: too: without it the promoted stream stored its writes under their published
#: subjects, not the declared transform's, until the next apply of the standby.
_GIVEN_BACK = (
    "republish",
    "subject_delete_marker_ttl",
    "allow_msg_schedules",
    "allow_atomic",
    "allow_batched",
    "subject_transform",
)
_FENCE_PREFIX = "_reconcile.fenced."
#: Until when a failover creates a consumer paused, before it moves and resumes it: a
#: consumer paused until then is one an interrupted failover left (never a person's).
FAILOVER_PAUSE_UNTIL = "2999-01-01T00:00:00Z"


def mirror_config(
    origin: Mapping[str, Any], *, api: str, deliver: str | None = None
) -> dict[str, Any]:
    """The standby's desired config: the origin's, as a mirror of it reached through
    ``api`` (its ``deliver`` subject when the accounts need one)."""
    config = {k: v for k, v in origin.items() if k not in NOT_ON_A_MIRROR}
    config["duplicate_window"] = needed_window(origin)
    external: dict[str, Any] = {"api": api}
    if deliver:
        external["deliver"] = deliver
    config["mirror"] = {"name": origin["name"], "external": external}
    return config


def needed_window(origin: Mapping[str, Any]) -> int:
    """The duplicate window a standby's mirror needs (nanoseconds): its ``origin``'s
    (the stream's spec config), or the one the server gives a stream setting none (2 m,
    or ``max_age`` when shorter). A mirror with a window records the ``Nats-Msg-Id`` of
    each message it mirrors, so once promoted it answers a retry of a message the origin
    stored (its acknowledgement lost at the fence) as a duplicate instead of storing it
    again; a mirror without one knows no ids (measured on 2.12.8, 2.14.6 and 2.15.1:
    docs/jetstream-notes.md)."""
    window = _nanoseconds(origin.get("duplicate_window"))
    return window or default_duplicate_window(_nanoseconds(origin.get("max_age")))


def lacking_window(mirror: Mapping[str, Any], origin: Mapping[str, Any]) -> tuple[int, int] | None:
    """A standby's live ``mirror`` config whose duplicate window is shorter than its
    ``origin`` needs (:func:`needed_window`; none: a restart of the mirror's server drops
    it, every server measured): its window and the needed one; None when it lacks none."""
    needed, live = needed_window(origin), _nanoseconds(mirror.get("duplicate_window"))
    return (live, needed) if live < needed else None


def unknown_ids_for(info: Mapping[str, Any], window: int) -> float:
    """How long (seconds, by the mirror's clock) the messages a mirror holds stay within
    ``window``, from its STREAM.INFO read just after an update gave it that window: a
    window given by an update records only the ids mirrored after it (nats-server keeps
    no id while it has none, and rebuilds them only when its server starts: measured
    on 2.12.8, 2.14.6 and 2.15.1, docs/jetstream-notes.md), so until then a retry of
    one of those messages within the window would be stored again. 0: none is within
    it (or the stream is empty); never more than ``window``."""
    last = str((info.get("state") or {}).get("last_ts") or "")
    now = info.get("ts")
    if not last or last.startswith("0001-"):
        return 0.0
    age = nanoseconds_between(last, now) if isinstance(now, str) else None
    if age is None:
        return window / 1e9  # unreadable, or no server time said: the whole window
    return min(max(window - max(age, 0), 0), window) / 1e9


#: A mirror's fields that take only part of its origin, or from a later point on: a
#: mirror with one is not the origin's full copy.
_PART_ONLY = ("filter_subject", "subject_transforms", "opt_start_seq", "opt_start_time")


def mirrors_the_origin(mirror: Any, declared: Any) -> bool:
    """Whether a stream config's ``mirror`` is the ``declared`` one
    (:func:`mirror_config`'s): the same origin, reached through the same API and
    delivery subject, and all of it. A mirror read from elsewhere (a backup's config)
    may name the origin's stream in another domain, or a part of it."""
    if not isinstance(mirror, Mapping) or not isinstance(declared, Mapping):
        return False
    if mirror.get("name") != declared.get("name"):
        return False
    if any(mirror.get(field) for field in _PART_ONLY):
        return False
    return _reached(mirror) == _reached(declared)


#: What an update never turns off again, measured on 2.15.1 (docs/jetstream-notes.md):
#: "can not cancel deny purge", "... deny message deletes", "message TTL status can not
#: be disabled" (on a mirror too), "message schedules can not be disabled", "can not
#: change message counter setting" (either way); a seal is for good. A standby, and the
#: stream its promotion makes, has one only when the spec declares it. Turned off by an
#: update: ``allow_atomic``, ``allow_batched``, ``subject_delete_marker_ttl`` (but the
#: ``allow_msg_ttl`` it switched on stays), ``allow_rollup_hdrs``, ``allow_direct``.
#: ``model.diff.STREAM_RULES`` plans each of these as a replace
#: (``tests/unit/test_standby_guard.py`` checks the two agree).
ONE_WAY = (
    "sealed",
    "deny_delete",
    "deny_purge",
    "allow_msg_ttl",
    "allow_msg_schedules",
    "allow_msg_counter",
)


def is_the_mirror(config: Mapping[str, Any], declared: Mapping[str, Any]) -> bool:
    """Whether a stream config (a backup's, say) is the ``declared`` mirror's
    (:func:`mirror_config`'s) as a standby's must be: it mirrors the origin
    (:func:`mirrors_the_origin`), carries nothing a mirror does not, such as a
    ``republish`` publishing what it copies again (onto the origin's subjects: a loop),
    and nothing no update undoes that the spec does not declare (:data:`ONE_WAY`)."""
    return (
        mirrors_the_origin(config.get("mirror"), declared.get("mirror"))
        and not any(config.get(field) for field in NOT_ON_A_MIRROR)
        and not any(config.get(field) and not declared.get(field) for field in ONE_WAY)
    )


def _reached(mirror: Mapping[str, Any]) -> tuple[str, str]:
    """Through which API (and delivery subject) a mirror reads its origin."""
    external = mirror.get("external")
    if not isinstance(external, Mapping):
        return ("", "")
    return (str(external.get("api") or ""), str(external.get("deliver") or ""))


def _nanoseconds(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def promoted_config(
    mirror: Mapping[str, Any], subjects: list[str], origin: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A mirror's live config made a stream of its own that listens on ``subjects``,
    given back what its ``origin``'s spec declares and a mirror does not carry
    (:data:`_GIVEN_BACK`: its ``republish``, say), and the duplicate window the mirror
    lacks (:func:`lacking_window`: dropped by a restart of its server), so the promoted
    stream detects duplicates among its own writes."""
    config = {k: v for k, v in mirror.items() if k not in ("mirror", "subjects", *_GIVEN_BACK)}
    config["subjects"] = list(subjects)
    declared = origin or {}
    for field in _GIVEN_BACK:
        if declared.get(field):
            config[field] = declared[field]
    lacking = lacking_window(mirror, declared or mirror)
    if lacking is not None:
        config["duplicate_window"] = lacking[1]
    return config


def left_paused(info: Mapping[str, Any]) -> bool:
    """Whether a consumer's CONSUMER.INFO shows it paused by an interrupted failover:
    paused until the failover's date and never delivered a message (a pause is anyone's
    to set: a consumer that has delivered is a person's, paused by them, never moved
    back nor resumed; CONSUMER.RESET leaves ``delivered.consumer_seq`` at 0)."""
    until = str((info.get("config") or {}).get("pause_until") or "")
    delivered = (info.get("delivered") or {}).get("consumer_seq")
    return (
        bool(info.get("paused"))
        and until.startswith(FAILOVER_PAUSE_UNTIL[:10])
        and delivered in (0, None)
    )


def fence_subject(stream: str) -> str:
    """The one subject a fenced origin listens on: nobody publishes there."""
    return f"{_FENCE_PREFIX}{stream}"


def is_fenced(config: Mapping[str, Any]) -> bool:
    """Whether a live stream config is fenced (listens only on its fence subject)."""
    return list(config.get("subjects") or ()) == [fence_subject(str(config.get("name")))]


def takes_writes(config: Mapping[str, Any]) -> bool:
    """Whether a live stream config of a pair takes writes of its own: no mirror, and
    not fenced (:func:`is_fenced`). On the standby's side such a stream was promoted (by
    a failover, or by hand) and may hold writes its origin lacks; a fenced one there is
    an old origin (of an earlier failover or failback): it listens only on its fence
    subject, where nobody publishes, so it has taken no write since its fence, and a
    mirror takes its messages from the origin only."""
    return not config.get("mirror") and not is_fenced(config)


def promotion_supported(version: str) -> bool:
    """Whether a server of ``version`` ("2.12.8") promotes a mirror by an update."""
    parts: list[int] = []
    for piece in version.split("-", maxsplit=1)[0].split(".")[:3]:
        parts.append(int(piece) if piece.isdigit() else 0)
    return tuple(parts) >= PROMOTION_VERSION


@dataclass(frozen=True)
class PairHealth:
    """One pair's health, each side read on its own server."""

    stream: str
    origin_last_seq: int | None  # None: the origin could not be read
    mirror_last_seq: int | None  # None: the mirror could not be read
    reported_lag: int | None  # the mirror's own ``mirror.lag``
    active_seconds: float | None  # since the mirror last heard from the origin; None: never
    error: str = ""  # the mirror's ``mirror.error``, or why a side could not be read
    problems: tuple[str, ...] = ()  # why the pair is not healthy

    @property
    def lag(self) -> int | None:
        """The real lag: origin's last sequence minus the mirror's (None: a side unread)."""
        if self.origin_last_seq is None or self.mirror_last_seq is None:
            return None
        return max(self.origin_last_seq - self.mirror_last_seq, 0)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "healthy": self.healthy,
            "lag": self.lag,
            "reported_lag": self.reported_lag,
            "origin_last_seq": self.origin_last_seq,
            "mirror_last_seq": self.mirror_last_seq,
            "active_seconds": self.active_seconds,
            "error": self.error,
            "problems": list(self.problems),
        }


#: A mirror silent this long while its origin takes writes is stale (no threshold set).
DEFAULT_SEEN_CRITICAL = 60.0


def pair_health(
    stream: str,
    origin: Mapping[str, Any] | None,
    mirror: Mapping[str, Any] | None,
    *,
    unread: str = "",
) -> PairHealth:
    """The health of a pair from each side's STREAM.INFO (None: that side could not be
    read, ``unread`` says why). Thresholds come from the origin's metadata
    (:data:`LAG_CRITICAL_KEY`, :data:`SEEN_CRITICAL_KEY`), else the mirror's."""
    origin_last = _last_seq(origin)
    mirror_last = _last_seq(mirror)
    about = (mirror or {}).get("mirror") or {}
    active_ns = about.get("active")
    active = None if not isinstance(active_ns, int) or active_ns < 0 else active_ns / 1e9
    reported = about.get("lag") if isinstance(about.get("lag"), int) else None
    error = _error_text(about.get("error")) or unread
    problems: list[str] = []
    if origin is None:
        problems.append("the origin could not be read" + (f": {unread}" if unread else ""))
    if mirror is None:
        problems.append("the mirror could not be read" + (f": {unread}" if unread else ""))
    elif not about:
        problems.append("the standby is not a mirror")
    if origin is not None and ((origin.get("config") or {}).get("mirror")):
        problems.append("the origin is a mirror itself: it takes no write")
    if error and origin is not None and mirror is not None:
        problems.append(f"the mirror reports an error: {error}")
    metadata = {**_metadata(mirror), **_metadata(origin)}
    lag_critical = _number(metadata.get(LAG_CRITICAL_KEY))
    seen_critical = _seconds(metadata.get(SEEN_CRITICAL_KEY))
    health = PairHealth(stream, origin_last, mirror_last, reported, active, error)
    lag = health.lag
    if lag is not None and lag_critical is not None and lag >= lag_critical:
        problems.append(f"lag {lag} is at or above {LAG_CRITICAL_KEY} {lag_critical:g}")
    seen = seen_critical if seen_critical is not None else DEFAULT_SEEN_CRITICAL
    if mirror is not None and about:
        if active is None:
            problems.append("the mirror has no contact with the origin (active -1)")
        elif active >= seen and (lag or 0) > 0:
            problems.append(f"the mirror last heard from the origin {active:.0f}s ago")
        elif seen_critical is not None and active >= seen_critical:
            problems.append(f"last contact {active:.0f}s ago is at or above {SEEN_CRITICAL_KEY}")
    return PairHealth(stream, origin_last, mirror_last, reported, active, error, tuple(problems))


def _last_seq(info: Mapping[str, Any] | None) -> int | None:
    if info is None:
        return None
    value = (info.get("state") or {}).get("last_seq")
    return value if isinstance(value, int) else 0


def _metadata(info: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = ((info or {}).get("config") or {}).get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return str(error.get("description") or error.get("err_code") or "error")
    return str(error) if error else ""


def _number(text: Any) -> float | None:
    try:
        value = float(str(text))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _seconds(text: Any) -> float | None:
    """A threshold such as ``"5m"`` or ``"30s"`` (the nats CLI's), or a bare number of
    seconds; None when unreadable (metadata is anyone's: never an error)."""
    if text is None:
        return None
    raw = str(text).strip()
    if _number(raw) is not None:
        return _number(raw)
    try:
        return parse_duration(raw[:40]) / 1e9
    except (ValueError, ReconcileError):
        return None
