"""Plan-time refusals of a migration that need more than the live state a plan reads.

The live state keeps only each consumer's config; whether a consumer is working right
now (messages delivered and not yet acknowledged, pull requests waiting, a push
subscriber bound) is read here, for the streams a plan starts migrating, and only
those whose retention deletes what is acknowledged (``workqueue``, ``interest``). A
consumer working during such a migration deletes messages the copy already holds, and
the copy brings them back: measured, 28-53 jobs of a live worker were done twice. The
rule itself is :func:`reconciler.model.migration.working`.

An interrupted migration going on (resumed, or continued to another config) is refused
when its new stream would refuse part of what the migration holds (``discard: new``):
the copy back would stall, or the handover stop again. A per-subject limit needs the
copy's fullest subject, read here (paged ``STREAM.INFO``, only when the copy holds more
messages than the limit). The rule is :func:`reconciler.model.migration.copy_back_stall`.
"""

from __future__ import annotations

from reconciler.errors import Problem
from reconciler.jetstream import JetStreamClient
from reconciler.model.migration import (
    ACKS_DELETE,
    Record,
    copy_back_stall,
    per_subject_limit,
    temp_name,
    working,
)
from reconciler.model.state import LiveState
from reconciler.planning.groups import choose_with
from reconciler.planning.steps import Migrate, Plan

__all__ = ["stall_problems", "working_problems"]


async def working_problems(client: JetStreamClient, the_plan: Plan) -> list[Problem]:
    """Why (naming them) the plan may not start migrating a ``workqueue`` or ``interest``
    stream: its consumers work (the plan's ``Check``, raised by the verdict)."""
    problems = []
    for step in the_plan.steps:
        retention = str(step.live.get("retention")) if isinstance(step, Migrate) else ""
        if not isinstance(step, Migrate) or step.phase is not None or retention not in ACKS_DELETE:
            continue
        infos = await client.list_consumers(step.stream_name)
        busy = [(str(info.get("name")), why) for info in infos if (why := working(info))]
        if busy:
            problems.append(Problem(step.source, "retention", _refusal(step, retention, busy)))
    return problems


def _refusal(step: Migrate, retention: str, busy: list[tuple[str, str]]) -> str:
    named = ", ".join(f"{name!r} ({why})" for name, why in sorted(busy))
    return (
        f"cannot migrate {step.label} while its consumers work: {named}. On a {retention} "
        "stream an acknowledgement deletes a message the migration has already copied, and "
        "the copy would bring it back. Stop them (after they acknowledge what they hold) "
        "and run apply again: every message not acknowledged is kept. Nothing was changed"
    )


async def stall_problems(client: JetStreamClient, the_plan: Plan, live: LiveState) -> list[Problem]:
    """Why (naming the limit, and the subject) an interrupted migration may not go on to
    its step's config: the new stream would refuse part of what the migration holds, so
    the copy back would stall for good, or the handover stop again. Such a limit deletes
    nothing (the plan counts no loss for it: ``model.migration.refused_fields``)."""
    problems = []
    for step in the_plan.steps:
        if not isinstance(step, Migrate) or step.phase is None or step.blocked:
            continue
        temp = temp_name(step.stream_name)
        record = Record.of(live.streams.get(temp) or {})
        if record is None:
            continue
        states = [live.stream_state.get(name) for name in (step.stream_name, temp)]
        state = max((s for s in states if s is not None), key=lambda s: s.messages, default=None)
        per = per_subject_limit(step.config)
        fullest = None
        if state is not None and per is not None and state.messages > per:
            fullest = await client.fullest_subject(temp, state.messages)
        storage = str((live.streams.get(temp) or {}).get("storage") or "file")
        why = copy_back_stall(step.config, record, storage, state, fullest)
        if why is not None:
            problems.append(Problem(step.source, "", _stalled(step, record, why)))
    return problems


def _stalled(step: Migrate, record: Record, why: str) -> str:
    """The refusal of an interrupted migration that would stall, with the ways out."""
    if dict(step.config) == dict(record.target):
        way = "resume"
    elif dict(step.config) == dict(record.origin):
        way = "roll back"
    else:
        way = "continue"
    ways = [f"declare limits it fits and choose {choose_with()} continue"]
    if way != "roll back":
        ways.insert(0, f"{choose_with()} rollback ends it, every message kept")
    return (
        f"cannot {way} the migration of {step.label} (phase {record.phase}): {why}. Nothing "
        f"was changed; {', or '.join(ways)}"
    )
