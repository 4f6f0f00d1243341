"""What a mirror promoted as it is would do unlike the stream its spec declares.

A failover's promotion keeps the mirror's live config (``model.standby.promoted_config``
drops ``mirror`` and gives the subjects and what a mirror cannot carry), so whatever
someone set on the mirror by hand becomes the promoted stream's, where every write then
goes. Measured on 2.15.1 (docs/dr.md, ``tests/integration/test_dr_attacks18b.py``): a
mirror given ``max_msg_size: 10`` was promoted refusing every larger write, the
verify's probe too, with the origin fenced; one given ``consumer_limits`` with a 2 s
``inactive_threshold`` was promoted, and the failover's own durable consumer, created on
it with that threshold, was deleted once idle 2 s; a mirror made by hand in memory was
promoted in memory (a restart of its server loses every message).

:data:`REFUSED` lists, as data, each field whose live value makes the promoted stream
take fewer writes than the declared one, keep less of them, answer fewer of its
clients' requests, or do for good what the spec does not declare; :data:`WARNED`, each
one that only makes it answer otherwise. :func:`promotion_gaps` compares what the
promotion makes of a live config with the declared one by both lists, and says of
each gap whether an update sets the declared value back (``model.diff.replace_reasons``:
else only a fresh stream does).

Each rule, and each of the failover's refusals of a pair (:class:`Refusal`), says which
move of the pair it protects (:class:`Guards`): the failover's fence and promotion, its
rollback (the fenced origin given its subjects back), or both. A rollback promotes
nothing and writes only the origin's subjects, so it is judged only by what guards it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Flag, auto
from typing import Any

from reconciler.model.diff import replace_reasons
from reconciler.model.loss import PROVEN_LIMITS, allows_less
from reconciler.model.normalize import canonical
from reconciler.model.standby import promoted_config
from reconciler.model.state import ServerInfo
from reconciler.specs.units import format_duration

__all__ = ["REFUSED", "WARNED", "Gap", "Guards", "Refusal", "Rule", "promotion_gaps"]

#: (live, declared) -> whether the live value differs from the declared one so.
Compare = Callable[[Any, Any], bool]


def _fewer(unlimited: int) -> Compare:
    """A limit allowing less than the declared one (``unlimited``: no limit)."""
    return lambda live, declared: allows_less(live, declared, unlimited=unlimited)


def _after(order: tuple[str, ...]) -> Compare:
    """A value after the declared one in ``order`` (what keeps the most first); one
    not in ``order`` at all is not known to keep as much."""

    def rule(live: Any, declared: Any) -> bool:
        if live == declared:
            return False
        return live not in order or (
            declared in order and order.index(live) > order.index(declared)
        )

    return rule


def _before(order: tuple[str, ...]) -> Compare:
    """A value before the declared one in ``order``: it keeps more than declared."""
    return lambda live, declared: (
        live in order and declared in order and _after(order)(declared, live)
    )


def _unlike(live: Any, declared: Any) -> bool:
    return bool(live != declared)


def _on(live: Any, declared: Any) -> bool:
    return bool(live) and not bool(declared)


def _off(live: Any, declared: Any) -> bool:
    return bool(declared) and not bool(live)


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | str):
        return str(value)[:60]
    return json.dumps(value, default=str)[:60]


def _limit(unlimited: int) -> Callable[[Any], str]:
    def shown(value: Any) -> str:
        if not isinstance(value, int) or isinstance(value, bool):
            return "unlimited" if value is None else _plain(value)
        return "unlimited" if value == unlimited or value < 0 else str(value)

    return shown


def _duration(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return format_duration(value)
    return "none" if value in (None, 0) else _plain(value)


class Guards(Flag):
    """The moves of a pair a refusal protects."""

    #: the failover: the origin fenced, the mirror promoted, consumers created on it
    FAILOVER = auto()
    #: the rollback: the fenced origin given its subjects back (nothing promoted)
    ROLLBACK = auto()
    BOTH = FAILOVER | ROLLBACK


@dataclass(frozen=True)
class Refusal:
    """Why a pair must not be touched, and the moves (``guards``) that refuses."""

    text: str
    guards: Guards = Guards.BOTH

    def refuses(self, *, rollback: bool) -> bool:
        return (Guards.ROLLBACK if rollback else Guards.FAILOVER) in self.guards


@dataclass(frozen=True)
class Rule:
    """A field (``consumer_limits.max_ack_pending``: a field of one), how its live value
    differs from the declared one, what the promoted stream then does, and the moves a
    gap refuses (a rollback promotes nothing: none of these is its concern so far)."""

    field: str
    differs: Compare
    effect: str
    shown: Callable[[Any], str] = _plain
    guards: Guards = Guards.FAILOVER


#: What a stream keeps the most of first: retention, storage, persistence.
RETENTION = ("limits", "interest", "workqueue")
STORAGE = ("file", "memory")
PERSIST = ("default", "async")

_KEEPS_FEWER = "deletes messages the declared stream keeps (its oldest, under that limit)"

#: Each field whose live value a promotion must never keep: the promoted stream takes
#: fewer writes than the declared one, keeps less, answers fewer of its clients'
#: requests, or does for good what the spec does not declare.
REFUSED: tuple[Rule, ...] = (
    *(
        Rule(
            field, _fewer(unlimited), _KEEPS_FEWER, _duration if field == "max_age" else _limit(-1)
        )
        for field, unlimited in PROVEN_LIMITS.items()
    ),
    Rule(
        "retention",
        _after(RETENTION),
        "deletes the messages its consumers acknowledged (or no consumer wants), which the "
        "declared stream keeps",
    ),
    Rule(
        "max_msg_size",
        _fewer(-1),
        "refuses the larger writes the declared stream takes",
        _limit(-1),
    ),
    Rule(
        "discard",
        _unlike,
        "refuses at a limit the writes the declared stream takes (new), or deletes there "
        "the messages it keeps (old)",
    ),
    Rule(
        "discard_new_per_subject",
        _unlike,
        "refuses at max_msgs_per_subject the writes the declared stream takes, or deletes "
        "there the messages it keeps",
    ),
    Rule("no_ack", _on, "acknowledges no write: every publisher waiting for one times out"),
    Rule("sealed", _on, "refuses every write, and a seal is for good"),
    Rule(
        "allow_rollup_hdrs",
        _off,
        "refuses the writes with a Nats-Rollup header the declared stream takes",
    ),
    Rule(
        "allow_rollup_hdrs",
        _on,
        "takes the writes with a Nats-Rollup header the declared stream refuses, deleting "
        "the messages they roll up",
    ),
    Rule(
        "allow_msg_ttl", _off, "refuses the writes with a Nats-TTL header the declared stream takes"
    ),
    Rule(
        "allow_msg_ttl",
        _on,
        "takes the writes with a Nats-TTL header the declared stream refuses, and deletes "
        "each once its TTL passes; no update turns it off",
    ),
    Rule("deny_delete", _on, "refuses the message deletes the declared stream allows, for good"),
    Rule("deny_delete", _off, "allows the message deletes the declared stream refuses"),
    Rule("deny_purge", _on, "refuses the purges the declared stream allows, for good"),
    Rule("deny_purge", _off, "allows the purges the declared stream refuses"),
    Rule("allow_direct", _off, "answers none of the direct gets the declared stream answers"),
    Rule(
        "max_consumers",
        _fewer(-1),
        "refuses consumers the declared stream takes (the failover creates the declared "
        "ones after the fence)",
        _limit(-1),
    ),
    Rule(
        "consumer_limits.inactive_threshold",
        _fewer(0),
        "gives every consumer created on it that inactive_threshold, durable ones too: "
        "idle that long, a consumer is deleted with its position (measured: the "
        "failover's own)",
        _duration,
    ),
    Rule(
        "consumer_limits.max_ack_pending",
        _fewer(0),
        "refuses the consumers asking for more unacknowledged messages, and caps the others",
        _limit(0),
    ),
    Rule("storage", _after(STORAGE), "loses every message when its server restarts"),
    Rule(
        "num_replicas",
        _fewer(0),
        "keeps each message on fewer servers: losing one can lose acknowledged writes",
    ),
    Rule(
        "persist_mode",
        _after(PERSIST),
        "acknowledges writes before they are on disk: a crash can lose acknowledged writes",
    ),
)

#: Fields whose live value the promoted stream keeps and only answers otherwise with:
#: said, never refused.
WARNED: tuple[Rule, ...] = (
    Rule(
        "retention",
        _before(RETENTION),
        "keeps the messages the declared stream deletes once acknowledged",
    ),
    Rule("storage", _before(STORAGE), "keeps on disk what the declared stream keeps in memory"),
    Rule("allow_direct", _on, "answers direct gets the declared stream does not"),
)


@dataclass(frozen=True)
class Gap:
    """A field whose live value a promotion keeps, unlike the declared one."""

    field: str
    live: str
    declared: str
    effect: str
    refused: bool
    #: An update sets the declared value back (else: no update undoes it, a fresh
    #: stream does)
    by_update: bool
    guards: Guards = Guards.FAILOVER  # its rule's

    def __str__(self) -> str:
        return f"{self.field} {self.live} (declared {self.declared}): it {self.effect}"


def _value(config: Mapping[str, Any], field: str) -> Any:
    """A canonical config's value of ``field`` (``a.b``: field ``b`` of ``a``)."""
    top, _, inner = field.partition(".")
    value = config.get(top)
    if inner:
        return value.get(inner) if isinstance(value, Mapping) else None
    return value


