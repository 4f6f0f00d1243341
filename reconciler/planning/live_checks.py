"""What a plan can only find against the whole server: every stream on it, managed or not.

Validation compares the specs with each other; these checks compare the streams a plan
changes with every other stream of the server, before anything is applied:

- **subjects**: a subject may be stored by one stream only. The server refuses an
  overlap (err 10065) half-way through an apply, or half-way through a migration, where
  publishes then find no stream. Every stream is judged with every subject it holds
  while the plan is applied: its live subjects (another owner's stream, nobody's, one
  declared ``external``, and also one this plan changes, whose step runs in no set order
  with the others, or deletes, which happens after every other step), and the subjects
  the plan gives it. A migration's temporary stream holds its stream's subjects and is
  left out.
- **migrations of a stream others copy**: a migration deletes the stream and creates
  it again, and a stream sourcing it copies every message again (measured: 100 -> 200);
  such a migration is refused, naming the streams.
- **consumer limits of a stream no spec manages** (declared ``external``): a consumer the
  plan creates or updates above the live stream's ``consumer_limits`` is refused by the
  server (err 10121 / 10153); the rule is :func:`specs.checks.over_consumer_limits`, the
  same one validation applies to declared streams.
- **consumer limits lowered below live consumers**: a stream update whose
  ``consumer_limits`` is below what a live consumer of the stream holds is refused
  (err 10069), before the plan's consumer steps run (same rule,
  :func:`specs.checks.limit_excess`); before 2.14, a durable consumer without
  ``inactive_threshold`` also refuses a new ``inactive_threshold`` limit.
- **a mirror or source of a stream no spec manages whose ``consumer_limits`` set
  ``max_ack_pending``**: the server refuses the consumer the copy reads with (err 10082);
  the rule is :func:`specs.checks.unreadable_origin`, validation's for declared streams.

Pure: specs, the plan's steps and the live state in, problems out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from reconciler.errors import Problem
from reconciler.model.migration import copied_by, is_temp
from reconciler.model.normalize import owner_of
from reconciler.model.state import LiveState
from reconciler.planning.steps import Delete, Migrate, Step, Update
from reconciler.specs.checks import (
    SubjectTree,
    copy_path,
    limit_excess,
    limit_text,
    origins_of,
    over_consumer_limits,
    unreadable_origin,
)
from reconciler.specs.spec import Spec

__all__ = ["live_problems"]

Config = Mapping[str, Any]
#: (stream, subject, "live" or "planned")
Listener = tuple[str, str, str]


def live_problems(specs: Sequence[Spec], steps: Sequence[Step], live: LiveState) -> list[Problem]:
    """Every problem of the plan's ``steps`` against the other streams of ``live``."""
    if not live.streams:
        return []  # an empty server: nothing to overlap, nothing to copy a stream
    planned = _planned(steps)
    return [
        *_subject_problems(specs, planned, live),
        *_copied_problems(steps, planned, live),
        *_consumer_limit_problems(specs, steps, live),
        *_lowered_limit_problems(specs, steps, live),
        *_unreadable_origin_problems(specs, steps, live),
    ]


def _planned(steps: Iterable[Step]) -> dict[str, Config | None]:
    """The config each stream has once the plan is applied (None: deleted), for the
    streams the plan touches."""
    out: dict[str, Config | None] = {}
    for step in steps:
        if not step.ref.is_child:
            out[step.stream_name] = None if isinstance(step, Delete) else step.config
    return out


def _subjects(config: Config | None) -> list[str]:
    return [str(s) for s in (config or {}).get("subjects") or ()]


