"""What a change would delete, computed from the live state the plan already read.

An update the server accepts can still delete stored messages at once (measured on
2.15.1, see ``shared/JETSTREAM.md``): a lower ``max_msgs``, ``max_bytes``, ``max_age`` or
``max_msgs_per_subject`` (a bucket's ``history`` and ``ttl`` are these), and retention
``limits`` → ``interest``. A migration's target deletes the same (and ``workqueue`` →
``interest`` too), judged by the same rules. :func:`update_losses` finds each such change
and estimates the loss from the stream's state (messages, bytes, subjects, first
message's time, the time the server answered); where the loss cannot be computed, a
tighter limit on a stream that holds messages counts as a loss. :func:`held` says what a
replace or delete destroys.

Pure: the clock is the server's (``StreamState.observed_at``), never this machine's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reconciler.model.normalize import nanoseconds_between
from reconciler.model.state import StreamState
from reconciler.specs.subjects import is_subset
from reconciler.specs.units import format_duration, readable_size


@dataclass(frozen=True, slots=True)
class Loss:
    """Data a step deletes: the field that causes it, a sentence, and a lower bound."""

    field: str  # "" when the whole resource goes (replace, delete)
    summary: str
    messages: int | None = None  # at least this many messages (None: not computable)
    #: ``messages`` is only what is certain (1), not a count: the size of the loss is not
    #: computed (a tighter max_bytes, a max_age that deletes at once)
    floor: bool = False
    #: An interest stream's consumer: the filters whose held messages go, counted from
    #: the stream's per-subject counts when cheap (:func:`interest_counted`)
    subjects: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field or None, "summary": self.summary, "messages": self.messages}


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def allows_less(new: Any, old: Any, *, unlimited: int) -> bool:
    """Whether limit ``new`` allows less than ``old`` (``unlimited`` means no limit)."""
    if not isinstance(new, int) or new == unlimited or new < 0:
        return False
    return not isinstance(old, int) or old == unlimited or old < 0 or new < old


def _age_ns(state: StreamState) -> int | None:
    """How old the stream's first message is, by the server's clock."""
    if not state.first_ts or not state.observed_at:
        return None
    age = nanoseconds_between(state.first_ts, state.observed_at)
    return None if age is None else max(age, 0)


def _max_msgs(new: int, state: StreamState) -> Loss | None:
    if state.messages <= new:
        return None
    lost = state.messages - new
    return Loss(
        "max_msgs",
        f"holds {_count(state.messages, 'message')}; max_msgs {new} deletes at least {lost}",
        lost,
    )


def _max_bytes(new: int, state: StreamState) -> Loss | None:
    if state.bytes <= new:
        return None
    return Loss(
        "max_bytes",
        f"holds {readable_size(state.bytes)} in {_count(state.messages, 'message')}; "
        f"max_bytes {readable_size(new)} deletes the oldest messages over it",
        1,
        floor=True,
    )


def _max_age(new: int, old: int, state: StreamState) -> Loss:
    """A shorter max_age deletes what is older at once, and the rest earlier than before."""
    held_for = "without an age limit" if old <= 0 else f"for {format_duration(old)}"
    age = _age_ns(state)
    if age is not None and age > new:
        return Loss(
            "max_age",
            f"holds {_count(state.messages, 'message')}, the oldest {format_duration(age)} old; "
            f"max_age {format_duration(new)} deletes every message older than that at once",
            1,
            floor=True,
        )
    return Loss(
        "max_age",
        f"holds {_count(state.messages, 'message')} kept {held_for}; max_age "
        f"{format_duration(new)} deletes them after {format_duration(new)} instead",
    )


def _per_subject(new: int, state: StreamState) -> Loss | None:
    if state.messages <= new:
        return None
    subjects = state.num_subjects
    if subjects and state.messages > subjects * new:
        lost = state.messages - subjects * new
        return Loss(
            "max_msgs_per_subject",
            f"holds {_count(state.messages, 'message')} on {_count(subjects, 'subject')}; "
            f"max_msgs_per_subject {new} deletes at least {lost}",
            lost,
        )
    return Loss(
        "max_msgs_per_subject",
        f"holds {_count(state.messages, 'message')}; max_msgs_per_subject {new} deletes the "
        "older messages of every subject holding more than that",
    )


def update_losses(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    state: StreamState | None,
    *,
    consumers: int | None = None,
) -> list[Loss]:
    """What updating (or migrating) a stream from ``live`` to ``desired`` (canonical
    configs) deletes. ``consumers``: how many consumers the stream will have once it has
    the new config (None: not known); none at all makes an interest stream's loss exact."""
    if state is None or state.messages <= 0:
        return []
    losses: list[Loss | None] = []
    limits = (
        ("max_msgs", -1, _max_msgs),
        ("max_bytes", -1, _max_bytes),
        ("max_msgs_per_subject", -1, _per_subject),
    )
    for field, unlimited, rule in limits:
        new, old = desired.get(field), live.get(field)
        if allows_less(new, old, unlimited=unlimited):
            assert isinstance(new, int)
            losses.append(rule(new, state))
    new_age, old_age = desired.get("max_age"), live.get("max_age")
    if allows_less(new_age, old_age, unlimited=0):
        assert isinstance(new_age, int)
        losses.append(_max_age(new_age, int(old_age or 0), state))
    if live.get("retention") != "interest" and desired.get("retention") == "interest":
        losses.append(_interest(state, consumers))
    return [loss for loss in losses if loss is not None]