def _set(config: Mapping[str, Any], field: str, value: Any) -> dict[str, Any]:
    top, _, inner = field.partition(".")
    if not inner:
        return {**config, top: value}
    outer = config.get(top)
    return {**config, top: {**(outer if isinstance(outer, Mapping) else {}), inner: value}}


#: A standby config no server sends (a forged reply): nothing says what it would do.
UNREADABLE = Gap(
    "config", "unreadable", "a stream config", "is no config a server sends", True, False
)


def promotion_gaps(
    live: Mapping[str, Any], declared: Mapping[str, Any], server: ServerInfo
) -> list[Gap]:
    """What the standby's stream, ``live`` as read, does unlike the ``declared`` one
    (the spec's config) once promoted as it is: a mirror's as its promotion makes it
    (``model.standby.promoted_config``), a promoted stream's as it is. Both are compared
    in their canonical forms for ``server``, the standby's (defaults filled, and what it
    switches on by itself: ``allow_msg_schedules`` given back turns on
    ``allow_rollup_hdrs``), by :data:`REFUSED` (``refused``), then by :data:`WARNED`
    for the fields not refused; an update can set a gap's field back unless
    ``model.diff.replace_reasons`` says otherwise."""
    try:
        subjects = [str(subject) for subject in declared.get("subjects") or ()]
        made = promoted_config(live, subjects, declared) if live.get("mirror") else live
        theirs = canonical("Stream", made, server)
        ours = canonical("Stream", declared, server)
    except (TypeError, ValueError, AttributeError):
        return [UNREADABLE]
    found: list[Gap] = []
    for rules, refused in ((REFUSED, True), (WARNED, False)):
        for rule in rules:
            now, wanted = _value(theirs, rule.field), _value(ours, rule.field)
            if any(gap.field == rule.field for gap in found) or not rule.differs(now, wanted):
                continue
            top = rule.field.split(".")[0]
            reasons = replace_reasons("Stream", _set(theirs, rule.field, wanted), theirs, server)
            found.append(
                Gap(
                    rule.field,
                    rule.shown(now),
                    rule.shown(wanted),
                    rule.effect,
                    refused,
                    by_update=not any(reason.field == top for reason in reasons),
                    guards=rule.guards,
                )
            )
    return found