def _subject_problems(
    specs: Sequence[Spec], planned: Mapping[str, Config | None], live: LiveState
) -> list[Problem]:
    changed = sorted(
        name
        for name, config in planned.items()
        if config is not None and _subjects(config) != _subjects(live.streams.get(name))
    )
    if not changed:
        return []  # no stream takes new subjects: what the server holds does not overlap
    declared = {spec.stream_name: spec for spec in specs if not spec.ref.is_child}
    tree: SubjectTree[Listener] = SubjectTree()
    empty = True
    for listener in _listeners(planned, live, declared):
        tree.add(listener[1], listener)
        empty = False
    if empty:
        return []  # a first apply to an empty server: only specs, which validation compared
    reported: set[frozenset[str]] = set()
    problems = []
    for name in changed:
        for index, subject in enumerate(_subjects(planned[name])):
            found = tree.overlapping(subject)
            if len(found) > 1:
                found.sort(key=lambda hit: hit[2] != "planned")  # a lasting overlap first
            for other, other_subject, when in found:
                pair = frozenset((name, other))
                if other == name or pair in reported:
                    continue
                reported.add(pair)
                message = (
                    f"subject {subject!r} overlaps {other_subject!r} of stream {other!r} "
                    f"({_whose(other, when, planned, live)}); a subject is stored by one "
                    "stream only, and the server would refuse it half-way through the "
                    "apply: nothing was changed"
                )
                problems.append(_at(declared.get(name), name, index, message))
    return problems


def _listeners(
    planned: Mapping[str, Config | None], live: LiveState, declared: Mapping[str, Spec]
) -> Iterator[Listener]:
    """Every subject a stream holds while the plan is applied: the live ones (a stream
    this plan deletes holds them until the deletes, which come after every other step;
    a stream it changes, until its step, in no set order with the others) and those the
    plan gives a stream no spec declares (an interrupted migration's target). Declared
    subjects against each other are validation's (``specs.checks.overlapping_subjects``).
    A migration's temporary stream is left out: the subjects it holds are its stream's."""
    for name, config in live.streams.items():
        if not is_temp(config):
            yield from ((name, subject, "live") for subject in _subjects(config))
    for name, maybe in planned.items():
        if name not in declared:
            yield from ((name, subject, "planned") for subject in _subjects(maybe))


def _whose(name: str, when: str, planned: Mapping[str, Config | None], live: LiveState) -> str:
    if when == "planned":
        return "as this plan leaves it"
    if planned.get(name, {}) is None:
        return (
            "which holds it until this plan deletes it, after every other step: delete it "
            "in an apply of its own first"
        )
    if name in planned:
        return (
            "which holds it until its own step of this plan, in no set order with this "
            "one: change it in an apply of its own first"
        )
    owner = owner_of(live.streams[name])
    return "on the server, unmanaged" if owner is None else f"on the server, owner {owner!r}"


def _at(spec: Spec | None, name: str, index: int, message: str) -> Problem:
    """The problem at the spec's subject (its name when it declares no subjects), or
    naming stream ``name`` when no spec declares it (a backup's, a migration's target)."""
    if spec is None:
        return Problem(None, "subjects", f"stream {name!r}: {message}")
    written = spec.kind == "Stream" and index < len(spec.config.get("subjects") or ())
    path = f"subjects.{index}" if written else "name"
    return Problem(spec.where(path), path, message)


def _copied_problems(
    steps: Sequence[Step], planned: Mapping[str, Config | None], live: LiveState
) -> list[Problem]:
    problems = []
    for step in steps:
        if not isinstance(step, Migrate) or step.phase is not None:
            continue
        stream = step.stream_name
        others = [*live.streams.items(), *((n, c) for n, c in planned.items() if c is not None)]
        copies = copied_by(stream, others)
        if not copies:
            continue
        named = ", ".join(f"{name!r} ({how})" for name, how in copies)
        which = "stream" if len(copies) == 1 else "streams"
        copy = "copies" if len(copies) == 1 else "copy"
        message = (
            f"cannot migrate {step.label}: {which} {named} {copy} its messages, and a "
            "migration deletes the stream and creates it again: a source would copy every "
            f"message again, a mirror lose its place. Take {stream!r} out of their sources "
            "or mirror first, migrate, then add it back: nothing was changed"
        )
        problems.append(Problem(step.source, "", message))
    return problems