#: The limits whose loss the messages held prove (what they delete at once), and each
#: one's value for no limit.
PROVEN_LIMITS = {"max_msgs": -1, "max_bytes": -1, "max_msgs_per_subject": -1, "max_age": 0}


def claimed_losses(
    desired: Mapping[str, Any],
    claimed: Mapping[str, Any],
    state: StreamState | None,
    *,
    back: bool = False,
) -> list[Loss]:
    """What going to ``desired`` deletes of what ``state`` holds, when the old config
    ``claimed`` is only someone's word (a migration record anyone who can update a
    stream can edit): the losses judged against ``claimed``, and every loss the held
    messages prove whatever ``claimed`` says, as if the old stream had no limit (a record
    claiming the old stream had ``max_msgs: 1`` or ``max_age: 100ms`` hides no loss:
    measured, a rollback to it cut 300 messages to 1, or to 0). ``back``: ``desired`` is
    ``claimed`` itself (a rollback), so its retention proves nothing either: ``interest``
    is judged as from ``limits`` (measured: a record edited to ``interest`` cut 300
    messages to 260, those its consumer had acknowledged)."""
    if back and claimed.get("retention") == "interest":
        claimed = {**claimed, "retention": "limits"}
    found = update_losses(desired, claimed, state)
    fields = {loss.field for loss in found}
    proven = [
        loss
        for loss in update_losses(desired, {**claimed, **PROVEN_LIMITS}, state)
        if loss.field in PROVEN_LIMITS and loss.messages is not None and loss.field not in fields
    ]
    return [*found, *proven]


def _interest(state: StreamState, consumers: int | None) -> Loss:
    """Retention ``interest`` (from ``limits``, or from ``workqueue`` by a migration)
    keeps only what a consumer is still to acknowledge: with no consumer, nothing."""
    held_now = _count(state.messages, "message")
    if consumers == 0:
        return Loss(
            "retention",
            f"holds {held_now}; retention interest with no consumer deletes all {state.messages}",
            state.messages,
        )
    return Loss(
        "retention",
        f"holds {held_now}; retention interest deletes those no consumer is interested in "
        "(all of them when it has no consumers)",
    )


def held(state: StreamState | None) -> Loss:
    """What deleting a whole stream or bucket destroys."""
    if state is None:
        return Loss("", "its messages are deleted")
    if state.messages <= 0:
        return Loss("", "it holds no messages", 0)
    return Loss(
        "",
        f"holds {_count(state.messages, 'message')}, {readable_size(state.bytes)}; all are deleted",
        state.messages,
    )


#: What deleting or re-creating a consumer destroys.
CONSUMER_STATE = Loss("", "its delivery and acknowledgement state is lost")