def _consumer_limit_problems(
    specs: Sequence[Spec], steps: Sequence[Step], live: LiveState
) -> list[Problem]:
    """Consumers the plan writes on a live stream no spec manages, against the live
    stream's ``consumer_limits`` (a managed stream's are validation's)."""
    managed = {s.stream_name for s in specs if not s.ref.is_child and not s.external}
    written = {step.ref for step in steps if step.ref.is_child and not isinstance(step, Delete)}
    problems = []
    for spec in specs:
        if spec.kind != "Consumer" or spec.ref not in written:
            continue
        stream = live.streams.get(spec.stream_name)
        if stream is None or spec.stream_name in managed:
            continue
        for path, message in over_consumer_limits(spec.config, stream, spec.stream_name):
            problems.append(Problem(spec.where(path), path, f"{message}: nothing was changed"))
    return problems


def _unreadable_origin_problems(
    specs: Sequence[Spec], steps: Sequence[Step], live: LiveState
) -> list[Problem]:
    """Mirrors and sources the plan writes of a live stream no spec manages whose
    ``consumer_limits`` set ``max_ack_pending``: the copy could never read it (the rule is
    :func:`specs.checks.unreadable_origin`, which validation applies to declared ones)."""
    managed = {s.stream_name for s in specs if not s.ref.is_child and not s.external}
    declared = {s.stream_name: s for s in specs if not s.ref.is_child}
    problems = []
    for step in steps:
        if step.ref.is_child or isinstance(step, Delete):
            continue
        for origin in origins_of(step.config):
            config = live.streams.get(origin)
            if config is None or origin in managed:
                continue
            message = unreadable_origin(origin, config, step.stream_name)
            if message:
                path = copy_path(step.config)
                spec = declared.get(step.stream_name)
                where = spec.where(path) if spec else step.source
                problems.append(Problem(where, path, f"{message}: nothing was changed"))
    return problems


def _lowered_limit_problems(
    specs: Sequence[Spec], steps: Sequence[Step], live: LiveState
) -> list[Problem]:
    """Stream updates whose ``consumer_limits`` a live consumer of the stream is above."""
    declared = {spec.stream_name: spec for spec in specs if not spec.ref.is_child}
    problems = []
    for step in steps:
        if not isinstance(step, Update) or step.ref.is_child:
            continue
        stream = step.stream_name
        if step.config.get("consumer_limits") == step.live.get("consumer_limits"):
            continue
        for (owner, name), consumer in sorted(live.consumers.items()):
            if owner != stream:
                continue
            for path, held, limit in _held_above(consumer, step.config, live):
                show = limit_text(path)
                holds = f"{path} {show(held)}" if held else f"no {path}"
                message = (
                    f"consumer {name!r} of stream {stream} holds {holds}, above "
                    f"the new consumer_limits.{path} {show(limit)}: the server refuses the "
                    f"stream's update (err 10069); lower the consumer's {path} in an apply "
                    "of its own first: nothing was changed"
                )
                spec = declared.get(stream)
                where = spec.where(f"consumer_limits.{path}") if spec else step.source
                problems.append(Problem(where, f"consumer_limits.{path}", message))
    return problems


def _held_above(consumer: Config, stream: Config, live: LiveState) -> list[tuple[str, int, int]]:
    """:func:`limit_excess`, and before 2.14 a durable consumer without an inactivity
    threshold under a new one (measured: 2.10-2.12 refuse it, 2.14 and 2.15 accept)."""
    found = limit_excess(consumer, stream)
    limit = int((stream.get("consumer_limits") or {}).get("inactive_threshold") or 0)
    unset = not consumer.get("inactive_threshold") and consumer.get("durable_name")
    if limit > 0 and unset and live.server.version_tuple < (2, 14, 0):
        found.append(("inactive_threshold", 0, limit))
    return found