def consumer_gone(
    stream: Mapping[str, Any] | None,
    state: StreamState | None,
    consumer: Mapping[str, Any] | None = None,
) -> Loss:
    """What deleting a consumer destroys: its delivery state, and when it is the last
    consumer of an interest stream every message too (the server keeps none that no
    consumer is interested in: 50 messages to 0, measured on 2.15.1). With other
    consumers left, the messages only it still needed go (50 to 20 when the other one
    took another subject, measured on 2.15.1 and 2.10.26): not counted (the others may
    have acknowledged any of them; ``consumer``, its config: the messages on subjects no
    other consumer takes are counted, see :func:`interest_counted`). Nothing more on a
    workqueue stream."""
    if stream is None or stream.get("retention") != "interest" or state is None:
        return CONSUMER_STATE
    if state.consumer_count > 1:
        if state.messages <= 0:
            return CONSUMER_STATE
        summary = f"{CONSUMER_STATE.summary}; {_ONLY_ITS_OWN.format(held=_held(state))}"
        return Loss("", summary, subjects=() if consumer is None else consumer_filters(consumer))
    return Loss(
        "",
        f"{CONSUMER_STATE.summary}; the last consumer of an interest stream: all "
        f"{_count(state.messages, 'message')} are deleted with it",
        state.messages,
    )


#: What a consumer of an interest stream takes along when it stops needing messages.
_ONLY_ITS_OWN = (
    "the stream (retention interest) holds {held} and deletes those only this consumer "
    "still needed (not counted)"
)


def _held(state: StreamState) -> str:
    return _count(state.messages, "message")


def _interest_held(stream: Mapping[str, Any] | None, state: StreamState | None) -> bool:
    """Whether ``stream`` keeps a message only while a consumer needs it, and holds some."""
    if stream is None or stream.get("retention") != "interest":
        return False
    return state is not None and state.messages > 0


def consumer_filters(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The subjects a consumer takes from its stream (``>``: every one, no filter)."""
    if config is None:
        return (">",)
    many = [str(subject) for subject in config.get("filter_subjects") or () if subject]
    one = config.get("filter_subject")
    return (*many, *((str(one),) if one else ())) or (">",)


def filter_narrowed(
    stream: Mapping[str, Any] | None,
    state: StreamState | None,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> Loss | None:
    """What updating a consumer from ``before`` to ``after`` deletes: on an interest
    stream, a filter that no longer takes a subject it took makes the server delete the
    held messages of that subject no other consumer still needs (measured on 2.15.1 and
    2.10.26: 30 ``a`` and 20 ``b`` messages, the filter ``>`` narrowed to ``a``: 30 left,
    ``filter_subjects`` alike). Not counted: another consumer taking the subject may have
    acknowledged any of them."""
    if not _interest_held(stream, state):
        return None
    assert state is not None
    dropped = dropped_filters(before, after)
    if not dropped:
        return None
    field = "filter_subjects" if after.get("filter_subjects") else "filter_subject"
    return Loss(
        field,
        f"no longer takes {', '.join(dropped)}: {_ONLY_ITS_OWN.format(held=_held(state))}",
        subjects=dropped,
    )


def dropped_filters(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The filters of consumer config ``before`` that no filter of ``after`` contains."""
    new = consumer_filters(after)
    return tuple(old for old in consumer_filters(before) if not any(is_subset(old, n) for n in new))


def interest_counted(
    loss: Loss,
    counts: Mapping[str, int],
    kept: Sequence[str],
    others: Sequence[str],
) -> Loss | None:
    """``loss`` (of :func:`filter_narrowed` or :func:`consumer_gone`) counted from
    ``counts``, the messages the stream holds per subject of ``loss.subjects``:
    ``kept``, the consumer's filters after the step (none for a delete); ``others``,
    every other consumer's filters (live or planned). A subject no filter takes any more
    loses all its messages (measured: 20 of 20); one another consumer takes loses those
    it acknowledged, not counted (``floor``). None: nothing held there is lost."""
    sure = possible = 0
    for subject, messages in counts.items():
        if any(is_subset(subject, taken) for taken in kept):
            continue
        if any(is_subset(subject, taken) for taken in others):
            possible += messages
        else:
            sure += messages
    if sure == 0 and possible == 0:
        return None
    what = _count(sure, "message")
    summary = f"deletes the {what} held on subjects no other consumer takes"
    if possible:
        summary += (
            f", and of the {_count(possible, 'message')} on subjects other consumers take "
            "those they acknowledged (not counted)"
        )
    head = loss.summary.split("the stream (retention interest)", 1)[0]
    return replace(
        loss,
        summary=f"{head}the stream (retention interest) {summary}",
        messages=sure,
        floor=possible > 0,
    )
